//! `sluice check` and the SIGTERM contract of `sluice run`.

use std::time::Duration;

use crate::common::*;

#[test]
fn check_lists_every_precondition_and_fails_on_the_wrong_format() {
    // The second server runs with binlog_format=STATEMENT.
    if external_server().is_some() {
        skip("needs a private server");
        return;
    }
    let good = MariaDb::start();
    good.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY)");
    let (lake, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sluice = Sluice::new(&good, lake.path(), state.path());
    let out = sluice.run_args(&["check"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check failed on a good server:\n{text}"
    );
    for name in [
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "privileges",
        "start",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("[ok]") && l.contains(name)),
            "[ok] {name} in:\n{text}"
        );
    }

    let statement = MariaDb::start_with(&["--binlog-format=STATEMENT"]);
    let sluice = Sluice::new(&statement, lake.path(), state.path());
    let out = sluice.run_args(&["check"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "check passed on a STATEMENT server:\n{text}"
    );
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("[FAIL]")).collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("binlog_format is STATEMENT") && failed[0].contains("ROW"),
        "{text}"
    );
    assert!(
        manifest_paths(lake.path()).is_empty(),
        "check writes nothing to the lake"
    );
}

#[test]
fn sigterm_checkpoints_and_exits_zero() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)");
    let (lake, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    // A long interval: only the shutdown checkpoint can commit these rows.
    sluice.interval = "10m".into();
    let mut running = sluice.spawn_run(false);
    db.sql("INSERT INTO shop.t VALUES (1, 1), (2, 2); UPDATE shop.t SET v = 3 WHERE id = 2;");
    let seen = wait_until(Duration::from_secs(30), || {
        running.log_text().contains("schema bootstrap")
    });
    assert!(seen, "sluice started; log:\n{}", running.log_tail(20));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        manifest_paths(lake.path()).is_empty(),
        "nothing is committed before the shutdown"
    );

    let status = running.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        running.log_tail(20)
    );
    let lake_state = Lake::read(lake.path());
    let ops: Vec<String> = lake_state
        .rows("shop.t")
        .into_iter()
        .map(|r| r.op)
        .collect();
    assert_eq!(ops, ["insert", "insert", "update"]);
}
