//! A lake weeks old starts as fast as a fresh one: start-up and `status`
//! find the newest manifest with a few HEAD requests from the hint
//! `_sluice/newest_manifest.json`, never a listing of `_sluice/manifests/`,
//! and resume from the true newest whatever the hint says: missing (a lake
//! of an earlier release), stale, or naming a manifest retention deleted.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const HINT: &str = "_sluice/newest_manifest.json";

fn manifest_rel(seq: u64) -> String {
    format!("_sluice/manifests/{seq:020}.json")
}

/// `(seq, found by, requests)` of the run's "newest manifest" line.
fn lookup(out: &Output) -> (u64, String, u32) {
    let log = String::from_utf8_lossy(&out.stderr);
    let re = regex::Regex::new(r"newest manifest seq=Some\((\d+)\) found_by=(\w+) requests=(\d+)")
        .unwrap();
    let c = re
        .captures(&log)
        .unwrap_or_else(|| panic!("no look-up line in the log:\n{}", tail(&log, 30)));
    (
        c[1].parse().unwrap(),
        c[2].to_string(),
        c[3].parse().unwrap(),
    )
}

fn newest(sluice: &Sluice) -> u64 {
    sluice.status_json()["manifest_seq"]
        .as_u64()
        .expect("a manifest")
}

fn hint_seq(lake: &TestLake) -> Option<u64> {
    // The hint is read through a local copy on S3 too.
    let text = std::fs::read(lake.local_root().join(HINT)).ok()?;
    serde_json::from_slice::<Value>(&text).ok()?["seq"].as_u64()
}

fn insert(db: &MariaDb, from: i32, to: i32) {
    let values: Vec<String> = (from..=to).map(|i| format!("({i}, {i})")).collect();
    db.sql(&format!("INSERT INTO shop.t VALUES {}", values.join(", ")));
}

/// Makes the lake `copies` idle checkpoints older: copies of manifest
/// `first` without files after it, as a sidecar writes when only other
/// databases change (each naming `first` as the last with changes), with
/// the folds caught up with them. Returns the newest.
fn age_lake(lake: &TestLake, first: u64, copies: u64) -> u64 {
    let mut idle: Value =
        serde_json::from_str(&lake.manifest_text(first).expect("the manifest")).unwrap();
    idle["files"] = Value::Array(vec![]);
    idle["ddl"] = Value::Array(vec![]);
    idle["last_change"] = first.into();
    let newest = first + copies;
    let mut batch = Vec::new();
    for seq in first + 1..=newest {
        idle["seq"] = seq.into();
        batch.push((manifest_rel(seq), serde_json::to_vec(&idle).unwrap()));
        if batch.len() == 10_000 {
            lake.put_objects(std::mem::take(&mut batch));
        }
    }
    batch.push((
        "_current/_folded.json".to_string(),
        format!("{{\"seq\":{newest}}}").into_bytes(),
    ));
    lake.put_objects(batch);
    newest
}

fn setup(db: &MariaDb, lake: &TestLake, state: &std::path::Path) -> (Sluice, u64) {
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)");
    let sluice = lake.sluice(db, state);
    insert(db, 1, 10);
    sluice.run_until_caught_up_ok();
    let first = newest(&sluice);
    (sluice, first)
}

#[test]
fn start_up_resumes_from_the_true_newest_of_many_manifests_with_few_requests() {
    const COPIES: u64 = 20_000;
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    let lake = TestLake::new(Backend::Local);
    let state = tempfile::tempdir().unwrap();
    let (sluice, first) = setup(&db, &lake, state.path());
    let aged = age_lake(&lake, first, COPIES);

    // A lake of an earlier release: no hint. `status` finds the newest and
    // writes nothing; the sidecar finds it by a probe and writes the hint.
    lake.delete_objects(&[HINT.to_string()]);
    assert_eq!(newest(&sluice), aged);
    assert_eq!(hint_seq(&lake), None, "status writes nothing");
    insert(&db, 11, 20);
    let out = sluice.run_until_caught_up_ok();
    let (seq, by, requests) = lookup(&out);
    assert_eq!((seq, by.as_str()), (aged, "Probe"));
    assert!(requests <= 2 * 16 + 4, "{requests} requests");
    let after = newest(&sluice);
    assert!(after > aged, "the run committed after the copies");
    assert_eq!(hint_seq(&lake), Some(after));
    assert_eq!(sluice.status_json()["tables"]["shop.t"], 20);

    // A current hint: the hint, its manifest and the next one.
    let out = sluice.run_until_caught_up_ok();
    assert_eq!(lookup(&out), (after, "Hint".to_string(), 3));

    // A stale hint (a hint write failed, or a fenced sidecar wrote it last).
    lake.put_objects(vec![(HINT.into(), format!("{{\"seq\":{first}}}").into())]);
    assert_eq!(newest(&sluice), after);
    insert(&db, 21, 30);
    let out = sluice.run_until_caught_up_ok();
    let (seq, by, requests) = lookup(&out);
    assert_eq!((seq, by.as_str()), (after, "Hint"));
    assert!(requests <= 2 * 16 + 3, "{requests} requests");
    let after = newest(&sluice);
    assert_eq!(sluice.status_json()["tables"]["shop.t"], 30);

    // Retention took the oldest half, and the hint names one of those.
    let gone: Vec<String> = (1..=first + COPIES / 2).map(manifest_rel).collect();
    lake.delete_objects(&gone);
    lake.put_objects(vec![(HINT.into(), b"{\"seq\":2}".to_vec())]);
    assert_eq!(newest(&sluice), after);
    insert(&db, 31, 40);
    let out = sluice.run_until_caught_up_ok();
    let (seq, by, _) = lookup(&out);
    assert_eq!((seq, by.as_str()), (after, "Probe"));
    assert!(newest(&sluice) > after);
    assert_eq!(sluice.status_json()["tables"]["shop.t"], 40);

    // A fold after a long idle spell (the current tables' last fold, or
    // the last complete one, far behind) reads the manifests with changes,
    // not the idle ones between: each manifest names the last one with
    // changes.
    let aged = age_lake(&lake, newest(&sluice), COPIES);
    lake.delete_objects(&["_current/_folded.json".to_string()]);
    insert(&db, 41, 50);
    let out = sluice.run_until_caught_up_ok();
    assert!(newest(&sluice) > aged);
    let read = crate::current::fold_figures(&out.stderr, "manifests_read");
    assert!(
        read <= 2,
        "the fold read {read} manifests over an idle spell of {COPIES}"
    );
    let rows = crate::current::current_rows(
        &lake.local_root().join("_current/shop/t"),
        &["id", "v"],
        None,
    );
    assert_eq!(rows.len(), 50, "the current table holds every row");
}

/// The median of three timed runs of `f`.
fn median_of_3(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[1]
}

/// benches/startup.sh: `status` and an idle `run --until-caught-up` on a
/// fresh lake, then on the same lake aged by BENCH_MANIFESTS idle
/// checkpoints (default 1,000,000; BENCH_BACKEND=s3 for moto_server),
/// without a hint (once) and with it. Prints a Markdown table.
#[test]
#[ignore]
fn bench_startup_of_an_old_lake() {
    let copies: u64 = std::env::var("BENCH_MANIFESTS")
        .ok()
        .map(|v| v.parse().expect("BENCH_MANIFESTS is a number"))
        .unwrap_or(1_000_000);
    let backend = match std::env::var("BENCH_BACKEND").as_deref() {
        Ok("s3") => Backend::S3,
        _ => Backend::Local,
    };
    let db = MariaDb::start();
    let lake = TestLake::new(backend);
    let state = tempfile::tempdir().unwrap();
    let (mut sluice, first) = setup(&db, &lake, state.path());
    sluice.timeout = Duration::from_secs(3600);
    let status = |s: &Sluice| {
        s.status_json();
    };
    let idle_run = |s: &Sluice| {
        s.run_until_caught_up_ok();
    };
    let fresh_status = median_of_3(|| status(&sluice));
    let fresh_run = median_of_3(|| idle_run(&sluice));
    let t = Instant::now();
    let aged = age_lake(&lake, first, copies);
    let aging = t.elapsed();
    lake.delete_objects(&[HINT.to_string()]);
    let t = Instant::now();
    status(&sluice);
    let unhinted_status = t.elapsed();
    let t = Instant::now();
    let out = sluice.run_until_caught_up_ok();
    let unhinted_run = t.elapsed();
    let (seq, by, unhinted_requests) = lookup(&out);
    assert_eq!((seq, by.as_str()), (aged, "Probe"));
    let old_status = median_of_3(|| status(&sluice));
    let old_run = median_of_3(|| idle_run(&sluice));
    let (seq, by, hinted_requests) = lookup(&sluice.run_until_caught_up_ok());
    assert_eq!((seq, by.as_str()), (aged, "Hint"));
    let ms = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    println!(
        "\n{backend:?} lake, {copies} idle manifests written in {}\n\n\
         | lake | `status` | idle `run --until-caught-up` | look-up requests |\n\
         |---|---|---|---|\n\
         | fresh ({first} manifests) | {} | {} | 3 |\n\
         | {copies} more, no hint (first start) | {} | {} | {unhinted_requests} |\n\
         | {copies} more, with the hint | {} | {} | {hinted_requests} |\n",
        ms(aging),
        ms(fresh_status),
        ms(fresh_run),
        ms(unhinted_status),
        ms(unhinted_run),
        ms(old_status),
        ms(old_run),
    );
}
