//! Source features against a real MariaDB: the originating SQL from
//! Annotate_rows (on and off), offline replay from binlog files, and
//! `start = { timestamp = ... }`.

use std::fs;
use std::time::Duration;

use crate::common::*;

const CREATE: &str = "CREATE DATABASE shop;
CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(32), n BIGINT);";

#[test]
fn annotate_rows_fill_sql_per_statement_within_its_transaction() {
    let db = MariaDb::start();
    if !db.is_mariadb_or_skip("Annotate_rows events") {
        return;
    }
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    // 64 bytes of the statement as written (each names one database).
    let limit = 64 + db.namespace().prefix_len();
    s.extra_source = format!("max_sql_bytes = \"{limit}\"");
    let long = "x".repeat(500);
    db.sql(&format!(
        "BEGIN;
         INSERT INTO shop.t VALUES (1, 'a', 1), (2, 'b', 2);
         UPDATE shop.t SET v = 'c' WHERE id = 1;
         COMMIT;
         INSERT INTO shop.t VALUES (3, '{short}', LENGTH('{long}'));
         DELETE FROM shop.t WHERE id = 2;",
        short = "é",
    ));
    s.run_until_caught_up_ok();
    let lake = Lake::read(&s.lake);
    let rows = lake.rows("shop.t");
    let sql: Vec<(String, Option<String>)> =
        rows.iter().map(|r| (r.op.clone(), r.sql.clone())).collect();
    assert_eq!(sql.len(), 5, "{sql:?}");
    assert_eq!(
        sql[0],
        (
            "insert".into(),
            Some("INSERT INTO shop.t VALUES (1, 'a', 1), (2, 'b', 2)".into())
        )
    );
    assert_eq!(sql[1].1, sql[0].1, "both rows of one statement carry it");
    assert_eq!(
        sql[2],
        (
            "update".into(),
            Some("UPDATE shop.t SET v = 'c' WHERE id = 1".into())
        )
    );
    // Cut at 64 bytes, never inside a UTF-8 character.
    let cut = sql[3].1.clone().expect("the long statement is there");
    assert!(cut.len() <= 64, "{cut}");
    assert!(
        cut.starts_with("INSERT INTO shop.t VALUES (3, 'é', LENGTH('xxx"),
        "{cut}"
    );
    assert!(
        cut.len() >= 60,
        "cut near the limit, not far before it: {cut}"
    );
    assert_eq!(
        sql[4],
        (
            "delete".into(),
            Some("DELETE FROM shop.t WHERE id = 2".into())
        )
    );
}

#[test]
fn without_annotations_sql_is_null() {
    let Some(db) = MariaDb::start_private(&["--binlog-annotate-row-events=OFF"]) else {
        return;
    };
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    db.sql("INSERT INTO shop.t VALUES (1, 'a', 1); UPDATE shop.t SET n = 5;");
    s.run_until_caught_up_ok();
    let rows = Lake::read(&s.lake).rows("shop.t");
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.sql.is_none()), "{rows:?}");
}

fn copy_binlogs(db: &MariaDb, to: &std::path::Path) -> Vec<String> {
    fs::create_dir_all(to).unwrap();
    let mut names = Vec::new();
    for entry in fs::read_dir(db.dir().join("data")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("binlog.") && !name.ends_with(".index") && !name.ends_with(".state") {
            fs::copy(entry.path(), to.join(&name)).unwrap();
            names.push(name);
        }
    }
    names.sort();
    names
}

fn write_batch(db: &MariaDb, from: i64, to: i64) {
    let mut sql = String::new();
    for id in from..to {
        sql.push_str(&format!(
            "INSERT INTO shop.t (id, v, n) VALUES ({id}, 'v{id}', {n});",
            n = id * 7
        ));
        if id % 3 == 0 {
            sql.push_str(&format!("UPDATE shop.t SET v = 'u{id}' WHERE id = {id};"));
        }
        if id % 5 == 0 {
            sql.push_str(&format!("DELETE FROM shop.t WHERE id = {};", id - 1));
        }
    }
    db.sql(&sql);
}

#[test]
fn offline_replay_from_binlog_files_equals_the_source_and_resumes() {
    let Some(db) = MariaDb::start_private(&["--binlog-row-metadata=FULL"]) else {
        return;
    };
    db.sql(CREATE);
    write_batch(&db, 0, 300);
    // After the ALTER every row is rewritten, so the replay has one shape.
    db.sql("FLUSH BINARY LOGS; ALTER TABLE shop.t ADD COLUMN extra INT DEFAULT 4; UPDATE shop.t SET extra = 5;");
    write_batch(&db, 300, 600);
    db.sql("FLUSH BINARY LOGS;");
    let dir = tempfile::tempdir().unwrap();
    let binlogs = dir.path().join("binlogs");
    let copied = copy_binlogs(&db, &binlogs);
    assert!(copied.len() >= 3, "{copied:?}");

    // Offline, without any server: shapes come from the CREATE/ALTER in the
    // stream and FULL metadata.
    let mut s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    s.url = String::new();
    s.start = "\"earliest\"".into();
    s.extra_source = format!("binlog_dir = '{}'", binlogs.display());
    let out = s.run_args(&["run"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lake = Lake::read(&s.lake);
    let first_rows = lake.row_count("shop.t");
    assert!(first_rows > 600, "{first_rows}");

    // More changes arrive in new files; a second replay resumes where the
    // first stopped: no row twice, none lost.
    write_batch(&db, 600, 800);
    db.sql("UPDATE shop.t SET n = n + 1 WHERE id < 50; FLUSH BINARY LOGS;");
    copy_binlogs(&db, &binlogs);
    let out = s.run_args(&["run"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lake = Lake::read(&s.lake);
    let rows = lake.rows("shop.t");
    let mut seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), rows.len(), "a _seq appears twice");
    let replayed = lake.replay("shop.t", &[0]);
    let source = db.table_map("SELECT id, v, n, extra FROM shop.t", &[0]);
    assert_eq!(replayed.len(), source.len());
    for (key, row) in &source {
        assert_eq!(
            replayed.get(key),
            Some(row),
            "row {key:?} differs from the source"
        );
    }
    assert!(rows.iter().all(|r| r.binlog_file.starts_with("binlog.")));
}

#[test]
fn offline_replay_refuses_a_missing_directory_and_file() {
    // Copies the server's binlog files.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    s.url = String::new();
    s.extra_source = format!("binlog_dir = '{}'", dir.path().join("nope").display());
    let out = s.run_args(&["run"], &[]);
    let err = assert_definite_error(&out);
    assert!(
        err.contains("source.binlog_dir") && err.contains("not a directory"),
        "{err}"
    );

    let empty = dir.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    s.extra_source = format!("binlog_dir = '{}'", empty.display());
    let err = assert_definite_error(&s.run_args(&["run"], &[]));
    assert!(err.contains("holds no binlog files"), "{err}");

    let binlogs = dir.path().join("binlogs");
    copy_binlogs(&db, &binlogs);
    s.extra_source = format!("binlog_dir = '{}'", binlogs.display());
    s.start = "{ file = \"binlog.000042\", pos = 4 }".into();
    let err = assert_definite_error(&s.run_args(&["run"], &[]));
    assert!(err.contains("binlog.000042"), "{err}");
    assert!(manifest_paths(&s.lake).is_empty(), "nothing was committed");
}

#[test]
fn start_at_a_timestamp_begins_with_the_first_transaction_at_or_after_it() {
    // Rotates binlogs, and expects no other writer between its transactions.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    write_batch(&db, 0, 50);
    db.sql("FLUSH BINARY LOGS;");
    write_batch(&db, 50, 100);
    // Binlog timestamps have whole seconds: leave a clear gap.
    std::thread::sleep(Duration::from_millis(1100));
    let at: i64 = db
        .query_value("SELECT UNIX_TIMESTAMP()")
        .unwrap()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    db.sql("INSERT INTO shop.t VALUES (1000, 'after', 1);");
    db.sql("FLUSH BINARY LOGS;");
    write_batch(&db, 1001, 1010);
    let rfc3339 = chrono_like(at);
    s.start = format!("{{ timestamp = \"{rfc3339}\" }}");
    s.run_until_caught_up_ok();
    let rows = Lake::read(&s.lake).rows("shop.t");
    assert_eq!(rows[0].values[0].as_deref(), Some("1000"), "{:?}", rows[0]);
    assert!(rows
        .iter()
        .all(|r| r.values[0].as_deref().unwrap().parse::<i64>().unwrap() >= 1000));
    assert!(rows.len() >= 10, "{}", rows.len());

    // A time after everything: nothing to do yet, starts at the head.
    let mut later = Sluice::new(&db, &dir.path().join("lake2"), &dir.path().join("state2"));
    later.start = format!("{{ timestamp = \"{}\" }}", chrono_like(at + 3600));
    later.run_until_caught_up_ok();
    assert!(manifest_paths(&later.lake).is_empty());
}

/// Seconds since the epoch as RFC 3339 UTC.
fn chrono_like(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
