//! One transaction of a million rows goes through with bounded memory:
//! buffers spill to pending files mid-transaction and one manifest commits
//! them all; under a lowered buffer bound and under the defaults.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;

const ROWS: usize = 1_000_000;

#[test]
fn million_row_transaction_stays_within_memory_bound() {
    million_row_transaction(
        |sluice| {
            sluice.max_buffer_bytes = "32MiB".into();
            sluice.max_rows = 100_000_000; // only the memory bound may split the transaction
        },
        256,
        "max_buffer_bytes = 32MiB",
    );
}

/// The configuration users start with: no `[flush]` settings at all
/// (`max_rows` 500000, `max_buffer_bytes` 96MiB; the README gives the peak
/// as about the bound plus 60-100 MiB).
#[test]
fn million_row_transaction_on_the_default_configuration() {
    million_row_transaction(
        |sluice| sluice.default_flush = true,
        96 + 128,
        "the default [flush]",
    );
}

fn million_row_transaction(configure: impl FnOnce(&mut Sluice), peak_limit_mib: u64, config: &str) {
    let Some(db) = MariaDb::start_private(&["--innodb-buffer-pool-size=256M"]) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.big (id INT PRIMARY KEY, a BIGINT NOT NULL, s VARCHAR(40) NOT NULL,
                                d DECIMAL(12,2), t DATETIME(6))",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    configure(&mut sluice);
    // The bound covers the stream and the current-table fold of the
    // million-row transaction at the end of the run (current tables are on
    // by default; the fold takes a quarter of max_buffer_bytes).
    sluice.timeout = Duration::from_secs(900);

    let started = Instant::now();
    db.sql(&format!(
        "USE shop;
         INSERT INTO shop.big SELECT seq, seq * 2, CONCAT('row-', seq), seq / 100, NOW(6) FROM seq_1_to_{ROWS};"
    ));
    eprintln!("source transaction written in {:?}", started.elapsed());

    let started = Instant::now();
    let mut running = sluice.spawn_run(true);
    let mut peak_kib = 0;
    let status = loop {
        // Read /proc before reaping: a reaped process has no status to read.
        if let Some((hwm, rss)) = proc_memory_kib(running.pid()) {
            peak_kib = peak_kib.max(hwm).max(rss);
        }
        if let Some(status) = running.try_wait() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "sluice did not catch up within 15 min; log:\n{}",
            running.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "sluice caught up in {:?}; peak RSS {:.1} MiB",
        started.elapsed(),
        peak_kib as f64 / 1024.0
    );
    assert!(
        status.success(),
        "sluice failed ({status}); log:\n{}",
        running.log_tail(30)
    );
    assert!(
        peak_kib < peak_limit_mib * 1024,
        "peak RSS {:.1} MiB is over {peak_limit_mib} MiB with {config}",
        peak_kib as f64 / 1024.0
    );

    let lake = Lake::read(lake_dir.path());
    let files = lake.files_of("shop.big");
    assert_eq!(lake.row_count("shop.big"), ROWS as u64);
    // The rows went out in row groups of at most 131,072 rows while the
    // transaction ran (into few files: the open file of a table takes
    // them until it holds its share of compressed pages).
    let mut groups = Vec::new();
    for f in &files {
        let reader = parquet::file::reader::SerializedFileReader::new(
            std::fs::File::open(lake_dir.path().join(&f.path)).unwrap(),
        )
        .unwrap();
        let meta = parquet::file::reader::FileReader::metadata(&reader);
        groups.extend(meta.row_groups().iter().map(|g| g.num_rows()));
    }
    assert!(
        groups.len() >= ROWS.div_ceil(131_072) && groups.iter().all(|&n| n <= 131_072),
        "a million rows with {config} must go out in row groups of at most 131,072 rows: {groups:?}"
    );
    let manifests: BTreeSet<u64> = files.iter().map(|f| f.manifest_seq).collect();
    assert_eq!(
        manifests.len(),
        1,
        "one transaction, one manifest: {manifests:?}"
    );
    eprintln!("{} files in manifest {:?}", files.len(), manifests);

    let mut seen = vec![false; ROWS + 1];
    let mut tx_seqs = BTreeSet::new();
    for f in &files {
        for b in &f.batches {
            let id = b
                .column_by_name("id")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            let a = b
                .column_by_name("a")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            let s = b.column_by_name("s").unwrap().clone();
            let op = b.column_by_name("_op").unwrap().clone();
            let tx = b
                .column_by_name("_tx_seq")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            for i in 0..b.num_rows() {
                let v = id.value(i);
                assert!((1..=ROWS as i64).contains(&v), "id {v} out of range");
                assert!(!seen[v as usize], "id {v} appears twice");
                seen[v as usize] = true;
                assert_eq!(a.value(i), 2 * v, "a of id {v}");
                assert_eq!(
                    mysql_text(s.as_ref(), i),
                    Some(format!("row-{v}")),
                    "s of id {v}"
                );
                assert_eq!(mysql_text(op.as_ref(), i).as_deref(), Some("insert"));
                tx_seqs.insert(tx.value(i));
            }
        }
    }
    assert!(seen[1..].iter().all(|&x| x), "some ids are missing");
    assert_eq!(tx_seqs.len(), 1, "all rows carry one _tx_seq: {tx_seqs:?}");

    // Spot-check a few rows against SELECT, every column.
    let lake_rows: std::collections::BTreeMap<Vec<String>, Vec<Option<String>>> = files
        .iter()
        .flat_map(|f| f.batches.iter().map(move |b| (f.manifest_seq, b)))
        .flat_map(|(m, b)| batch_rows(b, m))
        .filter(|r| {
            matches!(
                r.values[0].as_deref(),
                Some("1" | "2" | "499999" | "1000000")
            )
        })
        .map(|r| (key_of(&r.values, &[0]), r.values))
        .collect();
    let expected = db.table_map(
        "SELECT id, a, s, d, t FROM shop.big WHERE id IN (1, 2, 499999, 1000000)",
        &[0],
    );
    assert_same_table("shop.big sample", &expected, &lake_rows);
}

/// The stream's buffers of a table go into one open file across flushes:
/// two tables written alternately in one checkpoint, a buffer sent off
/// every 1,000 rows, give each table one file of one row group per schema
/// version, its rows in `_seq` order and equal to the source.
#[test]
fn flushes_of_a_table_append_to_its_open_file() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL);
         CREATE TABLE shop.b (id BIGINT PRIMARY KEY, n DECIMAL(10,2));",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    sluice.max_rows = 1000;
    sluice.interval = "1h".into();
    // A first checkpoint: the schema is known before the ALTER below.
    db.sql("INSERT INTO shop.a VALUES (0, 'first'); INSERT INTO shop.b VALUES (0, 0);");
    sluice.run_until_caught_up_ok();
    let first = Lake::read(&sluice.lake)
        .files_of("shop.a")
        .iter()
        .map(|f| f.manifest_seq)
        .max()
        .unwrap();
    let mut script = String::from("USE shop; BEGIN;");
    for i in 0..10 {
        let (from, to) = (i * 2500 + 1, (i + 1) * 2500);
        script.push_str(&format!(
            "INSERT INTO shop.a SELECT seq, CONCAT('a-', seq) FROM seq_{from}_to_{to};
             INSERT INTO shop.b SELECT seq, seq / 4 FROM seq_{from}_to_{to};
             UPDATE shop.a SET v = CONCAT('u-', id) WHERE id BETWEEN {from} AND {to} AND id % 7 = 0;"
        ));
    }
    script.push_str(
        "COMMIT;
         ALTER TABLE shop.a ADD COLUMN w INT;
         INSERT INTO shop.a SELECT seq, 'late', seq FROM seq_25001_to_30000;",
    );
    db.sql(&script);
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(&sluice.lake);
    // shop.a: 25,000 inserts and 3,571 updates before the ALTER, 5,000 after.
    for (table, files_rows) in [("shop.a", vec![28_571, 5_000]), ("shop.b", vec![25_000])] {
        let files: Vec<_> = lake
            .files_of(table)
            .into_iter()
            .filter(|f| f.manifest_seq > first)
            .collect();
        let rows: Vec<u64> = files.iter().map(|f| f.rows).collect();
        assert_eq!(rows, files_rows, "{table}: one file per schema version");
        for f in &files {
            let reader = parquet::file::reader::SerializedFileReader::new(
                std::fs::File::open(sluice.lake.join(&f.path)).unwrap(),
            )
            .unwrap();
            let groups = parquet::file::reader::FileReader::metadata(&reader).num_row_groups();
            assert_eq!(groups, 1, "{}: flushes make one row group", f.path);
        }
        let seqs: Vec<i64> = lake.rows(table).iter().map(|r| r.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{table}: rows in _seq order in and across its files"
        );
    }
    // Rows of the first version have no `w`: compare `id, v`, and `w` apart.
    let source = db.table_map("SELECT id, v, w FROM shop.a", &[0]);
    let replayed = lake.replay("shop.a", &[0]);
    assert_eq!(replayed.len(), 30_001);
    for (key, row) in &source {
        let got = replayed.get(key).expect("every key of the source");
        assert_eq!(got[..2], row[..2], "shop.a row {key:?}");
        assert_eq!(got.get(2).cloned().flatten(), row[2], "shop.a w of {key:?}");
    }
    let source = db.table_map("SELECT id, n FROM shop.b", &[0]);
    let replayed = lake.replay("shop.b", &[0]);
    assert_eq!(replayed.len(), 25_001);
    for (key, row) in &source {
        assert_eq!(replayed.get(key), Some(row), "shop.b row {key:?}");
    }
}
