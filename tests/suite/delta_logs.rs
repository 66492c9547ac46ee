//! The Delta logs stay right (DESIGN.md "Schema changes in the tables" >
//! "The Delta logs stay right"): checkpoints carry the recent `remove`
//! tombstones, so a full VACUUM by delta-rs keeps every file that a version
//! of the last 7 days reads; a rewrite that changes values is a data change;
//! a fold whose commit answer is lost reads the log back before it deletes
//! anything; a table whose Delta commits fail shows its lag in `status`,
//! `/metrics` and `/readyz`, and catches up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::common::proxy::{Fault, FaultProxy, Rule};
use crate::common::*;
use crate::delta::{delta_commits, ensure_readers, read_delta};
use crate::http::{free_port, get, samples};
use serde_json::Value;

/// Replays the JSON commits of a Delta table: every version names only
/// files that exist. Returns the number of versions.
pub(crate) fn assert_every_version_names_existing_files(table_dir: &Path) -> usize {
    let commits = delta_commits(table_dir);
    let mut live: BTreeSet<String> = BTreeSet::new();
    for (i, (v, actions)) in commits.iter().enumerate() {
        assert_eq!(*v, i as u64, "{table_dir:?}: versions have no gaps");
        for a in actions {
            if let Some(p) = a.get("add").and_then(|x| x["path"].as_str()) {
                live.insert(p.to_string());
            }
            if let Some(p) = a.get("remove").and_then(|x| x["path"].as_str()) {
                live.remove(p);
            }
        }
        for f in &live {
            assert!(
                table_dir.join(f).is_file(),
                "version {v} of {table_dir:?} names {f}, which is gone"
            );
        }
    }
    commits.len()
}

/// What tests/delta_versions.py saw: per version, its files and each
/// reader's rows.
type Versions = BTreeMap<u64, Value>;

fn read_versions(table_dir: &Path, columns: &[&str], vacuum: bool) -> (Vec<String>, Versions) {
    ensure_readers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta_versions.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(table_dir).arg(columns.join(","));
    if vacuum {
        cmd.arg("--vacuum");
    }
    let out = cmd.output().expect("run tests/delta_versions.py");
    assert!(
        out.status.success(),
        "reading the versions of {table_dir:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from delta_versions.py");
    let vacuumed = v["vacuumed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let versions = v["versions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, x)| (k.parse().unwrap(), x.clone()))
        .collect();
    (vacuumed, versions)
}

/// Every reader read the same rows of every version, and Spark read the
/// latest.
fn assert_readers_agree_on_every_version(what: &str, versions: &Versions) {
    let latest = versions.values().last().unwrap();
    assert!(
        latest["rows"].as_object().unwrap().contains_key("spark"),
        "{what}: Spark read the latest version"
    );
    for (v, seen) in versions {
        let rows = seen["rows"].as_object().unwrap();
        // Spark (Sail) reads versions 0, 1 and from the newest checkpoint on
        // (tests/delta_versions.py says why).
        let spark = rows.contains_key("spark");
        assert_eq!(rows.len(), 3 + usize::from(spark), "{what} version {v}");
        let first = &rows["deltalake"];
        for (reader, r) in rows {
            assert_eq!(r, first, "{what} version {v}: {reader} vs deltalake");
        }
    }
}

/// Sets the modification time of every Parquet file under `dir` back `age`.
fn age_parquet_files(dir: &Path, age: Duration) -> usize {
    let mut n = 0;
    let then = SystemTime::now() - age;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            n += age_parquet_files(&path, age);
        } else if path.extension().is_some_and(|e| e == "parquet") {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(then)
                .unwrap();
            n += 1;
        }
    }
    n
}

/// A fold and a type rewrite remove files; every data file is then made 8
/// days old (the removes stay recent), and a full VACUUM by `deltalake` at
/// the default retention runs on both tables after checkpoints were
/// written: every version still reads, alike for every reader, and no
/// version names a missing file. The rewrite that changed values (a BIGINT
/// of 2^53 + 1 in the DOUBLE that the column became) is a data change.
#[test]
fn a_full_vacuum_keeps_every_file_a_recent_version_reads() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v INT, price DECIMAL(8,2),
                              big BIGINT DEFAULT 9007199254740993);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    // A checkpoint every 4 versions: the default 100 needs 100 runs.
    sluice
        .env
        .push(("SLUICE_TEST_CHECKPOINT_INTERVAL".into(), "4".into()));
    db.sql("INSERT INTO shop.t (id, v, price) VALUES (1, 1, 2.50), (2, 2, -2.50), (3, 3, 3.00);");
    sluice.run_until_caught_up_ok();
    let round = |r: i32| {
        db.sql(&format!(
            "UPDATE shop.t SET v = v + 10 WHERE id <= 2;
             INSERT INTO shop.t (id, v, price) VALUES ({}, {r}, 1.00);",
            100 + r
        ));
        sluice.run_until_caught_up_ok();
    };
    for r in 1..=5 {
        round(r);
    }
    // The changelog's files are copied in the supertypes: `price` in
    // DECIMAL(21,2) (2.50 stays 2.50, 7 is 7.00), `big` in DOUBLE, which
    // rounds 2^53 + 1.
    db.sql(
        "ALTER TABLE shop.t MODIFY price INT, MODIFY big DOUBLE;
         INSERT INTO shop.t (id, v, price) VALUES (20, 20, 7);",
    );
    sluice.run_until_caught_up_ok();
    for r in 6..=10 {
        round(r);
    }

    let shop = db.namespace().to_server("shop").into_owned();
    let changelog = lake.path().join(&shop).join("t");
    let current = lake.path().join("_current").join(&shop).join("t");
    for dir in [&changelog, &current] {
        assert!(
            dir.join("_delta_log").join("_last_checkpoint").is_file(),
            "{dir:?} has a checkpoint"
        );
    }
    // The rewrite: every remove and add is a data change.
    let commits = delta_commits(&changelog);
    let rewrite = commits
        .iter()
        .find(|(_, a)| {
            a.iter()
                .any(|x| x["commitInfo"]["sluice"].get("rewritten").is_some())
        })
        .expect("a rewrite commit");
    let files: Vec<&Value> = rewrite
        .1
        .iter()
        .filter_map(|a| a.get("add").or_else(|| a.get("remove")))
        .collect();
    assert!(files.len() >= 2, "{rewrite:?}");
    for f in files {
        assert_eq!(f["dataChange"], true, "version {}: {f}", rewrite.0);
    }
    let removed_by_rewrite = rewrite
        .1
        .iter()
        .filter(|a| a.get("remove").is_some())
        .count();
    assert!(removed_by_rewrite >= 1);
    let fold_removes = delta_commits(&current)
        .iter()
        .flat_map(|(_, a)| a)
        .filter(|a| a.get("remove").is_some())
        .count();
    assert!(fold_removes >= 5, "folds removed {fold_removes} files");

    let columns = ["_seq", "id", "v", "price"];
    let before_changelog = read_versions(&changelog, &columns, false).1;
    let before_current = read_versions(&current, &columns, false).1;
    assert!(before_changelog.len() >= 12, "{}", before_changelog.len());
    assert!(before_current.len() >= 10, "{}", before_current.len());
    assert_readers_agree_on_every_version("shop.t", &before_changelog);
    assert_readers_agree_on_every_version("_current/shop/t", &before_current);

    // Every file is 8 days old; a stray file too, which VACUUM must delete.
    std::fs::copy(
        current.join(
            before_current.values().last().unwrap()["files"][0]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap(),
        ),
        current.join("stray.parquet"),
    )
    .unwrap();
    let aged = age_parquet_files(lake.path(), Duration::from_secs(8 * 86_400));
    assert!(aged > 20, "{aged} files");

    let (vacuumed, after_changelog) = read_versions(&changelog, &columns, true);
    // VACUUM deletes only the manifests' files that no version names: those
    // written after the type change, whose rows every version reads from
    // their copies in the supertype (`_rewritten/`).
    let named: BTreeSet<String> = delta_commits(&changelog)
        .iter()
        .flat_map(|(_, a)| a)
        .filter_map(|a| a.get("add").and_then(|x| x["path"].as_str()))
        .map(str::to_string)
        .collect();
    for f in &vacuumed {
        let name = f.rsplit('/').next().unwrap();
        assert!(
            !named.contains(name) && named.iter().any(|n| n.ends_with(&format!("-{name}"))),
            "VACUUM deleted {f}, which a version of shop.t names or which has no copy"
        );
    }
    let (vacuumed, after_current) = read_versions(&current, &columns, true);
    assert_eq!(
        vacuumed
            .iter()
            .map(|f| f.rsplit('/').next().unwrap())
            .collect::<Vec<_>>(),
        ["stray.parquet"],
        "VACUUM deletes the stray file and nothing a version reads"
    );
    assert_eq!(after_changelog, before_changelog);
    assert_eq!(after_current, before_current);
    assert_every_version_names_existing_files(&changelog);
    assert_every_version_names_existing_files(&current);

    // The latest current version is the source (price aside: its type
    // change is re-read by another part of issue 23).
    let want = db.table_map("SELECT id, v FROM shop.t", &[0]);
    let latest = before_current.values().last().unwrap();
    let got: BTreeMap<Vec<String>, Vec<Option<String>>> = latest["rows"]["deltalake"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id: Option<String> = serde_json::from_value(r[1].clone()).unwrap();
            let v: Option<String> = serde_json::from_value(r[2].clone()).unwrap();
            (vec![id.clone().unwrap()], vec![id, v])
        })
        .collect();
    assert_same_table("_current/shop/t", &want, &got);
}

/// The answers to a fold's Delta commits are lost after the store wrote
/// them: cut (object_store sends the commit again and meets "already
/// exists") or garbled (no resend, the read-back finds it). The fold reads
/// the version back, finds its own commit and deletes nothing; then a kill
/// -9 and a restart: nothing lost, nothing twice, no Delta version names a
/// missing file.
#[test]
fn a_fold_whose_commit_answer_is_lost_reads_the_log_back() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20), n INT);",
    );
    let lake = TestLake::new(Backend::S3);
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.interval = "200ms".into();
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    proxy.route(&mut sluice, "2s");
    let commits = "/_current/shop/t/_delta_log/000";
    proxy.set_rules(vec![
        Rule::every("PUT", commits, 2, Fault::Drop),
        Rule::every("PUT", commits, 3, Fault::Garbage),
    ]);
    let mut running = sluice.spawn_run(false);
    for r in 0..14 {
        db.sql(&format!(
            "INSERT INTO shop.t VALUES ({a}, 'v{a}', {a}), ({b}, 'v{b}', {b});
             UPDATE shop.t SET n = n + 100 WHERE id = {r};",
            a = 2 * r + 1,
            b = 2 * r + 2
        ));
        std::thread::sleep(Duration::from_millis(1200));
    }
    assert!(
        wait_until(Duration::from_secs(30), || proxy.hits(Fault::Drop) >= 2
            && proxy.hits(Fault::Garbage) >= 2),
        "faults hit: drop {}, garbage {}; log:\n{}",
        proxy.hits(Fault::Drop),
        proxy.hits(Fault::Garbage),
        running.log_tail(40)
    );
    running.kill();
    let log = running.log_text();
    assert!(
        log.contains("a put-if-absent got no answer, but the object holds it: written"),
        "no fold commit was read back as its own; log:\n{}",
        tail(&log, 40)
    );
    assert!(
        !log.contains("taken by another writer"),
        "a fold took its own commit for another writer's; log:\n{}",
        tail(&log, 40)
    );

    proxy.pass();
    db.sql("UPDATE shop.t SET v = 'last' WHERE id = 1;");
    sluice.run_until_caught_up_ok();
    let root = lake.local_root();
    let read = Lake::read(&root);
    let want = db.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_same_table("changelog replay", &want, &read.replay("shop.t", &[0]));
    let current = root.join("_current/shop/t");
    let versions = assert_every_version_names_existing_files(&current);
    assert!(versions >= 5, "{versions} versions of the current table");
    assert_every_version_names_existing_files(&root.join("shop/t"));
    let got = read_delta(
        &current.display().to_string(),
        &["id", "v", "n", "_seq"],
        None,
        &Value::Null,
        crate::delta::ALL_READERS,
    );
    for (reader, rows) in &got.rows {
        let table: BTreeMap<Vec<String>, Vec<Option<String>>> = rows
            .iter()
            .map(|r| (vec![r[0].clone().unwrap()], r[..3].to_vec()))
            .collect();
        assert_eq!(table.len(), rows.len(), "{reader}: a key twice");
        assert_same_table(&format!("_current/shop/t by {reader}"), &want, &table);
    }
}

fn delta_lag_metric(port: u16, table: &str) -> Option<f64> {
    let (_, body) = get(port, "/metrics")?;
    samples(&body)
        .get(&format!("sluice_delta_lag_manifests{{table=\"{table}\"}}"))
        .copied()
}

/// One table's Delta commits are refused by the store (403 on its
/// `_delta_log`): the other table's log goes on; the lag of the refused
/// one shows in `status --json`, `/metrics` and `/readyz` (503 once it is
/// older than `ready_max_lag`), the error is logged as an ERROR; when the
/// store lets the commits through, the log catches up and all is well.
#[test]
fn a_table_whose_delta_commits_fail_shows_its_lag_and_catches_up() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.bad (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.good (id INT PRIMARY KEY, v INT);",
    );
    let lake = TestLake::new(Backend::S3);
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.interval = "200ms".into();
    let port = free_port();
    sluice.extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\nready_max_lag = \"3s\"\n");
    proxy.route(&mut sluice, "2s");
    proxy.set_rules(vec![Rule::every(
        "PUT",
        "/shop/bad/_delta_log/",
        1,
        Fault::Status(403),
    )]);
    let mut running = sluice.spawn_run(false);
    for i in 1..=3 {
        db.sql(&format!(
            "INSERT INTO shop.bad VALUES ({i}, {i}); INSERT INTO shop.good VALUES ({i}, {i});"
        ));
        std::thread::sleep(Duration::from_millis(500));
    }
    let lagging = wait_until(Duration::from_secs(30), || {
        delta_lag_metric(port, "shop.bad").is_some_and(|n| n >= 2.0)
    });
    assert!(
        lagging,
        "metric {:?}; log:\n{}",
        delta_lag_metric(port, "shop.bad"),
        running.log_tail(40)
    );
    assert_eq!(delta_lag_metric(port, "shop.good"), None);
    let not_ready = wait_until(Duration::from_secs(20), || {
        get(port, "/readyz")
            .is_some_and(|(s, body)| s == 503 && body.contains("Delta log of shop.bad"))
    });
    assert!(not_ready, "/readyz: {:?}", get(port, "/readyz"));
    // The good table's log follows its manifests (at the latest from the
    // next checkpoint on, which tries every lagging table on its own).
    db.sql("INSERT INTO shop.good VALUES (4, 4);");
    let mut status = Value::Null;
    let good_follows = wait_until(Duration::from_secs(30), || {
        status = sluice.status_json();
        status["delta_lag"].get("shop.good").is_none()
    });
    assert!(good_follows, "{status:#}");
    let lag = &status["delta_lag"]["shop.bad"];
    assert!(lag["manifests"].as_u64().unwrap() >= 2, "{status:#}");
    let log = running.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("could not make the Delta commits")),
        "the definite Delta error is logged as an ERROR; log:\n{}",
        tail(&log, 30)
    );
    let good = lake.local_root().join("shop/good");
    let good_rows = read_delta(
        &good.display().to_string(),
        &["id", "v", "_seq"],
        None,
        &Value::Null,
        "deltalake",
    );
    assert_eq!(good_rows.rows["deltalake"].len(), 4);

    proxy.pass();
    db.sql("INSERT INTO shop.bad VALUES (4, 4);");
    let caught_up = wait_until(Duration::from_secs(60), || {
        delta_lag_metric(port, "shop.bad") == Some(0.0)
            && get(port, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    assert!(
        caught_up,
        "metric {:?}, /readyz {:?}; log:\n{}",
        delta_lag_metric(port, "shop.bad"),
        get(port, "/readyz"),
        running.log_tail(40)
    );
    let status = sluice.status_json();
    assert_eq!(status["delta_lag"], serde_json::json!({}), "{status:#}");
    running.terminate(Duration::from_secs(20));
    let bad = lake.local_root().join("shop/bad");
    assert_every_version_names_existing_files(&bad);
    let bad_rows = read_delta(
        &bad.display().to_string(),
        &["id", "v", "_seq"],
        None,
        &Value::Null,
        crate::delta::ALL_READERS,
    );
    for (reader, rows) in &bad_rows.rows {
        assert_eq!(rows.len(), 4, "{reader}: every insert once");
    }

    // A scheduled catch-up hears of a log still behind at its end: exit 3
    // and one line naming the table (not the good one); the next run whose
    // commits go through exits 0.
    proxy.set_rules(vec![Rule::every(
        "PUT",
        "/shop/bad/_delta_log/",
        1,
        Fault::Status(403),
    )]);
    db.sql("INSERT INTO shop.bad VALUES (5, 5); INSERT INTO shop.good VALUES (5, 5);");
    let out = sluice.run_until_caught_up();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = last_stderr_line(&out);
    assert!(
        line.contains("shop.bad") && !line.contains("shop.good") && line.contains("behind"),
        "{line}"
    );
    proxy.pass();
    sluice.run_until_caught_up_ok();
    assert_eq!(sluice.status_json()["delta_lag"], serde_json::json!({}));
}

/// Issue 42, item 1: a name reused by a table whose column has another
/// type (BLOB, then BIGINT). The changelog's column takes the supertype
/// (BINARY: the new values as the UTF-8 bytes of their text), every reader
/// reads all three rows, no Delta log is behind, and the current table
/// keeps the source's current type.
#[test]
fn a_reused_name_with_another_column_type_keeps_its_changelog_log() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t1 (id INT PRIMARY KEY, a BLOB);
         INSERT INTO shop.t1 VALUES (1, 'x'), (2, 'yy');",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.run_until_caught_up_ok();
    db.sql(
        "DROP TABLE shop.t1;
         CREATE TABLE shop.t1 (id INT PRIMARY KEY, a BIGINT);
         INSERT INTO shop.t1 VALUES (3, 30);",
    );
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains("could not make the Delta commit"),
        "a Delta commit failed:\n{log}"
    );
    let status = sluice.status_json();
    assert_eq!(
        status["delta_lag"],
        serde_json::json!({}),
        "no Delta log is behind"
    );

    let shop = db.namespace().to_server("shop").into_owned();
    let changelog = lake.path().join(&shop).join("t1");
    let read = read_delta(
        &changelog.display().to_string(),
        &["_seq", "_op", "id", "a"],
        None,
        &Value::Null,
        crate::delta::ALL_READERS,
    );
    for (reader, rows) in &read.rows {
        let rows: Vec<(Option<&str>, Option<&str>, Option<&str>)> = rows
            .iter()
            .map(|r| (r[1].as_deref(), r[2].as_deref(), r[3].as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                (Some("snapshot"), Some("1"), Some("b'x'")),
                (Some("snapshot"), Some("2"), Some("b'yy'")),
                (Some("truncate"), None, None),
                (Some("insert"), Some("3"), Some("b'30'")),
            ],
            "{reader}"
        );
    }
    let current = lake.path().join("_current").join(&shop).join("t1");
    assert_eq!(
        crate::current::current_rows(&current, &["id", "a"], None)
            .into_values()
            .collect::<Vec<_>>(),
        [vec![Some("3".to_string()), Some("30".to_string())]],
    );
}

/// Issue 42, item 3: delta-rs's `create_checkpoint` of a current table with
/// deletion vectors lists a file's live entry before the tombstones of its
/// earlier vectors, one without a vector. Folds after it keep the file live
/// with its vector (no vector file deleted under a version, no key live
/// twice); more folds, purges and a second foreign checkpoint later, every
/// version still in the log reads alike in every reader, and the latest
/// equals `SELECT *`.
#[test]
fn a_delta_rs_checkpoint_of_a_current_table_reads_like_sluices_own() {
    ensure_readers();
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v INT);",
    );
    let rows: Vec<String> = (1..=1000).map(|i| format!("({i}, {i})")).collect();
    db.sql(&format!("INSERT INTO shop.t VALUES {};", rows.join(", ")));
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.run_until_caught_up_ok();
    let shop = db.namespace().to_server("shop").into_owned();
    let current = lake.path().join("_current").join(&shop).join("t");
    let checkpoint = || {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sys, deltalake; deltalake.DeltaTable(sys.argv[1]).create_checkpoint()",
            ])
            .arg(&current)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "delta-rs create_checkpoint: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let matches_source = |what: &str| {
        let want = crate::current::source_rows(&db, "t", &["id", "v"]);
        let got = crate::current::current_rows(&current, &["id", "v"], None);
        assert_same_table(what, &want, &got);
    };
    for i in 1..=6 {
        db.sql(&format!(
            "UPDATE shop.t SET v = v + 1 WHERE id IN ({i}, {}, {}, {}, {})",
            i + 100,
            i + 200,
            i + 300,
            i + 400
        ));
        sluice.run_until_caught_up_ok();
    }
    checkpoint();
    db.sql("UPDATE shop.t SET v = v + 1 WHERE id IN (1,2,3,4,5,6,7,8,9,10,500,600,700)");
    sluice.run_until_caught_up_ok();
    matches_source("after the fold on delta-rs's checkpoint");
    // Larger rounds: vectors past the purge threshold, deletes and
    // re-inserts, and another foreign checkpoint in the middle.
    for r in 1..=4 {
        db.sql(&format!(
            "UPDATE shop.t SET v = v + 1000 WHERE id % 4 = {};
             DELETE FROM shop.t WHERE id % 50 = {r};
             INSERT INTO shop.t VALUES ({}, {r});",
            r % 4,
            2000 + r
        ));
        sluice.run_until_caught_up_ok();
        if r == 2 {
            checkpoint();
        }
        matches_source(&format!("round {r}"));
    }
    let purged = delta_commits(&current)
        .iter()
        .filter(|(_, a)| {
            a.iter()
                .any(|x| x.get("remove").is_some_and(|r| r["dataChange"] == false))
        })
        .count();
    assert!(purged >= 1, "no purge ran");
    let (_, versions) = read_versions(&current, &["_seq", "id", "v"], false);
    assert!(versions.len() >= 12, "{} versions", versions.len());
    assert_readers_agree_on_every_version("_current/shop/t", &versions);
}

/// A table whose Delta log cannot be read at all (a regular file where its
/// `_delta_log/` folder should be): the run commits every manifest and the
/// other table's log, exits 3 naming the table, `status` reports it with
/// its error instead of failing for every table, and once the file is
/// gone the next run builds the log from the manifests.
#[test]
fn a_table_whose_log_cannot_be_read_is_named_and_the_others_go_on() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.bad (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.good (id INT PRIMARY KEY, v INT);
         INSERT INTO shop.bad VALUES (1, 1), (2, 2);
         INSERT INTO shop.good VALUES (1, 1), (2, 2);",
    );
    let lake = TestLake::new(Backend::Local);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    let shop = db.namespace().to_server("shop").as_ref().to_string();
    let bad = lake.local_root().join(&shop).join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("_delta_log"), b"").unwrap();

    let out = sluice.run_until_caught_up();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{}", tail(&stderr, 30));
    assert!(
        stderr.contains("shop.bad") && !stderr.contains("sluice: error"),
        "{}",
        tail(&stderr, 30)
    );
    let status = sluice.status_json();
    assert_eq!(status["tables"]["shop.bad"], 2, "{status:#}");
    assert!(
        status["delta_lag"]["shop.bad"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("_delta_log")),
        "{status:#}"
    );
    assert!(status["delta_lag"].get("shop.good").is_none(), "{status:#}");
    let good = read_delta(
        &lake
            .local_root()
            .join(&shop)
            .join("good")
            .display()
            .to_string(),
        &["id", "v", "_seq"],
        None,
        &Value::Null,
        "deltalake",
    );
    assert_eq!(good.rows["deltalake"].len(), 2);

    std::fs::remove_file(bad.join("_delta_log")).unwrap();
    db.sql("INSERT INTO shop.bad VALUES (3, 3);");
    sluice.run_until_caught_up_ok();
    let status = sluice.status_json();
    assert_eq!(status["delta_lag"], serde_json::json!({}), "{status:#}");
    let rows = read_delta(
        &bad.display().to_string(),
        &["id", "v", "_seq"],
        None,
        &Value::Null,
        "deltalake",
    );
    assert_eq!(rows.rows["deltalake"].len(), 3);
}
