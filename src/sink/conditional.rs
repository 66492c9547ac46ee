//! The one rule for sluice's conditional writes (put-if-absent): a write
//! whose answer may have been lost is settled by reading the object back.
//!
//! object_store sends a request again when its answer is lost (a timeout, a
//! connection cut after the store acted, a load balancer dropping the
//! response), so a put-if-absent can meet its own first try and get
//! "already exists" (HTTP 412). Only the object's content tells a write of
//! this very call from another writer's: the same bytes are ours (every
//! body sluice writes conditionally is unique to its writer: a probe's
//! random name in its body, a manifest's writer id and cursor, a Delta
//! commit's `txn` and time), other bytes are another writer's.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// How a put-if-absent ended.
#[derive(Debug)]
pub enum Created {
    /// The object holds this write: it was written now, or an earlier try
    /// of the same request landed and its answer was lost.
    Written,
    /// The object holds other bytes: another writer's (or an earlier write
    /// of this name with other content).
    Taken(Bytes),
    /// The write got no answer and the object cannot be read back (or
    /// exists for the store but not for a read): it may hold this write.
    /// Nothing the write would name may be deleted.
    Unknown(object_store::Error),
}

/// Writes `body` at `path` only if nothing is there, and settles an answer
/// that may have been lost ("already exists", a timeout, a cut connection)
/// by reading the object back. An error is a write known not to have
/// happened.
pub async fn put_if_absent(
    store: &dyn ObjectStore,
    path: &Path,
    body: Bytes,
) -> Result<Created, object_store::Error> {
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let failed = match store
        .put_opts(path, PutPayload::from(body.clone()), opts)
        .await
    {
        Ok(_) => return Ok(Created::Written),
        // A store without conditional writes: nothing to settle.
        Err(
            e @ (object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }),
        ) => return Err(e),
        // Any other failure may have come after the store acted (a garbled
        // answer is no "transient" error for object_store, and is not resent).
        Err(e) => e,
    };
    let exists = matches!(failed, object_store::Error::AlreadyExists { .. });
    let read_back = match store.get(path).await {
        Ok(got) => got.bytes().await.map(Some),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    match read_back {
        Ok(Some(found)) if found == body => {
            if !exists {
                tracing::info!(%path, error = %failed, "a put-if-absent got no answer, but the object holds it: written");
            }
            Ok(Created::Written)
        }
        Ok(Some(found)) => Ok(Created::Taken(found)),
        // Not there: the put did not happen.
        Ok(None) if !exists => Err(failed),
        Ok(None) => Ok(Created::Unknown(failed)),
        Err(read) => {
            tracing::warn!(%path, error = %failed, read_back = %read, "a put-if-absent got no answer and the object cannot be read back: it may have landed");
            Ok(Created::Unknown(failed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_resent_write_that_landed_is_ours_and_other_bytes_are_taken() {
        let store = object_store::memory::InMemory::new();
        let path = Path::from("_sluice/x.json");
        let ours = Bytes::from_static(b"ours");
        assert!(matches!(
            put_if_absent(&store, &path, ours.clone()).await.unwrap(),
            Created::Written
        ));
        // The same request again (a resend after a lost answer): written.
        assert!(matches!(
            put_if_absent(&store, &path, ours).await.unwrap(),
            Created::Written
        ));
        match put_if_absent(&store, &path, Bytes::from_static(b"theirs"))
            .await
            .unwrap()
        {
            Created::Taken(found) => assert_eq!(found.as_ref(), b"ours"),
            other => panic!("{other:?}"),
        }
    }
}
