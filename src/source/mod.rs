//! The source: connecting as a replica, preflight checks, binlog positions
//! and GTID states, and opening the event stream (from a server or from
//! binlog files).

mod auth;
mod connect;
pub mod files;
pub mod replica;
pub mod stream;
pub mod tls;

use std::fmt;

use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};

use crate::config::{SourceConfig, StartPosition};
use crate::error::{Error, Result};
pub use crate::types::binlog::{BinlogPosition, Flavor};
pub use crate::types::gtid;
use crate::types::gtid::GtidState;
pub use connect::connect;
pub(crate) use connect::tls_hint;
use replica::{Replica, ServerFailure};
use stream::EventStream;

/// What the preflight learned about the server.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    pub server_id: u32,
    pub server_uuid: Option<String>,
    /// Whether events carry a CRC32 footer (`binlog_checksum`).
    pub checksum: bool,
    /// Whether the server can resume a replica by GTID (MariaDB always;
    /// MySQL with gtid_mode=ON).
    pub gtid: bool,
}

/// Where a stream begins: a file position, or a GTID state (the server
/// finds the position; this is what survives a failover).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStart {
    Position(BinlogPosition),
    Gtid(GtidState),
}

impl fmt::Display for StreamStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamStart::Position(p) => p.fmt(f),
            StreamStart::Gtid(g) => write!(f, "GTID {g}"),
        }
    }
}

/// One line of the preflight checklist.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Runs the checks of "What the source must be" (DESIGN.md) and returns the
/// server's identity with the checklist. The caller decides whether a failed
/// check is fatal (`run`) or only reported (`check`).
pub async fn preflight(conn: &mut Conn, cfg: &SourceConfig) -> Result<(ServerInfo, Vec<Check>)> {
    let q = |e: mysql_async::Error| Error::Preflight(format!("preflight query failed: {e}"));
    let (version, server_id, log_bin, format, image, checksum): (String, u32, String, String, String, Option<String>) = conn
        .query_first(
            "SELECT @@version, @@server_id, CAST(@@log_bin AS CHAR), @@binlog_format, @@binlog_row_image, @@binlog_checksum",
        )
        .await
        .map_err(q)?
        .ok_or_else(|| Error::Preflight("preflight query returned nothing".into()))?;
    let flavor = if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::Mariadb
    } else {
        Flavor::Mysql
    };
    let (server_uuid, gtid) = if flavor == Flavor::Mysql {
        let uuid = conn
            .query_first::<String, _>("SELECT @@server_uuid")
            .await
            .ok()
            .flatten();
        let mode = conn
            .query_first::<String, _>("SELECT @@gtid_mode")
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        (uuid, mode.eq_ignore_ascii_case("ON"))
    } else {
        (None, true)
    };
    let grants: Vec<String> = conn.query("SHOW GRANTS").await.map_err(q)?;
    let grants = grants.join("\n").to_ascii_uppercase();
    let has = |privs: &[&str]| {
        grants.contains("ALL PRIVILEGES") || privs.iter().any(|p| grants.contains(p))
    };

    let on = log_bin == "1" || log_bin.eq_ignore_ascii_case("ON");
    let server_id_check = match server_id_holder(conn, cfg, flavor).await {
        Ok(None) => Check {
            name: "server_id",
            ok: true,
            detail: format!("server_id {}: neither the source's own ({server_id}) nor another registered replica's", cfg.server_id),
        },
        Ok(Some(holder)) => Check {
            name: "server_id",
            ok: false,
            detail: Error::ServerIdInUse { server_id: cfg.server_id, holder }.to_string(),
        },
        Err(why) => Check {
            name: "server_id",
            ok: true,
            detail: format!("server_id {} differs from the source's own ({server_id}); other replicas not checked: {why}", cfg.server_id),
        },
    };
    let checks = vec![
        Check {
            name: "log_bin",
            ok: on,
            detail: if on {
                "binary log is on".into()
            } else {
                "binary log is off: start the server with log_bin (e.g. log_bin=binlog in my.cnf)".into()
            },
        },
        Check {
            name: "binlog_format",
            ok: format.eq_ignore_ascii_case("ROW"),
            detail: format!(
                "binlog_format is {format}{}",
                if format.eq_ignore_ascii_case("ROW") { "" } else { ", must be ROW: SET GLOBAL binlog_format = 'ROW' and binlog_format=ROW in my.cnf" }
            ),
        },
        Check {
            name: "binlog_row_image",
            ok: image.eq_ignore_ascii_case("FULL"),
            detail: format!(
                "binlog_row_image is {image}{}",
                if image.eq_ignore_ascii_case("FULL") { "" } else { ", must be FULL: SET GLOBAL binlog_row_image = 'FULL' and binlog_row_image=FULL in my.cnf" }
            ),
        },
        Check {
            name: "privileges",
            ok: has(&["REPLICATION SLAVE", "REPLICATION REPLICA"])
                && has(&["REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"])
                && has(&["SELECT"]),
            detail: "the user needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT: GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO the sluice user".into(),
        },
        server_id_check,
    ];
    let info = ServerInfo {
        flavor,
        version,
        server_id,
        server_uuid,
        checksum: checksum
            .map(|c| !c.eq_ignore_ascii_case("NONE"))
            .unwrap_or(false),
        gtid,
    };
    Ok((info, checks))
}

/// Who else holds `cfg.server_id`: the source itself, or a replica listed by
/// SHOW SLAVE HOSTS other than a sidecar of this lake (`cfg.report_host`:
/// the registration of a connection sluice gave up on, which the server
/// has not yet noticed is dead and which the next dump request replaces).
///
/// A check before connecting is the only way not to disturb the other
/// replica: on COM_BINLOG_DUMP the server kills any dump thread with the same
/// id, and that replica's reconnect then kills ours (MariaDB error 4052).
/// `Err` says why the replicas could not be listed: MariaDB 10.5.2+ wants
/// REPLICATION MASTER ADMIN for SHOW SLAVE HOSTS.
async fn server_id_holder(
    conn: &mut Conn,
    cfg: &SourceConfig,
    flavor: Flavor,
) -> std::result::Result<Option<String>, String> {
    let own: Option<u32> = conn
        .query_first("SELECT @@server_id")
        .await
        .map_err(|e| format!("SELECT @@server_id failed: {e}"))?;
    if own == Some(cfg.server_id) {
        return Ok(Some("the source server itself (its @@server_id)".into()));
    }
    let listed: std::result::Result<Vec<mysql_async::Row>, _> = match flavor {
        // MySQL 8.4 knows only the new spelling, MySQL before 8.0.22 only the old.
        Flavor::Mysql => match conn.query("SHOW REPLICAS").await {
            Err(mysql_async::Error::Server(e)) if e.code == 1064 => {
                conn.query("SHOW SLAVE HOSTS").await
            }
            other => other,
        },
        Flavor::Mariadb => conn.query("SHOW SLAVE HOSTS").await,
    };
    let listed = listed.map_err(|e| match e {
        mysql_async::Error::Server(e) if e.code == 1227 => format!(
            "the user may not run SHOW SLAVE HOSTS ({}); GRANT REPLICATION MASTER ADMIN ON *.* to the sluice user so it can refuse an id in use before it disconnects the replica using it",
            e.message
        ),
        e => format!("SHOW SLAVE HOSTS failed: {e}"),
    })?;
    // By name: MariaDB adds User and Password with show_slave_auth_info, and
    // MySQL spells Server_Id.
    let column = |row: &mysql_async::Row, name: &str| {
        row.columns_ref()
            .iter()
            .position(|c| c.name_str().eq_ignore_ascii_case(name))
            .and_then(|i| row.get::<String, _>(i))
            .unwrap_or_default()
    };
    Ok(listed
        .iter()
        .find(|row| {
            column(row, "Server_id") == cfg.server_id.to_string()
                && column(row, "Host") != cfg.report_host
        })
        .map(|row| {
            format!(
                "the replica at {}:{}",
                column(row, "Host"),
                column(row, "Port")
            )
        }))
}

/// The server_id check before every binlog dump request, at start and before
/// each reconnect. Only a known holder stops sluice; a list it may not read
/// leaves the clash to be reported by the server (4052) instead.
async fn ensure_server_id_free(cfg: &SourceConfig, flavor: Flavor) -> Result<()> {
    let mut conn = connect(cfg).await?;
    let holder = server_id_holder(&mut conn, cfg, flavor).await;
    let _ = conn.disconnect().await;
    match holder {
        Ok(Some(holder)) => Err(Error::ServerIdInUse {
            server_id: cfg.server_id,
            holder,
        }),
        _ => Ok(()),
    }
}

/// Fails on the first failed check, with its fix.
pub fn require(checks: &[Check]) -> Result<()> {
    match checks.iter().find(|c| !c.ok) {
        Some(c) => Err(Error::Preflight(c.detail.clone())),
        None => Ok(()),
    }
}

/// `SHOW BINARY LOGS`: every file the server still has, with its size.
pub async fn binary_logs(conn: &mut Conn) -> Result<Vec<(String, u64)>> {
    let rows: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| Error::Preflight(format!("SHOW BINARY LOGS failed: {e}")))?;
    Ok(rows
        .into_iter()
        .filter_map(|mut r| Some((r.take::<String, _>(0)?, r.take::<u64, _>(1)?)))
        .collect())
}

/// The binlog head: where the next event will be written.
pub async fn head(conn: &mut Conn) -> Result<BinlogPosition> {
    let row: Option<mysql_async::Row> = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .map_err(|e| Error::Preflight(format!("SHOW MASTER STATUS failed: {e}")))?;
    let mut row = row.ok_or_else(|| {
        Error::Preflight("SHOW MASTER STATUS is empty: the binary log is off".into())
    })?;
    Ok(BinlogPosition {
        file: row.take::<String, _>(0).unwrap_or_default(),
        pos: row.take::<u64, _>(1).unwrap_or(4),
    })
}

/// Turns the configured start (or the committed cursor) into a concrete
/// position that exists on the server.
pub async fn resolve_start(conn: &mut Conn, start: &StartPosition) -> Result<BinlogPosition> {
    let logs = binary_logs(conn).await?;
    match start {
        StartPosition::Earliest => {
            let (file, _) = logs
                .first()
                .ok_or_else(|| Error::Position("the server lists no binary logs".into()))?;
            Ok(BinlogPosition {
                file: file.clone(),
                pos: 4,
            })
        }
        StartPosition::Latest => head(conn).await,
        StartPosition::At { file, pos } => {
            let at = BinlogPosition {
                file: file.clone(),
                pos: *pos,
            };
            validate_position(&logs, &at)?;
            Ok(at)
        }
        StartPosition::Gtid(_) | StartPosition::Timestamp(_) => Err(Error::Position(
            "a GTID or timestamp start has no file position of its own".into(),
        )),
    }
}

/// A position must name a file the server has and lie within it.
pub fn validate_position(logs: &[(String, u64)], at: &BinlogPosition) -> Result<()> {
    let listing = || {
        let first = logs.first().map(|l| l.0.as_str()).unwrap_or("none");
        let last = logs
            .last()
            .map(|l| format!("{}:{}", l.0, l.1))
            .unwrap_or_default();
        format!("the server has {first} .. {last}")
    };
    match logs.iter().find(|(f, _)| *f == at.file) {
        None => {
            let purged = logs.first().map(|(f, _)| BinlogPosition { file: f.clone(), pos: 4 } > *at).unwrap_or(false);
            if purged {
                return Err(binlog_purged(at, &format!("purged; {}", listing())));
            }
            Err(Error::Position(format!(
                "{at}: binlog file {} is not on the server ({}); pick a file from SHOW BINARY LOGS",
                at.file,
                listing()
            )))
        }
        Some((_, size)) if at.pos > *size => Err(Error::Position(format!(
            "{at} is past the end of the binlog ({} has {size} bytes; {}); pick a position from SHOW BINARY LOGS / SHOW MASTER STATUS",
            at.file,
            listing()
        ))),
        Some(_) => Ok(()),
    }
}

/// The server's GTID state at its binlog head: MariaDB `@@gtid_binlog_pos`,
/// MySQL `@@gtid_executed`.
pub async fn head_gtid(conn: &mut Conn, flavor: Flavor) -> Result<GtidState> {
    let sql = match flavor {
        Flavor::Mariadb => "SELECT @@gtid_binlog_pos",
        Flavor::Mysql => "SELECT @@gtid_executed",
    };
    let text: Option<String> = conn
        .query_first(sql)
        .await
        .map_err(|e| Error::Preflight(format!("{sql} failed: {e}")))?;
    let text = text.unwrap_or_default().replace('\n', "");
    gtid_state(flavor, &text)
}

/// The GTID state at a binlog position (MariaDB's `BINLOG_GTID_POS`), so a
/// lake started from a position can later resume by GTID. MySQL learns it
/// from the Previous_gtids event at the start of each file instead.
pub async fn gtid_at(conn: &mut Conn, flavor: Flavor, at: &BinlogPosition) -> Result<GtidState> {
    if flavor == Flavor::Mysql {
        return Ok(GtidState::Mysql(Default::default()));
    }
    let text: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (at.file.as_str(), at.pos))
        .await
        .map_err(|e| Error::Preflight(format!("BINLOG_GTID_POS({at}) failed: {e}")))?;
    gtid_state(flavor, &text.flatten().unwrap_or_default())
}

/// Parses a GTID state of the given flavor (an empty text is an empty state).
pub fn gtid_state(flavor: Flavor, text: &str) -> Result<GtidState> {
    if text.trim().is_empty() {
        return Ok(match flavor {
            Flavor::Mariadb => GtidState::Mariadb(Default::default()),
            Flavor::Mysql => GtidState::Mysql(Default::default()),
        });
    }
    let state = GtidState::parse(text).map_err(|e| Error::Position(format!("GTID state: {e}")))?;
    let matches = matches!(
        (&state, flavor),
        (GtidState::Mariadb(_), Flavor::Mariadb) | (GtidState::Mysql(_), Flavor::Mysql)
    );
    if !matches {
        return Err(Error::Position(format!(
            "GTID state `{text}` is not a {flavor:?} GTID state; a lake cannot move between MySQL and MariaDB"
        )));
    }
    Ok(state)
}

/// Registers as a replica and starts the binlog dump: from binlog files
/// when `source.binlog_dir` is set, from the server otherwise.
pub async fn open_stream(
    cfg: &SourceConfig,
    info: &ServerInfo,
    start: &StreamStart,
) -> Result<EventStream> {
    if let Some(dir) = &cfg.binlog_dir {
        let StreamStart::Position(at) = start else {
            return Err(Error::Position(
                "offline replay (source.binlog_dir) starts from a file and position, not a GTID; set source.resume = \"position\"".into(),
            ));
        };
        return Ok(EventStream::from_packets(files::open(
            dir,
            at,
            info.checksum,
        )?));
    }
    // A server that accepts the connection and then says nothing (hung, or
    // stopped while the kernel still completes TCP handshakes) must not hang
    // a reconnect: everything up to the dump request gets connect_timeout.
    tokio::time::timeout(cfg.connect_timeout, request_dump(cfg, info, start))
        .await
        .map_err(|_| {
            Error::Connection(format!(
                "{}:{} did not answer within {:?} while sluice asked for the binlog from {start}; check that the server is up",
                cfg.host, cfg.port, cfg.connect_timeout
            ))
        })?
}

async fn request_dump(
    cfg: &SourceConfig,
    info: &ServerInfo,
    start: &StreamStart,
) -> Result<EventStream> {
    ensure_server_id_free(cfg, info.flavor).await?;
    let heartbeat_ns = cfg.heartbeat.as_nanos().min(u64::MAX as u128);
    match info.flavor {
        Flavor::Mariadb => {
            let mut replica = Replica::connect(cfg).await?;
            // Without this MariaDB replaces its GTID and annotate events with dummies.
            replica.execute("SET @mariadb_slave_capability = 4").await?;
            // Announce that we handle checksummed events (we verify them).
            replica
                .execute("SET @master_binlog_checksum = @@global.binlog_checksum")
                .await?;
            replica
                .execute(&format!("SET @master_heartbeat_period = {heartbeat_ns}"))
                .await?;
            let (file, pos) = match start {
                StreamStart::Position(at) => (at.file.clone(), at.pos),
                StreamStart::Gtid(state) => {
                    replica
                        .execute(&format!("SET @slave_connect_state = '{state}'"))
                        .await?;
                    replica.execute("SET @slave_gtid_strict_mode = 1").await?;
                    replica
                        .execute("SET @slave_gtid_ignore_duplicates = 0")
                        .await?;
                    (String::new(), 4)
                }
            };
            replica.register(cfg.server_id, &cfg.report_host).await?;
            Ok(EventStream::from_packets(
                replica.dump(cfg.server_id, &file, pos).await?,
            ))
        }
        Flavor::Mysql => {
            let mut conn = connect(cfg).await?;
            conn.query_drop(format!("SET @master_heartbeat_period = {heartbeat_ns}"))
                .await
                .map_err(|e| Error::Connection(e.to_string()))?;
            let request =
                BinlogStreamRequest::new(cfg.server_id).with_hostname(cfg.report_host.as_bytes());
            let request = match start {
                StreamStart::Position(at) => {
                    request.with_filename(at.file.as_bytes()).with_pos(at.pos)
                }
                StreamStart::Gtid(state) => request
                    .with_gtid()
                    .with_gtid_set(state.mysql_sids().map_err(Error::Position)?)
                    .with_pos(4),
            };
            let stream = conn
                .get_binlog_stream(request)
                .await
                .map_err(|e| Error::Connection(format!("binlog dump request failed: {e}")))?;
            Ok(EventStream::from_mysql(stream))
        }
    }
}

/// `start = { timestamp = ... }`: the position of the first transaction
/// committed at or after `at` (its commit event is stamped at or after it),
/// or the head when there is none yet. `open` starts a stream at the start
/// of a file: the search begins in the newest file created at or before `at`.
pub async fn find_timestamp<F, Fut>(
    cfg: &SourceConfig,
    open: F,
    logs: &[(String, u64)],
    head: &BinlogPosition,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<BinlogPosition>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<EventStream>>,
{
    use crate::decode::{classify_query, event_type as et, QueryKind};
    let target = at.timestamp().max(0) as u64;
    let mut from = 0;
    for (i, (file, _)) in logs.iter().enumerate().rev() {
        let mut stream = open(file.clone()).await?;
        let created = loop {
            let here = BinlogPosition {
                file: file.clone(),
                pos: 4,
            };
            match stream.next().await {
                Some(Ok(ev)) if ev.header().event_type_raw() == et::FORMAT_DESCRIPTION => {
                    break ev.header().timestamp() as u64
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(stream_error(e, &here, cfg)),
                None => return Err(Error::Position(format!("{here}: no format description"))),
            }
        };
        if created <= target {
            from = i;
            break;
        }
    }
    let mut file = logs[from].0.clone();
    let mut stream = open(file.clone()).await?;
    let mut tx_start = BinlogPosition {
        file: file.clone(),
        pos: 4,
    };
    let mut in_tx = false;
    loop {
        let ev = match stream.next().await {
            Some(Ok(ev)) => ev,
            Some(Err(e)) => return Err(stream_error(e, &tx_start, cfg)),
            None => return Ok(head.clone()),
        };
        let header = ev.header();
        let end = header.log_pos() as u64;
        let commit = match header.event_type_raw() {
            et::ROTATE => {
                let name = ev.data().get(8..).unwrap_or_default();
                // Before the format description the name still carries the
                // checksum: take the spelling the server lists.
                file = logs
                    .iter()
                    .map(|(f, _)| f)
                    .find(|f| {
                        name == f.as_bytes()
                            || (name.len() == f.len() + 4 && name.starts_with(f.as_bytes()))
                    })
                    .cloned()
                    .unwrap_or_else(|| String::from_utf8_lossy(name).into_owned());
                if !in_tx {
                    tx_start = BinlogPosition {
                        file: file.clone(),
                        pos: 4,
                    };
                }
                false
            }
            et::MARIADB_GTID | et::MYSQL_GTID | et::MYSQL_ANONYMOUS_GTID => {
                in_tx = true;
                false
            }
            et::XID => true,
            et::QUERY => {
                let q: mysql_common::binlog::events::QueryEvent<'_> = ev
                    .read_event()
                    .map_err(|e| Error::decode(&file, end, format!("bad Query event: {e}")))?;
                match classify_query(&q.query()) {
                    QueryKind::Begin => {
                        in_tx = true;
                        false
                    }
                    _ => true,
                }
            }
            _ => false,
        };
        if commit {
            if header.timestamp() as u64 >= target {
                return Ok(tx_start);
            }
            in_tx = false;
            tx_start = BinlogPosition {
                file: file.clone(),
                pos: end,
            };
        }
        if end > 0
            && (BinlogPosition {
                file: file.clone(),
                pos: end,
            }) >= *head
        {
            return Ok(head.clone());
        }
    }
}

/// MariaDB's ER_SLAVE_SAME_ID: another replica connected with our server_id
/// and the server ended our dump for it.
const ER_SLAVE_SAME_ID: u16 = 4052;

/// Classifies what ended a binlog stream.
pub fn stream_error(e: ServerFailure, at: &BinlogPosition, cfg: &SourceConfig) -> Error {
    match e {
        // MySQL reports the same as 1236 with this text.
        ServerFailure::Server { code, message }
            if code == ER_SLAVE_SAME_ID || message.contains("same server_uuid/server_id") =>
        {
            Error::ServerIdInUse {
                server_id: cfg.server_id,
                holder: format!("another replica, which connected while sluice was reading (the server said: {message})"),
            }
        }
        ServerFailure::Server { code: 1236, message } if binlog_gone(&message) => {
            binlog_purged(at, &message)
        }
        ServerFailure::Server { code: 1236, message } => Error::Position(format!(
            "the server cannot send the binlog from {at}: {message} (1236)"
        )),
        ServerFailure::Server { code, message } if code == 1227 || code == 1045 => Error::Preflight(format!(
            "the server refused the binlog dump: {message}; GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO the sluice user"
        )),
        ServerFailure::Server { code, message } => {
            Error::Connection(format!("binlog stream at {at}: {message} ({code})"))
        }
        ServerFailure::Io(message) => Error::Connection(format!("binlog stream at {at}: {message}")),
        ServerFailure::Corrupt(message) => Error::decode(&at.file, at.pos, message),
    }
}

/// Whether a 1236 says that the binlog asked for is no longer there: MariaDB
/// by position ("Could not find first log file name in binary log index
/// file") or by GTID ("… required binlog files have been purged"), MySQL
/// ("… the source purged required binary logs"), or a file the index still
/// names but the disk lost ("Could not open log file").
fn binlog_gone(message: &str) -> bool {
    [
        "purged",
        "Could not find first log file",
        "Could not open log file",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// The definite error for a binlog that the server no longer has, with the
/// two ways out.
fn binlog_purged(at: &BinlogPosition, detail: &str) -> Error {
    let file = &at.file;
    Error::Position(format!(
        "binlog {file} is no longer on the server ({detail}) and reading from {at} needs it: restore {file} and the binlogs after it from a backup and replay them with source.binlog_dir, or start over on an empty lake"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(file: &str, pos: u64) -> BinlogPosition {
        BinlogPosition {
            file: file.into(),
            pos,
        }
    }

    #[test]
    fn positions_order_across_files() {
        assert!(p("binlog.000002", 4) > p("binlog.000001", 99_999));
        assert!(p("binlog.999999", 4) < p("binlog.1000000", 4));
        assert!(p("binlog.000001", 10) < p("binlog.000001", 11));
    }

    #[test]
    fn past_end_and_missing_files_are_errors() {
        let logs = vec![
            ("binlog.000002".to_string(), 1000),
            ("binlog.000003".to_string(), 500),
        ];
        assert!(validate_position(&logs, &p("binlog.000003", 500)).is_ok());
        let e = validate_position(&logs, &p("binlog.000003", 501))
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the end"), "{e}");
        let e = validate_position(&logs, &p("binlog.000001", 4))
            .unwrap_err()
            .to_string();
        assert!(e.contains("purged"), "{e}");
    }

    fn source_config() -> SourceConfig {
        SourceConfig {
            host: "db".into(),
            port: 3306,
            user: "sluice".into(),
            password: None,
            server_id: 5401,
            start: StartPosition::Latest,
            connect_timeout: std::time::Duration::from_secs(10),
            heartbeat: std::time::Duration::from_secs(5),
            max_sql_bytes: 4096,
            resume: crate::config::Resume::Auto,
            binlog_dir: None,
            report_host: "sluice-00000000".into(),
            tls: Default::default(),
        }
    }

    #[test]
    fn mysql_async_never_sends_a_clear_password() {
        let mut cfg = source_config();
        cfg.password = Some("s3cret".into());
        let opts = mysql_async::Opts::from(connect::opts(&cfg));
        assert!(!opts.enable_cleartext_plugin());
        assert_eq!(opts.pass(), Some("s3cret"));
    }

    fn server(code: u16, message: &str) -> ServerFailure {
        ServerFailure::Server {
            code,
            message: message.into(),
        }
    }

    #[test]
    fn purged_binlog_is_definite_and_names_the_file_and_the_ways_out() {
        let at = p("binlog.000007", 1234);
        for message in [
            "Could not find first log file name in binary log index file",
            "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.",
            "Cannot replicate because the source purged required binary logs.",
        ] {
            let e = stream_error(server(1236, message), &at, &source_config());
            assert!(!e.is_transient());
            let text = e.to_string();
            assert!(
                text.contains("binlog binlog.000007 is no longer on the server")
                    && text.contains("source.binlog_dir")
                    && text.contains("empty lake"),
                "{text}"
            );
        }
        let other = stream_error(server(1236, "impossible position"), &at, &source_config());
        assert!(!other.is_transient());
        assert!(!other.to_string().contains("no longer"), "{other}");
    }

    #[test]
    fn another_replica_taking_the_server_id_is_definite() {
        let at = p("binlog.000001", 4);
        for failure in [
            server(4052, "A slave with the same server_uuid/server_id as this slave has connected to the master"),
            server(1236, "A replica with the same server_uuid/server_id as this replica has connected to the source; the first event '' at 4"),
        ] {
            let e = stream_error(failure, &at, &source_config());
            assert!(matches!(e, Error::ServerIdInUse { server_id: 5401, .. }), "{e}");
            assert!(e.to_string().starts_with("source.server_id 5401 is already taken"), "{e}");
        }
        let dropped = stream_error(ServerFailure::Io("reset".into()), &at, &source_config());
        assert!(dropped.is_transient());
    }
}
