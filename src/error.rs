//! One error type for the library. Every variant says whether retrying can help
//! ([`Error::is_transient`]) and carries what the operator needs to act on it.

use std::path::PathBuf;

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

    /// The local state dir (schema history store) failed.
    #[error("state: {0}")]
    State(String),

    /// The lake holds something sluice cannot read back.
    #[error("lake: {0}")]
    Lake(String),

    /// An object store call failed.
    #[error("object store: {0}")]
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
        matches!(self, Error::Connection(_) | Error::Store(_))
    }

    pub fn decode(file: &str, pos: u64, message: impl Into<String>) -> Self {
        Error::Decode {
            file: file.to_string(),
            pos,
            message: message.into(),
        }
    }
}
