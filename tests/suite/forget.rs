//! `sluice forget` (DESIGN.md "Column policies and erasure"): rows of named
//! keys leave the changelog and the current table while sluice runs, a
//! writer writes, folds fold and compaction compacts, after the key column
//! was renamed and another column's type changed; a kill in the middle
//! and a second run finish the job. Afterwards no byte of the lake holds a
//! value the erased keys ever had (seeded random tokens, searched in the
//! decoded Parquet and in every other file), every other row is still there,
//! and the changelog replayed equals `SELECT *` without the erased keys.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::column_policies::hmac_hex;
use crate::common::*;
use crate::current::current_rows;
use crate::delta::{delta_commits, ensure_readers, read_delta};

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;

const KEY: &str = "a-forget-test-key";

/// A token no byte of the lake holds by chance.
fn token(rng: &mut impl FnMut(u64) -> u64, kind: &str) -> String {
    format!("{kind}{:08x}{:08x}", rng(1 << 32), rng(1 << 32))
}

/// The changelog's Delta table read by `deltalake`, replayed by `_seq`:
/// `id` became `pid` and `email` became `mail` on the way.
fn changelog_replay(dir: &Path) -> Table {
    let read = read_delta(
        &dir.display().to_string(),
        &["_seq", "_op", "id", "pid", "name", "email", "mail", "n"],
        None,
        &Value::Null,
        "deltalake",
    );
    let mut rows = read.rows["deltalake"].clone();
    rows.sort_by_key(|r| r[0].as_deref().unwrap().parse::<i64>().unwrap());
    let mut table = Table::new();
    for r in rows {
        let pid = r[3].clone().or_else(|| r[2].clone());
        let key = vec![pid.clone().unwrap_or_default()];
        match r[1].as_deref().unwrap() {
            "insert" | "snapshot" | "update" => {
                let mail = r[6].clone().or_else(|| r[5].clone());
                table.insert(key, vec![pid, r[4].clone(), mail, r[7].clone()]);
            }
            "delete" => {
                table.remove(&key);
            }
            // The type change converts values: the table is read again.
            "truncate" => table.clear(),
            other => panic!("_op {other}"),
        }
    }
    table
}

/// The rows of the keyless table as a multiset.
fn events_rows(rows: Vec<Vec<Option<String>>>) -> BTreeMap<Vec<Option<String>>, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry(r).or_insert(0) += 1;
    }
    out
}

struct Workload {
    rng: Box<dyn FnMut(u64) -> u64>,
    next_id: u64,
    /// The key column's and the mail column's names now.
    key: &'static str,
    mail: &'static str,
    live: BTreeSet<u64>,
    /// Every token each key ever held, and each `who` of the events.
    tokens: BTreeMap<u64, Vec<String>>,
    whos: Vec<String>,
}

impl Workload {
    /// One transaction of changes to keys not in `spared`.
    fn step(&mut self, db: &MariaDb, spared: &BTreeSet<u64>) {
        let mut sql = String::from("BEGIN;\n");
        for _ in 0..8 {
            let pick = (self.rng)(10);
            let id = {
                let ids: Vec<u64> = self.live.difference(spared).copied().collect();
                ids[(self.rng)(ids.len() as u64) as usize]
            };
            match pick {
                0..=4 => {
                    let (name, email) = (token(&mut self.rng, "nm"), token(&mut self.rng, "em"));
                    sql += &format!(
                        "UPDATE shop.people SET name = '{name}', {} = '{email}@x.org', n = n + 1 WHERE {} = {id};\n",
                        self.mail, self.key
                    );
                    self.tokens.entry(id).or_default().extend([name, email]);
                }
                5 => {
                    sql += &format!("DELETE FROM shop.people WHERE {} = {id};\n", self.key);
                    self.live.remove(&id);
                }
                6..=7 => {
                    self.next_id += 1;
                    let id = self.next_id;
                    let (name, email) = (token(&mut self.rng, "nm"), token(&mut self.rng, "em"));
                    sql += &format!(
                        "INSERT INTO shop.people VALUES ({id}, '{name}', '{email}@x.org', 0);\n"
                    );
                    self.tokens.entry(id).or_default().extend([name, email]);
                    self.live.insert(id);
                }
                _ => {
                    let who = token(&mut self.rng, "wh");
                    sql += &format!(
                        "INSERT INTO shop.events VALUES ('{who}', 'ev{}');\n",
                        (self.rng)(1000)
                    );
                    self.whos.push(who);
                }
            }
        }
        sql += "COMMIT;\n";
        db.sql(&sql);
    }
}

#[test]
fn forget_erases_keys_beside_a_running_sidecar_through_a_kill() {
    ensure_readers();
    let (seed, rng) = seeded_rng(0xf0_4637);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.people (id INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(80), n INT);
         CREATE TABLE shop.events (who VARCHAR(40), what VARCHAR(40));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "200ms".into();
    sluice.compaction = "enabled = true\nmin_age = \"1s\"\ntarget_file_size = \"64KiB\"\n".into();
    sluice.extra =
        "[current]\nenabled = true\nrefresh = \"1s\"\ntarget_file_size = \"16KiB\"\n".into();
    sluice.env = vec![("SLUICE_COLUMN_KEY".into(), KEY.into())];
    let shop = db.namespace().to_server("shop").as_ref().to_string();
    let changelog = lake.path().join(&shop).join("people");
    let current = lake.path().join("_current").join(&shop).join("people");
    let events = lake.path().join(&shop).join("events");

    let mut w = Workload {
        rng: Box::new(rng),
        next_id: 0,
        key: "id",
        mail: "email",
        live: BTreeSet::new(),
        tokens: BTreeMap::new(),
        whos: Vec::new(),
    };
    let mut sql = String::new();
    for _ in 0..1500 {
        w.next_id += 1;
        let id = w.next_id;
        let (name, email) = (token(&mut w.rng, "nm"), token(&mut w.rng, "em"));
        sql += &format!("INSERT INTO shop.people VALUES ({id}, '{name}', '{email}@x.org', 0);\n");
        w.tokens.entry(id).or_default().extend([name, email]);
        w.live.insert(id);
    }
    db.sql(&sql);
    let mut run = sluice.spawn_run(false);
    let none = BTreeSet::new();
    for _ in 0..60 {
        w.step(&db, &none);
        std::thread::sleep(Duration::from_millis(30));
    }
    let ready = wait_until(Duration::from_secs(60), || {
        current.join("_delta_log").is_dir() && events.join("_delta_log").is_dir()
    });
    assert!(ready, "no Delta tables: {}", run.log_tail(30));
    // The key column and another are renamed, a column changes its type
    // (the changelog's older files are copied in the new one, the
    // originals left as tombstones), and the writing goes on.
    db.sql(
        "ALTER TABLE shop.people RENAME COLUMN id TO pid, RENAME COLUMN email TO mail;
         ALTER TABLE shop.people MODIFY n DECIMAL(12,2);",
    );
    (w.key, w.mail) = ("pid", "mail");
    for _ in 0..40 {
        w.step(&db, &none);
        std::thread::sleep(Duration::from_millis(30));
    }
    let rewritten = wait_until(Duration::from_secs(60), || {
        changelog.join("_rewritten").is_dir()
    });
    assert!(rewritten, "no type rewrite: {}", run.log_tail(30));

    // Keys to erase: some live, some deleted since, one never there.
    let mut erased: BTreeSet<u64> = BTreeSet::new();
    let all: Vec<u64> = w.tokens.keys().copied().collect();
    while erased.len() < 12 {
        erased.insert(all[(w.rng)(all.len() as u64) as usize]);
    }
    let gone_whos: Vec<String> = w.whos.iter().take(3).cloned().collect();
    // The key that never was comes first: lines for keys without rows stop
    // after ten.
    let mut key_args: Vec<String> = vec!["--key".into(), "{\"pid\": 999999}".into()];
    for id in &erased {
        key_args.extend(["--key".into(), format!("{{\"pid\": {id}}}")]);
    }

    // A forget that dies after its changelog commit, before it deletes
    // the files it replaced, while the writer writes and sluice folds.
    let forget = |sluice: &Sluice, extra_env: Option<&str>| {
        let mut args: Vec<&str> = vec!["forget"];
        args.extend(key_args.iter().map(String::as_str));
        let mut cmd = sluice.command(&args);
        cmd.arg(format!("{shop}.people"));
        if let Some(point) = extra_env {
            cmd.env("SLUICE_TEST_ABORT_IN_FORGET", point);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().expect("spawn sluice forget")
    };
    let started = Instant::now();
    // Deaths after the copies are written (before the commit) and after
    // the changelog's commit (before the replaced files are deleted), then
    // a kill -9 at a random moment, while the writer writes.
    for point in ["copied", "committed"] {
        let mut child = forget(&sluice, Some(point));
        while child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(120), "forget hangs");
            w.step(&db, &erased);
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            !out.status.success(),
            "the abort hook at {point} did not fire: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut child = forget(&sluice, None);
    let kill_after = started.elapsed() + Duration::from_millis(20 + (w.rng)(200));
    while started.elapsed() < kill_after && child.try_wait().unwrap().is_none() {
        w.step(&db, &erased);
    }
    let _ = child.kill();
    child.wait().unwrap();

    let mut child = forget(&sluice, None);
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(240), "forget hangs");
        w.step(&db, &erased);
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "forget failed: {stderr}");
    eprintln!("forget: {stdout}");
    assert!(
        stdout.contains(&format!("of 13 keys of {shop}.people")),
        "{stdout}"
    );
    // The key that never was gets a line of its own (so do keys that the
    // killed runs erased already).
    let missing: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("no rows of it in the lake"))
        .collect();
    assert!(missing.iter().any(|l| l.contains("999999")), "{stderr}");

    // Rows of the keyless table by the values of a column.
    let mut args = vec!["forget".to_string()];
    for who in &gone_whos {
        args.extend(["--where".into(), format!("{{\"who\": \"{who}\"}}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sluice.run_args(&args, &["shop.events"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // More changes after the erasure: rows of other keys keep coming.
    for _ in 0..30 {
        w.step(&db, &erased);
        std::thread::sleep(Duration::from_millis(20));
    }
    let ids = erased
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let source: Table = db
        .query_rows(&format!(
            "SELECT pid, name, mail, n FROM shop.people WHERE pid NOT IN ({ids})"
        ))
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
        .collect();
    let caught_up = wait_until(Duration::from_secs(60), || {
        changelog_replay(&changelog) == source
    });
    let status = run.terminate(Duration::from_secs(60));
    let log = run.log_text();
    assert!(status.success(), "sluice failed: {}", tail(&log, 40));
    assert!(
        caught_up,
        "seed {seed}: the changelog does not replay to the source without the erased keys"
    );
    assert!(!log.contains(" ERROR "), "{}", tail(&log, 40));
    assert_same_table(
        &format!("current table after forget (seed {seed})"),
        &source,
        &current_rows(&current, &["pid", "name", "mail", "n"], None),
    );
    let whos = gone_whos
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(",");
    let events_source = events_rows(db.query_rows(&format!(
        "SELECT who, what FROM shop.events WHERE who NOT IN ({whos})"
    )));
    let read = read_delta(
        &events.display().to_string(),
        &["who", "what", "_seq"],
        None,
        &Value::Null,
        crate::delta::ALL_READERS,
    );
    assert_eq!(read.rows.len(), 4, "a reader is missing");
    for (reader, rows) in &read.rows {
        let rows = rows.iter().map(|r| r[..2].to_vec()).collect();
        assert_eq!(
            events_rows(rows),
            events_source,
            "{reader} reads shop.events otherwise"
        );
    }

    // Not one value the erased keys held, anywhere; the others' are there.
    let texts = lake_text(lake.path());
    for id in &erased {
        for t in &w.tokens[id] {
            let hits = holding(&texts, t);
            assert!(hits.is_empty(), "seed {seed}: {t} of key {id} in {hits:?}");
        }
    }
    for who in &gone_whos {
        let hits = holding(&texts, who);
        assert!(hits.is_empty(), "seed {seed}: {who} in {hits:?}");
    }
    for row in source.values().take(50) {
        let name = row[1].as_deref().unwrap();
        assert!(!holding(&texts, name).is_empty(), "{name} is lost");
    }

    // The commits that erased are data changes; the record names the keys
    // by HMAC only.
    let erasing: Vec<Vec<Value>> = delta_commits(&changelog)
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| a.iter().any(|x| x["commitInfo"]["operation"] == "DELETE"))
        .collect();
    assert!(!erasing.is_empty());
    for actions in &erasing {
        for x in actions {
            if let Some(f) = x.get("add").or_else(|| x.get("remove")) {
                assert_eq!(f["dataChange"], true, "{x}");
            }
        }
    }
    let records: Vec<Value> = std::fs::read_dir(lake.path().join("_sluice/erasures"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    // The last run's record (the runs before it may have died first).
    let record = records
        .iter()
        .filter(|r| r["table"] == format!("{shop}.people"))
        .max_by_key(|r| r["id"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no record of the erasure: {records:?}"));
    assert_eq!(record["keys"], 13);
    let mut want: Vec<String> = erased
        .iter()
        .chain([&999_999])
        .map(|id| hmac_hex(KEY.as_bytes(), format!("{{\"pid\":{id}}}").as_bytes()))
        .collect();
    let mut got: Vec<String> = record["key_hmacs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // No copy of a killed run is left behind: every copy is in a commit.
    for (table, dir) in [
        (&changelog, changelog.join("_erased")),
        (&current, current.clone()),
    ] {
        let named: BTreeSet<String> = delta_commits(table)
            .into_iter()
            .flat_map(|(_, a)| a)
            .filter_map(|a| a["add"]["path"].as_str().map(str::to_string))
            .map(|p| p.rsplit('/').next().unwrap().to_string())
            .collect();
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("erased-") {
                assert!(named.contains(&name), "{name} in {dir:?} is in no commit");
            }
        }
    }

    // Copies of a current table's files keep their integer key
    // DELTA_BINARY_PACKED (a fold scans it).
    let mut copies = 0;
    for add in crate::deletion_vectors::live_files(&current).values() {
        let path = add["path"].as_str().unwrap();
        if !path.starts_with("erased-") {
            continue;
        }
        copies += 1;
        let file = std::fs::File::open(current.join(path)).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(&reader);
        for group in meta.row_groups() {
            assert!(
                group.columns().iter().any(|c| c
                    .encodings()
                    .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED)),
                "{path}: no column DELTA_BINARY_PACKED"
            );
        }
    }
    assert!(copies > 0, "no erased copy of a current file is live");

    // The running sidecar noted the record in a manifest.
    let noted: Vec<Value> = manifest_paths(lake.path())
        .iter()
        .flat_map(|p| {
            let m: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            m["erasures"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    assert!(
        noted
            .iter()
            .any(|e| e["id"] == record["id"] && e["key_hmacs"] == record["key_hmacs"]),
        "no manifest notes {}: {noted:?}",
        record["id"]
    );
    assert!(record["noted_in"].is_u64(), "{record}");
    let status = sluice.status_json();
    assert!(
        status["erasures"]
            .as_array()
            .is_some_and(|e| e.iter().any(|r| r["table"] == format!("{shop}.people"))),
        "{status}"
    );

    // Idempotent: a second run finds nothing and says so per key.
    let mut args: Vec<&str> = vec!["forget"];
    args.extend(key_args.iter().map(String::as_str));
    let out = sluice.run_args(&args, &["shop.people"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("erased 0 of 13 keys"), "{stdout}");
}

#[test]
fn bad_forget_input_is_one_line_and_changes_nothing() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (a INT, b INT, v VARCHAR(10), PRIMARY KEY (a, b));
         CREATE TABLE shop.k (x INT, y VARCHAR(10));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake.path(), state.path());
    db.sql(
        "INSERT INTO shop.t VALUES (1, 2, 'x'), (3, 4, 'y'); INSERT INTO shop.k VALUES (1, 'z');",
    );
    sluice.run_until_caught_up_ok();
    let before = data_files(lake.path());
    let listing = |root: &Path| -> BTreeSet<(PathBuf, u64)> {
        let mut out = BTreeSet::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let len = e.metadata().unwrap().len();
                    out.insert((p, len));
                }
            }
        }
        out
    };
    let all_before = listing(lake.path());
    for (args, table, says) in [
        (vec!["--key", "{a: 1}"], "shop.t", "not JSON"),
        (vec!["--key", "[1, 2]"], "shop.t", "not a JSON object"),
        (
            vec!["--key", "{\"a\": 1}"],
            "shop.t",
            "no value for key column `b`",
        ),
        (
            vec!["--key", "{\"a\": 1, \"b\": 2, \"v\": 3}"],
            "shop.t",
            "`v` is not a key column",
        ),
        (
            vec!["--key", "{\"a\": \"x\", \"b\": 2}"],
            "shop.t",
            "is not a value of column a",
        ),
        (
            vec!["--key", "{\"a\": 1, \"zz\": 2}"],
            "shop.t",
            "has no column `zz`",
        ),
        (
            vec!["--where", "{\"v\": \"x\"}"],
            "shop.t",
            "name its rows with --key",
        ),
        (vec!["--key", "{\"x\": 1}"], "shop.k", "--where"),
        (vec![], "shop.t", "name the rows to erase"),
        (
            vec!["--key", "{\"a\": 1, \"b\": 2}"],
            "shop.nope",
            "no committed schema history",
        ),
    ] {
        let mut all = vec!["forget"];
        all.extend(args.iter().copied());
        let out = sluice.run_args(&all, &[table]);
        let line = assert_definite_error(&out);
        assert!(line.contains(says), "{args:?}: {line}");
    }
    assert_eq!(data_files(lake.path()), before);
    assert_eq!(
        listing(lake.path()),
        all_before,
        "a refused forget changed the lake"
    );

    // A key the lake never held: exit 0, one line for it, nothing written
    // to the tables.
    let out = sluice.run_args(&["forget", "--key", "{\"a\": 7, \"b\": 8}"], &["shop.t"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("no rows of it in the lake"))
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(data_files(lake.path()), before);
}

/// `sluice forget` of keys spread over a large table's changelog
/// (benches/forget.sh, BENCHMARKS.md "Erasure"): BENCH_ROWS rows inserted in
/// transactions of a million, 1 % of them updated, folded into the current
/// table, then BENCH_KEYS random keys erased. Prints wall time, CPU time and
/// peak RSS of the forget, and what it rewrote.
#[test]
#[ignore = "a benchmark: benches/forget.sh"]
fn bench_forget() {
    let rows: u64 = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let keys: u64 = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.big (id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad VARCHAR(40));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.default_flush = true;
    sluice.timeout = Duration::from_secs(3600);
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1h\"\n".into();
    for from in (0..rows).step_by(1_000_000) {
        let n = (rows - from).min(1_000_000);
        db.sql(&format!(
            "INSERT INTO shop.big (v, pad) SELECT seq, MD5(seq) FROM shop.seq_1_to_{n};"
        ));
    }
    db.sql("UPDATE shop.big SET v = v + 1 WHERE (id * 2654435761) % 100 = 0;");
    sluice.run_until_caught_up_ok();
    let shop = db.namespace().to_server("shop").as_ref().to_string();
    let live_bytes = |dir: &Path| -> (usize, u64) {
        let live = crate::deletion_vectors::live_files(dir);
        let bytes = live.values().map(|a| a["size"].as_u64().unwrap()).sum();
        (live.len(), bytes)
    };
    let changelog = lake.path().join(&shop).join("big");
    let current = lake.path().join("_current").join(&shop).join("big");
    let (files, bytes) = live_bytes(&changelog);
    let (cfiles, cbytes) = live_bytes(&current);
    // Keys spread over the table: a multiplicative hash picks them.
    let file = state.path().join("keys.jsonl");
    let picked: Vec<String> = (0..keys)
        .map(|i| format!("{{\"id\": {}}}", 1 + (i * 2654435761 + 7) % rows))
        .collect();
    std::fs::write(&file, picked.join("\n")).unwrap();
    let cmd = sluice.command(&["forget", "--keys-file", file.to_str().unwrap()]);
    let started = Instant::now();
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "peak_rss_kib=%M user_s=%U sys_s=%S"])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .arg(format!("{shop}.big"))
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("run sluice forget under /usr/bin/time");
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let figure = |name: &str| -> String {
        stderr
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or("?")
            .to_string()
    };
    let record: Value = std::fs::read_dir(lake.path().join("_sluice/erasures"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .next()
        .unwrap();
    let (c, k) = (&record["changelog"], &record["current"]);
    println!("| rows | keys | found | wall s | user s | sys s | peak RSS MiB | changelog files | changelog bytes | files rewritten | bytes rewritten | bytes written | rows removed | current files | current bytes | current files rewritten | current bytes rewritten | log files redacted |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {rows} | {keys} | {} | {:.1} | {} | {} | {} | {files} | {bytes} | {} | {} | {} | {} | {cfiles} | {cbytes} | {} | {} | {} |",
        record["keys_found"],
        wall.as_secs_f64(),
        figure("user_s"),
        figure("sys_s"),
        figure("peak_rss_kib").parse::<u64>().map_or(0, |k| k / 1024),
        c["files_rewritten"],
        c["bytes_rewritten"],
        c["bytes_written"],
        c["rows_removed"],
        k["files_rewritten"],
        k["bytes_rewritten"],
        c["log_files_redacted"].as_u64().unwrap_or(0) + k["log_files_redacted"].as_u64().unwrap_or(0),
    );
}

/// The same on S3 (moto_server): the copies, the deletes, the log's
/// rewrites and the record go through the object store's API.
#[test]
fn forget_erases_keys_on_s3() {
    let (seed, mut rng) = seeded_rng(0x53_f0_46);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.people (pid INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(80), n INT);",
    );
    let test_lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state.path());
    sluice.extra = "[current]\nenabled = true\n".into();
    let mut tokens: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut sql = String::new();
    for id in 1..=300u64 {
        let (name, email) = (token(&mut rng, "nm"), token(&mut rng, "em"));
        sql += &format!("INSERT INTO shop.people VALUES ({id}, '{name}', '{email}', 0);\n");
        tokens.entry(id).or_default().extend([name, email]);
    }
    db.sql(&sql);
    sluice.run_until_caught_up_ok();
    let mut sql = String::new();
    for _ in 0..100 {
        let id = 1 + rng(300);
        let name = token(&mut rng, "nm");
        sql += &format!("UPDATE shop.people SET name = '{name}', n = n + 1 WHERE pid = {id};\n");
        tokens.entry(id).or_default().push(name);
    }
    db.sql(&sql);
    sluice.run_until_caught_up_ok();

    let erased: BTreeSet<u64> = (0..10).map(|_| 1 + rng(300)).collect();
    let mut args = vec!["forget".to_string()];
    for id in &erased {
        args.extend(["--key".into(), format!("{{\"pid\": {id}}}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sluice.run_args(&args, &["shop.people"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // More changes after it, folded from the copies.
    db.sql("UPDATE shop.people SET n = n + 10 WHERE pid % 7 = 0;");
    sluice.run_until_caught_up_ok();

    let root = test_lake.local_root();
    let shop = db.namespace().to_server("shop").as_ref().to_string();
    let ids = erased
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let source: Table = db
        .query_rows(&format!(
            "SELECT pid, name, email, n FROM shop.people WHERE pid NOT IN ({ids})"
        ))
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
        .collect();
    assert_same_table(
        &format!("the current table after forget on S3 (seed {seed})"),
        &source,
        &current_rows(
            &root.join("_current").join(&shop).join("people"),
            &["pid", "name", "email", "n"],
            None,
        ),
    );
    let texts = lake_text(&root);
    for id in &erased {
        for t in &tokens[id] {
            let hits = holding(&texts, t);
            assert!(hits.is_empty(), "seed {seed}: {t} of key {id} in {hits:?}");
        }
    }
    let kept = tokens.keys().find(|id| !erased.contains(id)).unwrap();
    assert!(!holding(&texts, &tokens[kept][0]).is_empty());
    assert!(root.join("_sluice/erasures").is_dir());
}
