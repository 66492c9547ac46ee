//! The state of each table's snapshot as the manifests record it: a
//! restart resumes after the last committed chunk. The reader
//! (`crate::snapshot`) reads and advances it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One table's snapshot, as each manifest records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSnapshot {
    pub state: SnapshotState,
    /// Rows read into the lake so far.
    pub rows: u64,
    pub chunks: u64,
    /// The key of the last row read: the next chunk starts after it. `None`
    /// before the first chunk.
    pub last_key: Option<Vec<KeyValue>>,
    /// `information_schema.TABLES.TABLE_ROWS` when the snapshot began (InnoDB's
    /// estimate).
    pub estimated_rows: u64,
    pub started_at: Option<String>,
    pub done_at: Option<String>,
    /// The `sluice snapshot` request that started this read of the table
    /// (`None` for the initial snapshot and a widened filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// A re-read that waits for the stream: when it was asked for, the
    /// server had no table of this name any more (a later RENAME or DROP,
    /// not yet streamed, took it away). Nothing reads it; the stream's
    /// RENAME of it moves the re-read to the new name, its DROP ends it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting: bool,
    /// The key `last_key` is a key of, as the reader orders by it: a
    /// snapshot resumed after a stop whose key changed meanwhile (another
    /// column, type class or collation) starts the table over instead of
    /// binding the old key's values to the new key. Absent in manifests of
    /// earlier releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Vec<KeyOrder>>,
}

/// A key column as the snapshot reader orders rows by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyOrder {
    pub name: String,
    /// `number` (integers, ENUM, SET, BIT), `<charset>/<collation>` for
    /// text, `value` otherwise: two keys order alike when these agree.
    pub order: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotState {
    Running,
    Done,
}

impl TableSnapshot {
    pub fn new(estimated_rows: u64) -> Self {
        TableSnapshot {
            state: SnapshotState::Running,
            rows: 0,
            chunks: 0,
            last_key: None,
            estimated_rows,
            started_at: None,
            done_at: None,
            request: None,
            awaiting: false,
            key: None,
        }
    }

    /// A re-read waiting for the stream to name its table (see `awaiting`).
    pub fn awaiting() -> Self {
        TableSnapshot {
            awaiting: true,
            ..TableSnapshot::new(0)
        }
    }

    pub fn done(&self) -> bool {
        self.state == SnapshotState::Done
    }

    /// A reader has rows of it to read.
    pub fn to_read(&self) -> bool {
        !self.done() && !self.awaiting
    }
}

impl TableSnapshot {
    /// Rows per second since the table's first chunk, and the seconds left
    /// at that rate to the estimate (`None` when not known or done).
    pub fn rate_and_eta(&self, now: chrono::DateTime<chrono::Utc>) -> (Option<f64>, Option<f64>) {
        let started = self
            .started_at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let until = match self.done_at.as_deref() {
            Some(t) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap_or(now),
            None => now,
        };
        let Some(started) = started else {
            return (None, None);
        };
        let secs = (until - started.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0;
        if secs <= 0.0 || self.rows == 0 {
            return (None, None);
        }
        let rate = self.rows as f64 / secs;
        let eta =
            (!self.done()).then(|| self.estimated_rows.saturating_sub(self.rows) as f64 / rate);
        (Some(rate), eta)
    }
}

/// Every table's snapshot, by `db.table`.
pub type SnapshotProgress = BTreeMap<String, TableSnapshot>;

/// One key column's value, exactly as the server returned it, so that it can
/// be bound again as the next chunk's lower bound (text keys as their bytes
/// in the column's charset: the server compares them in the column's
/// collation, never sluice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyValue {
    Int(i64),
    Uint(u64),
    Float(f32),
    Double(f64),
    /// Bytes as lowercase hex (strings in their column's charset, binary
    /// strings, and DECIMAL as its text).
    Hex(String),
    /// DATE, DATETIME, TIMESTAMP: year, month, day, hour, minute, second, µs.
    Date(u16, u8, u8, u8, u8, u8, u32),
    /// TIME: negative, days, hours, minutes, seconds, µs.
    Time(bool, u32, u8, u8, u8, u32),
}
