//! The initial snapshot (DESIGN.md, "Initial snapshot"): every captured table
//! read in chunks along a unique key, each chunk in its own consistent read
//! whose binlog position the server names, and placed in the stream at that
//! position, so that replay by `_seq` equals the source without a lock, a
//! pause of the stream or a merge buffer.
//!
//! The reader (`reader`) runs beside the stream on a connection of its own and
//! talks to the pipeline through [`Message`]s:
//!
//! 1. it opens a consistent read and *announces* the chunk with the read's
//!    position; the pipeline accepts it when its stream has not passed that
//!    position yet (else the reader opens a new read: the position is too old);
//! 2. it reads at most `chunk_rows` rows after the last key and sends them;
//! 3. the pipeline gives the chunk its `_seq` values when the stream reaches
//!    the position: after every transaction that ends at or before it, before
//!    every later one. When the stream gets there before the rows do, the
//!    chunk's `_seq` range is reserved and filled when they arrive.
//!
//! Where the server cannot name a consistent read's position (MySQL 8), a
//! chunk is read in a *watermark window* instead: the reader announces the
//! binlog head before its read and sends the head after it with the rows.
//! The window opens at the announced head, or where the stream is when it
//! has passed that head already (the read waits for the window to open, so
//! any earlier position would do). From the opening position on, the
//! pipeline notes the key of every row of
//! the table that the stream changes; the chunk is placed once the stream
//! has passed the closing position, without the rows whose key changed in
//! between: the stream carries their newer state. A keyless table cannot be
//! read this way.
//!
//! The state of every table's snapshot (rows, last key) commits with the
//! manifest, so a restart resumes after the last committed chunk.

pub mod progress;
pub mod reader;
pub mod request;
pub mod values;

use std::sync::Arc;

use arrow::array::ArrayRef;
use tokio::sync::oneshot;

pub use crate::lake::snapshot::{
    KeyOrder, KeyValue, SnapshotProgress, SnapshotState, TableSnapshot,
};
use crate::schema::TableSchema;
use crate::source::BinlogPosition;

impl KeyValue {
    pub fn from_value(v: &mysql_async::Value) -> Option<KeyValue> {
        use mysql_async::Value as V;
        Some(match v {
            V::NULL => return None,
            V::Bytes(b) => KeyValue::Hex(hex(b)),
            V::Int(i) => KeyValue::Int(*i),
            V::UInt(u) => KeyValue::Uint(*u),
            V::Float(f) => KeyValue::Float(*f),
            V::Double(d) => KeyValue::Double(*d),
            V::Date(y, mo, d, h, mi, s, us) => KeyValue::Date(*y, *mo, *d, *h, *mi, *s, *us),
            V::Time(neg, d, h, mi, s, us) => KeyValue::Time(*neg, *d, *h, *mi, *s, *us),
        })
    }

    pub fn to_value(&self) -> Result<mysql_async::Value, String> {
        use mysql_async::Value as V;
        Ok(match self {
            KeyValue::Int(i) => V::Int(*i),
            KeyValue::Uint(u) => V::UInt(*u),
            KeyValue::Float(f) => V::Float(*f),
            KeyValue::Double(d) => V::Double(*d),
            KeyValue::Hex(h) => V::Bytes(unhex(h)?),
            KeyValue::Date(y, mo, d, h, mi, s, us) => V::Date(*y, *mo, *d, *h, *mi, *s, *us),
            KeyValue::Time(neg, d, h, mi, s, us) => V::Time(*neg, *d, *h, *mi, *s, *us),
        })
    }
}

impl KeyValue {
    /// The value as a statement parameter: bytes as their hex text, for
    /// `UNHEX(?)` (see the chunk query).
    pub fn to_param(&self) -> mysql_async::Value {
        match self {
            KeyValue::Hex(h) => mysql_async::Value::Bytes(h.as_bytes().to_vec()),
            other => other.to_value().unwrap_or(mysql_async::Value::NULL),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err(format!("`{text}` is not hex"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("`{text}` is not hex"))
        })
        .collect()
}

/// Names one chunk between the reader and the pipeline.
pub type ChunkId = u64;

/// What the reader tells the pipeline.
pub enum Message {
    /// A consistent read of `table` is open at `at`. The pipeline answers
    /// whether the chunk can still be placed there. A keyless table's one
    /// read is answered only when the stream reaches `at`: its rows are then
    /// taken in as they come, like a huge transaction.
    Announce {
        chunk: ChunkId,
        table: String,
        at: BinlogPosition,
        keyless: bool,
        /// Where the reader read the table's key together with the other
        /// tables' (the binlog head before it), if it did: a table the
        /// stream saw changed at or after it gets [`Reply::KeyChanged`].
        key_read_at: Option<BinlogPosition>,
        /// The key columns of a chunk read in a watermark window that opens
        /// at `at` (no consistent read): the pipeline notes the keys of the
        /// table's rows that change from `at` until it places the chunk.
        window: Option<Vec<String>>,
        reply: oneshot::Sender<Reply>,
    },
    /// The rows of an accepted chunk (a keyless read sends several parts,
    /// the last with `last_part`).
    Rows(ChunkRows),
    /// The read of an accepted chunk must be repeated (the table changed
    /// shape under it): its reservation, if any, stays empty.
    Abandoned { chunk: ChunkId },
    /// The table is gone from the server: its snapshot ends without a
    /// further chunk once the stream has read to `at` (the binlog's end
    /// when the read failed, past the statement that took the table)
    /// without that statement renaming it.
    Gone { table: String, at: BinlogPosition },
    /// Every table is done: the reader has ended.
    Finished,
    /// The reader failed; the pipeline stops with this error (or retries
    /// from the last checkpoint when it is transient).
    Failed(crate::Error),
}

pub enum Reply {
    /// Read the chunk in this shape (the table's shape at the position).
    Accept { shape: Arc<TableSchema> },
    /// The stream has passed the position: open a new read.
    TooLate,
    /// The table is no longer captured (dropped, or renamed away).
    Skip,
    /// A DDL changed the table after `key_read_at`: read its key again,
    /// then open a new read.
    KeyChanged,
}

/// The rows of one chunk: the table's columns in the accepted shape.
pub struct ChunkRows {
    pub chunk: ChunkId,
    pub table: String,
    pub columns: Vec<ArrayRef>,
    pub rows: usize,
    /// The key of the last row (the next chunk's lower bound).
    pub last_key: Option<Vec<KeyValue>>,
    /// The key `last_key` is a key of.
    pub key: Option<Vec<KeyOrder>>,
    /// The table's snapshot is complete with this chunk.
    pub last_chunk: bool,
    /// A keyless read sends its rows in parts; this is the last one.
    pub last_part: bool,
    /// Zero dates read as null.
    pub zero_dates: u64,
    /// When the read began (the rows' `_ts`), ms since the epoch.
    pub read_at_ms: i64,
    /// Bytes the columns hold.
    pub bytes: usize,
    /// Where the watermark window of the chunk closed.
    pub window_end: Option<WindowEnd>,
}

/// The end of a chunk's watermark window.
pub struct WindowEnd {
    /// The binlog head after the read: the chunk is placed at or after it,
    /// without the rows whose key changed since the window opened.
    pub until: BinlogPosition,
    /// `true` once placed; `false` when the table changed shape inside the
    /// window, and the chunk must be read again.
    pub placed: oneshot::Sender<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_eta_follow_the_rows_read() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:10Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut t = TableSnapshot::new(1000);
        assert_eq!(t.rate_and_eta(now), (None, None));
        t.started_at = Some("2026-01-01T00:00:00Z".into());
        t.rows = 250;
        assert_eq!(t.rate_and_eta(now), (Some(25.0), Some(30.0)));
        t.state = SnapshotState::Done;
        t.done_at = Some("2026-01-01T00:00:05Z".into());
        assert_eq!(t.rate_and_eta(now), (Some(50.0), None));
    }

    #[test]
    fn key_values_survive_the_manifest() {
        let key = vec![
            KeyValue::Hex(hex(&[0x41, 0xE9, 0x00])),
            KeyValue::Int(-5),
            KeyValue::Uint(u64::MAX),
            KeyValue::Date(2024, 2, 29, 23, 59, 59, 999_999),
            KeyValue::Time(true, 34, 22, 59, 59, 500_000),
            KeyValue::Double(-0.5),
        ];
        let json = serde_json::to_string(&key).unwrap();
        let back: Vec<KeyValue> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, key);
        for k in &key {
            let v = k.to_value().unwrap();
            assert_eq!(KeyValue::from_value(&v).as_ref(), Some(k));
        }
        assert!(KeyValue::Hex("4".into()).to_value().is_err());
        assert!(KeyValue::Hex("zz".into()).to_value().is_err());
    }
}
