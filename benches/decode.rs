//! Micro-benchmarks of the hot stages on real binlog bytes.
//!
//! The bytes come from `benches/capture.sh`, which writes a throwaway
//! MariaDB's binlog into `benches/data/` (not committed): one table per type
//! family (ints, decimals, temporal, strings, json) plus the e2e benchmark's
//! wide table (inserted, updated, half deleted). Without that directory the
//! benchmarks print how to make it and measure nothing.
//!
//! ```sh
//! benches/capture.sh && cargo bench --bench decode
//! ```
//!
//! Groups:
//! - `rows_to_arrow/<table>`: every rows event of the table decoded into a
//!   fresh `TableBuffer` (the Arrow builders), as the pipeline does;
//! - `arrow_to_parquet/<table>`: the table's rows, already in one record
//!   batch, encoded as zstd Parquet by `sink::encode_parquet`;
//! - `binlog_file/decode`: the captured binlog file parsed event by event
//!   (mysql_common's reader, checksums included) with every rows event
//!   decoded into builders: the decode stage without network or Parquet;
//! - `offline_replay/binlog_to_lake`: the whole of `sluice run` over the
//!   captured files (`[source] binlog_dir`): the offline reader thread,
//!   checksums, schema history from the in-stream DDL, decoding, zstd
//!   Parquet into a fresh local lake and the committed manifest.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::{Event, TableMapEvent};
use mysql_common::binlog::BinlogFile;

use sluice::batch::{RowOrigin, TableBuffer};
use sluice::config::Config;
use sluice::decode::rows::{decode_rows, DecodeStats, RowsKind};
use sluice::pipeline::{self, RunOptions};
use sluice::schema::plan::TablePlan;
use sluice::schema::{ColumnDef, TableSchema};
use sluice::sink::encode_parquet;

const TABLES: [&str; 6] = ["ints", "decimals", "temporal", "strings", "json", "wide"];

fn data_dir() -> PathBuf {
    std::env::var_os("SLUICE_BENCH_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data"))
}

/// One captured rows event: its kind, the post-header length of its type and its body.
struct RowsEvent {
    kind: RowsKind,
    post_header_len: usize,
    body: Vec<u8>,
}

/// A captured table: its schema, decode plan and rows events.
struct Captured {
    plan: TablePlan,
    events: Vec<RowsEvent>,
    rows: u64,
}

/// `columns.tsv` (information_schema.COLUMNS rows) into sluice's table schemas.
fn read_schemas(dir: &Path) -> HashMap<String, Arc<TableSchema>> {
    let text = std::fs::read_to_string(dir.join("columns.tsv")).expect("columns.tsv");
    let mut tables: BTreeMap<String, TableSchema> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [db, table, name, ty, nullable, key, charset] = f[..] else {
            panic!("columns.tsv: bad line {line:?}");
        };
        let charset = (!charset.is_empty()).then(|| charset.to_string());
        let column = ColumnDef::new(name, ty, charset, nullable == "YES", key == "PRI")
            .unwrap_or_else(|e| panic!("{db}.{table}: {e}"));
        tables
            .entry(table.to_string())
            .or_insert_with(|| TableSchema {
                database: db.to_string(),
                name: table.to_string(),
                version: 1,
                columns: Vec::new(),
                charset: None,
                unique_keys: Vec::new(),
            })
            .columns
            .push(column);
    }
    tables.into_iter().map(|(k, v)| (k, Arc::new(v))).collect()
}

fn binlog_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("benches/data")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("binlog."))
        })
        .collect();
    files.sort();
    files
}

fn open_binlog(path: &Path) -> BinlogFile<BufReader<std::fs::File>> {
    let file = std::fs::File::open(path).expect("binlog file");
    BinlogFile::new(BinlogVersion::Version4, BufReader::new(file)).expect("binlog header")
}

/// The rows event kinds (v1 and v2) with their post-header lengths.
fn rows_kind(event_type: u8) -> Option<(RowsKind, usize)> {
    Some(match event_type {
        23 => (RowsKind::Write, 8),
        24 => (RowsKind::Update, 8),
        25 => (RowsKind::Delete, 8),
        30 => (RowsKind::Write, 10),
        31 => (RowsKind::Update, 10),
        32 => (RowsKind::Delete, 10),
        _ => return None,
    })
}

fn table_id(body: &[u8]) -> u64 {
    let mut id = [0u8; 8];
    id[..6].copy_from_slice(&body[..6]);
    u64::from_le_bytes(id)
}

fn origin() -> RowOrigin<'static> {
    RowOrigin {
        tx_seq: 1,
        file: "binlog.000002",
        pos: 4,
        gtid: Some("0-1-42"),
        timestamp: 1_700_000_000,
        sql: None,
    }
}

/// Reads the captured binlog into per-table decode plans and rows events.
fn load(dir: &Path) -> BTreeMap<String, Captured> {
    let schemas = read_schemas(dir);
    let mut by_id: HashMap<u64, String> = HashMap::new();
    let mut out: BTreeMap<String, Captured> = BTreeMap::new();
    for path in binlog_files(dir) {
        for event in open_binlog(&path) {
            let event: Event = event.expect("binlog event");
            let ty = event.header().event_type_raw();
            if ty == 19 {
                let tme: TableMapEvent<'_> = event.read_event().expect("TABLE_MAP");
                let name = tme.table_name().into_owned();
                if let Some(schema) = schemas.get(&name) {
                    if !out.contains_key(&name) {
                        let plan = TablePlan::new(Arc::clone(schema), &tme)
                            .unwrap_or_else(|e| panic!("{name}: {e}"));
                        out.insert(
                            name.clone(),
                            Captured {
                                plan,
                                events: Vec::new(),
                                rows: 0,
                            },
                        );
                    }
                    by_id.insert(tme.table_id(), name);
                }
            } else if let Some((kind, post_header_len)) = rows_kind(ty) {
                let body = event.data();
                let Some(name) = by_id.get(&table_id(body)) else {
                    continue;
                };
                let captured = out.get_mut(name).expect("table");
                captured.events.push(RowsEvent {
                    kind,
                    post_header_len,
                    body: body.to_vec(),
                });
            }
        }
    }
    // Count the rows once, so throughput is in rows.
    for captured in out.values_mut() {
        let (buffer, rows) = decode_all(captured);
        assert_eq!(buffer.rows() as u64, rows);
        captured.rows = rows;
    }
    out
}

fn decode_all(captured: &Captured) -> (TableBuffer, u64) {
    let mut buffer = TableBuffer::new(Arc::clone(&captured.plan.schema));
    let origin = origin();
    let mut seq = 1i64;
    let mut stats = DecodeStats::default();
    let mut rows = 0u64;
    for ev in &captured.events {
        rows += decode_rows(
            &captured.plan,
            ev.kind,
            &ev.body,
            ev.post_header_len,
            &mut buffer,
            &origin,
            &mut seq,
            &mut stats,
        )
        .expect("decode") as u64;
    }
    (buffer, rows)
}

fn benches(c: &mut Criterion) {
    let dir = data_dir();
    if !dir.join("columns.tsv").exists() {
        eprintln!(
            "no captured binlog in {}: run benches/capture.sh first (or set SLUICE_BENCH_DATA); nothing measured",
            dir.display()
        );
        return;
    }
    let tables = load(&dir);

    // Not a timing: how the buffer's own memory estimate (what
    // `flush.max_buffer_bytes` is checked against) compares with the Arrow
    // memory the same rows take once finished.
    for (name, captured) in &tables {
        let (mut buffer, rows) = decode_all(captured);
        let estimate = buffer.approx_bytes();
        let batch = buffer.finish(None).expect("record batch");
        eprintln!(
            "memory {name}: {rows} rows, estimate {:.1} MiB, Arrow arrays {:.1} MiB ({:.2}x)",
            estimate as f64 / 1048576.0,
            batch.get_array_memory_size() as f64 / 1048576.0,
            batch.get_array_memory_size() as f64 / estimate.max(1) as f64
        );
    }

    let mut group = c.benchmark_group("rows_to_arrow");
    for name in TABLES {
        let Some(captured) = tables.get(name) else {
            continue;
        };
        group.throughput(Throughput::Elements(captured.rows));
        group.bench_function(name, |b| {
            b.iter(|| {
                let (buffer, rows) = decode_all(captured);
                black_box(buffer);
                rows
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("arrow_to_parquet");
    group.sample_size(10);
    for name in TABLES {
        let Some(captured) = tables.get(name) else {
            continue;
        };
        let batch = decode_all(captured).0.finish(None).expect("record batch");
        group.throughput(Throughput::Elements(captured.rows));
        group.bench_function(name, |b| {
            b.iter(|| encode_parquet(black_box(&batch)).expect("parquet").len())
        });
    }
    group.finish();

    let files = binlog_files(&dir);
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let plans: HashMap<&str, &TablePlan> =
        tables.iter().map(|(k, v)| (k.as_str(), &v.plan)).collect();
    let mut group = c.benchmark_group("binlog_file");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("decode", |b| {
        b.iter(|| {
            let origin = origin();
            let mut seq = 1i64;
            let mut stats = DecodeStats::default();
            let mut buffers: HashMap<u64, (&TablePlan, TableBuffer)> = HashMap::new();
            let mut rows = 0usize;
            for path in &files {
                for event in open_binlog(path) {
                    let event = event.expect("binlog event");
                    let ty = event.header().event_type_raw();
                    if ty == 19 {
                        let tme: TableMapEvent<'_> = event.read_event().expect("TABLE_MAP");
                        let name = tme.table_name();
                        if let Some(plan) = plans.get(name.as_ref()) {
                            buffers.entry(tme.table_id()).or_insert_with(|| {
                                (plan, TableBuffer::new(Arc::clone(&plan.schema)))
                            });
                        }
                    } else if let Some((kind, post)) = rows_kind(ty) {
                        let body = event.data();
                        if let Some((plan, buffer)) = buffers.get_mut(&table_id(body)) {
                            rows += decode_rows(
                                plan, kind, body, post, buffer, &origin, &mut seq, &mut stats,
                            )
                            .expect("decode");
                        }
                    }
                }
            }
            black_box(buffers);
            rows
        })
    });
    group.finish();

    offline_replay(c, &dir, bytes);
}

/// `sluice run` over the captured binlog files, into a fresh lake per
/// iteration: binlog bytes to committed Parquet, as a user runs it.
fn offline_replay(c: &mut Criterion, dir: &Path, bytes: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let run = |scratch: &Path| {
        let config = Config::parse(&format!(
            "[source]\nbinlog_dir = \"{}\"\nserver_id = 9\nstart = \"earliest\"\n\
             [sink]\nurl = \"{}\"\n[state]\ndir = \"{}\"\n",
            dir.display(),
            scratch.join("lake").display(),
            scratch.join("state").display()
        ))
        .expect("offline config");
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let opts = RunOptions {
            until_caught_up: true,
            ..Default::default()
        };
        runtime
            .block_on(pipeline::run(&config, opts, shutdown))
            .expect("offline replay")
    };
    let rows = run(tempfile::tempdir().expect("tempdir").path()).rows;
    let mut group = c.benchmark_group("offline_replay");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Bytes(bytes));
    eprintln!("offline_replay: {rows} row changes per iteration");
    group.bench_function("binlog_to_lake", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |scratch| run(scratch.path()).rows,
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(decode, benches);
criterion_main!(decode);
