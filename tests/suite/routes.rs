//! Shard routing (DESIGN.md "Shard routing"): shards with different DDL
//! histories written into one lake table, with the shard of each row in
//! `_source_db` and `_source_table`. The changelog replayed (a `truncate`
//! marker empties its shard only) and the current table read by deltalake,
//! Polars, DuckDB and Spark equal the union of the shards' `SELECT *`
//! through a seeded workload, type changes, a shard truncated, a shard
//! dropped and re-created, and rows moved between shards.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::common::*;

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;
/// A change of the routed changelog: `_seq`, `_op`, the row and `_before`
/// as `COLUMNS`.
type Change = (
    i64,
    String,
    Vec<Option<String>>,
    Option<Vec<Option<String>>>,
);

/// The routed table's columns as the test compares them.
const COLUMNS: [&str; 7] = [
    "id",
    "qty",
    "note",
    "extra",
    "flag",
    "_source_db",
    "_source_table",
];
/// The supertype of the shards' `qty` (INT, DECIMAL(10,2), BIGINT).
const QTY: &str = "DECIMAL(21,2)";

/// The server's name of `shop` (renamed on an external server).
fn shop(db: &MariaDb) -> String {
    db.namespace()
        .to_server("shop.t")
        .trim_end_matches(".t")
        .to_string()
}

/// A `[[routes]]` entry of `shop.orders_<n>` into `shop.orders`, with
/// `more` keys.
fn orders_route(db: &MariaDb, more: &str) -> String {
    format!(
        "[[routes]]\nmatch = '{}'\ntable = '{}'\n{more}",
        db.namespace().filter(r"shop\.orders_\d+"),
        db.namespace().to_server("shop.orders"),
    )
}

/// The union of the shards' rows as `COLUMNS`, keyed by `key` (indices into
/// `COLUMNS`): NULL for a column a shard does not have, `qty` cast to the
/// routed table's type `qty_type`.
fn source_union(db: &MariaDb, shards: &[&str], key: &[usize], qty_type: &str) -> Table {
    let mut out = Table::new();
    for shard in shards {
        let have: Vec<String> = db
            .query_rows(&format!(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = '{}' AND TABLE_NAME = '{shard}'",
                shop(db)
            ))
            .into_iter()
            .filter_map(|r| r[0].clone())
            .collect();
        if have.is_empty() {
            continue;
        }
        let select: Vec<String> = COLUMNS
            .iter()
            .map(|c| match *c {
                "_source_db" => "DATABASE()".to_string(),
                "_source_table" => format!("'{shard}'"),
                "qty" if have.iter().any(|h| h == "qty") => format!("CAST(qty AS {qty_type})"),
                c if have.iter().any(|h| h == c) => format!("`{c}`"),
                _ => "NULL".to_string(),
            })
            .collect();
        let rows = db.query_rows(&format!(
            "USE shop; SELECT {} FROM {shard}",
            select.join(", ")
        ));
        for r in rows {
            let k = key_of(&r, key);
            assert!(out.insert(k.clone(), r).is_none(), "key {k:?} twice");
        }
    }
    out
}

/// The changelog of `shop.orders` replayed by column name, file by file (each
/// file has its version's columns): a `truncate` marker that names a shard
/// empties that shard's rows only.
fn changelog_replay(lake: &Lake, key: &[usize]) -> Table {
    let mut rows: Vec<Change> = Vec::new();
    for f in lake.files_of("shop.orders") {
        let names: Vec<String> = f.schema.fields().iter().map(|x| x.name().clone()).collect();
        let project = |values: &[Option<String>]| -> Vec<Option<String>> {
            COLUMNS
                .iter()
                .map(|c| {
                    let v = names
                        .iter()
                        .position(|n| n == c)
                        .and_then(|i| values.get(i).cloned().flatten());
                    // Files of versions before `qty` widened hold integers:
                    // as the supertype (a Delta reader's) renders them.
                    match (*c, v) {
                        ("qty", Some(v)) if !v.contains('.') => Some(format!("{v}.00")),
                        (_, v) => v,
                    }
                })
                .collect()
        };
        for b in &f.batches {
            for r in batch_rows(b, f.manifest_seq) {
                let before = r.before.as_deref().map(project);
                rows.push((r.seq, r.op.clone(), project(&r.values), before));
            }
        }
    }
    rows.sort_by_key(|r| r.0);
    let mut map = Table::new();
    for (seq, op, values, before) in rows {
        match op.as_str() {
            "insert" | "snapshot" => {
                map.insert(key_of(&values, key), values);
            }
            "update" => {
                let before = before.unwrap_or_else(|| panic!("update {seq} without _before"));
                map.remove(&key_of(&before, key));
                map.insert(key_of(&values, key), values);
            }
            "delete" => {
                map.remove(&key_of(&values, key));
            }
            "truncate" => {
                let shard = (values[5].clone(), values[6].clone());
                assert!(shard.0.is_some(), "a routed truncate names no shard");
                map.retain(|_, v| (v[5].clone(), v[6].clone()) != shard);
            }
            other => panic!("unknown _op {other}"),
        }
    }
    map
}

/// The current table as every reader sees it, keyed by `key`; the readers
/// must agree.
fn current_rows(lake: &std::path::Path, db: &MariaDb, key: &[usize]) -> Table {
    let dir = lake.join("_current").join(shop(db)).join("orders");
    crate::current::current_rows_keyed(&dir, &COLUMNS, None, key)
}

/// Checks the lake against the shards: the changelog replayed and the
/// current table in every reader; no shard has a lake table of its own.
fn check(lake_dir: &std::path::Path, db: &MariaDb, shards: &[&str], key: &[usize], when: &str) {
    let source = source_union(db, shards, key, QTY);
    assert!(!source.is_empty(), "{when}: the shards are empty");
    let lake = Lake::read(lake_dir);
    assert_same_table(
        &format!("{when}: changelog"),
        &source,
        &changelog_replay(&lake, key),
    );
    assert_same_table(
        &format!("{when}: current table"),
        &source,
        &current_rows(lake_dir, db, key),
    );
    for shard in shards {
        assert!(
            !lake_dir.join(shop(db)).join(shard).exists(),
            "{when}: {shard} has a folder of its own"
        );
        assert!(
            !lake_dir
                .join("_current")
                .join(shop(db))
                .join(shard)
                .exists(),
            "{when}: {shard} has a current table of its own"
        );
    }
}

/// A seeded statement on one shard: an upsert, an update of a value or of
/// the key, a delete, or a row moved to another shard in one transaction.
fn statement(rng: &mut StdRng, shards: &[&str], n: usize, with_extra: bool) -> String {
    let a = shards[rng.gen_range(0..shards.len())];
    let k = rng.gen_range(1..40);
    let v = rng.gen_range(0..1000);
    match rng.gen_range(0..10) {
        0..=3 => format!(
            "INSERT INTO shop.{a} (id, qty) VALUES ({k}, {v}) ON DUPLICATE KEY UPDATE qty = {v};"
        ),
        4 | 5 => format!("UPDATE shop.{a} SET qty = {v}, note = 'n{n}' WHERE id = {k};"),
        6 => format!("UPDATE IGNORE shop.{a} SET id = id + 40 WHERE id = {k};"),
        7 => format!("DELETE FROM shop.{a} WHERE id = {k};"),
        8 if with_extra => format!("UPDATE shop.orders_2 SET extra = 'e{n}' WHERE id = {k};"),
        _ => {
            let b = shards[rng.gen_range(0..shards.len())];
            if a == b {
                return format!("DELETE FROM shop.{a} WHERE id = {k};");
            }
            format!(
                "BEGIN; INSERT IGNORE INTO shop.{b} (id, qty, note) \
                 SELECT id, qty, 'moved' FROM shop.{a} WHERE id = {k}; \
                 DELETE FROM shop.{a} WHERE id = {k}; COMMIT;"
            )
        }
    }
}

#[test]
fn shards_with_their_own_ddl_routed_into_one_table_equal_their_union() {
    let (seed, _) = seeded_rng(44);
    let mut rng = StdRng::seed_from_u64(seed);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE IF NOT EXISTS shop;\n\
         CREATE TABLE shop.orders_1 (id INT PRIMARY KEY, qty INT, note VARCHAR(20));\n\
         CREATE TABLE shop.orders_2 (id BIGINT PRIMARY KEY, qty DECIMAL(10,2), note VARCHAR(20));\n\
         CREATE TABLE shop.orders_3 (id INT PRIMARY KEY, qty INT, note TEXT);\n",
    );
    let shards = ["orders_1", "orders_2", "orders_3"];
    let mut load = String::new();
    for s in shards {
        for i in 1..=12 {
            load.push_str(&format!(
                "INSERT INTO shop.{s} (id, qty, note) VALUES ({i}, {}, 'r{i}');\n",
                rng.gen_range(0..100)
            ));
        }
    }
    db.sql(&load);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"initial\"\nchunk_rows = 5".into();
    sluice.env = vec![("SLUICE_COLUMN_KEY".into(), "routes-test-key".into())];
    sluice.extra = orders_route(&db, "");
    // The key: the source key and the shard.
    let key = [0, 5, 6];
    sluice.run_until_caught_up_ok();
    check(lake_dir.path(), &db, &shards, &key, "after the snapshot");

    // A seeded workload; one shard gains a column, another's key and value
    // widen.
    let mut script = String::new();
    for n in 0..120 {
        script.push_str(&statement(&mut rng, &shards, n, false));
        script.push('\n');
        if n == 40 {
            script.push_str("ALTER TABLE shop.orders_2 ADD COLUMN extra VARCHAR(10);\n");
        }
        if n == 80 {
            script.push_str("ALTER TABLE shop.orders_3 MODIFY qty BIGINT;\n");
        }
    }
    db.sql(&script);
    sluice.run_until_caught_up_ok();
    check(
        lake_dir.path(),
        &db,
        &shards,
        &key,
        "after DDL on two shards",
    );

    // One shard truncated and written again, one dropped and created again
    // with another column, while rows move between the shards.
    let mut script = String::from(
        "TRUNCATE TABLE shop.orders_3;\n\
         INSERT INTO shop.orders_3 (id, qty) VALUES (1, 1), (2, 2), (50, 3);\n\
         DROP TABLE shop.orders_1;\n\
         CREATE TABLE shop.orders_1 (id INT PRIMARY KEY, qty INT, note VARCHAR(20), flag TINYINT);\n\
         INSERT INTO shop.orders_1 VALUES (1, 10, 'again', 1), (3, 30, NULL, 0);\n",
    );
    for n in 200..300 {
        script.push_str(&statement(&mut rng, &shards, n, true));
        script.push('\n');
    }
    db.sql(&script);
    sluice.run_until_caught_up_ok();
    check(
        lake_dir.path(),
        &db,
        &shards,
        &key,
        "after a truncate, a drop and moves",
    );

    // `sluice snapshot` of the routed table asks for every shard: with
    // --replace each shard's rows are emptied and read again.
    let seq_before = Lake::read(lake_dir.path()).manifests.len() as u64;
    let out = sluice.run_args(&["snapshot"], &["shop.orders", "--replace"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shard in shards {
        assert!(said.contains(&format!(".{shard}")), "{said}");
    }
    db.sql("UPDATE shop.orders_2 SET note = 'after the request' WHERE id < 20;");
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let reread: std::collections::BTreeSet<String> = lake
        .rows("shop.orders")
        .iter()
        .filter(|r| r.manifest_seq > seq_before && r.op == "truncate")
        .map(|r| format!("{:?}", r.values))
        .collect();
    assert_eq!(reread.len(), shards.len(), "one truncate marker per shard");
    check(
        lake_dir.path(),
        &db,
        &shards,
        &key,
        "after a replacing snapshot",
    );

    // `sluice forget --shard` erases a key's rows of one shard only.
    let live: Vec<String> = ["orders_1", "orders_2"]
        .iter()
        .map(|s| {
            db.query_rows(&format!("SELECT id FROM shop.{s} ORDER BY id"))
                .into_iter()
                .filter_map(|r| r[0].clone())
                .collect::<Vec<_>>()
        })
        .fold(Vec::new(), |mut both: Vec<String>, ids| {
            if both.is_empty() {
                ids
            } else {
                both.retain(|i| ids.contains(i));
                both
            }
        });
    let id = live.first().expect("a key in both shards").clone();
    let shard_2 = db.namespace().to_server("shop.orders_2").into_owned();
    let out = sluice.run_args(
        &[
            "forget",
            "--key",
            &format!("{{\"id\": {id}}}"),
            "--shard",
            &shard_2,
        ],
        &["shop.orders"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The changelog as deltalake reads it (forget replaced files the
    // manifests name).
    let read = crate::delta::read_delta(
        &lake_dir
            .path()
            .join(shop(&db))
            .join("orders")
            .display()
            .to_string(),
        &["_seq", "id", "_source_table"],
        None,
        &Value::Null,
        "deltalake",
    );
    let rows = &read.rows["deltalake"];
    let of = |table: &str| {
        rows.iter()
            .filter(|r| r[1].as_deref() == Some(id.as_str()) && r[2].as_deref() == Some(table))
            .count()
    };
    assert_eq!(of("orders_2"), 0, "rows of id {id} in orders_2 are erased");
    assert!(of("orders_1") > 0, "rows of id {id} in orders_1 stay");
    // Without the shard, the key misses the routed key's columns.
    let out = sluice.run_args(
        &["forget", "--key", &format!("{{\"id\": {id}}}")],
        &["shop.orders"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("_source_db"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `status` knows the routed table only: no shard is a lake table or a
    // current table, none is behind.
    let status = sluice.run_args(&["status", "--json"], &[]);
    assert!(status.status.success());
    let status: Value =
        serde_json::from_str(&strip_namespaces(&String::from_utf8_lossy(&status.stdout))).unwrap();
    let names = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(names(&status["tables"]), ["shop.orders"]);
    assert_eq!(names(&status["current_tables"]), ["shop.orders"]);
    assert_eq!(status["current_tables"]["shop.orders"]["lag_manifests"], 0);
    assert_eq!(names(&status["delta_lag"]), Vec::<String>::new());
    // The schema history keeps the routed table's versions and each shard's.
    let history = sluice.run_args(&["schema", "history", "shop.orders"], &[]);
    let text = String::from_utf8_lossy(&history.stdout);
    assert!(history.status.success(), "{text}");
    assert!(text.contains("routed from"), "{text}");
    let shown = sluice.run_args(&["schema", "show", "shop.orders_1"], &[]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success() && text.contains("flag"), "{text}");
}

#[test]
fn a_route_clash_is_an_error_before_anything_is_written() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE IF NOT EXISTS shop;\n\
         CREATE TABLE shop.parts_1 (id INT PRIMARY KEY);\n\
         CREATE TABLE shop.parts (id INT PRIMARY KEY);\n",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.include = vec![r"shop\.parts.*".into()];
    // The target is a captured table of its own.
    sluice.extra = format!(
        "[[routes]]\nmatch = '{}'\ntable = '{}'\n",
        db.namespace().filter(r"shop\.parts_\d+"),
        db.namespace().to_server("shop.parts"),
    );
    let out = sluice.run_until_caught_up();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("also the lake table that [[routes]] write"),
        "{err}"
    );
    assert!(
        !lake_dir.path().join("_sluice/manifests").exists() || {
            std::fs::read_dir(lake_dir.path().join("_sluice/manifests"))
                .unwrap()
                .next()
                .is_none()
        }
    );
    // Two routes that match one table.
    sluice.include = vec![r"shop\.parts_.*".into()];
    sluice.extra = format!(
        "[[routes]]\nmatch = '{0}'\ntable = 'x.a'\n[[routes]]\nmatch = '{0}'\ntable = 'x.b'\n",
        db.namespace().filter(r"shop\.parts_\d+"),
    );
    let out = sluice.run_until_caught_up();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("entries 1") && err.contains("both match"),
        "{err}"
    );
}

/// With `unique_key = true` the source key alone keys the current table: a
/// row moved between shards (deleted in one, inserted in another in one
/// transaction) is one row, from the shard it is in now.
#[test]
fn a_unique_key_route_keeps_a_moved_row_once() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE IF NOT EXISTS shop;\n\
         CREATE TABLE shop.orders_1 (id INT PRIMARY KEY, qty INT, note VARCHAR(20));\n\
         CREATE TABLE shop.orders_2 (id INT PRIMARY KEY, qty INT, note VARCHAR(20));\n\
         INSERT INTO shop.orders_1 (id, qty) VALUES (1, 1), (2, 2), (3, 3), (4, 4);\n\
         INSERT INTO shop.orders_2 (id, qty) VALUES (11, 11), (12, 12);\n",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.extra = orders_route(&db, "unique_key = true\n");
    sluice.run_until_caught_up_ok();
    db.sql(
        "BEGIN; DELETE FROM shop.orders_1 WHERE id = 2; \
         INSERT INTO shop.orders_2 VALUES (2, 20, 'moved'); COMMIT;\n\
         BEGIN; DELETE FROM shop.orders_2 WHERE id = 11; \
         INSERT INTO shop.orders_1 VALUES (11, 110, 'moved back'); COMMIT;\n\
         UPDATE shop.orders_1 SET qty = 30 WHERE id = 3;\n",
    );
    sluice.run_until_caught_up_ok();
    // Keyed by the source key alone: a key twice would fail the read.
    let current = current_rows(lake_dir.path(), &db, &[0]);
    let source = source_union(&db, &["orders_1", "orders_2"], &[0], "SIGNED");
    assert_same_table("unique key current table", &source, &current);
    assert_eq!(
        current[&vec!["2".to_string()]][6].as_deref(),
        Some("orders_2"),
        "the moved row comes from its new shard"
    );
    assert_eq!(current.len(), 6);
}

/// An online schema change of one shard (gh-ost's way: a helper table that
/// the filter captures but no route matches, filled and renamed into the
/// shard's name): the routed table keeps equal to the shards' union, and
/// takes the new column.
#[test]
fn an_online_schema_change_of_a_shard_keeps_the_routed_table_equal() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE IF NOT EXISTS shop;\n\
         CREATE TABLE shop.orders_1 (id INT PRIMARY KEY, qty INT, note VARCHAR(20));\n\
         CREATE TABLE shop.orders_2 (id INT PRIMARY KEY, qty DECIMAL(10,2), note VARCHAR(20));\n\
         INSERT INTO shop.orders_1 (id, qty) VALUES (1, 1), (2, 2), (3, 3);\n\
         INSERT INTO shop.orders_2 (id, qty) VALUES (1, 10), (2, 20);\n",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.extra = orders_route(&db, "");
    let key = [0, 5, 6];
    sluice.run_until_caught_up_ok();
    db.sql(
        "CREATE TABLE shop._orders_1_gho (id INT PRIMARY KEY, qty INT, note VARCHAR(20), \
           flag TINYINT);\n\
         INSERT INTO shop._orders_1_gho (id, qty, note) SELECT id, qty, note FROM shop.orders_1;\n\
         UPDATE shop.orders_1 SET qty = 33 WHERE id = 3;\n\
         UPDATE shop._orders_1_gho SET qty = 33 WHERE id = 3;\n\
         RENAME TABLE shop.orders_1 TO shop._orders_1_del, shop._orders_1_gho TO shop.orders_1;\n\
         DROP TABLE shop._orders_1_del;\n\
         UPDATE shop.orders_1 SET flag = 1, qty = 11 WHERE id = 1;\n\
         INSERT INTO shop.orders_1 VALUES (4, 4, 'after', 0);\n\
         DELETE FROM shop.orders_1 WHERE id = 2;\n",
    );
    sluice.run_until_caught_up_ok();
    check(
        lake_dir.path(),
        &db,
        &["orders_1", "orders_2"],
        &key,
        "after the cut-over",
    );
    db.sql("UPDATE shop.orders_1 SET note = 'later' WHERE id = 3;");
    sluice.run_until_caught_up_ok();
    check(
        lake_dir.path(),
        &db,
        &["orders_1", "orders_2"],
        &key,
        "after a change past the cut-over",
    );
    // The helper's current table went with its rename: the routed one is
    // the only current table (its changelog and the dropped old table's
    // stay, as for any captured helper table).
    let current: Vec<String> = std::fs::read_dir(lake_dir.path().join("_current").join(shop(&db)))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(current, ["orders"]);
}
