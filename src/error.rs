//! One error type for the library. Every variant says whether retrying can help
//! ([`Error::is_transient`]) and carries what the operator needs to act on it.

use std::path::PathBuf;
use std::time::Duration;

pub mod store;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file is missing, malformed, or names an unknown key.
    #[error("config {path}: {message}")]
    Config { path: PathBuf, message: String },

    /// The source server refuses us or is not set up for row-based replication.
    #[error("source: {0}")]
    Preflight(String),

    /// The source connection failed or dropped after a successful start.
    #[error("source connection: {0}")]
    Connection(String),

    /// Another replica of the source (or the source itself) uses sluice's
    /// replica id. Definite: the server disconnects one of two replicas with
    /// one id whenever the other connects, so retrying only starts a fight.
    #[error("source.server_id {server_id} is already taken by {holder}; set source.server_id to an id that neither the source (@@server_id) nor any of its replicas (SHOW SLAVE HOSTS) uses: the source disconnects a replica whenever another connects with the same id")]
    ServerIdInUse { server_id: u32, holder: String },

    /// The binlog position asked for does not exist on the server.
    #[error("start position: {0}")]
    Position(String),

    /// A binlog event could not be decoded; the position says where.
    #[error("decode at {file}:{pos}: {message}")]
    Decode {
        file: String,
        pos: u64,
        message: String,
    },

    /// The schema of a captured table is unknown or disagrees with the binlog.
    #[error("schema of {table}: {message}")]
    Schema { table: String, message: String },

    /// A `[[columns]]` policy cannot apply to the column it matches (a key
    /// column excluded or masked, a truncated number), at start or after a
    /// DDL statement. Definite: nothing is written rather than raw values.
    #[error("{0}")]
    ColumnPolicy(#[from] PolicyError),

    /// A hashed column is to be written and no key is set. Definite.
    #[error("{table}.{column} is hashed and no column key is set: set SLUICE_COLUMN_KEY or [column_key] file")]
    NoColumnKey { table: String, column: String },

    /// A DDL statement on a captured table could not be read.
    #[error("cannot apply DDL on captured table {table} at {file}:{pos}: `{statement}`: {why}; if the statement is valid, record the table's shape after it with `sluice schema resync --config FILE {table}` and start sluice again")]
    UnparseableDdl {
        table: String,
        file: String,
        pos: u64,
        statement: String,
        why: String,
    },

    /// Another writer committed the manifest this sidecar was about to write.
    #[error("lake is owned by another writer: manifest {seq} was written by someone else; stop the other sidecar (only one may write a lake) and restart")]
    Fenced { seq: u64 },

    /// SIGTERM arrived inside a transaction that did not end in time.
    #[error("shutdown_timeout elapsed inside a transaction at {0}; its rows are not committed and are read again at the next start")]
    ShutdownTimeout(String),

    /// The initial snapshot of a table cannot be read (the server refused the
    /// read, the table cannot be read consistently, a value is unreadable).
    #[error("snapshot of {table}: {message}")]
    Snapshot { table: String, message: String },

    /// `sluice snapshot` refused the tables it was asked for. Definite.
    #[error("snapshot request: {0}")]
    Request(String),

    /// `sluice forget` cannot do what it was asked (bad input, or the lake
    /// changed under it too often). Definite.
    #[error("forget: {0}")]
    Forget(String),

    /// `[http] listen` cannot be served (taken, not permitted, unresolvable). Definite.
    #[error("http.listen: {0}")]
    Listen(String),

    /// The local state dir (schema history store) failed.
    #[error("state: {0}")]
    State(String),

    /// The lake holds something sluice cannot read back.
    #[error("lake: {0}")]
    Lake(String),

    /// The `[catalog]` database refused a statement, or holds a name for
    /// another table.
    #[error("catalog: {0}")]
    Catalog(String),

    /// The lake's committed files hold types this release no longer writes
    /// (the first release's unsigned integers, durations and Decimal256, and
    /// narrower integers): files written now would give the column a second
    /// type. Definite: the lake must be started anew.
    #[error("lake: it holds files of an earlier sluice in types that Delta Lake cannot hold or that this release no longer writes ({column} is {found} there, {now} now); start a new lake at another path or prefix (the old lake stays readable as Parquet)")]
    OldLakeTypes {
        column: String,
        found: String,
        now: String,
    },

    /// An object store call failed; [`crate::error::store`] says
    /// whether retrying can help and words the message.
    #[error("object store: {}", crate::error::store::explain(.0))]
    Store(#[from] object_store::Error),

    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),

    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    #[error("state dir: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Transient errors may go away by themselves: the caller retries with backoff.
    /// Everything else is definite: stop and report.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connection(_) => true,
            Error::Store(e) => crate::error::store::is_transient(e),
            _ => false,
        }
    }

    /// Whether an object the call read was not there (another writer, such
    /// as `sluice forget` or VACUUM, removed it), also when the Parquet
    /// reader met it.
    pub fn is_missing_object(&self) -> bool {
        match self {
            Error::Store(object_store::Error::NotFound { .. }) => true,
            Error::Parquet(parquet::errors::ParquetError::External(e)) => matches!(
                e.downcast_ref::<object_store::Error>(),
                Some(object_store::Error::NotFound { .. })
            ),
            _ => false,
        }
    }

    /// [`ErrorKind::Transient`] or [`ErrorKind::Definite`], for logs and metrics.
    pub fn kind(&self) -> ErrorKind {
        if self.is_transient() {
            ErrorKind::Transient
        } else {
            ErrorKind::Definite
        }
    }

    pub fn decode(file: &str, pos: u64, message: impl Into<String>) -> Self {
        Error::Decode {
            file: file.to_string(),
            pos,
            message: message.into(),
        }
    }
}

/// Whether retrying can help: every error log line and the errors metric
/// carry it as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Transient,
    Definite,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Transient => "transient",
            ErrorKind::Definite => "definite",
        }
    }
}

/// The kind of the errors that log lines carry.
pub trait HasKind {
    fn error_kind(&self) -> ErrorKind;
}

impl HasKind for Error {
    fn error_kind(&self) -> ErrorKind {
        self.kind()
    }
}

impl HasKind for object_store::Error {
    fn error_kind(&self) -> ErrorKind {
        if crate::error::store::is_transient(self) {
            ErrorKind::Transient
        } else {
            ErrorKind::Definite
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long to wait before retrying after the `failures`-th transient error
/// in a row: jittered exponential backoff, 0.5 s doubling up to 30 s, ±25 %.
pub fn backoff(failures: u32) -> Duration {
    let base = 0.5 * 2f64.powi(failures.saturating_sub(1).min(16) as i32);
    let capped = base.min(30.0);
    Duration::from_secs_f64(capped * rand::Rng::gen_range(&mut rand::thread_rng(), 0.75..1.25))
}

/// A policy that cannot apply to the column it matches. Definite: the
/// configuration or the table must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("[[columns]] entry {entry} (match '{pattern}'): {table}.{column} is part of the key of {table}, and a key column can only be hashed, not {action} (the current table is keyed by it); leave the key column out of the match or use action = \"hash\"")]
    KeyColumn {
        entry: usize,
        pattern: String,
        table: String,
        column: String,
        action: String,
    },
    #[error("[[columns]] entry {entry} (match '{pattern}'): {table}.{column} is {mysql_type}; truncate applies to text and binary columns only")]
    TruncateType {
        entry: usize,
        pattern: String,
        table: String,
        column: String,
        mysql_type: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_thirty_with_jitter() {
        for failures in 1..=40u32 {
            let base = (0.5 * 2f64.powi(failures as i32 - 1)).min(30.0);
            let delays: Vec<f64> = (0..200).map(|_| backoff(failures).as_secs_f64()).collect();
            for d in &delays {
                assert!(
                    (base * 0.75..base * 1.25).contains(d),
                    "failure {failures}: {d} s is outside {base} s ± 25 %"
                );
            }
            let (lo, hi) = delays
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
            assert!(
                hi - lo > base * 0.25,
                "failure {failures}: no jitter in {delays:?}"
            );
        }
    }

    #[test]
    fn a_missing_object_is_told_apart_also_inside_a_parquet_error() {
        let missing = || object_store::Error::NotFound {
            path: "t/a.parquet".into(),
            source: "gone".into(),
        };
        assert!(Error::Store(missing()).is_missing_object());
        let inside = parquet::errors::ParquetError::External(Box::new(missing()));
        assert!(Error::Parquet(inside).is_missing_object());
        let other = object_store::Error::Generic {
            store: "local",
            source: "disk full".into(),
        };
        assert!(!Error::Store(other).is_missing_object());
        let general = parquet::errors::ParquetError::General("bad page".into());
        assert!(!Error::Parquet(general).is_missing_object());
        assert!(!Error::Lake("not found".into()).is_missing_object());
    }
}
