//! The table format: the one interface through which everything above it
//! (the checkpoint's commits, the folds, compaction, rewrites, erasures,
//! repairs and `status`) reads and writes a table's metadata. The Delta log
//! (`log`) is its implementation; nothing outside `format` and `log`
//! reads or writes `_delta_log/` (the `layers` test keeps it so).
//!
//! What crosses it:
//! - [`TableFormat::load`]: the table as its newest version holds it — the
//!   version, the manifest seq whose files it holds last, its schema and,
//!   when asked, its live files and tombstones.
//! - [`TableFormat::commit`]: a [`Commit`] — what kind of change it is
//!   ([`Operation`]), sluice's facts about it, the manifest seq it completes,
//!   a new schema, and the files it adds and removes (a checkpoint's adds, a
//!   fold's adds, removes and deletion vectors, a rewrite's or a
//!   compaction's swaps, an erasure's copies) — written put-if-absent at its
//!   version.
//! - [`TableFormat::maintain`]: the upkeep due after a version (a Delta
//!   checkpoint, deleting what the table no longer needs).
//! - [`TableFormat::redact_bounds`]: the table's history forgets what it
//!   recorded of files no longer live (`sluice forget`).
//!
//! With `[iceberg] enabled`, each Delta commit that lands is followed by
//! the Iceberg snapshot of the same version (`iceberg::follow`), built from
//! the commit or, when the Iceberg side is not in memory, from the log;
//! with a `[catalog]`, then by the move of the table's catalog entry.
//!
//! A commit's files are `add` and `remove` actions as the Delta protocol
//! spells them (path, size, stats, deletion vector): that is the
//! vocabulary the lake's files were described in from the start, and a
//! second format reads it from the commit.

use std::future::Future;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};

use super::{catalog, iceberg, log};
use crate::error::Result;

pub use log::{Put, TableState, APP_ID};

/// What kind of change a commit makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// New rows: a checkpoint's files of the table.
    Append,
    /// Files replaced by others: a fold, a purge, a copy in a new type.
    Overwrite,
    /// Files joined into larger ones with the same rows.
    Compact { target_bytes: u64 },
    /// Rows erased by `sluice forget`.
    Erase,
}

/// One commit of a table.
#[derive(Debug, Clone)]
pub struct Commit {
    /// The version it takes: one after the version it was made on.
    pub version: u64,
    pub now_ms: i64,
    pub operation: Operation,
    /// sluice's facts about it (the manifest seq, the table, the cursor, what
    /// a fold or a compaction did): a repair tells a lagging table by them.
    pub facts: Value,
    /// The manifest seq whose changes the table holds after it; `None` when
    /// the commit keeps the rows it had (a compaction, a rewrite, an erasure).
    pub seq: Option<u64>,
    /// Whose seq it is: [`APP_ID`] for a changelog table, the fold's own
    /// (`current::APP_ID`) for a current table.
    pub app_id: &'static str,
    /// A raised protocol (a Delta reader and writer version).
    pub protocol: Option<Value>,
    /// New table metadata (the schema, a table's first version).
    pub metadata: Option<Value>,
    /// The files it adds and removes, as `{"add": …}` and `{"remove": …}`.
    pub files: Vec<Value>,
}

impl Commit {
    /// Whether it ends its table: a current table's commit for a DROP TABLE
    /// or a RENAME away (its catalog entry goes).
    pub fn ends(&self) -> bool {
        ends(&self.facts)
    }

    /// A commit of `operation` at `version`, with no files yet.
    pub fn new(version: u64, operation: Operation, facts: Value) -> Self {
        Commit {
            version,
            now_ms: chrono::Utc::now().timestamp_millis(),
            operation,
            facts,
            seq: None,
            app_id: APP_ID,
            protocol: None,
            metadata: None,
            files: Vec::new(),
        }
    }
}

/// The `fold` fact of a commit that ends a current table.
pub const FOLD_END: &str = "end";

/// Whether sluice's facts of a commit say it ends its table.
pub fn ends(facts: &Value) -> bool {
    facts["fold"] == FOLD_END
}

/// A table format: how a table's versions are read and written.
pub trait TableFormat: Sync {
    /// The table at `dir` as its newest version holds it; with `with_files`
    /// its live files and tombstones too.
    fn load(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        with_files: bool,
    ) -> impl Future<Output = Result<TableState>> + Send;

    /// Writes `commit` at its version if no one has.
    fn commit(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        commit: &Commit,
    ) -> impl Future<Output = Result<Put>> + Send;

    /// After `version` of `dir` committed: the upkeep due then. A failure is
    /// logged, never returned (the next one tries again).
    fn maintain(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        version: u64,
    ) -> impl Future<Output = ()> + Send;

    /// Rewrites the table's history up to `state` so that it holds no column
    /// bounds of files `state` does not hold live. How many files it rewrote.
    fn redact_bounds(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        state: &TableState,
    ) -> impl Future<Output = Result<usize>> + Send;
}

/// The Delta Lake log of a table folder.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delta;

/// The format every table of the lake is written in.
pub const FORMAT: Delta = Delta;

impl TableFormat for Delta {
    async fn load(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        with_files: bool,
    ) -> Result<TableState> {
        log::load(store, dir, with_files).await
    }

    async fn commit(&self, store: &dyn ObjectStore, dir: &Path, commit: &Commit) -> Result<Put> {
        let put = log::put_commit(store, dir, commit.version, &delta_actions(commit)).await?;
        if let (Put::Written, Some(settings)) = (&put, iceberg::settings()) {
            let head =
                iceberg::follow(settings, store, dir, commit, || log::load(store, dir, true)).await;
            if let (Some(head), Some(catalog)) = (head, catalog::get()) {
                catalog.follow(settings, dir, head).await;
            }
        }
        Ok(put)
    }

    async fn maintain(&self, store: &dyn ObjectStore, dir: &Path, version: u64) {
        log::checkpoint_if_due(store, dir, version).await
    }

    async fn redact_bounds(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        state: &TableState,
    ) -> Result<usize> {
        super::redact::redact_bounds(store, dir, state).await
    }
}

/// Brings what follows the Delta log of `dir` (its Iceberg metadata, when
/// `[iceberg] enabled`) up to the log's latest version: at start, after a
/// crash between a Delta commit and what follows it. A failure is logged.
/// The Iceberg head after it, for the catalog.
pub async fn catch_up(store: &dyn ObjectStore, dir: &Path) -> Option<iceberg::Head> {
    let settings = iceberg::settings()?;
    let next_commit = |version: u64| async move {
        match store.head(&log::commit_path(dir, version)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    iceberg::catch_up(settings, store, dir, next_commit, || {
        log::load(store, dir, true)
    })
    .await
}

/// The actions of `commit` in the order sluice writes them: `commitInfo`,
/// `txn`, `protocol`, `metaData`, then the files.
fn delta_actions(commit: &Commit) -> Vec<Value> {
    let now = commit.now_ms;
    let (operation, parameters, blind_append) = match commit.operation {
        Operation::Append => ("WRITE", json!({"mode": "Append"}), true),
        Operation::Overwrite => ("WRITE", json!({"mode": "Overwrite"}), false),
        Operation::Compact { target_bytes } => (
            "OPTIMIZE",
            json!({"targetSize": target_bytes.to_string()}),
            false,
        ),
        Operation::Erase => ("DELETE", json!({"predicate": "sluice forget"}), false),
    };
    let mut actions = Vec::with_capacity(4 + commit.files.len());
    actions.push(json!({"commitInfo": {
        "timestamp": now,
        "operation": operation,
        "operationParameters": parameters,
        "isBlindAppend": blind_append,
        "engineInfo": format!("sluice/{}", env!("CARGO_PKG_VERSION")),
        "sluice": commit.facts,
    }}));
    if let Some(seq) = commit.seq {
        actions.push(json!({"txn": {"appId": commit.app_id, "version": seq, "lastUpdated": now}}));
    }
    if let Some(p) = &commit.protocol {
        actions.push(json!({ "protocol": p }));
    }
    if let Some(md) = &commit.metadata {
        actions.push(json!({ "metaData": md }));
    }
    actions.extend(commit.files.iter().cloned());
    actions
}

/// The facts of a table's last manifest commit, which a commit that keeps
/// the table's rows (a compaction) or only takes some away (an erasure)
/// carries over: a repair tells a lagging log by them.
pub(crate) fn carried_facts(state: &TableState) -> Value {
    let last = state.last_info.clone().unwrap_or_else(|| json!({}));
    let mut info = json!({});
    for key in ["seq", "table", "committed_at", "cursor", "rows"] {
        if let Some(v) = last.get(key) {
            info[key] = v.clone();
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_written_in_the_order_and_words_of_the_delta_protocol() {
        let mut c = Commit::new(3, Operation::Append, json!({"seq": 9}));
        c.now_ms = 5;
        c.seq = Some(9);
        c.metadata = Some(json!({"id": "x"}));
        c.files = vec![json!({"add": {"path": "a.parquet"}})];
        let a = delta_actions(&c);
        assert_eq!(a[1]["txn"]["appId"], "sluice");
        c.app_id = "sluice-current";
        let a = delta_actions(&c);
        let kinds: Vec<&str> = a
            .iter()
            .map(|v| v.as_object().unwrap().keys().next().unwrap().as_str())
            .collect();
        assert_eq!(kinds, ["commitInfo", "txn", "metaData", "add"]);
        assert_eq!(a[0]["commitInfo"]["operationParameters"]["mode"], "Append");
        assert_eq!(a[0]["commitInfo"]["isBlindAppend"], true);
        assert_eq!(a[0]["commitInfo"]["sluice"]["seq"], 9);
        assert_eq!(
            a[1]["txn"],
            json!({"appId": "sluice-current", "version": 9, "lastUpdated": 5})
        );

        let mut c = Commit::new(4, Operation::Compact { target_bytes: 64 }, json!({}));
        c.protocol = Some(json!({"minReaderVersion": 3}));
        let a = delta_actions(&c);
        assert_eq!(a.len(), 2, "no txn: a compaction keeps the table's seq");
        assert_eq!(a[0]["commitInfo"]["operation"], "OPTIMIZE");
        assert_eq!(
            a[0]["commitInfo"]["operationParameters"]["targetSize"],
            "64"
        );
        assert_eq!(a[1]["protocol"]["minReaderVersion"], 3);

        let a = delta_actions(&Commit::new(5, Operation::Erase, json!({})));
        assert_eq!(a[0]["commitInfo"]["operation"], "DELETE");
        assert_eq!(a[0]["commitInfo"]["isBlindAppend"], false);
        let a = delta_actions(&Commit::new(5, Operation::Overwrite, json!({})));
        assert_eq!(
            a[0]["commitInfo"]["operationParameters"]["mode"],
            "Overwrite"
        );
    }
}
