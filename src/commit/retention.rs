//! Manifest retention (DESIGN.md "A lake that lasts"): manifests older than
//! `[retention] manifests` are deleted, oldest first, except those still
//! needed. What reads a manifest other than the newest:
//!
//! - start-up, `status`, `check` and the snapshot-request poll read the
//!   newest only: a running snapshot's progress and the prepared XA
//!   transactions (`xa_prepared`, with their held files) are carried in
//!   every manifest, so the newest is all they need, and it always stays;
//! - the Delta repair at start, and the lag it reports, read the manifests
//!   after each lagging changelog log's last `txn` version (a table with
//!   data files and no log yet: all of them);
//! - the fold of the current tables reads the manifests after the last
//!   complete fold (`_current/_folded.json`), and compaction reads that
//!   fold's own manifest;
//! - the O(log n) look-up of the newest ([`super::newest`]) gallops up from
//!   the manifest the hint names, so neither it nor any after it is deleted.
//!
//! The oldest seq kept is the least of these ([`keep_from`]); of the
//! manifests below it, those older than the retention go, in seq order, at
//! most [`MAX_PER_ROUND`] a round.
//!
//! The floor: before deleting, a round writes [`FLOOR_PATH`] with the seq
//! below which every manifest is deleted or about to be. Readers that walk
//! seqs (the repair, the lag, the fold) start at the floor, so a deleted
//! manifest costs them no GET. A crash mid-round leaves the floor ahead of
//! some manifests still there: readers skip those (nothing needs them), and
//! the next round, which starts from the oldest manifest a listing yields
//! (one LIST request), deletes them. Nothing a reader needs is ever below
//! the floor, because the floor is never above [`keep_from`].
//!
//! The schema history's objects are trusted when the manifest of their
//! checkpoint names their writer; below the floor, where that manifest is
//! gone, they are trusted as they are, so a round first deletes the objects
//! of its checkpoints that another writer than the manifest's wrote.
//!
//! Not covered yet: the fold of a table that has no current table and
//! gains a key later, and a fold after a rename from a table without a
//! current table, read that table's manifests from its first; once those
//! are deleted they fold only the rest (see DESIGN.md, issue 24).

use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{manifest_path, Lake, MANIFEST_DIR};
use crate::error::{Error, Result};
pub use crate::lake::floor::{floor_seq, FLOOR_PATH};
use crate::lake::floor::{read_floor, Floor};

/// The most manifests a round deletes (a lake started with retention on
/// for the first time catches up over several rounds).
pub const MAX_PER_ROUND: usize = 1_000;

/// What still needs manifests, as of the newest manifest `newest`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub newest: u64,
    /// The seq the hint names.
    pub hint: Option<u64>,
    /// With current tables on: the last complete fold (0: none yet, so the
    /// next fold reads every manifest).
    pub fold_mark: Option<u64>,
    /// The first manifest a lagging Delta log still needs.
    pub delta_from: Option<u64>,
}

/// The oldest manifest seq that must stay: nothing at or above it is
/// deleted. At least 1 and at most `newest`.
pub fn keep_from(n: &Needs) -> u64 {
    let mut keep = n.newest;
    if let Some(h) = n.hint {
        keep = keep.min(h);
    }
    if let Some(m) = n.fold_mark {
        // The fold reads after the mark; compaction reads the mark itself.
        keep = keep.min(m);
    }
    if let Some(d) = n.delta_from {
        keep = keep.min(d);
    }
    keep.max(1)
}

/// How many of `manifests` (seq and commit time in ms, in seq order) are
/// expired at `cutoff_ms`: the leading run committed before it. A manifest
/// committed later stops the run, even if one after it is older (clocks).
pub fn expired_prefix(manifests: &[(u64, i64)], cutoff_ms: i64) -> usize {
    manifests
        .iter()
        .take_while(|(_, at)| *at < cutoff_ms)
        .count()
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy)]
pub struct RetentionReport {
    pub deleted: u64,
    /// The floor after the round.
    pub floor: u64,
    /// Manifests were left for another round.
    pub more: bool,
}

fn ms_of(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .map(|t| t.timestamp_millis())
}

impl Lake {
    /// The seq below which every manifest is deleted (0: none is).
    pub async fn manifest_floor(&self) -> Result<u64> {
        floor_seq(self.store.as_ref()).await
    }

    async fn read_floor(&self) -> Result<Floor> {
        read_floor(self.store.as_ref()).await
    }

    /// Deletes the schema history objects of the checkpoints in `batch`
    /// (seq, writer of its manifest) that another writer wrote: once the
    /// manifest is gone, the objects of a checkpoint below the floor are
    /// taken as committed.
    async fn remove_losing_schema_objects(&self, batch: &[(u64, String)]) -> Result<()> {
        let Some((lo, hi)) = batch.first().zip(batch.last()).map(|(a, b)| (a.0, b.0)) else {
            return Ok(());
        };
        let prefix = Path::from(crate::schema::history::LAKE_DIR);
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        for meta in objects {
            let Some((ckpt, writer)) = meta
                .location
                .filename()
                .and_then(crate::schema::history::checkpoint_of)
            else {
                continue;
            };
            if ckpt < lo || ckpt > hi {
                continue;
            }
            let won = batch
                .iter()
                .find(|(s, _)| *s == ckpt)
                .is_none_or(|(_, w)| *w == writer);
            if !won {
                match self.store.delete(&meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    async fn write_floor(&self, floor: &Floor) -> Result<()> {
        let body = Bytes::from(serde_json::to_vec(floor).map_err(|e| Error::Lake(e.to_string()))?);
        self.store
            .put(&Path::from(FLOOR_PATH), PutPayload::from(body))
            .await?;
        Ok(())
    }

    /// Where a round starts: where the last one did, if it did not finish
    /// (a crash); else at the floor; else at manifest 1 or the first a
    /// listing yields (one request).
    async fn round_start(&self, floor: &Floor) -> Result<Option<u64>> {
        if let Some(p) = floor.pending_from {
            return Ok(Some(p));
        }
        if floor.seq > 0 {
            return Ok(Some(floor.seq));
        }
        if self.manifest_exists(1).await? {
            return Ok(Some(1));
        }
        let prefix = Path::from(MANIFEST_DIR);
        let mut listed = self
            .store
            .list(Some(&prefix))
            .try_filter_map(|meta| async move {
                Ok(meta
                    .location
                    .filename()
                    .and_then(|f| f.strip_suffix(".json"))
                    .and_then(|s| s.parse::<u64>().ok()))
            })
            .boxed();
        Ok(listed.try_next().await?)
    }

    /// One retention round: deletes the manifests below [`keep_from`]`(needs)`
    /// committed more than `retention` before `now_ms`, oldest first.
    pub async fn retain_manifests(
        &self,
        needs: &Needs,
        retention: Duration,
        now_ms: i64,
    ) -> Result<RetentionReport> {
        let keep = keep_from(needs);
        let floor = self.read_floor().await?;
        let mut report = RetentionReport {
            floor: floor.seq,
            ..Default::default()
        };
        let Some(oldest) = self.round_start(&floor).await? else {
            return Ok(report);
        };
        let cutoff = now_ms - retention.as_millis() as i64;
        let mut seen: Vec<(u64, i64)> = Vec::new();
        let mut writers: Vec<(u64, String)> = Vec::new();
        let mut seq = oldest;
        while seq < keep && seen.len() < MAX_PER_ROUND {
            match self.read_manifest(seq).await {
                Ok(m) => {
                    let at = ms_of(&m.committed_at).unwrap_or(i64::MAX);
                    if at >= cutoff {
                        break;
                    }
                    seen.push((seq, at));
                    writers.push((seq, m.writer.id));
                }
                // A hole a crashed round left.
                Err(Error::Store(object_store::Error::NotFound { .. })) => {}
                Err(e) => return Err(e),
            }
            seq += 1;
        }
        let n = expired_prefix(&seen, cutoff);
        report.more = n == MAX_PER_ROUND;
        // Up to where the manifests read are gone (holes included).
        let end = match seen[..n].last() {
            Some(&(last, _)) => last + 1,
            None if floor.pending_from.is_some() => floor.seq,
            None => return Ok(report),
        };
        let end = end.max(floor.seq).min(keep);
        self.remove_losing_schema_objects(&writers[..n]).await?;
        self.write_floor(&Floor {
            seq: end,
            pending_from: Some(oldest),
        })
        .await?;
        for (seq, _) in &seen[..n] {
            match self.store.delete(&manifest_path(*seq)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => report.deleted += 1,
                Err(e) => return Err(e.into()),
            }
        }
        self.write_floor(&Floor {
            seq: end,
            pending_from: None,
        })
        .await?;
        report.floor = end;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_from_is_the_least_need_and_never_above_the_newest() {
        let n = Needs {
            newest: 100,
            ..Default::default()
        };
        assert_eq!(keep_from(&n), 100);
        let n = Needs {
            newest: 100,
            hint: Some(90),
            fold_mark: Some(80),
            delta_from: Some(95),
        };
        assert_eq!(keep_from(&n), 80);
        // A lagging Delta log needs more than the fold.
        let n = Needs {
            delta_from: Some(12),
            ..n
        };
        assert_eq!(keep_from(&n), 12);
        // No complete fold yet: every manifest stays.
        let n = Needs {
            newest: 100,
            fold_mark: Some(0),
            ..Default::default()
        };
        assert_eq!(keep_from(&n), 1);
        // A hint above the newest (a stale lake) does not raise it.
        let n = Needs {
            newest: 100,
            hint: Some(120),
            ..Default::default()
        };
        assert_eq!(keep_from(&n), 100);
    }

    #[test]
    fn only_the_leading_expired_run_goes() {
        let m = [(1, 10), (2, 20), (3, 35), (4, 25), (5, 40)];
        assert_eq!(expired_prefix(&m, 30), 2);
        assert_eq!(expired_prefix(&m, 5), 0);
        assert_eq!(expired_prefix(&m, 100), 5);
        assert_eq!(expired_prefix(&[], 100), 0);
    }
}
