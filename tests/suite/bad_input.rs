//! Definite errors fail fast: non-zero exit, a last stderr line
//! `sluice: error: …` that names the problem, and nothing committed.

use crate::common::*;

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

/// Rewrites a lake as the first release left it: manifests without `types`,
/// schema versions with the Arrow types it mapped (`old`: column → type).
fn as_first_release(lake: &std::path::Path, old: &[(&str, &str)]) {
    for path in manifest_paths(lake) {
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        m.as_object_mut().unwrap().remove("types");
        std::fs::write(&path, m.to_string()).unwrap();
    }
    let dir = lake.join("_sluice/schema/shop/old");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for c in v["columns"].as_array_mut().unwrap() {
            if let Some((_, t)) = old.iter().find(|(n, _)| c["name"] == *n) {
                c["arrow_type"] = (*t).into();
            }
        }
        std::fs::write(&path, v.to_string()).unwrap();
    }
}

/// DESIGN.md "Types": the first release wrote UInt, Duration and Decimal256,
/// which Delta Lake cannot hold. `run` and `status` refuse such a lake with
/// the way out instead of writing the column in a second type; a lake of the
/// first release whose types all map as today continues, and its next
/// manifest records the mapping.
#[test]
fn a_lake_of_the_first_releases_types_is_refused_with_the_way_out() {
    let db = MariaDb::start();
    let (lake, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sluice = Sluice::new(&db, lake.path(), state.path());
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.old (id BIGINT PRIMARY KEY, qty INT UNSIGNED, tm TIME(6), note VARCHAR(10));
         INSERT INTO shop.old VALUES (1, 4000000000, '-1:00:00.5', 'a')",
    );
    sluice.run_until_caught_up_ok();
    let committed = manifest_paths(lake.path());
    let newest = |paths: &[std::path::PathBuf]| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(paths.last().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(
        newest(&committed)["types"],
        2,
        "a new lake records its mapping"
    );

    as_first_release(lake.path(), &[("qty", "UInt32"), ("tm", "Duration(µs)")]);
    db.sql("INSERT INTO shop.old VALUES (2, 5, '00:00:01', 'b')");
    for out in [
        sluice.run_until_caught_up(),
        sluice.run_args(&["status"], &["--json"]),
    ] {
        let line = assert_definite_error(&out);
        assert_mentions(&line, "earlier sluice");
        assert_mentions(
            &line,
            r"(?i)shop\.old\.qty int(\(10\))? unsigned is UInt32 there, Int64 now",
        );
        assert_mentions(&line, "start a new lake at another path or prefix");
        assert_mentions(&line, "readable as Parquet");
    }
    assert_eq!(
        manifest_paths(lake.path()),
        committed,
        "a refused run commits nothing"
    );

    // Without a type this release writes differently, the lake continues.
    as_first_release(lake.path(), &[("qty", "Int64"), ("tm", "Int64")]);
    sluice.run_until_caught_up_ok();
    let now = manifest_paths(lake.path());
    assert!(
        now.len() > committed.len(),
        "the second insert is committed"
    );
    assert_eq!(newest(&now)["types"], 2);
    let rows = Lake::read(lake.path()).replay("shop.old", &[0]);
    assert_eq!(
        rows[&vec!["2".to_string()]][1..3],
        [Some("5".to_string()), Some("1000000".to_string())]
    );
}
