//! A session can override the settings the start-up check saw: with
//! `binlog_row_image = MINIMAL` or `NOBLOB` its rows events leave columns
//! out, with `binlog_format = STATEMENT` its DML is logged as SQL text.
//! Either on a captured table stops sluice with a definite error that names
//! the table, the binlog position and the setting, and the lake keeps
//! exactly what was committed before.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::*;

const CREATE: &str = "CREATE DATABASE shop; CREATE DATABASE other;
CREATE TABLE shop.t (id INT PRIMARY KEY, v INT, note TEXT);
CREATE TABLE other.u (id INT PRIMARY KEY, v INT, note TEXT);";

/// The manifests and data files with their bytes ("untouched" is
/// literal); other objects under `_sluice/` (schema history, markers) are
/// not the lake's committed content.
fn lake_contents(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                dirs.push(path);
            } else if !rel.starts_with("_sluice/") || rel.starts_with("_sluice/manifests/") {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Rows committed under the FULL image, then `session` (SET statements and
/// one change) on a captured table: sluice must stop at that change.
/// Returns the error line and the binlog position of the change.
fn stops_at(db: &MariaDb, session: &str) -> (String, String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let s = Sluice::new(db, &dir.path().join("lake"), &dir.path().join("state"));
    db.sql("INSERT INTO shop.t VALUES (1, 10, 'a'), (2, 20, 'b')");
    s.run_until_caught_up_ok();
    let committed = lake_contents(&s.lake);
    let rows_before = Lake::read(&s.lake).rows("shop.t");
    assert_eq!(rows_before.len(), 2);

    let (file, from) = db.binlog_head();
    db.sql(session);
    let (_, to) = db.binlog_head();
    let out = s.run_until_caught_up();
    let line = assert_definite_error(&out);
    eprintln!("error line: {line}");
    assert!(line.contains("shop.t"), "names the table: {line}");
    let at = regex::Regex::new(r"decode at (\S+):(\d+): ")
        .unwrap()
        .captures(&line)
        .unwrap_or_else(|| panic!("names the position: {line}"));
    assert_eq!(&at[1], file, "{line}");
    let pos: u64 = at[2].parse().unwrap();
    assert!(
        (from..to).contains(&pos),
        "position {pos} is not inside the change's events {from}..{to}: {line}"
    );
    assert_eq!(
        lake_contents(&s.lake),
        committed,
        "the failed run changed the lake"
    );
    // A second attempt stops at the same place: nothing is skipped.
    let again = assert_definite_error(&s.run_until_caught_up());
    assert_eq!(again, line);
    (line, file, pos)
}

#[test]
fn minimal_row_image_session_is_a_definite_error() {
    // SET SESSION binlog_format/binlog_row_image needs more than the
    // external server's user may have: a private server.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let (line, _, _) = stops_at(
        &db,
        "SET SESSION binlog_row_image = MINIMAL; UPDATE shop.t SET v = 11 WHERE id = 1;",
    );
    assert!(line.contains("binlog_row_image = MINIMAL"), "{line}");
    // MINIMAL's before image holds the primary key only.
    assert!(
        line.contains("before image leaves out column(s) `v`, `note`"),
        "{line}"
    );
}

#[test]
fn noblob_row_image_session_is_a_definite_error() {
    // SET SESSION binlog_format/binlog_row_image needs more than the
    // external server's user may have: a private server.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let (line, _, _) = stops_at(
        &db,
        "SET SESSION binlog_row_image = NOBLOB; UPDATE shop.t SET v = 21 WHERE id = 2;",
    );
    assert!(line.contains("binlog_row_image = NOBLOB"), "{line}");
    assert!(
        line.contains("before image leaves out column(s) `note`"),
        "{line}"
    );
}

#[test]
fn statement_format_dml_on_a_captured_table_is_a_definite_error() {
    // SET SESSION binlog_format/binlog_row_image needs more than the
    // external server's user may have: a private server.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    // The table is named through the statement's default database.
    let (line, _, _) = stops_at(
        &db,
        "SET SESSION binlog_format = STATEMENT; USE shop; UPDATE t SET v = v + 1 WHERE id = 1;",
    );
    assert!(
        line.contains("UPDATE on captured table shop.t was logged as a statement"),
        "{line}"
    );
    assert!(line.contains("binlog_format = STATEMENT"), "{line}");
    assert!(
        line.contains("UPDATE t SET v = v + 1 WHERE id = 1"),
        "{line}"
    );
}

/// MariaDB logs a LOAD DATA in statement format as its own events
/// (Begin_load_query with the file's bytes, Execute_load_query with the
/// statement), not as a Query event.
#[test]
fn statement_format_load_data_on_a_captured_table_is_a_definite_error() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let csv = db.dir().join("rows.csv");
    std::fs::write(&csv, "5,50,e\n6,60,f\n").unwrap();
    let (line, _, _) = stops_at(
        &db,
        &format!(
            "SET SESSION binlog_format = STATEMENT;
             LOAD DATA INFILE '{}' INTO TABLE shop.t FIELDS TERMINATED BY ',';",
            csv.display()
        ),
    );
    assert!(
        line.contains("LOAD DATA on captured table shop.t was logged as a statement"),
        "{line}"
    );
    assert_eq!(
        db.query_value("SELECT COUNT(*) FROM shop.t").as_deref(),
        Some("4"),
        "the rows were loaded on the source"
    );
}

#[test]
fn statement_format_dml_on_other_tables_passes() {
    // SET SESSION binlog_format/binlog_row_image needs more than the
    // external server's user may have: a private server.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    db.sql("INSERT INTO shop.t VALUES (1, 10, 'a')");
    db.sql(
        "SET SESSION binlog_format = STATEMENT;
         USE other;
         INSERT INTO u VALUES (7, 70, 'x');
         UPDATE u SET v = 71 WHERE id = 7;
         INSERT INTO other.u SELECT id + 100, v, note FROM shop.t;
         DELETE FROM other.u WHERE id = 7;",
    );
    db.sql("UPDATE shop.t SET v = 12 WHERE id = 1; INSERT INTO shop.t VALUES (2, 20, 'b');");
    s.run_until_caught_up_ok();
    let rows = Lake::read(&s.lake).rows("shop.t");
    let ops: Vec<(&str, Vec<Option<String>>)> = rows
        .iter()
        .map(|r| (r.op.as_str(), r.values.clone()))
        .collect();
    let v = |id: &str, v: &str, note: &str| {
        vec![
            Some(id.to_string()),
            Some(v.to_string()),
            Some(note.to_string()),
        ]
    };
    assert_eq!(
        ops,
        vec![
            ("insert", v("1", "10", "a")),
            ("update", v("1", "12", "a")),
            ("insert", v("2", "20", "b")),
        ]
    );
    assert_eq!(
        db.query_value("SELECT COUNT(*) FROM other.u").as_deref(),
        Some("1")
    );
}
