//! A table's first fold after its snapshot copies the changelog's column
//! chunks into the current table instead of decoding and encoding its rows
//! again (`src/table/current/fold_table/copy.rs`). Checked with readers we
//! did not write: for a wide table of pseudo-random values and NULLs, every
//! reader sees the current table hold, column by column, exactly the rows
//! it sees in the changelog's snapshot; the files' statistics are their
//! rows'; later folds (updates, deletes, inserts, with deletion vectors and
//! without) apply to the copied files and keep the table equal to the
//! source. On a local lake and on S3.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::*;
use crate::current::{current_dir, current_rows, fold_figures, source_rows};
use crate::deletion_vectors::live_files;
use crate::delta::{folder, read_delta, ALL_READERS};

const COLUMNS: [&str; 11] = ["id", "u", "d", "f", "s", "b", "dt", "day", "e", "n", "big"];

type Table = BTreeMap<String, Vec<Option<String>>>;

/// Each reader's rows of the Delta table in `dir` as `COLUMNS` and `_seq`,
/// keyed by id; every reader must agree. `with_op`: a changelog, of which
/// only the snapshot's rows are kept.
fn read_all(dir: &std::path::Path, with_op: bool) -> Table {
    // The table columns and `_seq` (the current row's is its snapshot
    // row's).
    let mut cols: Vec<&str> = COLUMNS.to_vec();
    cols.push("_seq");
    let n = cols.len();
    if with_op {
        cols.push("_op");
    }
    let read = read_delta(
        &dir.display().to_string(),
        &cols,
        None,
        &Value::Null,
        ALL_READERS,
    );
    let mut tables: Vec<(String, Table)> = Vec::new();
    for (reader, rows) in &read.rows {
        let t: Table = rows
            .iter()
            .filter(|r| !with_op || r[n].as_deref() == Some("snapshot"))
            .map(|r| (r[0].clone().unwrap_or_default(), r[..n].to_vec()))
            .collect();
        tables.push((reader.clone(), t));
    }
    assert_eq!(tables.len(), ALL_READERS.split(',').count());
    for (reader, t) in &tables[1..] {
        assert!(
            t == &tables[0].1,
            "{dir:?}: {reader} and {} disagree",
            tables[0].0
        );
    }
    tables.remove(0).1
}

fn copied_table(vectors: &str, backend: Backend, seed_default: u64) {
    let (seed, mut rng) = seeded_rng(seed_default);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.wide (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DECIMAL(20,6), f DOUBLE,
           s VARCHAR(40), b VARBINARY(16), dt DATETIME(6), day DATE, e ENUM('a','b','c'), n INT,
           big TEXT);",
    );
    const ROWS: u64 = 90_000;
    // Values from CRC32s of the key and the seed; about one in ten NULL.
    let h = |c: &str| format!("CRC32(CONCAT('{c}', seq, '-{seed}'))");
    db.sql(&format!(
        "INSERT INTO shop.wide SELECT seq,
           IF({u} % 10 = 0, NULL, {u} * {u2}),
           IF({d} % 10 = 0, NULL, (CAST({d} AS SIGNED) - 2147483648) / 1000000),
           IF({f} % 10 = 0, NULL, {f} / 7.0 - 100000000),
           IF({s} % 10 = 0, NULL, CONCAT('ü✓', REPEAT('x', {s} % 30))),
           IF({b} % 10 = 0, NULL, UNHEX(LPAD(HEX({b}), 8, '0'))),
           IF({t} % 10 = 0, NULL, TIMESTAMPADD(MICROSECOND, {t} * 1000 + seq, '2001-01-01')),
           IF({y} % 10 = 0, NULL, DATE('1970-01-01') + INTERVAL {y} % 40000 DAY),
           IF({e} % 10 = 0, NULL, ELT(1 + {e} % 3, 'a', 'b', 'c')),
           seq * 3,
           IF({g} % 10 = 0, NULL, REPEAT(MD5(seq), 1 + {g} % 2))
         FROM shop.seq_1_to_{ROWS};",
        u = h("u"),
        u2 = h("v"),
        d = h("d"),
        f = h("f"),
        s = h("s"),
        b = h("b"),
        t = h("t"),
        y = h("y"),
        e = h("e"),
        g = h("g"),
    ));
    let test_lake = TestLake::new(backend);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state.path());
    // Changelog files of 9,000 rows, one row group each (about 500 KB,
    // below a quarter of the 3 MiB target: copied).
    sluice.snapshot = "mode = \"initial\"\nchunk_rows = 9000".into();
    sluice.max_rows = 9_000;
    sluice.extra = format!(
        "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"3MiB\"\ndeletion_vectors = \"{vectors}\"\n"
    );
    sluice.env.push((
        "RUST_LOG".into(),
        "info,sluice::table::current=debug".into(),
    ));
    let out = sluice.run_until_caught_up_ok();
    assert_eq!(
        fold_figures(&out.stderr, "rows_copied"),
        ROWS,
        "the first fold copied the snapshot's column chunks (seed {seed}):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sluice.env.retain(|(k, _)| k != "RUST_LOG");

    // What the readers see of the current table is what they see of the
    // changelog's snapshot rows.
    // (On S3: a local copy of the lake.)
    let changelog = test_lake.read();
    let dir = current_dir(&changelog.root, &db, "wide");
    let changelog_dir = folder(&changelog, "shop.wide");
    let current = read_all(&dir, false);
    let snapshot = read_all(&changelog_dir, true);
    assert_eq!(current.len() as u64, ROWS);
    assert!(
        current == snapshot,
        "current table and snapshot differ (seed {seed})"
    );
    // And the plain columns equal the source.
    let plain = ["id", "n", "s", "e"];
    assert_same_table(
        &format!("shop.wide after its copied first fold (seed {seed})"),
        &source_rows(&db, "wide", &plain),
        &current_rows(&dir, &plain, None),
    );

    // The files' statistics are their rows': row counts, NULL counts and
    // the key's bounds, against the source.
    let files = live_files(&dir);
    assert!(
        files.len() >= 2,
        "a 3 MiB target cut the table: {} files",
        files.len()
    );
    let stats: Vec<Value> = files
        .values()
        .map(|a| serde_json::from_str(a["stats"].as_str().unwrap()).unwrap())
        .collect();
    let sum = |f: &dyn Fn(&Value) -> u64| stats.iter().map(f).sum::<u64>();
    assert_eq!(sum(&|s| s["numRecords"].as_u64().unwrap()), ROWS);
    for c in ["u", "s", "dt", "big"] {
        let nulls: u64 = db
            .query_rows(&format!("SELECT COUNT(*) FROM shop.wide WHERE {c} IS NULL"))[0][0]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(sum(&|s| s["nullCount"][c].as_u64().unwrap()), nulls, "{c}");
    }
    // The key column is DELTA_BINARY_PACKED (a fold with vectors reads it
    // from every file a changed key falls in), the others as copied.
    for path in files.keys() {
        let file = std::fs::File::open(dir.join(path)).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
        for group in parquet::file::reader::FileReader::metadata(&reader).row_groups() {
            let id = group.column(0);
            assert_eq!(id.column_descr().name(), "id");
            assert!(
                id.encodings()
                    .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED),
                "{path}: id encoded as {:?}",
                id.encodings().collect::<Vec<_>>()
            );
        }
    }
    let min = stats
        .iter()
        .map(|s| s["minValues"]["id"].as_u64().unwrap())
        .min();
    let max = stats
        .iter()
        .map(|s| s["maxValues"]["id"].as_u64().unwrap())
        .max();
    assert_eq!((min, max), (Some(1), Some(ROWS)));

    // Later folds apply to the copied files.
    for round in 0..3 {
        let mut sql = String::from("BEGIN;\n");
        for _ in 0..200 {
            let id = 1 + rng(ROWS + 300);
            match rng(4) {
                0 => sql += &format!("DELETE FROM shop.wide WHERE id = {id};\n"),
                1 => sql += &format!(
                    "INSERT IGNORE INTO shop.wide (id, n, s, e) VALUES ({id}, {}, 'new', 'b');\n",
                    rng(1000)
                ),
                _ => sql += &format!(
                    "UPDATE shop.wide SET n = n + 1, s = IF(s IS NULL, 'was null', NULL), e = 'c' WHERE id = {id};\n"
                ),
            }
        }
        sql += "COMMIT;\n";
        db.sql(&sql);
        let out = sluice.run_until_caught_up_ok();
        assert_eq!(fold_figures(&out.stderr, "rows_copied"), 0);
        let dir = current_dir(&test_lake.read().root, &db, "wide");
        assert_same_table(
            &format!("shop.wide after round {round} (seed {seed}, vectors {vectors})"),
            &source_rows(&db, "wide", &plain),
            &current_rows(&dir, &plain, None),
        );
    }

    // Inserts of keys after every row of the table (an auto-increment
    // table's load): with vectors, the fold copies their chunks too and
    // leaves the table's files as they are; copy-on-write decodes them.
    const MORE: u64 = 18_000;
    db.sql(&format!(
        "INSERT INTO shop.wide (id, n, s, big) SELECT {} + seq, seq, CONCAT('more ', seq), REPEAT('y', seq % 50)
         FROM shop.seq_1_to_{MORE};",
        ROWS + 1000
    ));
    let out = sluice.run_until_caught_up_ok();
    let want = if vectors == "auto" { MORE } else { 0 };
    assert_eq!(
        fold_figures(&out.stderr, "rows_copied"),
        want,
        "rows copied by a fold of appended keys (seed {seed}, vectors {vectors})"
    );
    if vectors == "auto" {
        // No file of the table rewritten.
        assert_eq!(fold_figures(&out.stderr, "bytes_removed"), 0);
    }
    let dir = current_dir(&test_lake.read().root, &db, "wide");
    assert_same_table(
        &format!("shop.wide after appended keys (seed {seed}, vectors {vectors})"),
        &source_rows(&db, "wide", &plain),
        &current_rows(&dir, &plain, None),
    );
}

#[test]
fn a_first_fold_copies_the_snapshot_column_chunks() {
    copied_table("auto", Backend::Local, 0xc0_b1e5);
}

#[test]
fn a_first_fold_copies_the_snapshot_column_chunks_without_vectors() {
    copied_table("never", Backend::Local, 0xc0_b1e6);
}

/// The same into S3 (moto_server): chunks fetched by range, files
/// uploaded in parts.
#[test]
fn a_first_fold_copies_the_snapshot_column_chunks_on_s3() {
    copied_table("auto", Backend::S3, 0xc0_b1e7);
}
