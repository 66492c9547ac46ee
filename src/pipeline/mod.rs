//! `sluice run`: the thin top that wires source → decode → batch → sink →
//! commit. One task reads events in stream order; every transaction
//! boundary may become a checkpoint. [`xa`] holds the rows of prepared XA
//! transactions until their outcome.

mod checkpoint;
mod compaction;
mod current;
mod erasures;
mod events;
mod flush;
mod requests;
mod reread;
mod retention;
mod snapshot;
mod start;
mod transaction;
pub mod xa;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::batch::savepoint::Savepoints;
use crate::batch::TableBuffer;
use crate::commit::{Cursor, DataFile, Lake, Manifest, PreparedXa};
use crate::config::Config;
use crate::decode::rows::DecodeStats;
use crate::error::{backoff, Error, Result};
use crate::http::metrics::OpCounts;
use crate::http::Metrics;
use crate::schema::history::SchemaHistory;
use crate::schema::plan::TablePlan;
use crate::schema::tracker::{SchemaTracker, StreamPoint};
use crate::sink;
use crate::source::gtid::GtidState;
use crate::source::{self, BinlogPosition, ServerInfo, StreamStart};
use crate::table::{SchemaVersions, TableLogs};
use flush::Flush;
use start::{open_source, prepared_xa, SourceSetup};

#[derive(Clone, Default)]
pub struct RunOptions {
    /// Stop once everything up to the binlog head as it was at start is committed.
    pub until_caught_up: bool,
    /// Where the run reports what `[http]` serves; a private one if `None`.
    pub metrics: Option<Arc<Metrics>>,
}

/// What a run did, for the log line at exit.
#[derive(Debug, Default)]
pub struct RunSummary {
    pub rows: u64,
    pub manifests: u64,
    pub zero_dates: u64,
    /// `db.table` of the tables whose Delta log lags its manifests, and of
    /// the current tables (` (current)`) whose last fold failed, when the
    /// run ended: `run --until-caught-up` exits 3 when there are any.
    pub behind: Vec<String>,
}

struct Pipeline<'a> {
    config: &'a Config,
    lake: Lake,
    server: ServerInfo,
    writer_id: String,
    tracker: SchemaTracker,
    /// TABLE_MAP table id → decode plan; `None` for tables the filter excludes.
    plans: HashMap<u64, Option<Arc<TablePlan>>>,
    buffers: BTreeMap<String, TableBuffer>,
    /// Files written for the next checkpoint, not yet committed.
    pending: Vec<DataFile>,
    /// Buffers being encoded and uploaded in the background, oldest first:
    /// decoding goes on meanwhile. They become `pending` when done.
    in_flight: VecDeque<Flush>,
    /// The stream's changelog file of each table (by qualified name) that
    /// takes its flushes until it is full or the checkpoint comes.
    open_files: HashMap<String, flush::OpenFile>,
    committed: Option<Manifest>,
    /// The cursor at the last transaction boundary.
    cursor: Cursor,
    /// Where this run started reading when the lake was empty.
    origin: Cursor,
    next_seq: i64,
    next_tx_seq: i64,
    file_counter: u32,
    /// The binlog file events currently come from.
    file: String,
    in_tx: bool,
    /// An explicit transaction is open (BEGIN, XA START, or a MariaDB GTID
    /// without the standalone flag): a Query event inside it, such as
    /// SAVEPOINT or the CREATE TABLE of a CREATE TABLE … SELECT, does not
    /// end it; only XID or COMMIT does.
    tx_open: bool,
    /// Savepoints of the transaction in hand and rows a logged ROLLBACK TO
    /// SAVEPOINT took back.
    savepoints: Savepoints,
    /// The `_seq` range of every file written since the last checkpoint.
    file_seqs: HashMap<String, std::ops::Range<i64>>,
    /// Inside the prepared part of an XA transaction: buffers written out
    /// now become held files.
    xa_active: bool,
    /// Rows of the transaction in hand on tables that a watermark window
    /// watches (table, schema version, rows with their `_seq`): noted when
    /// the transaction commits, without the rows a rollback took back, since
    /// a row noted but never committed would be dropped from the chunk and
    /// carried by nothing.
    window_notes: Vec<(String, u32, arrow::record_batch::RecordBatch)>,
    /// Held files of the XA transaction in hand.
    xa_files: Vec<DataFile>,
    /// Prepared XA transactions not yet committed or rolled back, by xid.
    prepared: BTreeMap<String, PreparedXa>,
    /// Held files written since the last checkpoint: deleted on a rewind.
    xa_written: Vec<String>,
    /// Held files of XA transactions resolved since the last checkpoint:
    /// deleted once it commits.
    xa_done: Vec<String>,
    /// Numbers held files; never reset, so names never repeat in one run.
    xa_counter: u64,
    tx_rows: u64,
    tx_gtid: Option<String>,
    /// The transaction is a DDL statement: it consumes a `_tx_seq` of its own.
    tx_ddl: bool,
    /// The statement of the rows events that follow (MySQL Rows_query,
    /// MariaDB Annotate_rows), truncated at `source.max_sql_bytes`.
    tx_sql: Option<Arc<str>>,
    /// The GTID state at the last boundary plus the transaction in hand.
    gtid_state: GtidState,
    /// The current stream delivered an event: the server accepted the dump.
    streamed: bool,
    last_checkpoint: Instant,
    /// The Delta logs of the table folders (DESIGN.md "The lake as tables").
    tables: TableLogs,
    /// A transient error rewound the stream: files of the failed try are
    /// removed once the checkpoint commits.
    rewound: bool,
    stats: DecodeStats,
    summary: RunSummary,
    /// The initial snapshot while it runs (and its state once done).
    snapshot: Option<snapshot::SnapshotRun>,
    /// The end of the last event read (in `file`): a snapshot chunk whose
    /// position is before it comes too late to be placed.
    read_to: BinlogPosition,
    /// The end of the DDL statement whose effects are being applied: a
    /// restart marker it causes goes after it (`push_restart_marker`).
    statement_end: Option<u64>,
    /// Snapshots adopted after the start: a widened filter's tables and
    /// `sluice snapshot` requests.
    requests: requests::RequestState,
    /// What `[http]` reports: updated per event batch and checkpoint.
    metrics: Arc<Metrics>,
    /// `_op` counts of the files written since the last checkpoint, by path.
    file_ops: HashMap<String, OpCounts>,
    /// Header timestamp of the last real event read.
    read_ts: u32,
    /// A heartbeat came after the last event with nothing uncommitted.
    idle: bool,
    /// Folds of the changelog into the current-state tables.
    current: current::CurrentFolds,
    /// When SIGTERM's `shutdown_timeout` runs out: the Delta commits and
    /// the background work after the final checkpoint get what is left of
    /// it, then are left for the next start (each is crash-safe).
    deadline: Option<Instant>,
    /// Compaction of the changelog tables.
    compactions: compaction::Compactions,
    retention: retention::Retention,
}

pub async fn run(
    config: &Config,
    opts: RunOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<RunSummary> {
    let lake = Lake::open(&config.sink)?;
    // Fencing rests on put-if-absent: refuse a store that cannot do it.
    sink::probe_put_if_absent(lake.store.as_ref(), &config.sink.url).await?;
    lake.remove_old_probe_folder();
    let newest = lake.newest_seq().await?;
    info!(seq = ?newest.seq, found_by = ?newest.found_by, requests = newest.requests, "newest manifest");
    let committed = match newest.seq {
        Some(seq) => Some(lake.read_manifest(seq).await?),
        None => None,
    };
    if let Some(m) = &committed {
        if !newest.hint_current {
            // A lake of an earlier release, or a stale hint: the next start
            // finds the newest from here.
            lake.write_hint(m.seq).await;
        }
        crate::schema::history::check_lake_types(lake.store.as_ref(), m).await?;
    }

    let src = open_source(config, committed.as_ref()).await?;
    let SourceSetup {
        server,
        start,
        start_gtid,
        head,
        caught_up,
        tables,
        db_charsets,
        server_charset,
    } = src;
    let start_position = match &start {
        StreamStart::Position(p) => p.clone(),
        // The server names the file when the stream begins.
        StreamStart::Gtid(_) => match &committed {
            Some(m) => BinlogPosition {
                file: m.cursor.file.clone(),
                pos: m.cursor.pos,
            },
            None => BinlogPosition {
                file: String::new(),
                pos: 4,
            },
        },
    };
    // Only what the newest manifest proves uncommittable: files named for a
    // later checkpoint may belong to a sidecar still running on this lake;
    // they go after this run's first commit (see `Lake::remove_orphans`).
    let removed = match &committed {
        Some(m) => lake.remove_orphans(m).await?,
        None => Vec::new(),
    };
    if !removed.is_empty() {
        info!(
            files = removed.len(),
            "removed data files of uncommitted checkpoints"
        );
    }
    // The schema history: roll back versions of uncommitted checkpoints and
    // rebuild what a lost state dir forgot, then follow the stream.
    let committed_seq = committed.as_ref().map(|m| m.seq).unwrap_or(0);
    let history = SchemaHistory::open(&config.state_dir)?;
    let report = history
        .sync_with_lake(lake.store.as_ref(), committed_seq, true)
        .await?;
    if report != Default::default() {
        info!(
            rolled_back = report.rolled_back,
            loaded_from_lake = report.loaded,
            orphans = report.orphans_removed,
            "schema history synchronised with the lake"
        );
    }
    // Delta commits missing for committed manifests (a crash between the
    // manifest and them, or a lake of a sluice without Delta logs).
    // A failure stops nothing (the manifests are the commit of record): the
    // next checkpoint tries again.
    let mut table_logs = TableLogs::new();
    if let Some(m) = &committed {
        let schemas = SchemaVersions::load_all(&history)?;
        match table_logs
            .repair(lake.store.as_ref(), &lake, m, &schemas)
            .await
        {
            Ok(repaired) if repaired != Default::default() => info!(
                commits = repaired.commits,
                logs_built = repaired.built,
                "Delta logs caught up with the manifests"
            ),
            Ok(_) => {}
            Err(e) if e.kind() == crate::error::ErrorKind::Definite => {
                error!(kind = %e.kind(), error = %e, "could not make the Delta commits missing for committed manifests; the next checkpoint tries again");
                table_logs.behind = true;
            }
            Err(e) => {
                warn!(kind = %e.kind(), error = %e, "could not make the Delta commits missing for committed manifests; the next checkpoint tries again");
                table_logs.behind = true;
            }
        }
    }
    let mut tracker =
        SchemaTracker::new(history, config.filter.clone(), db_charsets, server_charset)?;
    tracker.set_server_version(&server.version);
    tracker.set_policies(config.columns.clone());

    let cursor = match &committed {
        Some(m) => m.cursor.clone(),
        None => Cursor {
            file: start_position.file.clone(),
            pos: start_position.pos,
            gtid: (!start_gtid.is_empty()).then(|| start_gtid.to_string()),
            next_seq: 1,
            next_tx_seq: 1,
        },
    };
    // Tables the history does not know yet (an empty lake, or a widened
    // filter) start with their shape from information_schema at this position.
    let here = StreamPoint {
        position: start_position.clone(),
        gtid: cursor.gtid.clone(),
        timestamp: chrono::Utc::now().timestamp() as u32,
        tx_seq: cursor.next_tx_seq - 1,
        checkpoint: committed_seq + 1,
    };
    // The initial snapshot: on a new lake, of every captured table that
    // exists; after a restart, of the tables the newest manifest has not done.
    let snapshot_progress = match &committed {
        Some(m) => m.snapshot.clone(),
        None if config.snapshot.initial && config.source.binlog_dir.is_none() => {
            let names: Vec<(String, String)> = tables.keys().cloned().collect();
            Some(
                crate::snapshot::reader::plan(&config.source, config.snapshot.method, &names)
                    .await?,
            )
        }
        None => None,
    };
    // Tables a widened filter added, judged before the bootstrap below
    // makes the history know them.
    let widened = requests::widened_tables(committed.as_ref(), tables.keys().cloned(), &tracker)?;
    for (db, name, _) in widened.iter().filter(|(_, _, known)| *known) {
        // Captured before: DDL while it was not is missing from its history.
        tracker.forget(&(db.clone(), name.clone()));
    }
    let widened = requests::plan_widened(config, widened).await?;
    let unknown: Vec<_> = tables
        .into_values()
        .filter(|t| !tracker.known(&(t.database.clone(), t.name.clone())))
        .collect();
    if !unknown.is_empty() {
        info!(tables = unknown.len(), at = %start, "schema bootstrap from information_schema");
        tracker.bootstrap(unknown, &here, caught_up)?;
    }
    let all: Vec<_> = tracker
        .history()
        .latest_all()?
        .into_iter()
        .map(|v| (v.schema.database, v.schema.name))
        .collect();
    tracker.apply_pending_resyncs(&all, &here, "-- sluice schema resync")?;
    // `[[columns]]` changed since the last run: new versions from here, the
    // resume position, which the last checkpoint committed.
    tracker.apply_policies(&here)?;
    let prepared = prepared_xa(committed.as_ref());
    let snapshot = snapshot_progress.filter(|p| !p.is_empty()).map(|progress| {
        let running = progress.values().filter(|t| !t.done()).count();
        if running > 0 {
            info!(
                tables = running,
                "initial snapshot: reading tables beside the stream"
            );
        }
        snapshot::SnapshotRun::start(
            progress.clone(),
            snapshot::SpawnArgs {
                source: config.source.clone(),
                server_id: server.server_id,
                chunk_rows: config.snapshot.chunk_rows,
                method: config.snapshot.method,
                initial: progress.clone(),
            },
        )
    });
    let read_to = start_position.clone();
    let writer_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let mut p = Pipeline {
        config,
        lake,
        server,
        compactions: compaction::Compactions::new(config, &writer_id),
        retention: retention::Retention::new(config),
        writer_id,
        tracker,
        plans: HashMap::new(),
        buffers: BTreeMap::new(),
        pending: Vec::new(),
        in_flight: VecDeque::new(),
        open_files: HashMap::new(),
        gtid_state: start_gtid,
        streamed: false,
        next_seq: cursor.next_seq,
        next_tx_seq: cursor.next_tx_seq,
        origin: cursor.clone(),
        cursor,
        committed,
        file_counter: 0,
        file: start_position.file.clone(),
        in_tx: false,
        tx_open: false,
        savepoints: Savepoints::default(),
        file_seqs: HashMap::new(),
        xa_active: false,
        window_notes: Vec::new(),
        xa_files: Vec::new(),
        prepared,
        xa_written: Vec::new(),
        xa_done: Vec::new(),
        xa_counter: 0,
        tx_rows: 0,
        tx_gtid: None,
        tx_ddl: false,
        tx_sql: None,
        last_checkpoint: Instant::now(),
        tables: table_logs,
        rewound: false,
        stats: DecodeStats::default(),
        summary: RunSummary::default(),
        snapshot,
        read_to,
        statement_end: None,
        requests: Default::default(),
        metrics: opts
            .metrics
            .clone()
            .unwrap_or_else(|| Metrics::new(config.flush.max_buffer_bytes)),
        file_ops: HashMap::new(),
        read_ts: 0,
        idle: false,
        current: current::CurrentFolds::new(config),
        deadline: None,
    };
    p.metrics.set_committed_position(&p.cursor);
    p.start_snapshot_work(widened).await?;
    p.metrics.set_snapshot_running(!p.snapshot_done());

    // Offline replay ends at the last file anyway.
    let snapshot_pending = p.snapshot.as_ref().is_some_and(|s| !s.done());
    if caught_up
        && !snapshot_pending
        && (opts.until_caught_up || config.source.binlog_dir.is_some())
    {
        info!(head = %head, "nothing to do: already at the binlog head");
        p.finish_current().await;
        return Ok(p.summary);
    }
    let stop_at = opts.until_caught_up.then_some(head);
    let mut from = start;
    let mut failures = 0u32;
    loop {
        match p.stream(from, stop_at.clone(), &mut shutdown).await {
            Ok(()) => break,
            Err(e) if e.is_transient() && !*shutdown.borrow() => {
                p.metrics.set_connected(false);
                p.metrics.error(&e);
                p.metrics.reconnect();
                // A stream that delivered events ended a working connection:
                // the next outage starts its backoff from the beginning.
                if p.streamed {
                    failures = 0;
                }
                failures += 1;
                let delay = backoff(failures);
                from = p.rewind().await?;
                warn!(error = %e, kind = %e.kind(), retry_in = ?delay, resume = %from, "transient error: reconnecting from the last checkpoint");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.changed() => return Ok(p.summary),
                }
            }
            Err(e) => {
                p.stop_background().await;
                return Err(e);
            }
        }
    }
    p.finish_current().await;
    Ok(p.summary)
}

impl Pipeline<'_> {
    async fn stream(
        &mut self,
        start: StreamStart,
        stop_at: Option<BinlogPosition>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        self.streamed = false;
        let mut stream = source::open_stream(&self.config.source, &self.server, &start).await?;
        let mut tick =
            tokio::time::interval(self.config.flush.interval.min(Duration::from_secs(1)));
        let mut stopping: Option<Instant> = None;
        let mut saw_fde = false;
        // The server sends a heartbeat every `source.heartbeat` while idle:
        // nothing for three of them (and 2 s for the network) means the
        // connection is dead, or the server hung. Only time spent waiting
        // counts: the deadline moves after sluice's own work, so a slow
        // checkpoint is never taken for a silent server.
        let idle_limit = self.config.source.heartbeat * 3 + Duration::from_secs(2);
        let mut waiting_since = Instant::now();
        // Re-armed lazily when it fires early, not per event (hot path).
        let idle = tokio::time::sleep(idle_limit);
        tokio::pin!(idle);
        loop {
            let event = tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => ev,
                    Some(Err(e)) => return Err(source::stream_error(e, &self.position(), &self.config.source)),
                    None if self.config.source.binlog_dir.is_some() => {
                        // Offline replay ends with the last binlog file.
                        if !self.in_tx {
                            self.checkpoint().await?;
                        }
                        info!(cursor = %self.position(), "replayed every binlog file");
                        return Ok(());
                    }
                    None => return Err(Error::Connection(format!("the server closed the binlog stream at {}", self.position()))),
                },
                () = &mut idle => {
                    if waiting_since.elapsed() < idle_limit {
                        idle.as_mut().reset((waiting_since + idle_limit).into());
                        continue;
                    }
                    return Err(Error::Connection(format!(
                        "no event or heartbeat for {idle_limit:?} at {}: the connection is dead",
                        self.position()
                    )));
                }
                _ = tick.tick() => {
                    self.metrics.progress();
                    if let Some(since) = stopping {
                        if since.elapsed() > self.config.shutdown_timeout {
                            return Err(Error::ShutdownTimeout(self.position().to_string()));
                        }
                    }
                    if !self.in_tx {
                        // An idle stream: chunks at the position it has read
                        // go in now (the server's heartbeats prove it is there).
                        let upto = self.read_to.clone();
                        self.place_chunks(&upto).await?;
                    }
                    if !self.in_tx && self.requests_due() {
                        self.adopt_requests().await?;
                    }
                    if !self.in_tx && self.checkpoint_due() {
                        self.checkpoint().await?;
                        waiting_since = Instant::now();
                    }
                    if !self.in_tx && self.tables.behind && self.deadline.is_none() && self.tables.retry_due() {
                        self.retry_lagging_logs().await;
                    }
                    if self.current.behind() {
                        self.current.after_commit(&self.lake.store, self.committed.as_ref(), self.tracker.history());
                    }
                    self.current.publish(&self.metrics);
                    self.compactions.tick(&self.lake.store, self.committed.as_ref(), &self.metrics);
                    self.retention.tick(&self.lake, self.committed.as_ref(), &self.metrics);
                    if let Some(head) = &stop_at {
                        if !self.in_tx && self.position() >= *head && self.snapshot_done() {
                            self.checkpoint().await?;
                            info!(head = %head, "caught up with the binlog head at start");
                            return Ok(());
                        }
                    }
                    continue;
                }
                msg = snapshot::SnapshotRun::next(&mut self.snapshot) => {
                    self.on_snapshot_message(msg, true).await?;
                    waiting_since = Instant::now();
                    continue;
                }
                changed = shutdown.changed(), if stopping.is_none() => {
                    if changed.is_ok() {
                        info!("shutdown requested: finishing the transaction in hand");
                        stopping = Some(Instant::now());
                        self.deadline = Some(Instant::now() + self.config.shutdown_timeout);
                        if !self.in_tx {
                            self.checkpoint().await?;
                            return Ok(());
                        }
                    }
                    continue;
                }
            };
            if !self.streamed {
                self.streamed = true;
                self.metrics.set_connected(true);
            }
            let boundary = self.handle(&event, &mut saw_fde).await?;
            if boundary {
                if stopping.is_some() {
                    self.checkpoint().await?;
                    info!(cursor = %self.position(), "checkpointed, exiting");
                    return Ok(());
                }
                if self.checkpoint_due() {
                    self.checkpoint().await?;
                }
            }
            if let Some(head) = &stop_at {
                if !self.in_tx && self.position() >= *head && self.snapshot_done() {
                    self.checkpoint().await?;
                    info!(head = %head, "caught up with the binlog head at start");
                    return Ok(());
                }
            }
            waiting_since = Instant::now();
        }
    }

    /// No snapshot, or every table's snapshot is in the lake's buffers.
    fn snapshot_done(&self) -> bool {
        self.snapshot.as_ref().is_none_or(|s| s.done())
    }

    fn position(&self) -> BinlogPosition {
        BinlogPosition {
            file: self.cursor.file.clone(),
            pos: self.cursor.pos,
        }
    }

    fn next_manifest_seq(&self) -> u64 {
        self.committed.as_ref().map(|m| m.seq).unwrap_or(0) + 1
    }
}
