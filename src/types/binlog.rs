//! Where a change is in a source's binlog: a binlog position, and which
//! server flavor (whose GTIDs and events) wrote it. The source reads them,
//! the manifests and the schema history record them.

use std::cmp::Ordering;
use std::fmt;

/// A position in the source's binlog: the file name and a byte offset in it.
/// The default (no file) is before every position.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Which server wrote the binlog (its GTIDs and some events differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Mariadb,
    Mysql,
}
