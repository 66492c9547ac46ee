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
mod route;
mod snapshot;
mod start;
mod transaction;
pub mod xa;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::batch::savepoint::Savepoints;
use crate::batch::TableBuffer;
use crate::commit::{Cursor, DataFile, Lake, Manifest, PreparedXa};
use crate::config::policy::ColumnPolicies;
use crate::config::{
    Config, FlushPolicy, RouteTarget, Routes, SnapshotConfig, SourceConfig, TableFilter,
};
use crate::decode::rows::DecodeStats;
use crate::error::{backoff, Error, Result};
use crate::http::metrics::OpCounts;
use crate::http::Metrics;
use crate::schema::plan::TablePlan;
use crate::schema::tracker::SchemaTracker;
use crate::source::gtid::GtidState;
use crate::source::{self, BinlogPosition, ServerInfo, StreamStart};
use crate::table::TableLogs;
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

/// What the stream reads of the configuration. The stages beside it
/// (folds, compaction, retention) take their own sections at start, and
/// the start-up steps take theirs (`start.rs`).
#[derive(Clone, Copy)]
struct StreamSettings<'c> {
    source: &'c SourceConfig,
    filter: &'c TableFilter,
    flush: &'c FlushPolicy,
    snapshot: &'c SnapshotConfig,
    columns: &'c ColumnPolicies,
    routes: &'c Routes,
    /// `[sink] multipart_threshold`: files at least this large go up in parts.
    multipart_threshold: usize,
    /// The stream's share of `flush.max_buffer_bytes`: what the stages
    /// beside it do not take ([`Config::background_share`]).
    stream_memory: usize,
    shutdown_timeout: Duration,
}

impl<'c> StreamSettings<'c> {
    fn of(config: &'c Config) -> Self {
        StreamSettings {
            source: &config.source,
            filter: &config.filter,
            flush: &config.flush,
            snapshot: &config.snapshot,
            columns: &config.columns,
            routes: &config.routes,
            multipart_threshold: config.sink.multipart_threshold,
            stream_memory: config.flush.max_buffer_bytes - config.background_share(),
            shutdown_timeout: config.shutdown_timeout,
        }
    }
}

struct Pipeline<'a> {
    settings: StreamSettings<'a>,
    lake: Lake,
    server: ServerInfo,
    writer_id: String,
    tracker: SchemaTracker,
    /// Each source table's `[[routes]]` target, as decided once.
    routed: HashMap<String, Option<RouteTarget>>,
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
    /// Batches of routed tables (by qualified name) from their shards,
    /// gathered into one row group.
    routed_batches: HashMap<String, flush::Gathered>,
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
    let mut steps = start::Steps::new();
    // The lake, whose newest manifest is the commit of record.
    let (lake, committed) = start::open_lake(&config.sink).await?;
    steps.done("lake");
    // The source, and where its stream starts.
    let mut source = open_source(config, committed.as_ref()).await?;
    let start_position = start::start_position(&source.start, committed.as_ref());
    steps.done("source");
    // What the last run left half done, put back as the manifest says.
    let (history, table_logs) =
        start::restore(&lake, committed.as_ref(), &config.state_dir).await?;
    steps.done("restore");
    // Every captured table's shape at the start, and the snapshots to take.
    let tables = start::prepare_tables(
        config,
        &mut source,
        history,
        committed.as_ref(),
        &start_position,
    )
    .await?;
    steps.done("tables");
    steps.log();
    let snapshot = snapshot::start_run(
        &config.source,
        &config.snapshot,
        &source.server,
        tables.snapshot_progress,
    );
    let caught_up = source.caught_up;
    let head = source.head.clone();
    let from = source.start.clone();
    let mut p = Pipeline::new(
        config,
        &opts,
        Begin {
            lake,
            committed,
            source,
            tracker: tables.tracker,
            cursor: tables.cursor,
            start_position,
            table_logs,
            snapshot,
        },
    );
    p.metrics.set_committed_position(&p.cursor);
    p.start_snapshot_work(tables.widened).await?;
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
    if p.follow(from, stop_at, &mut shutdown).await? {
        p.finish_current().await;
    }
    Ok(p.summary)
}

/// What a run starts its pipeline with.
struct Begin {
    lake: Lake,
    committed: Option<Manifest>,
    source: SourceSetup,
    tracker: SchemaTracker,
    cursor: Cursor,
    start_position: BinlogPosition,
    table_logs: TableLogs,
    snapshot: Option<snapshot::SnapshotRun>,
}

impl<'c> Pipeline<'c> {
    fn new(config: &'c Config, opts: &RunOptions, b: Begin) -> Self {
        let writer_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let prepared = prepared_xa(b.committed.as_ref());
        Pipeline {
            settings: StreamSettings::of(config),
            lake: b.lake,
            server: b.source.server,
            compactions: compaction::Compactions::new(
                &config.compaction,
                &writer_id,
                config.current.enabled,
                config.background_share(),
            ),
            retention: retention::Retention::new(&config.retention, config.current.enabled),
            writer_id,
            tracker: b.tracker,
            plans: HashMap::new(),
            buffers: BTreeMap::new(),
            pending: Vec::new(),
            in_flight: VecDeque::new(),
            open_files: HashMap::new(),
            routed_batches: HashMap::new(),
            gtid_state: b.source.start_gtid,
            streamed: false,
            next_seq: b.cursor.next_seq,
            next_tx_seq: b.cursor.next_tx_seq,
            origin: b.cursor.clone(),
            cursor: b.cursor,
            committed: b.committed,
            file_counter: 0,
            file: b.start_position.file.clone(),
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
            routed: HashMap::new(),
            tx_rows: 0,
            tx_gtid: None,
            tx_ddl: false,
            tx_sql: None,
            last_checkpoint: Instant::now(),
            tables: b.table_logs,
            rewound: false,
            stats: DecodeStats::default(),
            summary: RunSummary::default(),
            snapshot: b.snapshot,
            read_to: b.start_position,
            statement_end: None,
            requests: Default::default(),
            metrics: opts
                .metrics
                .clone()
                .unwrap_or_else(|| Metrics::new(config.flush.max_buffer_bytes)),
            file_ops: HashMap::new(),
            read_ts: 0,
            idle: false,
            current: current::CurrentFolds::new(
                &config.current,
                &config.state_dir,
                config.background_share(),
                config.sink.requests_in_flight,
                &config.routes,
            ),
            deadline: None,
        }
    }

    /// Streams from `from` until `stop_at` (or for good), reconnecting
    /// from the last checkpoint after a transient error with backoff.
    /// `false` when SIGTERM came during a backoff: nothing is left to do.
    async fn follow(
        &mut self,
        mut from: StreamStart,
        stop_at: Option<BinlogPosition>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool> {
        let mut failures = 0u32;
        loop {
            match self.stream(from, stop_at.clone(), shutdown).await {
                Ok(()) => return Ok(true),
                Err(e) if e.is_transient() && !*shutdown.borrow() => {
                    self.metrics.set_connected(false);
                    self.metrics.error(&e);
                    self.metrics.reconnect();
                    // A stream that delivered events ended a working connection:
                    // the next outage starts its backoff from the beginning.
                    if self.streamed {
                        failures = 0;
                    }
                    failures += 1;
                    let delay = backoff(failures);
                    from = self.rewind().await?;
                    warn!(error = %e, kind = %e.kind(), retry_in = ?delay, resume = %from, "transient error: reconnecting from the last checkpoint");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return Ok(false),
                    }
                }
                Err(e) => {
                    self.stop_background().await;
                    return Err(e);
                }
            }
        }
    }
}

impl Pipeline<'_> {
    async fn stream(
        &mut self,
        start: StreamStart,
        stop_at: Option<BinlogPosition>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        self.streamed = false;
        let mut stream = source::open_stream(self.settings.source, &self.server, &start).await?;
        let mut tick =
            tokio::time::interval(self.settings.flush.interval.min(Duration::from_secs(1)));
        let mut stopping: Option<Instant> = None;
        let mut saw_fde = false;
        // The server sends a heartbeat every `source.heartbeat` while idle:
        // nothing for three of them (and 2 s for the network) means the
        // connection is dead, or the server hung. Only time spent waiting
        // counts: the deadline moves after sluice's own work, so a slow
        // checkpoint is never taken for a silent server.
        let idle_limit = self.settings.source.heartbeat * 3 + Duration::from_secs(2);
        let mut waiting_since = Instant::now();
        // Re-armed lazily when it fires early, not per event (hot path).
        let idle = tokio::time::sleep(idle_limit);
        tokio::pin!(idle);
        loop {
            let event = tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => ev,
                    Some(Err(e)) => return Err(source::stream_error(e, &self.position(), self.settings.source)),
                    None if self.settings.source.binlog_dir.is_some() => {
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
                        if since.elapsed() > self.settings.shutdown_timeout {
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
                    if self.reached(stop_at.as_ref()) {
                        return self.end_caught_up().await;
                    }
                    continue;
                }
                msg = snapshot::SnapshotRun::next(&mut self.snapshot) => {
                    self.on_snapshot_message(msg, true).await?;
                    waiting_since = Instant::now();
                    // The last table read (an idle server: no event follows).
                    if self.reached(stop_at.as_ref()) {
                        return self.end_caught_up().await;
                    }
                    continue;
                }
                changed = shutdown.changed(), if stopping.is_none() => {
                    if changed.is_ok() {
                        info!("shutdown requested: finishing the transaction in hand");
                        stopping = Some(Instant::now());
                        self.deadline = Some(Instant::now() + self.settings.shutdown_timeout);
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
            if self.reached(stop_at.as_ref()) {
                return self.end_caught_up().await;
            }
            waiting_since = Instant::now();
        }
    }

    /// `run --until-caught-up` is done: between transactions, at or past
    /// the binlog head of the start, every snapshot table read.
    fn reached(&self, stop_at: Option<&BinlogPosition>) -> bool {
        stop_at.is_some_and(|head| !self.in_tx && self.position() >= *head && self.snapshot_done())
    }

    async fn end_caught_up(&mut self) -> Result<()> {
        self.checkpoint().await?;
        info!(head = %self.position(), "caught up with the binlog head at start");
        Ok(())
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
