//! Current-state tables (DESIGN.md "Current-state tables"): `_current/<db>/<table>/`
//! is a Delta table equal to `SELECT *` on the source after catch-up, for
//! every reader, through DDL, TRUNCATE, DROP and RENAME TABLE and kills in
//! the middle of a fold; every older version equals the changelog's replay
//! up to the manifest seq it records; a fold of recent changes rewrites a
//! small part of a large table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use crate::delta::{delta_commits, read_delta};
use serde_json::Value;

const READERS: &str = crate::delta::ALL_READERS;

pub(crate) fn current_dir(lake: &Path, db: &MariaDb, table: &str) -> PathBuf {
    lake.join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join(table)
}

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;

/// The source's rows of `shop.<table>` as `columns`, keyed by the first.
pub(crate) fn source_rows(db: &MariaDb, table: &str, columns: &[&str]) -> Table {
    let cols = columns
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    db.query_rows(&format!("SELECT {cols} FROM shop.{table}"))
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
        .collect()
}

/// What each reader sees of a current table (version `version`, else the
/// latest), keyed like `source_rows`; the readers must agree.
pub(crate) fn current_rows(dir: &Path, columns: &[&str], version: Option<u64>) -> Table {
    current_rows_keyed(dir, columns, version, &[0])
}

/// [`current_rows`] keyed by the columns at `key`.
pub(crate) fn current_rows_keyed(
    dir: &Path,
    columns: &[&str],
    version: Option<u64>,
    key: &[usize],
) -> Table {
    let mut with_seq: Vec<&str> = columns.to_vec();
    with_seq.push("_seq");
    let read = read_delta(
        &dir.display().to_string(),
        &with_seq,
        version,
        &Value::Null,
        READERS,
    );
    let mut tables: Vec<(String, Table)> = Vec::new();
    for (reader, rows) in &read.rows {
        let t: Table = rows
            .iter()
            .map(|r| {
                let values = r[..columns.len()].to_vec();
                (key_of(&values, key), values)
            })
            .collect();
        assert_eq!(t.len(), rows.len(), "{reader}: duplicate keys in {dir:?}");
        tables.push((reader.clone(), t));
    }
    assert_eq!(tables.len(), READERS.split(',').count());
    for (reader, t) in &tables[1..] {
        assert_same_table(&format!("{reader} vs {}", tables[0].0), &tables[0].1, t);
    }
    tables.remove(0).1
}

/// The `txn` version (manifest seq) of each version of a current table.
fn folded_seqs(dir: &Path) -> Vec<(u64, u64)> {
    delta_commits(dir)
        .into_iter()
        .map(|(v, actions)| {
            let seq = actions
                .iter()
                .find_map(|a| a.get("txn"))
                .and_then(|t| t["version"].as_u64())
                .expect("every version has a txn");
            (v, seq)
        })
        .collect()
}

/// Every Parquet file of a current table folder is named by some commit:
/// no file of an unfinished fold is left behind.
fn assert_no_orphans(dir: &Path) {
    let logged: BTreeSet<String> = delta_commits(dir)
        .into_iter()
        .flat_map(|(_, a)| a)
        .filter_map(|a| {
            a.get("add")
                .and_then(|x| x["path"].as_str())
                .map(str::to_string)
        })
        .collect();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".parquet") {
            assert!(logged.contains(&name), "{name} in {dir:?} is in no commit");
        }
    }
}

/// The line of `sluice status` that reports `table`'s current table.
fn current_status_line(sluice: &Sluice, table: &str) -> String {
    let out = sluice.run_args(&["status"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{table} ")) && l.contains(" seq "))
        .unwrap_or_else(|| panic!("no current-table line for {table}:\n{text}"))
        .to_string()
}

#[test]
fn current_tables_equal_the_source_through_ddl_and_kills() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, a INT, b VARCHAR(20), price DECIMAL(8,2));
         CREATE TABLE shop.tr (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE shop.d (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.r (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE shop.nokey (a INT, b INT);
         CREATE TABLE shop.c1 (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE shop.k (id INT PRIMARY KEY, g INT NOT NULL, v VARCHAR(10));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();

    // Inserts, updates, deletes and a key move.
    db.sql(
        "INSERT INTO shop.t (a, b, price) VALUES (1, 'one', 1.50), (2, 'two', NULL), (3, 'three', 3.00), (4, 'four', 4.25);
         UPDATE shop.t SET b = 'TWO', price = 2.20 WHERE id = 2;
         DELETE FROM shop.t WHERE id = 3;
         UPDATE shop.t SET id = 40 WHERE id = 4;
         INSERT INTO shop.tr VALUES (1, 'a'), (2, 'b');
         INSERT INTO shop.d VALUES (1, 1);
         INSERT INTO shop.r VALUES (1, 'x'), (2, 'y');
         INSERT INTO shop.nokey VALUES (1, 1), (1, 1);
         INSERT INTO shop.c1 VALUES (1, 'p'), (2, 'q');
         INSERT INTO shop.k VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c');",
    );
    sluice.run_until_caught_up_ok();
    let t_dir = current_dir(lake.path(), &db, "t");
    let cols = ["id", "a", "b", "price"];
    assert_same_table(
        "shop.t after the first fold",
        &source_rows(&db, "t", &cols),
        &current_rows(&t_dir, &cols, None),
    );
    let first_versions = folded_seqs(&t_dir);
    assert!(!current_dir(lake.path(), &db, "nokey").exists());

    // DDL of every column form, TRUNCATE, DROP and RENAME TABLE.
    db.sql(
        "ALTER TABLE shop.t ADD COLUMN e INT;
         UPDATE shop.t SET e = id * 10;
         INSERT INTO shop.t (a, b, price, e) VALUES (5, 'five', 5.55, 50);
         ALTER TABLE shop.t RENAME COLUMN b TO bb;
         UPDATE shop.t SET bb = CONCAT(bb, '!') WHERE id = 1;
         ALTER TABLE shop.t MODIFY a BIGINT;
         ALTER TABLE shop.t DROP COLUMN e;
         INSERT INTO shop.t (a, bb, price) VALUES (6000000000, 'six', 6.00);
         TRUNCATE TABLE shop.tr;
         INSERT INTO shop.tr VALUES (3, 'c');
         DROP TABLE shop.d;
         RENAME TABLE shop.r TO shop.r2;
         UPDATE shop.r2 SET v = 'y2' WHERE id = 2;
         INSERT INTO shop.r2 VALUES (3, 'z');
         RENAME TABLE shop.c1 TO shop.c2;
         UPDATE shop.c2 SET v = 'q2' WHERE id = 2;
         RENAME TABLE shop.c2 TO shop.c3;
         INSERT INTO shop.c3 VALUES (3, 'r');
         ALTER TABLE shop.k DROP PRIMARY KEY, ADD PRIMARY KEY (g, id);
         UPDATE shop.k SET v = 'b2' WHERE id = 2;
         INSERT INTO shop.k VALUES (4, 5, 'd');",
    );
    // A kill in the middle of a fold: files written, no commit.
    sluice.env = vec![("SLUICE_TEST_ABORT_IN_FOLD".into(), "1".into())];
    let out = sluice.run_until_caught_up();
    assert!(!out.status.success(), "the fold hook did not abort");
    let before_kill = folded_seqs(&t_dir);
    assert_eq!(before_kill, first_versions, "a killed fold committed");
    // More changes, then a run that folds them all.
    db.sql(
        "UPDATE shop.t SET price = price + 1 WHERE id IN (1, 40);
         DELETE FROM shop.t WHERE id = 2;",
    );
    sluice.env.clear();
    sluice.run_until_caught_up_ok();

    let cols = ["id", "a", "bb", "price"];
    assert_same_table(
        "shop.t after DDL and a kill",
        &source_rows(&db, "t", &cols),
        &current_rows(&t_dir, &cols, None),
    );
    let read = read_delta(
        &t_dir.display().to_string(),
        &["id", "_seq"],
        None,
        &Value::Null,
        "deltalake",
    );
    // RENAME COLUMN renames; DROP drops: the current shape only.
    assert_eq!(read.schema, ["id", "a", "bb", "price", "_seq", "_ts"]);
    assert_no_orphans(&t_dir);

    let tr = current_dir(lake.path(), &db, "tr");
    assert_same_table(
        "shop.tr after TRUNCATE",
        &source_rows(&db, "tr", &["id", "v"]),
        &current_rows(&tr, &["id", "v"], None),
    );
    // A changed primary key: the table is rebuilt in the new key order.
    let k = current_dir(lake.path(), &db, "k");
    assert_same_table(
        "shop.k after a new primary key",
        &source_rows(&db, "k", &["id", "g", "v"]),
        &current_rows(&k, &["id", "g", "v"], None),
    );
    let r2 = current_dir(lake.path(), &db, "r2");
    assert_same_table(
        "shop.r2 after RENAME TABLE",
        &source_rows(&db, "r2", &["id", "v"]),
        &current_rows(&r2, &["id", "v"], None),
    );
    // A chain of renames within one refresh: the last name holds the rows.
    let c3 = current_dir(lake.path(), &db, "c3");
    assert_same_table(
        "shop.c3 after RENAME TABLE c1 TO c2, c2 TO c3",
        &source_rows(&db, "c3", &["id", "v"]),
        &current_rows(&c3, &["id", "v"], None),
    );
    assert_eq!(source_rows(&db, "c3", &["id", "v"]).len(), 3);
    // The dropped table and the renamed tables' old names end empty, or
    // never had a current table (c2 held a table only between two folds).
    for gone in ["d", "r", "c1", "c2"] {
        let dir = current_dir(lake.path(), &db, gone);
        if gone == "c2" && !dir.exists() {
            continue;
        }
        assert!(
            current_rows(&dir, &["id", "v"], None).is_empty(),
            "shop.{gone} has rows after it went"
        );
    }

    // Every older version of shop.t before the DDL equals the changelog's
    // replay up to the manifest seq it records.
    let changelog = Lake::read(lake.path());
    let cols = ["id", "a", "b", "price"];
    for (version, seq) in &first_versions {
        let rows: Vec<Row> = changelog
            .rows("shop.t")
            .into_iter()
            .filter(|r| r.manifest_seq <= *seq)
            .collect();
        let expected: Table = replay(&rows, &[0])
            .into_iter()
            .map(|(k, v)| (k, v[..cols.len()].to_vec()))
            .collect();
        assert_same_table(
            &format!("shop.t version {version} (manifest {seq})"),
            &expected,
            &current_rows(&t_dir, &cols, Some(*version)),
        );
    }

    // status: the seq reflected, and no lag after catch-up.
    let status = sluice.status_json();
    let newest = status["manifest_seq"].as_u64().unwrap();
    let t_status = &status["current_tables"]["shop.t"];
    assert_eq!(t_status["lag_manifests"], 0, "{status}");
    assert_eq!(
        t_status["seq"].as_u64().unwrap(),
        folded_seqs(&t_dir).last().unwrap().1
    );
    assert!(t_status["seq"].as_u64().unwrap() <= newest);
    let line = current_status_line(&sluice, "shop.t");
    assert!(
        line.contains(&format!("seq {}", t_status["seq"])) && line.ends_with("current"),
        "{line}"
    );
}

/// Changes that net to nothing between two folds (rows inserted and deleted
/// again) still move the folded seq: the
/// fold records it in a version without files, and `status` calls the table
/// current. A table the stream did not touch gets no version.
#[test]
fn changes_that_net_to_nothing_still_move_the_folded_seq() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.o (id INT PRIMARY KEY, v INT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    db.sql("INSERT INTO shop.t VALUES (1, 10), (2, 20); INSERT INTO shop.o VALUES (1, 1);");
    sluice.run_until_caught_up_ok();
    let t_dir = current_dir(lake.path(), &db, "t");
    let o_dir = current_dir(lake.path(), &db, "o");
    let before = folded_seqs(&t_dir);
    let o_before = folded_seqs(&o_dir);

    // Transactions of their own: each a manifest with files of shop.t.
    for round in 0..3 {
        db.sql(&format!(
            "INSERT INTO shop.t VALUES ({id}, 5);
             UPDATE shop.t SET v = 6 WHERE id = {id};
             DELETE FROM shop.t WHERE id = {id};",
            id = 100 + round
        ));
    }
    sluice.run_until_caught_up_ok();
    let after = folded_seqs(&t_dir);
    assert_eq!(after.len(), before.len() + 1, "one new version: {after:?}");
    let (version, seq) = *after.last().unwrap();
    let commits = delta_commits(&t_dir);
    let actions = &commits.last().unwrap().1;
    assert!(
        actions
            .iter()
            .all(|a| a.get("add").is_none() && a.get("remove").is_none()),
        "version {version} changes no file: {actions:?}"
    );
    let status = sluice.status_json();
    let t_status = &status["current_tables"]["shop.t"];
    assert_eq!(t_status["lag_manifests"], 0, "{status}");
    assert_eq!(t_status["seq"].as_u64().unwrap(), seq, "{status}");
    assert!(seq > before.last().unwrap().1, "{before:?} → {after:?}");
    let line = current_status_line(&sluice, "shop.t");
    assert!(line.ends_with("current"), "{line}");
    // The stream never touched shop.o: no version for it.
    assert_eq!(folded_seqs(&o_dir), o_before);
    let cols = ["id", "v"];
    assert_same_table(
        "shop.t",
        &source_rows(&db, "t", &cols),
        &current_rows(&t_dir, &cols, None),
    );
}

/// A table without a primary key is keyed by its first NOT NULL unique key,
/// as InnoDB keys it; a nullable unique key keys nothing (any number of rows
/// may have a NULL there).
#[test]
fn a_not_null_unique_key_keys_a_current_table() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.u (id INT, code VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (code));
         INSERT INTO shop.u VALUES (1, 'a', 10), (2, 'b', 20);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    // shop.u is read from information_schema at start; shop.u2 from its
    // statement in the binlog; shop.un has a nullable unique key only.
    db.sql(
        "CREATE TABLE shop.u2 (n INT NOT NULL, m INT NOT NULL, v VARCHAR(10), x INT UNIQUE, \
           UNIQUE KEY nm (m, n));
         CREATE TABLE shop.un (code INT, v INT, UNIQUE KEY (code));
         INSERT INTO shop.u VALUES (3, 'c', 30), (4, 'd', 40);
         UPDATE shop.u SET v = 21 WHERE code = 'b';
         UPDATE shop.u SET code = 'c2', v = 31 WHERE code = 'c';
         DELETE FROM shop.u WHERE code = 'a';
         INSERT INTO shop.u2 VALUES (1, 1, 'x', NULL), (1, 2, 'y', NULL), (2, 1, 'z', 5);
         UPDATE shop.u2 SET n = 3 WHERE m = 2;
         DELETE FROM shop.u2 WHERE v = 'z';
         INSERT INTO shop.un VALUES (NULL, 1), (NULL, 2), (1, 3);",
    );
    sluice.run_until_caught_up_ok();
    let u = current_dir(lake.path(), &db, "u");
    let cols = ["code", "id", "v"];
    assert_same_table(
        "shop.u",
        &source_rows(&db, "u", &cols),
        &current_rows(&u, &cols, None),
    );
    // Keyed by (m, n); the check keys rows by m, unique in these rows.
    let u2 = current_dir(lake.path(), &db, "u2");
    let cols2 = ["m", "n", "v", "x"];
    assert_same_table(
        "shop.u2",
        &source_rows(&db, "u2", &cols2),
        &current_rows(&u2, &cols2, None),
    );
    assert!(!current_dir(lake.path(), &db, "un").exists());

    // More changes, a key value moved back, then a primary key takes over.
    db.sql(
        "UPDATE shop.u SET code = 'a', v = 11 WHERE code = 'c2';
         INSERT INTO shop.u VALUES (5, 'c2', 50);
         ALTER TABLE shop.u2 ADD PRIMARY KEY (v);
         UPDATE shop.u2 SET m = 9 WHERE v = 'x';",
    );
    sluice.run_until_caught_up_ok();
    assert_same_table(
        "shop.u after more changes",
        &source_rows(&db, "u", &cols),
        &current_rows(&u, &cols, None),
    );
    let cols2 = ["v", "m", "n", "x"];
    assert_same_table(
        "shop.u2 keyed by its new primary key",
        &source_rows(&db, "u2", &cols2),
        &current_rows(&u2, &cols2, None),
    );
}

/// 2M rows in 1 MiB files: a fold of 1 % recent changes (updates of the
/// newest keys and new rows) rewrites under a tenth of the table, from the
/// sizes of the Delta log's remove and add actions.
#[test]
fn a_fold_of_recent_changes_rewrites_a_small_part_of_a_large_table() {
    const ROWS: u64 = 2_000_000;
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.big (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(40));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    // 1 MiB files, so the table (about 41 MB) spans many.
    sluice.extra =
        "[current]\nenabled = true\nrefresh = \"1s\"\ntarget_file_size = \"1MiB\"\n".into();
    db.sql(&format!(
        "INSERT INTO shop.big (v, pad) SELECT seq, MD5(seq) FROM shop.seq_1_to_{ROWS};"
    ));
    sluice.run_until_caught_up_ok();
    let dir = current_dir(lake.path(), &db, "big");
    let live_bytes = |commits: &[(u64, Vec<Value>)]| {
        let mut live: BTreeMap<String, u64> = BTreeMap::new();
        for (_, actions) in commits {
            for a in actions {
                if let Some(add) = a.get("add") {
                    live.insert(
                        add["path"].as_str().unwrap().into(),
                        add["size"].as_u64().unwrap(),
                    );
                }
                if let Some(rm) = a.get("remove") {
                    live.remove(rm["path"].as_str().unwrap());
                }
            }
        }
        live
    };
    let built = live_bytes(&delta_commits(&dir));
    assert!(built.len() >= 20, "only {} files", built.len());
    let table_bytes: u64 = built.values().sum();

    // 1 % of the rows: updates of the most recent keys and new rows.
    let one_percent = ROWS / 100;
    db.sql(&format!(
        "UPDATE shop.big SET v = -v WHERE id > {};
         INSERT INTO shop.big (v, pad) SELECT seq, 'new' FROM shop.seq_1_to_{one_percent};",
        ROWS - one_percent / 2
    ));
    sluice.run_until_caught_up_ok();
    let commits = delta_commits(&dir);
    let last = &commits.last().unwrap().1;
    let size_of = |kind: &str| -> u64 {
        last.iter()
            .filter_map(|a| a.get(kind))
            .map(|x| x["size"].as_u64().unwrap())
            .sum()
    };
    let (removed, added) = (size_of("remove"), size_of("add"));
    eprintln!(
        "table {table_bytes} bytes in {} files; fold removed {removed}, added {added}",
        built.len()
    );
    assert!(removed > 0, "the fold rewrote nothing");
    assert!(
        removed * 10 < table_bytes,
        "a fold of 1 % recent changes rewrote {removed} of {table_bytes} bytes"
    );
    assert!(added < table_bytes / 5, "added {added} of {table_bytes}");

    // 2M rows through a reader's text would take most of a minute: Polars
    // computes aggregates over every row and column instead, compared with
    // the server's (the other tests compare row by row).
    crate::delta::ensure_readers();
    let polars = Command::new("python3")
        .args([
            "-c",
            "import sys, polars as pl\n\
             t = pl.scan_delta(sys.argv[1]).select(pl.len(), pl.col('id').n_unique().alias('n'), \
             pl.col('id').sum(), pl.col('v').sum(), pl.col('pad').str.len_bytes().sum(), \
             pl.col('pad').str.contains('^new$').sum().alias('new')).collect()\n\
             print(' '.join(str(x) for x in t.row(0)))",
        ])
        .arg(&dir)
        .output()
        .expect("run python3 with polars");
    assert!(
        polars.status.success(),
        "{}",
        String::from_utf8_lossy(&polars.stderr)
    );
    let source = db
        .query_value(
            "SELECT CONCAT_WS(' ', COUNT(*), COUNT(DISTINCT id), SUM(id), SUM(v), \
             SUM(LENGTH(pad)), SUM(pad = 'new')) FROM shop.big",
        )
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&polars.stdout).trim(),
        source,
        "count, distinct ids, sum(id), sum(v), pad bytes, new rows: lake vs source"
    );
    assert!(source.starts_with(&format!("{} ", ROWS + one_percent)));
}

/// The sum of `key=N` over the "current tables folded" log lines of a run.
pub(crate) fn fold_figures(stderr: &[u8], key: &str) -> u64 {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("current tables folded"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// A seeded random workload (inserts anywhere in the key space, updates,
/// deletes and key moves, in ranges and one by one) over several folds, with
/// the smallest memory share, so that folds spill sorted runs to disk, and
/// 8 KiB files, so that they touch and split many key ranges: after each
/// fold the current table equals the source for every reader.
/// `SLUICE_TEST_SEED` replays a run. With deletion vectors (the default)
/// and without.
#[test]
fn random_changes_fold_to_the_source_through_spills_and_many_files() {
    random_changes_fold("auto");
}

#[test]
fn random_changes_fold_to_the_source_without_deletion_vectors() {
    random_changes_fold("never");
}

fn random_changes_fold(vectors: &str) {
    let (seed, mut rng) = seeded_rng(0x5eed_2026_1201);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.rnd (id INT PRIMARY KEY, g VARCHAR(12), v BIGINT, note VARCHAR(120));
         CREATE TABLE shop.still (id INT PRIMARY KEY);
         CREATE TABLE shop.nk (a INT);
         INSERT INTO shop.still VALUES (1);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.max_buffer_bytes = "1MiB".into();
    sluice.extra = format!(
        "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"8KiB\"\ndeletion_vectors = \"{vectors}\"\n"
    );
    let dir = current_dir(lake.path(), &db, "rnd");
    let cols = ["id", "g", "v", "note"];
    let mut live: BTreeSet<u64> = BTreeSet::new();
    // A sorted run left by a fold that a crash ended: the next start removes it.
    let stale = state.path().join("fold-spill/fold-crashed");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("run-00000.arrow"), b"stale").unwrap();
    const SPACE: u64 = 60_000;
    let mut spilled = 0;
    for round in 0..4 {
        let mut sql = String::from("BEGIN;\n");
        let value = |id: u64, r: u64| {
            let note = match r % 5 {
                0 => "NULL".to_string(),
                1 => format!("'ünï {r} ✓'"),
                _ => format!("'{}'", "x".repeat((r % 100) as usize)),
            };
            format!("({id}, 'g{}', {}, {note})", r % 7, r as i64 - 500_000)
        };
        let inserts = if round == 0 { 20_000 } else { 1_500 };
        let mut rows = Vec::new();
        while rows.len() < inserts {
            let id = 1 + rng(SPACE);
            if live.insert(id) {
                rows.push(value(id, rng(1_000_000)));
            }
        }
        for chunk in rows.chunks(500) {
            sql += &format!("INSERT INTO shop.rnd VALUES {};\n", chunk.join(", "));
        }
        for _ in 0..if round == 0 { 50 } else { 400 } {
            let at = 1 + rng(SPACE);
            match rng(10) {
                0..=3 => {
                    sql += &format!(
                        "UPDATE shop.rnd SET v = v + {}, note = IF(note IS NULL, 'was null', NULL) WHERE id BETWEEN {at} AND {};\n",
                        rng(100),
                        at + rng(300)
                    );
                }
                4..=5 => {
                    let to = at + rng(200);
                    sql += &format!("DELETE FROM shop.rnd WHERE id BETWEEN {at} AND {to};\n");
                    let gone: Vec<u64> = live.range(at..=to).copied().collect();
                    for id in gone {
                        live.remove(&id);
                    }
                }
                6..=7 => {
                    // A key move to a free key, anywhere.
                    if let Some(&from) = live.range(at..).next() {
                        let to = 1 + rng(SPACE);
                        if !live.contains(&to) {
                            sql += &format!(
                                "UPDATE shop.rnd SET id = {to}, g = 'moved' WHERE id = {from};\n"
                            );
                            live.remove(&from);
                            live.insert(to);
                        }
                    }
                }
                _ => {
                    let id = 1 + rng(SPACE);
                    if live.insert(id) {
                        sql += &format!(
                            "INSERT INTO shop.rnd VALUES {};\n",
                            value(id, rng(1_000_000))
                        );
                    }
                }
            }
        }
        sql += &format!("INSERT INTO shop.nk VALUES ({round});\nCOMMIT;\n");
        db.sql(&sql);
        let manifests_before = manifest_paths(lake.path()).len() as u64;
        let out = sluice.run_until_caught_up_ok();
        spilled += fold_figures(&out.stderr, "spilled_runs");
        assert!(
            !stale.exists(),
            "the spill files of a crashed fold are still there"
        );
        // A fold reads the manifests since the last complete fold, not all
        // those since shop.still last changed (or since shop.nk, which has
        // no key, appeared).
        let committed = manifest_paths(lake.path()).len() as u64 - manifests_before;
        let read = fold_figures(&out.stderr, "manifests_read");
        assert!(
            read <= committed || round == 0,
            "round {round}: the fold read {read} manifests, this run committed {committed}"
        );
        let source = source_rows(&db, "rnd", &cols);
        assert_eq!(source.len(), live.len(), "round {round}: the model drifted");
        assert_same_table(
            &format!("shop.rnd after round {round} (seed {seed})"),
            &source,
            &current_rows(&dir, &cols, None),
        );
    }
    assert!(
        spilled > 0,
        "no fold spilled: the test does not cover spills"
    );
    let files = delta_commits(&dir)
        .into_iter()
        .flat_map(|(_, a)| a)
        .filter(|a| a.get("add").is_some())
        .count();
    assert!(
        files > 20,
        "only {files} files were written: ranges barely split"
    );
    assert_no_orphans(&dir);
    let (marked, _) = vector_counts(&dir);
    if vectors == "never" {
        assert_eq!(
            marked, 0,
            "deletion vectors with deletion_vectors = \"never\""
        );
        assert!(!has_vector_feature(&dir));
    } else {
        assert!(marked > 0, "no fold wrote a deletion vector");
        assert!(has_vector_feature(&dir));
    }
}

/// How many `add` actions of a table's log carry a deletion vector, and
/// how many of its commits change no data (purges).
pub(crate) fn vector_counts(dir: &Path) -> (usize, usize) {
    let commits = delta_commits(dir);
    let marked = commits
        .iter()
        .flat_map(|(_, a)| a)
        .filter(|a| a.get("add").is_some_and(|x| !x["deletionVector"].is_null()))
        .count();
    let purges = commits
        .iter()
        .filter(|(_, a)| {
            a.iter()
                .any(|x| x.get("remove").is_some_and(|r| r["dataChange"] == false))
        })
        .count();
    (marked, purges)
}

/// Whether the newest protocol of a table has the `deletionVectors` feature.
fn has_vector_feature(dir: &Path) -> bool {
    delta_commits(dir)
        .iter()
        .flat_map(|(_, a)| a)
        .filter_map(|a| a.get("protocol"))
        .next_back()
        .is_some_and(|p| {
            p["readerFeatures"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "deletionVectors"))
        })
}

/// Fold cost per changed row and per table size, with deletion vectors and
/// without (BENCHMARKS.md, "Current-state tables"). Not a test:
/// `benches/current.sh` runs it. BENCH_ROWS: comma-separated table sizes;
/// BENCH_FILE_SIZE: target_file_size; BENCH_VECTORS: the
/// `deletion_vectors` settings to compare (default "auto,never");
/// BENCH_BACKEND=s3: the lake in a moto_server bucket. Each step's peak RSS
/// is that of the whole `sluice run --until-caught-up` (stream and fold).
/// "written" is what the fold's commit added (new files and vector files),
/// "x rows" that over the changed rows' share of the table's bytes.
#[test]
#[ignore]
fn bench_fold_cost() {
    let sizes: Vec<u64> = std::env::var("BENCH_ROWS")
        .unwrap_or_else(|_| "200000,800000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_ROWS: numbers"))
        .collect();
    let file_size = std::env::var("BENCH_FILE_SIZE").unwrap_or_else(|_| "4MiB".into());
    let modes = std::env::var("BENCH_VECTORS").unwrap_or_else(|_| "auto,never".into());
    let backend = match std::env::var("BENCH_BACKEND").as_deref() {
        Ok("s3") => Backend::S3,
        _ => Backend::Local,
    };
    println!("| rows | vectors | fold | changed rows | fold ms | ms per 1000 changed | written bytes | x rows | vector bytes | bytes removed | live files | table bytes | peak RSS MiB | read / apply / commit ms | rows copied |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for rows in sizes {
        for mode in modes.split(',') {
            bench_fold_steps(rows, mode.trim(), &file_size, backend);
        }
    }
}

fn bench_fold_steps(rows: u64, mode: &str, file_size: &str, backend: Backend) {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.big (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(40));",
    );
    let test_lake = TestLake::new(backend);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state.path());
    // sluice's own [flush] defaults: max_buffer_bytes 96 MiB, of which
    // the fold takes a quarter.
    sluice.default_flush = true;
    sluice.timeout = std::time::Duration::from_secs(3600);
    sluice.extra = format!(
        "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"{file_size}\"\ndeletion_vectors = \"{mode}\"\n"
    );
    // In steps of a million rows: one transaction per step.
    for from in (0..rows).step_by(1_000_000) {
        let n = (rows - from).min(1_000_000);
        db.sql(&format!(
            "INSERT INTO shop.big (v, pad) SELECT seq, MD5(seq) FROM shop.seq_1_to_{n};"
        ));
    }
    let one = rows / 100;
    // Random keys: a multiplicative hash of the key picks them.
    let random = |per_mille: u64, round: u64| {
        format!(
            "UPDATE shop.big SET v = v + 1 WHERE (id * 2654435761 + {round}) % 1000 < {per_mille};"
        )
    };
    // BENCH_FIXED_CHANGES=n adds a step of n random updates, the same
    // number at every table size (`% rows < n` picks them).
    let fixed: Vec<(String, String)> = std::env::var("BENCH_FIXED_CHANGES")
        .ok()
        .map(|n| {
            n.trim()
                .parse::<u64>()
                .expect("BENCH_FIXED_CHANGES: a number")
        })
        .map(|n| {
            (
                format!("{n} random"),
                format!(
                    "UPDATE shop.big SET v = v + 1 WHERE (id * 2654435761 + 4) % {rows} < {n};"
                ),
            )
        })
        .into_iter()
        .collect();
    // The newest 0.5 % updated (the build's keys are 1..=rows) and as many
    // rows new, in statements of 50,000 rows (one statement of 250,000
    // updates at 50M rows passes the server's lock table).
    let half = one / 2;
    let recent: String = (0..half)
        .step_by(50_000)
        .map(|from| {
            let to = (from + 50_000).min(half);
            format!(
                "UPDATE shop.big SET v = -v WHERE id > {} AND id <= {};
                 INSERT INTO shop.big (v, pad) SELECT seq, 'new' FROM shop.seq_1_to_{};",
                rows - half + from,
                rows - half + to,
                to - from
            )
        })
        .collect();
    let steps = [
        ("build", String::new()),
        ("0.1 % random", random(1, 1)),
        ("1 % random", random(10, 2)),
        ("0.1 % random again", random(1, 3)),
        ("1 % recent", recent),
    ];
    let mut steps: Vec<(String, String)> = steps
        .into_iter()
        .map(|(name, sql)| (name.to_string(), sql))
        .collect();
    for (i, step) in fixed.into_iter().enumerate() {
        steps.insert(2 + i, step);
    }
    for (name, sql) in steps {
        if !sql.is_empty() {
            db.sql(&sql);
        }
        let run = sluice.command(&["run", "--until-caught-up"]);
        let out = Command::new("/usr/bin/time")
            .args(["-f", "peak_rss_kib=%M"])
            .arg(run.get_program())
            .args(run.get_args())
            .envs(run.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .output()
            .expect("run sluice under /usr/bin/time");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rss_kib: u64 = String::from_utf8_lossy(&out.stderr)
            .lines()
            .find_map(|l| l.strip_prefix("peak_rss_kib="))
            .and_then(|v| v.trim().parse().ok())
            .expect("peak RSS from /usr/bin/time");
        // Why a first fold did not copy the changelog's chunks (logged at
        // debug level: RUST_LOG=info,sluice=debug).
        for line in String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("decodes its changes"))
        {
            println!("<!-- {line} -->");
        }
        let lake = test_lake.read();
        let dir = current_dir(&lake.root, &db, "big");
        let live = crate::deletion_vectors::live_files(&dir);
        let table_bytes: u64 = live.values().map(|a| a["size"].as_u64().unwrap()).sum();
        let ms = fold_figures(&out.stderr, "ms");
        let changed = fold_figures(&out.stderr, "changed_rows");
        let vector_bytes = fold_figures(&out.stderr, "vector_bytes");
        let written = fold_figures(&out.stderr, "bytes_added") + vector_bytes;
        let row_share = changed as f64 * table_bytes as f64 / rows.max(1) as f64;
        println!(
            "| {rows} | {mode} | {name} | {changed} | {ms} | {:.1} | {written} | {:.1} | {vector_bytes} | {} | {} | {table_bytes} | {} | {} / {} / {} | {} |",
            ms as f64 * 1000.0 / changed.max(1) as f64,
            written as f64 / row_share.max(1.0),
            fold_figures(&out.stderr, "bytes_removed"),
            live.len(),
            rss_kib / 1024,
            fold_figures(&out.stderr, "read_ms"),
            fold_figures(&out.stderr, "apply_ms"),
            fold_figures(&out.stderr, "commit_ms"),
            fold_figures(&out.stderr, "rows_copied"),
        );
    }
}
