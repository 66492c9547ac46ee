//! A current-state table is sorted by its primary key in the key's own
//! order (README "Current-state tables"): `PRIMARY KEY (b, a)` sorts by b,
//! then a, as the server keeps the rows, so that each file holds a range of
//! b and a predicate on b skips files. The order comes from
//! `information_schema` for a table that exists at start, from the CREATE
//! TABLE of one created later, and a key that ALTER TABLE reorders
//! rebuilds the table in the new order at the next fold.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use crate::common::*;
use crate::current::{current_dir, current_rows, source_rows};
use crate::delta::delta_commits;

/// One live file of a current table: its `add` action's stats, and its
/// rows' `(a, b)` in file order.
struct KeyedFile {
    path: String,
    stats: Value,
    rows: Vec<(i64, i64)>,
}

/// The live files of the latest version of the current table in `dir`.
fn live_files(dir: &Path) -> Vec<KeyedFile> {
    let mut adds: BTreeMap<String, Value> = BTreeMap::new();
    for (_, actions) in delta_commits(dir) {
        for action in actions {
            if let Some(add) = action.get("add") {
                adds.insert(add["path"].as_str().unwrap().to_string(), add.clone());
            }
            if let Some(path) = action.get("remove").and_then(|r| r["path"].as_str()) {
                adds.remove(path);
            }
        }
    }
    adds.into_iter()
        .map(|(path, add)| {
            let file = File::open(dir.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap();
            let mut rows = Vec::new();
            for batch in reader {
                let batch = batch.unwrap();
                let column = |name: &str| {
                    let column = batch
                        .column_by_name(name)
                        .unwrap_or_else(|| panic!("{path}: no column {name}"));
                    arrow::compute::cast(column, &DataType::Int64)
                        .unwrap()
                        .as_primitive::<Int64Type>()
                        .clone()
                };
                let (a, b) = (column("a"), column("b"));
                assert_eq!(a.null_count() + b.null_count(), 0, "{path}: a NULL key");
                rows.extend(a.values().iter().copied().zip(b.values().iter().copied()));
            }
            let stats = serde_json::from_str(add["stats"].as_str().expect("add.stats"))
                .unwrap_or_else(|e| panic!("{path}: stats: {e}"));
            KeyedFile { path, stats, rows }
        })
        .collect()
}

/// The current table of `shop.<table>` equals the source for every reader,
/// and its files, taken in key order, hold its rows sorted by `(b, a)`:
/// each file sorted, their ranges apart, and each file's `b` stats those of
/// its rows. Returns how many files it has.
fn assert_sorted_by_b_then_a(db: &MariaDb, lake: &Path, table: &str) -> usize {
    let dir = current_dir(lake, db, table);
    let cols = ["v", "a", "b"];
    assert_same_table(
        &format!("shop.{table}"),
        &source_rows(db, table, &cols),
        &current_rows(&dir, &cols, None),
    );
    let mut files = live_files(&dir);
    files.retain(|f| !f.rows.is_empty());
    let by_b_a = |&(a, b): &(i64, i64)| (b, a);
    files.sort_by_key(|f| by_b_a(&f.rows[0]));
    for f in &files {
        let keys: Vec<(i64, i64)> = f.rows.iter().map(by_b_a).collect();
        if let Some(w) = keys.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "shop.{table}: {} is not sorted by (b, a): (b, a) = {:?} before {:?}",
                f.path, w[0], w[1]
            );
        }
        let (lo, hi) = (keys[0].0, keys[keys.len() - 1].0);
        assert_eq!(
            (
                f.stats["minValues"]["b"].as_i64(),
                f.stats["maxValues"]["b"].as_i64()
            ),
            (Some(lo), Some(hi)),
            "shop.{table}: the stats of b in {}",
            f.path
        );
    }
    for pair in files.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            by_b_a(before.rows.last().unwrap()) < by_b_a(&after.rows[0]),
            "shop.{table}: the key ranges of {} and {} overlap",
            before.path,
            after.path
        );
        // Ranges of b meet at most in one value, where a key's run of rows
        // crosses a file boundary.
        assert!(
            before.stats["maxValues"]["b"].as_i64() <= after.stats["minValues"]["b"].as_i64(),
            "shop.{table}: the b ranges of {} and {} overlap",
            before.path,
            after.path
        );
    }
    files.len()
}

/// `a` and `b` of the `i`th row: inserted in (a, b) order, which is not
/// (b, a) order.
fn key_of(i: u32) -> (u32, u32) {
    (i / 250, i % 250)
}

/// Inserts of rows `from..to` into `shop.<table>` (v unique: the rows are
/// compared keyed by it).
fn insert_rows(table: &str, from: u32, to: u32) -> String {
    let values: Vec<String> = (from..to)
        .map(|i| {
            let (a, b) = key_of(i);
            format!("({a}, {b}, 'row {i} {}')", "x".repeat((i % 7) as usize))
        })
        .collect();
    values
        .chunks(400)
        .map(|chunk| format!("INSERT INTO shop.{table} VALUES {};\n", chunk.join(", ")))
        .collect()
}

/// The key columns a current table's Delta metadata records last
/// (`sluice.key`, `name type, …`).
fn recorded_key(db: &MariaDb, lake: &Path, table: &str) -> Vec<String> {
    let key = delta_commits(&current_dir(lake, db, table))
        .into_iter()
        .flat_map(|(_, actions)| actions)
        .filter_map(|a| {
            a["metaData"]["configuration"]["sluice.key"]
                .as_str()
                .map(str::to_string)
        })
        .next_back()
        .expect("a metaData action with sluice.key");
    key.split(", ")
        .map(|part| part.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn current_tables_are_sorted_in_primary_key_order() {
    let db = MariaDb::start();
    let create = |table: &str, key: &str| {
        format!(
            "CREATE TABLE shop.{table} (a INT NOT NULL, b INT NOT NULL, v VARCHAR(60), \
             PRIMARY KEY ({key}));\n"
        )
    };
    // shop.boot is read from information_schema at start.
    db.sql(&format!(
        "CREATE DATABASE shop;\n{}",
        create("boot", "b, a")
    ));
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra =
        "[current]\nenabled = true\nrefresh = \"1s\"\ntarget_file_size = \"4KiB\"\n".into();
    // shop.ddl from its CREATE TABLE in the binlog; shop.re keyed (a, b)
    // until ALTER TABLE reorders its key.
    let mut sql = create("ddl", "b, a") + &create("re", "a, b");
    for table in ["boot", "ddl", "re"] {
        // Over 2048 rows, the fold's batch: files are cut between batches.
        sql += &insert_rows(table, 0, 10_000);
        sql += &format!(
            "UPDATE shop.{table} SET v = CONCAT(v, ' updated') WHERE a % 3 = 0;
             UPDATE shop.{table} SET a = a + 100 WHERE b = 7 AND a < 10;
             DELETE FROM shop.{table} WHERE (a + b) % 5 = 0;\n"
        );
    }
    db.sql(&sql);
    sluice.run_until_caught_up_ok();
    for table in ["boot", "ddl"] {
        let files = assert_sorted_by_b_then_a(&db, lake.path(), table);
        assert!(
            files >= 3,
            "shop.{table} has {files} files: ranges are not tested"
        );
        assert_eq!(recorded_key(&db, lake.path(), table), ["b", "a"]);
    }
    assert_eq!(recorded_key(&db, lake.path(), "re"), ["a", "b"]);

    // A reordered key: the next fold rebuilds the table by (b, a).
    db.sql(&format!(
        "ALTER TABLE shop.re DROP PRIMARY KEY, ADD PRIMARY KEY (b, a);
         {}
         UPDATE shop.re SET v = CONCAT(v, ' again') WHERE b = 3;
         DELETE FROM shop.re WHERE a = 11;",
        insert_rows("re", 10_000, 10_500)
    ));
    sluice.run_until_caught_up_ok();
    let files = assert_sorted_by_b_then_a(&db, lake.path(), "re");
    assert!(
        files >= 3,
        "shop.re has {files} files: ranges are not tested"
    );
    assert_eq!(recorded_key(&db, lake.path(), "re"), ["b", "a"]);
}
