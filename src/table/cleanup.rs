//! What a Delta table no longer needs, deleted when sluice checkpoints it
//! (DESIGN.md "A lake that lasts"), as Spark's metadata clean-up and VACUUM
//! do:
//! - data files whose `remove` is older than the table's
//!   `delta.deletedFileRetentionDuration` (7 days): no version inside the
//!   retention reads them. They go before the checkpoint that drops their
//!   tombstones, so a crash in between leaves the tombstones for the next
//!   checkpoint to finish the work.
//! - commit files and checkpoints below the newest checkpoint that is older
//!   than `delta.logRetentionDuration` (30 days), unless
//!   `delta.enableExpiredLogCleanup` is `false`. Every version from that
//!   checkpoint on still has its checkpoint and commits, so time travel
//!   reaches back the whole retention; older versions were older than it.
//!
//! Both read the properties a user set on the table (Spark's `ALTER TABLE …
//! SET TBLPROPERTIES`, delta-rs `alter.set_table_properties`).

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;

use super::log::{log_dir, LogFile, TableState};
use std::collections::BTreeSet;

use super::current::dv::descriptor_file;
use super::tombstones;
use crate::error::Result;

pub const LOG_RETENTION_KEY: &str = "delta.logRetentionDuration";
/// Delta's default for [`LOG_RETENTION_KEY`]: 30 days.
pub const DEFAULT_LOG_RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;
pub const LOG_CLEANUP_KEY: &str = "delta.enableExpiredLogCleanup";
/// Log files deleted by one clean-up at most, so that the first clean-up
/// of an old lake does not hold up the commit it follows; the rest go at
/// the next checkpoints.
const MAX_LOG_DELETES: usize = 2000;
/// Deletions in flight at once.
const DELETES_IN_FLIGHT: usize = 16;

/// The object of a Delta path (relative to the table folder and
/// percent-encoded, as the protocol writes it); `None` for an absolute one,
/// which names a file sluice did not write.
fn data_file(table: &Path, delta_path: &str) -> Option<Path> {
    if delta_path.contains("://") || delta_path.starts_with('/') || delta_path.is_empty() {
        return None;
    }
    Some(delta_path.split('/').fold(table.clone(), |p, part| {
        p.join(super::names::decode_part(part))
    }))
}

/// Deletes the data files of `state`'s tombstones older than the table's
/// `delta.deletedFileRetentionDuration` as of `now_ms` (none when the
/// property does not parse). Returns how many went.
pub async fn expired_data_files(
    store: &dyn ObjectStore,
    table: &Path,
    state: &TableState,
    now_ms: i64,
) -> Result<usize> {
    let Ok(retention) = tombstones::retention_ms(state.metadata.as_ref()) else {
        return Ok(0);
    };
    let young = tombstones::kept(state.tombstones.values(), now_ms, Some(retention));
    // Paths and vector files still needed: live, or removed within the retention.
    let needed_files: BTreeSet<&str> = young
        .iter()
        .filter_map(|r| r["path"].as_str())
        .chain(state.files.keys().map(String::as_str))
        .collect();
    let needed_vectors: BTreeSet<String> = young
        .iter()
        .copied()
        .chain(state.files.values())
        .filter_map(|a| descriptor_file(&a["deletionVector"]))
        .collect();
    let mut expired: BTreeSet<Path> = BTreeSet::new();
    for r in state.tombstones.values() {
        if let Some(p) = r["path"].as_str().filter(|p| !needed_files.contains(p)) {
            expired.extend(data_file(table, p));
        }
        // The deletion vector the remove replaced (its file is ours).
        if let Some(v) =
            descriptor_file(&r["deletionVector"]).filter(|v| !needed_vectors.contains(v))
        {
            expired.extend(data_file(table, &v));
        }
    }
    let expired: Vec<Path> = expired.into_iter().collect();
    delete_all(store, expired).await
}

/// The log files to delete, given every file of the log as (name, last
/// modified in ms), the newest checkpoint `newest` and the retention
/// cutoff: those below the newest complete checkpoint at or below `newest`
/// whose every part was written before `cutoff_ms`, lowest versions first.
fn expired_log_files(files: &[(String, i64)], newest: u64, cutoff_ms: i64) -> Vec<String> {
    use std::collections::BTreeMap;
    // Per checkpoint version and part count: the parts seen, all old?
    let mut checkpoints: BTreeMap<(u64, u64), (u64, bool)> = BTreeMap::new();
    for (name, modified) in files {
        if let Some(LogFile::Checkpoint { version, parts, .. }) = LogFile::parse(name) {
            let e = checkpoints.entry((version, parts)).or_insert((0, true));
            e.0 += 1;
            e.1 &= *modified < cutoff_ms;
        }
    }
    let keep_from = checkpoints
        .iter()
        .filter(|((v, parts), (seen, old))| *v <= newest && seen == parts && *old)
        .map(|((v, _), _)| *v)
        .max();
    let Some(keep_from) = keep_from else {
        return Vec::new();
    };
    let mut out: Vec<(u64, &String)> = files
        .iter()
        .filter_map(|(name, _)| {
            let v = LogFile::parse(name)?.version();
            (v < keep_from).then_some((v, name))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, n)| n.clone()).collect()
}

/// Deletes the log files below the newest checkpoint older than the table's
/// `delta.logRetentionDuration` (`newest` is the checkpoint just written).
/// Returns how many went.
pub async fn expired_log(
    store: &dyn ObjectStore,
    table: &Path,
    metadata: Option<&Value>,
    newest: u64,
    now_ms: i64,
) -> Result<usize> {
    let conf = metadata.map(|m| &m["configuration"]);
    if conf
        .and_then(|c| c[LOG_CLEANUP_KEY].as_str())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Ok(0);
    }
    let retention = match tombstones::interval_property(
        metadata,
        LOG_RETENTION_KEY,
        DEFAULT_LOG_RETENTION_MS,
    ) {
        Ok(ms) => ms,
        Err(e) => {
            tracing::warn!(%table, error = %e, "the Delta log is not cleaned up");
            return Ok(0);
        }
    };
    let dir = log_dir(table);
    let cutoff = now_ms.saturating_sub(retention);
    // Commit files and checkpoints are written in version order, so their
    // times rise with their names: on a store that lists in name order (S3,
    // GCS, Azure) the listing stops at the first file younger than the
    // cutoff, and a clean-up reads about what it deletes, not the whole
    // retained log. A local directory lists in no order and is read whole.
    let mut listing = store.list(Some(&dir));
    let mut listed: Vec<(String, i64)> = Vec::new();
    let mut in_order = true;
    while let Some(m) = listing.try_next().await? {
        // Only the log's own files, not those of a subfolder.
        let own = m
            .location
            .prefix_match(&dir)
            .is_some_and(|mut r| r.next().is_some() && r.next().is_none());
        let Some(name) = m.location.filename().filter(|_| own) else {
            continue;
        };
        let modified = m.last_modified.timestamp_millis();
        in_order &= listed.last().is_none_or(|(last, _)| last.as_str() < name);
        listed.push((name.to_string(), modified));
        if in_order && modified >= cutoff && LogFile::parse(name).is_some() {
            break;
        }
    }
    let doomed: Vec<Path> = expired_log_files(&listed, newest, cutoff)
        .into_iter()
        .take(MAX_LOG_DELETES)
        .map(|n| dir.clone().join(n))
        .collect();
    delete_all(store, doomed).await
}

/// Deletes `paths`, a few at a time; one already gone counts as deleted.
async fn delete_all(store: &dyn ObjectStore, paths: Vec<Path>) -> Result<usize> {
    let n = paths.len();
    futures::stream::iter(paths.into_iter().map(|p| async move {
        match store.delete(&p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }))
    .buffer_unordered(DELETES_IN_FLIGHT)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replaced_deletion_vector_goes_after_the_retention_and_a_live_one_stays() {
        use crate::table::current::dv::VectorFile;
        use object_store::PutPayload;
        use serde_json::json;
        let store = object_store::memory::InMemory::new();
        let table = Path::from("_current/db/t");
        // Past dv::INLINE_MAX bytes, so that each goes into its file.
        let rows: roaring::RoaringTreemap = (0..100u64).map(|r| r * 7).collect();
        let (mut old, mut young, mut live) =
            (VectorFile::new(1), VectorFile::new(2), VectorFile::new(3));
        let (old_dv, young_dv, live_dv) = (old.push(&rows), young.push(&rows), live.push(&rows));
        let paths = [old.path(&table), young.path(&table), live.path(&table)];
        for f in [old, young, live] {
            f.write(&store, &table).await.unwrap();
        }
        store
            .put(
                &table.clone().join("a.parquet"),
                PutPayload::from_static(b"x"),
            )
            .await
            .unwrap();
        let now = 100 * 86_400_000;
        let remove = |dv: &Value, at: i64| json!({"path": "a.parquet", "deletionTimestamp": at, "deletionVector": dv});
        let mut state = TableState::default();
        state.files.insert(
            "a.parquet".into(),
            json!({"path": "a.parquet", "size": 1, "deletionVector": live_dv}),
        );
        for r in [
            remove(&old_dv, now - 30 * 86_400_000),
            remove(&young_dv, now - 1000),
        ] {
            state
                .tombstones
                .insert(super::super::log::tombstone_key("a.parquet", &r), r);
        }
        assert_eq!(
            expired_data_files(&store, &table, &state, now)
                .await
                .unwrap(),
            1
        );
        let exists = |p: &Path| {
            let store = &store;
            let p = p.clone();
            async move { store.head(&p).await.is_ok() }
        };
        assert!(!exists(&paths[0]).await, "the expired vector file stayed");
        assert!(
            exists(&paths[1]).await,
            "a vector removed within the retention went"
        );
        assert!(exists(&paths[2]).await, "the live vector went");
        assert!(
            exists(&table.clone().join("a.parquet")).await,
            "the live data file went"
        );
    }

    #[test]
    fn log_file_names_parse() {
        let v = |n: u64| format!("{n:020}");
        assert_eq!(
            LogFile::parse(&format!("{}.json", v(7))),
            Some(LogFile::Commit(7))
        );
        assert_eq!(
            LogFile::parse(&format!("{}.checkpoint.parquet", v(100))),
            Some(LogFile::Checkpoint {
                version: 100,
                part: 1,
                parts: 1
            })
        );
        assert_eq!(
            LogFile::parse(&format!(
                "{}.checkpoint.0000000002.0000000003.parquet",
                v(200)
            )),
            Some(LogFile::Checkpoint {
                version: 200,
                part: 2,
                parts: 3
            })
        );
        assert_eq!(
            LogFile::parse(&format!("{}.crc", v(3))),
            Some(LogFile::Other(3))
        );
        assert_eq!(
            LogFile::parse(&format!(
                "{}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json",
                v(4)
            )),
            Some(LogFile::Other(4))
        );
        assert_eq!(LogFile::parse("_last_checkpoint"), None);
        assert_eq!(LogFile::parse("7.json"), None);
    }

    fn names(versions: &[(u64, &str, i64)]) -> Vec<(String, i64)> {
        versions
            .iter()
            .map(|(v, ext, t)| (format!("{v:020}.{ext}"), *t))
            .collect()
    }

    #[test]
    fn the_log_keeps_everything_from_the_newest_expired_checkpoint() {
        // Commits 0..=25 written at t = version, checkpoints at 10 and 20.
        let mut files: Vec<(u64, &str, i64)> = (0..=25).map(|v| (v, "json", v as i64)).collect();
        files.push((10, "checkpoint.parquet", 10));
        files.push((20, "checkpoint.parquet", 20));
        files.push((5, "crc", 5));
        let files = names(&files);
        // Nothing older than the cutoff but commits: no checkpoint to keep.
        assert!(expired_log_files(&files, 20, 9).is_empty());
        // Checkpoint 10 is older: everything below it goes.
        let gone = expired_log_files(&files, 20, 15);
        assert_eq!(gone.len(), 11, "{gone:?}");
        assert_eq!(gone[0], format!("{:020}.json", 0));
        assert!(gone.contains(&format!("{:020}.crc", 5)));
        assert!(!gone.iter().any(|n| n.starts_with(&format!("{:020}", 10))));
        // Both are: below 20, never 20 itself or what follows.
        let gone = expired_log_files(&files, 20, 100);
        assert_eq!(gone.len(), 20 + 1 + 1, "{gone:?}");
        assert!(!gone.iter().any(|n| n.starts_with(&format!("{:020}", 20))));
        // A checkpoint above the one just written is not ours to rely on.
        assert_eq!(expired_log_files(&files, 10, 100).len(), 11);
    }

    #[test]
    fn an_incomplete_multi_part_checkpoint_is_never_kept_in_place_of_the_log() {
        let mut files = names(&(0..=12).map(|v| (v, "json", 0)).collect::<Vec<_>>());
        files.push((
            format!("{:020}.checkpoint.0000000001.0000000002.parquet", 10),
            0,
        ));
        assert!(expired_log_files(&files, 10, 100).is_empty());
        files.push((
            format!("{:020}.checkpoint.0000000002.0000000002.parquet", 10),
            0,
        ));
        assert_eq!(expired_log_files(&files, 10, 100).len(), 10);
        // A part written after the cutoff keeps the checkpoint's commits.
        files.pop();
        files.push((
            format!("{:020}.checkpoint.0000000002.0000000002.parquet", 10),
            200,
        ));
        assert!(expired_log_files(&files, 10, 100).is_empty());
    }

    #[tokio::test]
    async fn a_log_listed_in_name_order_is_read_up_to_its_first_young_file() {
        use object_store::PutPayload;
        let store = object_store::memory::InMemory::new();
        let table = Path::from("db/t");
        let put = |name: String| {
            let store = &store;
            let path = log_dir(&table).join(name);
            async move { store.put(&path, PutPayload::from("{}")).await.unwrap() }
        };
        for v in 0..=10u64 {
            put(format!("{v:020}.json")).await;
        }
        put(format!("{:020}.checkpoint.parquet", 5)).await;
        put(format!("{:020}.checkpoint.parquet", 10)).await;
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        let now = chrono::Utc::now().timestamp_millis();
        for v in 11..=15u64 {
            put(format!("{v:020}.json")).await;
        }
        let md =
            serde_json::json!({"configuration": {LOG_RETENTION_KEY: "interval 30 milliseconds"}});
        let gone = expired_log(&store, &table, Some(&md), 10, now)
            .await
            .unwrap();
        assert_eq!(gone, 11, "commits 0..=9 and checkpoint 5");
        let left: Vec<String> = store
            .list(Some(&log_dir(&table)))
            .map_ok(|m| m.location.filename().unwrap().to_string())
            .try_collect()
            .await
            .unwrap();
        let mut left = left;
        left.sort();
        assert_eq!(left.len(), 7, "{left:?}");
        assert_eq!(left[0], format!("{:020}.checkpoint.parquet", 10));
        // Switched off by the table: nothing goes.
        let off = serde_json::json!({"configuration": {
            LOG_RETENTION_KEY: "interval 0 seconds", LOG_CLEANUP_KEY: "false"}});
        assert_eq!(
            expired_log(&store, &table, Some(&off), 10, now)
                .await
                .unwrap(),
            0
        );
    }

    #[test]
    fn delta_paths_resolve_inside_the_table_only() {
        let t = Path::from("db/t");
        assert_eq!(
            data_file(&t, "part-1.parquet").unwrap().as_ref(),
            "db/t/part-1.parquet"
        );
        assert_eq!(
            data_file(&t, "_compacted/c-1.parquet").unwrap().as_ref(),
            "db/t/_compacted/c-1.parquet"
        );
        assert_eq!(
            data_file(&t, "a%20b/x.parquet").unwrap(),
            Path::from_iter(["db", "t", "a b", "x.parquet"])
        );
        assert_eq!(data_file(&t, "s3://other/x.parquet"), None);
        assert_eq!(data_file(&t, "/abs/x.parquet"), None);
    }
}
