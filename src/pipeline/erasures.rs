//! `sluice forget` runs noted in the manifests (DESIGN.md "Column policies
//! and erasure": the manifest and `status` record that an erasure happened).
//!
//! `forget` runs beside the sidecar and cannot write a manifest, so it
//! leaves a record, `_sluice/erasures/<id>.json`. The sidecar lists the
//! records with the snapshot requests (every `[flush] interval` and at
//! start); a record not yet noted goes into the next manifest's `erasures`
//! (its table, key count and keys as HMACs, never values), and once that
//! manifest has committed the record gets `noted_in` (the manifest's seq).
//! A crash between the two notes it again in a later manifest: a record is
//! noted at least once.

use serde_json::{json, Value};
use tracing::warn;

use super::Pipeline;
use crate::commit::Manifest;
use crate::forget;

impl Pipeline<'_> {
    /// Picks up the records no manifest has noted.
    pub(super) async fn note_erasures(&mut self) {
        // Like the requests, a store that fails to list is asked again at
        // the next interval.
        let records = match forget::records(self.lake.store.as_ref()).await {
            Ok(r) => r,
            Err(e) => {
                warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not list erasure records; trying again in [flush] interval");
                return;
            }
        };
        for r in records {
            let Some(id) = r["id"].as_str() else { continue };
            if !r["noted_in"].is_null() {
                continue;
            }
            self.requests.erasures.insert(
                id.to_string(),
                json!({
                    "id": id,
                    "table": r["table"],
                    "keys": r["keys"],
                    "keys_found": r["keys_found"],
                    "key_hmacs": r["key_hmacs"],
                    "before_seq": r["before_seq"],
                    "finished_at": r["finished_at"],
                }),
            );
        }
    }

    /// After `manifest` committed: the records it noted say so.
    pub(super) async fn erasures_committed(&mut self, manifest: &Manifest) {
        for e in &manifest.erasures {
            let Some(id) = e["id"].as_str() else { continue };
            self.requests.erasures.remove(id);
            if let Err(err) = mark_noted(self.lake.store.as_ref(), id, manifest.seq).await {
                warn!(erasure = %id, kind = %crate::error::HasKind::error_kind(&err), error = %err, "could not mark an erasure record as noted; a later manifest notes it again");
            }
        }
    }
}

async fn mark_noted(
    store: &dyn object_store::ObjectStore,
    id: &str,
    seq: u64,
) -> crate::error::Result<()> {
    use object_store::{ObjectStoreExt, PutPayload};
    let path = forget::record_path(id);
    let mut record: Value = serde_json::from_slice(&store.get(&path).await?.bytes().await?)
        .map_err(|e| crate::error::Error::Lake(format!("{path}: {e}")))?;
    record["noted_in"] = json!(seq);
    store
        .put(
            &path,
            PutPayload::from(serde_json::to_vec_pretty(&record).unwrap_or_default()),
        )
        .await?;
    Ok(())
}
