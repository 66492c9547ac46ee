//! The TOML configuration: parsing, defaults, and validation with errors that
//! name the key. See `conf/local.toml` for the documented example.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod catalog;
mod columns;
mod http;
pub mod policy;
mod routes;
mod tables;
mod values;
pub use catalog::{CatalogConfig, CatalogStore, CATALOG_PASSWORD_ENV};
pub use columns::COLUMN_KEY_ENV;
pub use http::HttpConfig;
use http::{parse_http, RawHttp};
pub use routes::{RouteTarget, Routes};
use values::{opt_duration, percent_decode, toml_error};
pub use values::{
    parse_duration, parse_lake_url, parse_size, MAX_DURATION, MAX_SIZE, MIN_DURATION,
};

use tables::{parse_compaction, parse_current, RawCompaction, RawCurrent};
/// Environment variable holding the source password (preferred over the URL).
pub use tables::{
    CompactionConfig, CurrentConfig, DEFAULT_COMPACTION_TARGET_BYTES, DEFAULT_PURGE_THRESHOLD,
};

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
    pub compaction: CompactionConfig,
    pub retention: RetentionConfig,
    pub shutdown_timeout: Duration,
    pub http: HttpConfig,
    /// `[[columns]]` and `[column_key]`: what of each column reaches the lake.
    pub columns: policy::ColumnPolicies,
    /// `[[routes]]`: shards written into one lake table.
    pub routes: Routes,
    /// `[iceberg]`: Iceberg metadata beside the Delta log.
    pub iceberg: IcebergConfig,
    /// `[catalog]`: where every table is registered by name.
    pub catalog: CatalogConfig,
}

/// `[iceberg]`: Iceberg metadata beside each table's Delta log
/// (DESIGN.md "Tables by name").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IcebergConfig {
    /// `enabled`: after each Delta commit, an Iceberg snapshot of the same
    /// version over the same files (default false).
    pub enabled: bool,
}

/// `[retention]`: what of the lake's history is deleted (DESIGN.md "A lake
/// that lasts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Manifests older than this are deleted, oldest first, except those
    /// still needed (see `commit::retention`).
    pub manifests: Duration,
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
    /// `after_ddl`: what follows a DDL statement whose effect on existing
    /// rows the binlog does not carry.
    pub after_ddl: AfterDdl,
}

/// `[snapshot] after_ddl` (DESIGN.md "DDL whose effect sluice cannot
/// replay is re-read from the source").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDdl {
    /// A `truncate` marker at the statement, then a snapshot of the table.
    Reread,
    /// The statement changes the schema only: the lake keeps the old values.
    Never,
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
    /// `requests_in_flight`: how many tables' store work (their Delta
    /// commits, their start-up reads) runs at once.
    pub requests_in_flight: usize,
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

impl LakeLocation {
    /// The lake root as a URI, as readers name the files under it
    /// (`file:///abs/path`, `s3://bucket/prefix`).
    pub fn uri(&self) -> String {
        let join = |scheme: &str, bucket: &str, prefix: &str| {
            let prefix = prefix.trim_matches('/');
            if prefix.is_empty() {
                format!("{scheme}://{bucket}")
            } else {
                format!("{scheme}://{bucket}/{prefix}")
            }
        };
        match self {
            LakeLocation::Local(root) => {
                let abs = std::path::absolute(root).unwrap_or_else(|_| root.clone());
                format!("file://{}", abs.display())
            }
            LakeLocation::S3 { bucket, prefix } => join("s3", bucket, prefix),
            LakeLocation::Gcs { bucket, prefix } => join("gs", bucket, prefix),
            LakeLocation::Azure { container, prefix } => join("az", container, prefix),
        }
    }
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
/// Default of `[sink] requests_in_flight`.
pub const DEFAULT_REQUESTS_IN_FLIGHT: usize = 32;
/// Upper bound of `[sink] requests_in_flight`.
const MAX_REQUESTS_IN_FLIGHT: usize = 1024;

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
    #[serde(default)]
    compaction: RawCompaction,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    columns: Vec<columns::RawColumnRule>,
    #[serde(default)]
    column_key: columns::RawColumnKey,
    #[serde(default)]
    routes: Vec<routes::RawRoute>,
    #[serde(default)]
    iceberg: RawIceberg,
    #[serde(default)]
    catalog: catalog::RawCatalog,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIceberg {
    enabled: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    manifests: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSnapshot {
    mode: Option<String>,
    chunk_rows: Option<usize>,
    method: Option<String>,
    new_tables: Option<String>,
    after_ddl: Option<String>,
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
    requests_in_flight: Option<i64>,
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
    /// The share of `flush.max_buffer_bytes` of the work beside the stream
    /// (a quarter when folds or compaction are on, else none); the stream's
    /// buffers get the rest. A fold and a table's compaction take turns
    /// with it (`pipeline::current::BACKGROUND`).
    pub fn background_share(&self) -> usize {
        match self.current.enabled || self.compaction.enabled {
            true => self.flush.max_buffer_bytes / 4,
            false => 0,
        }
    }

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
        let iceberg = IcebergConfig {
            enabled: raw.iceberg.enabled.unwrap_or(false),
        };
        let catalog = catalog::parse_catalog(raw.catalog, iceberg.enabled)?;
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
            compaction: parse_compaction(raw.compaction)?,
            retention: RetentionConfig {
                manifests: opt_duration(
                    raw.retention.manifests,
                    "retention.manifests",
                    7 * 86_400,
                )?,
            },
            shutdown_timeout: opt_duration(raw.shutdown_timeout, "shutdown_timeout", 30)?,
            http: parse_http(raw.http)?,
            columns: columns::parse_columns(raw.columns, &raw.column_key)?,
            routes: routes::parse_routes(raw.routes)?,
            iceberg,
            catalog,
        })
    }
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
    let after_ddl = match raw.after_ddl.as_deref() {
        None | Some("reread") => AfterDdl::Reread,
        Some("never") => AfterDdl::Never,
        Some(other) => {
            return Err(format!(
                "snapshot.after_ddl: `{other}` is not a choice, use \"reread\" or \"never\""
            ))
        }
    };
    Ok(SnapshotConfig {
        initial,
        chunk_rows,
        method,
        new_tables,
        after_ddl,
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
                    .filter(|g| crate::types::gtid::GtidState::parse(g).is_ok())
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
    let requests_in_flight = match raw.requests_in_flight {
        None => DEFAULT_REQUESTS_IN_FLIGHT,
        Some(n) if (1..=MAX_REQUESTS_IN_FLIGHT as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(format!(
                "sink.requests_in_flight: {n} is out of range; use 1 to {MAX_REQUESTS_IN_FLIGHT} (default {DEFAULT_REQUESTS_IN_FLIGHT})"
            ))
        }
    };
    Ok(SinkConfig {
        location,
        url: raw.url,
        s3: S3Overrides {
            endpoint: raw.endpoint,
            region: raw.region,
            allow_http: raw.allow_http,
        },
        multipart_threshold,
        requests_in_flight,
    })
}

#[cfg(test)]
mod tests;
