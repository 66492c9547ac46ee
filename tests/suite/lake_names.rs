//! Lake column names (DESIGN.md "Lake column names"): source columns named
//! like the CDC columns (`_ts` a DATETIME, `_op`, `_SEQ`, `_before`), a
//! case-only rename and a drop and re-add in another case, across several
//! runs with changes between. Every changelog table and current table is
//! read by the `deltalake` package, Polars and DuckDB, and equals the
//! source; `schema show --json` gives each column's lake name. A table
//! whose Delta commit fails holds back no other table's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use crate::delta::read_delta;
use serde_json::Value;

const READERS: &str = crate::delta::ALL_READERS;

type Table = BTreeMap<String, Vec<Option<String>>>;

fn table_dir(lake: &Path, db: &MariaDb, table: &str) -> PathBuf {
    lake.join(db.namespace().to_server("shop").as_ref())
        .join(table)
}

fn current_dir(lake: &Path, db: &MariaDb, table: &str) -> PathBuf {
    lake.join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join(table)
}

/// `SELECT <select>` of `shop.<table>`, keyed by its first column.
fn source(db: &MariaDb, table: &str, select: &str) -> Table {
    db.query_rows(&format!("SELECT {select} FROM shop.{table}"))
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r))
        .collect()
}

/// Reads a Delta table with every reader; they must agree. Rows as
/// `columns`, in `_seq` order (`_seq` must be among them).
fn read_all(dir: &Path, columns: &[&str]) -> (Vec<String>, Vec<Vec<Option<String>>>) {
    let read = read_delta(
        &dir.display().to_string(),
        columns,
        None,
        &Value::Null,
        READERS,
    );
    assert_eq!(
        read.rows.len(),
        READERS.split(',').count(),
        "{dir:?}: a reader is missing"
    );
    let mut readers = read.rows.iter();
    let (first, rows) = readers.next().unwrap();
    for (name, other) in readers {
        assert_eq!(rows, other, "{dir:?}: {name} reads otherwise than {first}");
    }
    (read.schema, rows.clone())
}

/// No two names that differ only in case: every reader refuses those.
fn assert_unique_without_case(what: &str, names: &[String]) {
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            assert!(
                a.to_lowercase() != b.to_lowercase(),
                "{what}: {a} and {b} in one schema: {names:?}"
            );
        }
    }
}

/// The changelog table replayed by DESIGN.md's rule (no change in these
/// tests moves a key): `columns` start with `_seq`, `_op` and the key.
fn changelog_replay(dir: &Path, columns: &[&str]) -> Table {
    let (schema, rows) = read_all(dir, columns);
    assert_unique_without_case(&format!("{dir:?}"), &schema);
    let mut table = Table::new();
    for r in rows {
        let key = r[2].clone().unwrap_or_default();
        match r[1].as_deref() {
            Some("insert" | "snapshot" | "update") => {
                table.insert(key, r[2..].to_vec());
            }
            Some("delete") => {
                table.remove(&key);
            }
            Some("truncate") => table.clear(),
            other => panic!("{dir:?}: unknown _op {other:?}"),
        }
    }
    table
}

/// The current table keyed by its first column.
fn current(dir: &Path, columns: &[&str]) -> Table {
    let mut with_seq = columns.to_vec();
    with_seq.push("_seq");
    let (schema, rows) = read_all(dir, &with_seq);
    assert_unique_without_case(&format!("{dir:?}"), &schema);
    let table: Table = rows
        .iter()
        .map(|r| (r[0].clone().unwrap(), r[..columns.len()].to_vec()))
        .collect();
    assert_eq!(table.len(), rows.len(), "{dir:?}: a key twice");
    table
}

fn lake_names(sluice: &Sluice, table: &str) -> Vec<(String, String)> {
    let out = sluice.run_args(&["schema", "show"], &[table, "--json"]);
    assert!(
        out.status.success(),
        "schema show failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["lake_name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const TS: &str = "DATE_FORMAT(`_ts`, '%Y-%m-%d %H:%i:%s.%f')";

#[test]
fn cdc_named_and_case_renamed_columns_read_alike_everywhere() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.c (id INT PRIMARY KEY, `_ts` DATETIME, `_op` VARCHAR(10),
             `_SEQ` INT, `_before` VARCHAR(10), price DECIMAL(8,2));
         CREATE TABLE shop.p (id INT PRIMARY KEY, price DECIMAL(8,2), v INT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    db.sql(
        "INSERT INTO shop.c VALUES (1, '2024-01-02 03:04:05', 'x', 10, 'b1', 1.50),
             (2, '2024-02-03 04:05:06', 'y', 20, NULL, 2.25),
             (3, NULL, NULL, NULL, 'b3', NULL);
         INSERT INTO shop.p VALUES (1, 1.00, 1), (2, 2.00, 2);",
    );
    sluice.run_until_caught_up_ok();

    // Changes, a case-only rename, changes after it.
    db.sql(
        "UPDATE shop.c SET `_op` = 'x2', `_ts` = '2025-05-05 05:05:05' WHERE id = 1;
         DELETE FROM shop.c WHERE id = 2;
         INSERT INTO shop.c VALUES (4, '2024-04-04 04:04:04', 'w', 40, 'b4', 4.40);
         ALTER TABLE shop.c RENAME COLUMN price TO Price;
         UPDATE shop.c SET Price = 3.33, `_SEQ` = 33 WHERE id = 3;
         ALTER TABLE shop.p CHANGE price Price DECIMAL(8,2);
         UPDATE shop.p SET Price = Price + 1 WHERE id = 1;
         INSERT INTO shop.p VALUES (3, 3.00, 3);",
    );
    sluice.run_until_caught_up_ok();
    let c_cols = ["id", "_ts_", "_op_", "_SEQ_", "_before_"];
    let check = |price: &str, step: &str| {
        let select = format!("id, {TS}, `_op`, `_SEQ`, `_before`, `{price}`");
        let want = source(&db, "c", &select);
        let mut log_cols = vec!["_seq", "_op"];
        log_cols.extend(c_cols);
        log_cols.push("price");
        assert_same(
            &format!("changelog of shop.c {step}"),
            &want,
            &changelog_replay(&table_dir(lake.path(), &db, "c"), &log_cols),
        );
        let mut cur_cols = c_cols.to_vec();
        cur_cols.push(price);
        assert_same(
            &format!("current shop.c {step}"),
            &want,
            &current(&current_dir(lake.path(), &db, "c"), &cur_cols),
        );
        let want = source(&db, "p", "id, price, v");
        assert_same(
            &format!("changelog of shop.p {step}"),
            &want,
            &changelog_replay(
                &table_dir(lake.path(), &db, "p"),
                &["_seq", "_op", "id", "price", "v"],
            ),
        );
    };
    check("Price", "after a case-only rename");
    let (schema, _) = read_all(
        &current_dir(lake.path(), &db, "p"),
        &["id", "Price", "v", "_seq"],
    );
    assert_eq!(schema, ["id", "Price", "v", "_seq", "_ts"]);

    // A drop and a re-add in another case, in two statements and in one.
    db.sql(
        "ALTER TABLE shop.c DROP COLUMN Price;
         UPDATE shop.c SET `_before` = 'after-drop';
         ALTER TABLE shop.c ADD COLUMN PRICE DECIMAL(8,2);
         UPDATE shop.c SET PRICE = id * 1.25;
         INSERT INTO shop.c VALUES (5, '2024-05-05 05:05:05', 'v', 50, NULL, 5.55);
         ALTER TABLE shop.p DROP COLUMN v, ADD COLUMN V INT;
         UPDATE shop.p SET V = id * 7;",
    );
    sluice.run_until_caught_up_ok();
    check("PRICE", "after a drop and re-add");
    let (schema, _) = read_all(&table_dir(lake.path(), &db, "c"), &["_seq", "id", "_ts_"]);
    for name in [
        "_ts", "_ts_", "_op", "_op_", "_SEQ_", "_seq", "_before", "_before_", "price",
    ] {
        assert!(schema.iter().any(|s| s == name), "{name} not in {schema:?}");
    }
    let want = source(&db, "p", "id, price, V");
    assert_same(
        "changelog of shop.p after a drop and re-add",
        &want,
        &changelog_replay(
            &table_dir(lake.path(), &db, "p"),
            &["_seq", "_op", "id", "price", "v"],
        ),
    );
    assert_same(
        "current shop.p after a drop and re-add",
        &want,
        &current(&current_dir(lake.path(), &db, "p"), &["id", "Price", "V"]),
    );

    // More changes in a later run: the names hold.
    db.sql(
        "UPDATE shop.c SET `_ts` = '2026-06-06 06:06:06.000000', PRICE = 9.99 WHERE id = 4;
         DELETE FROM shop.c WHERE id = 1;",
    );
    sluice.run_until_caught_up_ok();
    check("PRICE", "in a later run");

    let table = "shop.c";
    let names = lake_names(&sluice, table);
    let pairs: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("id", "id"),
            ("_ts", "_ts_"),
            ("_op", "_op_"),
            ("_SEQ", "_SEQ_"),
            ("_before", "_before_"),
            ("PRICE", "price"),
        ]
    );
    let history = sluice.run_args(&["schema", "history"], &[table, "--json"]);
    assert!(history.status.success());
    let history: Value = serde_json::from_slice(&history.stdout).unwrap();
    for v in history.as_array().unwrap() {
        for c in v["columns"].as_array().unwrap() {
            assert!(c["lake_name"].is_string(), "no lake_name in {v}");
        }
    }
}

fn assert_same(what: &str, want: &Table, got: &Table) {
    let key = |t: &Table| -> BTreeMap<Vec<String>, Vec<Option<String>>> {
        t.iter()
            .map(|(k, v)| (vec![k.clone()], v.clone()))
            .collect()
    };
    assert_same_table(what, &key(want), &key(got));
}

/// A table whose Delta commit fails (its `_delta_log` made a plain file)
/// holds back no other table of the same manifest; once the cause is gone,
/// the next start makes the commits it missed.
#[test]
fn a_failing_delta_commit_holds_back_no_other_table() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.a (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.b (id INT PRIMARY KEY, v INT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake.path(), state.path());
    db.sql(
        "INSERT INTO shop.a VALUES (1, 1);
         INSERT INTO shop.b VALUES (1, 1);",
    );
    sluice.run_until_caught_up_ok();

    let a_log = table_dir(lake.path(), &db, "a").join("_delta_log");
    let a_aside = table_dir(lake.path(), &db, "a").join("log-aside");
    std::fs::rename(&a_log, &a_aside).unwrap();
    std::fs::write(&a_log, b"not a folder").unwrap();
    db.sql(
        "INSERT INTO shop.a VALUES (2, 2);
         INSERT INTO shop.b VALUES (2, 2);
         UPDATE shop.b SET v = 10 WHERE id = 1;",
    );
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr);
    // (The test's log has the database's own name again.)
    let a_name = "shop.a";
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("could not make the Delta commit of this table"))
        .collect();
    assert!(
        !failures.is_empty() && failures.iter().all(|l| l.contains(a_name)),
        "no failure naming shop.a alone:\n{}",
        tail(&log, 30)
    );
    // A definite error is an error, not a warning.
    for l in failures.iter().filter(|l| l.contains("kind=definite")) {
        assert!(l.contains("ERROR"), "{l}");
    }
    let cols = ["_seq", "_op", "id", "v"];
    let want_b = source(&db, "b", "id, v");
    assert_same(
        "shop.b beside a failing shop.a",
        &want_b,
        &changelog_replay(&table_dir(lake.path(), &db, "b"), &cols),
    );

    std::fs::remove_file(&a_log).unwrap();
    std::fs::rename(&a_aside, &a_log).unwrap();
    db.sql("INSERT INTO shop.b VALUES (3, 3);");
    sluice.run_until_caught_up_ok();
    for t in ["a", "b"] {
        assert_same(
            &format!("shop.{t} after the repair"),
            &source(&db, t, "id, v"),
            &changelog_replay(&table_dir(lake.path(), &db, t), &cols),
        );
    }
}
