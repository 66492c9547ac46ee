//! Checkpoints: at a transaction boundary every buffer is written and a
//! manifest commits the cursor; the Delta logs and the current-state folds
//! follow it. A transient error instead rewinds to the last checkpoint.

use std::time::Instant;

use object_store::ObjectStoreExt;
use tracing::{debug, error, info, warn};

use super::flush::Flushed;
use super::start::prepared_xa;
use super::{xa, Pipeline};
use crate::batch::savepoint::Savepoints;
use crate::commit::{self, DataFile, Manifest, SourceIdentity, Writer};
use crate::config::Resume;
use crate::error::{Error, Result};
use crate::schema::history;
use crate::source::{self, StreamStart};
use crate::table::SchemaVersions;

/// How long a run that stops on an error waits for its background work.
const BACKGROUND_STOP: std::time::Duration = std::time::Duration::from_secs(15);

impl Pipeline<'_> {
    /// Forgets everything not committed and returns the position to read
    /// from again: the last checkpoint's cursor. Re-reading assigns the same
    /// `_seq` and `_tx_seq` values, so a retry neither loses nor repeats a row.
    pub(super) async fn rewind(&mut self) -> Result<StreamStart> {
        // Let running uploads finish so that none lands unseen; their files
        // go with the pending ones.
        while let Some(flush) = self.in_flight.pop_front() {
            if let Ok(Ok(Flushed::File(file))) = flush.task.await {
                self.pending.push(file);
            }
        }
        // Never uploaded: nothing of them is in the store.
        self.open_files.clear();
        self.routed_batches.clear();
        let held = std::mem::take(&mut self.xa_written);
        let uncommitted = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|f| f.path)
            .chain(held);
        for path in uncommitted {
            if let Err(e) = self
                .lake
                .store
                .delete(&crate::commit::stored_path(&path))
                .await
            {
                warn!(%path, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not delete an uncommitted file; the next start removes it");
            }
        }
        self.xa_active = false;
        self.window_notes.clear();
        self.xa_files.clear();
        self.xa_done.clear();
        self.prepared = prepared_xa(self.committed.as_ref());
        self.buffers.clear();
        self.plans.clear();
        // `file_counter` goes on: the re-read writes its files under names
        // this run has not used, so no file of a checkpoint whose commit
        // failed is ever written again (a manifest that landed unseen lists
        // them). What the failed try wrote goes after the next commit.
        self.rewound = true;
        let committed_seq = self.committed.as_ref().map(|m| m.seq).unwrap_or(0);
        if let Err(e) = self.tracker.rollback(committed_seq) {
            warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not roll back the schema history; the next start does");
        }
        self.cursor = match &self.committed {
            Some(m) => m.cursor.clone(),
            None => self.origin.clone(),
        };
        self.next_seq = self.cursor.next_seq;
        self.next_tx_seq = self.cursor.next_tx_seq;
        self.gtid_state = source::gtid_state(
            self.server.flavor,
            self.cursor.gtid.as_deref().unwrap_or(""),
        )
        .unwrap_or_else(|_| self.gtid_state.empty_like());
        self.file = self.cursor.file.clone();
        self.in_tx = false;
        self.tx_open = false;
        self.savepoints = Savepoints::default();
        self.file_seqs.clear();
        self.tx_rows = 0;
        self.tx_gtid = None;
        self.tx_ddl = false;
        self.tx_sql = None;
        self.stats.zero_dates = 0;
        self.file_ops.clear();
        self.read_to = self.position();
        if let Some(run) = self.snapshot.as_mut() {
            run.restart(self.committed.as_ref().and_then(|m| m.snapshot.clone()));
        }
        self.readopt_after_rewind()?;
        let by_gtid = match self.settings.source.resume {
            Resume::Position => false,
            Resume::Auto | Resume::Gtid => self.server.gtid && !self.gtid_state.is_empty(),
        };
        Ok(if by_gtid {
            StreamStart::Gtid(self.gtid_state.clone())
        } else {
            StreamStart::Position(self.position())
        })
    }

    pub(super) fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.elapsed() >= self.settings.flush.interval && self.dirty()
    }

    pub(super) fn dirty(&self) -> bool {
        !self.pending.is_empty()
            || !self.in_flight.is_empty()
            || !self.open_files.is_empty()
            || !self.routed_batches.is_empty()
            || self.tracker.is_dirty()
            || self.buffers.values().any(|b| b.rows() > 0)
            || self.committed.as_ref().map(|m| &m.cursor) != Some(&self.cursor)
            || !self.xa_done.is_empty()
            || self
                .snapshot
                .as_ref()
                .is_some_and(|s| s.has_buffered_rows())
            || self.requests.uncommitted()
    }

    /// This run's first commit fences every writer that started before it:
    /// what they wrote for checkpoints up to this one can never be committed.
    /// So does a commit after a rewind for what the failed try wrote.
    async fn remove_orphans_after_first_commit(&self, m: &Manifest) {
        match self.lake.remove_orphans(m).await {
            Ok(removed) if !removed.is_empty() => {
                info!(
                    files = removed.len(),
                    "removed files no checkpoint will commit"
                )
            }
            Ok(_) => {}
            Err(e) => {
                warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not remove uncommitted files; the next start does")
            }
        }
        if let Err(e) = self
            .tracker
            .history()
            .remove_orphan_objects(self.lake.store.as_ref(), m.seq)
            .await
        {
            warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not remove uncommitted schema objects; the next start does");
        }
    }

    /// Flushes every buffer and commits a manifest at the current cursor.
    /// Only called at a transaction boundary.
    pub(super) async fn checkpoint(&mut self) -> Result<()> {
        let started = Instant::now();
        // Whole snapshot chunks only: wait for rows of chunks already placed.
        self.await_reserved_chunks().await?;
        self.flush_snapshot_buffers(true).await?;
        // Each table's file closed right after its last rows went in, and no
        // more files encoded and uploaded at once than the store takes
        // requests: with 10,000 tables of a few rows each, every encoder at
        // once took 3.3 GiB.
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
            self.close_open_file(&name);
            self.bound_in_flight(self.lake.in_flight).await?;
        }
        // The shards' rows of routed tables, each table's as one row group.
        self.write_gathered()?;
        let open: Vec<String> = self.open_files.keys().cloned().collect();
        for name in open {
            self.close_open_file(&name);
            self.bound_in_flight(self.lake.in_flight).await?;
        }
        self.bound_in_flight(0).await?;
        // Every buffer is written: no row taken back is left in memory.
        self.savepoints.written();
        if !self.dirty() {
            return Ok(());
        }
        let mut totals = self
            .committed
            .as_ref()
            .map(|m| m.totals.clone())
            .unwrap_or_default();
        for f in &self.pending {
            *totals.entry(f.table.clone()).or_default() += f.rows;
        }
        let snapshot = self.snapshot.as_ref().map(|r| r.progress.clone());
        let manifest = Manifest {
            format: match snapshot {
                Some(_) => commit::FORMAT_SNAPSHOT,
                None => commit::FORMAT,
            },
            snapshot,
            snapshot_requests: self.requests.to_commit(),
            filter: Some(self.settings.filter.patterns().clone()),
            seq: self.next_manifest_seq(),
            committed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            writer: Writer {
                id: self.writer_id.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            source: SourceIdentity {
                flavor: self.server.flavor,
                server_id: self.server.server_id,
                server_uuid: self.server.server_uuid.clone(),
                version: self.server.version.clone(),
            },
            cursor: self.cursor.clone(),
            files: std::mem::take(&mut self.pending),
            ddl: self.tracker.uncommitted().1.to_vec(),
            column_policies: self.tracker.policy_changes().to_vec(),
            erasures: self.requests.erasures.values().cloned().collect(),
            totals,
            xa_prepared: self.prepared.values().cloned().collect(),
            zero_dates: self.committed.as_ref().map_or(0, |m| m.zero_dates) + self.stats.zero_dates,
            types: commit::TYPES,
            last_change: self.committed.as_ref().map(Manifest::last_change_after),
        };
        // The schema versions of this checkpoint become durable with it:
        // their objects are written first and named after its seq.
        let mut schema_objects = Vec::new();
        for v in self.tracker.uncommitted().0 {
            schema_objects
                .push(history::put_version(self.lake.store.as_ref(), v, &self.writer_id).await?);
        }
        let written_now: Vec<&DataFile> = manifest
            .files
            .iter()
            .chain(manifest.xa_prepared.iter().flat_map(|x| x.files.iter()))
            .filter(|f| !f.path.starts_with(xa::XA_PREFIX) || self.xa_written.contains(&f.path))
            .collect();
        let verified = match self.lake.verify_files(&written_now).await {
            // Files of ours deleted because another writer committed this
            // seq first (its first commit cleans up): we are fenced.
            Err(e)
                if self
                    .lake
                    .taken_by_other(manifest.seq, &self.writer_id)
                    .await? =>
            {
                debug!(error = %e, "files of this checkpoint are gone and its manifest exists");
                Err(Error::Fenced { seq: manifest.seq })
            }
            other => other,
        };
        let committed = match verified {
            Ok(()) => self.lake.commit(&manifest).await,
            Err(e) => Err(e),
        };
        if let Err(e) = committed {
            if matches!(e, Error::Fenced { .. }) {
                // Our files can never be committed: leave no orphans behind.
                let paths = manifest
                    .files
                    .iter()
                    .map(|f| crate::commit::stored_path(&f.path))
                    .chain(
                        self.xa_written
                            .iter()
                            .map(|p| crate::commit::stored_path(p)),
                    )
                    .chain(schema_objects);
                for path in paths {
                    if let Err(del) = self.lake.store.delete(&path).await {
                        warn!(%path, kind = %crate::error::HasKind::error_kind(&del), error = %del, "could not delete an uncommitted file");
                    }
                }
            }
            return Err(e);
        }
        info!(seq = manifest.seq, files = manifest.files.len(), cursor = %self.position(), "committed");
        // Never part of the commit: the next start's look-up begins here.
        self.lake.write_hint(manifest.seq).await;
        let rewound = std::mem::take(&mut self.rewound);
        if self.summary.manifests == 0 || rewound {
            self.remove_orphans_after_first_commit(&manifest).await;
        }
        self.summary.manifests += 1;
        if let Err(e) = self.tracker.committed() {
            warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not forget the applied `schema resync` shapes; they match no later position");
        }
        self.summary.rows += manifest.files.iter().map(|f| f.rows).sum::<u64>();
        // Zero dates are counted once their rows are committed.
        let zero_dates = std::mem::take(&mut self.stats.zero_dates);
        self.summary.zero_dates += zero_dates;
        self.metrics.checkpoint_committed(
            &manifest,
            &mut self.file_ops,
            self.read_ts,
            started.elapsed(),
            zero_dates,
        );
        self.requests_committed(&manifest).await;
        self.erasures_committed(&manifest).await;
        self.committed = Some(manifest);
        self.file_counter = 0;
        self.file_seqs.clear();
        self.xa_written.clear();
        for path in std::mem::take(&mut self.xa_done) {
            let path = crate::commit::stored_path(&path);
            if let Err(e) = self.lake.store.delete(&path).await {
                warn!(%path, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not delete a held file of a resolved XA transaction; the next start removes it");
            }
        }
        self.last_checkpoint = Instant::now();
        self.metrics.set_buffer_bytes(0);
        self.commit_tables().await;
        self.current.after_commit(
            &self.lake.store,
            self.committed.as_ref(),
            self.tracker.history(),
        );
        self.compactions
            .tick(&self.lake.store, self.committed.as_ref(), &self.metrics);
        self.retention
            .tick(&self.lake, self.committed.as_ref(), &self.metrics);
        Ok(())
    }

    /// The last fold of the current tables: at shutdown and at the end of
    /// `--until-caught-up`.
    pub(super) async fn finish_current(&mut self) {
        if self.tables.has_lags() {
            // The run's last try of every lagging Delta log, whatever its
            // wait, before the last fold reads the changelogs.
            self.tables.clear_waits();
            self.commit_tables().await;
        }
        let deadline = self.deadline;
        let work = async {
            // A compaction round in hand stops first: it holds the slot the
            // last fold needs.
            self.compactions.stop().await;
            self.retention.stop().await;
            self.current.wait().await;
            let job = self
                .current
                .last_job(self.committed.as_ref(), self.tracker.history());
            if let Some(job) = job {
                self.current.fold_now(self.lake.store.clone(), job).await;
            }
        };
        let finished = match deadline {
            Some(at) => tokio::time::timeout_at(at.into(), work).await.is_ok(),
            None => {
                work.await;
                true
            }
        };
        if !finished {
            // Each of them is crash-safe: a fold's files without its commit,
            // a compaction's or a retention round's, go at the next start.
            warn!(
                shutdown_timeout = ?self.settings.shutdown_timeout,
                "shutdown_timeout ran out: the last fold of the current tables (and any compaction or retention round in hand) is left for the next start"
            );
        }
        // What a scheduled catch-up must hear of (exit 3): tables whose
        // Delta log or current table is still behind after the last try.
        let mut behind: Vec<String> = self.tables.lags().into_iter().map(|l| l.table).collect();
        behind.extend(
            self.current
                .failed()
                .iter()
                .map(|t| format!("{t} (current)")),
        );
        behind.sort();
        behind.dedup();
        self.summary.behind = behind;
    }

    /// Before an error ends the run: a compaction stops at its next batch,
    /// and a retention round and the fold in hand run out (for at most
    /// [`BACKGROUND_STOP`]), so that nothing they log, and no fold thread
    /// outliving the runtime, follows the error the run ends with.
    pub(super) async fn stop_background(&mut self) {
        let work = async {
            self.compactions.stop().await;
            self.retention.stop().await;
            self.current.wait().await;
        };
        if tokio::time::timeout(BACKGROUND_STOP, work).await.is_err() {
            warn!(
                waited = ?BACKGROUND_STOP,
                "background work (a fold, a compaction or a retention round) still runs as the run stops on an error"
            );
        }
    }

    /// An idle stream makes no checkpoint: the lagging Delta logs whose wait
    /// has run out are tried here, from the tick. A failure is logged like a
    /// checkpoint's (per table, by `TableLogs`).
    pub(super) async fn retry_lagging_logs(&mut self) {
        let tables = self.tables.lagging_tables();
        let schemas = match SchemaVersions::load(self.tracker.history(), tables) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "could not read the schema versions of the lagging Delta logs");
                return;
            }
        };
        let store = self.lake.store.clone();
        if let Err(e) = self
            .tables
            .retry_lagging(store.as_ref(), &self.lake, &schemas)
            .await
        {
            self.metrics.error(&e);
            warn!(error = %e, kind = %e.kind(), "a lagging Delta log could not catch up; it is tried again after its wait");
        }
        self.metrics.set_delta_lags(&self.tables.lags());
    }

    /// The Delta commits of the manifest just committed. A failure does not
    /// stop the stream (the manifest is the commit of record): the next
    /// checkpoint, or the next start, makes what is missing.
    async fn commit_tables(&mut self) {
        let Some(m) = self.committed.as_ref() else {
            return;
        };
        if std::env::var_os(BENCH_NO_DELTA).is_some() {
            // benches/e2e.sh: the stream's cost without Delta commits.
            return;
        }
        if !m.files.is_empty() && std::env::var_os(ABORT_BEFORE_DELTA).is_some() {
            // Tests: a kill between a manifest and its Delta commits.
            std::process::abort();
        }
        let store = self.lake.store.clone();
        // A failure earlier: the lagging tables catch up as their waits run
        // out; a failure no table's lag holds (a log that could not be
        // read) is repaired as at a start, as its own wait allows.
        let lagging = self.tables.behind && self.tables.has_lags();
        let repair = self.tables.behind && !lagging && self.tables.repair_due();
        // Read from SQLite before any await: the history is not Sync.
        let schemas = if repair {
            SchemaVersions::load_all(self.tracker.history())
        } else if lagging {
            let mut tables = self.tables.lagging_tables();
            tables.extend(m.files.iter().filter_map(|f| {
                let (db, t) = f.table.split_once('.')?;
                Some((db.to_string(), t.to_string()))
            }));
            tables.sort();
            tables.dedup();
            SchemaVersions::load(self.tracker.history(), tables)
        } else {
            SchemaVersions::for_manifest(self.tracker.history(), m)
        };
        let deadline = self.deadline;
        let work = async {
            match schemas {
                Ok(schemas) if repair => self
                    .tables
                    .repair(store.as_ref(), &self.lake, m, &schemas)
                    .await
                    .map(|r| r.commits),
                Ok(schemas) if lagging => {
                    self.tables
                        .commit_lagging(store.as_ref(), &self.lake, m, &schemas)
                        .await
                }
                Ok(schemas) => {
                    self.tables
                        .commit_manifest(store.as_ref(), m, &schemas)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        let made = match deadline {
            // Shutting down: the Delta commits get what is left of
            // shutdown_timeout; the next start makes the rest.
            Some(at) => match tokio::time::timeout_at(at.into(), work).await {
                Ok(made) => made,
                Err(_) => {
                    warn!(seq = m.seq, shutdown_timeout = ?self.settings.shutdown_timeout, "shutdown_timeout ran out: the Delta commits of this manifest are left for the next start");
                    self.tables.behind = true;
                    return;
                }
            },
            None => work.await,
        };
        match made {
            Ok(n) => debug!(
                seq = m.seq,
                delta_commits = n,
                "Delta logs follow the manifest"
            ),
            Err(e) => {
                self.metrics.error(&e);
                if e.kind() == crate::error::ErrorKind::Definite {
                    error!(seq = m.seq, error = %e, kind = %e.kind(), "could not make the Delta commits of this manifest; the next checkpoint or start makes them");
                } else {
                    warn!(seq = m.seq, error = %e, kind = %e.kind(), "could not make the Delta commits of this manifest; the next checkpoint or start makes them");
                }
                self.tables.behind = true;
            }
        }
        self.metrics.set_delta_lags(&self.tables.lags());
    }
}

/// Test hook: with this variable set, sluice aborts right after a manifest
/// with data files commits, before its Delta commits.
const ABORT_BEFORE_DELTA: &str = "SLUICE_TEST_ABORT_BEFORE_DELTA";

/// Benchmark switch: with this variable set, no Delta commits are made (the
/// next start without it makes them). Not for production: the changelog
/// tables then lag the manifests.
const BENCH_NO_DELTA: &str = "SLUICE_BENCH_NO_DELTA";
