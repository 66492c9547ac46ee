//! Sluice on S3 (moto_server) behind a faulty network (`common::proxy`):
//! answers lost after the store acted, 5xx bursts, stalls past the client
//! timeout. Whatever fails, the lake ends up with every change exactly once,
//! and no file a committed manifest lists is written or deleted after that
//! manifest. Errors retrying cannot fix (a missing bucket, unknown
//! credentials, access denied) stop sluice at once with one line.

use std::time::{Duration, Instant};

use crate::common::proxy::{Exchange, Fault, FaultProxy, Rule};
use crate::common::*;
use serde_json::Value;

const MANIFESTS: &str = "/_sluice/manifests/";
const DATA: &str = "/shop/t/part-";

struct Rig {
    db: MariaDb,
    lake: TestLake,
    proxy: FaultProxy,
    sluice: Sluice,
    _state: tempfile::TempDir,
}

/// A private server with `shop.t`, a lake on moto, sluice's S3 client behind
/// the proxy with a 2 s request timeout, a checkpoint every 200 ms.
fn rig() -> Option<Rig> {
    // Private: the change count is asserted exactly.
    let db = MariaDb::start_private(&[])?;
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(32), n INT)",
    );
    let lake = TestLake::new(Backend::S3);
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.interval = "200ms".into();
    proxy.route(&mut sluice, "2s");
    Some(Rig {
        db,
        lake,
        proxy,
        sluice,
        _state: state,
    })
}

/// Small transactions with pauses between them, so that checkpoints fall
/// between them: inserts, an update and now and then a delete, rounds
/// `rounds` of them. With `in_step`, each round waits until sluice has
/// committed it (a checkpoint per round however slow the store is).
/// Returns the number of change rows.
fn workload(
    db: &MariaDb,
    rounds: std::ops::Range<i32>,
    mut in_step: Option<(&TestLake, &mut Running)>,
) -> u64 {
    let mut changes = 0;
    let before = in_step
        .as_ref()
        .map_or(0, |(lake, _)| committed_changes(lake));
    for r in rounds {
        let values: Vec<String> = (r * 5 + 1..=r * 5 + 5)
            .map(|i| format!("({i}, 'v{i}', {i})"))
            .collect();
        let mut sql = format!("INSERT INTO shop.t VALUES {};", values.join(", "));
        changes += 5;
        if r > 0 {
            sql += &format!("UPDATE shop.t SET n = n + 1000 WHERE id = {};", r * 5 - 2);
            changes += 1;
        }
        if r % 3 == 2 {
            sql += &format!("DELETE FROM shop.t WHERE id = {};", r * 5 - 4);
            changes += 1;
        }
        db.sql(&sql);
        match &mut in_step {
            Some((lake, running)) => {
                let done = wait_until(Duration::from_secs(15), || {
                    committed_changes(lake) >= before + changes || running.try_wait().is_some()
                });
                assert!(
                    done && running.try_wait().is_none(),
                    "round {r} was not committed within 15 s; log:\n{}",
                    running.log_tail(40)
                );
            }
            None => std::thread::sleep(Duration::from_millis(80)),
        }
    }
    changes
}

/// `totals["shop.t"]` of the newest manifest in the lake (0 without one).
fn committed_changes(lake: &TestLake) -> u64 {
    let n = lake.manifest_count() as u64;
    if n == 0 {
        return 0;
    }
    lake.manifest_text(n)
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|m| m["totals"]["shop.t"].as_u64())
        .unwrap_or(0)
}

/// Runs the workload with `rules` in force, waits until sluice has
/// committed every change, lets every request pass and stops sluice with
/// SIGTERM (exit 0), then checks the lake. Returns sluice's log.
fn survives(rig: &Rig, rules: Vec<Rule>) -> String {
    let mut running = rig.sluice.spawn_run(false);
    rig.proxy.set_rules(rules);
    // A checkpoint per round, however slow the faults make the store.
    let changes = workload(&rig.db, 0..20, Some((&rig.lake, &mut running)));
    rig.proxy.pass();
    let status = running.terminate(Duration::from_secs(20));
    assert!(
        status.success(),
        "sluice exited {status}; log:\n{}",
        running.log_tail(40)
    );
    let log = running.log_text();
    assert!(
        !regex::Regex::new(r"(?i)fenced|another writer")
            .unwrap()
            .is_match(&log),
        "sluice took its own manifest for another writer's; log:\n{}",
        tail(&log, 40)
    );

    // Every listed file is there with its size, no file is unlisted,
    // `_seq` is unique and ordered (Lake::read), every change is in the
    // lake once, and the replay equals the source.
    let lake = rig.lake.read();
    assert!(
        lake.manifests.len() >= 8,
        "only {} checkpoints: the faults met too few commits",
        lake.manifests.len()
    );
    assert_eq!(lake.row_count("shop.t"), changes, "change rows in the lake");
    let expected = rig.db.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_same_table("shop.t", &expected, &lake.replay("shop.t", &[0]));
    assert_no_committed_file_touched(&lake, &rig.proxy.exchanges());
    log
}

/// From the proxy's log (every request sluice sent): each manifest was
/// created by a PUT the store answered 200, each file it lists was written
/// before that, and no file it lists was written or deleted after.
fn assert_no_committed_file_touched(lake: &Lake, exchanges: &[Exchange]) {
    for m in &lake.manifests {
        let seq = m["seq"].as_u64().unwrap();
        let name = format!("{MANIFESTS}{seq:020}.json");
        let committed = exchanges
            .iter()
            .filter(|e| e.method == "PUT" && e.path.ends_with(&name) && e.status == Some(200))
            .map(|e| e.answered)
            .min()
            .unwrap_or_else(|| panic!("no PUT of manifest {seq} was answered 200"));
        for f in m["files"].as_array().unwrap() {
            let suffix = format!("/{}", f["path"].as_str().unwrap());
            let writes: Vec<&Exchange> = exchanges
                .iter()
                .filter(|e| {
                    (e.method != "GET" && e.method != "HEAD" && e.path.ends_with(&suffix))
                        || e.deletes.iter().any(|k| format!("/{k}").ends_with(&suffix))
                })
                .collect();
            assert!(
                writes
                    .iter()
                    .any(|e| e.method == "PUT" && e.status == Some(200) && e.answered < committed),
                "manifest {seq} lists {suffix}, which was not written before it: {writes:?}"
            );
            let after: Vec<&&Exchange> = writes.iter().filter(|e| e.sent > committed).collect();
            assert!(
                after.is_empty(),
                "{suffix} was written or deleted after manifest {seq} committed it: {after:?}"
            );
        }
    }
}

/// (a) The answer to a manifest write is lost after the store created it:
/// cut (object_store sends it again and meets the manifest: 412), or not
/// HTTP (no resend: sluice reads the manifest back, and that read fails
/// too). Sluice finds its own manifest each time: committed, not fenced,
/// nothing re-read or rewritten.
#[test]
fn lost_answers_to_manifest_writes_commit_once() {
    let Some(rig) = rig() else { return };
    let log = survives(
        &rig,
        vec![
            Rule::every("PUT", MANIFESTS, 4, Fault::Drop),
            Rule::every("PUT", MANIFESTS, 3, Fault::Garbage),
            Rule::every("GET", MANIFESTS, 2, Fault::Garbage),
        ],
    );
    for fault in [Fault::Drop, Fault::Garbage] {
        assert!(rig.proxy.hits(fault) >= 2, "{fault:?} was not injected");
    }
    let found_own = log
        .matches("the manifest write got no answer, but the manifest is in the lake: committed")
        .count();
    assert!(
        found_own >= 1,
        "no manifest was read back as ours; log:\n{}",
        tail(&log, 40)
    );
    assert!(
        !log.contains("reconnecting from the last checkpoint"),
        "a commit that happened was retried from the last checkpoint; log:\n{}",
        tail(&log, 40)
    );
}

/// (b) Answers to data-file writes are lost: cut (object_store sends the
/// file again) or not HTTP (the checkpoint fails, sluice re-reads from the
/// last one under new file names and removes what the failed try wrote).
#[test]
fn lost_answers_to_data_file_writes_lose_and_repeat_nothing() {
    let Some(rig) = rig() else { return };
    let log = survives(
        &rig,
        vec![
            Rule::every("PUT", DATA, 3, Fault::Drop),
            Rule::every("PUT", DATA, 4, Fault::Garbage).limit(3),
        ],
    );
    assert!(rig.proxy.hits(Fault::Drop) >= 2);
    assert_eq!(rig.proxy.hits(Fault::Garbage), 3);
    assert!(
        log.contains("reconnecting from the last checkpoint"),
        "a lost data-file answer never reached sluice; log:\n{}",
        tail(&log, 40)
    );
    // The files of the failed tries landed; they are gone again (Lake::read
    // found no unlisted file), deleted by sluice.
    // The re-read never wrote a failed try's file again: it chose new names.
    let exchanges = rig.proxy.exchanges();
    let lake = rig.lake.read();
    for failed in exchanges.iter().filter(|e| e.fault == Some(Fault::Garbage)) {
        let again: Vec<&Exchange> = exchanges
            .iter()
            .filter(|e| e.method == "PUT" && e.path == failed.path && e.sent > failed.sent)
            .collect();
        assert!(
            again.is_empty(),
            "{} was written again: {again:?}",
            failed.path
        );
        assert!(
            !lake.files.iter().any(|f| failed.path.ends_with(&f.path)),
            "{} is listed",
            failed.path
        );
    }
    // object_store deletes with S3's bulk DeleteObjects (`POST ?delete`).
    let deleted: usize = rig
        .proxy
        .exchanges()
        .iter()
        .map(|e| {
            e.deletes
                .iter()
                .filter(|k| k.contains("shop/t/part-"))
                .count()
        })
        .sum();
    assert!(deleted >= 3, "{deleted} data files deleted");
}

/// (c) Bursts of 500 and 503 on every kind of request: object_store
/// retries them; nothing is lost or written twice.
#[test]
fn server_error_bursts_lose_and_repeat_nothing() {
    let Some(rig) = rig() else { return };
    survives(
        &rig,
        vec![
            Rule::every("PUT", MANIFESTS, 3, Fault::Status(500)),
            Rule::every("", "/", 7, Fault::Status(503)).bursts(2),
        ],
    );
    assert!(rig.proxy.hits(Fault::Status(500)) >= 3);
    assert!(rig.proxy.hits(Fault::Status(503)) >= 6);
}

/// (d) Requests stall past the client timeout after reaching the store: a
/// stalled manifest write is read back (object_store does not resend a
/// put-if-absent that timed out), stalled data-file writes and reads are
/// resent.
#[test]
fn stalled_requests_time_out_and_are_retried() {
    let Some(rig) = rig() else { return };
    let stall = Fault::Stall(Duration::from_secs(4));
    let log = survives(
        &rig,
        vec![
            Rule::every("PUT", MANIFESTS, 3, stall).limit(3),
            Rule::every("PUT", DATA, 4, stall).limit(2),
            Rule::every("GET", "/", 10, stall).limit(2),
        ],
    );
    assert!(rig.proxy.hits(stall) >= 5);
    assert!(
        log.contains(
            "the manifest write got no answer, but the manifest is in the lake: committed"
        ),
        "no stalled manifest write was read back; log:\n{}",
        tail(&log, 40)
    );
}

/// A bucket that does not exist: one line naming the lake, the problem and
/// the fix, non-zero exit, within seconds, nothing written anywhere.
#[test]
fn missing_bucket_stops_at_once_with_one_line() {
    let db = MariaDb::start();
    let lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.sink_url = "s3://no-such-bucket/lake".into();
    let started = Instant::now();
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert!(
        line.contains("sink.url `s3://no-such-bucket/lake`")
            && line.contains("the bucket does not exist (HTTP 404 NoSuchBucket")
            && line.contains("create it, or correct the bucket name"),
        "{line}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a definite error was retried for {:?}",
        started.elapsed()
    );
    assert_eq!(lake.manifest_count(), 0);
    assert!(lake.data_files().is_empty());
}

/// Credentials the store does not know: one line saying so and what to
/// check, non-zero exit; the store answered no request with success.
#[test]
fn unknown_credentials_stop_at_once_with_one_line() {
    let db = MariaDb::start();
    let moto = MotoServer::start_checking_credentials();
    let proxy = FaultProxy::start(moto.port());
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, dir.path(), state.path());
    sluice.sink_url = "s3://lake/cdc".into();
    sluice.env = moto.env();
    proxy.route(&mut sluice, "5s");
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert!(
        line.contains("sink.url `s3://lake/cdc`")
            && line
                .contains("the store does not accept the credentials (HTTP 403 InvalidAccessKeyId")
            && line.contains("AWS_ACCESS_KEY_ID"),
        "{line}"
    );
    let exchanges = proxy.exchanges();
    assert!(!exchanges.is_empty(), "sluice never asked the store");
    assert!(
        exchanges.iter().all(|e| e.status == Some(403)),
        "the store answered something other than 403: {exchanges:?}"
    );
}

/// Access denied while running (a policy changed under a live sidecar):
/// it stops with one line instead of retrying forever, and what it had
/// committed stays as it was.
#[test]
fn access_denied_while_running_stops_with_one_line() {
    let Some(rig) = rig() else { return };
    let mut running = rig.sluice.spawn_run(false);
    let changes = workload(&rig.db, 0..5, None);
    assert!(
        wait_until(Duration::from_secs(30), || committed_changes(&rig.lake)
            >= changes),
        "sluice did not commit; log:\n{}",
        running.log_tail(30)
    );
    let committed = rig.lake.manifest_count();
    let before: Vec<Option<String>> = (1..=committed as u64)
        .map(|s| rig.lake.manifest_text(s))
        .collect();
    rig.proxy
        .set_rules(vec![Rule::every("PUT", "/", 1, Fault::Status(403))]);
    workload(&rig.db, 5..8, None);
    let status = running
        .wait_timeout(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("sluice kept going; log:\n{}", running.log_tail(30)));
    assert!(!status.success());
    let log = running.log_text();
    let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert!(
        last.starts_with("sluice: error: object store: access denied (HTTP 403 AccessDenied")
            && last.contains("s3:PutObject"),
        "{last}\nlog:\n{}",
        running.log_tail(120)
    );
    assert_eq!(rig.lake.manifest_count(), committed);
    let after: Vec<Option<String>> = (1..=committed as u64)
        .map(|s| rig.lake.manifest_text(s))
        .collect();
    assert_eq!(before, after, "committed manifests changed");
    let lake = rig.lake.read_committed();
    assert_eq!(lake.row_count("shop.t"), changes);
}

/// SIGTERM while the store stalls every Delta request (each longer than
/// the client's timeout, retried): the final checkpoint commits, the Delta
/// commits and the last fold get what is left of `shutdown_timeout`, and
/// sluice exits 0 within it. The next run, through a healthy store, makes
/// what was left: every Delta log follows its manifests and the current
/// table equals the source.
#[test]
fn sigterm_under_a_stalling_store_exits_within_shutdown_timeout() {
    let Some(mut rig) = rig() else {
        return;
    };
    rig.sluice.top_level = "shutdown_timeout = \"6s\"\n".into();
    rig.sluice.extra = "[current]\nrefresh = \"1s\"\n".into();
    let mut running = rig.sluice.spawn_run(false);
    let changes = workload(&rig.db, 0..4, Some((&rig.lake, &mut running)));
    rig.proxy.set_rules(vec![
        Rule::every("", "/_delta_log/", 1, Fault::Stall(Duration::from_secs(3))),
        Rule::every("", "/_current/", 1, Fault::Stall(Duration::from_secs(3))),
    ]);
    // Changes whose checkpoint's Delta commits stall (the client retries
    // each request past its 2 s timeout for minutes).
    let more = workload(&rig.db, 4..6, None);
    std::thread::sleep(Duration::from_millis(1500));
    let asked = Instant::now();
    let status = running.terminate(Duration::from_secs(30));
    let took = asked.elapsed();
    assert!(
        status.success(),
        "sluice exited {status}; log:\n{}",
        running.log_tail(30)
    );
    assert!(
        took < Duration::from_secs(10),
        "SIGTERM took {took:?} with a shutdown_timeout of 6 s; log:\n{}",
        running.log_tail(30)
    );
    let log = running.log_text();
    assert!(
        log.contains("left for the next start"),
        "the last lines say what was left; log:\n{}",
        tail(&log, 20)
    );
    assert!(
        rig.proxy.hits(Fault::Stall(Duration::from_secs(3))) > 0,
        "no Delta request met a stall"
    );

    rig.proxy.pass();
    rig.sluice.run_until_caught_up_ok();
    let lake = rig.lake.read();
    assert_eq!(
        lake.row_count("shop.t"),
        changes + more,
        "change rows in the lake"
    );
    let status = rig.sluice.status_json();
    assert_eq!(status["delta_lag"], serde_json::json!({}), "{status:#}");
    assert_eq!(
        status["current_tables"]["shop.t"]["lag_manifests"], 0,
        "{status:#}"
    );
    let expected = rig.db.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_same_table("shop.t", &expected, &lake.replay("shop.t", &[0]));
}

/// Issue 47: for every kind of object sluice writes put-if-absent (the
/// start-up probe, `sluice check`'s probe, manifests, Delta commits of the
/// changelog and current tables, snapshot requests), the store acts on the
/// first write of that kind and its answer is lost; object_store sends the
/// request again and meets "already exists". Each time sluice reads the
/// object back, finds its own bytes and goes on: no "another writer", every
/// command exits 0, nothing is committed twice or lost, and no Delta log is
/// behind.
#[test]
fn a_lost_answer_to_any_put_if_absent_is_taken_for_the_own_write() {
    let Some(rig) = rig() else { return };
    let drop_first = |path: &'static str| Rule::every("PUT", path, 1, Fault::Drop).limit(1);
    // `sluice check` alone: its probe's answer is lost.
    rig.proxy.set_rules(vec![drop_first("/_sluice/probe-")]);
    let out = rig.sluice.run_args(&["check"], &[]);
    assert!(
        out.status.success(),
        "check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rig.proxy.hits(Fault::Drop),
        1,
        "the probe's answer was not lost"
    );

    rig.proxy.set_rules(vec![
        drop_first("/_sluice/probe-"),
        drop_first(MANIFESTS),
        drop_first("/shop/t/_delta_log/"),
        drop_first("/_current/shop/t/_delta_log/"),
    ]);
    let changes = workload(&rig.db, 0..6, None);
    let out = rig.sluice.run_until_caught_up();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "run: {}", tail(&log, 30));
    assert_eq!(
        rig.proxy.hits(Fault::Drop),
        1 + 4,
        "every kind lost one answer: {}",
        tail(&log, 30)
    );
    assert!(
        !regex::Regex::new(r"(?i)fenced|another writer|something else writes")
            .unwrap()
            .is_match(&log),
        "sluice took its own write for another writer's: {}",
        tail(&log, 30)
    );

    // `sluice snapshot` writes its request put-if-absent too.
    rig.proxy.set_rules(vec![drop_first("/_sluice/requests/")]);
    let out = rig.sluice.run_args(&["snapshot"], &["shop.t"]);
    assert!(
        out.status.success(),
        "snapshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rig.proxy.hits(Fault::Drop),
        5 + 1,
        "the request's answer was not lost"
    );
    rig.proxy.pass();
    rig.sluice.run_until_caught_up_ok();
    let at_snapshot: u64 = rig
        .db
        .query_value("SELECT COUNT(*) FROM shop.t")
        .unwrap()
        .parse()
        .unwrap();

    // A kill -9 right after a lost answer to a manifest write: the next
    // start finds the manifest in the lake, or re-reads its changes.
    rig.proxy.set_rules(vec![drop_first(MANIFESTS)]);
    let more = workload(&rig.db, 6..9, None);
    let mut running = rig.sluice.spawn_run(false);
    let lost = wait_until(Duration::from_secs(30), || rig.proxy.hits(Fault::Drop) >= 7);
    running.kill();
    assert!(
        lost,
        "no manifest answer was lost: {}",
        running.log_tail(20)
    );
    rig.proxy.pass();
    rig.sluice.run_until_caught_up_ok();

    let lake = rig.lake.read();
    let snapshot_rows = lake
        .rows("shop.t")
        .iter()
        .filter(|r| r.op == "snapshot")
        .count() as u64;
    let live = rig.db.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_eq!(
        snapshot_rows, at_snapshot,
        "the requested snapshot read every row once"
    );
    assert_eq!(
        lake.row_count("shop.t"),
        changes + more + snapshot_rows,
        "change rows in the lake"
    );
    assert_same_table("shop.t", &live, &lake.replay("shop.t", &[0]));
    let status = rig.sluice.status_json();
    assert_eq!(status["delta_lag"], serde_json::json!({}), "{status:#}");
}
