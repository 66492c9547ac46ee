//! Changelog compaction (DESIGN.md "A lake that lasts"): beside a steady
//! writer at a 200 ms interval, the small files of a changelog table are
//! merged into files of about the target size in `dataChange: false`
//! commits, so its live files stay bounded while its rows grow; every
//! version reads alike for every reader and names existing files; the
//! Delta table replays to `SELECT *`, and the current table still equals
//! the source. A kill in the middle of a compaction loses nothing, doubles
//! nothing and leaves no orphan after the next start.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;
use tempfile::TempDir;

use crate::common::*;
use crate::delta::{delta_commits, ensure_readers};
use crate::delta_logs::assert_every_version_names_existing_files;

type Table = std::collections::BTreeMap<Vec<String>, Vec<Option<String>>>;

const CREATE: &str = "CREATE DATABASE shop;
     CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(64));";

pub(crate) fn changelog_dir(lake: &Path, db: &MariaDb) -> PathBuf {
    lake.join(db.namespace().to_server("shop").as_ref())
        .join("t")
}

/// The live files of the latest version of a local Delta table.
pub(crate) fn live_files(table_dir: &Path) -> BTreeSet<String> {
    let mut live = BTreeSet::new();
    for (_, actions) in delta_commits(table_dir) {
        for a in actions {
            if let Some(p) = a.get("add").and_then(|x| x["path"].as_str()) {
                live.insert(p.to_string());
            }
            if let Some(p) = a.get("remove").and_then(|x| x["path"].as_str()) {
                live.remove(p);
            }
        }
    }
    live
}

/// The versions whose commit is a compaction.
fn compaction_versions(table_dir: &Path) -> Vec<u64> {
    delta_commits(table_dir)
        .into_iter()
        .filter(|(_, actions)| {
            actions
                .iter()
                .any(|a| a["commitInfo"]["operation"] == "OPTIMIZE")
        })
        .map(|(v, _)| v)
        .collect()
}

/// The changes of the live files of the latest version, in `_seq` order;
/// no `_seq` twice.
pub(crate) fn delta_rows(table_dir: &Path) -> Vec<Row> {
    rows_of_files(table_dir, live_files(table_dir))
}

/// The changes of the latest version's live files as the `deltalake`
/// package lists them (for a log whose early commits are deleted), in
/// `_seq` order; no `_seq` twice.
pub(crate) fn latest_rows(table_dir: &Path) -> Vec<Row> {
    ensure_readers();
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, os, sys\nfrom deltalake import DeltaTable\n\
             uris = DeltaTable(sys.argv[1]).file_uris()\n\
             print(json.dumps([os.path.relpath(u.removeprefix('file://'), sys.argv[1]) for u in uris]))",
        ])
        .arg(table_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "listing {table_dir:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    rows_of_files(table_dir, files)
}

fn rows_of_files(table_dir: &Path, files: impl IntoIterator<Item = String>) -> Vec<Row> {
    let mut rows = Vec::new();
    for f in files {
        let file = File::open(table_dir.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            rows.extend(batch_rows(&batch.unwrap(), 0));
        }
    }
    rows.sort_by_key(|r| r.seq);
    for w in rows.windows(2) {
        assert!(
            w[0].seq < w[1].seq,
            "_seq {} twice in the Delta table",
            w[0].seq
        );
    }
    rows
}

pub(crate) fn source_rows(db: &MariaDb) -> Table {
    db.query_rows("SELECT * FROM shop.t")
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
        .collect()
}

/// One step of the writer: new rows, changed rows, a removed row.
pub(crate) fn write_step(db: &MariaDb, i: u32) {
    db.sql(&format!(
        "INSERT INTO shop.t (v, pad) VALUES ({i}, MD5(RAND())), ({i}, MD5(RAND())), ({i}, MD5(RAND()));
         UPDATE shop.t SET v = v + 1000 WHERE id % 7 = {};
         DELETE FROM shop.t WHERE id = {};",
        i % 7,
        i * 2
    ));
}

/// Every file under the table's `_compacted/` is named by some version.
fn assert_no_compacted_orphans(table_dir: &Path) {
    let named: BTreeSet<String> = delta_commits(table_dir)
        .into_iter()
        .flat_map(|(_, a)| a)
        .filter_map(|a| {
            a.get("add")
                .and_then(|x| x["path"].as_str())
                .map(str::to_string)
        })
        .collect();
    let dir = table_dir.join("_compacted");
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = format!("_compacted/{}", e.file_name().to_string_lossy());
        assert!(named.contains(&name), "{name} is in no Delta version");
    }
}

/// Reads every version that the log still has with every reader
/// (tests/delta_versions.py): they agree on each. Returns how many.
pub(crate) fn read_every_version(table_dir: &Path) -> usize {
    assert_versions_read_alike(table_dir, &[])
}

/// The versions of a table that every reader read alike (its columns
/// `_seq,_op,id,v,pad`), with deltalake's rows of each, and the versions
/// that named a file no longer there (only with `gone_ok`).
pub(crate) struct Versions {
    pub rows: BTreeMap<u64, Vec<Vec<Option<String>>>>,
    pub gone: Vec<u64>,
}

/// Reads every version that the log still has with every reader
/// (tests/delta_versions.py) and asserts that they agree on each; with
/// `gone_ok`, a version that names a deleted file (a VACUUM at a retention
/// of seconds) is listed instead of failing.
pub(crate) fn versions_read_alike(table_dir: &Path, gone_ok: bool) -> Versions {
    ensure_readers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta_versions.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(table_dir).arg("_seq,_op,id,v,pad");
    if gone_ok {
        cmd.arg("--gone-ok");
    }
    let out = cmd.output().expect("run tests/delta_versions.py");
    assert!(
        out.status.success(),
        "reading the versions of {table_dir:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut read = Versions {
        rows: BTreeMap::new(),
        gone: v["gone"]
            .as_object()
            .map(|g| g.keys().map(|k| k.parse().unwrap()).collect())
            .unwrap_or_default(),
    };
    for (version, seen) in v["versions"].as_object().unwrap() {
        let rows = seen["rows"].as_object().unwrap();
        // deltalake, Polars, DuckDB, and Spark where Sail can travel to the
        // version (tests/delta_versions.py).
        assert_eq!(
            rows.len(),
            3 + usize::from(rows.contains_key("spark")),
            "version {version}: every reader"
        );
        for (reader, r) in rows {
            assert_eq!(
                r, &rows["deltalake"],
                "version {version}: {reader} vs deltalake"
            );
        }
        read.rows.insert(
            version.parse().unwrap(),
            serde_json::from_value(rows["deltalake"].clone()).unwrap(),
        );
    }
    read
}

/// [`versions_read_alike`], and a compaction's version holds the rows of
/// the version before it. Returns how many versions were read.
fn assert_versions_read_alike(table_dir: &Path, compactions: &[u64]) -> usize {
    let read = versions_read_alike(table_dir, false);
    for c in compactions {
        let before = &read.rows[&(c - 1)];
        let after = &read.rows[c];
        assert_eq!(before, after, "compaction version {c} changed the rows");
        assert!(!after.is_empty());
    }
    read.rows.len()
}

/// A server with `shop.t`, and a sidecar checkpointing every 200 ms that
/// compacts files older than a second into files of `target`.
pub(crate) fn setup(target: &str, current: bool) -> (MariaDb, TempDir, TempDir, Sluice) {
    let db = MariaDb::start();
    db.sql(CREATE);
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "200ms".into();
    sluice.compaction =
        format!("enabled = true\ntarget_file_size = \"{target}\"\nmin_age = \"1s\"\n");
    sluice.extra = format!("[current]\nenabled = {current}\nrefresh = \"1s\"\n");
    (db, lake, state, sluice)
}

/// A steady writer, a checkpoint every 200 ms and folds every second: the
/// changelog table's live files stay bounded while its manifests grow, the
/// Delta table's every version reads alike and names existing files, its
/// replay equals `SELECT *`, and so does the current table.
#[test]
fn compaction_keeps_live_files_bounded_beside_a_steady_writer() {
    let (db, lake, _state, sluice) = setup("256KiB", true);
    let t_dir = changelog_dir(lake.path(), &db);
    let mut run = sluice.spawn_run(false);

    // (seconds, Delta versions, live files)
    let mut samples: Vec<(u64, usize, usize)> = Vec::new();
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(10) {
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(40));
        if i % 20 == 0 && t_dir.join("_delta_log").is_dir() {
            let versions = delta_commits(&t_dir).len();
            samples.push((
                started.elapsed().as_secs(),
                versions,
                live_files(&t_dir).len(),
            ));
        }
    }
    // Once the writer stops, the last small files are compacted too: the
    // stream's files are merged (a last one may be left alone), and the
    // merged ones are about the target size.
    let target = 256 * 1024;
    let settled = wait_until(Duration::from_secs(20), || {
        let live = live_files(&t_dir);
        let bytes: u64 = live
            .iter()
            .map(|f| std::fs::metadata(t_dir.join(f)).unwrap().len())
            .sum();
        let small = live
            .iter()
            .filter(|f| !f.starts_with("_compacted/"))
            .count();
        small <= 2 && live.len() as u64 <= 2 * bytes / target + 2
    });
    let status = run.terminate(Duration::from_secs(30));
    let log = run.log_text();
    assert!(status.success(), "sluice failed: {}", tail(&log, 40));
    eprintln!("samples (s, versions, live files): {samples:?}");
    assert!(
        settled,
        "live files did not settle: {} live; log tail:\n{}",
        live_files(&t_dir).len(),
        tail(&log, 30)
    );
    assert!(
        log.contains("changelog table compacted"),
        "{}",
        tail(&log, 30)
    );
    assert!(!log.contains(" ERROR "), "{}", tail(&log, 30));

    let compactions = compaction_versions(&t_dir);
    assert!(compactions.len() >= 3, "compactions at {compactions:?}");
    let versions = delta_commits(&t_dir).len();
    let live = live_files(&t_dir).len();
    assert!(
        live * 5 < versions,
        "{live} live files for {versions} versions"
    );
    // While the writer ran, the live files did not grow with the versions
    // (without compaction they grow by one a version).
    let late: Vec<_> = samples.iter().filter(|s| s.0 >= 5).collect();
    let (first, last) = (late.first().unwrap(), late.last().unwrap());
    let grown = last.1 - first.1;
    assert!(grown >= 15, "{samples:?}");
    assert!(
        (last.2 as i64 - first.2 as i64) * 3 < grown as i64,
        "live files grew with the versions: {samples:?}"
    );

    // The compacted files hold the rows in `_seq` order; no row is lost or
    // doubled: the Delta table holds the manifests' rows and replays to
    // the source.
    let rows = delta_rows(&t_dir);
    let manifests = Lake::read(lake.path());
    let committed: Vec<i64> = manifests.rows("shop.t").iter().map(|r| r.seq).collect();
    assert_eq!(
        rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
        committed,
        "the Delta table's rows are the manifests' rows"
    );
    let source = source_rows(&db);
    assert!(source.len() > 100, "{} rows", source.len());
    assert_same_table("changelog replay", &source, &replay(&rows, &[0]));
    for f in live_files(&t_dir)
        .iter()
        .filter(|f| f.starts_with("_compacted/"))
    {
        let file = File::open(t_dir.join(f)).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let seqs: Vec<i64> = reader
            .flat_map(|b| batch_rows(&b.unwrap(), 0))
            .map(|r| r.seq)
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{f}: rows out of _seq order"
        );
    }

    // Every commit of a compaction changes no data, and removes only files
    // the manifests or an earlier compaction added.
    for (v, actions) in delta_commits(&t_dir) {
        if !compactions.contains(&v) {
            continue;
        }
        for a in &actions {
            if let Some(x) = a.get("add").or_else(|| a.get("remove")) {
                assert_eq!(x["dataChange"], false, "version {v}: {x}");
            }
            if let Some(add) = a.get("add") {
                let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                assert!(stats["numRecords"].as_u64().unwrap() > 0);
                assert!(stats["minValues"]["_seq"].is_i64(), "{stats}");
            }
        }
    }
    assert_every_version_names_existing_files(&t_dir);
    assert_no_compacted_orphans(&t_dir);
    assert_versions_read_alike(&t_dir, &compactions);

    let current = lake
        .path()
        .join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("t");
    assert_same_table(
        "current table with compaction on",
        &source_rows(&db),
        &crate::current::current_rows(&current, &["id", "v", "pad"], None),
    );
}

/// A kill between a compaction's new files and its commit: the previous
/// version stays, nothing is lost or doubled, and the next start deletes the
/// unfinished file and compacts again.
#[test]
fn a_kill_during_compaction_loses_nothing_and_leaves_no_orphan() {
    let (db, lake, _state, mut sluice) = setup("48KiB", false);
    sluice
        .env
        .push(("SLUICE_TEST_ABORT_IN_COMPACTION".into(), "1".into()));
    let t_dir = changelog_dir(lake.path(), &db);
    let mut run = sluice.spawn_run(false);
    let mut i = 0;
    let started = Instant::now();
    while run.try_wait().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no compaction began: {}",
            run.log_tail(30)
        );
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(40));
    }
    assert!(!run.try_wait().unwrap().success());
    let orphans: Vec<_> = std::fs::read_dir(t_dir.join("_compacted"))
        .unwrap()
        .flatten()
        .collect();
    assert!(!orphans.is_empty(), "the kill left the new file behind");
    // The previous version stays: the small files, each row once (the
    // kill may also have come between a manifest and its Delta commit,
    // which the next start makes, or between a checkpoint's data file and
    // its manifest, whose file the next start deletes).
    assert!(compaction_versions(&t_dir).is_empty());
    let committed: BTreeSet<i64> = Lake::read_committed(lake.path())
        .rows("shop.t")
        .iter()
        .map(|r| r.seq)
        .collect();
    let before = delta_rows(&t_dir);
    assert!(before.len() > 10);
    assert!(before.iter().all(|r| committed.contains(&r.seq)));

    sluice.env.clear();
    let mut run = sluice.spawn_run(false);
    let compacted = wait_until(Duration::from_secs(30), || {
        i += 1;
        write_step(&db, i);
        std::thread::sleep(Duration::from_millis(40));
        !compaction_versions(&t_dir).is_empty()
    });
    let status = run.terminate(Duration::from_secs(30));
    let log = run.log_text();
    assert!(status.success(), "{}", tail(&log, 40));
    assert!(
        compacted,
        "no compaction after the restart: {}",
        tail(&log, 30)
    );
    assert!(
        log.contains("removed compacted files that no Delta version names"),
        "{}",
        tail(&log, 30)
    );
    assert_no_compacted_orphans(&t_dir);
    assert_every_version_names_existing_files(&t_dir);
    // A stop ends after the transaction in hand, not at the head: the last
    // writes are read by a run to the head.
    sluice.run_until_caught_up_ok();
    assert_every_version_names_existing_files(&t_dir);
    let rows = delta_rows(&t_dir);
    let committed: Vec<i64> = Lake::read(lake.path())
        .rows("shop.t")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), committed);
    assert_same_table("changelog replay", &source_rows(&db), &replay(&rows, &[0]));
}

/// The CPU seconds (user and system) a process has used so far, and its
/// peak resident set in KiB, from /proc.
fn process_cpu_and_peak(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the whole line.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|t| t.parse::<f64>().ok()).sum()
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    // Linux reports both in clock ticks of 100 a second.
    (ticks / 100.0, hwm)
}

/// A sample of a changelog table (benches/soak_sample.py).
fn soak_sample(table_dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/soak_sample.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(table_dir)
        .output()
        .expect("run benches/soak_sample.py");
    assert!(
        out.status.success(),
        "sampling {table_dir:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The soak benchmark (BENCHMARKS.md "A lake that lasts: the soak"): one
/// steady writer, two sidecars on one server at `interval = "1s"` with
/// folds on, one with compaction at its defaults and one without; every
/// BENCH_SAMPLE seconds (default 60) the live files, the newest checkpoint's
/// size and a DuckDB `count(*)` over each changelog table, for BENCH_SECONDS
/// (default 3600). Samples go to target/bench/soak.jsonl, the plot to
/// BENCH_PLOT (default target/bench/soak.png). BENCH_MIN_AGE overrides the
/// compaction's `min_age` (default its default, 10m).
#[test]
#[ignore]
fn bench_soak() {
    let secs = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .map(|v| v.parse().expect("a number of seconds"))
            .unwrap_or(default)
    };
    let total = Duration::from_secs(secs("BENCH_SECONDS", 3600));
    let every = Duration::from_secs(secs("BENCH_SAMPLE", 60));
    let db = MariaDb::start();
    db.sql(CREATE);
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let plot = std::env::var("BENCH_PLOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| out_dir.join("soak.png"));
    let min_age = std::env::var("BENCH_MIN_AGE").unwrap_or_else(|_| "10m".into());
    let mut runs = Vec::new();
    let mut keep = Vec::new();
    for (mode, server_id) in [("on", 5401), ("off", 5402)] {
        let lake = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let mut sluice = Sluice::new(&db, lake.path(), state.path());
        sluice.server_id = server_id;
        // sluice's [flush] defaults but for the interval.
        sluice.default_flush = true;
        sluice.extra_flush = "interval = \"1s\"\n".into();
        sluice.compaction = if mode == "on" {
            format!("enabled = true\nmin_age = \"{min_age}\"\n")
        } else {
            "enabled = false\n".into()
        };
        sluice.extra = "[current]\nenabled = true\n".into();
        runs.push((
            mode,
            changelog_dir(lake.path(), &db),
            sluice.spawn_run(false),
        ));
        keep.push((lake, state, sluice));
    }
    ensure_readers();
    let samples_path = out_dir.join("soak.jsonl");
    let mut samples = std::fs::File::create(&samples_path).unwrap();
    let started = Instant::now();
    let mut next_sample = every;
    let mut i = 0;
    while started.elapsed() < total {
        // A steady load: about 40 transactions a second, each three new
        // rows, two changed ones and a deleted one (a table that grows by
        // about 80 rows a second).
        i += 1;
        db.sql(&format!(
            "INSERT INTO shop.t (v, pad) VALUES ({i}, MD5(RAND())), ({i}, MD5(RAND())), ({i}, MD5(RAND()));
             UPDATE shop.t SET v = v + 1 WHERE id IN ({}, {});
             DELETE FROM shop.t WHERE id = {};",
            i * 3 / 2,
            i * 2,
            i * 3 / 4 + 1
        ));
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() >= next_sample {
            next_sample += every;
            let mut line = serde_json::json!({"seconds": started.elapsed().as_secs()});
            for (mode, dir, run) in &runs {
                if dir.join("_delta_log").is_dir() {
                    line[*mode] = soak_sample(dir);
                    let (cpu, hwm) = process_cpu_and_peak(run.pid());
                    line[*mode]["cpu_s"] = serde_json::json!(cpu);
                    line[*mode]["peak_rss_kib"] = serde_json::json!(hwm);
                }
            }
            println!("{line}");
            use std::io::Write;
            writeln!(samples, "{line}").unwrap();
        }
    }
    for (mode, _, run) in &mut runs {
        let status = run.terminate(Duration::from_secs(60));
        assert!(
            status.success(),
            "compaction {mode}: {}",
            tail(&run.log_text(), 30)
        );
    }
    let have_matplotlib = Command::new("python3")
        .args(["-c", "import matplotlib"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_matplotlib {
        let status = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "matplotlib"])
            .status()
            .unwrap();
        assert!(status.success(), "pip install matplotlib");
    }
    let status = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/soak_plot.py"))
        .arg(&samples_path)
        .arg(&plot)
        .status()
        .unwrap();
    assert!(status.success(), "plotting");
    println!(
        "samples: {}, plot: {}",
        samples_path.display(),
        plot.display()
    );
}
