//! Two sidecars on one lake never both commit: the one that finds its next
//! manifest already written stops with an error that says the lake is owned by
//! another writer, and the lake stays consistent.

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

const FENCING: &str = r"(?i)another writer|fenc|owned|owns|already (exists|written|committed)";

fn setup(db: &MariaDb) {
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(32), n INT)",
    );
}

fn insert_rows(db: &MariaDb, from: i32, to: i32) {
    let values: Vec<String> = (from..=to).map(|i| format!("({i}, 'v{i}', {i})")).collect();
    db.sql(&format!("INSERT INTO shop.t VALUES {}", values.join(", ")));
}

fn assert_lake_matches_source(db: &MariaDb, lake: &Lake) {
    let expected = db.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_same_table("shop.t", &expected, &lake.replay("shop.t", &[0]));
}

fn assert_fencing_error(running: &Running, status: std::process::ExitStatus) {
    assert!(
        !status.success(),
        "the fenced writer exited 0; log:\n{}",
        running.log_tail(30)
    );
    let log = running.log_text();
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    eprintln!("fenced writer's last line: {last}");
    assert!(
        last.starts_with("sluice: error: ") && regex::Regex::new(FENCING).unwrap().is_match(last),
        "the fenced writer's last line must be `sluice: error: …` about another writer, got {last:?}; log:\n{}",
        running.log_tail(30)
    );
}

/// A different, valid lowercase-hex writer id of the same length.
fn other_writer_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            let d = c.to_digit(16).unwrap_or(0);
            std::char::from_digit((d + 1) % 16, 16).unwrap()
        })
        .collect()
}

/// Deterministic: while a sidecar runs, another writer commits the manifest
/// this sidecar would write next (a cursor-only checkpoint, as a second sidecar
/// that won the race would). The running sidecar must notice on its next commit
/// and stop, leaving that manifest untouched; a sidecar started afterwards
/// resumes from it, removes the loser's uncommitted files and catches up.
#[test]
fn writer_stops_when_its_next_manifest_already_exists() {
    writer_stops_on_existing_manifest(Backend::Local);
}

#[test]
fn writer_stops_when_its_next_manifest_already_exists_on_s3() {
    writer_stops_on_existing_manifest(Backend::S3);
}

fn writer_stops_on_existing_manifest(backend: Backend) {
    // Asserts that an idle sidecar commits nothing: on a shared server other
    // tests' transactions move its cursor.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    setup(&db);
    let test_lake = TestLake::new(backend);
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state_dir.path());
    sluice.interval = "1s".into();
    insert_rows(&db, 1, 100);
    sluice.run_until_caught_up_ok();
    let committed = test_lake.manifest_count() as u64;
    assert!(committed >= 1, "the first run committed nothing");
    // Nothing new: --until-caught-up exits 0 without a manifest.
    sluice.run_until_caught_up_ok();
    assert_eq!(test_lake.manifest_count() as u64, committed);

    let mut a = sluice.spawn_run(false);
    // Let it start and settle on the committed cursor.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        a.try_wait().is_none(),
        "sluice run exited while idle; log:\n{}",
        a.log_tail(30)
    );
    assert_eq!(
        test_lake.manifest_count() as u64,
        committed,
        "an idle sidecar committed a manifest with nothing new"
    );

    // Another writer commits seq N+1 first.
    let last: Value = serde_json::from_str(
        &test_lake
            .manifest_text(committed)
            .expect("the last committed manifest"),
    )
    .unwrap();
    let mut planted = last.clone();
    planted["seq"] = (committed + 1).into();
    planted["files"] = Value::Array(vec![]);
    planted["ddl"] = Value::Array(vec![]);
    let id = last["writer"]["id"].as_str().expect("writer.id").to_owned();
    planted["writer"]["id"] = other_writer_id(&id).into();
    let planted_text = serde_json::to_string_pretty(&planted).unwrap();
    test_lake.put_manifest(committed + 1, &planted_text);

    insert_rows(&db, 101, 150);
    db.sql("UPDATE shop.t SET n = n + 1000 WHERE id <= 10; DELETE FROM shop.t WHERE id BETWEEN 11 AND 20");

    let status = a.wait_timeout(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "sluice kept running over another writer's manifest; log:\n{}",
            a.log_tail(30)
        )
    });
    assert_fencing_error(&a, status);
    assert_eq!(
        test_lake.manifest_text(committed + 1).as_deref(),
        Some(planted_text.as_str()),
        "the other writer's manifest was overwritten"
    );
    assert!(
        test_lake.manifest_text(committed + 2).is_none(),
        "the fenced writer committed past the other writer's manifest"
    );

    // A new sidecar resumes from the other writer's manifest and catches up.
    sluice.run_until_caught_up_ok();
    let lake = test_lake.read();
    assert!(lake.manifests.len() as u64 >= committed + 2);
    assert_lake_matches_source(&db, &lake);
}

/// Two sidecars with their own state dirs and replica ids race on one lake:
/// within 30 s one of them is fenced, the other keeps going, and the lake holds
/// every change exactly once.
#[test]
fn racing_writers_one_is_fenced() {
    racing_writers(Backend::Local);
}

#[test]
fn racing_writers_one_is_fenced_on_s3() {
    racing_writers(Backend::S3);
}

fn racing_writers(backend: Backend) {
    // Both sidecars must stay alive while idle: on a shared server other
    // tests' transactions would make them commit (and one be fenced) early.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    setup(&db);
    let test_lake = TestLake::new(backend);
    let state_a = tempfile::tempdir().unwrap();
    let state_b = tempfile::tempdir().unwrap();
    let mut sluice_a = test_lake.sluice(&db, state_a.path());
    sluice_a.interval = "1s".into();
    let mut sluice_b = test_lake.sluice(&db, state_b.path());
    sluice_b.interval = "1s".into();
    sluice_b.server_id = 5402; // a replica id is unique per server
    insert_rows(&db, 1, 100);
    sluice_a.run_until_caught_up_ok();

    let mut a = sluice_a.spawn_run(false);
    let mut b = sluice_b.spawn_run(false);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        a.try_wait().is_none(),
        "A exited early; log:\n{}",
        a.log_tail(30)
    );
    assert!(
        b.try_wait().is_none(),
        "B exited early; log:\n{}",
        b.log_tail(30)
    );

    let mut next = 101;
    let mut loser = None;
    for _ in 0..120 {
        insert_rows(&db, next, next + 9);
        db.sql(&format!(
            "UPDATE shop.t SET n = n + 1 WHERE id = {}",
            next - 50
        ));
        next += 10;
        std::thread::sleep(Duration::from_millis(250));
        if let Some(s) = a.try_wait() {
            loser = Some(("A", s));
            break;
        }
        if let Some(s) = b.try_wait() {
            loser = Some(("B", s));
            break;
        }
    }
    let (name, status) = loser.expect("neither sidecar was fenced within 30 s of racing");
    let (fenced, survivor) = if name == "A" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_fencing_error(fenced, status);

    // The survivor keeps committing.
    let before = test_lake.manifest_count();
    insert_rows(&db, next, next + 49);
    let progressed = wait_until(Duration::from_secs(15), || {
        test_lake.manifest_count() > before
    });
    assert!(
        survivor.try_wait().is_none(),
        "the winner stopped too; log:\n{}",
        survivor.log_tail(30)
    );
    assert!(
        progressed,
        "the winner committed nothing after the race; log:\n{}",
        survivor.log_tail(30)
    );
    let status = survivor.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "SIGTERM must end in exit 0, got {status}; log:\n{}",
        survivor.log_tail(30)
    );

    // A fresh run cleans what the loser left and catches up.
    sluice_a.run_until_caught_up_ok();
    let lake = test_lake.read();
    assert_lake_matches_source(&db, &lake);
    let rows = lake.rows("shop.t");
    let inserts = rows.iter().filter(|r| r.op == "insert").count() as i32;
    assert_eq!(
        inserts,
        next + 49,
        "every insert is in the lake exactly once"
    );
}

/// Every file every manifest lists is in the lake with its listed size.
fn assert_listed_files_intact(root: &std::path::Path) {
    for path in manifest_paths(root) {
        let m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for f in m["files"].as_array().unwrap() {
            let rel = f["path"].as_str().unwrap();
            let size = std::fs::metadata(root.join(rel))
                .unwrap_or_else(|e| panic!("{} lists {rel}, which is gone: {e}", path.display()))
                .len();
            assert_eq!(
                Some(size),
                f["bytes"].as_u64(),
                "{} lists {rel} with another size",
                path.display()
            );
        }
    }
}

/// A second sidecar started while the first writes under load (pending files
/// of the next checkpoint in the lake at any moment) deletes nothing the
/// first may still commit; one of them is fenced, and the lake holds every
/// change exactly once. Three second writers in a row, so the starts fall at
/// different moments of the first one's checkpoints.
#[test]
fn a_second_writer_started_under_load_deletes_nothing_the_first_commits() {
    second_writer_under_load(Backend::Local);
}

#[test]
fn a_second_writer_started_under_load_deletes_nothing_the_first_commits_on_s3() {
    second_writer_under_load(Backend::S3);
}

fn second_writer_under_load(backend: Backend) {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    setup(&db);
    let test_lake = TestLake::new(backend);
    let states = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let sidecars: Vec<Sluice> = states
        .iter()
        .enumerate()
        .map(|(i, state)| {
            let mut s = test_lake.sluice(&db, state.path());
            s.interval = "300ms".into();
            s.max_rows = 40; // buffers spill: pending files between checkpoints
            s.server_id = 5401 + i as u32;
            s
        })
        .collect();
    insert_rows(&db, 1, 100);
    sidecars[0].run_until_caught_up_ok();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // One long-lived client feeds small transactions until `stop`.
    let load = {
        let stop = stop.clone();
        let mut client = db.client();
        let namespace = db.namespace().clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut child = client
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn mariadb client");
            let mut stdin = child.stdin.take().unwrap();
            let mut next = 101;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let values: Vec<String> = (next..next + 50)
                    .map(|i| format!("({i}, 'v{i}', {i})"))
                    .collect();
                let sql = format!(
                    "INSERT INTO shop.t VALUES {}; UPDATE shop.t SET n = n + 1 WHERE id = {};\n",
                    values.join(", "),
                    next - 50
                );
                let sql = namespace.to_server(&sql).into_owned();
                if stdin.write_all(sql.as_bytes()).is_err() {
                    break;
                }
                next += 50;
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            next
        })
    };

    let mut running = sidecars[0].spawn_run(false);
    let mut running_ix = 0;
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(700 + 400 * round));
        let other_ix = 1 - running_ix;
        let mut other = sidecars[other_ix].spawn_run(false);
        let mut fenced = None;
        for _ in 0..300 {
            if let Some(s) = running.try_wait() {
                fenced = Some((true, s));
                break;
            }
            if let Some(s) = other.try_wait() {
                fenced = Some((false, s));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (first_lost, status) = fenced
            .unwrap_or_else(|| panic!("round {round}: neither sidecar was fenced within 30 s"));
        if first_lost {
            assert_fencing_error(&running, status);
            running = other;
            running_ix = other_ix;
        } else {
            assert_fencing_error(&other, status);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let next = load.join().expect("load thread");
    let status = running.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "SIGTERM must end in exit 0; log:\n{}",
        running.log_tail(30)
    );
    sidecars[0].run_until_caught_up_ok();

    let root = test_lake.local_root();
    assert_listed_files_intact(&root);
    let lake = Lake::read(&root);
    assert_lake_matches_source(&db, &lake);
    let inserts = lake
        .rows("shop.t")
        .iter()
        .filter(|r| r.op == "insert")
        .count() as i32;
    assert_eq!(
        inserts,
        next - 1,
        "every insert is in the lake exactly once"
    );
}
