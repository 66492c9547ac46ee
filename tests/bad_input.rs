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
    let Some(db) = MariaDb::start_private(&["--binlog-format=STATEMENT"]) else {
        return;
    };
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

/// A store that cannot write put-if-absent could let two writers commit: sluice
/// refuses to start on it. moto_server does honour `If-None-Match: *`, so the
/// S3 client's conditional put is switched off (`AWS_CONDITIONAL_PUT=disabled`)
/// to stand for a store without it; `sluice check` reports the same.
#[test]
fn store_without_put_if_absent_is_refused() {
    let db = MariaDb::start();
    let (_, state) = setup(&db);
    let lake = TestLake::new(Backend::S3);
    let mut sluice = lake.sluice(&db, state.path());
    sluice
        .env
        .push(("AWS_CONDITIONAL_PUT".into(), "disabled".into()));
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_mentions(&line, "put-if-absent");
    assert_mentions(&line, "s3://sluice-lake/warehouse/cdc");
    assert_eq!(
        lake.manifest_count(),
        0,
        "a refused run committed a manifest"
    );
    assert!(
        lake.data_files().is_empty(),
        "a refused run wrote data files"
    );

    let check = sluice.run_args(&["check"], &[]);
    assert!(
        !check.status.success(),
        "sluice check passed a store without put-if-absent"
    );
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("[FAIL] lake") && l.contains("put-if-absent")),
        "sluice check must report the lake: {report}"
    );

    // With conditional writes on, the same lake passes.
    sluice.env.retain(|(k, _)| k != "AWS_CONDITIONAL_PUT");
    let check = sluice.run_args(&["check"], &[]);
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && report.lines().any(|l| l.starts_with("[ok] lake")),
        "sluice check on moto: {report}{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
