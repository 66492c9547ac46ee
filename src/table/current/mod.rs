//! Current-state tables (DESIGN.md "Current-state tables"): for each captured
//! table with a primary key, `_current/<db>/<table>/` is a Delta table of the
//! table's rows as of a manifest, folded from the changelog.
//!
//! A fold reads the changelog files that the manifests since the last fold
//! list, applies them per key with the replay rules ([`apply`]) and commits
//! the result in one Delta commit whose `txn` (`appId` [`APP_ID`]) is the
//! manifest seq folded.
//!
//! Layout: each file of a current table is sorted by key, its key range
//! recorded in the `add` action's `tags` (`sluice.first`/`sluice.last`, the
//! key in Arrow's row format, hex). With deletion vectors (`[current]
//! deletion_vectors = "auto"`, [`dv`]) a fold marks the rows that changed
//! keys replace or remove in vectors of the files that hold them and writes
//! the changed rows into new files, so its cost follows the changes; files
//! may then overlap in range, and a purge rewrites files with much deleted
//! and merges small ones (`fold_table::purge`). Without (`"never"`), files
//! hold disjoint key ranges and a fold rewrites the files whose ranges hold
//! changed keys: inserts with an auto-increment key append to the last file
//! until it reaches the target size and then start a new one, updates of
//! recent rows rewrite the last file or two, random updates rewrite many
//! (BENCHMARKS.md has the figures).
//!
//! Crash safety: new files carry the folded seq in their name; a fold first
//! deletes files named for a seq above the table's last fold (a fold that
//! died before its commit), and its commit is put-if-absent.

mod apply;
pub(crate) mod dv;
mod identity;
pub(crate) mod shape;
mod sort;
mod status;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast, interleave_record_batch};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use arrow::row::{RowConverter, Rows, SortField};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::{json, Value};

use super::format::{Commit, Operation, Put, TableFormat, TableState, FORMAT};
use crate::commit::{stored_path, DataFile, Lake, Manifest};
use crate::error::{Error, Result};
use crate::schema::history::TableVersion;

use identity::{Lineage, Lineages, RenameEvent};

pub use apply::{place, FileRange, Place};
pub use status::{current_status, CurrentStatus};

/// The folder of the current tables under the lake root.
pub const CURRENT_DIR: &str = "_current";
/// The `appId` of a current table's `txn` actions; `version` is the manifest seq.
pub const APP_ID: &str = "sluice-current";
/// Test hook: abort after a fold wrote its first file, before its commit
/// (with the value `vectors`: after it wrote its deletion vector file).
pub const ABORT_IN_FOLD: &str = "SLUICE_TEST_ABORT_IN_FOLD";

const TAG_FIRST: &str = "sluice.first";
const TAG_LAST: &str = "sluice.last";
const CONF_VERSION: &str = "sluice.schemaVersion";
const CONF_KEY: &str = "sluice.key";
/// The table property that says a table may have deletion vectors.
const CONF_VECTORS: &str = "delta.enableDeletionVectors";

/// The current table folder of `db.table`.
pub fn current_dir(db: &str, table: &str) -> Path {
    super::names::LakeTable {
        kind: super::names::Kind::Current,
        db: db.to_string(),
        table: table.to_string(),
    }
    .dir()
}

/// One table to fold, with its schema history (oldest first).
#[derive(Debug, Clone)]
pub struct FoldTable {
    pub db: String,
    pub table: String,
    pub versions: Vec<TableVersion>,
}

impl FoldTable {
    pub fn name(&self) -> String {
        format!("{}.{}", self.db, self.table)
    }

    /// The version in force at manifest `seq`, if the table existed.
    fn at(&self, seq: u64) -> Option<&TableVersion> {
        self.versions.iter().rev().find(|v| v.checkpoint <= seq)
    }

    /// Its shape at `seq` if it is live and has a key there.
    fn keyed_at(&self, seq: u64) -> Option<&TableVersion> {
        self.at(seq)
            .filter(|v| !v.dropped && !shape::key_columns(&v.schema).is_empty())
    }
}

/// A fold of every table up to one committed manifest.
pub struct FoldJob {
    pub target: Manifest,
    pub tables: Vec<FoldTable>,
    pub target_file_bytes: u64,
    /// Mark replaced rows in deletion vectors (`[current] deletion_vectors
    /// = "auto"`) instead of rewriting the files that hold them.
    pub deletion_vectors: bool,
    /// A file whose deleted share reaches this is purged.
    pub purge_threshold: f64,
    /// What the changes a fold sorts may hold in memory before a sorted run
    /// goes to disk under `spill_dir`.
    pub memory_budget: usize,
    pub spill_dir: std::path::PathBuf,
    /// `[sink] requests_in_flight`: tables whose logs are read at once, and
    /// small tables folded at once (at most [`SMALL_FOLDS_AT_ONCE`]), each
    /// with that share of the budget.
    pub in_flight: usize,
}

/// The most small tables one fold works on at once.
pub const SMALL_FOLDS_AT_ONCE: usize = 64;

/// What a fold did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FoldReport {
    pub commits: usize,
    pub files_added: usize,
    pub files_removed: usize,
    pub bytes_added: u64,
    pub bytes_removed: u64,
    pub changed_rows: usize,
    /// Sorted runs of changes that went to disk (the fold's memory share
    /// was full).
    pub spilled_runs: usize,
    /// Changes that went through the sorter (rows of the table's files
    /// too, when it is rebuilt); changes that come in key order do not.
    pub rows_sorted: usize,
    /// Manifests read for their changes.
    pub manifests_read: u64,
    /// Rows newly marked deleted in deletion vectors, and the files whose
    /// vectors grew.
    pub rows_marked: u64,
    pub files_marked: usize,
    /// Bytes of the deletion vectors written (into vector files or inline).
    pub vector_bytes: u64,
    /// Files rewritten without their deleted rows (`dataChange: false`).
    pub files_purged: usize,
    /// Rows whose column chunks a first fold copied from the changelog.
    pub rows_copied: u64,
    /// Where a fold's time went: reading (and sorting) its changes,
    /// applying them to the table's files (new files and vectors written),
    /// and the commit.
    pub read_ms: u64,
    pub apply_ms: u64,
    pub commit_ms: u64,
    /// `db.table` of the tables whose fold failed (each logged with its
    /// error): their previous versions stay, the next fold tries again.
    pub failed: Vec<String>,
}

impl FoldReport {
    fn failed(&mut self, table: &str, e: &Error) {
        if e.is_transient() {
            tracing::warn!(table, error = %e, "current table fold failed; the previous version stays, the next fold redoes it");
        } else {
            tracing::error!(table, error = %e, kind = "definite", "current table fold failed; the previous version stays, the next fold tries again");
        }
        self.failed.push(table.to_string());
    }

    fn add(&mut self, o: FoldReport) {
        self.commits += o.commits;
        self.files_added += o.files_added;
        self.files_removed += o.files_removed;
        self.bytes_added += o.bytes_added;
        self.bytes_removed += o.bytes_removed;
        self.changed_rows += o.changed_rows;
        self.spilled_runs += o.spilled_runs;
        self.rows_sorted += o.rows_sorted;
        self.manifests_read += o.manifests_read;
        self.rows_marked += o.rows_marked;
        self.files_marked += o.files_marked;
        self.vector_bytes += o.vector_bytes;
        self.files_purged += o.files_purged;
        self.rows_copied += o.rows_copied;
        self.read_ms += o.read_ms;
        self.apply_ms += o.apply_ms;
        self.commit_ms += o.commit_ms;
        self.failed.extend(o.failed);
    }
}

/// The manifest seq a current table reflects (0: none).
pub fn folded_seq(state: &TableState) -> u64 {
    state
        .txns
        .get(APP_ID)
        .and_then(|t| t.get("version"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// How a fold's commit that lost its version to another writer ends.
const TAKEN: &str = " is taken by another writer";
/// Folds of one table whose version another writer took, at most.
const FOLD_TRIES: u32 = 4;

/// The changelog of the tables since their last folds.
#[derive(Default)]
struct Changes {
    /// The files of each table, with the seq of the manifest that lists them.
    files: HashMap<String, Vec<(u64, DataFile)>>,
    /// The cursor's `next_seq` of each manifest with changes: its rows are
    /// below it and at or above the previous such manifest's (an idle
    /// manifest between has no rows).
    next_seqs: std::collections::BTreeMap<u64, i64>,
    /// RENAME TABLE, by `db.table`, in stream order.
    renames: Vec<RenameEvent>,
    /// The manifests read to find them.
    reads: u64,
}

/// Where the fold of a table begins.
struct Plan {
    lineage: Lineage,
    start: Start,
    /// The manifest seq the start reflects: the changes after it are applied.
    after: u64,
}

/// Plans the fold of the table `name` holds at `s1`: it starts from the
/// current table of the name it had latest that still shows it (its own,
/// or one it was renamed from), else from nothing at its beginning.
fn plan(
    lineages: &Lineages<'_>,
    name: &str,
    states: &HashMap<String, TableState>,
    mark: u64,
) -> Option<Plan> {
    let lineage = lineages.lineage(name)?;
    let mut best: Option<(u64, &str)> = None;
    let mut names: Vec<&str> = lineage.members.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    for n in names {
        let Some(state) = states.get(n).filter(|s| s.version.is_some()) else {
            continue;
        };
        let shows = folded_seq(state).max(mark);
        if !lineages.held_at(&lineage, n, shows) {
            continue;
        }
        // The latest start; the table's own current table on a tie (no copy).
        if best.is_none_or(|(b, bn)| shows > b || (shows == b && n == name && bn != name)) {
            best = Some((shows, n));
        }
    }
    let (start, after) = match best {
        Some((after, n)) if n == name => (Start::Own, after),
        Some((after, n)) => (Start::Copy(n.to_string()), after),
        None => (Start::Empty, lineage.began_after()),
    };
    Some(Plan {
        lineage,
        start,
        after,
    })
}

/// Folds every table of `job` up to `job.target`. A table whose fold fails
/// keeps its previous version; the error of the first is returned after the
/// others are folded.
pub async fn fold(store: Arc<dyn ObjectStore>, job: FoldJob) -> Result<FoldReport> {
    let s1 = job.target.seq;
    let mark = read_mark(store.as_ref(), s1).await;
    if mark == s1 && s1 > 0 {
        // The last complete fold reached the target: every current table
        // holds every change up to it. An idle start of 10,000 tables read
        // every table's log to learn that (1.2 s).
        return Ok(FoldReport::default());
    }
    let mut states: HashMap<String, TableState> = HashMap::new();
    let mut from = u64::MAX;
    // Every table's log, several read at once.
    let loaded: Vec<TableState> = futures::stream::iter(&job.tables)
        .map(|t| {
            let store = store.as_ref();
            async move {
                FORMAT
                    .load(store, &current_dir(&t.db, &t.table), true)
                    .await
            }
        })
        .buffered(job.in_flight.max(1))
        .try_collect()
        .await?;
    for (t, state) in job.tables.iter().zip(loaded) {
        let folded = folded_seq(&state);
        // Where the changes a table lacks begin: after its last fold, and
        // none before the last complete fold (`mark`). A table without a
        // current table yet needs its whole changelog if it has a key now
        // (once: it gets one), and the changes since it appeared if it came
        // after the last complete fold; else it never gets one (no key) and
        // needs nothing. The plans below read further back when a table
        // needs it (one renamed from a name without a current table).
        let first = t
            .versions
            .first()
            .map_or(s1, |v| v.checkpoint.saturating_sub(1));
        let start = match state.version {
            Some(_) => folded.max(mark),
            None if t.keyed_at(s1).is_some() => first,
            None if first >= mark => first,
            None => s1,
        };
        if start < s1 {
            from = from.min(start);
        }
        states.insert(t.name(), state);
    }
    let mut report = FoldReport::default();
    let needs_end = job
        .tables
        .iter()
        .any(|t| t.keyed_at(s1).is_none() && states.get(&t.name()).is_some_and(must_end));
    if from == u64::MAX && !needs_end {
        return Ok(report);
    }
    let by_name: HashMap<String, &FoldTable> = job.tables.iter().map(|t| (t.name(), t)).collect();
    let live: Vec<&FoldTable> = job
        .tables
        .iter()
        .filter(|t| t.keyed_at(s1).is_some())
        .collect();
    let mut from = from.min(s1);
    // The renames read decide where each table starts; a start before the
    // manifests read needs them too.
    let (changes, plans) = loop {
        let changes = read_changes(&store, &job.target, from).await?;
        let lineages = Lineages::new(&by_name, s1, &changes.renames);
        let plans: Vec<(&FoldTable, Option<Plan>)> = live
            .iter()
            .map(|t| (*t, plan(&lineages, &t.name(), &states, mark)))
            .collect();
        let needed = plans
            .iter()
            .filter_map(|(_, p)| p.as_ref().map(|p| p.after))
            .min()
            .unwrap_or(from);
        if needed >= from {
            break (changes, plans);
        }
        from = needed;
    };
    report.manifests_read = changes.reads;
    let ctx = Ctx {
        store: store.clone(),
        s1,
        target: &job.target,
        target_bytes: job.target_file_bytes.max(1),
        deletion_vectors: job.deletion_vectors,
        purge_threshold: job.purge_threshold,
        budget: job.memory_budget,
        spill_root: job.spill_dir.clone(),
    };
    // Every table starts from the current tables as they were before this
    // fold (a swap copies each from the other's previous version), so the
    // tables fold independently: the small ones (their changes and files
    // fit many times in a slice of the budget) several at once, each with
    // its slice; the others one at a time with the whole budget.
    let at_once = job.in_flight.clamp(1, SMALL_FOLDS_AT_ONCE);
    let slice = ctx.budget / at_once;
    let (small, large): (Vec<_>, Vec<_>) = plans
        .into_iter()
        .filter_map(|(t, plan)| plan.map(|p| (t, p)))
        .partition(|(t, plan)| {
            at_once > 1 && fold_bytes(&changes, plan, &states, &t.name()) * 16 <= slice as u64
        });
    let small_ctx = Ctx {
        budget: slice,
        ..ctx.clone()
    };
    let small_done: Vec<(String, Result<FoldReport>)> = futures::stream::iter(small)
        .map(|(t, plan)| fold_one(&small_ctx, t, plan, &changes, &by_name, &states))
        .buffered(at_once)
        .collect()
        .await;
    let mut done = small_done;
    for (t, plan) in large {
        done.push(fold_one(&ctx, t, plan, &changes, &by_name, &states).await);
    }
    for (name, result) in done {
        match result {
            Ok(r) => report.add(r),
            Err(e) => report.failed(&name, &e),
        }
    }
    // Dropped tables (and tables that lost their key) end with an empty version.
    for t in job.tables.iter().filter(|t| t.keyed_at(s1).is_none()) {
        match end_table(&ctx, t).await {
            Ok(r) => report.add(r),
            Err(e) => report.failed(&t.name(), &e),
        }
    }
    if report.failed.is_empty() {
        write_mark(store.as_ref(), s1).await;
    }
    Ok(report)
}

/// Folds `t` as `plan` says, again on top of another writer's commit that
/// came first (up to [`FOLD_TRIES`] times). Its name and what it did.
async fn fold_one(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    plan: Plan,
    changes: &Changes,
    by_name: &HashMap<String, &FoldTable>,
    states: &HashMap<String, TableState>,
) -> (String, Result<FoldReport>) {
    let name = t.name();
    let files = match lineage_files(changes, &plan, by_name) {
        Ok(files) => files,
        Err(e) => return (name, Err(e)),
    };
    let mut own = states.get(&name).cloned().unwrap_or_default();
    let mut tries = 0;
    loop {
        let base = match &plan.start {
            Start::Own => Base::Own,
            Start::Empty => Base::Empty,
            Start::Copy(from) => {
                let src = &by_name[from];
                Base::Copy {
                    dir: current_dir(&src.db, &src.table),
                    state: Box::new(states.get(from).cloned().unwrap_or_default()),
                    name: from.clone(),
                }
            }
        };
        let result = fold_table(
            ctx,
            &plan.lineage,
            own,
            &files,
            base,
            plan.after,
            &changes.next_seqs,
        )
        .await;
        // Another writer (OPTIMIZE, VACUUM, SET TBLPROPERTIES, a
        // checkpoint) committed first: fold again on top of it.
        tries += 1;
        match result {
            Err(Error::Lake(m)) if m.ends_with(TAKEN) && tries < FOLD_TRIES => {
                tracing::info!(table = %name, "another writer committed to the current table during the fold; folding again on top of it");
                let dir = current_dir(&t.db, &t.table);
                own = match FORMAT.load(ctx.store.as_ref(), &dir, true).await {
                    Ok(state) => state,
                    Err(e) => return (name, Err(e)),
                };
            }
            other => return (name, other),
        }
    }
}

/// The bytes a fold of `name` as `plan` says reads: its changelog files
/// after the plan's start and the live files of the table it starts from.
fn fold_bytes(
    changes: &Changes,
    plan: &Plan,
    states: &HashMap<String, TableState>,
    name: &str,
) -> u64 {
    let changed: u64 = plan
        .lineage
        .members
        .iter()
        .flat_map(|(n, _)| changes.files.get(n).into_iter().flatten())
        .filter(|(seq, _)| *seq > plan.after)
        .map(|(_, f)| f.bytes)
        .sum();
    let base = match &plan.start {
        Start::Own => states.get(name),
        Start::Copy(from) => states.get(from),
        Start::Empty => None,
    };
    let live: u64 = base
        .into_iter()
        .flat_map(|s| s.files.values())
        .map(|add| add["size"].as_u64().unwrap_or(0))
        .sum();
    changed + live
}

/// The changelog files of a planned table after its start, from the folders
/// of every name it had, each file with its version renumbered as in the
/// lineage.
fn lineage_files(
    changes: &Changes,
    plan: &Plan,
    tables: &HashMap<String, &FoldTable>,
) -> Result<Vec<(u64, DataFile)>> {
    let mut names: Vec<&str> = plan
        .lineage
        .members
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        for (seq, f) in changes.files.get(name).into_iter().flatten() {
            if *seq <= plan.after {
                continue;
            }
            if let Some(v) = plan.lineage.renumbered(name, f.schema_version) {
                let mut f = f.clone();
                f.schema_version = v;
                out.push((*seq, f));
            } else if !tables.get(name).is_some_and(|t| {
                t.versions
                    .iter()
                    .any(|v| v.schema.version == f.schema_version)
            }) {
                return Err(Error::Lake(format!(
                    "changelog file {} of {name} has schema version {}, which the schema history of {name} does not hold: the state dir belongs to another lake; point [state] dir at this lake's",
                    f.path, f.schema_version
                )));
            }
        }
    }
    Ok(out)
}

/// Written after a fold in which every table succeeded: every current table
/// holds every change up to this manifest seq (one whose own `txn` is older
/// had none since), so the next fold reads only the manifests after it —
/// not all those since the change of the least changed table.
const FOLDED_MARK: &str = "_current/_folded.json";

/// The seq of the last complete fold; 0 when there is none or it is not
/// below `s1` (a lake that does not match it).
async fn read_mark(store: &dyn ObjectStore, s1: u64) -> u64 {
    let Ok(got) = store.get(&Path::from(FOLDED_MARK)).await else {
        return 0;
    };
    let Ok(bytes) = got.bytes().await else {
        return 0;
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["seq"].as_u64())
        .filter(|seq| *seq <= s1)
        .unwrap_or(0)
}

/// The manifest seq of the last fold in which every table succeeded (0:
/// none): the folds never read the changelog files up to it again.
pub async fn last_complete_fold(store: &dyn ObjectStore) -> u64 {
    read_mark(store, u64::MAX).await
}

async fn write_mark(store: &dyn ObjectStore, s1: u64) {
    let body = json!({"seq": s1}).to_string();
    if let Err(e) = store
        .put(
            &Path::from(FOLDED_MARK),
            PutPayload::from(body.into_bytes()),
        )
        .await
    {
        tracing::warn!(error = %e, "could not record the last complete fold; the next one reads more manifests");
    }
}

#[derive(Clone)]
struct Ctx<'a> {
    store: Arc<dyn ObjectStore>,
    s1: u64,
    target: &'a Manifest,
    target_bytes: u64,
    deletion_vectors: bool,
    purge_threshold: f64,
    budget: usize,
    spill_root: std::path::PathBuf,
}

/// The changelog files of the manifests after `from` up to `target`, by table.
async fn read_changes(
    store: &Arc<dyn ObjectStore>,
    target: &Manifest,
    from: u64,
) -> Result<Changes> {
    let lake = Lake::new(store.clone());
    let mut out = Changes::default();
    // Idle manifests (no files, no DDL) are not read: an idle spell costs
    // the fold nothing. Retention keeps those after the last complete fold.
    let (manifests, reads) = lake.changes_after(from, target).await?;
    out.reads = reads;
    for m in manifests {
        out.next_seqs.insert(m.seq, m.cursor.next_seq);
        for f in m.files {
            let Some((db, table)) = super::table_names(&super::table_dir(&f)) else {
                continue;
            };
            out.files
                .entry(format!("{db}.{table}"))
                .or_default()
                .push((m.seq, f));
        }
        for entry in &m.ddl {
            let (Some(file), Some(pos)) = (
                entry["position"]["file"].as_str(),
                entry["position"]["pos"].as_u64(),
            ) else {
                continue;
            };
            for r in entry["renamed"].as_array().into_iter().flatten() {
                if let (Some(from), Some(to)) = (r["from"].as_str(), r["to"].as_str()) {
                    out.renames.push(RenameEvent {
                        from: from.to_string(),
                        to: to.to_string(),
                        file: file.to_string(),
                        pos,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Whether a current table still has to end: it has live files, or it is
/// empty and sluice's newest commit of it is not an end (an empty table
/// ends too, so that a catalog drops its entry). Once its newest commit is
/// out of sight (in a checkpoint) an empty table counts as ended.
fn must_end(state: &TableState) -> bool {
    !state.files.is_empty()
        || state
            .last_info
            .as_ref()
            .is_some_and(|info| !super::format::ends(info))
}

/// A commit that removes every file: DROP TABLE (or a RENAME away, or a key
/// dropped) ends the current table.
async fn end_table(ctx: &Ctx<'_>, t: &FoldTable) -> Result<FoldReport> {
    let dir = current_dir(&t.db, &t.table);
    let state = FORMAT.load(ctx.store.as_ref(), &dir, true).await?;
    let Some(version) = state.version else {
        return Ok(FoldReport::default());
    };
    if !must_end(&state) {
        return Ok(FoldReport::default());
    }
    let mut report = FoldReport::default();
    let mut commit = fold_commit(ctx, t, version + 1, super::format::FOLD_END);
    for (path, add) in &state.files {
        report.files_removed += 1;
        report.bytes_removed += add["size"].as_u64().unwrap_or(0);
        commit.files.push(remove_action(path, add));
    }
    write(ctx, &dir, &commit).await.map_err(|u| u.error)?;
    report.commits = 1;
    Ok(report)
}

/// The commit at `version` of a fold (`kind`: "fold", "purge", "end") of
/// `t`'s changes up to the fold's target, with no files yet.
fn fold_commit(ctx: &Ctx<'_>, t: &FoldTable, version: u64, kind: &str) -> Commit {
    let mut commit = Commit::new(
        version,
        Operation::Overwrite,
        json!({
            "seq": ctx.s1,
            "table": t.name(),
            "fold": kind,
            "committed_at": ctx.target.committed_at,
            "cursor": ctx.target.cursor,
        }),
    );
    commit.seq = Some(ctx.s1);
    commit.app_id = APP_ID;
    commit
}

fn remove_action(path: &str, add: &Value) -> Value {
    remove_with(path, add, true)
}

/// The `remove` of a live `add` (with its deletion vector, which names the
/// file's rows that were live), changing data or not.
pub(crate) fn remove_with(path: &str, add: &Value, data_change: bool) -> Value {
    let mut remove = json!({
        "path": path,
        "deletionTimestamp": chrono::Utc::now().timestamp_millis(),
        "dataChange": data_change,
        "extendedFileMetadata": true,
        "partitionValues": {},
        "size": add["size"],
    });
    if !add["deletionVector"].is_null() {
        remove["deletionVector"] = add["deletionVector"].clone();
    }
    json!({ "remove": remove })
}

/// A fold's commit that did not happen, or may have.
pub(super) struct Uncommitted {
    pub error: Error,
    /// The store's answer was lost and the version could not be read
    /// back: it may name this fold's files, so none may be deleted (the
    /// next fold reads the log and knows).
    pub may_have_landed: bool,
}

impl From<Error> for Uncommitted {
    fn from(error: Error) -> Self {
        Uncommitted {
            error,
            may_have_landed: false,
        }
    }
}

/// Writes a fold's `commit`; the upkeep due after it follows.
async fn write(ctx: &Ctx<'_>, dir: &Path, commit: &Commit) -> std::result::Result<(), Uncommitted> {
    let version = commit.version;
    match FORMAT.commit(ctx.store.as_ref(), dir, commit).await? {
        Put::Written => {}
        Put::Taken => {
            return Err(Error::Lake(format!(
                "current table {dir}: Delta version {version}{TAKEN}"
            ))
            .into())
        }
        Put::Unknown(error) => {
            return Err(Uncommitted {
                error,
                may_have_landed: true,
            })
        }
    }
    FORMAT.maintain(ctx.store.as_ref(), dir, version).await;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The seq in a current table file's name `current-<seq>-<n>-<id>.parquet` (not `part-`: the changelog's clean-up would take them for its own).
fn file_seq(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("current-")?;
    rest.get(..20)?.parse().ok()
}

/// Deletes files of folds that never committed: data and deletion vector
/// files named for a seq after the last fold (`folded`), and those named
/// for the last fold that its log (`state`) does not know (a purge after
/// that fold that died before its commit).
async fn remove_unfinished(
    store: &dyn ObjectStore,
    dir: &Path,
    folded: u64,
    state: &TableState,
) -> Result<usize> {
    let listed = store.list_with_delimiter(Some(dir)).await?;
    let mut known: std::collections::HashSet<String> = std::collections::HashSet::new();
    for a in state.files.values().chain(state.tombstones.values()) {
        known.extend(a["path"].as_str().map(str::to_string));
        known.extend(dv::descriptor_file(&a["deletionVector"]));
    }
    let mut removed = 0;
    for o in listed.objects {
        let Some(name) = o.location.filename() else {
            continue;
        };
        let Some(seq) = file_seq(name).or_else(|| dv::file_seq(name)) else {
            continue;
        };
        if seq > folded || (seq == folded && state.version.is_some() && !known.contains(name)) {
            store.delete(&o.location).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

mod fold_table;
pub(crate) use fold_table::delta_file_properties;
use fold_table::{fold_table, Base};

/// What a planned fold starts from.
enum Start {
    /// The name's own current table.
    Own,
    /// The current table of another name the table had (`db.table`).
    Copy(String),
    /// Nothing: the table is read from its beginning.
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::log;

    #[test]
    fn names_and_hex_round_trip() {
        assert_eq!(unhex(&hex(&[0, 1, 255])), Some(vec![0, 1, 255]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(
            file_seq("current-00000000000000000042-00001-abc.parquet"),
            Some(42)
        );
        assert_eq!(file_seq("other.parquet"), None);
        assert_eq!(current_dir("a/b", "t").as_ref(), "_current/a%2Fb/t");
    }

    /// A file's key range lives in its `add` tags: a Delta checkpoint must
    /// keep them, or the next fold would rebuild the whole table.
    #[tokio::test]
    async fn key_ranges_survive_a_delta_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let table = current_dir("db", "t");
        let add = json!({"add": {"path": "current-1.parquet", "partitionValues": {}, "size": 10,
            "modificationTime": 1, "dataChange": true, "stats": "{\"numRecords\":1}",
            "tags": {TAG_FIRST: "0a", TAG_LAST: "ff01"}}});
        let txn = json!({"txn": {"appId": APP_ID, "version": 7, "lastUpdated": 1}});
        log::put_commit(store.as_ref(), &table, 0, &[txn, add])
            .await
            .unwrap();
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        log::write_checkpoint(store.as_ref(), &table, &state, 0, 0)
            .await
            .unwrap();
        let again = log::load(store.as_ref(), &table, true).await.unwrap();
        let tags = &again.files["current-1.parquet"]["tags"];
        assert_eq!(tags[TAG_FIRST], "0a");
        assert_eq!(tags[TAG_LAST], "ff01");
        assert_eq!(folded_seq(&again), 7);
    }

    #[test]
    fn a_dropped_table_ends_once_with_files_or_without() {
        let with_info = |fold: &str, files: usize| TableState {
            version: Some(3),
            last_info: Some(serde_json::json!({"seq": 9, "fold": fold})),
            files: (0..files)
                .map(|i| (format!("f{i}.parquet"), serde_json::json!({"size": 1})))
                .collect(),
            ..TableState::default()
        };
        // Live files always end, whatever came before.
        assert!(must_end(&with_info("fold", 2)));
        assert!(must_end(&with_info(super::super::format::FOLD_END, 1)));
        // An emptied table ends too, once: its end commit is the newest.
        assert!(must_end(&with_info("fold", 0)));
        assert!(must_end(&with_info("purge", 0)));
        assert!(!must_end(&with_info(super::super::format::FOLD_END, 0)));
        // Its newest commit out of sight (in a checkpoint): no end every fold.
        let unknown = TableState {
            version: Some(12),
            ..TableState::default()
        };
        assert!(!must_end(&unknown));
    }
}
