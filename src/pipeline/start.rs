//! Where a run starts: connecting to the source (or opening the binlog
//! files of offline replay), checking it, and choosing the position to read
//! from — the newest manifest's cursor, by GTID or by position
//! (`source.resume`), or `source.start` on an empty lake.

use std::collections::BTreeMap;

use tracing::info;

use crate::commit::{Manifest, PreparedXa};
use crate::config::{Config, Resume, StartPosition};
use crate::error::{Error, Result};
use crate::schema::bootstrap;
use crate::source::gtid::GtidState;
use crate::source::{self, BinlogPosition, ServerInfo, StreamStart};

/// What the run learned about its source before streaming.
pub(super) struct SourceSetup {
    pub(super) server: ServerInfo,
    pub(super) start: StreamStart,
    /// The GTID state at `start` (empty when unknown).
    pub(super) start_gtid: GtidState,
    pub(super) head: BinlogPosition,
    /// `start` is already at the head.
    pub(super) caught_up: bool,
    pub(super) tables: BTreeMap<(String, String), crate::schema::TableSchema>,
    pub(super) db_charsets: BTreeMap<String, String>,
    pub(super) server_charset: String,
}

/// Connects (or opens the binlog files), checks the source, and decides
/// where to start: the committed cursor — by GTID or by position, see
/// `source.resume` — or `source.start` on an empty lake.
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
