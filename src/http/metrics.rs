//! What `/metrics`, `/healthz`, `/readyz` and the status page report, and the
//! handle the event loop updates. The loop calls it per checkpoint, per
//! flushed batch, per reconnect and once a tick — never per row: every call
//! is a few atomic stores, or a short lock once per checkpoint.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int8Type;
use arrow::record_batch::RecordBatch;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::batch::RowOp;
use crate::commit::{Cursor, Manifest};
use crate::error::Error;
use crate::snapshot::SnapshotState;
use crate::source::BinlogPosition;
use crate::table::DeltaLag;

/// The `_op` values, in the order of [`OpCounts`].
pub const OPS: [RowOp; 5] = [
    RowOp::Insert,
    RowOp::Update,
    RowOp::Delete,
    RowOp::Truncate,
    RowOp::Snapshot,
];

/// Rows of one file (or table) by `_op`, in the order of [`OPS`].
pub type OpCounts = [u64; 5];

/// Counts a batch's rows by `_op`: one pass over the dictionary keys of the
/// `_op` column, done once per written file.
pub fn op_counts(batch: &RecordBatch) -> OpCounts {
    let mut counts = OpCounts::default();
    let Some(col) = batch.column_by_name("_op") else {
        return counts;
    };
    let Some(dict) = col.as_dictionary_opt::<Int8Type>() else {
        return counts;
    };
    let Some(values) = dict.values().as_string_opt::<i32>() else {
        return counts;
    };
    // Dictionary key → index into OPS.
    let slot: Vec<Option<usize>> = (0..values.len())
        .map(|i| OPS.iter().position(|op| op.as_str() == values.value(i)))
        .collect();
    let mut by_key = vec![0u64; slot.len()];
    for key in dict.keys().values().iter() {
        if let Some(n) = by_key.get_mut(*key as usize) {
            *n += 1;
        }
    }
    for (key, n) in by_key.into_iter().enumerate() {
        if let Some(Some(i)) = slot.get(key) {
            counts[*i] += n;
        }
    }
    counts
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableOpLabels {
    table: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum ErrorKind {
    transient,
    definite,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: ErrorKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SnapshotStateLabels {
    table: String,
    state: String,
}

/// One point of the status page's chart.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Unix seconds.
    pub at: i64,
    /// `None` while the lag is unknown.
    pub lag_seconds: Option<f64>,
    /// Rows committed per second since the previous sample.
    pub rows_per_second: f64,
}

/// A table's line on the status page.
#[derive(Debug, Clone, Default)]
pub struct TableView {
    /// Rows committed by this process, by `_op` (order of [`OPS`]).
    pub rows_by_op: OpCounts,
    pub bytes: u64,
    /// Rows of the table in the lake (the manifest's totals).
    pub lake_rows: u64,
}

#[derive(Debug, Clone)]
pub struct SnapshotView {
    pub done: bool,
    pub rows: u64,
    pub estimated_rows: u64,
}

#[derive(Debug, Clone)]
pub struct ErrorView {
    /// RFC 3339.
    pub at: String,
    pub kind: &'static str,
    pub message: String,
}

/// What the status page shows beside the gauges, kept per checkpoint.
#[derive(Debug, Default)]
pub struct PageState {
    pub tables: BTreeMap<String, TableView>,
    pub snapshot: BTreeMap<String, SnapshotView>,
    /// Current-state table → (fold lag in seconds, when it was set, RFC 3339).
    pub current: BTreeMap<String, (f64, String)>,
    /// Tables whose Delta log lags their manifests, by `db.table`.
    pub delta_lag: BTreeMap<String, DeltaLag>,
    pub last_error: Option<ErrorView>,
    pub manifest_seq: Option<u64>,
    pub committed_at: Option<String>,
    /// The cursor of the newest committed manifest (or where the run started).
    pub committed: Option<BinlogPosition>,
    pub lag_bytes: Option<u64>,
    /// The last hour, oldest first.
    pub history: VecDeque<Sample>,
    rows_at_last_sample: u64,
}

/// How often the chart gets a point, and how many it keeps (one hour).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
const SAMPLES: usize = 360;

/// The metrics registry and the state behind the health endpoints.
pub struct Metrics {
    registry: Registry,
    started: Instant,
    /// Milliseconds after `started` when the event loop last made progress.
    progress_ms: AtomicU64,
    connected: AtomicBool,
    /// A heartbeat arrived after the last event and nothing read was
    /// uncommitted: the lake holds everything the server has.
    idle: AtomicBool,
    /// Source commit time (unix seconds) of the newest committed
    /// transaction; 0 while unknown.
    committed_source_ts: AtomicU64,
    snapshot_running: AtomicBool,
    rows_committed: AtomicU64,

    lag_seconds: Gauge<f64, AtomicU64>,
    lag_bytes: Gauge,
    rows: Family<TableOpLabels, Counter>,
    bytes: Family<TableLabel, Counter>,
    lake_rows: Family<TableLabel, Gauge>,
    checkpoint_seconds: Histogram,
    manifest_seq: Gauge,
    buffer_bytes: Gauge,
    snapshot_rows: Family<TableLabel, Gauge>,
    snapshot_estimated_rows: Family<TableLabel, Gauge>,
    snapshot_state: Family<SnapshotStateLabels, Gauge>,
    fold_lag: Family<TableLabel, Gauge<f64, AtomicU64>>,
    delta_lag: Family<TableLabel, Gauge>,
    compaction_removed: Family<TableLabel, Counter>,
    compaction_added: Family<TableLabel, Counter>,
    compaction_bytes: Family<TableLabel, Counter>,
    live_files: Family<TableLabel, Gauge>,
    manifests_deleted: Counter,
    manifest_floor: Gauge,
    reconnects: Counter,
    errors: Family<KindLabel, Counter>,
    zero_dates: Counter,
    connected_gauge: Gauge,

    page: Mutex<PageState>,
}

impl Metrics {
    pub fn new(max_buffer_bytes: usize) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("sluice");
        let lag_seconds = Gauge::<f64, AtomicU64>::default();
        lag_seconds.set(f64::NAN);
        registry.register_with_unit(
            "lag",
            "Seconds between now and the source commit time of the newest transaction in the lake; 0 when the lake holds everything the server has (idle stream); NaN while unknown",
            Unit::Seconds,
            lag_seconds.clone(),
        );
        let lag_bytes = Gauge::default();
        lag_bytes.set(-1);
        registry.register_with_unit(
            "lag",
            "Binlog bytes between the newest committed cursor and the server's binlog head (polled every 5 s); -1 while unknown",
            Unit::Bytes,
            lag_bytes.clone(),
        );
        let rows = Family::<TableOpLabels, Counter>::default();
        registry.register(
            "committed_rows",
            "Rows committed to the lake by this process, per captured table and _op",
            rows.clone(),
        );
        let bytes = Family::<TableLabel, Counter>::default();
        registry.register_with_unit(
            "committed",
            "Parquet bytes committed to the lake by this process, per captured table",
            Unit::Bytes,
            bytes.clone(),
        );
        let lake_rows = Family::<TableLabel, Gauge>::default();
        registry.register(
            "lake_rows",
            "Rows of each captured table in the lake, all writers and runs (the newest manifest's totals)",
            lake_rows.clone(),
        );
        let checkpoint_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 15));
        registry.register_with_unit(
            "checkpoint_duration",
            "Time from the start of a checkpoint (writing the open buffers) to its manifest being committed",
            Unit::Seconds,
            checkpoint_seconds.clone(),
        );
        let manifest_seq = Gauge::default();
        registry.register(
            "manifest_seq",
            "Sequence number of the newest committed manifest",
            manifest_seq.clone(),
        );
        let buffer_bytes = Gauge::default();
        registry.register_with_unit(
            "buffer",
            "Estimated memory of the table buffers, open and being encoded or uploaded",
            Unit::Bytes,
            buffer_bytes.clone(),
        );
        let max_buffer = Gauge::<i64>::default();
        max_buffer.set(max_buffer_bytes as i64);
        registry.register_with_unit(
            "max_buffer",
            "The configured bound of the buffers' memory ([flush] max_buffer_bytes)",
            Unit::Bytes,
            max_buffer,
        );
        let snapshot_rows = Family::<TableLabel, Gauge>::default();
        registry.register(
            "snapshot_rows",
            "Rows the initial snapshot of each table has committed",
            snapshot_rows.clone(),
        );
        let snapshot_estimated_rows = Family::<TableLabel, Gauge>::default();
        registry.register(
            "snapshot_estimated_rows",
            "The server's row estimate of each snapshotted table when its snapshot began",
            snapshot_estimated_rows.clone(),
        );
        let snapshot_state = Family::<SnapshotStateLabels, Gauge>::default();
        registry.register(
            "snapshot_state",
            "1 for the snapshot state (running or done) each snapshotted table is in, else 0",
            snapshot_state.clone(),
        );
        let fold_lag = Family::<TableLabel, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "current_fold_lag",
            "Seconds the current-state table lags behind the changelog it is folded from",
            Unit::Seconds,
            fold_lag.clone(),
        );
        let delta_lag = Family::<TableLabel, Gauge>::default();
        registry.register(
            "delta_lag_manifests",
            "Manifests with files of the table whose Delta commit is missing from its changelog table's log (0: the log follows the manifests)",
            delta_lag.clone(),
        );
        let compaction_removed = Family::<TableLabel, Counter>::default();
        registry.register(
            "compaction_removed_files",
            "Small files removed from each changelog table's Delta log by compaction, in this process (they stay in the store)",
            compaction_removed.clone(),
        );
        let compaction_added = Family::<TableLabel, Counter>::default();
        registry.register(
            "compaction_added_files",
            "Files written by compaction into each changelog table, in this process",
            compaction_added.clone(),
        );
        let compaction_bytes = Family::<TableLabel, Counter>::default();
        registry.register_with_unit(
            "compaction_written",
            "Parquet bytes written by compaction into each changelog table, in this process",
            Unit::Bytes,
            compaction_bytes.clone(),
        );
        let live_files = Family::<TableLabel, Gauge>::default();
        registry.register(
            "changelog_live_files",
            "Live files of each changelog table's Delta table, as its last compaction round saw them",
            live_files.clone(),
        );
        let manifests_deleted = Counter::default();
        registry.register(
            "retention_manifests_deleted",
            "Manifests older than [retention] manifests deleted, in this process",
            manifests_deleted.clone(),
        );
        let manifest_floor = Gauge::default();
        registry.register(
            "retention_manifest_floor",
            "The oldest manifest seq retention keeps (every one below it is deleted)",
            manifest_floor.clone(),
        );
        let reconnects = Counter::default();
        registry.register(
            "reconnects",
            "Reconnections to the source after a transient error",
            reconnects.clone(),
        );
        let errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "errors",
            "Errors by kind: transient (retried) or definite (sluice stops)",
            errors.clone(),
        );
        let zero_dates = Counter::default();
        registry.register(
            "zero_dates",
            "Zero or partly-zero dates written as null, in rows committed by this process",
            zero_dates.clone(),
        );
        let connected_gauge = Gauge::default();
        registry.register(
            "connected",
            "1 while the binlog stream is connected and delivering events",
            connected_gauge.clone(),
        );
        registry.register(
            "build",
            "The sluice version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Arc::new(Metrics {
            registry,
            started: Instant::now(),
            progress_ms: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            committed_source_ts: AtomicU64::new(0),
            snapshot_running: AtomicBool::new(false),
            rows_committed: AtomicU64::new(0),
            lag_seconds,
            lag_bytes,
            rows,
            bytes,
            lake_rows,
            checkpoint_seconds,
            manifest_seq,
            buffer_bytes,
            snapshot_rows,
            snapshot_estimated_rows,
            snapshot_state,
            fold_lag,
            delta_lag,
            compaction_removed,
            compaction_added,
            compaction_bytes,
            live_files,
            manifests_deleted,
            manifest_floor,
            reconnects,
            errors,
            zero_dates,
            connected_gauge,
            page: Mutex::new(PageState::default()),
        })
    }

    fn page(&self) -> MutexGuard<'_, PageState> {
        // A panic while holding the lock leaves plain data behind: use it.
        self.page.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The event loop is alive: called every tick, after each checkpoint
    /// and at each reconnect attempt.
    pub fn progress(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.progress_ms.store(ms, Ordering::Relaxed);
    }

    pub fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
        self.connected_gauge.set(connected as i64);
        if !connected {
            self.idle.store(false, Ordering::Relaxed);
        }
    }

    /// A heartbeat (`true`, when everything read is committed) or an event
    /// after one (`false`).
    pub fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::Relaxed);
    }

    pub fn set_snapshot_running(&self, running: bool) {
        self.snapshot_running.store(running, Ordering::Relaxed);
    }

    pub fn set_buffer_bytes(&self, bytes: usize) {
        self.buffer_bytes.set(bytes as i64);
    }

    /// Where the lake's cursor is before this run's first commit.
    pub fn set_committed_position(&self, cursor: &Cursor) {
        self.page().committed = Some(BinlogPosition {
            file: cursor.file.clone(),
            pos: cursor.pos,
        });
    }

    pub fn reconnect(&self) {
        self.reconnects.inc();
        self.progress();
    }

    /// Counts an error by its kind and keeps it as the last error.
    pub fn error(&self, e: &Error) {
        let kind = e.kind();
        self.errors
            .get_or_create(&KindLabel {
                kind: match kind {
                    crate::error::ErrorKind::Transient => ErrorKind::transient,
                    crate::error::ErrorKind::Definite => ErrorKind::definite,
                },
            })
            .inc();
        self.page().last_error = Some(ErrorView {
            at: now_rfc3339(),
            kind: kind.as_str(),
            message: e.to_string(),
        });
    }

    /// The fold of a current-state table reflects the changelog up to
    /// `lag_seconds` ago.
    pub fn set_current_fold_lag(&self, table: &str, lag_seconds: f64) {
        self.fold_lag
            .get_or_create(&TableLabel {
                table: table.to_string(),
            })
            .set(lag_seconds);
        self.page()
            .current
            .insert(table.to_string(), (lag_seconds, now_rfc3339()));
    }

    /// A retention round deleted `deleted` manifests, keeping those from
    /// `floor` on.
    pub fn retained(&self, deleted: u64, floor: u64) {
        self.manifests_deleted.inc_by(deleted);
        self.manifest_floor.set(floor as i64);
    }

    /// A compaction round went through the changelog table `table`.
    pub fn compacted(&self, table: &str, r: &crate::table::compaction::CompactionReport) {
        let label = TableLabel {
            table: table.to_string(),
        };
        self.compaction_removed
            .get_or_create(&label)
            .inc_by(r.files_removed as u64);
        self.compaction_added
            .get_or_create(&label)
            .inc_by(r.files_added as u64);
        self.compaction_bytes
            .get_or_create(&label)
            .inc_by(r.bytes_added);
        self.live_files
            .get_or_create(&label)
            .set(r.live_files as i64);
    }

    /// The tables whose Delta log lags, after the Delta commits of a
    /// manifest (a table no longer listed has caught up: its gauge is 0).
    pub fn set_delta_lags(&self, lags: &[DeltaLag]) {
        let mut page = self.page();
        for table in page.delta_lag.keys() {
            if !lags.iter().any(|l| &l.table == table) {
                self.delta_lag
                    .get_or_create(&TableLabel {
                        table: table.clone(),
                    })
                    .set(0);
            }
        }
        page.delta_lag.clear();
        for l in lags {
            self.delta_lag
                .get_or_create(&TableLabel {
                    table: l.table.clone(),
                })
                .set(l.manifests as i64);
            page.delta_lag.insert(l.table.clone(), l.clone());
        }
    }

    /// A manifest committed. `file_ops` holds the `_op` counts of the files
    /// written since the last checkpoint, by path (taken and cleared here);
    /// `source_ts` is the source commit time of the transaction at the
    /// cursor; `zero_dates` how many zero dates its rows turned into null.
    pub fn checkpoint_committed(
        &self,
        m: &Manifest,
        file_ops: &mut HashMap<String, OpCounts>,
        source_ts: u32,
        took: Duration,
        zero_dates: u64,
    ) {
        self.checkpoint_seconds.observe(took.as_secs_f64());
        self.manifest_seq.set(m.seq as i64);
        if source_ts > 0 {
            self.committed_source_ts
                .store(source_ts as u64, Ordering::Relaxed);
        }
        self.zero_dates.inc_by(zero_dates);
        let mut page = self.page();
        let mut added = 0;
        for f in &m.files {
            // Every data file is counted when written (`op_counts`); a
            // file that was not still counts in bytes and the lake's rows.
            let ops = file_ops.remove(&f.path).unwrap_or_default();
            let view = page.tables.entry(f.table.clone()).or_default();
            for (i, n) in ops.iter().enumerate().filter(|(_, n)| **n > 0) {
                self.rows
                    .get_or_create(&TableOpLabels {
                        table: f.table.clone(),
                        op: OPS[i].as_str().to_string(),
                    })
                    .inc_by(*n);
                view.rows_by_op[i] += n;
            }
            self.bytes
                .get_or_create(&TableLabel {
                    table: f.table.clone(),
                })
                .inc_by(f.bytes);
            view.bytes += f.bytes;
            added += f.rows;
        }
        file_ops.clear();
        self.rows_committed.fetch_add(added, Ordering::Relaxed);
        for (table, rows) in &m.totals {
            self.lake_rows
                .get_or_create(&TableLabel {
                    table: table.clone(),
                })
                .set(*rows as i64);
            page.tables.entry(table.clone()).or_default().lake_rows = *rows;
        }
        let mut running = false;
        for (table, t) in m.snapshot.iter().flatten() {
            let label = TableLabel {
                table: table.clone(),
            };
            self.snapshot_rows.get_or_create(&label).set(t.rows as i64);
            self.snapshot_estimated_rows
                .get_or_create(&label)
                .set(t.estimated_rows as i64);
            let done = t.state == SnapshotState::Done;
            running |= !done;
            for (state, on) in [("running", !done), ("done", done)] {
                self.snapshot_state
                    .get_or_create(&SnapshotStateLabels {
                        table: table.clone(),
                        state: state.to_string(),
                    })
                    .set(on as i64);
            }
            page.snapshot.insert(
                table.clone(),
                SnapshotView {
                    done,
                    rows: t.rows,
                    estimated_rows: t.estimated_rows,
                },
            );
        }
        self.snapshot_running.store(running, Ordering::Relaxed);
        page.manifest_seq = Some(m.seq);
        page.committed_at = Some(m.committed_at.clone());
        page.committed = Some(BinlogPosition {
            file: m.cursor.file.clone(),
            pos: m.cursor.pos,
        });
        drop(page);
        self.progress();
    }

    /// The newest committed cursor, for the lag-in-bytes poller.
    pub fn committed_position(&self) -> Option<BinlogPosition> {
        self.page().committed.clone()
    }

    pub fn set_lag_bytes(&self, bytes: Option<u64>) {
        self.lag_bytes.set(bytes.map_or(-1, |b| b as i64));
        self.page().lag_bytes = bytes;
    }

    /// The lag in seconds now: 0 when idle at the head, `None` while unknown.
    pub fn lag_seconds(&self) -> Option<f64> {
        if self.idle.load(Ordering::Relaxed) && self.connected.load(Ordering::Relaxed) {
            return Some(0.0);
        }
        match self.committed_source_ts.load(Ordering::Relaxed) {
            0 => None,
            ts => {
                let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
                Some((now - ts as f64).max(0.0))
            }
        }
    }

    /// `/healthz`: the event loop made progress within `stall_timeout`.
    pub fn healthy(&self, stall_timeout: Duration) -> Result<(), String> {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.progress_ms.load(Ordering::Relaxed);
        let stalled = Duration::from_millis(now.saturating_sub(last));
        if stalled > stall_timeout {
            return Err(format!(
                "the event loop has made no progress for {:.0} s (http.stall_timeout is {:.0} s)",
                stalled.as_secs_f64(),
                stall_timeout.as_secs_f64()
            ));
        }
        Ok(())
    }

    /// `/readyz`: connected, within `max_lag` (or snapshotting), and no
    /// table's Delta log behind its manifests for longer than `max_lag`.
    pub fn ready(&self, max_lag: Duration) -> Result<(), String> {
        if !self.connected.load(Ordering::Relaxed) {
            return Err("not connected to the source".into());
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        if let Some(l) = self
            .page()
            .delta_lag
            .values()
            .find(|l| l.seconds(now_ms) as f64 > max_lag.as_secs_f64())
        {
            return Err(format!(
                "the Delta log of {} lacks {} manifests, the oldest {} s old, above http.ready_max_lag ({:.0} s)",
                l.table,
                l.manifests,
                l.seconds(now_ms),
                max_lag.as_secs_f64()
            ));
        }
        if self.snapshot_running.load(Ordering::Relaxed) {
            return Ok(());
        }
        match self.lag_seconds() {
            None => Err("lag unknown: nothing committed yet by this run".into()),
            Some(lag) if lag > max_lag.as_secs_f64() => Err(format!(
                "lag {lag:.0} s is above http.ready_max_lag ({:.0} s)",
                max_lag.as_secs_f64()
            )),
            Some(_) => Ok(()),
        }
    }

    /// The Prometheus text exposition, with the lag computed now.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.lag_seconds.set(self.lag_seconds().unwrap_or(f64::NAN));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// Adds a point to the chart's history (every [`SAMPLE_EVERY`]).
    pub fn sample(&self) {
        let lag = self.lag_seconds();
        let rows = self.rows_committed.load(Ordering::Relaxed);
        let mut page = self.page();
        let at = chrono::Utc::now().timestamp();
        let rate = match page.history.back() {
            Some(prev) if at > prev.at => {
                rows.saturating_sub(page.rows_at_last_sample) as f64 / (at - prev.at) as f64
            }
            _ => 0.0,
        };
        page.rows_at_last_sample = rows;
        page.history.push_back(Sample {
            at,
            lag_seconds: lag,
            rows_per_second: rate,
        });
        while page.history.len() > SAMPLES {
            page.history.pop_front();
        }
    }

    /// Runs `f` on the page state (the status page renders from it).
    pub fn with_page<T>(&self, f: impl FnOnce(&PageState) -> T) -> T {
        f(&self.page())
    }

    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, Int8Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn op_batch(keys: Vec<i8>, values: Vec<&str>) -> RecordBatch {
        let dict = DictionaryArray::<Int8Type>::try_new(
            Int8Array::from(keys),
            Arc::new(StringArray::from(values)),
        )
        .unwrap();
        let schema = Schema::new(vec![Field::new(
            "_op",
            DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
            false,
        )]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(dict)]).unwrap()
    }

    #[test]
    fn op_counts_follow_the_dictionary() {
        let b = op_batch(vec![1, 0, 0, 2, 1, 0], vec!["update", "insert", "snapshot"]);
        assert_eq!(op_counts(&b), [2, 3, 0, 0, 1]);
    }

    #[test]
    fn exposition_has_units_help_and_build_info() {
        let m = Metrics::new(96 << 20);
        let text = m.encode().unwrap();
        for needle in [
            "# HELP sluice_lag_seconds ",
            "# UNIT sluice_lag_seconds seconds",
            "sluice_lag_seconds NaN",
            "# TYPE sluice_lag_bytes gauge",
            "sluice_max_buffer_bytes 100663296",
            "sluice_build_info{version=\"",
            "# TYPE sluice_checkpoint_duration_seconds histogram",
            "# TYPE sluice_reconnects counter",
        ] {
            assert!(text.contains(needle), "no `{needle}` in\n{text}");
        }
    }

    #[test]
    fn health_fails_when_the_loop_stalls() {
        let m = Metrics::new(1 << 20);
        m.progress();
        assert!(m.healthy(Duration::from_millis(200)).is_ok());
        std::thread::sleep(Duration::from_millis(300));
        let e = m.healthy(Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("no progress"), "{e}");
        m.progress();
        assert!(m.healthy(Duration::from_millis(200)).is_ok());
    }

    #[test]
    fn ready_needs_a_connection_and_a_small_lag() {
        let m = Metrics::new(1 << 20);
        let max = Duration::from_secs(60);
        assert!(m.ready(max).unwrap_err().contains("not connected"));
        m.set_connected(true);
        assert!(m.ready(max).unwrap_err().contains("lag unknown"));
        let old = (chrono::Utc::now().timestamp() - 3600) as u64;
        m.committed_source_ts.store(old, Ordering::Relaxed);
        assert!(m
            .ready(max)
            .unwrap_err()
            .contains("above http.ready_max_lag"));
        m.set_snapshot_running(true);
        assert!(m.ready(max).is_ok());
        m.set_snapshot_running(false);
        m.set_idle(true);
        assert_eq!(m.lag_seconds(), Some(0.0));
        assert!(m.ready(max).is_ok());
        m.set_connected(false);
        assert!(m.ready(max).is_err());
    }

    #[test]
    fn a_lagging_delta_log_shows_and_fails_ready_past_the_max_lag() {
        let m = Metrics::new(1 << 20);
        m.set_connected(true);
        m.set_idle(true);
        let max = Duration::from_secs(60);
        let lag = |secs: i64| DeltaLag {
            table: "shop.t".into(),
            manifests: 3,
            since: String::new(),
            since_ms: chrono::Utc::now().timestamp_millis() - secs * 1000,
            error: "lake: no".into(),
        };
        m.set_delta_lags(&[lag(5)]);
        assert!(m.ready(max).is_ok(), "a young lag is ready");
        assert!(m
            .encode()
            .unwrap()
            .contains("sluice_delta_lag_manifests{table=\"shop.t\"} 3"));
        m.set_delta_lags(&[lag(600)]);
        let e = m.ready(max).unwrap_err();
        assert!(e.contains("Delta log of shop.t lacks 3 manifests"), "{e}");
        m.set_delta_lags(&[]);
        assert!(m.ready(max).is_ok());
        assert!(m
            .encode()
            .unwrap()
            .contains("sluice_delta_lag_manifests{table=\"shop.t\"} 0"));
    }
}
