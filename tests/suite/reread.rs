//! DDL whose effect on existing rows the binlog does not carry is re-read from
//! the source (DESIGN.md "DDL whose effect sluice cannot replay is re-read
//! from the source"): after every fold, the current table (read by the
//! `deltalake` package, Polars and DuckDB) and the changelog's replay equal
//! `SELECT *`; the allow-listed changes re-read nothing; `after_ddl =
//! "never"` changes the schema only; a kill during a re-read loses and
//! repeats nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::common::*;
use crate::delta::read_delta;

const READERS: &str = crate::delta::ALL_READERS;

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;

/// One table to compare: its name, the lake's column names, the SELECT
/// expressions that print them as the lake readers do, and the key column's
/// place among them.
struct Shape<'a> {
    table: &'a str,
    columns: &'a [&'a str],
    select: &'a [&'a str],
    key: usize,
}

fn current_dir(lake: &Path, db: &MariaDb, table: &str) -> PathBuf {
    lake.join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join(table)
}

fn keyed(rows: Vec<Vec<Option<String>>>, key: usize) -> (Table, usize) {
    let n = rows.len();
    let t: Table = rows
        .into_iter()
        .map(|r| (vec![r[key].clone().unwrap_or_else(|| "NULL".into())], r))
        .collect();
    (t, n)
}

fn source_rows(db: &MariaDb, s: &Shape<'_>) -> Table {
    let rows = db.query_rows(&format!(
        "SELECT {} FROM shop.{}",
        s.select.join(", "),
        s.table
    ));
    keyed(rows, s.key).0
}

/// The current table as every reader sees it; they must agree, and no key
/// may appear twice.
fn current_rows(lake: &Path, db: &MariaDb, s: &Shape<'_>) -> Table {
    let dir = current_dir(lake, db, s.table);
    let mut with_seq: Vec<&str> = s.columns.to_vec();
    with_seq.push("_seq");
    let read = read_delta(
        &dir.display().to_string(),
        &with_seq,
        None,
        &Value::Null,
        READERS,
    );
    let mut tables: Vec<(String, Table)> = Vec::new();
    for (reader, rows) in &read.rows {
        let rows: Vec<Vec<Option<String>>> =
            rows.iter().map(|r| r[..s.columns.len()].to_vec()).collect();
        let (t, n) = keyed(rows, s.key);
        assert_eq!(t.len(), n, "{reader}: a key twice in _current/{}", s.table);
        tables.push((reader.clone(), t));
    }
    assert_eq!(tables.len(), READERS.split(',').count());
    for (reader, t) in &tables[1..] {
        assert_same_table(&format!("{reader} vs {}", tables[0].0), &tables[0].1, t);
    }
    tables.remove(0).1
}

/// The changelog replayed by DESIGN.md's rule, each file's columns taken by
/// name (a column a file does not have is null).
fn changelog_replay(lake: &Lake, s: &Shape<'_>) -> Table {
    let table = format!("shop.{}", s.table);
    let mut rows = Vec::new();
    for f in lake.files_of(&table) {
        let names: Vec<String> = f
            .schema
            .fields()
            .iter()
            .take_while(|x| x.name() != "_op")
            .map(|x| x.name().clone())
            .collect();
        let pick = |values: &[Option<String>]| -> Vec<Option<String>> {
            s.columns
                .iter()
                .map(|c| {
                    names
                        .iter()
                        .position(|n| n == c)
                        .and_then(|i| values.get(i).cloned().flatten())
                })
                .collect()
        };
        for b in &f.batches {
            for mut r in batch_rows(b, f.manifest_seq) {
                r.values = pick(&r.values);
                r.before = r.before.as_deref().map(pick);
                rows.push(r);
            }
        }
    }
    rows.sort_by_key(|r| r.seq);
    replay(&rows, &[s.key])
}

/// After a fold: the current table and the changelog's replay equal the source.
fn assert_equal_to_source(lake_dir: &Path, db: &MariaDb, shapes: &[Shape<'_>], when: &str) {
    // A kill during an upload may leave the local store's staging file
    // (`…parquet#N`) that no manifest lists; every listed file is checked.
    let lake = Lake::read_committed(lake_dir);
    for s in shapes {
        let source = source_rows(db, s);
        assert_same_table(
            &format!("_current/shop/{} {when}", s.table),
            &source,
            &current_rows(lake_dir, db, s),
        );
        assert_same_table(
            &format!("changelog replay of shop.{} {when}", s.table),
            &source,
            &changelog_replay(&lake, s),
        );
    }
}

/// The manifests' `ddl` entries whose statement contains `needle`.
fn ddl_entries(lake: &Lake, needle: &str) -> Vec<Value> {
    lake.manifests
        .iter()
        .flat_map(|m| m["ddl"].as_array().cloned().unwrap_or_default())
        .filter(|d| d["statement"].as_str().is_some_and(|s| s.contains(needle)))
        .collect()
}

/// `(truncate markers, snapshot rows)` of a table in the changelog.
fn markers_and_snapshot_rows(lake: &Lake, table: &str) -> (usize, usize) {
    let rows = lake.rows(&format!("shop.{table}"));
    (
        rows.iter().filter(|r| r.op == "truncate").count(),
        rows.iter().filter(|r| r.op == "snapshot").count(),
    )
}

fn sluice_with_folds(db: &MariaDb, lake: &Path, state: &Path) -> Sluice {
    let mut sluice = Sluice::new(db, lake, state);
    sluice.interval = "100ms".into();
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    sluice
}

const PK: Shape<'static> = Shape {
    table: "pk",
    columns: &["id", "b"],
    select: &["id", "b"],
    key: 1,
};
const PRICE: Shape<'static> = Shape {
    table: "price",
    columns: &["id", "price"],
    select: &["id", "price"],
    key: 0,
};
const DFLT: Shape<'static> = Shape {
    table: "dflt",
    columns: &["id", "a", "c"],
    select: &["id", "a", "c"],
    key: 0,
};
const DT: Shape<'static> = Shape {
    table: "dt",
    columns: &["k", "v"],
    select: &["DATE_FORMAT(k, '%Y-%m-%d %H:%i:%s.%f')", "v"],
    key: 0,
};
const CS: Shape<'static> = Shape {
    table: "cs",
    columns: &["id", "s"],
    select: &["id", "s"],
    key: 0,
};
const EN: Shape<'static> = Shape {
    table: "en",
    columns: &["id", "e"],
    select: &["id", "e"],
    key: 0,
};
const NN: Shape<'static> = Shape {
    table: "nn",
    columns: &["id", "v"],
    select: &["id", "v"],
    key: 0,
};

const CREATE: &str = "CREATE DATABASE shop;
     CREATE TABLE shop.pk (id INT PRIMARY KEY, b INT NOT NULL);
     CREATE TABLE shop.price (id INT PRIMARY KEY, price DECIMAL(6,2));
     CREATE TABLE shop.dflt (id INT PRIMARY KEY, a INT);
     CREATE TABLE shop.dt (k DATETIME(6) PRIMARY KEY, v INT);
     CREATE TABLE shop.cs (id INT PRIMARY KEY, s VARCHAR(10)) CHARACTER SET latin1;
     CREATE TABLE shop.en (id INT PRIMARY KEY, e ENUM('a','b','c'));
     CREATE TABLE shop.nn (id INT PRIMARY KEY, v INT);";

const FILL: &str = "INSERT INTO shop.pk VALUES (1, 5), (2, 5), (3, 7);
     INSERT INTO shop.price VALUES (1, 2.50), (2, -2.50), (3, NULL), (4, 7.49);
     INSERT INTO shop.dflt VALUES (1, 10), (2, 20);
     INSERT INTO shop.dt VALUES ('2024-01-01 10:00:00.400000', 1), ('2024-01-01 10:00:05.700000', 2);
     INSERT INTO shop.cs VALUES (1, 'café'), (2, 'a');
     INSERT INTO shop.en VALUES (1, 'a'), (2, 'b'), (3, 'c');
     INSERT INTO shop.nn VALUES (1, NULL), (2, 3);";

/// The statements the issue reported, and the other forms DESIGN.md names:
/// each changes rows the binlog does not show.
const CONVERT: &str = "UPDATE shop.pk SET b = 6 WHERE id = 2;
     ALTER TABLE shop.pk DROP PRIMARY KEY, ADD PRIMARY KEY (b);
     ALTER TABLE shop.price MODIFY price INT;
     ALTER TABLE shop.dflt ADD COLUMN c INT NOT NULL DEFAULT 5;
     ALTER TABLE shop.dt MODIFY k DATETIME;
     UPDATE shop.dt SET v = v + 10 WHERE k = '2024-01-01 10:00:00';
     ALTER TABLE shop.cs CONVERT TO CHARACTER SET utf8mb4;
     ALTER TABLE shop.en MODIFY e ENUM('c','b','a','d');
     SET SESSION sql_mode = '';
     ALTER TABLE shop.nn MODIFY v INT NOT NULL;";

const AFTER: &str = "INSERT INTO shop.pk VALUES (4, 9);
     UPDATE shop.pk SET id = 20 WHERE b = 6;
     INSERT INTO shop.price VALUES (5, 8);
     UPDATE shop.price SET price = price + 1 WHERE id = 1;
     INSERT INTO shop.dflt (id, a) VALUES (3, 30);
     UPDATE shop.dflt SET c = 6 WHERE id = 1;
     INSERT INTO shop.dt VALUES ('2024-02-02 00:00:00', 3);
     INSERT INTO shop.cs VALUES (3, 'ü€');
     UPDATE shop.en SET e = 'd' WHERE id = 1;
     INSERT INTO shop.nn VALUES (3, 4);
     DELETE FROM shop.nn WHERE id = 2;";

fn all_shapes() -> [Shape<'static>; 7] {
    [PK, PRICE, DFLT, DT, CS, EN, NN]
}

#[test]
fn ddl_the_binlog_cannot_replay_is_re_read_and_tables_equal_the_source() {
    let db = MariaDb::start();
    db.sql(CREATE);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = sluice_with_folds(&db, lake_dir.path(), state.path());
    db.sql(FILL);
    sluice.run_until_caught_up_ok();
    // shop.pk is keyed by id until the DDL keys it by b; shop.dflt has no c.
    let before = [
        Shape { key: 0, ..PK },
        PRICE,
        Shape {
            columns: &["id", "a"],
            select: &["id", "a"],
            ..DFLT
        },
        DT,
        CS,
        EN,
        NN,
    ];
    assert_equal_to_source(lake_dir.path(), &db, &before, "before the DDL");

    db.sql(CONVERT);
    // The values the issue saw go wrong, as the server has them now.
    assert_eq!(
        db.query_rows("SELECT price FROM shop.price WHERE id IN (1, 2) ORDER BY id"),
        vec![vec![Some("3".into())], vec![Some("-3".into())]]
    );
    sluice.run_until_caught_up_ok();
    assert_equal_to_source(lake_dir.path(), &db, &all_shapes(), "after the DDL");

    let lake = Lake::read(lake_dir.path());
    for (table, needle) in [
        ("pk", "ADD PRIMARY KEY (b)"),
        ("price", "MODIFY price INT"),
        ("dflt", "DEFAULT 5"),
        ("dt", "MODIFY k DATETIME"),
        ("cs", "CONVERT TO CHARACTER SET"),
        ("en", "ENUM('c','b','a','d')"),
        ("nn", "MODIFY v INT NOT NULL"),
    ] {
        let entries = ddl_entries(&lake, needle);
        assert_eq!(entries.len(), 1, "{table}: {entries:?}");
        assert_eq!(entries[0]["reread"], true, "{table}: {}", entries[0]);
        let (markers, snapshot_rows) = markers_and_snapshot_rows(&lake, table);
        assert_eq!(markers, 1, "{table}: one truncate marker");
        let source: usize = db
            .query_value(&format!("SELECT COUNT(*) FROM shop.{table}"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(snapshot_rows, source, "{table}: the re-read's rows");
        // The marker sits at the statement; every re-read row comes after it.
        let rows = lake.rows(&format!("shop.{table}"));
        let marker = rows.iter().find(|r| r.op == "truncate").unwrap();
        assert_eq!(
            marker.binlog_pos,
            entries[0]["position"]["pos"].as_i64().unwrap(),
            "{table}: the marker's position"
        );
        assert!(
            marker.sql.as_deref().is_some_and(|s| s.contains("re-read")),
            "{table}: {:?}",
            marker.sql
        );
        assert!(rows
            .iter()
            .filter(|r| r.op == "snapshot")
            .all(|r| r.seq > marker.seq));
        let state = &lake.manifests.last().unwrap()["snapshot"][format!("shop.{table}")];
        assert_eq!(state["state"], "done", "{table}: {state}");
    }

    // Changes after the re-read fold on top of it.
    db.sql(AFTER);
    sluice.run_until_caught_up_ok();
    assert_equal_to_source(lake_dir.path(), &db, &all_shapes(), "after more changes");
}

#[test]
fn allow_listed_ddl_keeps_the_rows_and_reads_nothing_again() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.al (id INT PRIMARY KEY, a INT, s VARCHAR(10), p DECIMAL(6,2), gone INT, nm VARCHAR(5) NOT NULL);",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = sluice_with_folds(&db, lake_dir.path(), state.path());
    db.sql(
        "INSERT INTO shop.al VALUES (1, 1, 'x', 1.25, 9, 'n1'), (2, -2147483648, NULL, -3.50, 9, 'n2');",
    );
    sluice.run_until_caught_up_ok();
    let shape = Shape {
        table: "al",
        columns: &["id", "a", "t", "p", "n", "nm"],
        select: &["id", "a", "t", "p", "n", "nm"],
        key: 0,
    };
    db.sql(
        "ALTER TABLE shop.al ADD COLUMN n INT NULL;
         ALTER TABLE shop.al ADD COLUMN n2 INT DEFAULT NULL;
         ALTER TABLE shop.al MODIFY a BIGINT;
         ALTER TABLE shop.al MODIFY s VARCHAR(40);
         ALTER TABLE shop.al CHANGE s t TEXT;
         ALTER TABLE shop.al MODIFY p DECIMAL(9,2);
         ALTER TABLE shop.al DROP COLUMN gone;
         ALTER TABLE shop.al MODIFY nm VARCHAR(5) NULL;
         ALTER TABLE shop.al ADD INDEX ia (a), COMMENT 'table comment', ENGINE = InnoDB;
         UPDATE shop.al SET n = 7 WHERE id = 1;
         INSERT INTO shop.al (id, a, t, p, n, nm) VALUES (3, 5000000000, 'long text', 1234567.89, 3, NULL);",
    );
    sluice.run_until_caught_up_ok();
    assert_equal_to_source(lake_dir.path(), &db, &[shape], "after allow-listed DDL");
    let lake = Lake::read(lake_dir.path());
    for m in &lake.manifests {
        for d in m["ddl"].as_array().into_iter().flatten() {
            assert!(d.get("reread").is_none(), "re-read for {d}");
        }
    }
    assert_eq!(markers_and_snapshot_rows(&lake, "al"), (0, 0));
}

#[test]
fn after_ddl_never_changes_the_schema_only() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.price (id INT PRIMARY KEY, price DECIMAL(6,2));",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = sluice_with_folds(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"never\"\nafter_ddl = \"never\"".into();
    db.sql("INSERT INTO shop.price VALUES (1, 2.50), (2, -2.50);");
    sluice.run_until_caught_up_ok();
    db.sql("ALTER TABLE shop.price MODIFY price INT; INSERT INTO shop.price VALUES (3, 4);");
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("after_ddl = \\\"never\\\"") || log.contains("after_ddl = \"never\""),
        "no warning names the setting:\n{}",
        tail(&log, 20)
    );
    let lake = Lake::read(lake_dir.path());
    let entries = ddl_entries(&lake, "MODIFY price INT");
    assert_eq!(entries.len(), 1);
    assert!(entries[0].get("reread").is_none(), "{}", entries[0]);
    assert_eq!(markers_and_snapshot_rows(&lake, "price"), (0, 0));
    // What the README says differs: the old rows keep an Arrow cast of
    // their old values, where the server rounded them.
    let current = current_rows(lake_dir.path(), &db, &PRICE);
    let price = |id: &str| current[&vec![id.to_string()]][1].clone();
    assert_eq!(
        (price("1"), price("2"), price("3")),
        (Some("2".into()), Some("-2".into()), Some("4".into()))
    );
    assert_eq!(
        db.query_value("SELECT GROUP_CONCAT(price ORDER BY id) FROM shop.price"),
        Some("3,-3,4".into())
    );
}

/// The re-read's committed progress after each kill, as `(rows, state)`.
fn reread_progress(lake_dir: &Path, table: &str) -> Option<(u64, String)> {
    let lake = Lake::read_committed(lake_dir);
    let m = lake.manifests.last()?;
    let t = &m["snapshot"][table];
    Some((t["rows"].as_u64()?, t["state"].as_str()?.to_string()))
}

#[test]
fn a_kill_during_a_re_read_loses_and_repeats_nothing() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.big (id INT PRIMARY KEY, price DECIMAL(8,2), pad VARCHAR(200));",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = sluice_with_folds(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"never\"\nchunk_rows = 50".into();
    sluice.interval = "50ms".into();
    let rows = 20_000;
    db.sql(&format!(
        "SET SESSION max_recursive_iterations = {rows};
         INSERT INTO shop.big WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
         SELECT i, i / 4, REPEAT('x', 150) FROM n;"
    ));
    sluice.run_until_caught_up_ok();
    db.sql("ALTER TABLE shop.big MODIFY price INT;");
    let shape = Shape {
        table: "big",
        columns: &["id", "price", "pad"],
        select: &["id", "price", "pad"],
        key: 0,
    };
    let mut kills = 0;
    let mut progress = Vec::new();
    for round in 0..6 {
        let mut run = sluice.spawn_run(true);
        // Kill once the re-read has committed part of the table.
        let started = Instant::now();
        let mut seen = None;
        while started.elapsed() < Duration::from_secs(60) {
            if run.try_wait().is_some() {
                break;
            }
            if let Some((read, st)) = reread_progress(lake_dir.path(), "shop.big") {
                if st == "running" && read > progress.last().copied().unwrap_or(0) {
                    seen = Some(read);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if run.try_wait().is_some() {
            break;
        }
        run.kill();
        kills += 1;
        progress.push(seen.unwrap_or(0));
        // Writes between the runs go on top of the re-read.
        db.sql(&format!(
            "UPDATE shop.big SET price = price + 1 WHERE id = {};",
            round * 1000 + 1
        ));
    }
    sluice.run_until_caught_up_ok();
    assert!(kills >= 1, "never killed during the re-read: {progress:?}");
    assert_equal_to_source(
        lake_dir.path(),
        &db,
        &[shape],
        "after kills during the re-read",
    );
    // Nothing twice: the re-read put every key once after its marker.
    let lake = Lake::read_committed(lake_dir.path());
    let all = lake.rows("shop.big");
    let marker = all
        .iter()
        .rposition(|r| r.op == "truncate")
        .expect("a truncate marker");
    let mut keys: Vec<&Option<String>> = all[marker..]
        .iter()
        .filter(|r| r.op == "snapshot")
        .map(|r| &r.values[0])
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "a key read twice by the re-read");
    assert_eq!(
        n as u64, rows,
        "every row read once (kills: {kills}, progress {progress:?})"
    );
}

/// A seeded random differential test: random ALTERs inside and outside the
/// allow-list, random DML and folds; after every fold the current table and
/// the changelog's replay equal `SELECT *`. The seed is printed and taken
/// from SLUICE_TEST_SEED.
#[test]
fn random_ddl_keeps_the_lake_equal_to_the_source() {
    // Several seeds in every run of the suite; SLUICE_TEST_SEED replays one.
    let seeds: Vec<u64> = match std::env::var("SLUICE_TEST_SEED") {
        Ok(s) => vec![s.parse().expect("SLUICE_TEST_SEED is a number")],
        Err(_) => vec![1, 2, 3, 14018239285588361739],
    };
    for seed in seeds {
        random_ddl_against_the_source(seed);
    }
}

fn random_ddl_against_the_source(seed: u64) {
    eprintln!("random_ddl_keeps_the_lake_equal_to_the_source: SLUICE_TEST_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.r (id INT PRIMARY KEY, a INT, d DECIMAL(6,2), s VARCHAR(20));",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = sluice_with_folds(&db, lake_dir.path(), state.path());
    // The first run reads the table's shape from information_schema and
    // commits it with a row: it must be the shape the first rows were
    // written in, before any ALTER.
    db.sql("INSERT INTO shop.r (id, a, d, s) VALUES (0, 0, 0.00, 'first');");
    sluice.run_until_caught_up_ok();
    // The columns the table has (name, SELECT expression).
    let mut columns: Vec<String> = vec!["id".into(), "a".into(), "d".into(), "s".into()];
    let mut next_id = 1;
    let mut added = 0;
    for round in 0..8 {
        let mut script = String::from("SET SESSION sql_mode = '';\n");
        for _ in 0..rng.gen_range(3..12) {
            match rng.gen_range(0..4) {
                0 | 1 => {
                    script.push_str(&format!(
                        "INSERT INTO shop.r (id, a, d, s) VALUES ({next_id}, {}, {}.{:02}, 'v{}');\n",
                        rng.gen_range(-1000..1000),
                        rng.gen_range(-99..99),
                        rng.gen_range(0..100),
                        rng.gen_range(0..50)
                    ));
                    next_id += 1;
                }
                2 => script.push_str(&format!(
                    "UPDATE shop.r SET a = a + 1, d = d / 3 WHERE id % 3 = {};\n",
                    rng.gen_range(0..3)
                )),
                _ => script.push_str(&format!(
                    "DELETE FROM shop.r WHERE id = {};\n",
                    rng.gen_range(1..next_id.max(2))
                )),
            }
        }
        let ddl = match rng.gen_range(0..10) {
            0 => "ALTER TABLE shop.r MODIFY a BIGINT".to_string(),
            1 => "ALTER TABLE shop.r MODIFY d DECIMAL(10,2)".to_string(),
            2 => "ALTER TABLE shop.r MODIFY s VARCHAR(60)".to_string(),
            3 => {
                added += 1;
                columns.push(format!("x{added}"));
                format!("ALTER TABLE shop.r ADD COLUMN x{added} INT")
            }
            4 => {
                added += 1;
                columns.push(format!("x{added}"));
                format!(
                    "ALTER TABLE shop.r ADD COLUMN x{added} INT NOT NULL DEFAULT {}",
                    rng.gen_range(0..9)
                )
            }
            5 => "ALTER TABLE shop.r MODIFY d DECIMAL(10,1)".to_string(),
            6 => "ALTER TABLE shop.r MODIFY a INT NOT NULL".to_string(),
            7 => "ALTER TABLE shop.r MODIFY s VARCHAR(20) CHARACTER SET latin1".to_string(),
            8 => "ALTER TABLE shop.r MODIFY a INT NULL".to_string(),
            _ => "ALTER TABLE shop.r ADD INDEX IF NOT EXISTS ia (a)".to_string(),
        };
        script.push_str(&ddl);
        script.push_str(";\n");
        script.push_str(&format!(
            "UPDATE shop.r SET a = a - 1 WHERE id % 4 = {};\n",
            rng.gen_range(0..4)
        ));
        db.sql(&script);
        sluice.run_until_caught_up_ok();
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        let shape = Shape {
            table: "r",
            columns: &names,
            select: &names,
            key: 0,
        };
        assert_equal_to_source(
            lake_dir.path(),
            &db,
            &[shape],
            &format!("round {round} after `{ddl}` (SLUICE_TEST_SEED={seed})"),
        );
    }
}
