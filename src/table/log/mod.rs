//! Reading and appending a table's `_delta_log/`
//! (<https://github.com/delta-io/delta/blob/master/PROTOCOL.md#delta-log-entries>):
//! commit files `<version, 20 digits>.json` written put-if-absent, classic
//! single-file checkpoints `<version>.checkpoint.parquet` and the
//! `_last_checkpoint` hint. What a log no longer needs is deleted by
//! `cleanup` after a checkpoint.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::{json, Value};

use super::tombstones;
use crate::error::{Error, Result};
use crate::sink::conditional::{put_if_absent, Created};

mod checkpoint;
pub(crate) use checkpoint::checkpoint_if_due;
#[cfg(test)]
pub use checkpoint::write_checkpoint;
pub(crate) use checkpoint::{encode_checkpoint, read_checkpoint};

pub const LOG_DIR: &str = "_delta_log";
/// The `appId` of sluice's `txn` actions; their `version` is the manifest seq.
pub const APP_ID: &str = "sluice";
/// A checkpoint at every version divisible by this.
pub const CHECKPOINT_INTERVAL: u64 = 100;

pub(crate) fn log_dir(table: &Path) -> Path {
    table.clone().join(LOG_DIR)
}

pub fn commit_path(table: &Path, version: u64) -> Path {
    log_dir(table).join(format!("{version:020}.json"))
}

fn checkpoint_path(table: &Path, version: u64) -> Path {
    log_dir(table).join(format!("{version:020}.checkpoint.parquet"))
}

fn last_checkpoint_path(table: &Path) -> Path {
    log_dir(table).join("_last_checkpoint")
}

/// The version of a commit file's name, `None` for any other file.
pub(crate) fn commit_version(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A table's log replayed up to its latest version.
#[derive(Debug, Default, Clone)]
pub struct TableState {
    /// The latest version; `None` when the table has no log yet.
    pub version: Option<u64>,
    /// The `version` of the newest `txn` of [`APP_ID`]: the manifest seq
    /// whose files the log holds last (0: none).
    pub applied: u64,
    pub protocol: Option<Value>,
    pub metadata: Option<Value>,
    /// The `sluice` object of the newest commitInfo sluice wrote.
    pub last_info: Option<Value>,
    /// Live `add` actions by path (only when loaded with files).
    pub files: BTreeMap<String, Value>,
    /// `remove` actions of files no later `add` brought back, by path (only
    /// when loaded with files): the tombstones a checkpoint carries on. The
    /// `remove` of a file with a deletion vector is keyed by path and the
    /// vector's id ([`tombstone_key`]): the same path is usually live again
    /// with a larger vector, and the old vector's file is what expires.
    pub tombstones: BTreeMap<String, Value>,
    /// Every `txn` action by `appId`.
    pub txns: BTreeMap<String, Value>,
}

/// The id of an action's deletion vector ("" without one).
fn vector_id(action: &Value) -> String {
    let dv = &action["deletionVector"];
    if dv.is_null() {
        return String::new();
    }
    let base = format!(
        "{}{}",
        dv["storageType"].as_str().unwrap_or(""),
        dv["pathOrInlineDv"].as_str().unwrap_or("")
    );
    match dv["offset"].as_u64() {
        Some(o) => format!("{base}@{o}"),
        None => base,
    }
}

/// The key of a `remove` in [`TableState::tombstones`]: its path, followed
/// by a NUL and its deletion vector's id when it has one.
pub fn tombstone_key(path: &str, action: &Value) -> String {
    let id = vector_id(action);
    if id.is_empty() {
        path.to_string()
    } else {
        format!("{path}\0{id}")
    }
}

impl TableState {
    fn apply(&mut self, action: &Value, with_files: bool) {
        let Some(obj) = action.as_object() else {
            return;
        };
        for (kind, body) in obj {
            match kind.as_str() {
                "add" if with_files => {
                    if let Some(p) = body.get("path").and_then(Value::as_str) {
                        self.tombstones.remove(p);
                        self.tombstones.remove(&tombstone_key(p, body));
                        self.files.insert(p.to_string(), body.clone());
                    }
                }
                "remove" if with_files => {
                    if let Some(p) = body.get("path").and_then(Value::as_str) {
                        // A file entry is its path and its deletion vector
                        // (the protocol's identity): a remove of a file's
                        // old vector, or of the file before it had one,
                        // leaves it live with its new one, whatever order a
                        // commit or a checkpoint (delta-rs lists a live file
                        // before its tombstones) lists the two in.
                        if self
                            .files
                            .get(p)
                            .is_some_and(|live| vector_id(live) == vector_id(body))
                        {
                            self.files.remove(p);
                        }
                        self.tombstones.insert(tombstone_key(p, body), body.clone());
                    }
                }
                "protocol" => self.protocol = Some(body.clone()),
                "metaData" => self.metadata = Some(body.clone()),
                "txn" => {
                    let app = body.get("appId").and_then(Value::as_str).unwrap_or("");
                    if app == APP_ID {
                        self.applied = body.get("version").and_then(Value::as_u64).unwrap_or(0);
                    }
                    self.txns.insert(app.to_string(), body.clone());
                }
                "commitInfo" => {
                    if let Some(info) = body.get("sluice") {
                        self.last_info = Some(info.clone());
                    }
                }
                _ => {}
            }
        }
    }
}

pub(crate) fn unreadable(table: &Path, why: impl std::fmt::Display) -> Error {
    Error::Lake(format!("Delta log of {table}: {why}"))
}

/// What a `_delta_log/` file is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFile {
    Commit(u64),
    /// A classic checkpoint: `<v>.checkpoint.parquet` (part 1 of 1) or
    /// part `part` of `parts` (`<v>.checkpoint.<part>.<parts>.parquet`, as
    /// Spark writes a large one).
    Checkpoint {
        version: u64,
        part: u64,
        parts: u64,
    },
    /// Anything else with a version in front (`.crc`, V2 checkpoints, log
    /// compactions): never a checkpoint sluice reads.
    Other(u64),
}

impl LogFile {
    pub(crate) fn parse(name: &str) -> Option<LogFile> {
        let (digits, rest) = name.split_at_checked(20)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) || !rest.starts_with('.') {
            return None;
        }
        let version: u64 = digits.parse().ok()?;
        let file = match &rest[1..] {
            "json" => LogFile::Commit(version),
            "checkpoint.parquet" => LogFile::Checkpoint {
                version,
                part: 1,
                parts: 1,
            },
            other => match other
                .strip_prefix("checkpoint.")
                .and_then(|r| r.strip_suffix(".parquet"))
                .and_then(|r| r.split_once('.'))
                .filter(|(a, b)| a.len() == 10 && b.len() == 10)
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            {
                Some((part, parts)) if part >= 1 && part <= parts => LogFile::Checkpoint {
                    version,
                    part,
                    parts,
                },
                _ => LogFile::Other(version),
            },
        };
        Some(file)
    }

    pub(crate) fn version(self) -> u64 {
        match self {
            LogFile::Commit(v) | LogFile::Other(v) => v,
            LogFile::Checkpoint { version, .. } => version,
        }
    }
}

/// A checkpoint to start a replay from: its version and part count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckpointRef {
    version: u64,
    parts: u64,
}

impl CheckpointRef {
    fn paths(self, table: &Path) -> Vec<Path> {
        let c = self.version;
        match self.parts {
            0 | 1 => vec![checkpoint_path(table, c)],
            n => (1..=n)
                .map(|i| log_dir(table).join(format!("{c:020}.checkpoint.{i:010}.{n:010}.parquet")))
                .collect(),
        }
    }
}

/// What `_last_checkpoint` says, if it is there and names a classic checkpoint.
enum Hint {
    Absent,
    Classic(CheckpointRef),
    /// A V2 checkpoint, or a body that does not parse: the log is listed.
    Unusable(String),
}

async fn read_hint(store: &dyn ObjectStore, table: &Path) -> Result<Hint> {
    let body = match store.get(&last_checkpoint_path(table)).await {
        Ok(got) => got.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => return Ok(Hint::Absent),
        Err(e) => return Err(e.into()),
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return Ok(Hint::Unusable(format!("it does not parse ({e})"))),
    };
    if v.get("v2Checkpoint").is_some_and(|c| !c.is_null()) {
        return Ok(Hint::Unusable("it names a V2 checkpoint".into()));
    }
    Ok(match v.get("version").and_then(Value::as_u64) {
        Some(version) => Hint::Classic(CheckpointRef {
            version,
            parts: v.get("parts").and_then(Value::as_u64).unwrap_or(1),
        }),
        None => Hint::Unusable("it names no version".into()),
    })
}

/// The actions of a checkpoint, every part; `Ok(None)` when a part is not
/// there or cannot be read (the hint that named it is stale).
async fn read_checkpoint_parts(
    store: &dyn ObjectStore,
    table: &Path,
    checkpoint: CheckpointRef,
) -> Result<Option<Vec<Value>>> {
    let mut actions = Vec::new();
    for path in checkpoint.paths(table) {
        let bytes = match store.get(&path).await {
            Ok(got) => got.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        match read_checkpoint(bytes) {
            Ok(rows) => actions.extend(rows),
            Err(e) => {
                tracing::warn!(%table, %path, error = %e, "a Delta checkpoint cannot be read; another start point of the log is used");
                return Ok(None);
            }
        }
    }
    Ok(Some(actions))
}

/// The commit versions among `names` above `after` (all with `None`),
/// in order, and whether they run without a gap from `after + 1` (or 0).
fn commits_after<'a>(
    names: impl Iterator<Item = &'a str>,
    after: Option<u64>,
) -> (Vec<u64>, Option<u64>) {
    let mut versions: Vec<u64> = names
        .filter_map(commit_version)
        .filter(|v| after.is_none_or(|c| *v > c))
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let first = after.map_or(0, |c| c + 1);
    let gap = versions
        .iter()
        .enumerate()
        .find(|(i, v)| **v != first + *i as u64)
        .map(|(i, _)| first + i as u64);
    (versions, gap)
}

/// Replays the log of the table folder `table`: the checkpoint the
/// `_last_checkpoint` hint names, then every commit file after it. The
/// hint is only a hint (the Delta protocol says so): when the checkpoint
/// it names is gone or unreadable (another writer's clean-up raced its
/// hint), or it names a V2 checkpoint, the log is listed and replayed from
/// its newest complete classic checkpoint, or from commit 0, and the hint
/// is rewritten to name that checkpoint (or removed: delta-kernel readers
/// refuse a hint when the log has no checkpoint).
pub async fn load(store: &dyn ObjectStore, table: &Path, with_files: bool) -> Result<TableState> {
    let hint = read_hint(store, table).await?;
    let stale = match &hint {
        Hint::Classic(c) => match read_checkpoint_parts(store, table, *c).await? {
            Some(actions) => {
                let dir = log_dir(table);
                let offset = dir.clone().join(format!("{:020}.json", c.version));
                let listed: Vec<_> = store
                    .list_with_offset(Some(&dir), &offset)
                    .try_collect()
                    .await?;
                let (versions, gap) = commits_after(
                    listed.iter().filter_map(|m| m.location.filename()),
                    Some(c.version),
                );
                match gap {
                    None => {
                        return replay(
                            store,
                            table,
                            with_files,
                            Some((c.version, actions)),
                            &versions,
                        )
                        .await
                    }
                    Some(missing) => format!(
                        "commit {missing} after its checkpoint {} is missing",
                        c.version
                    ),
                }
            }
            None => format!(
                "it names checkpoint {}, which is not there whole",
                c.version
            ),
        },
        Hint::Unusable(why) => why.clone(),
        Hint::Absent => String::new(),
    };
    // The whole log, listed once: its newest complete classic checkpoint
    // with every commit after it, or every commit from 0.
    let dir = log_dir(table);
    let listed: Vec<_> = store.list(Some(&dir)).try_collect().await?;
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|m| m.location.filename())
        .collect();
    let mut parts_seen: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for name in &names {
        if let Some(LogFile::Checkpoint { version, parts, .. }) = LogFile::parse(name) {
            *parts_seen.entry((version, parts)).or_default() += 1;
        }
    }
    let mut complete: Vec<CheckpointRef> = parts_seen
        .into_iter()
        .filter(|((_, parts), seen)| seen == parts)
        .map(|((version, parts), _)| CheckpointRef { version, parts })
        .collect();
    complete.sort_by_key(|c| std::cmp::Reverse((c.version, c.parts == 1)));
    let mut start: Option<(CheckpointRef, Vec<Value>, Vec<u64>)> = None;
    for c in complete {
        let (versions, gap) = commits_after(names.iter().copied(), Some(c.version));
        if gap.is_some() {
            continue;
        }
        if let Some(actions) = read_checkpoint_parts(store, table, c).await? {
            start = Some((c, actions, versions));
            break;
        }
    }
    let (versions, from) = match start {
        Some((c, actions, versions)) => (versions, Some((c, actions))),
        None => {
            let (versions, gap) = commits_after(names.iter().copied(), None);
            if let Some(missing) = gap {
                let why = if names.iter().any(|n| {
                    matches!(LogFile::parse(n), Some(LogFile::Other(_)))
                        && n.contains(".checkpoint.")
                }) {
                    format!("commit {missing} is missing and no classic checkpoint covers it: a V2 checkpoint (`<version>.checkpoint.<uuid>`) is not read by sluice; make a classic checkpoint of the table (Spark: `delta.checkpointPolicy` = `classic`)")
                } else {
                    format!(
                        "commit {missing} is missing (the log has {})",
                        versions
                            .get(missing as usize)
                            .or(versions.last())
                            .copied()
                            .unwrap_or(0)
                    )
                };
                return Err(unreadable(table, why));
            }
            (versions, None)
        }
    };
    if !stale.is_empty() {
        repair_hint(
            store,
            table,
            from.as_ref().map(|(c, a)| (*c, a.len())),
            &stale,
        )
        .await;
    }
    let from = from.map(|(c, actions)| (c.version, actions));
    replay(store, table, with_files, from, &versions).await
}

/// Points `_last_checkpoint` at `checkpoint` (its version and part count,
/// with its number of actions), or removes it when there is none. A hint
/// that cannot be repaired is only logged: every load lists the log again.
async fn repair_hint(
    store: &dyn ObjectStore,
    table: &Path,
    checkpoint: Option<(CheckpointRef, usize)>,
    why: &str,
) {
    let path = last_checkpoint_path(table);
    let done = match checkpoint {
        Some((c, size)) => {
            let mut hint = json!({"version": c.version, "size": size});
            if c.parts > 1 {
                hint["parts"] = json!(c.parts);
            }
            store
                .put(&path, PutPayload::from(hint.to_string()))
                .await
                .map(|_| ())
        }
        None => match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        },
    };
    match done {
        Ok(()) => {
            tracing::info!(%table, why, checkpoint = ?checkpoint.map(|(c, _)| c.version), "the Delta log's _last_checkpoint was stale: the log was listed and read, and the hint repaired")
        }
        Err(e) => {
            tracing::warn!(%table, why, error = %e, "the Delta log's _last_checkpoint is stale and could not be repaired; the log is listed at each load until it is")
        }
    }
}

/// The state of checkpoint `from` (version and actions) and the commits
/// `versions` after it, applied in order.
async fn replay(
    store: &dyn ObjectStore,
    table: &Path,
    with_files: bool,
    from: Option<(u64, Vec<Value>)>,
    versions: &[u64],
) -> Result<TableState> {
    let mut state = TableState::default();
    if let Some((c, actions)) = from {
        for action in &actions {
            state.apply(action, with_files);
        }
        state.version = Some(c);
    }
    // By value: a closure over `&u64` makes the future not `Send` for any
    // lifetime, which a spawned fold of the current tables needs.
    let bodies: Vec<Bytes> = futures::stream::iter(versions.iter().copied().map(|v| async move {
        let got = store.get(&commit_path(table, v)).await?;
        Ok::<_, Error>(got.bytes().await?)
    }))
    .buffered(16)
    .try_collect()
    .await?;
    for (v, body) in versions.iter().zip(bodies) {
        for action in parse_commit(&body).map_err(|e| unreadable(table, format!("{v}: {e}")))? {
            state.apply(&action, with_files);
        }
        state.version = Some(*v);
    }
    Ok(state)
}

pub fn parse_commit(body: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| e.to_string()))
        .collect()
}

/// What a put-if-absent of a commit file found.
pub enum Put {
    Written,
    /// The version holds another commit (another writer's, or an earlier
    /// try of ours with other content).
    Taken,
    /// The store's answer was lost and the version could not be read back:
    /// it may hold this commit. Nothing it names may be deleted; the next
    /// load of the log says.
    Unknown(Error),
}

/// Writes commit `version` put-if-absent: one action per line. An
/// uncertain answer (a timeout, a lost connection, "already exists" on a
/// resend of a request that landed) is settled by reading the version
/// back: the same bytes are this commit, written.
pub async fn put_commit(
    store: &dyn ObjectStore,
    table: &Path,
    version: u64,
    actions: &[Value],
) -> Result<Put> {
    let mut body = String::new();
    for a in actions {
        body.push_str(&a.to_string());
        body.push('\n');
    }
    let path = commit_path(table, version);
    match put_if_absent(store, &path, Bytes::from(body)).await {
        Ok(Created::Written) => Ok(Put::Written),
        Ok(Created::Taken(_)) => Ok(Put::Taken),
        Ok(Created::Unknown(e)) => {
            tracing::warn!(%table, version, error = %e, "the Delta commit got no answer and the version cannot be read back: it may have landed");
            Ok(Put::Unknown(e.into()))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
