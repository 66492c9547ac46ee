//! `sluice run`: the thin top that wires source → decode → batch → sink →
//! commit. One task reads events in stream order; every transaction
//! boundary may become a checkpoint. [`xa`] holds the rows of prepared XA
//! transactions until their outcome.

mod current;
mod requests;
mod snapshot;
pub mod xa;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_common::binlog::events::{Event, ExecuteLoadQueryEvent, QueryEvent, TableMapEvent};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::batch::savepoint::{seq_range, Savepoints};
use crate::batch::{RowOrigin, TableBuffer};
use crate::commit::{self, Cursor, DataFile, Lake, Manifest, PreparedXa, SourceIdentity, Writer};
use crate::config::{Config, Resume, StartPosition};
use crate::decode::rows::{decode_rows, DecodeStats, RowsKind, TablePlan};
use crate::decode::{self, classify_query, event_type as et, QueryKind};
use crate::error::{backoff, Error, Result};
use crate::http::metrics::{op_counts, OpCounts};
use crate::http::Metrics;
use crate::schema::bootstrap;
use crate::schema::history::{self, SchemaHistory};
use crate::table::{SchemaVersions, TableLogs};

use crate::schema::tracker::{SchemaTracker, StreamPoint};
use crate::schema::TableSchema;
use crate::sink;
use crate::source::gtid::GtidState;
use crate::source::{self, BinlogPosition, ServerInfo, StreamStart};
use arrow::record_batch::RecordBatch;
use object_store::ObjectStoreExt;

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
}

/// A table buffer on its way to the store: Parquet encoding on the blocking
/// pool, then the upload.
struct Flush {
    task: tokio::task::JoinHandle<Result<DataFile>>,
    /// The buffer's memory estimate, held until the file is written.
    bytes: usize,
    /// Rows of a prepared XA transaction: a held file, not a pending one.
    held: bool,
}

/// At most this many buffers are encoded and uploaded at once; the decoder
/// waits for the oldest beyond that.
const MAX_IN_FLIGHT: usize = 2;

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
}

pub async fn run(
    config: &Config,
    opts: RunOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<RunSummary> {
    let lake = Lake::open(&config.sink)?;
    // Fencing rests on put-if-absent: refuse a store that cannot do it.
    sink::probe_put_if_absent(lake.store.as_ref(), &config.sink.url).await?;
    let committed = lake.latest_manifest().await?;
    if let Some(m) = &committed {
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
            Err(e) => {
                warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not make the Delta commits missing for committed manifests; the next checkpoint tries again");
                table_logs.behind = true;
            }
        }
    }
    let mut tracker =
        SchemaTracker::new(history, config.filter.clone(), db_charsets, server_charset)?;
    tracker.set_server_version(&server.version);

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
    let mut p = Pipeline {
        config,
        lake,
        server,
        writer_id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
        tracker,
        plans: HashMap::new(),
        buffers: BTreeMap::new(),
        pending: Vec::new(),
        in_flight: VecDeque::new(),
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
        requests: Default::default(),
        metrics: opts
            .metrics
            .clone()
            .unwrap_or_else(|| Metrics::new(config.flush.max_buffer_bytes)),
        file_ops: HashMap::new(),
        read_ts: 0,
        idle: false,
        current: current::CurrentFolds::new(config),
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
            Err(e) => return Err(e),
        }
    }
    p.finish_current().await;
    Ok(p.summary)
}

/// What the run learned about its source before streaming.
struct SourceSetup {
    server: ServerInfo,
    start: StreamStart,
    /// The GTID state at `start` (empty when unknown).
    start_gtid: GtidState,
    head: BinlogPosition,
    /// `start` is already at the head.
    caught_up: bool,
    tables: BTreeMap<(String, String), crate::schema::TableSchema>,
    db_charsets: BTreeMap<String, String>,
    server_charset: String,
}

/// Connects (or opens the binlog files), checks the source, and decides
/// where to start: the committed cursor — by GTID or by position, see
/// `source.resume` — or `source.start` on an empty lake.
/// The prepared XA transactions a manifest lists, by xid.
fn prepared_xa(committed: Option<&Manifest>) -> BTreeMap<String, PreparedXa> {
    committed
        .map(|m| {
            m.xa_prepared
                .iter()
                .map(|x| (x.xid.clone(), x.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn open_source(config: &Config, committed: Option<&Manifest>) -> Result<SourceSetup> {
    let cfg = &config.source;
    if let Some(dir) = &cfg.binlog_dir {
        return open_offline(config, dir, committed).await;
    }
    let mut conn = source::connect(cfg).await?;
    let (server, checks) = source::preflight(&mut conn, cfg).await?;
    source::require(&checks)?;
    let head = source::head(&mut conn).await?;
    let flavor = server.flavor;
    let head_gtid = if server.gtid {
        Some(source::head_gtid(&mut conn, flavor).await?)
    } else {
        None
    };
    let (start, start_gtid) = match committed {
        Some(m) => {
            let gtid = source::gtid_state(flavor, m.cursor.gtid.as_deref().unwrap_or(""))?;
            let by_gtid = match cfg.resume {
                Resume::Position => false,
                Resume::Auto => server.gtid && !gtid.is_empty(),
                Resume::Gtid if !server.gtid => {
                    return Err(Error::Position(
                        "source.resume = \"gtid\" but the server has gtid_mode OFF; turn GTIDs on or set source.resume = \"position\"".into(),
                    ))
                }
                Resume::Gtid if gtid.is_empty() => {
                    return Err(Error::Position(format!(
                        "source.resume = \"gtid\" but manifest {} holds no GTID state; resume by position once (source.resume = \"auto\") so the cursor learns it",
                        m.seq
                    )))
                }
                Resume::Gtid => true,
            };
            if by_gtid {
                info!(manifest = m.seq, gtid = %gtid, "resuming from the newest manifest by GTID (source.start is ignored)");
                (StreamStart::Gtid(gtid.clone()), gtid)
            } else {
                let at = source::resolve_start(
                    &mut conn,
                    &StartPosition::At {
                        file: m.cursor.file.clone(),
                        pos: m.cursor.pos,
                    },
                )
                .await?;
                info!(manifest = m.seq, cursor = %at, "resuming from the newest manifest (source.start is ignored)");
                (StreamStart::Position(at), gtid)
            }
        }
        None => {
            let start = match &cfg.start {
                StartPosition::Gtid(text) => {
                    if !server.gtid {
                        return Err(Error::Position(
                            "source.start.gtid: the server has gtid_mode OFF; start from a file and position".into(),
                        ));
                    }
                    StreamStart::Gtid(source::gtid_state(flavor, text)?)
                }
                StartPosition::Timestamp(t) => {
                    let logs = source::binary_logs(&mut conn).await?;
                    let server = &server;
                    let at = source::find_timestamp(
                        cfg,
                        |file| async move {
                            let at = StreamStart::Position(BinlogPosition { file, pos: 4 });
                            source::open_stream(cfg, server, &at).await
                        },
                        &logs,
                        &head,
                        *t,
                    )
                    .await?;
                    info!(timestamp = %t, start = %at, "found the first transaction at or after the start time");
                    StreamStart::Position(at)
                }
                other => StreamStart::Position(source::resolve_start(&mut conn, other).await?),
            };
            let gtid = match &start {
                StreamStart::Gtid(g) => g.clone(),
                StreamStart::Position(at) if server.gtid => {
                    source::gtid_at(&mut conn, flavor, at).await?
                }
                StreamStart::Position(_) => source::gtid_state(flavor, "")?,
            };
            info!(start = %start, "empty lake: starting at the configured position");
            (start, gtid)
        }
    };
    if let (StreamStart::Gtid(ours), Some(theirs)) = (&start, &head_gtid) {
        if !theirs.covers(ours) {
            return Err(Error::Position(format!(
                "GTID state {ours} is ahead of the server's ({theirs}): it lacks transactions the lake already has (another server, or a replica that is behind); point source.url at a server that has them, or wait for this one to catch up"
            )));
        }
    }
    let caught_up = match (&start, &head_gtid) {
        (StreamStart::Position(p), _) => *p >= head,
        (StreamStart::Gtid(g), Some(h)) => g.covers(h),
        (StreamStart::Gtid(_), None) => false,
    };
    let (tables, db_charsets, server_charset) =
        bootstrap::read_shapes(&mut conn, &config.filter).await?;
    Ok(SourceSetup {
        server,
        start,
        start_gtid,
        head,
        caught_up,
        tables,
        db_charsets,
        server_charset,
    })
}

/// Offline replay: the server identity comes from the first file's format
/// description; table shapes from the history, in-stream DDL and FULL
/// metadata — or from information_schema when `source.url` is also set.
async fn open_offline(
    config: &Config,
    dir: &std::path::Path,
    committed: Option<&Manifest>,
) -> Result<SourceSetup> {
    let cfg = &config.source;
    let logs = source::files::list(dir)?;
    let first = source::files::describe(&dir.join(&logs[0].0))?;
    let server = ServerInfo {
        flavor: if first.version.to_ascii_lowercase().contains("mariadb") {
            source::Flavor::Mariadb
        } else {
            source::Flavor::Mysql
        },
        version: first.version,
        server_id: first.server_id,
        server_uuid: None,
        checksum: first.checksum,
        gtid: false,
    };
    let (last, size) = logs.last().cloned().unwrap_or_default();
    let head = BinlogPosition {
        file: last,
        pos: size,
    };
    let start = match (committed, &cfg.start) {
        (Some(m), _) => {
            let at = BinlogPosition {
                file: m.cursor.file.clone(),
                pos: m.cursor.pos,
            };
            info!(manifest = m.seq, cursor = %at, "resuming offline replay from the newest manifest");
            // A closed file ends with a rotate that leaves the cursor at the
            // start of the next file: until that file is copied here there
            // is nothing more to replay (`caught_up`), which is no error.
            let next_file_not_here_yet = at.pos == 4 && at > head;
            if !next_file_not_here_yet {
                source::validate_position(&logs, &at)?;
            }
            at
        }
        (None, StartPosition::Earliest) => BinlogPosition {
            file: logs[0].0.clone(),
            pos: 4,
        },
        (None, StartPosition::Latest) => head.clone(),
        (None, StartPosition::At { file, pos }) => {
            let at = BinlogPosition {
                file: file.clone(),
                pos: *pos,
            };
            source::validate_position(&logs, &at)?;
            at
        }
        (None, StartPosition::Gtid(_)) => {
            return Err(Error::Position(
                "source.start.gtid: offline replay (source.binlog_dir) starts from \"earliest\", a file and position, or a timestamp".into(),
            ))
        }
        (None, StartPosition::Timestamp(t)) => {
            let checksum = server.checksum;
            source::find_timestamp(
                cfg,
                |file| async move {
                    let at = BinlogPosition { file, pos: 4 };
                    Ok(source::stream::EventStream::from_packets(
                        source::files::open(dir, &at, checksum)?,
                    ))
                },
                &logs,
                &head,
                *t,
            )
            .await?
        }
    };
    let gtid = source::gtid_state(
        server.flavor,
        committed
            .and_then(|m| m.cursor.gtid.as_deref())
            .unwrap_or(""),
    )?;
    let (tables, db_charsets, server_charset) = if cfg.has_server() {
        let mut conn = source::connect(cfg).await?;
        bootstrap::read_shapes(&mut conn, &config.filter).await?
    } else {
        (BTreeMap::new(), BTreeMap::new(), "utf8mb4".to_string())
    };
    Ok(SourceSetup {
        server,
        caught_up: start >= head,
        start: StreamStart::Position(start),
        start_gtid: gtid,
        head,
        tables,
        db_charsets,
        server_charset,
    })
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
                    if self.current.behind() {
                        self.current.after_commit(&self.lake.store, self.committed.as_ref(), self.tracker.history());
                    }
                    self.current.publish(&self.metrics);
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

    /// Forgets everything not committed and returns the position to read
    /// from again: the last checkpoint's cursor. Re-reading assigns the same
    /// `_seq` and `_tx_seq` values, so a retry neither loses nor repeats a row.
    async fn rewind(&mut self) -> Result<StreamStart> {
        // Let running uploads finish so that none lands unseen; their files
        // go with the pending ones.
        while let Some(flush) = self.in_flight.pop_front() {
            if let Ok(Ok(file)) = flush.task.await {
                self.pending.push(file);
            }
        }
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
        let by_gtid = match self.config.source.resume {
            Resume::Position => false,
            Resume::Auto | Resume::Gtid => self.server.gtid && !self.gtid_state.is_empty(),
        };
        Ok(if by_gtid {
            StreamStart::Gtid(self.gtid_state.clone())
        } else {
            StreamStart::Position(self.position())
        })
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

    fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.elapsed() >= self.config.flush.interval && self.dirty()
    }

    fn dirty(&self) -> bool {
        !self.pending.is_empty()
            || !self.in_flight.is_empty()
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

    /// Handles one event; returns true at a transaction boundary.
    async fn handle(&mut self, event: &Event, saw_fde: &mut bool) -> Result<bool> {
        let header = event.header();
        let end = header.log_pos() as u64;
        let start = end.saturating_sub(header.event_size() as u64);
        let ty = header.event_type_raw();
        // Artificial events (the opening rotate, heartbeats) sit nowhere.
        let real = end > 0 && ty != et::HEARTBEAT && ty != et::HEARTBEAT_V2;
        if real && !self.in_tx && self.snapshot.as_ref().is_some_and(|s| s.has_waiting()) {
            let here = BinlogPosition {
                file: self.file.clone(),
                pos: start,
            };
            self.place_chunks(&here).await?;
        }
        let boundary = self.handle_event(event, start, end, saw_fde).await?;
        if real {
            self.read_ts = header.timestamp();
            if self.idle {
                self.idle = false;
                self.metrics.set_idle(false);
            }
        } else if ty == et::HEARTBEAT || ty == et::HEARTBEAT_V2 {
            // The server has sent everything it has: the lag is nil once
            // everything read is committed.
            let idle = !self.in_tx && !self.dirty();
            if idle != self.idle {
                self.idle = idle;
                self.metrics.set_idle(idle);
            }
        }
        if real {
            if ty == et::ROTATE || self.read_to.file != self.file {
                // A new file; a stream resumed inside it (by GTID) reads
                // from the cursor on, whatever its header events say.
                let resumed = match self.cursor.file == self.file {
                    true => self.cursor.pos,
                    false => 4,
                };
                self.read_to = BinlogPosition {
                    file: self.file.clone(),
                    pos: if ty == et::ROTATE {
                        4
                    } else {
                        end.max(resumed)
                    },
                };
            } else if end > self.read_to.pos {
                self.read_to.pos = end;
            }
        }
        Ok(boundary)
    }

    async fn handle_event(
        &mut self,
        event: &Event,
        start: u64,
        end: u64,
        saw_fde: &mut bool,
    ) -> Result<bool> {
        let header = event.header();
        if header.event_type_raw() == et::TRANSACTION_PAYLOAD {
            // MySQL binlog transaction compression: the inner events have no
            // positions of their own; they all sit at the payload's.
            let inner = decode::payload::payload_events(event, self.config.flush.max_buffer_bytes)
                .map_err(|m| Error::decode(&self.file, start, m))?;
            let mut boundary = false;
            for e in inner {
                let e = e.map_err(|m| Error::decode(&self.file, start, m))?;
                boundary |= self.handle_at(&e, start, end, saw_fde).await?;
            }
            return Ok(boundary);
        }
        self.handle_at(event, start, end, saw_fde).await
    }

    /// Handles one event that spans `start..end` of the current file.
    async fn handle_at(
        &mut self,
        event: &Event,
        start: u64,
        end: u64,
        saw_fde: &mut bool,
    ) -> Result<bool> {
        let header = event.header();
        let ty = header.event_type_raw();
        let body = event.data();
        let at = |msg: String| Error::decode(&self.file, start, msg);
        match ty {
            et::ROTATE => {
                let mut name = body.get(8..).unwrap_or_default();
                if !*saw_fde && self.server.checksum && name.len() > 4 {
                    // The first fake rotate precedes the format description, so
                    // its checksum has not been stripped (notes: MariaDB facts).
                    name = &name[..name.len() - 4];
                }
                let pos = decode::values::le_uint(body.get(..8).unwrap_or_default());
                self.file = String::from_utf8_lossy(name).into_owned();
                // The rotate a stream begins with (log_pos 0) restates where
                // it starts; after a GTID start it says "file:4" although the
                // server skips to the GTID, so it moves the cursor only to
                // another file. A real rotate ends a file.
                let opening = end == 0;
                if !self.in_tx && (!opening || self.cursor.file != self.file) {
                    self.cursor.file = self.file.clone();
                    self.cursor.pos = pos;
                }
                debug!(file = %self.file, pos, "rotate");
                Ok(false)
            }
            et::FORMAT_DESCRIPTION => {
                *saw_fde = true;
                // The server version of the file's writer (bytes 2..52).
                if let Some(v) = body.get(2..52) {
                    let v = String::from_utf8_lossy(v);
                    self.tracker.set_server_version(v.trim_end_matches('\0'));
                }
                self.pass_file_header(end);
                Ok(false)
            }
            et::MARIADB_GTID => {
                let (gtid, standalone) = decode::mariadb_gtid(body, header.server_id())
                    .ok_or_else(|| at("GTID event too short".into()))?;
                self.in_tx = true;
                // MariaDB's GTID event takes the place of BEGIN; a standalone
                // one is a DDL statement that ends with itself.
                self.tx_open = !standalone;
                self.savepoints.begin(self.next_seq);
                self.tx_gtid = Some(gtid);
                const FL_PREPARED_XA: u8 = 0x40;
                if body.get(12).is_some_and(|f| f & FL_PREPARED_XA != 0) {
                    self.begin_xa()?;
                }
                Ok(false)
            }
            et::MYSQL_GTID => {
                self.in_tx = true;
                self.savepoints.begin(self.next_seq);
                self.tx_gtid = decode::mysql_gtid(body);
                Ok(false)
            }
            et::MYSQL_PREVIOUS_GTIDS if self.gtid_state.is_empty() => {
                // MySQL: the set executed before this file, where a
                // position-started lake learns its GTID state.
                let prev: mysql_common::binlog::events::PreviousGtidsEvent<'_> = event
                    .read_event()
                    .map_err(|e| at(format!("bad Previous_gtids event: {e}")))?;
                for sid in prev.sids() {
                    let uuid = mysql_common::uuid::Uuid::from_bytes(sid.uuid()).to_string();
                    let key = match sid.tag() {
                        Some(tag) => format!("{uuid}:{}", tag.as_str()),
                        None => uuid,
                    };
                    for iv in sid.intervals() {
                        // GnoInterval ends are exclusive.
                        self.gtid_state.add_range(&key, iv.start(), iv.end().saturating_sub(1));
                    }
                }
                self.pass_file_header(end);
                Ok(false)
            }
            et::MYSQL_PREVIOUS_GTIDS | et::MARIADB_GTID_LIST | et::MARIADB_BINLOG_CHECKPOINT => {
                self.pass_file_header(end);
                Ok(false)
            }
            et::QUERY => {
                let q: QueryEvent<'_> = event.read_event().map_err(|e| at(format!("bad Query event: {e}")))?;
                let statement = q.query();
                match classify_query(&statement) {
                    QueryKind::Begin => {
                        if !self.tx_open {
                            self.savepoints.begin(self.next_seq);
                        }
                        if xa::is_xa_start(&statement) {
                            self.begin_xa()?;
                        }
                        self.in_tx = true;
                        self.tx_open = true;
                        Ok(false)
                    }
                    QueryKind::Commit => {
                        if let Some(xa::XaOutcome::Commit { xid, one_phase }) =
                            xa::xa_outcome(&statement)
                        {
                            if one_phase {
                                self.commit_one_phase_xa().await?;
                            } else {
                                self.commit_xa(&xid).await?;
                            }
                        }
                        self.boundary(end);
                        Ok(true)
                    }
                    QueryKind::Rollback => {
                        // Logged only when a non-transactional table changed
                        // in the transaction: the rest of its rows are undone.
                        if !self.savepoints.rollback(self.next_seq).is_empty() {
                            self.take_back_rows().await?;
                        }
                        if let Some(xa::XaOutcome::Rollback { xid }) = xa::xa_outcome(&statement) {
                            if let Some(p) = self.prepared.remove(&xid) {
                                info!(%xid, "XA ROLLBACK: the prepared rows are dropped");
                                self.xa_done.extend(p.files.into_iter().map(|f| f.path));
                            }
                        }
                        self.boundary(end);
                        Ok(true)
                    }
                    QueryKind::Savepoint(name) => {
                        self.savepoints.set(&name, self.next_seq);
                        Ok(false)
                    }
                    QueryKind::RollbackTo(name) => {
                        let taken = self
                            .savepoints
                            .rollback_to(&name, self.next_seq)
                            .map_err(at)?;
                        if !taken.is_empty() {
                            debug!(savepoint = %name, rows = taken.end - taken.start, "rows taken back by ROLLBACK TO SAVEPOINT");
                            self.take_back_rows().await?;
                        }
                        Ok(false)
                    }
                    QueryKind::Other => {
                        decode::dml::refuse_captured(&statement, &q.schema(), &self.config.filter, &self.file, start)?;
                        let at = self.stream_point(start, header.timestamp());
                        let fx = self.tracker.apply_ddl(&statement, &q.schema(), ansi_quotes(&q), &at)?;
                        if fx.captured {
                            self.tx_ddl = true;
                            self.apply_ddl_effects(fx, &at).await?;
                        }
                        // Inside a transaction (SAVEPOINT, ROLLBACK TO
                        // SAVEPOINT, XA END, the CREATE TABLE of a CREATE
                        // TABLE … SELECT) a statement is no boundary: a
                        // checkpoint there would split the transaction.
                        if self.tx_open {
                            return Ok(false);
                        }
                        self.boundary(end);
                        Ok(true)
                    }
                }
            }
            et::EXECUTE_LOAD_QUERY => {
                let q: ExecuteLoadQueryEvent<'_> = event.read_event().map_err(|e| at(format!("bad Execute_load_query event: {e}")))?;
                decode::dml::refuse_captured(&q.query(), &q.schema(), &self.config.filter, &self.file, start)?;
                Ok(false)
            }
            et::MYSQL_ROWS_QUERY | et::MARIADB_ANNOTATE_ROWS => {
                let text = decode::statement_text(ty, body, self.config.source.max_sql_bytes);
                self.tx_sql = Some(text);
                Ok(false)
            }
            et::XID => {
                self.boundary(end);
                Ok(true)
            }
            et::XA_PREPARE => {
                let xid = xa::prepare_xid(body)
                    .ok_or_else(|| at("XA_PREPARE event too short for its xid".into()))?;
                self.prepare_xa(xid).await?;
                self.boundary(end);
                Ok(true)
            }
            et::TABLE_MAP => {
                let tme: TableMapEvent<'_> = event
                    .read_event()
                    .map_err(|e| at(format!("bad TABLE_MAP: {e}")))?;
                let point = self.stream_point(start, header.timestamp());
                let plan = self.tracker.plan_for(&tme, &point)?;
                self.plans.insert(tme.table_id(), plan);
                Ok(false)
            }
            et::WRITE_ROWS_V1 | et::UPDATE_ROWS_V1 | et::DELETE_ROWS_V1 | et::WRITE_ROWS_V2 | et::UPDATE_ROWS_V2
            | et::DELETE_ROWS_V2 | et::PARTIAL_UPDATE_ROWS => {
                self.close_outdated_buffer(body).await?;
                self.rows_event(ty, body, start, header.timestamp())?;
                self.apply_memory_limits().await?;
                Ok(false)
            }
            t if (et::MARIADB_COMPRESSED_FIRST..=et::MARIADB_COMPRESSED_LAST).contains(&t) => Err(at(
                "compressed binlog events (log_bin_compress=ON) are not supported; set log_bin_compress=OFF on the source".into(),
            )),
            _ => Ok(false),
        }
    }

    /// The events a binlog file begins with (format description, GTID list,
    /// binlog checkpoint, previous GTIDs) hold no rows: reading may resume
    /// after them, so the cursor moves over them. Without this, a file that
    /// holds nothing else (the server restarted, or flushed its logs, and
    /// nothing was written since) would leave the cursor at its position 4
    /// while the head is past them, and `--until-caught-up` would never end.
    fn pass_file_header(&mut self, end: u64) {
        if !self.in_tx && self.cursor.file == self.file && end > self.cursor.pos {
            self.cursor.pos = end;
        }
    }

    /// One Parquet file never mixes schema versions: when the rows event's
    /// table has a newer version than its open buffer, the buffer is written out.
    async fn close_outdated_buffer(&mut self, body: &[u8]) -> Result<()> {
        let table_id = decode::values::le_uint(body.get(..6).unwrap_or_default());
        let Some(Some(plan)) = self.plans.get(&table_id) else {
            return Ok(());
        };
        let name = plan.schema.qualified_name();
        if self
            .buffers
            .get(&name)
            .is_some_and(|b| !Arc::ptr_eq(&b.table, &plan.schema))
        {
            self.flush_table(&name).await?;
            self.buffers.remove(&name);
        }
        Ok(())
    }

    fn rows_event(&mut self, ty: u8, body: &[u8], start: u64, timestamp: u32) -> Result<()> {
        let table_id = decode::values::le_uint(body.get(..6).unwrap_or_default());
        let plan = match self.plans.get(&table_id) {
            Some(Some(plan)) => Arc::clone(plan),
            Some(None) => return Ok(()),
            None => {
                return Err(Error::decode(
                    &self.file,
                    start,
                    format!("rows event for table id {table_id} without a TABLE_MAP"),
                ))
            }
        };
        let Some((kind, post_header)) = RowsKind::of_event_type(ty) else {
            return Err(Error::decode(
                &self.file,
                start,
                format!("event type {ty} is not a rows event"),
            ));
        };
        let name = plan.schema.qualified_name();
        let buffer = self
            .buffers
            .entry(name.clone())
            .or_insert_with(|| TableBuffer::new(Arc::clone(&plan.schema)));
        let origin = RowOrigin {
            tx_seq: self.next_tx_seq,
            file: &self.file,
            pos: start,
            gtid: self.tx_gtid.as_deref(),
            timestamp,
            sql: self.tx_sql.as_ref(),
        };
        let rows = decode_rows(
            &plan,
            kind,
            body,
            post_header,
            buffer,
            &origin,
            &mut self.next_seq,
            &mut self.stats,
        )
        .map_err(|e| Error::decode(&self.file, start, format!("{name}: {e}")))?;
        self.tx_rows += rows as u64;
        if let Some(run) = self.snapshot.as_mut().filter(|r| r.watches(&name)) {
            // A chunk's watermark window is open on the table: its rows
            // whose key changes here are left to the stream.
            let mut changed = TableBuffer::new(Arc::clone(&plan.schema));
            let origin = RowOrigin {
                tx_seq: 0,
                file: &self.file,
                pos: start,
                gtid: None,
                timestamp,
                sql: None,
            };
            decode_rows(
                &plan,
                kind,
                body,
                post_header,
                &mut changed,
                &origin,
                &mut 0,
                &mut DecodeStats::default(),
            )
            .map_err(|e| Error::decode(&self.file, start, format!("{name}: {e}")))?;
            run.note_changed_rows(&name, &plan.schema, &changed.finish()?)?;
        }
        Ok(())
    }

    /// `max_rows` per table and `max_buffer_bytes` overall, honoured even
    /// inside a transaction: files written here are pending until the next
    /// checkpoint commits them.
    ///
    /// The budget covers the open buffers and those being encoded. A buffer
    /// is sent off once the open ones pass half of it, so that one can be
    /// encoded while the next fills; the decoder waits only when the
    /// encoder falls behind.
    async fn apply_memory_limits(&mut self) -> Result<()> {
        let full: Vec<String> = self
            .buffers
            .iter()
            .filter(|(_, b)| b.rows() >= self.config.flush.max_rows)
            .map(|(k, _)| k.clone())
            .collect();
        for name in full {
            self.flush_table(&name).await?;
        }
        let limit = self.config.flush.max_buffer_bytes - current::fold_share(self.config);
        let open = |p: &Self| p.buffers.values().map(|b| b.approx_bytes()).sum::<usize>();
        while open(self) > limit / 2 {
            let largest = self
                .buffers
                .iter()
                .filter(|(_, b)| b.rows() > 0)
                .max_by_key(|(_, b)| b.approx_bytes())
                .map(|(k, _)| k.clone());
            match largest {
                Some(name) => self.flush_table(&name).await?,
                None => break,
            }
        }
        while !self.in_flight.is_empty()
            && open(self) + self.in_flight.iter().map(|f| f.bytes).sum::<usize>() > limit
        {
            self.finish_oldest_flush().await?;
        }
        Ok(())
    }

    /// Where the stream is, for schema versions taking effect here.
    fn stream_point(&self, start: u64, timestamp: u32) -> StreamPoint {
        StreamPoint {
            position: BinlogPosition {
                file: self.file.clone(),
                pos: start,
            },
            gtid: self.tx_gtid.clone(),
            timestamp,
            tx_seq: self.next_tx_seq,
            checkpoint: self.next_manifest_seq(),
        }
    }

    /// A DDL statement changed captured tables: `truncate` markers for
    /// TRUNCATE/DROP, then the affected buffers are written out so that no
    /// file mixes two schema versions.
    async fn apply_ddl_effects(
        &mut self,
        fx: crate::schema::tracker::DdlEffects,
        at: &StreamPoint,
    ) -> Result<()> {
        if let Some(run) = self.snapshot.as_mut() {
            for name in fx.markers.iter().map(|s| s.qualified_name()) {
                run.table_changed(&name);
            }
            for name in &fx.closed {
                run.table_changed(name);
            }
        }
        for shape in fx.markers {
            let name = shape.qualified_name();
            let needs_new = self
                .buffers
                .get(&name)
                .is_none_or(|b| !Arc::ptr_eq(&b.table, &shape));
            if needs_new {
                self.flush_table(&name).await?;
                self.buffers
                    .insert(name.clone(), TableBuffer::new(Arc::clone(&shape)));
            }
            let origin = RowOrigin {
                tx_seq: at.tx_seq,
                file: &self.file,
                pos: at.position.pos,
                gtid: at.gtid.as_deref(),
                timestamp: at.timestamp,
                sql: None,
            };
            if let Some(b) = self.buffers.get_mut(&name) {
                b.push_marker(self.next_seq, &origin);
                self.next_seq += 1;
            }
        }
        for name in fx.closed {
            self.flush_table(&name).await?;
            self.buffers.remove(&name);
        }
        Ok(())
    }

    /// The end of a transaction (XID, COMMIT, or a DDL statement).
    fn boundary(&mut self, end: u64) {
        self.in_tx = false;
        self.tx_open = false;
        self.savepoints.end_transaction();
        if self.tx_rows > 0 || self.tx_ddl {
            self.next_tx_seq += 1;
        }
        self.tx_ddl = false;
        self.tx_sql = None;
        self.tx_rows = 0;
        if let Some(gtid) = self.tx_gtid.take() {
            self.gtid_state.add(&gtid);
        }
        self.cursor = Cursor {
            file: self.file.clone(),
            pos: end,
            gtid: (!self.gtid_state.is_empty()).then(|| self.gtid_state.to_string()),
            next_seq: self.next_seq,
            next_tx_seq: self.next_tx_seq,
        };
    }

    fn next_manifest_seq(&self) -> u64 {
        self.committed.as_ref().map(|m| m.seq).unwrap_or(0) + 1
    }

    /// Sends one table's buffer off to become a pending Parquet file, and
    /// waits for the oldest upload when too many are running.
    async fn flush_table(&mut self, name: &str) -> Result<()> {
        self.start_flush(name)?;
        while self.in_flight.len() > MAX_IN_FLIGHT {
            self.finish_oldest_flush().await?;
        }
        Ok(())
    }

    /// Starts encoding and uploading one table's buffer in the background.
    /// The file's name is fixed here, so names follow the stream's order.
    fn start_flush(&mut self, name: &str) -> Result<()> {
        let Some(buffer) = self.buffers.get_mut(name) else {
            return Ok(());
        };
        if buffer.rows() == 0 {
            return Ok(());
        }
        let table = Arc::clone(&buffer.table);
        let estimate = buffer.approx_bytes();
        let batch = self
            .savepoints
            .keep(&table.qualified_name(), buffer.finish()?)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        debug!(table = %table.qualified_name(), estimate, rows = batch.num_rows(), "flushing a buffer");
        self.write_batch(table, batch, self.xa_active)
    }

    /// Encodes and uploads one batch in the background as a pending file
    /// (or a held file of a prepared XA transaction).
    fn write_batch(
        &mut self,
        table: Arc<TableSchema>,
        batch: RecordBatch,
        held: bool,
    ) -> Result<()> {
        // What the batch holds, plus the encoder's compressed pages of the
        // row group and the file's bytes: each up to a quarter of the batch
        // with zstd on these tables.
        let bytes = batch.get_array_memory_size() * 3 / 2;
        let path = if held {
            self.xa_counter += 1;
            xa::held_file_path(
                self.next_manifest_seq(),
                &self.writer_id,
                self.xa_counter,
                &table.database,
                &table.name,
            )
        } else {
            self.file_counter += 1;
            commit::data_file_path(
                &table.database,
                &table.name,
                self.next_manifest_seq(),
                self.file_counter - 1,
                &self.writer_id,
            )
        };
        self.file_seqs.insert(path.to_string(), seq_range(&batch));
        if !held {
            self.file_ops.insert(path.to_string(), op_counts(&batch));
        }
        let store = Arc::clone(&self.lake.store);
        let threshold = self.config.sink.multipart_threshold;
        let task = tokio::spawn(async move {
            let rows = batch.num_rows() as u64;
            let encoded = tokio::task::spawn_blocking(move || sink::encode_parquet(&batch))
                .await
                .map_err(|e| Error::Lake(format!("parquet encoder task failed: {e}")))??;
            let size = sink::put_file(store.as_ref(), &path, encoded, threshold).await?;
            debug!(%path, rows, size, "wrote pending file");
            Ok(DataFile {
                table: table.qualified_name(),
                path: path.to_string(),
                rows,
                bytes: size,
                schema_version: table.version,
            })
        });
        self.in_flight.push_back(Flush { task, bytes, held });
        // Sampled per written buffer, not per event: the moments of most memory.
        let open: usize = self.buffers.values().map(|b| b.approx_bytes()).sum();
        self.metrics
            .set_buffer_bytes(open + self.in_flight.iter().map(|f| f.bytes).sum::<usize>());
        Ok(())
    }

    /// Waits for the oldest background flush; its file becomes pending.
    async fn finish_oldest_flush(&mut self) -> Result<()> {
        let Some(flush) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let file = flush
            .task
            .await
            .map_err(|e| Error::Lake(format!("flush task failed: {e}")))??;
        if flush.held {
            self.xa_written.push(file.path.clone());
            self.xa_files.push(file);
        } else {
            self.pending.push(file);
        }
        Ok(())
    }

    /// A logged ROLLBACK or ROLLBACK TO SAVEPOINT took rows back. The server
    /// undoes them only in transactional tables, so their engines are asked
    /// first (offline replay has no server to ask: every table counts as
    /// transactional there). Rows may already be in pending files (a buffer
    /// written out under memory pressure): those files are written again
    /// without them, under new names, and the old ones deleted. Rows still
    /// in buffers are left out when the buffers are written.
    async fn take_back_rows(&mut self) -> Result<()> {
        if self.config.source.binlog_dir.is_none() {
            let mut conn = source::connect(&self.config.source).await?;
            let kept: Vec<(String, String)> = mysql_async::prelude::Queryable::query(
                &mut conn,
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME FROM information_schema.TABLES t \
                 JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE \
                 WHERE e.TRANSACTIONS <> 'YES' \
                 AND t.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
            )
            .await
            .map_err(|e| Error::Connection(format!("reading the tables' engines: {e}")))?;
            drop(conn);
            self.savepoints
                .keep_tables(kept.into_iter().map(|(db, t)| format!("{db}.{t}")));
        } else {
            warn!("a logged rollback took rows back in offline replay: every table counts as transactional");
        }
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        for i in 0..self.pending.len() {
            let old = self.pending[i].path.clone();
            let table_name = self.pending[i].table.clone();
            let Some(seqs) = self.file_seqs.get(&old).cloned() else {
                continue;
            };
            if !self.savepoints.overlaps(&table_name, &seqs) {
                continue;
            }
            let old_path = crate::commit::stored_path(&old);
            let bytes = self.lake.store.get(&old_path).await?.bytes().await?;
            let batch = self
                .savepoints
                .keep(&table_name, sink::decode_parquet(bytes)?)?;
            let (db, table) = self.pending[i]
                .table
                .split_once('.')
                .ok_or_else(|| Error::Lake(format!("pending file {old} of an unnamed table")))?;
            let path = commit::data_file_path(
                db,
                table,
                self.next_manifest_seq(),
                self.file_counter,
                &self.writer_id,
            );
            self.file_counter += 1;
            let rows = batch.num_rows() as u64;
            let bytes = if rows > 0 {
                let encoded = sink::encode_parquet(&batch)?;
                sink::put_file(
                    self.lake.store.as_ref(),
                    &path,
                    encoded,
                    self.config.sink.multipart_threshold,
                )
                .await?
            } else {
                0
            };
            self.file_seqs.remove(&old);
            self.file_seqs.insert(path.to_string(), seq_range(&batch));
            let file = &mut self.pending[i];
            file.path = path.to_string();
            file.rows = rows;
            file.bytes = bytes;
            self.lake.store.delete(&old_path).await?;
        }
        self.pending.retain(|f| f.rows > 0);
        Ok(())
    }

    /// The prepared part of an XA transaction begins: what the buffers hold
    /// belongs to earlier transactions and goes off as pending files; what
    /// is written from here to the XA_PREPARE is held.
    fn begin_xa(&mut self) -> Result<()> {
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
        }
        self.xa_active = true;
        self.xa_files.clear();
        Ok(())
    }

    /// XA_PREPARE: the transaction's rows go to held files, listed under its
    /// xid by every manifest until its outcome. Its rows consume no
    /// `_tx_seq` here; they get one at XA COMMIT.
    async fn prepare_xa(&mut self, xid: String) -> Result<()> {
        if !self.xa_active {
            warn!(%xid, at = %self.position(), "XA_PREPARE outside an XA transaction");
            return Ok(());
        }
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
        }
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        self.xa_active = false;
        self.tx_rows = 0;
        let files = std::mem::take(&mut self.xa_files);
        if !files.is_empty() {
            info!(%xid, files = files.len(), "XA PREPARE: rows held until XA COMMIT");
            self.prepared.insert(
                xid.clone(),
                PreparedXa {
                    xid,
                    gtid: self.tx_gtid.clone(),
                    files,
                },
            );
        }
        Ok(())
    }

    /// XA COMMIT of a prepared transaction: its held rows enter the stream
    /// here, with `_seq` and `_tx_seq` of this point.
    async fn commit_xa(&mut self, xid: &str) -> Result<()> {
        let Some(p) = self.prepared.remove(xid) else {
            if self.xa_active {
                // MySQL: XA COMMIT of a transaction in hand that was never prepared.
                return self.commit_one_phase_xa().await;
            }
            warn!(%xid, at = %self.position(), "XA COMMIT of a transaction prepared before the lake's start position: its rows are not in the lake");
            return Ok(());
        };
        for file in p.files {
            let tx_seq = self.next_tx_seq;
            let first = self.next_seq;
            let copied = self.copy_held_file(&file, Some((first, tx_seq))).await?;
            self.next_seq += copied.rows as i64;
            self.tx_rows += copied.rows;
            self.pending.push(copied);
            self.xa_done.push(file.path);
        }
        Ok(())
    }

    /// MySQL's `XA COMMIT … ONE PHASE` ends an XA transaction that was never
    /// prepared: an ordinary transaction. Rows written out while it ran were
    /// held; they move to the table folders as they are (their `_seq` is
    /// already in order).
    async fn commit_one_phase_xa(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        self.xa_active = false;
        for file in std::mem::take(&mut self.xa_files) {
            let copied = self.copy_held_file(&file, None).await?;
            self.pending.push(copied);
            self.xa_done.push(file.path);
        }
        Ok(())
    }

    /// Copies a held file into its table's folder as a pending data file,
    /// optionally with new `_seq` (from `first`) and `_tx_seq`.
    async fn copy_held_file(
        &mut self,
        file: &DataFile,
        resequence: Option<(i64, i64)>,
    ) -> Result<DataFile> {
        let held = crate::commit::stored_path(&file.path);
        let bytes = self.lake.store.get(&held).await?.bytes().await?;
        let mut batch = sink::decode_parquet(bytes)?;
        if let Some((first, tx_seq)) = resequence {
            batch = xa::resequence(&batch, first, tx_seq)?;
        }
        let (db, table) = file
            .table
            .split_once('.')
            .ok_or_else(|| Error::Lake(format!("held file {} of an unnamed table", file.path)))?;
        let path = commit::data_file_path(
            db,
            table,
            self.next_manifest_seq(),
            self.file_counter,
            &self.writer_id,
        );
        self.file_counter += 1;
        self.file_seqs.insert(path.to_string(), seq_range(&batch));
        self.file_ops.insert(path.to_string(), op_counts(&batch));
        let encoded = sink::encode_parquet(&batch)?;
        let size = sink::put_file(
            self.lake.store.as_ref(),
            &path,
            encoded,
            self.config.sink.multipart_threshold,
        )
        .await?;
        Ok(DataFile {
            table: file.table.clone(),
            path: path.to_string(),
            rows: batch.num_rows() as u64,
            bytes: size,
            schema_version: file.schema_version,
        })
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
    async fn checkpoint(&mut self) -> Result<()> {
        let started = Instant::now();
        // Whole snapshot chunks only: wait for rows of chunks already placed.
        self.await_reserved_chunks().await?;
        self.flush_snapshot_buffers(true).await?;
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
        }
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
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
            filter: Some(self.config.filter.patterns().clone()),
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
            totals,
            xa_prepared: self.prepared.values().cloned().collect(),
            zero_dates: self.committed.as_ref().map_or(0, |m| m.zero_dates) + self.stats.zero_dates,
            types: commit::TYPES,
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
        Ok(())
    }

    /// The last fold of the current tables: at shutdown and at the end of
    /// `--until-caught-up`.
    async fn finish_current(&mut self) {
        self.current.wait().await;
        let job = self
            .current
            .last_job(self.committed.as_ref(), self.tracker.history());
        if let Some(job) = job {
            current::fold_now(self.lake.store.clone(), job).await;
        }
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
        let behind = self.tables.behind;
        // Read from SQLite before any await: the history is not Sync.
        let schemas = if behind {
            SchemaVersions::load_all(self.tracker.history())
        } else {
            SchemaVersions::for_manifest(self.tracker.history(), m)
        };
        let made = match schemas {
            Ok(schemas) if behind => self
                .tables
                .repair(store.as_ref(), &self.lake, m, &schemas)
                .await
                .map(|r| r.commits),
            Ok(schemas) => {
                self.tables
                    .commit_manifest(store.as_ref(), m, &schemas)
                    .await
            }
            Err(e) => Err(e),
        };
        match made {
            Ok(n) => debug!(
                seq = m.seq,
                delta_commits = n,
                "Delta logs follow the manifest"
            ),
            Err(e) => {
                self.metrics.error(&e);
                warn!(seq = m.seq, error = %e, kind = %e.kind(), "could not make the Delta commits of this manifest; the next checkpoint or start makes them");
                self.tables.behind = true;
            }
        }
    }
}

/// Whether the session that ran a Query event had `ANSI_QUOTES` in its
/// `sql_mode` (double quotes then quote names, not strings). The status
/// variable is absent from events of servers that do not write it: the
/// default `sql_mode`, without it.
fn ansi_quotes(q: &QueryEvent<'_>) -> bool {
    use mysql_common::binlog::consts::StatusVarKey;
    use mysql_common::binlog::events::StatusVarVal;
    use mysql_common::constants::SqlMode;
    q.status_vars()
        .get_status_var(StatusVarKey::SqlMode)
        .and_then(|v| match v.get_value() {
            Ok(StatusVarVal::SqlMode(mode)) => Some(mode.get().contains(SqlMode::MODE_ANSI_QUOTES)),
            _ => None,
        })
        .unwrap_or(false)
}

/// Test hook: with this variable set, sluice aborts right after a manifest
/// with data files commits, before its Delta commits.
const ABORT_BEFORE_DELTA: &str = "SLUICE_TEST_ABORT_BEFORE_DELTA";

/// Benchmark switch: with this variable set, no Delta commits are made (the
/// next start without it makes them). Not for production: the changelog
/// tables then lag the manifests.
const BENCH_NO_DELTA: &str = "SLUICE_BENCH_NO_DELTA";
