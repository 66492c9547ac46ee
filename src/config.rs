//! The TOML configuration: parsing, defaults, and validation with errors that
//! name the key. See `conf/local.toml` for the documented example.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Environment variable holding the source password (preferred over the URL).
pub const PASSWORD_ENV: &str = "SLUICE_SOURCE_PASSWORD";

#[derive(Debug, Clone)]
pub struct Config {
    pub source: SourceConfig,
    pub filter: TableFilter,
    pub sink: SinkConfig,
    pub state_dir: PathBuf,
    pub flush: FlushPolicy,
    pub snapshot: SnapshotConfig,
    pub current: CurrentConfig,
    pub shutdown_timeout: Duration,
    pub http: HttpConfig,
}

/// `[http]`: the metrics, health and status page endpoint (off by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `listen`: the address to serve on; `None` when the key is unset or "".
    pub listen: Option<String>,
    /// `/readyz` fails while the lag behind the source is above this.
    pub ready_max_lag: Duration,
    /// `/healthz` fails when the event loop has made no progress for this long.
    pub stall_timeout: Duration,
}

/// `[current]`: the current-state tables (DESIGN.md "Current-state tables").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentConfig {
    pub enabled: bool,
    /// How often the changelog is folded into them.
    pub refresh: Duration,
    /// The size a current table's files are kept near.
    pub target_file_bytes: usize,
}

/// `[snapshot]`: the initial snapshot of a new lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// `mode = "initial"` (true, the default) or `"never"`.
    pub initial: bool,
    /// Rows per consistent chunk read.
    pub chunk_rows: usize,
    pub method: SnapshotMethod,
    /// `new_tables`: what happens to a table that enters capture after the
    /// lake began (a widened filter).
    pub new_tables: NewTables,
}

/// `[snapshot] new_tables`: a table that a widened filter starts capturing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewTables {
    /// Read the table's rows with the chunk machinery while the stream runs.
    Snapshot,
    /// Capture it from the stream only, from where sluice resumes.
    Skip,
}

/// How a chunk's read is tied to a binlog position (`[snapshot] method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMethod {
    /// `consistent` where the server names a consistent read's position
    /// (MariaDB's `binlog_snapshot_*`), else `watermark`.
    Auto,
    /// One `START TRANSACTION WITH CONSISTENT SNAPSHOT` per chunk, placed at
    /// the position the server names for it.
    Consistent,
    /// The binlog head before and after the chunk's read; rows whose key
    /// changes in between are left to the stream.
    Watermark,
}

/// Upper bound of `[snapshot] chunk_rows`: a chunk is held in memory.
const MAX_CHUNK_ROWS: usize = 10_000_000;

#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Empty when the source is only `binlog_dir`.
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub server_id: u32,
    pub start: StartPosition,
    pub connect_timeout: Duration,
    pub heartbeat: Duration,
    /// `_sql` is cut at this many bytes.
    pub max_sql_bytes: usize,
    /// How a non-empty lake resumes: by GTID state or by file and position.
    pub resume: Resume,
    /// Read binlog files from this directory instead of a server (offline
    /// replay). A `url` next to it is then used only for the schema bootstrap.
    pub binlog_dir: Option<PathBuf>,
    /// The host sluice reports when it registers as a replica (SHOW SLAVE
    /// HOSTS): `sluice-` and a hash of `sink.url`, so that a sidecar of the
    /// same lake recognises a registration it left behind (a connection the
    /// server has not yet noticed is dead) and does not take it for another
    /// replica using its `server_id`.
    pub report_host: String,
    /// `tls`, `ca_file`, `cert_file`, `key_file`: encryption of every
    /// connection to the source.
    pub tls: TlsConfig,
}

/// `[source] tls`: the modes of MySQL's `--ssl-mode`, in increasing strictness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Never encrypt.
    Disabled,
    /// Encrypt when the server offers TLS; its certificate is not checked.
    Preferred,
    /// Encrypt or fail; the certificate is not checked.
    Required,
    /// Encrypt, and the server's certificate must chain to `ca_file`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host of `source.url`.
    VerifyIdentity,
}

impl TlsMode {
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Preferred => "preferred",
            TlsMode::Required => "required",
            TlsMode::VerifyCa => "verify_ca",
            TlsMode::VerifyIdentity => "verify_identity",
        }
    }

    /// Whether the server's certificate is checked against `ca_file`.
    pub fn verifies(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyIdentity)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub mode: TlsMode,
    /// PEM certificates the server's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// A client certificate chain and its private key (PEM), for users
    /// created `REQUIRE X509`.
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            mode: TlsMode::Preferred,
            ca_file: None,
            client_identity: None,
        }
    }
}

impl SourceConfig {
    /// Whether a server is configured (it may still be offline replay).
    pub fn has_server(&self) -> bool {
        !self.host.is_empty()
    }
}

/// `[source] resume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// GTID when the cursor holds a GTID state (and, on MySQL, gtid_mode is
    /// ON); file and position otherwise.
    Auto,
    /// Always by GTID: required to follow a failover to another server.
    Gtid,
    /// Always by file and position.
    Position,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    Earliest,
    Latest,
    At {
        file: String,
        pos: u64,
    },
    /// A GTID state: MariaDB `domain-server-seq[,...]` or a MySQL GTID set.
    Gtid(String),
    /// The first transaction stamped at or after this time.
    Timestamp(chrono::DateTime<chrono::Utc>),
}

#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Where the lake lives.
    pub location: LakeLocation,
    /// The URL as written, for display and error messages.
    pub url: String,
    /// S3 settings that override the standard AWS environment.
    pub s3: S3Overrides,
    /// Data files at least this large are uploaded in parts.
    pub multipart_threshold: usize,
}

/// The lake root parsed from `[sink] url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LakeLocation {
    /// A local directory (a plain absolute path or `file:///path`).
    Local(PathBuf),
    /// `s3://bucket/prefix`
    S3 { bucket: String, prefix: String },
    /// `gs://bucket/prefix`
    Gcs { bucket: String, prefix: String },
    /// `az://container/prefix`
    Azure { container: String, prefix: String },
}

/// Optional `[sink]` keys for `s3://` lakes; `None` leaves the environment's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Overrides {
    /// `endpoint`: an S3-compatible endpoint (MinIO, R2, moto), e.g. `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// `region`: the bucket's region.
    pub region: Option<String>,
    /// `allow_http`: permit a plain-HTTP endpoint.
    pub allow_http: Option<bool>,
}

/// Upper bound of `[sink] multipart_threshold`: S3 refuses a single PUT above it.
const MAX_SINGLE_PUT: usize = 5 << 30;
/// Upper bound of `[source] max_sql_bytes`: `max_allowed_packet` cannot exceed it.
const MAX_SQL_BYTES: usize = 1 << 30;

/// Default of `[sink] multipart_threshold`.
pub const DEFAULT_MULTIPART_THRESHOLD: usize = 16 << 20;

#[derive(Debug, Clone)]
pub struct FlushPolicy {
    pub max_rows: usize,
    pub max_buffer_bytes: usize,
    pub interval: Duration,
}

/// Anchored include/exclude regexes on `db.table`.
#[derive(Debug, Clone, Default)]
pub struct TableFilter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    patterns: FilterPatterns,
}

/// The `[filter]` regexes as written: each manifest records the filter it
/// was captured under, so that a later run knows which tables a widened
/// filter adds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterPatterns {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl TableFilter {
    pub fn new(include: &[String], exclude: &[String]) -> std::result::Result<Self, String> {
        let compile = |list: &[String], key: &str| -> std::result::Result<Vec<Regex>, String> {
            list.iter()
                .map(|p| {
                    Regex::new(&format!("^(?:{p})$"))
                        .map_err(|e| format!("filter.{key}: bad regex `{p}`: {e}"))
                })
                .collect()
        };
        Ok(TableFilter {
            include: compile(include, "include")?,
            exclude: compile(exclude, "exclude")?,
            patterns: FilterPatterns {
                include: include.to_vec(),
                exclude: exclude.to_vec(),
            },
        })
    }

    pub fn patterns(&self) -> &FilterPatterns {
        &self.patterns
    }

    pub fn captures(&self, db: &str, table: &str) -> bool {
        let name = format!("{db}.{table}");
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(&name)))
            && !self.exclude.iter().any(|r| r.is_match(&name))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    shutdown_timeout: Option<String>,
    source: RawSource,
    #[serde(default)]
    filter: RawFilter,
    sink: RawSink,
    #[serde(default)]
    state: RawState,
    #[serde(default)]
    flush: RawFlush,
    #[serde(default)]
    snapshot: RawSnapshot,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    current: RawCurrent,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<String>,
    ready_max_lag: Option<String>,
    stall_timeout: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCurrent {
    enabled: Option<bool>,
    refresh: Option<String>,
    target_file_size: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSnapshot {
    mode: Option<String>,
    chunk_rows: Option<usize>,
    method: Option<String>,
    new_tables: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    url: Option<String>,
    binlog_dir: Option<PathBuf>,
    resume: Option<String>,
    password_file: Option<PathBuf>,
    server_id: u32,
    start: Option<toml::Value>,
    connect_timeout: Option<String>,
    heartbeat: Option<String>,
    max_sql_bytes: Option<String>,
    tls: Option<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    url: String,
    endpoint: Option<String>,
    region: Option<String>,
    allow_http: Option<bool>,
    multipart_threshold: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawState {
    dir: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFlush {
    max_rows: Option<usize>,
    max_buffer_bytes: Option<String>,
    interval: Option<String>,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let err = |message: String| Error::Config {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        Self::parse(&text).map_err(err)
    }

    /// Parses the TOML text; the error is one line naming the key.
    pub fn parse(text: &str) -> std::result::Result<Config, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(text, &e))?;

        let mut source = parse_source(raw.source)?;
        let filter = TableFilter::new(&raw.filter.include, &raw.filter.exclude)?;
        let sink = parse_sink(raw.sink)?;
        source.report_host = format!("sluice-{:08x}", crc32fast::hash(sink.url.as_bytes()));
        let flush = FlushPolicy {
            max_rows: match raw.flush.max_rows {
                Some(0) => return Err("flush.max_rows: must be at least 1".into()),
                Some(n) => n,
                None => 500_000,
            },
            max_buffer_bytes: match raw.flush.max_buffer_bytes {
                Some(s) => parse_size(&s).map_err(|e| format!("flush.max_buffer_bytes: {e}"))?,
                None => 96 << 20,
            },
            interval: opt_duration(raw.flush.interval, "flush.interval", 10)?,
        };
        if flush.max_buffer_bytes < 1 << 20 {
            return Err("flush.max_buffer_bytes: must be at least 1MiB".into());
        }
        Ok(Config {
            source,
            filter,
            sink,
            state_dir: raw
                .state
                .dir
                .unwrap_or_else(|| PathBuf::from("./sluice-state")),
            flush,
            snapshot: parse_snapshot(raw.snapshot)?,
            current: parse_current(raw.current)?,
            shutdown_timeout: opt_duration(raw.shutdown_timeout, "shutdown_timeout", 30)?,
            http: parse_http(raw.http)?,
        })
    }
}

fn parse_http(raw: RawHttp) -> std::result::Result<HttpConfig, String> {
    let listen = match raw.listen.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(addr) => {
            // A host name is resolved when binding; the shape is checked here.
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
                format!("http.listen: \"{addr}\" is not HOST:PORT (e.g. \"0.0.0.0:9464\")")
            })?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(format!(
                    "http.listen: \"{addr}\" is not HOST:PORT (e.g. \"0.0.0.0:9464\")"
                ));
            }
            Some(addr.to_string())
        }
    };
    Ok(HttpConfig {
        listen,
        ready_max_lag: opt_duration(raw.ready_max_lag, "http.ready_max_lag", 60)?,
        stall_timeout: opt_duration(raw.stall_timeout, "http.stall_timeout", 300)?,
    })
}

fn parse_current(raw: RawCurrent) -> std::result::Result<CurrentConfig, String> {
    let target_file_bytes = match raw.target_file_size {
        Some(s) => parse_size(&s).map_err(|e| format!("current.target_file_size: {e}"))?,
        None => crate::table::current::DEFAULT_TARGET_FILE_BYTES as usize,
    };
    if target_file_bytes < 1024 {
        return Err("current.target_file_size: must be at least 1KiB".into());
    }
    Ok(CurrentConfig {
        enabled: raw.enabled.unwrap_or(true),
        refresh: opt_duration(raw.refresh, "current.refresh", 60)?,
        target_file_bytes,
    })
}

fn parse_snapshot(raw: RawSnapshot) -> std::result::Result<SnapshotConfig, String> {
    let initial = match raw.mode.as_deref() {
        None | Some("initial") => true,
        Some("never") => false,
        Some(other) => {
            return Err(format!(
                "snapshot.mode: `{other}` is not a snapshot mode, use \"initial\" or \"never\""
            ))
        }
    };
    let method = match raw.method.as_deref() {
        None | Some("auto") => SnapshotMethod::Auto,
        Some("consistent") => SnapshotMethod::Consistent,
        Some("watermark") => SnapshotMethod::Watermark,
        Some(other) => {
            return Err(format!(
                "snapshot.method: `{other}` is not a snapshot method, use \"auto\", \"consistent\" or \"watermark\""
            ))
        }
    };
    let chunk_rows = match raw.chunk_rows {
        None => 20_000,
        Some(n) if (1..=MAX_CHUNK_ROWS).contains(&n) => n,
        Some(n) => {
            return Err(format!(
                "snapshot.chunk_rows: {n} is out of range, use 1 to {MAX_CHUNK_ROWS}"
            ))
        }
    };
    // A lake that never reads tables (`mode = "never"`) does not start
    // reading them when the filter widens, unless asked to.
    let new_tables = match raw.new_tables.as_deref() {
        None if initial => NewTables::Snapshot,
        None => NewTables::Skip,
        Some("snapshot") => NewTables::Snapshot,
        Some("skip") => NewTables::Skip,
        Some(other) => {
            return Err(format!(
                "snapshot.new_tables: `{other}` is not a choice, use \"snapshot\" or \"skip\""
            ))
        }
    };
    Ok(SnapshotConfig {
        initial,
        chunk_rows,
        method,
        new_tables,
    })
}

fn parse_source(raw: RawSource) -> std::result::Result<SourceConfig, String> {
    let (host, port, user, mut password) = match (&raw.url, &raw.binlog_dir) {
        (Some(url), _) => parse_source_url(url)?,
        (None, Some(_)) => (String::new(), 0, String::new(), None),
        (None, None) => {
            return Err(
                "source.url: missing; set url = \"mysql://user@host:port\" (or binlog_dir for offline replay)".into(),
            )
        }
    };
    if let Some(dir) = &raw.binlog_dir {
        if !dir.is_dir() {
            return Err(format!(
                "source.binlog_dir: {} is not a directory; point it at a directory of binlog files",
                dir.display()
            ));
        }
    }
    if let Ok(p) = std::env::var(PASSWORD_ENV) {
        password = Some(p);
    } else if let Some(file) = &raw.password_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("source.password_file: cannot read {}: {e}", file.display()))?;
        password = Some(text.lines().next().unwrap_or("").to_string());
    }
    if raw.server_id == 0 {
        return Err(
            "source.server_id: 0 is not a valid replica id, pick a unique non-zero id".into(),
        );
    }
    let tls = parse_tls(&raw)?;
    let resume = match raw.resume.as_deref() {
        None | Some("auto") => Resume::Auto,
        Some("gtid") => Resume::Gtid,
        Some("position") => Resume::Position,
        Some(other) => {
            return Err(format!(
            "source.resume: `{other}` is not a resume mode, use \"auto\", \"gtid\" or \"position\""
        ))
        }
    };
    Ok(SourceConfig {
        host,
        port,
        user,
        password,
        server_id: raw.server_id,
        start: parse_start(raw.start)?,
        connect_timeout: opt_duration(raw.connect_timeout, "source.connect_timeout", 10)?,
        heartbeat: opt_duration(raw.heartbeat, "source.heartbeat", 5)?,
        max_sql_bytes: match raw.max_sql_bytes {
            Some(s) => match parse_size(&s).map_err(|e| format!("source.max_sql_bytes: {e}"))? {
                n if n > MAX_SQL_BYTES => {
                    return Err("source.max_sql_bytes: must be at most 1GiB (the largest statement a server accepts)".into())
                }
                n => n,
            },
            None => 4096,
        },
        resume,
        binlog_dir: raw.binlog_dir,
        report_host: String::new(),
        tls,
    })
}

fn parse_tls(raw: &RawSource) -> std::result::Result<TlsConfig, String> {
    let mode = match raw.tls.as_deref() {
        None | Some("preferred") => TlsMode::Preferred,
        Some("disabled") => TlsMode::Disabled,
        Some("required") => TlsMode::Required,
        Some("verify_ca") => TlsMode::VerifyCa,
        Some("verify_identity") => TlsMode::VerifyIdentity,
        Some(other) => {
            return Err(format!(
                "source.tls: `{other}` is not a mode, use \"disabled\", \"preferred\", \"required\", \"verify_ca\" or \"verify_identity\""
            ))
        }
    };
    let readable = |key: &str, path: &Option<PathBuf>| -> std::result::Result<(), String> {
        match path {
            Some(p) => std::fs::File::open(p)
                .map(drop)
                .map_err(|e| format!("source.{key}: cannot read {}: {e}", p.display())),
            None => Ok(()),
        }
    };
    readable("ca_file", &raw.ca_file)?;
    readable("cert_file", &raw.cert_file)?;
    readable("key_file", &raw.key_file)?;
    if mode == TlsMode::Disabled {
        if let Some(key) = [
            ("ca_file", &raw.ca_file),
            ("cert_file", &raw.cert_file),
            ("key_file", &raw.key_file),
        ]
        .iter()
        .find_map(|(k, v)| v.is_some().then_some(k))
        {
            return Err(format!(
                "source.{key}: set while source.tls = \"disabled\"; remove it or choose a tls mode that uses it"
            ));
        }
    }
    if mode.verifies() && raw.ca_file.is_none() {
        return Err(format!(
            "source.ca_file: missing; source.tls = \"{}\" checks the server's certificate against it (or use tls = \"required\" to encrypt without checking)",
            mode.name()
        ));
    }
    let client_identity = match (&raw.cert_file, &raw.key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        (Some(_), None) => {
            return Err(
                "source.key_file: missing; cert_file needs the private key of the certificate"
                    .into(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "source.cert_file: missing; key_file needs the certificate it belongs to".into(),
            )
        }
    };
    Ok(TlsConfig {
        mode,
        ca_file: raw.ca_file.clone(),
        client_identity,
    })
}

/// `mysql://user[:password]@host[:port]` → host, port, user, password.
fn parse_source_url(
    raw: &str,
) -> std::result::Result<(String, u16, String, Option<String>), String> {
    let url = url::Url::parse(raw).map_err(|e| format!("source.url: `{raw}`: {e}"))?;
    if url.scheme() != "mysql" && url.scheme() != "mariadb" {
        return Err(format!(
            "source.url: scheme `{}` is not supported, use mysql://user@host:port",
            url.scheme()
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| "source.url: no host, use mysql://user@host:port".to_string())?
        .to_string();
    if url.username().is_empty() {
        return Err("source.url: no user, use mysql://user@host:port".into());
    }
    let decode = |s: &str| {
        percent_decode(s)
            .map_err(|_| "source.url: bad percent-encoding in the user or password".to_string())
    };
    let user = decode(url.username())?;
    let password = url.password().map(decode).transpose()?;
    Ok((host, url.port().unwrap_or(3306), user, password))
}

fn parse_start(value: Option<toml::Value>) -> std::result::Result<StartPosition, String> {
    const HINT: &str = r#"use "earliest", "latest", { file = "binlog.000003", pos = 4 }, { gtid = "0-1-100" } or { timestamp = "2026-01-31T12:00:00Z" }"#;
    match value {
        None => Ok(StartPosition::Latest),
        Some(toml::Value::String(s)) if s == "earliest" => Ok(StartPosition::Earliest),
        Some(toml::Value::String(s)) if s == "latest" => Ok(StartPosition::Latest),
        Some(toml::Value::Table(t)) => {
            for key in t.keys() {
                if !["file", "pos", "gtid", "timestamp"].contains(&key.as_str()) {
                    return Err(format!("source.start.{key}: unknown key, {HINT}"));
                }
            }
            if let Some(gtid) = t.get("gtid") {
                if t.len() > 1 {
                    return Err(format!(
                        "source.start: gtid cannot be combined with other keys, {HINT}"
                    ));
                }
                let gtid = gtid
                    .as_str()
                    .filter(|g| crate::source::gtid::GtidState::parse(g).is_ok())
                    .ok_or_else(|| {
                        "source.start.gtid: not a GTID state; use MariaDB \"domain-server-seq[,...]\" or a MySQL GTID set \"uuid:1-100\"".to_string()
                    })?;
                return Ok(StartPosition::Gtid(gtid.to_string()));
            }
            if let Some(ts) = t.get("timestamp") {
                if t.len() > 1 {
                    return Err(format!(
                        "source.start: timestamp cannot be combined with other keys, {HINT}"
                    ));
                }
                let ts = match ts {
                    toml::Value::Datetime(d) => d.to_string(),
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let at = chrono::DateTime::parse_from_rfc3339(&ts)
                    .map_err(|e| format!("source.start.timestamp: `{ts}` is not an RFC 3339 time ({e}), e.g. \"2026-01-31T12:00:00Z\""))?;
                return Ok(StartPosition::Timestamp(at.with_timezone(&chrono::Utc)));
            }
            let file = t
                .get("file")
                .and_then(|v| v.as_str())
                .ok_or_else(|| format!("source.start.file: missing or not a string, {HINT}"))?;
            let pos = t
                .get("pos")
                .and_then(|v| v.as_integer())
                .filter(|p| *p >= 4)
                .ok_or_else(|| format!("source.start.pos: missing or below 4, {HINT}"))?;
            Ok(StartPosition::At {
                file: file.to_string(),
                pos: pos as u64,
            })
        }
        Some(other) => Err(format!(
            "source.start: `{other}` is not a start position, {HINT}"
        )),
    }
}

fn parse_sink(raw: RawSink) -> std::result::Result<SinkConfig, String> {
    let location = parse_lake_url(&raw.url)?;
    let is_s3 = matches!(location, LakeLocation::S3 { .. });
    for (key, set) in [
        ("endpoint", raw.endpoint.is_some()),
        ("region", raw.region.is_some()),
        ("allow_http", raw.allow_http.is_some()),
    ] {
        if set && !is_s3 {
            return Err(format!(
                "sink.{key}: only applies to s3:// lakes, and sink.url is `{}`",
                raw.url
            ));
        }
    }
    if let Some(endpoint) = &raw.endpoint {
        let parsed =
            url::Url::parse(endpoint).map_err(|e| format!("sink.endpoint: `{endpoint}`: {e}"))?;
        if parsed.scheme() != "http" && parsed.scheme() != "https" {
            return Err(format!(
                "sink.endpoint: `{endpoint}`: use an http:// or https:// URL"
            ));
        }
    }
    let multipart_threshold = match raw.multipart_threshold {
        Some(s) => parse_size(&s).map_err(|e| format!("sink.multipart_threshold: {e}"))?,
        None => DEFAULT_MULTIPART_THRESHOLD,
    };
    if multipart_threshold < 5 << 20 {
        return Err(
            "sink.multipart_threshold: must be at least 5MiB (the smallest S3 part)".into(),
        );
    }
    if multipart_threshold > MAX_SINGLE_PUT {
        return Err(
            "sink.multipart_threshold: must be at most 5GiB (the largest single S3 PUT)".into(),
        );
    }
    Ok(SinkConfig {
        location,
        url: raw.url,
        s3: S3Overrides {
            endpoint: raw.endpoint,
            region: raw.region,
            allow_http: raw.allow_http,
        },
        multipart_threshold,
    })
}

const SINK_URL_HINT: &str =
    "use s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, file:///path or an absolute path";

/// `[sink] url`: a cloud URL, `file:///path`, or a plain path.
pub fn parse_lake_url(url: &str) -> std::result::Result<LakeLocation, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        // A plain path; a relative one is relative to the working directory.
        if url.trim().is_empty() {
            return Err(format!("sink.url: empty, {SINK_URL_HINT}"));
        }
        return Ok(LakeLocation::Local(PathBuf::from(url)));
    };
    match scheme {
        "file" => {
            if !rest.starts_with('/') {
                return Err(format!(
                    "sink.url: `{url}`: a file URL needs an absolute path, file:///path"
                ));
            }
            let parsed = url::Url::parse(url).map_err(|e| format!("sink.url: `{url}`: {e}"))?;
            let root = parsed
                .to_file_path()
                .map_err(|_| format!("sink.url: `{url}` is not a local path"))?;
            Ok(LakeLocation::Local(root))
        }
        "s3" | "gs" | "az" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!(
                    "sink.url: `{url}` names no bucket, {SINK_URL_HINT}"
                ));
            }
            if bucket.contains(['?', '#', '@', ':']) || prefix.contains(['?', '#']) {
                return Err(format!(
                    "sink.url: `{url}`: write the URL as {scheme}://bucket/prefix without credentials, port or query"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if prefix
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
                && !prefix.is_empty()
            {
                return Err(format!(
                    "sink.url: `{url}`: the prefix has an empty, `.` or `..` segment"
                ));
            }
            let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
            Ok(match scheme {
                "s3" => LakeLocation::S3 { bucket, prefix },
                "gs" => LakeLocation::Gcs { bucket, prefix },
                _ => LakeLocation::Azure {
                    container: bucket,
                    prefix,
                },
            })
        }
        other => Err(format!(
            "sink.url: `{url}`: scheme `{other}` is not supported, {SINK_URL_HINT}"
        )),
    }
}

/// A TOML or type error as one line that names the key: serde reports the
/// field only for unknown keys, so the key is read from the source line the
/// error points at, under the `[section]` above it.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().replace('\n', " ");
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].lines().count().max(1);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let section = text[..line_start + line.len()]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim());
    // A missing key is reported at its table, whose first line names another.
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty() && !k.starts_with('[') && !message.starts_with("missing field"));
    let named = match (section, key) {
        (Some(s), Some(k)) => format!("{s}.{k}"),
        (None, Some(k)) => k.to_string(),
        (Some(s), None) => s.to_string(),
        (None, None) => return format!("line {line_no}: {message}"),
    };
    format!("{named}: {message} (line {line_no})")
}

fn opt_duration(
    value: Option<String>,
    key: &str,
    default_secs: u64,
) -> std::result::Result<Duration, String> {
    match value {
        Some(s) => parse_duration(&s).map_err(|e| format!("{key}: {e}")),
        None => Ok(Duration::from_secs(default_secs)),
    }
}

/// The shortest duration any key accepts: below it timers round to zero.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
/// The longest duration any key accepts. Far beyond any useful timeout or
/// interval, and small enough that sums and multiples of it (three
/// heartbeats, a deadline from now) cannot overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `"500ms"`, `"10s"`, `"5m"`, `"1h"`, between [`MIN_DURATION`] and [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like \"10s\" or \"500ms\""))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("`{s}`: unit must be ms, s, m or h")),
    };
    if secs <= 0.0 {
        return Err(format!("`{s}` must be positive"));
    }
    let range = || {
        format!(
            "between {:?} and {}h",
            MIN_DURATION,
            MAX_DURATION.as_secs() / 3600
        )
    };
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d < MIN_DURATION => Err(format!("`{s}` is too short, use a duration {}", range())),
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("`{s}` is too long, use a duration {}", range())),
    }
}

/// The largest size any key accepts (1 TiB); keys may bound it further.
pub const MAX_SIZE: u64 = 1 << 40;

/// `"256MiB"`, `"32MiB"`, `"1GiB"`, `"100MB"`, `"4096"`: from 1 byte to [`MAX_SIZE`].
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => {
            return Err(format!(
                "`{s}`: unit must be B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    if num.is_empty() {
        return Err(format!("`{s}` is not a size like \"256MiB\""));
    }
    let too_large = || format!("`{s}` is too large, at most 1024GiB");
    // Only digits remain: a parse failure is an overflow.
    let n: u64 = num.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(mult).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(format!("`{s}` must be positive"));
    }
    if bytes > MAX_SIZE {
        return Err(too_large());
    }
    usize::try_from(bytes).map_err(|_| too_large())
}

fn percent_decode(s: &str) -> std::result::Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3).ok_or(())?).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
url = "mysql://repl@127.0.0.1:3307"
server_id = 7
[sink]
url = "/tmp/lake"
"#;

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.source.port, 3307);
        assert_eq!(c.source.user, "repl");
        assert_eq!(c.source.start, StartPosition::Latest);
        assert_eq!(c.flush.max_rows, 500_000);
        assert_eq!(c.flush.max_buffer_bytes, 96 << 20);
        assert_eq!(c.flush.interval, Duration::from_secs(10));
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(c.state_dir, PathBuf::from("./sluice-state"));
    }

    #[test]
    fn http_keys_have_defaults_and_name_the_key() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.http.listen, None);
        assert_eq!(c.http.ready_max_lag, Duration::from_secs(60));
        assert_eq!(c.http.stall_timeout, Duration::from_secs(300));
        let c = Config::parse(&format!(
            "{MINIMAL}[http]\nlisten = \"127.0.0.1:9464\"\nready_max_lag = \"5s\"\nstall_timeout = \"1m\"\n"
        ))
        .unwrap();
        assert_eq!(c.http.listen.as_deref(), Some("127.0.0.1:9464"));
        assert_eq!(c.http.ready_max_lag, Duration::from_secs(5));
        assert_eq!(c.http.stall_timeout, Duration::from_secs(60));
        let off = Config::parse(&format!("{MINIMAL}[http]\nlisten = \"\"\n")).unwrap();
        assert_eq!(off.http.listen, None);
        for (toml, key) in [
            ("listen = \"9464\"", "http.listen: "),
            ("listen = \"host:port\"", "http.listen: "),
            ("listen = \":9464\"", "http.listen: "),
            ("ready_max_lag = \"soon\"", "http.ready_max_lag: "),
            ("stall_timeout = \"0s\"", "http.stall_timeout: "),
        ] {
            let e = Config::parse(&format!("{MINIMAL}[http]\n{toml}\n")).unwrap_err();
            assert!(e.starts_with(key), "{toml}: {e}");
        }
        let e = Config::parse(&format!("{MINIMAL}[http]\nlisten_on = \"x\"\n")).unwrap_err();
        assert!(e.contains("listen_on"), "{e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let text = format!("{MINIMAL}[flush]\nmax_rowz = 5\n");
        let err = Config::parse(&text).unwrap_err();
        assert!(err.contains("max_rowz"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn start_position_forms() {
        let text = MINIMAL.replace(
            "server_id = 7",
            "server_id = 7\nstart = { file = \"binlog.000002\", pos = 1234 }",
        );
        let c = Config::parse(&text).unwrap();
        assert_eq!(
            c.source.start,
            StartPosition::At {
                file: "binlog.000002".into(),
                pos: 1234
            }
        );
        let bad = MINIMAL.replace("server_id = 7", "server_id = 7\nstart = \"yesterday\"");
        assert!(Config::parse(&bad).unwrap_err().contains("source.start"));
    }

    #[test]
    fn gtid_timestamp_and_resume() {
        let with = |line: &str| {
            Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")))
        };
        let c = with("start = { gtid = \"0-1-100,1-2-7\" }").unwrap();
        assert_eq!(c.source.start, StartPosition::Gtid("0-1-100,1-2-7".into()));
        let c = with("start = { timestamp = \"2026-01-31T12:00:00+01:00\" }").unwrap();
        let StartPosition::Timestamp(t) = c.source.start else {
            panic!("{:?}", c.source.start)
        };
        assert_eq!(t.to_rfc3339(), "2026-01-31T11:00:00+00:00");
        // A TOML datetime literal works as well as a string.
        let c = with("start = { timestamp = 2026-01-31T12:00:00Z }").unwrap();
        assert!(matches!(c.source.start, StartPosition::Timestamp(_)));
        let e = with("start = { gtid = \"0-1\" }").unwrap_err();
        assert!(e.starts_with("source.start.gtid: "), "{e}");
        let e = with("start = { timestamp = \"yesterday\" }").unwrap_err();
        assert!(e.starts_with("source.start.timestamp: "), "{e}");
        let e = with("start = { gtid = \"0-1-1\", pos = 4 }").unwrap_err();
        assert!(e.contains("cannot be combined"), "{e}");

        assert_eq!(Config::parse(MINIMAL).unwrap().source.resume, Resume::Auto);
        assert_eq!(
            with("resume = \"gtid\"").unwrap().source.resume,
            Resume::Gtid
        );
        assert_eq!(
            with("resume = \"position\"").unwrap().source.resume,
            Resume::Position
        );
        let e = with("resume = \"sometimes\"").unwrap_err();
        assert!(e.starts_with("source.resume: "), "{e}");
    }

    #[test]
    fn tls_modes_and_their_files() {
        let with = |lines: &str| {
            Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{lines}")))
        };
        let tls = Config::parse(MINIMAL).unwrap().source.tls;
        assert_eq!(tls.mode, TlsMode::Preferred);
        assert_eq!((tls.ca_file, tls.client_identity), (None, None));
        for (name, mode) in [
            ("disabled", TlsMode::Disabled),
            ("preferred", TlsMode::Preferred),
            ("required", TlsMode::Required),
        ] {
            assert_eq!(
                with(&format!("tls = \"{name}\"")).unwrap().source.tls.mode,
                mode
            );
            assert_eq!(mode.name(), name);
        }
        let e = with("tls = \"on\"").unwrap_err();
        assert!(e.starts_with("source.tls: `on` is not a mode"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let p = pem.display();
        let e = with("tls = \"verify_ca\"").unwrap_err();
        assert!(e.starts_with("source.ca_file: missing"), "{e}");
        let c = with(&format!("tls = \"verify_identity\"\nca_file = '{p}'")).unwrap();
        assert_eq!(c.source.tls.mode, TlsMode::VerifyIdentity);
        assert_eq!(c.source.tls.ca_file.as_deref(), Some(pem.as_path()));
        let e = with("tls = \"verify_ca\"\nca_file = '/nonexistent/ca.pem'").unwrap_err();
        assert!(
            e.starts_with("source.ca_file: cannot read /nonexistent/ca.pem"),
            "{e}"
        );
        let e = with(&format!("tls = \"disabled\"\nca_file = '{p}'")).unwrap_err();
        assert!(
            e.starts_with("source.ca_file: set while source.tls = \"disabled\""),
            "{e}"
        );
        let e = with(&format!("cert_file = '{p}'")).unwrap_err();
        assert!(e.starts_with("source.key_file: missing"), "{e}");
        let c = with(&format!(
            "tls = \"required\"\ncert_file = '{p}'\nkey_file = '{p}'"
        ))
        .unwrap();
        assert_eq!(
            c.source.tls.client_identity,
            Some((pem.clone(), pem.clone()))
        );
    }

    #[test]
    fn binlog_dir_makes_the_url_optional() {
        let dir = std::env::temp_dir();
        let text = MINIMAL.replace(
            "url = \"mysql://repl@127.0.0.1:3307\"",
            &format!("binlog_dir = '{}'", dir.display()),
        );
        let c = Config::parse(&text).unwrap();
        assert!(!c.source.has_server());
        assert_eq!(c.source.binlog_dir.as_deref(), Some(dir.as_path()));
        let none = MINIMAL.replace("url = \"mysql://repl@127.0.0.1:3307\"", "");
        assert!(Config::parse(&none)
            .unwrap_err()
            .starts_with("source.url: missing"));
        let missing = MINIMAL.replace(
            "url = \"mysql://repl@127.0.0.1:3307\"",
            "binlog_dir = '/no/such/dir'",
        );
        let e = Config::parse(&missing).unwrap_err();
        assert!(
            e.starts_with("source.binlog_dir: ") && e.contains("not a directory"),
            "{e}"
        );
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("32MiB").unwrap(), 32 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert!(parse_size("12 parsecs").is_err());
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn the_example_config_parses() {
        let c = Config::parse(include_str!("../conf/local.toml")).unwrap();
        assert_eq!(
            c.sink.location,
            LakeLocation::Local("/var/lib/sluice/lake".into())
        );
        assert_eq!(c.sink.multipart_threshold, DEFAULT_MULTIPART_THRESHOLD);
    }

    #[test]
    fn sink_url_forms() {
        let loc = |u: &str| parse_lake_url(u);
        assert_eq!(
            loc("/var/lake").unwrap(),
            LakeLocation::Local("/var/lake".into())
        );
        assert_eq!(
            loc("file:///var/lake").unwrap(),
            LakeLocation::Local("/var/lake".into())
        );
        assert_eq!(
            loc("s3://bkt/a/b/").unwrap(),
            LakeLocation::S3 {
                bucket: "bkt".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            loc("s3://bkt").unwrap(),
            LakeLocation::S3 {
                bucket: "bkt".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            loc("gs://b/p").unwrap(),
            LakeLocation::Gcs {
                bucket: "b".into(),
                prefix: "p".into()
            }
        );
        assert_eq!(
            loc("az://c/p").unwrap(),
            LakeLocation::Azure {
                container: "c".into(),
                prefix: "p".into()
            }
        );
        for bad in [
            "s3:///p",
            "hdfs://x/y",
            "s3://b/a//c",
            "s3://b/../c",
            "file://rel",
            "",
        ] {
            let err = loc(bad).unwrap_err();
            assert!(err.starts_with("sink.url: "), "{bad}: {err}");
        }
    }

    #[test]
    fn sink_keys() {
        let s3 = MINIMAL.replace("url = \"/tmp/lake\"", "url = \"s3://bkt/lake\"");
        let c = Config::parse(&s3).unwrap();
        assert_eq!(c.sink.s3, S3Overrides::default());
        assert_eq!(c.sink.multipart_threshold, 16 << 20);
        let text = format!(
            "{s3}endpoint = \"http://127.0.0.1:9000\"\nregion = \"eu-west-1\"\nallow_http = true\nmultipart_threshold = \"64MiB\"\n"
        );
        let c = Config::parse(&text).unwrap();
        assert_eq!(
            c.sink.s3,
            S3Overrides {
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                allow_http: Some(true),
            }
        );
        assert_eq!(c.sink.multipart_threshold, 64 << 20);
        let err = Config::parse(&format!("{s3}endpont = \"x\"\n")).unwrap_err();
        assert!(err.contains("endpont"), "{err}");
        let err = Config::parse(&format!("{MINIMAL}region = \"eu-west-1\"\n")).unwrap_err();
        assert!(err.starts_with("sink.region: "), "{err}");
        let err = Config::parse(&format!("{s3}endpoint = \"ftp://x\"\n")).unwrap_err();
        assert!(err.starts_with("sink.endpoint: "), "{err}");
        let err = Config::parse(&format!("{s3}multipart_threshold = \"1MiB\"\n")).unwrap_err();
        assert!(err.starts_with("sink.multipart_threshold: "), "{err}");
    }

    #[test]
    fn out_of_range_durations_are_errors_naming_the_key() {
        let top = |line: &str| Config::parse(&format!("{line}\n{MINIMAL}"));
        let e = top("shutdown_timeout = \"99999999999999999999999h\"").unwrap_err();
        assert!(
            e.starts_with("shutdown_timeout: ") && e.contains("too long"),
            "{e}"
        );
        let flush = |line: &str| Config::parse(&format!("{MINIMAL}[flush]\n{line}\n"));
        let e = flush("interval = \"0.0000000001s\"").unwrap_err();
        assert!(
            e.starts_with("flush.interval: ") && e.contains("too short"),
            "{e}"
        );
        let e = flush("interval = \"1e-10s\"").unwrap_err();
        assert!(e.starts_with("flush.interval: "), "{e}");
        assert_eq!(
            flush("interval = \"1ms\"").unwrap().flush.interval,
            MIN_DURATION
        );
        assert_eq!(
            flush("interval = \"168h\"").unwrap().flush.interval,
            MAX_DURATION
        );
        let e = flush("max_buffer_bytes = \"0\"").unwrap_err();
        assert!(e.starts_with("flush.max_buffer_bytes: "), "{e}");
        let e = flush("max_buffer_bytes = \"99999999999999999999999GiB\"").unwrap_err();
        assert!(
            e.starts_with("flush.max_buffer_bytes: ") && e.contains("too large"),
            "{e}"
        );
        let sink = |line: &str| Config::parse(&format!("{MINIMAL}{line}\n"));
        let e = sink("multipart_threshold = \"6GiB\"").unwrap_err();
        assert!(e.starts_with("sink.multipart_threshold: "), "{e}");
        let source = |line: &str| {
            Config::parse(&MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")))
        };
        let e = source("max_sql_bytes = \"0B\"").unwrap_err();
        assert!(e.starts_with("source.max_sql_bytes: "), "{e}");
        let e = source("max_sql_bytes = \"2GiB\"").unwrap_err();
        assert!(e.starts_with("source.max_sql_bytes: "), "{e}");
    }

    #[test]
    fn snapshot_keys_have_defaults_and_bounds() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(
            c.snapshot,
            SnapshotConfig {
                initial: true,
                chunk_rows: 20_000,
                method: SnapshotMethod::Auto,
                new_tables: NewTables::Snapshot,
            }
        );
        let snap = |body: &str| Config::parse(&format!("{MINIMAL}[snapshot]\n{body}\n"));
        let c = snap("mode = \"never\"\nchunk_rows = 7\nmethod = \"consistent\"").unwrap();
        assert_eq!(
            c.snapshot,
            SnapshotConfig {
                initial: false,
                chunk_rows: 7,
                method: SnapshotMethod::Consistent,
                new_tables: NewTables::Skip,
            }
        );
        let c = snap("method = \"watermark\"").unwrap();
        assert_eq!(c.snapshot.method, SnapshotMethod::Watermark);
        let c = snap("new_tables = \"skip\"").unwrap();
        assert_eq!(c.snapshot.new_tables, NewTables::Skip);
        let c = snap("mode = \"never\"\nnew_tables = \"snapshot\"").unwrap();
        assert_eq!(c.snapshot.new_tables, NewTables::Snapshot);
        for (body, key) in [
            ("mode = \"sometimes\"", "snapshot.mode: "),
            ("chunk_rows = 0", "snapshot.chunk_rows: "),
            ("chunk_rows = 10000001", "snapshot.chunk_rows: "),
            ("method = \"fast\"", "snapshot.method: "),
            ("new_tables = \"always\"", "snapshot.new_tables: "),
            ("new_table = \"skip\"", "snapshot"),
        ] {
            let e = snap(body).unwrap_err();
            assert!(e.starts_with(key), "{body}: {e}");
        }
    }

    #[test]
    fn current_keys_have_defaults_and_errors_name_them() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(
            c.current,
            CurrentConfig {
                enabled: true,
                refresh: Duration::from_secs(60),
                target_file_bytes: 128 << 20,
            }
        );
        let cur = |body: &str| Config::parse(&format!("{MINIMAL}[current]\n{body}\n"));
        let c = cur("enabled = false\nrefresh = \"5s\"\ntarget_file_size = \"64KiB\"").unwrap();
        assert_eq!(
            c.current,
            CurrentConfig {
                enabled: false,
                refresh: Duration::from_secs(5),
                target_file_bytes: 64 << 10,
            }
        );
        for (body, key) in [
            ("refresh = \"soon\"", "current.refresh: "),
            ("refresh = \"0s\"", "current.refresh: "),
            ("target_file_size = \"12\"", "current.target_file_size: "),
            ("target_file_size = \"lots\"", "current.target_file_size: "),
            ("enabled = \"yes\"", "current.enabled"),
            ("refrsh = \"1m\"", "refrsh"),
        ] {
            let e = cur(body).unwrap_err();
            assert!(e.contains(key), "{body}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn type_errors_name_the_key() {
        let cases = [
            (
                MINIMAL.replace("server_id = 7", "server_id = \"seven\""),
                "source.server_id: ",
            ),
            (
                MINIMAL.replace("server_id = 7", "server_id = -7"),
                "source.server_id: ",
            ),
            (
                format!("{MINIMAL}[flush]\nmax_rows = -1\n"),
                "flush.max_rows: ",
            ),
            (
                format!("{MINIMAL}[flush]\ninterval = 10\n"),
                "flush.interval: ",
            ),
            (
                format!("{MINIMAL}allow_http = \"yes\"\n"),
                "sink.allow_http: ",
            ),
            (
                format!("shutdown_timeout = 30\n{MINIMAL}"),
                "shutdown_timeout: ",
            ),
            (MINIMAL.replace("server_id = 7\n", ""), "source: "),
        ];
        for (text, key) in cases {
            let e = Config::parse(&text).unwrap_err();
            assert!(e.starts_with(key), "{key}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// Seeded random strings for every duration and size key: parsing never
    /// panics, an accepted value is within the key's bounds, and a refused
    /// one is a single line naming the key.
    #[test]
    fn random_duration_and_size_values_never_panic() {
        use rand::{Rng, SeedableRng};
        enum Kind {
            Duration,
            Size { min: usize, max: usize },
        }
        let keys = [
            ("shutdown_timeout", Kind::Duration),
            ("source.connect_timeout", Kind::Duration),
            ("source.heartbeat", Kind::Duration),
            ("flush.interval", Kind::Duration),
            (
                "source.max_sql_bytes",
                Kind::Size {
                    min: 1,
                    max: MAX_SQL_BYTES,
                },
            ),
            (
                "sink.multipart_threshold",
                Kind::Size {
                    min: 5 << 20,
                    max: MAX_SINGLE_PUT,
                },
            ),
            (
                "flush.max_buffer_bytes",
                Kind::Size {
                    min: 1 << 20,
                    max: MAX_SIZE as usize,
                },
            ),
        ];
        const PIECES: &[&str] = &[
            "0",
            "1",
            "5",
            "9",
            ".",
            "..",
            "e",
            "E",
            "-",
            "+",
            " ",
            "\t",
            "_",
            "ms",
            "s",
            "m",
            "h",
            "d",
            "B",
            "KiB",
            "MiB",
            "GiB",
            "KB",
            "MB",
            "GB",
            "TiB",
            "inf",
            "NaN",
            "µs",
            "∞",
            "0x",
            "1e-10",
            "99999999999999999999",
            "18446744073709551616",
            "0.0000001",
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x51ce);
        let mut accepted = [0usize; 7];
        for case in 0..3000 {
            let mut value = String::new();
            if rng.gen_bool(0.5) {
                // Shaped like a value: digits, maybe a fraction, a unit.
                const UNITS: &[&str] = &[
                    "", "ms", "s", "m", "h", "B", "KiB", "MiB", "GiB", "KB", "MB", "GB",
                ];
                let digits = rng.gen_range(1..=12);
                value.extend((0..digits).map(|_| char::from(b'0' + rng.gen_range(0..10))));
                if rng.gen_bool(0.3) {
                    value.push('.');
                    value.push(char::from(b'0' + rng.gen_range(0..10)));
                }
                value.push_str(UNITS[rng.gen_range(0..UNITS.len())]);
            }
            for _ in 0..rng.gen_range(0..=4) {
                if rng.gen_bool(0.3) {
                    let digits = rng.gen_range(1..=25);
                    value.extend((0..digits).map(|_| char::from(b'0' + rng.gen_range(0..10))));
                } else {
                    value.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
                }
            }
            let quoted = toml::Value::String(value.clone()).to_string();
            for (k, (key, kind)) in keys.iter().enumerate() {
                let (section, name) = key.split_once('.').unwrap_or(("", key));
                let line = format!("{name} = {quoted}");
                let text = match section {
                    "" => format!("{line}\n{MINIMAL}"),
                    "source" => MINIMAL.replace("server_id = 7", &format!("server_id = 7\n{line}")),
                    "sink" => format!("{MINIMAL}{line}\n"),
                    _ => format!("{MINIMAL}[{section}]\n{line}\n"),
                };
                let parsed = Config::parse(&text);
                let c = match parsed {
                    Err(e) => {
                        assert!(
                            e.starts_with(&format!("{key}: ")) && !e.contains('\n'),
                            "case {case}, {key} = {quoted}: {e}"
                        );
                        continue;
                    }
                    Ok(c) => c,
                };
                accepted[k] += 1;
                match kind {
                    Kind::Duration => {
                        let d = match *key {
                            "shutdown_timeout" => c.shutdown_timeout,
                            "source.connect_timeout" => c.source.connect_timeout,
                            "source.heartbeat" => c.source.heartbeat,
                            _ => c.flush.interval,
                        };
                        assert!(
                            (MIN_DURATION..=MAX_DURATION).contains(&d),
                            "case {case}, {key} = {quoted} gave {d:?}"
                        );
                        assert_eq!(parse_duration(&value), Ok(d));
                    }
                    Kind::Size { min, max } => {
                        let n = match *key {
                            "source.max_sql_bytes" => c.source.max_sql_bytes,
                            "sink.multipart_threshold" => c.sink.multipart_threshold,
                            _ => c.flush.max_buffer_bytes,
                        };
                        assert!(
                            (*min..=*max).contains(&n),
                            "case {case}, {key} = {quoted} gave {n}"
                        );
                        assert_eq!(parse_size(&value), Ok(n));
                    }
                }
            }
        }
        // The generator reaches both outcomes for every key.
        for ((key, _), n) in keys.iter().zip(accepted) {
            assert!(n > 10 && n < 3000, "{key}: {n} of 3000 accepted");
        }
    }

    #[test]
    fn filter_is_anchored() {
        let f = TableFilter::new(&[r"shop\..*".into()], &[r"shop\.tmp_.*".into()]).unwrap();
        assert!(f.captures("shop", "orders"));
        assert!(!f.captures("shop", "tmp_x"));
        assert!(!f.captures("myshop", "orders"));
        assert!(!f.captures("shopping", "x"));
    }
}
