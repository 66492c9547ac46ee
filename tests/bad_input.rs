//! Definite errors fail fast: non-zero exit, a last stderr line
//! `sluice: error: …` that names the problem, and nothing committed.
mod common;

use common::*;

fn setup(db: &MariaDb) -> (tempfile::TempDir, tempfile::TempDir) {
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)");
    db.sql("INSERT INTO shop.t VALUES (1, 1), (2, 2)");
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

fn assert_nothing_committed(lake: &std::path::Path) {
    let manifests = manifest_paths(lake);
    assert!(
        manifests.is_empty(),
        "a failed run committed manifests: {manifests:?}"
    );
}

fn assert_mentions(line: &str, pattern: &str) {
    eprintln!("error line: {line}");
    let re = regex::Regex::new(pattern).unwrap();
    assert!(
        re.is_match(line),
        "error line {line:?} does not match /{pattern}/"
    );
}

#[test]
fn unknown_config_key_is_named() {
    let db = MariaDb::start();
    let (lake, state) = setup(&db);
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra_flush = "max_rowz = 5".into();
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_mentions(&line, "max_rowz");
    assert_nothing_committed(lake.path());
}

#[test]
fn wrong_password_is_an_authentication_error() {
    let db = MariaDb::start();
    let (lake, state) = setup(&db);
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.password = "not-the-password".into();
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_mentions(&line, "(?i)authentic|access denied");
    assert_nothing_committed(lake.path());
}

#[test]
fn statement_binlog_format_is_refused() {
    let db = MariaDb::start_with(&["--binlog-format=STATEMENT"]);
    assert_eq!(
        db.query_value("SELECT @@binlog_format").as_deref(),
        Some("STATEMENT")
    );
    let (lake, state) = setup(&db);
    let sluice = Sluice::new(&db, lake.path(), state.path());
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_mentions(&line, "binlog_format");
    assert_mentions(&line, "ROW");
    assert_nothing_committed(lake.path());
}

#[test]
fn start_position_past_the_end_is_refused() {
    let db = MariaDb::start();
    let (lake, state) = setup(&db);
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.start_at("binlog.000001", 999_999_999);
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_mentions(&line, "(?i)past|beyond|after|exceeds|larger|greater");
    assert_mentions(&line, "(?i)end|size|head|999999999");
    assert_nothing_committed(lake.path());
}
