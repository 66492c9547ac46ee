//! Changelog compaction (DESIGN.md "A lake that lasts"): the small files of
//! a changelog table are rewritten into files of about `target_file_size`,
//! rows in `_seq` order, in one Delta commit with `dataChange: false` that
//! removes the small files and adds the new ones (same rows; stats from the
//! new files' footers). A busy table then holds O(its bytes / target) live
//! files instead of one per checkpoint.
//!
//! The manifests stay the commit of record and keep naming the small files,
//! which stay in the store (a Delta `remove` only; files removed from a
//! Delta table are deleted later by retention, if at all). Nothing that
//! reads manifests' files needs the new files: the repair reads only
//! manifests after its log's last, and the fold only those after the last
//! complete fold, whose files compaction never takes.
//!
//! New files go under `<db>/<table>/_compacted/` as
//! `compacted-<first _seq>-<writer>-<random>.parquet`: a folder the
//! manifests never use (the start's orphan clean-up of `part-<seq>` files
//! never lists it) and names no other writer makes. A crash between writing
//! them and the commit leaves files no version names: the next compaction
//! of the table deletes those of other writers (earlier runs, fenced by
//! this run's first manifest), and a run deletes its own when a commit
//! does not happen.
//!
//! The commit races the stream's Delta commits of the same table: it is
//! put-if-absent at the version after the newest, and on a conflict the log
//! is read again and the commit made on top, as long as every file it
//! removes is still live (a type rewrite may have replaced them: then the
//! new files are deleted and the table waits for the next round). The
//! stream's commit that loses such a race reads the log again and commits
//! on top likewise, so no manifest's commit is lost.

mod merge;
pub mod plan;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::AsyncArrowWriter;
use serde_json::{json, Value};

use super::format::{carried_facts, Commit, Operation, Put, TableFormat, TableState, FORMAT};
use crate::commit::Lake;
use crate::error::{Error, Result};
use merge::{Input, SeqMerge};
use plan::{Group, Limits, LiveFile};

/// The folder of a table's compacted files.
pub const COMPACTED_DIR: &str = "_compacted";
/// Test hook: abort after a compaction wrote its first file, before its commit.
pub const ABORT_IN_COMPACTION: &str = "SLUICE_TEST_ABORT_IN_COMPACTION";
/// Input files of one compaction commit at most.
const MAX_INPUTS: usize = 10_000;
/// How many times a version taken by the stream's commits is read again.
const CONFLICT_TRIES: u32 = 20;
/// Parts of a new file's multipart upload (S3's least part size) and how
/// many of them are in flight at once.
const UPLOAD_PART_BYTES: usize = 5 << 20;
const UPLOAD_CONCURRENCY: usize = 2;

/// What a compaction of one table needs.
#[derive(Debug, Clone)]
pub struct CompactionJob {
    pub target_bytes: u64,
    pub min_age: Duration,
    /// This run's writer id: it names the new files.
    pub writer: String,
    /// Current-state tables are on: only files up to the last complete fold
    /// are taken.
    pub after_fold: bool,
    /// The memory the merge may hold (the fold's share, which compaction
    /// takes turns with).
    pub memory_budget: usize,
    /// Set at shutdown: the compaction in hand stops, without a commit.
    pub stop: Arc<AtomicBool>,
}

/// What a compaction of one table did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    pub files_removed: usize,
    pub files_added: usize,
    pub bytes_removed: u64,
    pub bytes_added: u64,
    /// Compacted files of crashed runs that no version names, deleted.
    pub orphans_removed: usize,
    /// The table's live files after it (0 when unknown).
    pub live_files: usize,
    /// Files were left for another round at once.
    pub more: bool,
}

/// The name of a compacted file whose first row has `_seq` `first_seq`.
fn compacted_name(first_seq: i64, writer: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "compacted-{first_seq:020}-{writer}-{}.parquet",
        &random[..8]
    )
}

/// The writer id in a compacted file's name, `None` for any other name.
pub(crate) fn compacted_writer(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("compacted-")?.strip_suffix(".parquet")?;
    let mut parts = rest.split('-');
    let (seq, writer, random) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = seq.len() == 20
        && seq.bytes().all(|b| b.is_ascii_digit())
        && !writer.is_empty()
        && random.len() == 8
        && parts.next().is_none();
    ok.then_some(writer)
}

/// Deletes the compacted files of `dir` that no version of its log names
/// (live or a recent tombstone), except this run's own.
async fn remove_orphans(
    store: &dyn ObjectStore,
    dir: &Path,
    state: &TableState,
    writer: &str,
) -> Result<usize> {
    let folder = dir.clone().join(COMPACTED_DIR);
    let listed: Vec<_> = store.list(Some(&folder)).try_collect().await?;
    let mut removed = 0;
    for meta in listed {
        let Some(name) = meta.location.filename() else {
            continue;
        };
        let rel = format!("{COMPACTED_DIR}/{name}");
        let Some(by) = compacted_writer(name) else {
            continue;
        };
        if by == writer || state.files.contains_key(&rel) || state.tombstones.contains_key(&rel) {
            continue;
        }
        match store.delete(&meta.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => removed += 1,
            Err(e) => return Err(e.into()),
        }
    }
    if removed > 0 {
        tracing::info!(table = %dir, files = removed, "removed compacted files that no Delta version names (a compaction that a crash ended)");
    }
    Ok(removed)
}

/// The `_seq` below which rows are folded for good, or `None` when nothing is.
async fn folded_below(store: &Arc<dyn ObjectStore>) -> Result<Option<i64>> {
    let mark = super::current::last_complete_fold(store.as_ref()).await;
    if mark == 0 {
        return Ok(None);
    }
    let m = Lake::new(store.clone()).read_manifest(mark).await?;
    Ok(Some(m.cursor.next_seq))
}

/// Compacts the changelog table at `dir` once: the groups that
/// [`plan::plan`] finds, in one Delta commit.
pub async fn compact_table(
    store: Arc<dyn ObjectStore>,
    dir: &Path,
    job: &CompactionJob,
) -> Result<CompactionReport> {
    let mut report = CompactionReport::default();
    let state = FORMAT.load(store.as_ref(), dir, true).await?;
    if state.version.is_none() {
        return Ok(report);
    }
    report.orphans_removed = remove_orphans(store.as_ref(), dir, &state, &job.writer).await?;
    report.live_files = state.files.len();
    let below_seq = if job.after_fold {
        match folded_below(&store).await? {
            Some(s) => Some(s),
            // No fold has completed: every file may still be read by one.
            None => return Ok(report),
        }
    } else {
        None
    };
    let limits = Limits {
        target_bytes: job.target_bytes,
        min_age_ms: job.min_age.as_millis() as i64,
        now_ms: chrono::Utc::now().timestamp_millis(),
        below_seq,
        max_inputs: MAX_INPUTS,
    };
    let files = state
        .files
        .iter()
        .map(|(path, add)| LiveFile::of_add(path, add));
    let plan = plan::plan(files, &limits);
    report.more = plan.more;
    if plan.groups.is_empty() {
        return Ok(report);
    }
    let mut out = Output::new(store.clone(), dir, job);
    let written = write_groups(&mut out, &plan.groups, job).await;
    if let Err(e) = written {
        out.delete_all().await;
        return Err(e);
    }
    if job.stop.load(Ordering::SeqCst) {
        out.delete_all().await;
        return Ok(CompactionReport {
            more: true,
            ..report
        });
    }
    let inputs: Vec<&LiveFile> = plan.groups.iter().flat_map(|g| &g.files).collect();
    match commit(store.as_ref(), dir, &inputs, &out.added, job).await {
        Ok(Some(live)) => {
            report.files_removed = inputs.len();
            report.bytes_removed = inputs.iter().map(|f| f.size).sum();
            report.files_added = out.added.len();
            report.bytes_added = out.added.iter().map(|a| a.size).sum();
            report.live_files = live;
            Ok(report)
        }
        Ok(None) => {
            out.delete_all().await;
            Ok(report)
        }
        Err(Uncommitted::Failed(e)) => {
            out.delete_all().await;
            Err(e)
        }
        // The commit may name the new files: they stay (the next start
        // deletes them if it does not).
        Err(Uncommitted::Unknown(e)) => Err(e),
    }
}

/// Merges each group into new files.
async fn write_groups(out: &mut Output, groups: &[Group], job: &CompactionJob) -> Result<()> {
    for g in groups {
        let inputs = g
            .files
            .iter()
            .map(|f| Input {
                path: f
                    .path
                    .split('/')
                    .fold(out.dir.clone(), |p, part| p.join(part)),
                size: f.size,
                first_seq: f.seqs.map_or(i64::MIN, |s| s.0),
            })
            .collect();
        let mut merge = SeqMerge::new(out.store.clone(), inputs);
        while let Some(batch) = merge.next_batch().await? {
            if job.stop.load(Ordering::SeqCst) {
                return out.finish().await;
            }
            out.push(&batch).await?;
        }
        // A group is one file (one per shape).
        out.finish().await?;
    }
    Ok(())
}

/// A new file, written.
struct Added {
    path: String,
    size: u64,
    stats: Value,
}

struct OpenFile {
    writer: AsyncArrowWriter<object_store::buffered::BufWriter>,
    rel: String,
    schema: arrow::datatypes::SchemaRef,
}

/// The new files of a compaction, written as the merged rows come.
struct Output {
    store: Arc<dyn ObjectStore>,
    dir: Path,
    writer_id: String,
    row_group_bytes: usize,
    open: Option<OpenFile>,
    added: Vec<Added>,
    /// Every file begun, finished or not.
    written: Vec<Path>,
}

impl Output {
    fn new(store: Arc<dyn ObjectStore>, dir: &Path, job: &CompactionJob) -> Self {
        Output {
            store,
            dir: dir.clone(),
            writer_id: job.writer.clone(),
            // What the upload holds in flight leaves this much of the
            // budget for the row group being encoded.
            row_group_bytes: job
                .memory_budget
                .saturating_sub(UPLOAD_PART_BYTES * UPLOAD_CONCURRENCY)
                .clamp(1 << 20, 8 << 20),
            open: None,
            added: Vec::new(),
            written: Vec::new(),
        }
    }

    async fn push(&mut self, batch: &arrow::array::RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.schema.fields() != batch.schema().fields())
        {
            self.finish().await?;
        }
        if self.open.is_none() {
            let first_seq = batch
                .column_by_name("_seq")
                .and_then(|c| {
                    c.as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                        .map(|a| a.value(0))
                })
                .unwrap_or(0);
            let name = compacted_name(first_seq, &self.writer_id);
            let path = self.dir.clone().join(COMPACTED_DIR).join(name.as_str());
            let props = crate::sink::changelog_properties(&batch.schema())?
                .set_max_row_group_bytes(Some(self.row_group_bytes))
                .build();
            let upload = object_store::buffered::BufWriter::with_capacity(
                self.store.clone(),
                path.clone(),
                UPLOAD_PART_BYTES,
            )
            .with_max_concurrency(UPLOAD_CONCURRENCY);
            let writer = AsyncArrowWriter::try_new(upload, batch.schema(), Some(props))?;
            self.written.push(path);
            self.open = Some(OpenFile {
                writer,
                rel: format!("{COMPACTED_DIR}/{name}"),
                schema: batch.schema(),
            });
        }
        if let Some(open) = self.open.as_mut() {
            open.writer.write(batch).await?;
        }
        Ok(())
    }

    /// Ends the file being written.
    async fn finish(&mut self) -> Result<()> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        let meta = open.writer.finish().await?;
        let size = open.writer.bytes_written() as u64;
        if std::env::var_os(ABORT_IN_COMPACTION).is_some() {
            // Tests: a kill between the new files and their commit.
            std::process::abort();
        }
        self.added.push(Added {
            path: open.rel,
            size,
            stats: super::stats::stats(&meta),
        });
        Ok(())
    }

    /// Deletes every file begun (a compaction that does not commit).
    async fn delete_all(&mut self) {
        self.open = None;
        for path in self.written.drain(..) {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(%path, error = %e, "could not delete a compacted file that was not committed; the next start deletes it")
                }
            }
        }
    }
}

enum Uncommitted {
    /// The commit did not happen.
    Failed(Error),
    /// The store's answer was lost: the version may hold it.
    Unknown(Error),
}

impl From<Error> for Uncommitted {
    fn from(e: Error) -> Self {
        Uncommitted::Failed(e)
    }
}

/// The Delta commit that swaps `inputs` for `added`, on top of whatever the
/// log holds by then. `Ok(None)`: some input is no longer live (the table
/// changed under the compaction), nothing committed. Else the live files
/// after it.
async fn commit(
    store: &dyn ObjectStore,
    dir: &Path,
    inputs: &[&LiveFile],
    added: &[Added],
    job: &CompactionJob,
) -> std::result::Result<Option<usize>, Uncommitted> {
    let mut tries = 0;
    loop {
        let state = FORMAT.load(store, dir, true).await?;
        if inputs.iter().any(|f| !state.files.contains_key(&f.path)) {
            tracing::info!(table = %dir, "the table's files changed during its compaction; it waits for the next round");
            return Ok(None);
        }
        let version = state.version.map_or(0, |v| v + 1);
        let commit = compaction_commit(&state, version, inputs, added, job);
        match FORMAT.commit(store, dir, &commit).await? {
            Put::Written => {
                FORMAT.maintain(store, dir, version).await;
                return Ok(Some(state.files.len() - inputs.len() + added.len()));
            }
            Put::Taken => {
                tries += 1;
                if tries >= CONFLICT_TRIES {
                    return Err(Uncommitted::Failed(Error::Lake(format!(
                        "Delta log of {dir}: the compaction's version was taken {tries} times in a row; the next round tries again"
                    ))));
                }
            }
            Put::Unknown(e) => return Err(Uncommitted::Unknown(e)),
        }
    }
}

/// The commit at `version` that swaps `inputs` for `added`, carrying the
/// facts of the table's last manifest commit.
fn compaction_commit(
    state: &TableState,
    version: u64,
    inputs: &[&LiveFile],
    added: &[Added],
    job: &CompactionJob,
) -> Commit {
    let mut info = carried_facts(state);
    info["compacted"] = json!({"files_removed": inputs.len(), "files_added": added.len()});
    let mut commit = Commit::new(
        version,
        Operation::Compact {
            target_bytes: job.target_bytes,
        },
        info,
    );
    let now = commit.now_ms;
    let out = &mut commit.files;
    let removed: BTreeSet<&str> = inputs.iter().map(|f| f.path.as_str()).collect();
    for path in removed {
        out.push(json!({"remove": {
            "path": path,
            "deletionTimestamp": now,
            "dataChange": false,
            "extendedFileMetadata": true,
            "partitionValues": {},
            "size": state.files[path]["size"],
        }}));
    }
    for a in added {
        out.push(json!({"add": {
            "path": a.path,
            "partitionValues": {},
            "size": a.size,
            "modificationTime": now,
            "dataChange": false,
            "stats": a.stats.to_string(),
        }}));
    }
    commit
}

/// `db.table` of a table folder, for logs and metrics.
pub fn table_label(dir: &Path) -> String {
    super::table_names(dir).map_or_else(|| dir.to_string(), |(d, t)| format!("{d}.{t}"))
}

/// The changelog tables of the lake (table folders).
pub async fn changelog_tables(store: &dyn ObjectStore) -> Result<Vec<Path>> {
    super::table_dirs(store, crate::config::DEFAULT_REQUESTS_IN_FLIGHT).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::log;
    use arrow::array::{ArrayRef, Int64Array, RecordBatch};

    /// A changelog table of three small files, one Delta version each.
    async fn small_table(store: &Arc<dyn ObjectStore>, table: &Path) {
        for (v, seqs) in [vec![1, 2, 3], vec![4, 5], vec![6, 7, 8]]
            .into_iter()
            .enumerate()
        {
            let batch = RecordBatch::try_from_iter([
                ("id", Arc::new(Int64Array::from(seqs.clone())) as ArrayRef),
                ("_seq", Arc::new(Int64Array::from(seqs)) as ArrayRef),
            ])
            .unwrap();
            let name = format!("part-{:020}-00000-w0.parquet", v + 1);
            let path = table.clone().join(name.as_str());
            let bytes = crate::sink::encode_parquet(&batch).unwrap();
            store.put(&path, bytes.into()).await.unwrap();
            let facts = super::super::stats::file_facts(store.as_ref(), &path)
                .await
                .unwrap();
            let actions = [
                json!({"commitInfo": {"sluice": {"seq": v + 1, "table": "db.t", "rows": 8}}}),
                json!({"txn": {"appId": log::APP_ID, "version": v + 1, "lastUpdated": 1}}),
                json!({"add": {"path": name, "partitionValues": {}, "size": facts.size,
                    "modificationTime": facts.modified_ms, "dataChange": true,
                    "stats": facts.stats.to_string()}}),
            ];
            log::put_commit(store.as_ref(), table, v as u64, &actions)
                .await
                .unwrap();
        }
    }

    fn job(writer: &str) -> CompactionJob {
        CompactionJob {
            target_bytes: 1 << 20,
            min_age: Duration::ZERO,
            writer: writer.into(),
            after_fold: false,
            memory_budget: 16 << 20,
            stop: Arc::default(),
        }
    }

    #[tokio::test]
    async fn small_files_become_one_in_a_commit_that_changes_no_data() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let table = Path::from("db/t");
        small_table(&store, &table).await;
        // Nothing is folded yet: with current tables on, nothing is taken.
        let waiting = CompactionJob {
            after_fold: true,
            ..job("w1")
        };
        let r = compact_table(store.clone(), &table, &waiting)
            .await
            .unwrap();
        assert_eq!(r.files_removed, 0);
        // A file of a run that died before its commit, and one of this run.
        let orphan = table
            .clone()
            .join(COMPACTED_DIR)
            .join("compacted-00000000000000000001-w0-0a1b2c3d.parquet");
        let own = table
            .clone()
            .join(COMPACTED_DIR)
            .join("compacted-00000000000000000001-w1-0a1b2c3d.parquet");
        for p in [&orphan, &own] {
            store.put(p, b"x".to_vec().into()).await.unwrap();
        }

        let r = compact_table(store.clone(), &table, &job("w1"))
            .await
            .unwrap();
        assert_eq!(
            (
                r.files_removed,
                r.files_added,
                r.orphans_removed,
                r.live_files
            ),
            (3, 1, 1, 1)
        );
        assert!(store.head(&orphan).await.is_err());
        assert!(store.head(&own).await.is_ok(), "this run's own file stays");
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        assert_eq!(state.version, Some(3));
        assert_eq!(
            state.applied, 3,
            "the manifest seq the log holds is the same"
        );
        assert_eq!(state.last_info.as_ref().unwrap()["rows"], 8);
        let live: Vec<&String> = state.files.keys().collect();
        assert_eq!(live.len(), 1);
        assert!(
            live[0].starts_with("_compacted/compacted-00000000000000000001-w1-"),
            "{live:?}"
        );
        assert_eq!(state.files[live[0]]["dataChange"], false);
        assert_eq!(state.tombstones.len(), 3);
        assert!(state.tombstones.values().all(|r| r["dataChange"] == false));
        let stats: Value =
            serde_json::from_str(state.files[live[0]]["stats"].as_str().unwrap()).unwrap();
        assert_eq!(stats["numRecords"], 8);
        assert_eq!(stats["minValues"]["_seq"], 1);
        assert_eq!(stats["maxValues"]["_seq"], 8);
        let path = table
            .clone()
            .join(live[0].split('/').next().unwrap())
            .join(live[0].split('/').nth(1).unwrap());
        let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
        let merged = crate::sink::decode_parquet(bytes).unwrap();
        let seqs = merged
            .column_by_name("_seq")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec();
        assert_eq!(seqs, (1..=8).collect::<Vec<i64>>());
        // The small files stay in the store: manifests name them.
        assert!(store
            .head(
                &table
                    .clone()
                    .join("part-00000000000000000001-00000-w0.parquet")
            )
            .await
            .is_ok());

        // One file left: nothing to do.
        let r = compact_table(store.clone(), &table, &job("w1"))
            .await
            .unwrap();
        assert_eq!((r.files_removed, r.live_files), (0, 1));
    }

    #[tokio::test]
    async fn a_file_removed_meanwhile_drops_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let table = Path::from("db/t");
        small_table(&store, &table).await;
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        let inputs: Vec<LiveFile> = state
            .files
            .iter()
            .map(|(p, a)| LiveFile::of_add(p, a))
            .collect();
        // A type rewrite removed a file; then the stream added one.
        let gone = &inputs[0].path;
        log::put_commit(
            store.as_ref(),
            &table,
            3,
            &[json!({"remove": {"path": gone, "deletionTimestamp": 1, "dataChange": true}})],
        )
        .await
        .unwrap();
        let refs: Vec<&LiveFile> = inputs.iter().collect();
        let got = commit(store.as_ref(), &table, &refs, &[], &job("w1")).await;
        assert!(matches!(got, Ok(None)));
        // Without the removed file, the commit goes on top of the others.
        let got = commit(store.as_ref(), &table, &refs[1..], &[], &job("w1")).await;
        assert!(matches!(got, Ok(Some(0))));
        let state = log::load(store.as_ref(), &table, true).await.unwrap();
        assert_eq!(state.version, Some(4));
    }

    #[test]
    fn compacted_names_carry_the_writer() {
        let name = compacted_name(42, "abcdef012345");
        assert!(name.starts_with("compacted-00000000000000000042-abcdef012345-"));
        assert_eq!(compacted_writer(&name), Some("abcdef012345"));
        assert_eq!(
            compacted_writer("part-00000000000000000001-00000-w.parquet"),
            None
        );
        assert_eq!(compacted_writer("compacted-42-w-0a1b2c3d.parquet"), None);
        // Never a name the stream's orphan clean-up reads as its own.
        assert_eq!(crate::commit::file_checkpoint_seq(&name), None);
    }
}
