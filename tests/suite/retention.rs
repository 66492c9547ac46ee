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
