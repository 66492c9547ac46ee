//! Compacting the changelog tables beside the stream (DESIGN.md "A lake
//! that lasts"): after a checkpoint commits, a round starts as a task of its
//! own when `[compaction] min_age` has passed since the last one began (at
//! once when the last one left files for another round) and none is
//! running. A round goes through the lake's changelog tables one at a
//! time; each table's compaction takes the background slot that folds also
//! take, so the two never hold their memory share at once, and a fold
//! waits for at most one table's compaction. Its CPU work runs on the
//! blocking pool, as a fold's does. At shutdown the round in hand stops
//! without committing what it had not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::commit::Manifest;
use crate::config::CompactionConfig;
use crate::http::Metrics;
use crate::table::compaction::{self, CompactionJob};

/// The shortest time between two rounds, whatever `min_age` says.
const MIN_ROUND_INTERVAL: Duration = Duration::from_secs(1);

pub struct Compactions {
    enabled: bool,
    job: CompactionJob,
    interval: Duration,
    started: Option<Instant>,
    running: Option<JoinHandle<RoundEnd>>,
    /// The last round left files for another.
    more: bool,
}

/// How a round ended.
#[derive(Default)]
struct RoundEnd {
    /// A table had files left for another round.
    more: bool,
}

impl Compactions {
    /// The rounds of `[compaction]` by `writer`, holding at most
    /// `memory_budget` bytes; `after_fold` when `[current]` is on (a round
    /// then waits for the tables' folds).
    pub fn new(
        config: &CompactionConfig,
        writer: &str,
        after_fold: bool,
        memory_budget: usize,
    ) -> Self {
        Compactions {
            enabled: config.enabled,
            job: CompactionJob {
                target_bytes: config.target_file_bytes as u64,
                min_age: config.min_age,
                writer: writer.to_string(),
                after_fold,
                memory_budget,
                stop: Arc::new(AtomicBool::new(false)),
            },
            interval: config.min_age.max(MIN_ROUND_INTERVAL),
            started: None,
            running: None,
            more: false,
        }
    }

    /// Called after each committed checkpoint and on the stream's idle
    /// ticks: starts a round when one is due.
    pub fn tick(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        committed: Option<&Manifest>,
        metrics: &Arc<Metrics>,
    ) {
        // Only after this run committed (its first manifest fences the
        // writers before it, whose unfinished files a round deletes).
        if !self.enabled || committed.is_none() || self.job.stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(task) = self.running.take_if(|t| t.is_finished()) {
            if let Some(Ok(end)) = futures::FutureExt::now_or_never(task) {
                self.more = end.more;
            }
        }
        if self.running.is_some() {
            return;
        }
        let due = self
            .started
            .is_none_or(|s| self.more || s.elapsed() >= self.interval);
        if !due {
            return;
        }
        self.started = Some(Instant::now());
        self.more = false;
        let runtime = tokio::runtime::Handle::current();
        let (store, job, metrics) = (store.clone(), self.job.clone(), metrics.clone());
        self.running = Some(tokio::task::spawn_blocking(move || {
            runtime.block_on(round(store, job, metrics))
        }));
    }

    /// Stops the round in hand (nothing it has not committed is kept) and
    /// waits for it.
    pub async fn stop(&mut self) {
        self.job.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.running.take() {
            if let Err(e) = task.await {
                error!(error = %e, "compaction task failed");
            }
        }
    }
}

/// One round: every changelog table, one at a time.
async fn round(store: Arc<dyn ObjectStore>, job: CompactionJob, metrics: Arc<Metrics>) -> RoundEnd {
    let mut end = RoundEnd::default();
    let tables = match compaction::changelog_tables(store.as_ref()).await {
        Ok(t) => t,
        Err(e) => {
            warn!(error = %e, kind = e.kind().as_str(), "could not list the changelog tables to compact; the next round tries again");
            return end;
        }
    };
    for dir in tables {
        if job.stop.load(Ordering::SeqCst) {
            break;
        }
        let table = compaction::table_label(&dir);
        let started = Instant::now();
        let done = {
            let _slot = super::current::BACKGROUND.acquire().await;
            compaction::compact_table(store.clone(), &dir, &job).await
        };
        match done {
            Ok(r) => {
                end.more |= r.more;
                metrics.compacted(&table, &r);
                if r.files_removed > 0 {
                    info!(
                        table = %table,
                        ms = started.elapsed().as_millis() as u64,
                        files_removed = r.files_removed,
                        files_added = r.files_added,
                        bytes_removed = r.bytes_removed,
                        bytes_added = r.bytes_added,
                        live_files = r.live_files,
                        "changelog table compacted"
                    );
                }
            }
            Err(e) if e.is_missing_object() => {
                warn!(table = %table, error = %e, "compaction met a file that another writer removed under it (sluice forget, VACUUM); the table's Delta log stays as it was, the next round plans again");
            }
            Err(e) if e.is_transient() => {
                warn!(table = %table, error = %e, kind = e.kind().as_str(), "compaction failed; the table's Delta log stays as it was, the next round tries again");
            }
            Err(e) => {
                error!(table = %table, error = %e, kind = e.kind().as_str(), "compaction failed; the table's Delta log stays as it was, the next round tries again");
            }
        }
    }
    end
}
