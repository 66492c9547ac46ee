//! Manifest retention (DESIGN.md "A lake that lasts"): with `[retention]
//! manifests` of seconds, beside a steady writer, old manifests disappear
//! oldest first behind a floor object, never one still needed (the newest,
//! which carries a prepared XA transaction; those after the last complete
//! fold); the Delta tables keep every version readable, and a restart after
//! retention resumes exactly.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::compaction::{changelog_dir, delta_rows, source_rows};
use crate::delta_logs::assert_every_version_names_existing_files;

/// The seqs of the manifests in the lake, ascending.
fn manifest_seqs(lake: &Path) -> Vec<u64> {
    let mut seqs: Vec<u64> = std::fs::read_dir(lake.join("_sluice/manifests"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_suffix(".json")
                        .and_then(|s| s.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    seqs.sort_unstable();
    seqs
}

fn json_seq(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["seq"].as_u64()
}

/// What must hold at any moment: the manifests from the floor up are all
/// there (none missing below the newest), and none after the last complete
/// fold, nor the one the hint names, is gone.
fn assert_retained(lake: &Path) {
    let seqs = manifest_seqs(lake);
    let (Some(&first), Some(&newest)) = (seqs.first(), seqs.last()) else {
        return;
    };
    let floor = json_seq(&lake.join("_sluice/manifest_floor.json")).unwrap_or(0);
    // A round in hand may still be deleting below the floor.
    let kept: Vec<u64> = seqs.iter().copied().filter(|s| *s >= floor).collect();
    assert_eq!(
        kept,
        (floor.max(first)..=newest).collect::<Vec<_>>(),
        "a manifest at or above the floor {floor} is missing"
    );
    if let Some(mark) = json_seq(&lake.join("_current/_folded.json")) {
        assert!(
            mark == 0 || floor <= mark,
            "floor {floor} above the last complete fold {mark}"
        );
    }
    if let Some(hint) = json_seq(&lake.join("_sluice/newest_manifest.json")) {
        assert!(floor <= hint, "floor {floor} above the hint {hint}");
    }
}

#[test]
fn retention_deletes_old_manifests_and_keeps_those_still_needed() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(64));
         CREATE TABLE shop.x (id INT PRIMARY KEY, v VARCHAR(8));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "200ms".into();
    sluice.extra =
        "[current]\nenabled = true\nrefresh = \"1s\"\n\n[retention]\nmanifests = \"2s\"\n".into();
    // A prepared XA transaction stays open through the run: the newest
    // manifest carries it, whatever retention deletes.
    db.sql("XA START 'r1'; INSERT INTO shop.x VALUES (1, 'xa'); XA END 'r1'; XA PREPARE 'r1';");
    let t_dir = changelog_dir(lake.path(), &db);
    let mut run = sluice.spawn_run(false);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(8) {
        i += 1;
        db.sql(&format!(
            "INSERT INTO shop.t (v, pad) VALUES ({i}, MD5(RAND())), ({i}, 'x');
             UPDATE shop.t SET v = v + 1000 WHERE id % 5 = {};
             DELETE FROM shop.t WHERE id = {};",
            i % 5,
            i * 2
        ));
        std::thread::sleep(Duration::from_millis(50));
        assert_retained(lake.path());
    }
    let deleted = wait_until(Duration::from_secs(10), || {
        manifest_seqs(lake.path()).first().is_some_and(|f| *f > 10)
    });
    assert_retained(lake.path());
    let status = run.terminate(Duration::from_secs(30));
    let log = run.log_text();
    assert!(status.success(), "sluice failed: {}", tail(&log, 40));
    assert!(deleted, "no manifest deleted: {}", tail(&log, 30));
    assert!(
        log.contains("deleted manifests older than the retention"),
        "{}",
        tail(&log, 30)
    );
    assert!(!log.contains(" ERROR "), "{}", tail(&log, 30));
    let seqs = manifest_seqs(lake.path());
    let newest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lake.path().join(format!(
            "_sluice/manifests/{:020}.json",
            seqs.last().unwrap()
        )))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        newest["xa_prepared"][0]["xid"], "X'7231',X'',1",
        "the newest manifest keeps the prepared transaction"
    );
    // The data files stay: every Delta version still reads.
    assert_every_version_names_existing_files(&t_dir);

    // A restart after retention resumes where it stopped: the prepared
    // transaction commits, more rows come, and both tables equal the source.
    db.sql("XA COMMIT 'r1'; INSERT INTO shop.t (v, pad) VALUES (7, 'after');");
    sluice.run_until_caught_up_ok();
    let x_rows = delta_rows(&t_dir.parent().unwrap().join("x"));
    assert_eq!(x_rows.len(), 1, "the prepared transaction's row, committed");
    assert_retained(lake.path());
    let source = source_rows(&db);
    assert!(source.len() > 50, "{} rows", source.len());
    assert_same_table(
        "changelog replay after retention",
        &source,
        &replay(&delta_rows(&t_dir), &[0]),
    );
    let current = lake
        .path()
        .join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("t");
    assert_same_table(
        "current table after retention",
        &source,
        &crate::current::current_rows(&current, &["id", "v", "pad"], None),
    );
    assert_every_version_names_existing_files(&t_dir);
}

/// The names of a local Delta table's `_delta_log/` files now (a file being
/// deleted while this looks may or may not be among them).
fn log_names(table_dir: &Path) -> Vec<String> {
    std::fs::read_dir(table_dir.join("_delta_log"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The data files that the commit files of `table_dir` present now remove,
/// added to `seen` (a commit deleted while this reads is passed over).
fn note_removed(table_dir: &Path, seen: &mut std::collections::BTreeSet<String>) {
    for name in log_names(table_dir) {
        if !name.ends_with(".json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(table_dir.join("_delta_log").join(&name)) else {
            continue;
        };
        for line in text.lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(p) = action["remove"]["path"].as_str() {
                seen.insert(p.to_string());
            }
        }
    }
}

/// Sets Delta table properties as a user would, with the `deltalake` package.
fn set_table_properties(table_dir: &Path, properties: &[(&str, &str)]) {
    crate::delta::ensure_readers();
    let props: serde_json::Map<String, serde_json::Value> = properties
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let script = "import json, sys\nfrom deltalake import DeltaTable\n\
         for attempt in range(20):\n    \
           try:\n        \
             DeltaTable(sys.argv[1]).alter.set_table_properties(json.loads(sys.argv[2]), raise_if_not_exists=False)\n        \
             break\n    \
           except Exception as e:\n        \
             if 'onflict' not in str(e) and 'ommit' not in str(e) and 'ransaction' not in str(e): raise\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(table_dir)
        .arg(serde_json::Value::Object(props).to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "set_table_properties on {table_dir:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Delta retention (DESIGN.md "A lake that lasts"): a user sets the tables'
/// `delta.logRetentionDuration` to 2 s and `delta.deletedFileRetentionDuration`
/// to 10 s. Beside a steady writer, the files that compactions and folds
/// removed are deleted once their remove is older than 10 s, and the log's
/// commits and checkpoints below the newest checkpoint older than 2 s go;
/// every version from the oldest kept checkpoint on (all younger than the
/// file retention) still reads with every reader, and both tables equal
/// the source.
#[test]
fn removed_files_and_old_log_entries_go_after_the_tables_retention() {
    let (db, lake, _state, mut sluice) = crate::compaction::setup("64KiB", true);
    sluice
        .env
        .push(("SLUICE_TEST_CHECKPOINT_INTERVAL".into(), "3".into()));
    let t_dir = changelog_dir(lake.path(), &db);
    let c_dir = lake
        .path()
        .join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("t");
    let mut run = sluice.spawn_run(false);
    let mut i = 0;
    let mut step = |db: &MariaDb| {
        i += 1;
        crate::compaction::write_step(db, i);
        std::thread::sleep(Duration::from_millis(40));
    };
    let both = wait_until(Duration::from_secs(30), || {
        step(&db);
        t_dir.join("_delta_log").is_dir() && c_dir.join("_delta_log").is_dir()
    });
    assert!(both, "no Delta tables: {}", tail(&run.log_text(), 30));
    let short = [
        ("delta.logRetentionDuration", "interval 2 seconds"),
        ("delta.deletedFileRetentionDuration", "interval 10 seconds"),
    ];
    set_table_properties(&t_dir, &short);
    set_table_properties(&c_dir, &short);

    // Files removed in the first 6 s of the writer must be gone by its end
    // (10 s of retention, then a checkpoint every 3 versions).
    let mut early: [std::collections::BTreeSet<String>; 2] = Default::default();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(28) {
        step(&db);
        if started.elapsed() < Duration::from_secs(6) {
            note_removed(&t_dir, &mut early[0]);
            note_removed(&c_dir, &mut early[1]);
        }
    }
    let status = run.terminate(Duration::from_secs(30));
    let log = run.log_text();
    assert!(status.success(), "sluice failed: {}", tail(&log, 40));
    assert!(!log.contains(" ERROR "), "{}", tail(&log, 30));
    assert!(
        log.contains("deleted what the Delta table no longer needs"),
        "{}",
        tail(&log, 30)
    );
    for (dir, removed) in [(&t_dir, &early[0]), (&c_dir, &early[1])] {
        assert!(!removed.is_empty(), "{dir:?}: nothing was removed early");
        let left: Vec<_> = removed.iter().filter(|f| dir.join(f).exists()).collect();
        assert!(
            left.is_empty(),
            "{dir:?}: {} of {} files removed early are still there: {left:?}",
            left.len(),
            removed.len()
        );
        let names = log_names(dir);
        assert!(
            !names.contains(&format!("{:020}.json", 0)),
            "{dir:?}: the log was not cleaned up: {names:?}"
        );
        let newest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("_delta_log/_last_checkpoint")).unwrap(),
        )
        .unwrap();
        let newest = newest["version"].as_u64().unwrap();
        let oldest_kept = names
            .iter()
            .filter_map(|n| n.strip_suffix(".checkpoint.parquet"))
            .map(|v| v.parse::<u64>().unwrap())
            .min()
            .unwrap();
        assert!(oldest_kept > 0 && oldest_kept <= newest, "{names:?}");
        // Nothing below the oldest kept checkpoint, everything from it on.
        let commits: std::collections::BTreeSet<u64> = names
            .iter()
            .filter_map(|n| n.strip_suffix(".json")?.parse().ok())
            .collect();
        assert_eq!(commits.first(), Some(&oldest_kept), "{names:?}");
        assert_eq!(
            commits.len() as u64,
            commits.last().unwrap() - oldest_kept + 1,
            "{dir:?}: commits from the oldest checkpoint on have gaps: {names:?}"
        );
    }
    // Every version that is left reads alike for every reader.
    let versions = crate::compaction::read_every_version(&t_dir);
    assert!(versions > 3, "{versions} versions read");
    let source = source_rows(&db);
    assert!(source.len() > 50, "{} rows", source.len());
    assert_same_table(
        "changelog replay after Delta retention",
        &source,
        &replay(&crate::compaction::latest_rows(&t_dir), &[0]),
    );
    assert_same_table(
        "current table after Delta retention",
        &source,
        &crate::current::current_rows(&c_dir, &["id", "v", "pad"], None),
    );
}
