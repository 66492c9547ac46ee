//! Transaction boundaries (DESIGN.md, "Rows"): only XID/COMMIT and DDL outside
//! a transaction end one. Savepoints, ROLLBACK TO SAVEPOINT and the CREATE
//! TABLE of a CREATE TABLE … SELECT are inside their transaction; rows that a
//! logged ROLLBACK TO SAVEPOINT took back never reach the lake.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;

/// `(event type, start, end, info)` of every event of the server's binlog files.
fn binlog_events(db: &MariaDb) -> Vec<(String, String, u64, u64, String)> {
    let mut events = Vec::new();
    for file in db.query_rows("SHOW BINARY LOGS") {
        let name = file[0].clone().unwrap();
        for e in db.query_rows(&format!("SHOW BINLOG EVENTS IN '{name}'")) {
            events.push((
                name.clone(),
                e[2].clone().unwrap(),
                e[1].clone().unwrap().parse().unwrap(),
                e[4].clone().unwrap().parse().unwrap(),
                e[5].clone().unwrap_or_default(),
            ));
        }
    }
    events
}

/// Every manifest's cursor is where a transaction ends: after an XID, a
/// COMMIT or ROLLBACK, a DDL statement outside a transaction, or the events a
/// binlog file begins with; never after a SAVEPOINT or a statement inside a
/// transaction.
fn assert_cursors_at_boundaries(db: &MariaDb, lake: &Lake) {
    let events = binlog_events(db);
    let mut inside = false;
    let mut boundaries = BTreeSet::new();
    let mut inner = BTreeSet::new();
    for (file, ty, start, end, info) in &events {
        let upper = info.to_ascii_uppercase();
        match ty.as_str() {
            "Gtid" => {
                // MariaDB: "BEGIN GTID …" opens a transaction; a bare "GTID …" is a DDL of its own.
                inside = upper.starts_with("BEGIN") || upper.starts_with("XA START");
                if !inside {
                    boundaries.insert((file.clone(), *start));
                }
            }
            "Query" if upper == "BEGIN" => inside = true,
            "Query" | "Xid" | "XA_prepare"
                if !inside
                    || ty == "Xid"
                    || ty == "XA_prepare"
                    || upper.starts_with("COMMIT")
                    || upper == "ROLLBACK" =>
            {
                inside = false;
                boundaries.insert((file.clone(), *end));
            }
            "Query" => {
                inner.insert((file.clone(), *end));
            }
            "Format_desc" | "Gtid_list" | "Binlog_checkpoint" | "Previous_gtids" | "Rotate" => {
                boundaries.insert((file.clone(), *end));
            }
            _ => {}
        }
    }
    assert!(
        !inner.is_empty(),
        "the workload has statements inside transactions"
    );
    for m in &lake.manifests {
        let at = (
            m["cursor"]["file"].as_str().unwrap().to_string(),
            m["cursor"]["pos"].as_u64().unwrap(),
        );
        assert!(
            !inner.contains(&at),
            "manifest {} committed inside a transaction, at {at:?}",
            m["seq"]
        );
        assert!(
            boundaries.contains(&at),
            "manifest {} cursor {at:?} is not a transaction boundary",
            m["seq"]
        );
    }
}

/// Rows grouped by `_tx_seq`: (gtid, ids).
fn transactions(rows: &[Row]) -> BTreeMap<i64, (Option<String>, Vec<String>)> {
    let mut txs: BTreeMap<i64, (Option<String>, Vec<String>)> = BTreeMap::new();
    for r in rows {
        let e = txs.entry(r.tx_seq).or_insert((r.gtid.clone(), Vec::new()));
        assert_eq!(e.0, r.gtid, "one transaction, one GTID: {r:?}");
        e.1.push(r.values[0].clone().unwrap());
    }
    txs
}

#[test]
fn savepoints_neither_end_a_transaction_nor_keep_rolled_back_rows() {
    savepoint_workload(500_000);
}

/// With one row per buffer, the rows taken back are already in pending files
/// when ROLLBACK TO arrives: those files are written again without them.
#[test]
fn rows_taken_back_after_they_were_written_out_are_rewritten_away() {
    savepoint_workload(1);
}

fn savepoint_workload(max_rows: u64) {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB;
         CREATE TABLE shop.m (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=Aria TRANSACTIONAL=0;",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    // Every boundary is a checkpoint: one taken at a savepoint would show.
    sluice.interval = "1ms".into();
    sluice.max_rows = max_rows;
    db.sql(
        "BEGIN; INSERT INTO shop.t VALUES (1, 'a'); SAVEPOINT s1; INSERT INTO shop.t VALUES (2, 'b');
                ROLLBACK TO SAVEPOINT s1; INSERT INTO shop.t VALUES (3, 'c'); COMMIT;
         -- Aria is not transactional: the server cannot truncate its binlog
         -- cache, so the rolled-back rows are logged, then ROLLBACK TO.
         BEGIN; INSERT INTO shop.t VALUES (10, 'x'); SAVEPOINT `Sp 1`;
                INSERT INTO shop.t VALUES (11, 'gone'); UPDATE shop.t SET v = 'gone' WHERE id = 1;
                INSERT INTO shop.m VALUES (1, 'kept');
                SAVEPOINT s2; INSERT INTO shop.t VALUES (12, 'gone');
                ROLLBACK TO SAVEPOINT `sp 1`;
                INSERT INTO shop.t VALUES (13, 'y'); SAVEPOINT s3; DELETE FROM shop.t WHERE id = 3;
                INSERT INTO shop.m VALUES (2, 'kept'); ROLLBACK TO s3;
                UPDATE shop.t SET v = 'z' WHERE id = 13; COMMIT;
         BEGIN; INSERT INTO shop.t VALUES (20, 'r'); SAVEPOINT s1; INSERT INTO shop.m VALUES (3, 'kept');
                INSERT INTO shop.t VALUES (21, 'r'); ROLLBACK;
         INSERT INTO shop.t VALUES (30, 'after');",
    );
    let logged = binlog_events(&db)
        .iter()
        .filter(|e| e.4.to_ascii_uppercase().starts_with("ROLLBACK TO"))
        .count();
    assert_eq!(
        logged, 2,
        "the server logged both ROLLBACK TO of the Aria transaction"
    );
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(&sluice.lake);
    assert_cursors_at_boundaries(&db, &lake);

    // Replay keys are text: order the source the same way.
    let mut source = db.query_rows("SELECT id, v FROM shop.t");
    source.sort();
    let replayed: Vec<Vec<Option<String>>> = lake.replay("shop.t", &[0]).into_values().collect();
    assert_eq!(replayed, source, "replay equals SELECT *");
    let rows = lake.rows("shop.t");
    assert!(
        rows.iter().all(|r| r.values[1].as_deref() != Some("gone")),
        "no row that ROLLBACK TO SAVEPOINT took back: {rows:?}"
    );
    let txs = transactions(&rows);
    let ids: Vec<Vec<String>> = txs.values().map(|t| t.1.clone()).collect();
    assert_eq!(
        ids,
        [vec!["1", "3"], vec!["10", "13", "13"], vec!["30"]]
            .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        "one _tx_seq per transaction; the InnoDB rows of the rolled-back transaction are gone"
    );
    assert!(
        txs.values().all(|t| t.0.is_some()),
        "every row has its GTID"
    );
    let m_rows = lake.replay("shop.m", &[0]).len();
    assert_eq!(m_rows, 3, "the Aria rows stay, as on the server");
}

#[test]
fn create_table_select_rows_carry_the_transaction_gtid() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.src (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO shop.src VALUES (1, 'a'), (2, 'b'), (3, 'c');",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    sluice.interval = "1ms".into();
    db.sql(
        "CREATE TABLE shop.copy ENGINE=InnoDB SELECT * FROM shop.src WHERE id < 3;
         INSERT INTO shop.copy VALUES (9, 'z');",
    );
    let ctas_gtid = binlog_events(&db)
        .iter()
        .rev()
        .filter(|e| e.1 == "Gtid")
        .nth(1)
        .map(|e| e.4.rsplit(' ').next().unwrap().to_string())
        .unwrap();
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(&sluice.lake);
    assert_cursors_at_boundaries(&db, &lake);
    let rows = lake.rows("shop.copy");
    let txs = transactions(&rows);
    let got: Vec<(Option<String>, Vec<String>)> = txs.into_values().collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0.as_deref(), Some(ctas_gtid.as_str()));
    assert_eq!(got[0].1, ["1", "2"]);
    assert_eq!(got[1].1, ["9"]);
    let replayed: Vec<Vec<Option<String>>> = lake.replay("shop.copy", &[0]).into_values().collect();
    assert_eq!(
        replayed,
        db.query_rows("SELECT id, v FROM shop.copy ORDER BY id")
    );
}

/// Files under `_sluice/xa/` (held rows of prepared XA transactions).
fn held_files(lake: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&lake.join("_sluice").join("xa"), &mut out);
    out
}

#[test]
fn xa_rows_reach_the_lake_at_xa_commit_and_never_after_xa_rollback() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB;
         CREATE TABLE shop.u (id INT PRIMARY KEY) ENGINE=InnoDB;",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    sluice.interval = "1ms".into();
    // Prepared transactions outlive their session (MariaDB 10.5+): each
    // statement batch here is a session of its own.
    db.sql(
        "XA START 'x1'; INSERT INTO shop.t VALUES (1, 'x1'); INSERT INTO shop.u VALUES (1);
         UPDATE shop.t SET v = 'x1 again' WHERE id = 1; XA END 'x1'; XA PREPARE 'x1';",
    );
    db.sql(
        "XA START 'x2', 'b', 7; INSERT INTO shop.t VALUES (2, 'x2'); XA END 'x2', 'b', 7; XA PREPARE 'x2', 'b', 7;",
    );
    db.sql("INSERT INTO shop.t VALUES (3, 'plain');");
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(&sluice.lake);
    let ids: Vec<String> = lake
        .rows("shop.t")
        .iter()
        .map(|r| r.values[0].clone().unwrap())
        .collect();
    assert_eq!(ids, ["3"], "prepared rows wait for their XA COMMIT");
    let last = lake.manifests.last().unwrap();
    let prepared: Vec<&str> = last["xa_prepared"]
        .as_array()
        .expect("the manifest lists the prepared transactions")
        .iter()
        .map(|x| x["xid"].as_str().unwrap())
        .collect();
    assert_eq!(prepared, ["X'7831',X'',1", "X'7832',X'62',7"]);
    assert_eq!(held_files(&sluice.lake).len(), 3, "x1: t and u; x2: t");

    // A new run (a restart) resolves them: x2 rolled back, x1 committed after
    // a later transaction, x3 one phase.
    db.sql(
        "INSERT INTO shop.t VALUES (4, 'plain');
         XA ROLLBACK 'x2', 'b', 7;
         XA COMMIT 'x1';
         XA START 'x3'; INSERT INTO shop.t VALUES (5, 'x3'); XA END 'x3'; XA COMMIT 'x3' ONE PHASE;
         XA START 'x4'; INSERT INTO shop.t VALUES (6, 'x4'); XA END 'x4'; XA PREPARE 'x4';",
    );
    db.sql("XA COMMIT 'x4';");
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(&sluice.lake);
    let rows = lake.rows("shop.t");
    let order: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.values[0].clone().unwrap(), r.op.clone()))
        .collect();
    assert_eq!(
        order,
        [
            ("3", "insert"),
            ("4", "insert"),
            ("1", "insert"),
            ("1", "update"),
            ("5", "insert"),
            ("6", "insert")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string())),
        "in commit order, x2 nowhere"
    );
    let replayed: Vec<Vec<Option<String>>> = lake.replay("shop.t", &[0]).into_values().collect();
    assert_eq!(
        replayed,
        db.query_rows("SELECT id, v FROM shop.t ORDER BY id")
    );
    assert_eq!(lake.replay("shop.u", &[0]).len(), 1);
    let txs = transactions(&rows);
    assert_eq!(txs.len(), 5, "x1's rows share one _tx_seq: {txs:?}");
    assert!(lake.manifests.last().unwrap().get("xa_prepared").is_none());
    assert!(
        held_files(&sluice.lake).is_empty(),
        "held files of resolved transactions are deleted: {:?}",
        held_files(&sluice.lake)
    );
    assert_cursors_at_boundaries(&db, &lake);
}
