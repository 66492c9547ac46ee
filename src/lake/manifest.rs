//! The manifest (DESIGN.md "Exactly-once"): one checkpoint, committed by
//! being written put-if-absent at `_sluice/manifests/<seq>.json`, and the
//! paths of what it lists. Its JSON Schema is `schemas/manifest.schema.json`.

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::snapshot::SnapshotProgress;
use crate::types::binlog::Flavor;

pub const MANIFEST_DIR: &str = "_sluice/manifests";
/// The manifest format; 2 when it carries snapshot state. A lake with a
/// newer format is refused.
pub const FORMAT: u32 = 1;
pub const FORMAT_SNAPSHOT: u32 = 2;
/// The lake's type mapping (DESIGN.md "Types"): 2 since the lake's types are
/// Delta Lake types. The first release wrote no `types` (read as 0) and
/// unsigned integers, durations and Decimal256.
pub const TYPES: u32 = 2;
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub seq: u64,
    pub committed_at: String,
    pub writer: Writer,
    pub source: SourceIdentity,
    pub cursor: Cursor,
    pub files: Vec<DataFile>,
    pub ddl: Vec<serde_json::Value>,
    /// Cumulative committed rows per `db.table` since the lake began.
    #[serde(default)]
    pub totals: BTreeMap<String, u64>,
    /// Zero or partly-zero dates written as null since the lake began
    /// (committed rows only). Absent from manifests of earlier versions.
    #[serde(default)]
    pub zero_dates: u64,
    /// The type mapping every committed file of the lake follows
    /// ([`TYPES`]); absent (0) in manifests of the first release.
    #[serde(default)]
    pub types: u32,
    /// XA transactions prepared before the cursor whose `XA COMMIT` or
    /// `XA ROLLBACK` is after it: their rows wait in held files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xa_prepared: Vec<PreparedXa>,
    /// The initial snapshot of every table it covers (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotProgress>,
    /// Snapshot requests (`_sluice/requests/<id>.json`) adopted in this or an
    /// earlier checkpoint whose objects were not known to be deleted: never
    /// adopted again, and deleted after this commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_requests: Vec<String>,
    /// The `[filter]` the checkpoint was captured under; absent in manifests
    /// of earlier versions. A later run with a wider filter snapshots the
    /// tables it adds (`[snapshot] new_tables`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<crate::config::FilterPatterns>,
    /// `[[columns]]` policies that changed at this checkpoint's start, one
    /// `{table, column, from, to}` per column (`none` for no policy): they
    /// apply to the rows of this checkpoint on; earlier files keep theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub column_policies: Vec<serde_json::Value>,
    /// `sluice forget` runs noted in this checkpoint (their records,
    /// `_sluice/erasures/<id>.json`, written since the last one): `{id,
    /// table, keys, keys_found, key_hmacs, before_seq, finished_at}`, the
    /// keys as HMACs only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub erasures: Vec<serde_json::Value>,
    /// The newest earlier manifest with files or DDL: those between have
    /// neither, so a reader of changes skips them ([`Lake::changes_after`]).
    /// Absent in a lake's first manifest and in earlier releases'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<u64>,
}

impl Manifest {
    /// Whether it adds files or records DDL.
    pub fn has_changes(&self) -> bool {
        !self.files.is_empty() || !self.ddl.is_empty()
    }

    /// The `last_change` of the manifest after this one.
    pub fn last_change_after(&self) -> u64 {
        match self.last_change {
            Some(seq) if !self.has_changes() => seq,
            // Changes here, or an idle manifest that does not say what came
            // before it (read from it on).
            _ => self.seq,
        }
    }
}

/// A prepared XA transaction whose outcome the stream has not reached yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreparedXa {
    /// The XA id as the server writes it: `X'gtrid',X'bqual',formatID`.
    pub xid: String,
    /// The GTID of the prepared part: its rows carry it.
    pub gtid: Option<String>,
    /// The held files of its rows, under `_sluice/xa/`.
    pub files: Vec<DataFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Writer {
    pub id: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceIdentity {
    pub flavor: Flavor,
    pub server_id: u32,
    pub server_uuid: Option<String>,
    pub version: String,
}

/// Where reading resumes, and the counters that keep `_seq`/`_tx_seq` monotonic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub file: String,
    pub pos: u64,
    pub gtid: Option<String>,
    pub next_seq: i64,
    pub next_tx_seq: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataFile {
    pub table: String,
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub schema_version: u32,
}

pub fn manifest_path(seq: u64) -> Path {
    Path::from(format!("{MANIFEST_DIR}/{seq:020}.json"))
}

/// The checkpoint sequence a data file was written for, from its name
/// `part-<seq, 20 digits>-<n>-<writer>.parquet`. Other writers' files
/// (delta-rs and Spark name theirs `part-00001-<uuid>…`) are not sluice's
/// and give `None`.
pub fn file_checkpoint_seq(name: &str) -> Option<u64> {
    let seq = name.strip_prefix("part-")?.split('-').next()?;
    if seq.len() != 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seq.parse().ok()
}

/// The object path of a path this lake recorded (a manifest's file, a
/// pending or held file): already encoded by [`data_file_path`], so taken as
/// it is and never encoded a second time (a table `a/a` is in `a%2Fa`).
pub fn stored_path(path: &str) -> Path {
    Path::parse(path).unwrap_or_else(|_| Path::from(path))
}

/// The path of data file `n` of checkpoint `seq` of `db.table`.
pub fn data_file_path(db: &str, table: &str, seq: u64, n: u32, writer: &str) -> Path {
    // Path::from_iter percent-encodes characters an object key should not hold.
    Path::from_iter([
        db.to_string(),
        table.to_string(),
        format!("part-{seq:020}-{n:05}-{writer}.parquet"),
    ])
}

/// Held files of prepared XA transactions: `_sluice/xa/<checkpoint seq>-<writer>-<n>/<db>/<table>.parquet`.
pub const XA_DIR: &str = "_sluice/xa";
