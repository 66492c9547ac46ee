//! Folding the changelog into the current-state tables beside the stream
//! (DESIGN.md "Current-state tables"): after a checkpoint commits, a fold up
//! to that manifest starts as a task of its own when `[current] refresh` has
//! passed since the last one began and none is running. The stream never
//! waits for it; its CPU work (Parquet decoding, merging, encoding) runs on
//! the blocking pool one file at a time. At shutdown and at the end of
//! `--until-caught-up` the running fold is awaited and a last one folds up
//! to the final manifest.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use object_store::ObjectStore;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::commit::Manifest;
use crate::config::{CurrentConfig, Routes};
use crate::error::Result;
use crate::schema::history::SchemaHistory;
use crate::table::current::{fold, FoldJob, FoldReport, FoldTable};

pub struct CurrentFolds {
    config: CurrentConfig,
    /// `[[routes]]`: the shards they write into a routed table have no
    /// current table of their own.
    routes: Routes,
    memory_budget: usize,
    /// `[sink] requests_in_flight`.
    in_flight: usize,
    spill_dir: std::path::PathBuf,
    started: Option<Instant>,
    /// A committed manifest is not folded yet (a fold was running, or
    /// `refresh` had not passed): the stream's tick starts it later.
    behind: bool,
    running: Option<JoinHandle<Result<(FoldReport, u128)>>>,
    /// When the oldest manifest with rows that no fold has started on
    /// committed; and the same for the manifests the running fold covers.
    unfolded_since: Option<Instant>,
    folding_since: Option<Instant>,
    /// `db.table` of the tables the last fold covered (the gauge's labels).
    tables: Vec<String>,
    /// `db.table` of the tables whose last finished fold failed (all of the
    /// job's when the fold as a whole failed).
    failed: Vec<String>,
}

/// The slot that a fold, or one table's compaction, holds while it runs:
/// they share one memory share, and never run at once.
pub static BACKGROUND: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Folds running in this process (one of an earlier pipeline may outlive it
/// after a rewind).
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl CurrentFolds {
    /// The folds of `[current]`, spilling under `state_dir`, holding at
    /// most `memory_budget` bytes (`Config::background_share`) and
    /// reading and folding up to `in_flight` small tables at once.
    pub fn new(
        config: &CurrentConfig,
        state_dir: &Path,
        memory_budget: usize,
        in_flight: usize,
        routes: &Routes,
    ) -> Self {
        let spill_dir = state_dir.join("fold-spill");
        if RUNNING.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            // Sorted runs of a fold that a crash ended.
            match std::fs::remove_dir_all(&spill_dir) {
                Ok(()) => {
                    info!(dir = %spill_dir.display(), "removed the spill files of an unfinished fold")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    warn!(dir = %spill_dir.display(), error = %e, "could not remove the spill files of an unfinished fold")
                }
            }
        }
        CurrentFolds {
            config: config.clone(),
            routes: routes.clone(),
            memory_budget,
            in_flight,
            spill_dir,
            started: None,
            behind: false,
            running: None,
            unfolded_since: None,
            folding_since: None,
            tables: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// The job of a fold up to `m`: every table of the history, read from
    /// SQLite now (the history is not `Sync`).
    fn job(&self, m: &Manifest, history: &SchemaHistory) -> Result<FoldJob> {
        let mut tables = Vec::new();
        for v in history.latest_all()? {
            let (db, table) = (v.schema.database, v.schema.name);
            if self.routes.target(&db, &table).is_ok_and(|t| t.is_some()) {
                continue;
            }
            // A current table holds what the changelog files hold:
            // excluded columns are in neither.
            let versions = history
                .versions(&db, &table)?
                .into_iter()
                .map(|mut v| {
                    v.schema = v.schema.without_excluded();
                    v
                })
                .collect();
            tables.push(FoldTable {
                db,
                table,
                versions,
            });
        }
        Ok(FoldJob {
            target: m.clone(),
            tables,
            target_file_bytes: self.config.target_file_bytes as u64,
            deletion_vectors: self.config.deletion_vectors,
            purge_threshold: self.config.purge_threshold,
            memory_budget: self.memory_budget,
            spill_dir: self.spill_dir.clone(),
            in_flight: self.in_flight,
        })
    }

    /// Called after each committed checkpoint.
    pub fn after_commit(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        m: Option<&Manifest>,
        history: &SchemaHistory,
    ) {
        let Some(m) = m else { return };
        if !self.config.enabled {
            return;
        }
        self.behind = true;
        if !m.files.is_empty() && self.unfolded_since.is_none() {
            self.unfolded_since = Some(Instant::now());
        }
        if self.running.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        self.collect_finished();
        if self
            .started
            .is_some_and(|s| s.elapsed() < self.config.refresh)
        {
            return;
        }
        match self.job(m, history) {
            Ok(job) => {
                self.behind = false;
                self.started = Some(Instant::now());
                self.folding_since = self.unfolded_since.take();
                self.tables = job
                    .tables
                    .iter()
                    .map(|t| format!("{}.{}", t.db, t.table))
                    .collect();
                self.running = Some(spawn_fold(store.clone(), job));
            }
            Err(e) => warn!(error = %e, "could not plan a fold of the current tables"),
        }
    }

    /// A committed manifest waits for a fold: call [`Self::after_commit`]
    /// again when the stream is idle.
    pub fn behind(&self) -> bool {
        self.behind
    }

    /// Collects a fold that has finished, without waiting.
    fn collect_finished(&mut self) {
        if self.running.as_ref().is_some_and(|t| t.is_finished()) {
            if let Some(task) = self.running.take() {
                let failed = log_outcome(futures::FutureExt::now_or_never(task), &self.tables);
                self.fold_ended(failed);
            }
        }
    }

    /// A fold ended, with the tables it could not fold: what it covered is
    /// folded, or waits again.
    fn fold_ended(&mut self, failed: Vec<String>) {
        let covered = self.folding_since.take();
        let ok = failed.is_empty();
        self.failed = failed;
        if !ok {
            self.unfolded_since = match (covered, self.unfolded_since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }

    /// Sets each current table's fold lag: how long the oldest committed
    /// change that no finished fold holds has waited (0 when folded).
    pub fn publish(&mut self, metrics: &crate::http::Metrics) {
        self.collect_finished();
        let lag = [self.unfolded_since, self.folding_since]
            .into_iter()
            .flatten()
            .map(|t| t.elapsed().as_secs_f64())
            .fold(0.0, f64::max);
        for table in &self.tables {
            metrics.set_current_fold_lag(table, lag);
        }
    }

    /// Waits for the running fold.
    pub async fn wait(&mut self) {
        if let Some(task) = self.running.take() {
            let failed = log_outcome(Some(task.await), &self.tables);
            self.fold_ended(failed);
        }
    }

    /// Runs a last fold to its end (shutdown, end of `--until-caught-up`).
    pub async fn fold_now(&mut self, store: Arc<dyn ObjectStore>, job: FoldJob) {
        let tables: Vec<String> = job.tables.iter().map(|t| t.name()).collect();
        // A task of its own, so that a bug in a fold cannot take the run down.
        self.failed = log_outcome(Some(spawn_fold(store, job).await), &tables);
    }

    /// The current tables whose last fold failed.
    pub fn failed(&self) -> &[String] {
        &self.failed
    }

    /// The job of a last fold up to `m`, if folds are on.
    pub fn last_job(&self, m: Option<&Manifest>, history: &SchemaHistory) -> Option<FoldJob> {
        let m = m?;
        if !self.config.enabled {
            return None;
        }
        self.job(m, history)
            .map_err(|e| warn!(error = %e, "could not plan a fold of the current tables"))
            .ok()
    }
}

/// Runs a fold on a thread of the blocking pool: its decoding, sorting and
/// encoding never hold up the runtime's workers, which run the stream; its
/// I/O still goes through the runtime.
fn spawn_fold(store: Arc<dyn ObjectStore>, job: FoldJob) -> JoinHandle<Result<(FoldReport, u128)>> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(timed_fold(store, job)))
}

async fn timed_fold(store: Arc<dyn ObjectStore>, job: FoldJob) -> Result<(FoldReport, u128)> {
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    RUNNING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _running = Running;
    let _slot = BACKGROUND.acquire().await;
    let started = Instant::now();
    let report = fold(store, job).await?;
    Ok((report, started.elapsed().as_millis()))
}

type Outcome = std::result::Result<Result<(FoldReport, u128)>, tokio::task::JoinError>;

/// Logs how a fold of `tables` ended; the tables it could not fold (all of
/// them when the fold as a whole failed or has not ended).
fn log_outcome(done: Option<Outcome>, tables: &[String]) -> Vec<String> {
    match done {
        None => return tables.to_vec(),
        Some(Ok(Ok((r, _)))) if !r.failed.is_empty() => return r.failed,
        Some(Ok(Ok((r, ms)))) if r.commits > 0 => info!(
            ms,
            commits = r.commits,
            changed_rows = r.changed_rows,
            files_added = r.files_added,
            files_removed = r.files_removed,
            bytes_added = r.bytes_added,
            bytes_removed = r.bytes_removed,
            spilled_runs = r.spilled_runs,
            rows_sorted = r.rows_sorted,
            manifests_read = r.manifests_read,
            rows_marked = r.rows_marked,
            files_marked = r.files_marked,
            vector_bytes = r.vector_bytes,
            files_purged = r.files_purged,
            rows_copied = r.rows_copied,
            read_ms = r.read_ms,
            apply_ms = r.apply_ms,
            commit_ms = r.commit_ms,
            "current tables folded"
        ),
        Some(Ok(Ok(_))) => {}
        Some(Ok(Err(e))) if e.is_transient() => {
            warn!(error = %e, kind = e.kind().as_str(), "current table fold failed; the previous versions stay, the next fold redoes it");
            return tables.to_vec();
        }
        Some(Ok(Err(e))) => {
            error!(error = %e, kind = e.kind().as_str(), "current table fold failed; the previous versions stay, the next fold tries again");
            return tables.to_vec();
        }
        Some(Err(e)) => {
            error!(error = %e, kind = "definite", "current table fold task failed");
            return tables.to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    fn folds() -> CurrentFolds {
        let mut config = Config::parse(
            "[source]\nurl = \"mysql://repl@127.0.0.1:3307\"\nserver_id = 7\n\
             [sink]\nurl = \"/tmp/lake\"\n[current]\nenabled = true\n",
        )
        .unwrap();
        config.current.target_file_bytes = 1 << 20;
        config.current.refresh = Duration::from_secs(60);
        let mut f = CurrentFolds::new(
            &config.current,
            &config.state_dir,
            config.background_share(),
            config.sink.requests_in_flight,
            &config.routes,
        );
        f.tables = vec!["shop.t".into()];
        f
    }

    fn lag(metrics: &crate::http::Metrics) -> f64 {
        let text = metrics.encode().unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("sluice_current_fold_lag_seconds{table=\"shop.t\"}"))
            .unwrap_or_else(|| panic!("no fold lag of shop.t in:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn fold_lag_is_the_age_of_the_oldest_change_no_finished_fold_holds() {
        let metrics = crate::http::Metrics::new(1 << 20);
        let mut f = folds();
        f.publish(&metrics);
        assert_eq!(lag(&metrics), 0.0, "nothing waits");

        let two_s_ago = Instant::now() - Duration::from_secs(2);
        f.unfolded_since = Some(two_s_ago);
        f.publish(&metrics);
        assert!((2.0..3.0).contains(&lag(&metrics)), "{}", lag(&metrics));

        // A fold starts on those changes: they wait until it ends.
        f.folding_since = f.unfolded_since.take();
        f.publish(&metrics);
        assert!(lag(&metrics) >= 2.0);
        // It fails: they wait again, from when they first did.
        f.fold_ended(vec!["db.t".into()]);
        assert_eq!(f.unfolded_since, Some(two_s_ago));
        // The next one succeeds: folded.
        f.folding_since = f.unfolded_since.take();
        f.fold_ended(Vec::new());
        f.publish(&metrics);
        assert_eq!(lag(&metrics), 0.0);
    }
}
