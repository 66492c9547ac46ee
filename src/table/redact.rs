//! The column bounds of files a table no longer holds, taken out of its
//! Delta log (`sluice forget`).
//!
//! An `add` action's `stats` carry each column's smallest and largest value
//! in the file: values of rows. Once an erasure has replaced a file, the
//! commits and checkpoints that added it would still hold the bounds of
//! erased rows. So the `stats` of every `add` whose file is not live any
//! more keep their row count and null counts and lose `minValues` and
//! `maxValues`, in the commit files and in the checkpoints, rewritten in
//! place (the log keeps every version; a reader that travels to an old
//! version reads it without data skipping, or fails on the files an
//! erasure deleted, as the README says). Only versions up to the one the
//! caller read are touched: a commit made since may add files the caller
//! did not see live.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value;

use super::log::{self, TableState};
use crate::error::Result;

/// Rewrites the commits and checkpoints up to `state.version` whose `add`
/// actions of files not live in `state` hold column bounds. Returns how
/// many log files it rewrote.
pub async fn redact_bounds(
    store: &dyn ObjectStore,
    table: &Path,
    state: &TableState,
) -> Result<usize> {
    let Some(upto) = state.version else {
        return Ok(0);
    };
    let live = &state.files;
    let listed: Vec<object_store::ObjectMeta> =
        store.list(Some(&log::log_dir(table))).try_collect().await?;
    let mut rewritten = 0;
    for meta in listed {
        let Some(name) = meta.location.filename() else {
            continue;
        };
        if let Some(v) = log::commit_version(name) {
            if v <= upto && redact_commit(store, &meta.location, live).await? {
                rewritten += 1;
            }
        } else if let Some(v) = checkpoint_version(name) {
            if v <= upto && redact_checkpoint(store, table, &meta.location, v, live).await? {
                rewritten += 1;
            }
        }
    }
    Ok(rewritten)
}

/// The version of a checkpoint file's name (single or multi-part).
fn checkpoint_version(name: &str) -> Option<u64> {
    let (digits, rest) = name.split_once(".checkpoint.")?;
    (digits.len() == 20 && rest.ends_with("parquet"))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The `add` body's `stats` without bounds, if the file is not live and its
/// stats have bounds.
fn redacted(add: &Value, live: &BTreeMap<String, Value>) -> Option<String> {
    let path = add["path"].as_str()?;
    if live.contains_key(path) {
        return None;
    }
    let mut stats: Value = serde_json::from_str(add["stats"].as_str()?).ok()?;
    let o = stats.as_object_mut()?;
    let had = o.remove("minValues").is_some() | o.remove("maxValues").is_some();
    had.then(|| stats.to_string())
}

/// A log file's bytes; `None` once the log's clean-up deleted it.
async fn read(store: &dyn ObjectStore, path: &Path) -> Result<Option<bytes::Bytes>> {
    match store.get(path).await {
        Ok(got) => Ok(Some(got.bytes().await?)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn redact_commit(
    store: &dyn ObjectStore,
    path: &Path,
    live: &BTreeMap<String, Value>,
) -> Result<bool> {
    let Some(body) = read(store, path).await? else {
        return Ok(false);
    };
    let text = String::from_utf8_lossy(&body);
    let mut changed = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut kept = line.to_string();
        if line.contains("\"add\"") {
            if let Ok(mut action) = serde_json::from_str::<Value>(line) {
                if let Some(stats) = redacted(&action["add"], live) {
                    action["add"]["stats"] = Value::String(stats);
                    kept = action.to_string();
                    changed = true;
                }
            }
        }
        out.push_str(&kept);
        out.push('\n');
    }
    if changed {
        store.put(path, PutPayload::from(out.into_bytes())).await?;
    }
    Ok(changed)
}

async fn redact_checkpoint(
    store: &dyn ObjectStore,
    table: &Path,
    path: &Path,
    version: u64,
    live: &BTreeMap<String, Value>,
) -> Result<bool> {
    let Some(body) = read(store, path).await? else {
        return Ok(false);
    };
    let mut rows = log::read_checkpoint(body).map_err(|e| log::unreadable(table, e))?;
    let mut changed = false;
    for row in &mut rows {
        if row["add"].is_object() {
            if let Some(stats) = redacted(&row["add"], live) {
                row["add"]["stats"] = Value::String(stats);
                changed = true;
            }
        }
    }
    if changed {
        let bytes = log::encode_checkpoint(table, version, &rows)?;
        store.put(path, PutPayload::from(bytes)).await?;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn bounds_of_files_no_longer_live_leave_commits_and_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let table = Path::from("db/t");
        let stats = |v: &str| {
            json!({"numRecords": 2, "minValues": {"name": v}, "maxValues": {"name": v},
                   "nullCount": {"name": 0}})
            .to_string()
        };
        let add = |p: &str, v: &str| {
            json!({"add": {"path": p, "partitionValues": {}, "size": 1, "modificationTime": 1,
                   "dataChange": true, "stats": stats(v)}})
        };
        let remove =
            |p: &str| json!({"remove": {"path": p, "deletionTimestamp": 2, "dataChange": true}});
        log::put_commit(
            store.as_ref(),
            &table,
            0,
            &[add("a.parquet", "secret-a"), add("b.parquet", "kept-b")],
        )
        .await
        .unwrap();
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        log::write_checkpoint(store.as_ref(), &table, &state, 0, 0)
            .await
            .unwrap();
        log::put_commit(
            store.as_ref(),
            &table,
            1,
            &[remove("a.parquet"), add("c.parquet", "kept-c")],
        )
        .await
        .unwrap();
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        assert_eq!(
            redact_bounds(store.as_ref(), &table, &state).await.unwrap(),
            2
        );
        // Again: nothing left to redact.
        assert_eq!(
            redact_bounds(store.as_ref(), &table, &state).await.unwrap(),
            0
        );
        let mut all = String::new();
        for name in ["00000000000000000000.json", "00000000000000000001.json"] {
            let p = log::log_dir(&table).join(name);
            all += &String::from_utf8_lossy(&store.get(&p).await.unwrap().bytes().await.unwrap());
        }
        let cp = log::log_dir(&table).join("00000000000000000000.checkpoint.parquet");
        let rows =
            log::read_checkpoint(store.get(&cp).await.unwrap().bytes().await.unwrap()).unwrap();
        all += &serde_json::to_string(&rows).unwrap();
        assert!(!all.contains("secret-a"), "{all}");
        assert!(all.contains("kept-b") && all.contains("kept-c"));
        // The log still loads, with the counts kept.
        let again = log::load(store.as_ref(), &table, true).await.unwrap();
        assert_eq!(again.files.len(), 2);
        assert!(all.contains("numRecords"));
    }
}
