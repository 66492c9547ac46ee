//! Finding the newest manifest without listing `_sluice/manifests/`
//! (DESIGN.md "A lake that lasts"). A lake that checkpoints every 10 s holds
//! three million manifests after a year: a listing of them is about 3,000
//! LIST requests on S3, and seconds of `stat` calls on a local disk, before
//! every start, `status` and `check`.
//!
//! Manifests are committed with consecutive seqs (a writer commits the
//! newest + 1, put-if-absent), so from any manifest of the run that ends at
//! the newest, every seq up to the newest exists: "manifest `s` exists" is
//! monotone there, and [`gallop`] finds the newest with about
//! 2·log2(distance) HEAD requests.
//!
//! The start of the gallop is the hint [`HINT_PATH`], which the running
//! sidecar writes after its commits (best effort: it is never part of a
//! commit) and which is trusted only once the manifest it names is found.
//! A stale hint costs a longer gallop, never a wrong answer, because a hint
//! only ever names a committed manifest and retention (which deletes the
//! oldest manifests) never deletes the one the hint names or any after it.
//!
//! Without a usable hint (a lake of an earlier release, a hint naming a
//! manifest that is gone): the gallop starts at manifest 1, or at the first
//! manifest a listing yields (a listing is lazy: one LIST request), and a
//! listing after the manifest it stops at (one request on S3) confirms that
//! nothing is above it: below the hint, deletions cut short by a crash may
//! leave holes that stop a gallop early.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use super::{manifest_path, Lake, MANIFEST_DIR};
use crate::error::Result;

/// Names a committed manifest at or below the newest; outside
/// `_sluice/manifests/`, whose names stay manifests only.
pub const HINT_PATH: &str = "_sluice/newest_manifest.json";

#[derive(Debug, Serialize, Deserialize)]
struct Hint {
    seq: u64,
}

/// How the newest manifest was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// From the hint, whose manifest is there.
    Hint,
    /// Without a usable hint: a probe from the oldest manifest, confirmed by
    /// a listing after the one found.
    Probe,
}

/// The newest manifest's seq, and what finding it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newest {
    /// `None`: the lake has no manifest.
    pub seq: Option<u64>,
    pub found_by: FoundBy,
    /// The hint named exactly the newest manifest.
    pub hint_current: bool,
    /// Object store requests made (a listing counts one per call; on S3 a
    /// call is one request per 1,000 names).
    pub requests: u32,
}

/// The newest seq at or after `start`, given that `start` exists and every
/// seq from `start` to the newest does too: probes `start + 1, + 3, + 7, …`
/// until one is missing, then halves the gap between the last seq found and
/// the first one missing.
pub async fn gallop<F, Fut>(start: u64, mut exists: F) -> Result<u64>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let mut found = start;
    let mut step = 1u64;
    let mut missing = loop {
        let probe = found.saturating_add(step);
        if probe == found || !exists(probe).await? {
            break probe;
        }
        found = probe;
        step = step.saturating_mul(2);
    };
    while missing - found > 1 {
        let mid = found + (missing - found) / 2;
        if exists(mid).await? {
            found = mid;
        } else {
            missing = mid;
        }
    }
    Ok(found)
}

/// The seq of a manifest's object name.
fn seq_of(path: &Path) -> Option<u64> {
    path.filename()?.strip_suffix(".json")?.parse().ok()
}

impl Lake {
    /// The seq of the newest manifest, in O(log n) requests (O(1) with a
    /// current hint); see the module documentation.
    pub async fn newest_seq(&self) -> Result<Newest> {
        let requests = AtomicU32::new(0);
        let count = || requests.fetch_add(1, Ordering::Relaxed);
        let exists = |seq: u64| {
            count();
            self.manifest_exists(seq)
        };
        count();
        let hinted = self.read_hint().await?;
        if let Some(h) = hinted {
            if exists(h).await? {
                let seq = gallop(h, exists).await?;
                return Ok(Newest {
                    seq: Some(seq),
                    found_by: FoundBy::Hint,
                    hint_current: seq == h,
                    requests: requests.into_inner(),
                });
            }
            tracing::warn!(hint = HINT_PATH, seq = h, "the hint names a manifest that is not in the lake: looking for the newest without it");
        }
        let prefix = Path::from(MANIFEST_DIR);
        let start = if exists(1).await? {
            Some(1)
        } else {
            count();
            let mut listed = self
                .store
                .list(Some(&prefix))
                .try_filter_map(|meta| async move { Ok(seq_of(&meta.location)) })
                .boxed();
            listed.try_next().await?
        };
        let Some(start) = start else {
            return Ok(Newest {
                seq: None,
                found_by: FoundBy::Probe,
                hint_current: false,
                requests: requests.into_inner(),
            });
        };
        let probed = gallop(start, exists).await?;
        count();
        let above = self
            .store
            .list_with_offset(Some(&prefix), &manifest_path(probed))
            .try_fold(probed, |max, meta| async move {
                Ok(seq_of(&meta.location).map_or(max, |s| s.max(max)))
            })
            .await?;
        if above != probed {
            tracing::warn!(
                probed,
                newest = above,
                "manifests are missing below the newest: found it by a listing"
            );
        }
        Ok(Newest {
            seq: Some(above),
            found_by: FoundBy::Probe,
            hint_current: false,
            requests: requests.into_inner(),
        })
    }

    /// The seq the hint names; `None` without a hint or with one that is
    /// not readable (it is only a hint).
    pub(crate) async fn read_hint(&self) -> Result<Option<u64>> {
        let path = Path::from(HINT_PATH);
        let bytes = match self.store.get(&path).await {
            Ok(found) => found.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice::<Hint>(&bytes) {
            Ok(h) => Ok(Some(h.seq)),
            Err(e) => {
                tracing::warn!(hint = HINT_PATH, error = %e, "the hint is not readable: looking for the newest manifest without it");
                Ok(None)
            }
        }
    }

    /// Points the hint at manifest `seq`, which is committed. Best effort:
    /// a hint that is not written only makes the next look-up longer.
    pub async fn write_hint(&self, seq: u64) {
        let body = match serde_json::to_vec(&Hint { seq }) {
            Ok(b) => Bytes::from(b),
            Err(_) => return,
        };
        let path = Path::from(HINT_PATH);
        if let Err(e) = self.store.put(&path, PutPayload::from(body)).await {
            tracing::warn!(hint = %path, seq, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not write the hint to the newest manifest; the next start finds it by a longer probe");
        }
    }
}

#[cfg(test)]
mod tests;
