//! A running sidecar against a server that restarts, crashes, rotates its
//! binlog, hangs, purges what sluice still needs, or meets another replica
//! with sluice's server_id. Every test runs a real mariadbd; the sidecar is
//! never restarted by the test unless the test says so.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CREATE: &str = "
CREATE DATABASE shop;
CREATE TABLE shop.ledger (id BIGINT PRIMARY KEY, account INT NOT NULL, amount INT NOT NULL);
CREATE TABLE shop.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL, touched BIGINT NOT NULL,
                            note VARCHAR(32));
";

const ACCOUNTS: &str = "SELECT id, balance, touched, note FROM shop.accounts";

/// Transaction `n` of the workload: one ledger row with id `n` (so the
/// ledger counts committed transactions), an upsert of an account, and now
/// and then a delete or a several-row update.
fn transaction(n: u64, rng: &mut StdRng) -> String {
    let account = rng.gen_range(1..=200);
    let amount = rng.gen_range(-500..=500);
    let mut sql = format!(
        "BEGIN;\n\
         INSERT INTO shop.ledger VALUES ({n}, {account}, {amount});\n\
         INSERT INTO shop.accounts VALUES ({account}, {amount}, {n}, NULL)\n  \
         ON DUPLICATE KEY UPDATE balance = balance + {amount}, touched = {n};\n"
    );
    match rng.gen_range(0..10) {
        0..=1 => {
            sql += &format!(
                "DELETE FROM shop.accounts WHERE id = {};\n",
                rng.gen_range(1..=200)
            )
        }
        2..=4 => {
            let from = rng.gen_range(1..=196);
            sql += &format!(
                "UPDATE shop.accounts SET note = 'tx {n}' WHERE id BETWEEN {from} AND {};\n",
                from + 4
            );
        }
        _ => {}
    }
    sql + "COMMIT;\n"
}

/// Transactions `ns` of the workload, seeded by `seed`, as one script.
fn transactions(ns: std::ops::RangeInclusive<u64>, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    ns.map(|n| transaction(n, &mut rng)).collect()
}

/// Feeds the workload through a `mariadb` client until stopped. When the
/// server goes away the client dies with its transaction in flight (rolled
/// back by the server); the writer then starts new clients until the server
/// is back. Which transactions committed is the server's to say.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(u64, u64)>>,
}

impl Writer {
    /// Transactions numbered from `first` on.
    fn start(socket: &Path, seed: u64, first: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let socket = socket.to_owned();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || write_until(&socket, seed, first, &flag));
        Writer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops after the transaction in hand; returns (transactions sent,
    /// clients started). The server must be answering.
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().expect("writer thread")
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn write_until(socket: &Path, seed: u64, first: u64, stop: &AtomicBool) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut sent, mut clients) = (0, 0);
    while !stop.load(Ordering::SeqCst) {
        let mut child = client_command(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mariadb client");
        clients += 1;
        let mut stdin = child.stdin.take().unwrap();
        while !stop.load(Ordering::SeqCst) {
            let tx = transaction(first + sent, &mut rng);
            if stdin
                .write_all(tx.as_bytes())
                .and_then(|_| stdin.flush())
                .is_err()
            {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(rng.gen_range(2..12)));
            if matches!(child.try_wait(), Ok(Some(_))) {
                break; // the server went away
            }
        }
        drop(stdin);
        let _ = child.wait();
        if !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    (sent, clients)
}

fn count(db: &MariaDb, query: &str) -> u64 {
    db.query_value(query).unwrap().parse().unwrap()
}

/// `totals[table]` of the newest manifest: rows committed so far (the ledger
/// only grows, so this is its row count). 0 while there is none.
fn committed_rows(lake: &Path, table: &str) -> u64 {
    let Some(newest) = manifest_paths(lake).pop() else {
        return 0;
    };
    std::fs::read_to_string(newest)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|m| m["totals"][table].as_u64())
        .unwrap_or(0)
}

/// Waits until the lake holds every ledger row the source has, with the
/// sidecar still running.
fn wait_caught_up(db: &MariaDb, lake: &Path, running: &mut Running) {
    let want = count(db, "SELECT COUNT(*) FROM shop.ledger");
    let done = wait_until(Duration::from_secs(60), || {
        committed_rows(lake, "shop.ledger") >= want || running.try_wait().is_some()
    });
    assert!(
        done && running.try_wait().is_none(),
        "sluice did not catch up with {want} ledger rows (has {}); log:\n{}",
        committed_rows(lake, "shop.ledger"),
        running.log_tail(30)
    );
}

/// The lake replayed equals the source: accounts row for row, the ledger
/// insert for insert with no row twice, and one `_tx_seq` per committed
/// transaction. `Lake::read` has checked that `_seq` is unique and ordered.
fn assert_lake_equals_source(db: &MariaDb, root: &Path) -> Lake {
    let lake = Lake::read(root);
    let accounts = lake.rows("shop.accounts");
    assert_same_table(
        "shop.accounts",
        &db.table_map(ACCOUNTS, &[0]),
        &replay(&accounts, &[0]),
    );
    let ledger = lake.rows("shop.ledger");
    assert!(
        ledger.iter().all(|r| r.op == "insert"),
        "the ledger only grows"
    );
    let ids: BTreeSet<String> = ledger
        .iter()
        .map(|r| r.values[0].clone().unwrap())
        .collect();
    assert_eq!(ids.len(), ledger.len(), "a ledger row is in the lake twice");
    let source: BTreeSet<String> = db
        .query_rows("SELECT id FROM shop.ledger")
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    let lost: Vec<_> = source.difference(&ids).take(10).collect();
    let extra: Vec<_> = ids.difference(&source).take(10).collect();
    assert!(
        lost.is_empty() && extra.is_empty(),
        "ledger: {} rows in the source, {} in the lake; lost {lost:?}, not in the source {extra:?}",
        source.len(),
        ids.len()
    );
    let transactions: BTreeSet<i64> = ledger.iter().chain(&accounts).map(|r| r.tx_seq).collect();
    assert_eq!(
        transactions.len(),
        source.len(),
        "every committed transaction is one _tx_seq"
    );
    lake
}

/// Ids of the binlog dump threads the server runs.
fn dump_threads(db: &MariaDb) -> Vec<String> {
    db.query_rows(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump' ORDER BY ID",
    )
    .into_iter()
    .map(|r| r[0].clone().unwrap())
    .collect()
}

/// The `retry_in` of every reconnect the log announces.
fn retry_delays(log: &str) -> Vec<Duration> {
    log.lines()
        .filter_map(|l| l.split("retry_in=").nth(1)?.split_whitespace().next())
        .map(|d| {
            let (number, scale) = match d.strip_suffix("ms") {
                Some(ms) => (ms, 1e-3),
                None => (d.trim_end_matches('s'), 1.0),
            };
            Duration::from_secs_f64(number.parse::<f64>().unwrap() * scale)
        })
        .collect()
}

/// A private server with the shop tables: every test here stops, kills,
/// freezes or purges it, so none runs on `SLUICE_TEST_MYSQL_URL` (it prints
/// why and the test returns).
fn shop() -> Option<MariaDb> {
    let db = MariaDb::start_private(&[])?;
    db.sql(CREATE);
    Some(db)
}

/// A sidecar for `db` with a new lake (`sluice.lake`) and state dir in the
/// returned directory, which must outlive it.
fn sidecar(db: &MariaDb) -> (Sluice, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(db, &dir.path().join("lake"), &dir.path().join("state"));
    sluice.interval = "200ms".into();
    sluice.timeout = Duration::from_secs(60);
    (sluice, dir)
}

fn seed() -> u64 {
    let seed = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (set SLUICE_TEST_SEED to repeat)");
    seed
}

#[test]
fn reconnects_by_itself_after_server_restart_and_crash() {
    let Some(mut db) = shop() else {
        return;
    };
    let (mut sluice, _dirs) = sidecar(&db);
    let lake = sluice.lake.clone();
    sluice.extra_source = "connect_timeout = \"2s\"".into();
    let mut running = sluice.spawn_run(false);
    let writer = Writer::start(db.socket(), seed(), 1);

    for crash in [false, true] {
        let what = if crash { "SIGKILL" } else { "clean shutdown" };
        let ok = wait_until(Duration::from_secs(30), || {
            committed_rows(&lake, "shop.ledger") > 0 && dump_threads(&db).len() == 1
        });
        assert!(
            ok,
            "sluice is not streaming; log:\n{}",
            running.log_tail(30)
        );
        let down = Instant::now();
        if crash {
            db.kill();
        } else {
            db.stop();
        }
        // Long enough for sluice to find the server gone and back off.
        std::thread::sleep(Duration::from_millis(1500));
        db.restart();
        let outage = down.elapsed();
        let up = Instant::now();
        let reconnected = wait_until(Duration::from_secs(40), || dump_threads(&db).len() == 1);
        assert!(
            reconnected,
            "sluice did not reconnect within 40 s after the {what}; log:\n{}",
            running.log_tail(30)
        );
        let reconnect = up.elapsed();
        // Rows written after the restart reach the lake.
        let written = count(&db, "SELECT COUNT(*) FROM shop.ledger");
        let flowing = wait_until(Duration::from_secs(30), || {
            count(&db, "SELECT COUNT(*) FROM shop.ledger") > written
                && committed_rows(&lake, "shop.ledger") > written
        });
        assert!(
            flowing,
            "no new rows after the {what}; log:\n{}",
            running.log_tail(30)
        );
        eprintln!(
            "{what}: server down for {outage:?}, sluice reconnected {reconnect:?} after it was back, new rows committed {:?} after it was back",
            up.elapsed()
        );
        assert!(
            running.try_wait().is_none(),
            "sluice exited: {}",
            running.log_tail(30)
        );
    }

    let (sent, clients) = writer.finish();
    wait_caught_up(&db, &lake, &mut running);
    let status = running.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}; log:\n{}", running.log_tail(30));

    let log = running.log_text();
    let delays = retry_delays(&log);
    eprintln!("retry delays: {delays:?}");
    assert!(
        delays.len() >= 2,
        "one reconnect per outage at least; log:\n{log}"
    );
    assert!(
        delays.iter().all(|d| *d <= Duration::from_millis(37_500)),
        "backoff is capped at 30 s + 25 %: {delays:?}"
    );
    let lake_state = assert_lake_equals_source(&db, &lake);
    eprintln!(
        "{sent} transactions sent through {clients} clients, {} committed, {} manifests",
        count(&db, "SELECT COUNT(*) FROM shop.ledger"),
        lake_state.manifests.len()
    );
}

/// After a restart, and after FLUSH BINARY LOGS, the newest binlog holds
/// only the events a file begins with (format description, GTID list,
/// binlog checkpoint). `--until-caught-up` must still end, with the cursor
/// at the head: these events carry no rows, and the cursor passes them.
#[test]
fn until_caught_up_ends_when_the_newest_binlog_holds_only_file_headers() {
    let Some(mut db) = shop() else {
        return;
    };
    db.sql(&transactions(1..=20, 7));
    db.stop();
    db.restart();
    db.sql("FLUSH BINARY LOGS");
    let head = db.binlog_head();
    let (mut sluice, _dirs) = sidecar(&db);
    sluice.start = "\"earliest\"".into();
    let started = Instant::now();
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("caught up with the binlog head at start"),
        "sluice ended without catching up:\n{}",
        tail(&log, 20)
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "catching up took {:?}",
        started.elapsed()
    );
    let newest = manifest_paths(&sluice.lake).pop().expect("a manifest");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(newest).unwrap()).unwrap();
    assert_eq!(manifest["cursor"]["file"].as_str(), Some(head.0.as_str()));
    assert_eq!(manifest["cursor"]["pos"].as_u64(), Some(head.1));
    assert_eq!(committed_rows(&sluice.lake, "shop.ledger"), 20);
    assert_lake_equals_source(&db, &sluice.lake);
}

/// `SHOW BINLOG EVENTS` of every file: (file, position) of each rows event →
/// its type and the GTID of its transaction.
fn rows_events(db: &MariaDb) -> HashMap<(String, i64), (String, String)> {
    let mut events = HashMap::new();
    for file in db.query_rows("SHOW BINARY LOGS") {
        let file = file[0].clone().unwrap();
        let mut gtid = String::new();
        for e in db.query_rows(&format!("SHOW BINLOG EVENTS IN '{file}'")) {
            let (pos, kind, info) = (
                e[1].clone().unwrap(),
                e[2].clone().unwrap(),
                e[5].clone().unwrap_or_default(),
            );
            if kind == "Gtid" {
                // "BEGIN GTID 0-1-42", or "GTID 0-1-42" for DDL
                gtid = info.split_whitespace().last().unwrap().to_owned();
            } else if kind.contains("_rows") {
                events.insert((file.clone(), pos.parse().unwrap()), (kind, gtid.clone()));
            }
        }
    }
    events
}

#[test]
fn binlog_rotation_under_load_keeps_every_rows_file_and_position() {
    let Some(db) = shop() else {
        return;
    };
    let (mut sluice, _dirs) = sidecar(&db);
    let lake = sluice.lake.clone();
    // Reconnects resume by file and position: across rotated files.
    sluice.extra_source = "resume = \"position\"".into();
    let mut running = sluice.spawn_run(false);
    let seed = seed();
    let writer = Writer::start(db.socket(), seed, 1);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kills = 0;
    for i in 0..32 {
        std::thread::sleep(Duration::from_millis(rng.gen_range(40..120)));
        db.sql("FLUSH BINARY LOGS");
        if i % 10 == 5 {
            // Drop sluice's connection now and then: it resumes from its
            // checkpoint, which may lie in an earlier file.
            for id in dump_threads(&db) {
                db.sql(&format!("KILL {id}"));
                kills += 1;
            }
        }
    }
    let (sent, _) = writer.finish();
    wait_caught_up(&db, &lake, &mut running);
    let status = running.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}; log:\n{}", running.log_tail(30));
    assert!(
        kills >= 3,
        "sluice was streaming when its connection was killed"
    );
    let lake_state = assert_lake_equals_source(&db, &lake);

    let events = rows_events(&db);
    let mut files = BTreeSet::new();
    for table in ["shop.ledger", "shop.accounts"] {
        for r in lake_state.rows(table) {
            let key = (r.binlog_file.clone(), r.binlog_pos);
            let (kind, gtid) = events.get(&key).unwrap_or_else(|| {
                panic!(
                    "{table} _seq {}: no rows event at {}:{}",
                    r.seq, key.0, key.1
                )
            });
            let expected = match r.op.as_str() {
                "insert" => "Write_rows",
                "update" => "Update_rows",
                _ => "Delete_rows",
            };
            assert!(
                kind.starts_with(expected),
                "{table} _seq {} ({}) points at a {kind} event at {}:{}",
                r.seq,
                r.op,
                key.0,
                key.1
            );
            assert_eq!(
                r.gtid.as_deref(),
                Some(gtid.as_str()),
                "{table} _seq {}",
                r.seq
            );
            files.insert(key.0);
        }
    }
    eprintln!(
        "{sent} transactions over {} binlog files, {} manifests, {kills} connections killed",
        files.len(),
        lake_state.manifests.len()
    );
    assert!(
        files.len() >= 20,
        "rows from only {} binlog files",
        files.len()
    );
}

#[test]
fn silent_server_is_found_dead_through_heartbeats_and_reading_resumes() {
    let Some(db) = shop() else {
        return;
    };
    let (mut sluice, _dirs) = sidecar(&db);
    let lake = sluice.lake.clone();
    sluice.extra_source = "heartbeat = \"1s\"\nconnect_timeout = \"2s\"".into();
    // A second sidecar, started while the server hangs.
    let (mut fresh, _fresh_dirs) = sidecar(&db);
    fresh.extra_source = sluice.extra_source.clone();

    let mut running = sluice.spawn_run(false);
    let writer = Writer::start(db.socket(), seed(), 1);
    let streaming = wait_until(Duration::from_secs(30), || {
        committed_rows(&lake, "shop.ledger") > 0
    });
    assert!(streaming, "log:\n{}", running.log_tail(30));
    writer.finish();
    wait_caught_up(&db, &lake, &mut running);
    // Idle: only heartbeats arrive, the last at most 1 s before the freeze.
    std::thread::sleep(Duration::from_millis(1500));

    db.freeze();
    let frozen = Instant::now();
    let detected = wait_until(Duration::from_secs(15), || {
        running.log_text().contains("the connection is dead")
    });
    let detection = frozen.elapsed();
    assert!(
        detected,
        "no dead connection found; log:\n{}",
        running.log_tail(30)
    );
    // The rule: nothing for 3 heartbeats + 2 s = 5 s. The last heartbeat
    // came 0 to 1 s before the freeze: 4 to 5 s after it, and a little more
    // for the scheduler and this poll.
    assert!(
        detection >= Duration::from_millis(3900) && detection <= Duration::from_secs(6),
        "dead connection found {detection:?} after the freeze; expected 3 × 1 s + 2 s after the last heartbeat"
    );
    // A reconnect to the hung server gives up after connect_timeout ...
    let gave_up = wait_until(Duration::from_secs(15), || {
        running
            .log_text()
            .lines()
            .any(|l| l.contains("reconnecting") && l.contains("within 2s"))
    });
    assert!(gave_up, "reconnects hang; log:\n{}", running.log_tail(30));
    // ... and so does a start against it.
    let began = Instant::now();
    let out = fresh.run_until_caught_up();
    let start_timeout = began.elapsed();
    let line = assert_definite_error(&out);
    assert!(line.contains("within 2s"), "{line}");
    assert!(
        start_timeout < Duration::from_secs(5),
        "start gave up after {start_timeout:?}"
    );
    assert!(manifest_paths(&fresh.lake).is_empty());

    let before = committed_rows(&lake, "shop.ledger");
    db.thaw();
    let thawed = Instant::now();
    let writer = Writer::start(db.socket(), seed(), 1_000_000);
    let resumed = wait_until(Duration::from_secs(30), || {
        committed_rows(&lake, "shop.ledger") > before
    });
    assert!(
        resumed,
        "no commit after the thaw; log:\n{}",
        running.log_tail(30)
    );
    eprintln!(
        "dead connection found {detection:?} after the freeze; a start gave up after {start_timeout:?}; rows committed again {:?} after the thaw",
        thawed.elapsed()
    );

    writer.finish();
    wait_caught_up(&db, &lake, &mut running);
    let status = running.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}; log:\n{}", running.log_tail(30));
    assert_lake_equals_source(&db, &lake);
}

/// Everything under the lake root: manifests and data files.
fn lake_files(root: &Path) -> (Vec<PathBuf>, BTreeSet<String>) {
    (manifest_paths(root), data_files(root))
}

/// Purges every binlog before a new one, until `gone` is gone (the server
/// keeps a file while crash recovery may still need it).
fn purge_up_to_head(db: &MariaDb, gone: &str) {
    db.sql("FLUSH BINARY LOGS");
    let (head, _) = db.binlog_head();
    let purged = wait_until(Duration::from_secs(10), || {
        db.sql(&format!("PURGE BINARY LOGS TO '{head}'"));
        !db.query_rows("SHOW BINARY LOGS")
            .iter()
            .any(|r| r[0].as_deref() == Some(gone))
    });
    assert!(purged, "{gone} is still on the server");
}

fn assert_names_purged_binlog(line: &str, file: &str) {
    assert!(
        line.contains(&format!("binlog {file} is no longer on the server"))
            && line.contains("source.binlog_dir")
            && line.contains("empty lake"),
        "{line}"
    );
}

#[test]
fn purged_binlog_at_start_is_a_definite_error_that_leaves_the_lake_alone() {
    let Some(db) = shop() else {
        return;
    };
    let (mut sluice, _dirs) = sidecar(&db);
    let lake = sluice.lake.clone();
    db.sql(&transactions(1..=20, 1));
    sluice.run_until_caught_up_ok();
    let (cursor_file, _) = db.binlog_head();
    // Transactions the lake has not seen, in the file it would read next.
    db.sql(&transactions(21..=40, 1));
    purge_up_to_head(&db, &cursor_file);
    let before = lake_files(&lake);

    for resume in ["gtid", "position"] {
        sluice.extra_source = format!("resume = \"{resume}\"");
        let out = sluice.run_until_caught_up();
        let line = assert_definite_error(&out);
        assert_names_purged_binlog(&line, &cursor_file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.matches("sluice: error:").count(), 1, "{stderr}");
        assert_eq!(
            lake_files(&lake),
            before,
            "resume = {resume} changed the lake"
        );
        eprintln!("resume = {resume}: {line}");
    }
}

#[test]
fn binlog_purged_while_disconnected_stops_the_running_sidecar() {
    let Some(db) = shop() else {
        return;
    };
    let (sluice, _dirs) = sidecar(&db);
    let lake = sluice.lake.clone();
    let mut running = sluice.spawn_run(false);
    db.sql(&transactions(1..=20, 2));
    wait_caught_up(&db, &lake, &mut running);
    let (cursor_file, _) = db.binlog_head();

    // Keep sluice out (its reconnects fail like a network outage would),
    // then drop its connection.
    let accounts = ["'repl'@'%'", "'repl'@'localhost'", "'repl'@'127.0.0.1'"];
    for a in accounts {
        db.sql(&format!("ALTER USER {a} ACCOUNT LOCK"));
    }
    for id in dump_threads(&db) {
        db.sql(&format!("KILL {id}"));
    }
    let retrying = wait_until(Duration::from_secs(20), || {
        running.log_text().matches("transient error").count() >= 2
    });
    assert!(retrying, "log:\n{}", running.log_tail(30));
    let before = lake_files(&lake);

    db.sql(&transactions(21..=40, 2));
    purge_up_to_head(&db, &cursor_file);
    for a in accounts {
        db.sql(&format!("ALTER USER {a} ACCOUNT UNLOCK"));
    }
    let unlocked = Instant::now();
    let status = running
        .wait_timeout(Duration::from_secs(40))
        .unwrap_or_else(|| panic!("sluice keeps retrying; log:\n{}", running.log_tail(30)));
    assert!(!status.success());
    let log = running.log_text();
    let line = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert!(line.starts_with("sluice: error: "), "{line}");
    assert_names_purged_binlog(line, &cursor_file);
    assert_eq!(
        lake_files(&lake),
        before,
        "the lake changed after the purge"
    );
    eprintln!(
        "stopped {:?} after the account was unlocked: {line}",
        unlocked.elapsed()
    );
}

fn grant_replica_list(db: &MariaDb) {
    db.sql(
        "GRANT REPLICATION MASTER ADMIN ON *.* TO 'repl'@'%';
         GRANT REPLICATION MASTER ADMIN ON *.* TO 'repl'@'localhost';
         GRANT REPLICATION MASTER ADMIN ON *.* TO 'repl'@'127.0.0.1';",
    );
}

/// A second mariadbd with `--server-id=id`, replicating from `source` by
/// GTID from its head on (its own users and tables are made locally).
fn start_replica(source: &MariaDb, id: u32) -> MariaDb {
    let replica = MariaDb::start_with(&[&format!("--server-id={id}")]);
    replica.sql(CREATE);
    let head = source
        .query_value("SELECT @@gtid_binlog_pos")
        .unwrap_or_default();
    replica.sql(&format!(
        "SET GLOBAL gtid_slave_pos = '{head}';
         CHANGE MASTER TO master_host = '127.0.0.1', master_port = {}, master_user = 'repl',
           master_password = '{REPL_PASSWORD}', master_use_gtid = slave_pos, master_connect_retry = 1;
         START SLAVE;",
        source.port()
    ));
    replica
}

fn replica_registered(source: &MariaDb, id: u32) -> bool {
    source
        .query_rows("SHOW SLAVE HOSTS")
        .iter()
        .any(|r| r[0].as_deref() == Some(&id.to_string()))
}

/// The replica is connected and applies what the source writes now.
fn assert_replicates(source: &MariaDb, replica: &MariaDb, id: i64) {
    source.sql(&format!("INSERT INTO shop.ledger VALUES ({id}, 0, 0)"));
    let applied = wait_until(Duration::from_secs(20), || {
        replica.query_value(&format!("SELECT COUNT(*) FROM shop.ledger WHERE id = {id}"))
            == Some("1".into())
    });
    assert!(
        applied,
        "the replica stopped replicating; its log:\n{}",
        replica.error_log_text()
    );
}

#[test]
fn server_id_of_a_connected_replica_is_refused_without_disturbing_it() {
    let Some(source) = shop() else {
        return;
    };
    // With this privilege sluice can list the replicas before it connects.
    grant_replica_list(&source);
    let replica = start_replica(&source, 7);
    assert!(wait_until(Duration::from_secs(20), || replica_registered(
        &source, 7
    )));
    assert_replicates(&source, &replica, 1_000_001);
    let dump_before = dump_threads(&source);

    let (mut sluice, _dirs) = sidecar(&source);
    let lake = sluice.lake.clone();
    sluice.server_id = 7;
    let line = assert_definite_error(&sluice.run_until_caught_up());
    eprintln!("{line}");
    assert!(
        line.contains("source.server_id 7 is already taken by the replica at 127.0.0.1:")
            && line.contains("SHOW SLAVE HOSTS"),
        "{line}"
    );
    let check = sluice.run_args(&["check"], &[]);
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(!check.status.success(), "{report}");
    assert!(
        report.lines().any(|l| l.starts_with("[FAIL] server_id")),
        "{report}"
    );

    sluice.server_id = 1;
    let line = assert_definite_error(&sluice.run_until_caught_up());
    assert!(
        line.contains("source.server_id 1 is already taken by the source server itself"),
        "{line}"
    );

    assert_eq!(
        dump_threads(&source),
        dump_before,
        "the replica was disconnected"
    );
    assert!(
        !replica.error_log_text().contains("4052"),
        "{}",
        replica.error_log_text()
    );
    assert_replicates(&source, &replica, 1_000_002);
    assert!(manifest_paths(&lake).is_empty());
}

#[test]
fn replica_that_takes_sluices_server_id_stops_sluice_with_a_clear_error() {
    let Some(source) = shop() else {
        return;
    };
    let (mut sluice, _dirs) = sidecar(&source);
    let lake = sluice.lake.clone();
    sluice.server_id = 7;
    let mut running = sluice.spawn_run(false);
    source.sql(&transactions(1..=10, 3));
    wait_caught_up(&source, &lake, &mut running);

    // The replica connects second: the server ends sluice's dump for it.
    let replica = start_replica(&source, 7);
    let connected = Instant::now();
    let status = running
        .wait_timeout(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("sluice keeps running; log:\n{}", running.log_tail(30)));
    let stopped = connected.elapsed();
    assert!(!status.success());
    let log = running.log_text();
    let line = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert!(
        line.starts_with("sluice: error: source.server_id 7 is already taken by another replica"),
        "{line}"
    );
    assert_eq!(log.matches("transient error").count(), 0, "no fight: {log}");
    assert_lake_equals_source(&source, &lake);
    assert_replicates(&source, &replica, 1_000_001);

    // Without the privilege to list replicas, a sidecar that starts second
    // cannot see the replica: its dump request takes the id over once, the
    // replica's reconnect takes it back, and sluice stops instead of retrying.
    let (mut second, _second_dirs) = sidecar(&source);
    second.server_id = 7;
    let began = Instant::now();
    let out = second.run_args(&["run"], &[]);
    let line = assert_definite_error(&out);
    assert!(
        line.contains("source.server_id 7 is already taken by another replica"),
        "{line}"
    );
    assert!(
        replica.error_log_text().contains("server_errno=4052"),
        "the replica was disconnected once: {}",
        replica.error_log_text()
    );
    eprintln!(
        "sluice stopped {stopped:?} after the replica connected; a second sidecar stopped {:?} after its start",
        began.elapsed()
    );
    assert_replicates(&source, &replica, 1_000_002);
}
