//! Where a run starts: opening the lake, connecting to the source (or
//! opening the binlog files of offline replay) and checking it, choosing
//! the position to read from — the newest manifest's cursor, by GTID or by
//! position (`source.resume`), or `source.start` on an empty lake —,
//! putting back what the last run left half done, and the tables' shapes
//! at the start.

use std::collections::BTreeMap;
use std::time::Instant;

use tracing::{error, info, warn};

use super::requests::{self, Adoption};
use crate::commit::{Cursor, Lake, Manifest, PreparedXa};
use crate::config::{Config, Resume, SinkConfig, StartPosition};
use crate::error::{Error, Result};
use crate::schema::bootstrap;
use crate::schema::history::SchemaHistory;
use crate::schema::tracker::{SchemaTracker, StreamPoint};
use crate::sink;
use crate::snapshot::SnapshotProgress;
use crate::source::gtid::GtidState;
use crate::source::{self, BinlogPosition, ServerInfo, StreamStart};
use crate::table::{SchemaVersions, TableLogs};

/// What the run learned about its source before streaming.
pub(super) struct SourceSetup {
    pub(super) server: ServerInfo,
    pub(super) start: StreamStart,
    /// The GTID state at `start` (empty when unknown).
    pub(super) start_gtid: GtidState,
    pub(super) head: BinlogPosition,
    /// `start` is already at the head.
    pub(super) caught_up: bool,
    /// The captured tables the server has; their shapes are read only for
    /// those the history does not know (`prepare_tables`).
    pub(super) tables: bootstrap::TableNames,
    pub(super) db_charsets: BTreeMap<String, String>,
    pub(super) server_charset: String,
}

/// The prepared XA transactions a manifest lists, by xid.
pub(super) fn prepared_xa(committed: Option<&Manifest>) -> BTreeMap<String, PreparedXa> {
    committed
        .map(|m| {
            m.xa_prepared
                .iter()
                .map(|x| (x.xid.clone(), x.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Connects (or opens the binlog files), checks the source, and decides
/// where to start: the committed cursor — by GTID or by position, see
/// `source.resume` — or `source.start` on an empty lake.
pub(super) async fn open_source(
    config: &Config,
    committed: Option<&Manifest>,
) -> Result<SourceSetup> {
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
        bootstrap::read_names(&mut conn, &config.filter).await?;
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
        bootstrap::read_names(&mut conn, &config.filter).await?
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

/// Opens the lake and reads its newest manifest, the commit of record.
/// Refuses a store that cannot put-if-absent (fencing rests on it) and a
/// lake whose files hold types this release no longer writes.
pub(super) async fn open_lake(sink_config: &SinkConfig) -> Result<(Lake, Option<Manifest>)> {
    let lake = Lake::open(sink_config)?;
    // Two independent sets of round trips: together.
    let (probe, newest) = tokio::join!(
        sink::probe_put_if_absent(lake.store.as_ref(), &sink_config.url),
        lake.newest_seq()
    );
    probe?;
    lake.remove_old_probe_folder();
    let newest = newest?;
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
    Ok((lake, committed))
}

/// Where the stream starts, as a position: a GTID start's file is named by
/// the server when the stream begins, so the committed cursor stands in.
pub(super) fn start_position(start: &StreamStart, committed: Option<&Manifest>) -> BinlogPosition {
    match start {
        StreamStart::Position(p) => p.clone(),
        StreamStart::Gtid(_) => match committed {
            Some(m) => BinlogPosition {
                file: m.cursor.file.clone(),
                pos: m.cursor.pos,
            },
            None => BinlogPosition {
                file: String::new(),
                pos: 4,
            },
        },
    }
}

/// Puts back what the last run left half done, as the newest manifest
/// says: data files of uncommitted checkpoints removed, the schema history
/// synchronised with the lake, and the Delta commits missing for committed
/// manifests made (a failure there stops nothing: the manifests are the
/// commit of record, and the next checkpoint tries again).
pub(super) async fn restore(
    lake: &Lake,
    committed: Option<&Manifest>,
    state_dir: &std::path::Path,
) -> Result<(SchemaHistory, TableLogs)> {
    // Only what the newest manifest proves uncommittable: files named for a
    // later checkpoint may belong to a sidecar still running on this lake;
    // they go after this run's first commit (see `Lake::remove_orphans`).
    let orphans = async {
        match committed {
            Some(m) => lake.remove_orphans(m).await,
            None => Ok(Vec::new()),
        }
    };
    // The schema history: roll back versions of uncommitted checkpoints and
    // rebuild what a lost state dir forgot, then follow the stream. Its
    // reads go out beside the orphans' listing.
    let committed_seq = committed.map(|m| m.seq).unwrap_or(0);
    let history = SchemaHistory::open(state_dir)?;
    let (removed, report) = tokio::join!(
        orphans,
        history.sync_with_lake(lake.store.as_ref(), committed_seq, true)
    );
    let (removed, report) = (removed?, report?);
    if !removed.is_empty() {
        info!(
            files = removed.len(),
            "removed data files of uncommitted checkpoints"
        );
    }
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
    let mut table_logs = TableLogs::new().with_requests_in_flight(lake.in_flight);
    if let Some(m) = committed {
        let schemas = SchemaVersions::load_all(&history)?;
        match table_logs
            .repair(lake.store.as_ref(), lake, m, &schemas)
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
    // Iceberg metadata behind its Delta log (a crash between the two
    // commits, or Iceberg just turned on), and catalog entries behind it.
    if let Err(e) = crate::table::catch_up_followers(lake.store.as_ref(), lake.in_flight).await {
        warn!(kind = %e.kind(), error = %e, "could not bring every table's Iceberg metadata and catalog entry up to its Delta log; each table's next commit does (`sluice catalog sync` settles the catalog now)");
    }
    Ok((history, table_logs))
}

/// The captured tables as the stream starts with them.
pub(super) struct StartTables {
    /// Knows every captured table's shape at the start position.
    pub(super) tracker: SchemaTracker,
    pub(super) cursor: Cursor,
    /// Every table's snapshot: on a new lake, of every captured table that
    /// exists; after a restart, of the tables the newest manifest has not done.
    pub(super) snapshot_progress: Option<SnapshotProgress>,
    /// Tables a widened filter added, to be snapshotted.
    pub(super) widened: Vec<Adoption>,
}

/// Gives the tracker every captured table's shape at the start: from the
/// history, from information_schema for tables it does not know yet (an
/// empty lake, a widened filter), with pending resyncs and changed
/// `[[columns]]` policies applied at the resume position.
pub(super) async fn prepare_tables(
    config: &Config,
    source: &mut SourceSetup,
    history: SchemaHistory,
    committed: Option<&Manifest>,
    start_position: &BinlogPosition,
) -> Result<StartTables> {
    let tables = std::mem::take(&mut source.tables);
    super::route::check_routes(&config.routes, tables.keys())?;
    let mut tracker = SchemaTracker::new(
        history,
        config.filter.clone(),
        std::mem::take(&mut source.db_charsets),
        std::mem::take(&mut source.server_charset),
    )?;
    tracker.set_server_version(&source.server.version);
    tracker.set_policies(config.columns.clone());
    let cursor = match committed {
        Some(m) => m.cursor.clone(),
        None => Cursor {
            file: start_position.file.clone(),
            pos: start_position.pos,
            gtid: (!source.start_gtid.is_empty()).then(|| source.start_gtid.to_string()),
            next_seq: 1,
            next_tx_seq: 1,
        },
    };
    // Tables the history does not know yet start with their shape from
    // information_schema at this position.
    let here = StreamPoint {
        position: start_position.clone(),
        gtid: cursor.gtid.clone(),
        timestamp: chrono::Utc::now().timestamp() as u32,
        tx_seq: cursor.next_tx_seq - 1,
        checkpoint: committed.map(|m| m.seq).unwrap_or(0) + 1,
    };
    let snapshot_progress = match committed {
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
    let widened = requests::widened_tables(committed, tables.keys().cloned(), &tracker)?;
    for (db, name, _) in widened.iter().filter(|(_, _, known)| *known) {
        // Captured before: DDL while it was not is missing from its history.
        tracker.forget(&(db.clone(), name.clone()));
    }
    let widened = requests::plan_widened(&config.source, &config.snapshot, widened).await?;
    let all = tables.len();
    let unknown: bootstrap::TableNames = tables
        .into_iter()
        .filter(|(name, _)| !tracker.known(name))
        .collect();
    if !unknown.is_empty() {
        let mut conn = source::connect(&config.source).await?;
        let shapes = bootstrap::read_shapes_of(&mut conn, &unknown, unknown.len() < all).await?;
        info!(tables = shapes.len(), at = %source.start, "schema bootstrap from information_schema");
        tracker.bootstrap(shapes.into_values().collect(), &here, source.caught_up)?;
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
    Ok(StartTables {
        tracker,
        cursor,
        snapshot_progress,
        widened,
    })
}

/// How long each step of the start took, for one log line: with thousands
/// of tables or a slow store, the line says where a slow start went.
pub(super) struct Steps {
    began: Instant,
    last: Instant,
    ms: Vec<(&'static str, u128)>,
}

impl Steps {
    pub(super) fn new() -> Self {
        let now = Instant::now();
        Steps {
            began: now,
            last: now,
            ms: Vec::new(),
        }
    }

    pub(super) fn done(&mut self, step: &'static str) {
        let now = Instant::now();
        self.ms.push((step, (now - self.last).as_millis()));
        self.last = now;
    }

    pub(super) fn log(&self) {
        let steps: Vec<String> = self.ms.iter().map(|(s, ms)| format!("{s}={ms}")).collect();
        info!(
            ms = self.began.elapsed().as_millis(),
            steps = %steps.join(" "),
            "started"
        );
    }
}
