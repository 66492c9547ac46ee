//! Other writers on sluice's tables (DESIGN.md "A lake that lasts", "Other
//! writers"): while sluice runs beside a steady writer, the `deltalake`
//! package runs OPTIMIZE (compact and Z-order), VACUUM with no retention,
//! checkpoints and SET TBLPROPERTIES on the changelog and current tables at
//! seeded random moments. sluice commits on top of them, keeps their
//! properties, never re-adds a file they removed and never needs one: the
//! current table equals `SELECT *`, and so does the changelog's replay.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::delta::{delta_commits, ensure_readers, read_delta};

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;

fn write_step(db: &MariaDb, i: u32) {
    db.sql(&format!(
        "INSERT INTO shop.t (v, pad) VALUES ({i}, MD5(RAND())), ({i}, MD5(RAND()));
         UPDATE shop.t SET v = v + 1000 WHERE id % 5 = {};
         DELETE FROM shop.t WHERE id = {};",
        i % 5,
        i * 2
    ));
}

fn source_rows(db: &MariaDb) -> Table {
    db.query_rows("SELECT id, v, pad FROM shop.t")
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
        .collect()
}

/// The changelog table read by `deltalake`, replayed by `_seq`.
fn changelog_replay(dir: &Path) -> Table {
    let read = read_delta(
        &dir.display().to_string(),
        &["_seq", "_op", "id", "v", "pad"],
        None,
        &Value::Null,
        "deltalake",
    );
    let mut rows = read.rows["deltalake"].clone();
    rows.sort_by_key(|r| r[0].as_deref().unwrap().parse::<i64>().unwrap());
    let mut seen = BTreeSet::new();
    let mut table = Table::new();
    for r in rows {
        assert!(
            seen.insert(r[0].clone()),
            "_seq {:?} twice in {dir:?}",
            r[0]
        );
        let key = vec![r[2].clone().unwrap_or_default()];
        match r[1].as_deref().unwrap() {
            "insert" | "snapshot" | "update" => {
                table.insert(key, r[2..].to_vec());
            }
            "delete" => {
                table.remove(&key);
            }
            other => panic!("_op {other}"),
        }
    }
    table
}

/// The latest version's files all exist, and no commit of sluice's adds a
/// file that an earlier version removed (a file live before the commit may
/// be removed and added again in it with a larger deletion vector).
fn assert_live_files_exist_and_none_readded(dir: &Path) {
    let mut live = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for (v, actions) in delta_commits(dir) {
        let by_sluice = actions
            .iter()
            .any(|a| a["commitInfo"]["sluice"].is_object());
        let live_before = live.clone();
        for a in &actions {
            if let Some(p) = a.get("remove").and_then(|x| x["path"].as_str()) {
                live.remove(p);
                removed.insert(p.to_string());
            }
        }
        for a in &actions {
            if let Some(add) = a.get("add") {
                let p = add["path"].as_str().unwrap();
                let vector_update = live_before.contains(p) && !add["deletionVector"].is_null();
                assert!(
                    !by_sluice || vector_update || !removed.contains(p),
                    "version {v} of {dir:?}: sluice added {p} again, which another version removed"
                );
                live.insert(p.to_string());
            }
        }
    }
    for f in &live {
        assert!(
            dir.join(f).is_file(),
            "the latest version of {dir:?} names {f}, which is gone"
        );
    }
}

/// The configuration of the latest `metaData` of a table, as `deltalake`
/// reads it (from a checkpoint when log clean-up took the commits).
fn latest_configuration(dir: &Path) -> Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, json, deltalake; \
             print(json.dumps(deltalake.DeltaTable(sys.argv[1]).metadata().configuration))",
        ])
        .arg(dir)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "reading the configuration of {dir:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a configuration")
}

/// The newest version of a table made by sluice.
fn last_sluice_version(dir: &Path) -> Option<u64> {
    delta_commits(dir)
        .into_iter()
        .filter(|(_, a)| a.iter().any(|a| a["commitInfo"]["sluice"].is_object()))
        .map(|(v, _)| v)
        .next_back()
}

#[test]
fn sluice_commits_on_top_of_delta_rs_maintenance() {
    race(24, 20, None);
}

/// The foreign-writer race of issue 42: delta-rs checkpoints, compacts,
/// vacuums and sets properties at seeded random moments beside sluice
/// (current tables with deletion vectors, a fold every second), the tables'
/// log and file retention set to two seconds, so that log clean-up races
/// `_last_checkpoint` and VACUUM races the folds. Several seeds
/// (`SLUICE_TEST_SEED` runs one): nothing behind at the end, no key live
/// twice, both tables equal to the source, and the last versions read alike
/// in every reader (older ones may name files a VACUUM at that retention
/// deleted, which Delta allows).
#[test]
fn delta_rs_maintenance_with_retention_of_seconds_races_sluice() {
    let seeds: Vec<u64> = match std::env::var("SLUICE_TEST_SEED") {
        Ok(s) => vec![s.parse().expect("SLUICE_TEST_SEED is a number")],
        Err(_) => vec![7, 1042],
    };
    for seed in seeds {
        eprintln!("SLUICE_TEST_SEED={seed}");
        race(seed, 25, Some("interval 2 seconds"));
    }
}

/// sluice beside `tests/delta_maintenance.py SEED SECONDS` on both tables of
/// `shop.t`; with `retention`, delta-rs sets the tables' log and file
/// retention to it instead of 30 days.
fn race(seed: u64, seconds: u32, retention: Option<&str>) {
    ensure_readers();
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(64));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "200ms".into();
    sluice.extra = match retention {
        None => "[current]\nenabled = true\nrefresh = \"2s\"\n".into(),
        Some(_) => "[current]\nenabled = true\nrefresh = \"1s\"\n".into(),
    };
    let shop = db.namespace().to_server("shop").as_ref().to_string();
    let changelog = lake.path().join(&shop).join("t");
    let current = lake.path().join("_current").join(&shop).join("t");

    let mut run = sluice.spawn_run(false);
    let mut i = 0;
    let ready = wait_until(Duration::from_secs(30), || {
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(50));
        changelog.join("_delta_log").is_dir() && current.join("_delta_log").is_dir()
    });
    assert!(ready, "no Delta tables: {}", run.log_tail(30));

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta_maintenance.py");
    let mut maintenance = Command::new("python3")
        .arg(script)
        .args([seed.to_string(), seconds.to_string()])
        .env(
            "SLUICE_TEST_RETENTION",
            retention.unwrap_or("interval 30 days"),
        )
        .arg(&changelog)
        .arg(&current)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tests/delta_maintenance.py");
    let started = Instant::now();
    while maintenance.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(seconds as u64 + 40),
            "maintenance hangs"
        );
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(40));
    }
    let out = maintenance.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "maintenance printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success(),
        "maintenance failed: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = report["done"].as_array().unwrap();
    eprintln!(
        "maintenance done: {}; lost to sluice's commits: {}",
        done.len(),
        report["failed"]
    );
    assert!(done.len() >= 15, "{report}");
    let ran = |dir: &Path, op: &str| {
        done.iter()
            .any(|d| d[0] == dir.display().to_string().as_str() && d[1] == op)
    };
    for dir in [&changelog, &current] {
        for op in ["compact", "vacuum", "checkpoint", "properties"] {
            assert!(ran(dir, op), "the seed ran no {op} on {dir:?}: {report}");
        }
    }

    // sluice still commits on top: more changes reach both tables.
    let before = (
        last_sluice_version(&changelog),
        last_sluice_version(&current),
    );
    for _ in 0..20 {
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(40));
    }
    let source = source_rows(&db);
    let caught_up = wait_until(Duration::from_secs(20), || {
        last_sluice_version(&changelog) > before.0
            && last_sluice_version(&current) > before.1
            && changelog_replay(&changelog) == source
    });
    let status = run.terminate(Duration::from_secs(30));
    let log = run.log_text();
    assert!(status.success(), "sluice failed: {}", tail(&log, 40));
    assert!(caught_up, "sluice stopped committing: {}", tail(&log, 40));
    assert!(!log.contains(" ERROR "), "{}", tail(&log, 40));
    assert!(!log.contains(" WARN "), "{}", tail(&log, 40));
    // An OPTIMIZE and VACUUM between two folds took files the next fold
    // needed (a fold between the two is unlikely twice).
    let fallbacks = log.matches("reading its rows from the live files").count();
    let pairs = done
        .iter()
        .filter(|d| d[0] == changelog.display().to_string().as_str() && d[1] == "compact_vacuum")
        .count();
    eprintln!(
        "folds that read replaced files from the live files: {fallbacks} ({pairs} OPTIMIZE+VACUUM)"
    );
    // (With folds every second, as in the retention race, a fold often
    // falls between the two.)
    assert!(
        retention.is_some() || pairs < 2 || fallbacks > 0,
        "{pairs} OPTIMIZE+VACUUM of the changelog, no fold read the live files"
    );

    assert_same_table("changelog replay", &source, &changelog_replay(&changelog));
    assert_same_table(
        "current table",
        &source,
        &crate::current::current_rows(&current, &["id", "v", "pad"], None),
    );
    for dir in [&changelog, &current] {
        // Replayed from version 0: after a log clean-up (retention of
        // seconds) the first commits are gone and the replay cannot know
        // which files were live; the readers' reads above stand for it.
        if delta_commits(dir).first().is_some_and(|(v, _)| *v == 0) {
            assert_live_files_exist_and_none_readded(dir);
        }
        let conf = latest_configuration(dir);
        assert_eq!(
            conf["delta.logRetentionDuration"],
            retention.unwrap_or("interval 30 days"),
            "{dir:?}: {conf}"
        );
        assert!(
            conf["user.maintained0"].is_string()
                || conf["user.maintained1"].is_string()
                || conf["user.maintained2"].is_string(),
            "{dir:?}: {conf}"
        );
    }
    assert!(latest_configuration(&current)["sluice.key"].is_string());
    if retention.is_some() {
        let status = sluice.status_json();
        assert_eq!(status["delta_lag"], serde_json::json!({}), "{status:#}");
        for (table, c) in status["current_tables"].as_object().unwrap() {
            assert_eq!(c["lag_manifests"], 0, "_current/{table}: {status:#}");
        }
        // Every version the logs still have reads alike in every reader,
        // but for those that name a file a VACUUM at two seconds' retention
        // took (as Delta allows); the last three always read, and no
        // version of the current table holds a key twice.
        for (dir, keyed) in [(&changelog, false), (&current, true)] {
            let read = crate::compaction::versions_read_alike(dir, true);
            let latest = delta_commits(dir).last().map(|(v, _)| *v).unwrap();
            for v in latest.saturating_sub(2)..=latest {
                assert!(
                    !read.gone.contains(&v),
                    "{dir:?}: version {v} does not read"
                );
            }
            for (v, rows) in &read.rows {
                if keyed {
                    let keys: BTreeSet<&Option<String>> = rows.iter().map(|r| &r[2]).collect();
                    assert_eq!(keys.len(), rows.len(), "{dir:?} version {v}: a key twice");
                }
            }
            eprintln!(
                "{dir:?}: {} versions read alike, {} name vacuumed files",
                read.rows.len(),
                read.gone.len()
            );
        }
    }
}
