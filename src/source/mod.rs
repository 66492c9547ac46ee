//! The source server: connecting as a replica, preflight checks, binlog
//! positions, and opening the binlog dump.

use std::cmp::Ordering;
use std::fmt;

use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, OptsBuilder};

use crate::config::{SourceConfig, StartPosition, PASSWORD_ENV};
use crate::error::{Error, Result};

/// A position in the source's binlog: the file name and a byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
}

impl BinlogPosition {
    /// The numeric suffix of the file name (`binlog.000042` → 42), which
    /// orders files across a rotation.
    fn file_index(&self) -> u64 {
        self.file
            .rsplit('.')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
}

impl PartialOrd for BinlogPosition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BinlogPosition {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.file_index(), &self.file, self.pos).cmp(&(other.file_index(), &other.file, other.pos))
    }
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Mariadb,
    Mysql,
}

/// What the preflight learned about the server.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    pub server_id: u32,
    pub server_uuid: Option<String>,
    /// Whether events carry a CRC32 footer (`binlog_checksum`).
    pub checksum: bool,
}

/// One line of the preflight checklist.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

fn opts(cfg: &SourceConfig) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port)
        .user(Some(cfg.user.clone()))
        .pass(cfg.password.clone())
        .prefer_socket(false)
        .wait_timeout(Some(28_800))
}

/// Opens a plain connection; authentication and reachability errors are definite.
pub async fn connect(cfg: &SourceConfig) -> Result<Conn> {
    let fut = Conn::new(opts(cfg));
    let conn = tokio::time::timeout(cfg.connect_timeout, fut)
        .await
        .map_err(|_| {
            Error::Connection(format!(
                "cannot reach {}:{} within {:?}; check source.url and that the server is up",
                cfg.host, cfg.port, cfg.connect_timeout
            ))
        })?;
    conn.map_err(|e| connect_error(cfg, e))
}

fn connect_error(cfg: &SourceConfig, e: mysql_async::Error) -> Error {
    match &e {
        mysql_async::Error::Server(s) if s.code == 1045 || s.code == 1698 => Error::Preflight(format!(
            "authentication failed for user `{}` at {}:{} ({}); check the user in source.url and the password in {PASSWORD_ENV} or source.password_file",
            cfg.user, cfg.host, cfg.port, s.message
        )),
        // Unreachable servers are transient: at start they fail the run with
        // this message, after a successful start they are retried.
        _ => Error::Connection(format!(
            "cannot connect to {}:{}: {e}; check source.url and that the server is up",
            cfg.host, cfg.port
        )),
    }
}

/// Runs the checks of "What the source must be" (DESIGN.md) and returns the
/// server's identity with the checklist. The caller decides whether a failed
/// check is fatal (`run`) or only reported (`check`).
pub async fn preflight(conn: &mut Conn) -> Result<(ServerInfo, Vec<Check>)> {
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
    let server_uuid = if flavor == Flavor::Mysql {
        conn.query_first::<String, _>("SELECT @@server_uuid")
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let grants: Vec<String> = conn.query("SHOW GRANTS").await.map_err(q)?;
    let grants = grants.join("\n").to_ascii_uppercase();
    let has = |privs: &[&str]| {
        grants.contains("ALL PRIVILEGES") || privs.iter().any(|p| grants.contains(p))
    };

    let on = log_bin == "1" || log_bin.eq_ignore_ascii_case("ON");
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
    ];
    let info = ServerInfo {
        flavor,
        version,
        server_id,
        server_uuid,
        checksum: checksum
            .map(|c| !c.eq_ignore_ascii_case("NONE"))
            .unwrap_or(false),
    };
    Ok((info, checks))
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
            Err(Error::Position(if purged {
                format!("{at}: binlog {} was purged from the server ({}); start from an existing file (start = \"earliest\") on an empty lake, or restore the missing binlog", at.file, listing())
            } else {
                format!("{at}: binlog file {} is not on the server ({}); pick a file from SHOW BINARY LOGS", at.file, listing())
            }))
        }
        Some((_, size)) if at.pos > *size => Err(Error::Position(format!(
            "{at} is past the end of the binlog ({} has {size} bytes; {}); pick a position from SHOW BINARY LOGS / SHOW MASTER STATUS",
            at.file,
            listing()
        ))),
        Some(_) => Ok(()),
    }
}

/// Registers as a replica and starts the binlog dump at `at`.
pub async fn open_stream(
    cfg: &SourceConfig,
    info: &ServerInfo,
    at: &BinlogPosition,
) -> Result<BinlogStream> {
    let mut conn = connect(cfg).await?;
    if info.flavor == Flavor::Mariadb {
        // Without this MariaDB replaces its GTID and annotate events with dummies.
        conn.query_drop("SET @mariadb_slave_capability = 4")
            .await
            .map_err(|e| Error::Connection(e.to_string()))?;
    }
    let heartbeat_ns = cfg.heartbeat.as_nanos().min(u64::MAX as u128);
    conn.query_drop(format!("SET @master_heartbeat_period = {heartbeat_ns}"))
        .await
        .map_err(|e| Error::Connection(e.to_string()))?;
    let request = BinlogStreamRequest::new(cfg.server_id)
        .with_filename(at.file.as_bytes())
        .with_pos(at.pos);
    conn.get_binlog_stream(request)
        .await
        .map_err(|e| Error::Connection(format!("binlog dump request failed: {e}")))
}

/// Classifies an error of the binlog stream.
pub fn stream_error(e: mysql_async::Error, at: &BinlogPosition) -> Error {
    match &e {
        mysql_async::Error::Server(s) if s.code == 1236 => Error::Position(format!(
            "the server cannot send the binlog from {at}: {}; if the binlog was purged, start over from an existing position on an empty lake",
            s.message
        )),
        mysql_async::Error::Server(s) if s.code == 1227 || s.code == 1045 => Error::Preflight(format!(
            "the server refused the binlog dump: {}; GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO the sluice user",
            s.message
        )),
        _ => Error::Connection(format!("binlog stream at {at}: {e}")),
    }
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
}
