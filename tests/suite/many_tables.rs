//! Many tables on a store that answers slowly (DESIGN.md "Many tables"):
//! the store round trips made one after another by `status`, an idle start
//! and a checkpoint must not grow with the table count, since every
//! table's reads and commits are issued together (`[sink]
//! requests_in_flight`). Counted at a proxy in front of moto_server, which
//! logs when each request went out and when its answer came back. Up to
//! `requests_in_flight` tables a round costs the same; past it, one more
//! round per that many tables.

use std::time::{Duration, Instant};

use crate::common::proxy::FaultProxy;
use crate::common::*;

/// What one lake of `tables` tables (in 2 databases) costs in sequential
/// round trips: `status`, an idle `run --until-caught-up`, and a run whose
/// one transaction touches every table (a checkpoint of all of them).
fn round_trips(db: &MariaDb, prefix: &str, tables: usize) -> (usize, usize, usize) {
    let mut ddl = String::new();
    for d in 0..2 {
        ddl.push_str(&format!("CREATE DATABASE {prefix}{d};\n"));
        for t in 0..tables / 2 {
            ddl.push_str(&format!(
                "CREATE TABLE {prefix}{d}.t{t} (id INT PRIMARY KEY, v INT);\n"
            ));
        }
    }
    db.sql(&ddl);
    let every_table = |v: usize| {
        let mut script = String::from("BEGIN;\n");
        for d in 0..2 {
            for t in 0..tables / 2 {
                script.push_str(&format!(
                    "INSERT INTO {prefix}{d}.t{t} VALUES ({v}, {v});\n"
                ));
            }
        }
        script + "COMMIT;\n"
    };
    let lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(db, state.path());
    sluice.include = vec![format!(r"{prefix}\d\..*")];
    sluice.extra_sink = "requests_in_flight = 64".to_owned();
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    proxy.route(&mut sluice, "30s");
    // A distant store: requests issued together overlap for certain (on
    // loopback an answer can come back before a busy machine issues the
    // next request of the same batch, which would look like a chain).
    proxy.set_delay(Duration::from_millis(25));
    db.sql(&every_table(1));
    sluice.run_until_caught_up_ok();

    let measure = |what: &dyn Fn()| {
        proxy.clear_log();
        what();
        proxy.sequential_round_trips()
    };
    let status = measure(&|| {
        let s = sluice.status_json();
        assert_eq!(s["delta_lag"], serde_json::json!({}), "{s}");
    });
    let idle = measure(&|| {
        sluice.run_until_caught_up_ok();
    });
    db.sql(&every_table(2));
    let checkpoint = measure(&|| {
        sluice.run_until_caught_up_ok();
    });
    (status, idle, checkpoint)
}

#[test]
fn status_a_start_and_a_checkpoint_cost_round_trips_that_do_not_grow_with_tables() {
    let db = MariaDb::start();
    let few = round_trips(&db, "few", 4);
    let many = round_trips(&db, "many", 60);
    eprintln!("sequential round trips (status, idle start, checkpoint): 4 tables {few:?}, 60 tables {many:?}");
    // Within a quarter (and two) of the cost of 4 tables: requests of 60
    // tables queue a little at the proxy and at moto. Before the requests
    // of each step were issued together, 48 tables cost 6x the round trips
    // of 4 at start and 8x at a checkpoint; with `requests_in_flight = 1`
    // 60 tables count 10x to 30x.
    let close = |few: usize, many: usize| many <= few + few / 4 + 2;
    assert!(close(few.0, many.0), "status: {few:?} → {many:?}");
    assert!(close(few.1, many.1), "idle start: {few:?} → {many:?}");
    assert!(close(few.2, many.2), "checkpoint: {few:?} → {many:?}");
}

/// A snapshot of many small tables (DESIGN.md "Many tables"): their keys
/// are read in one query when it starts, and a table read in one chunk
/// leaves its consistent read open for the next table. Beside a seeded
/// writer of single-row changes (whose commits move the stream past an open
/// read, so the next table opens a new one) every table equals its source,
/// each row read once: keyed by a primary key, by a composite one in
/// another order than the columns, and by a NOT NULL unique key.
#[test]
fn hundreds_of_small_tables_snapshotted_beside_a_busy_writer_equal_the_source() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};

    let (seed, _) = seeded_rng(48);
    let mut rng = StdRng::seed_from_u64(seed);
    let db = MariaDb::start();
    const DBS: usize = 4;
    const PER_DB: usize = 50;
    // Per table: its name, the SELECT it is compared with, its key's
    // places, and its first rows' keys.
    let mut ddl = String::new();
    let mut tables: Vec<(String, String, Vec<usize>)> = Vec::new();
    let mut snapshot_rows = 0usize;
    for d in 0..DBS {
        ddl.push_str(&format!("CREATE DATABASE mt{d};\n"));
        for t in 0..PER_DB {
            let name = format!("mt{d}.t{t}");
            let rows = rng.gen_range(0..24);
            snapshot_rows += rows;
            let (create, select, key, values): (String, String, Vec<usize>, Vec<String>) = match t
                % 3
            {
                0 => (
                    format!("CREATE TABLE {name} (id INT PRIMARY KEY, v INT, s VARCHAR(20))"),
                    format!("SELECT id, v, s FROM {name}"),
                    vec![0],
                    (1..=rows)
                        .map(|i| format!("({i}, {}, 'r{i}')", rng.gen_range(0..100)))
                        .collect(),
                ),
                1 => (
                    format!("CREATE TABLE {name} (a INT, b VARCHAR(8), v INT, PRIMARY KEY (b, a))"),
                    format!("SELECT a, b, v FROM {name}"),
                    vec![0, 1],
                    (1..=rows)
                        .map(|i| format!("({}, 'k{}', {i})", i % 5, i / 5))
                        .collect(),
                ),
                _ => (
                    format!("CREATE TABLE {name} (u INT NOT NULL, v INT, UNIQUE KEY (u))"),
                    format!("SELECT u, v FROM {name}"),
                    vec![0],
                    (1..=rows).map(|i| format!("({}, {i})", 1000 - i)).collect(),
                ),
            };
            ddl.push_str(&create);
            ddl.push_str(";\n");
            if !values.is_empty() {
                ddl.push_str(&format!(
                    "INSERT INTO {name} VALUES {};\n",
                    values.join(", ")
                ));
            }
            tables.push((name, select, key));
        }
    }
    db.sql(&ddl);

    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.include = vec![r"mt\d\..*".to_owned()];
    sluice.snapshot = "chunk_rows = 7".into();
    sluice.interval = "200ms".into();
    let stop = AtomicBool::new(false);
    let mut writer_rng = StdRng::seed_from_u64(seed + 1);
    let names: Vec<(String, usize)> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| (t.0.clone(), i % PER_DB % 3))
        .collect();
    let mut next = 2000;
    let mut sent = 0;
    let mut run = sluice.spawn_run(false);
    let written = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            crate::snapshot::feed_client(client_command(db.socket()), db.namespace(), &stop, || {
                // Until the snapshot is done (`stop`), or at most this many.
                if sent == 5_000 {
                    return None;
                }
                sent += 1;
                next += 1;
                let (name, kind) = &names[writer_rng.gen_range(0..names.len())];
                let k = writer_rng.gen_range(1..24);
                let stmt = match (kind, writer_rng.gen_range(0..3)) {
                    (0, 0) => format!("INSERT INTO {name} VALUES ({next}, 1, 'w{sent}');"),
                    (0, 1) => format!("UPDATE {name} SET v = v + 1, s = 'u{sent}' WHERE id = {k};"),
                    (0, _) => format!("DELETE FROM {name} WHERE id = {k};"),
                    (1, 0) => format!("INSERT INTO {name} VALUES ({next}, 'w', {sent});"),
                    (1, 1) => format!(
                        "UPDATE {name} SET v = {sent} WHERE a = {} AND b = 'k{}';",
                        k % 5,
                        k / 5
                    ),
                    (1, _) => format!(
                        "DELETE FROM {name} WHERE a = {} AND b = 'k{}';",
                        k % 5,
                        k / 5
                    ),
                    (_, 0) => format!("INSERT INTO {name} VALUES ({next}, {sent});"),
                    (_, 1) => format!("UPDATE {name} SET v = {sent} WHERE u = {};", 1000 - k),
                    (_, _) => format!("DELETE FROM {name} WHERE u = {};", 1000 - k),
                };
                std::thread::sleep(Duration::from_millis(writer_rng.gen_range(0..3)));
                Some(stmt + "\n")
            })
        });
        let done = wait_until(Duration::from_secs(240), || {
            let lake = Lake::read_committed(lake_dir.path());
            lake.manifests.last().is_some_and(|m| {
                m["snapshot"].as_object().is_some_and(|t| {
                    t.len() == tables.len() && t.values().all(|s| s["state"] == "done")
                })
            })
        });
        stop.store(true, Ordering::SeqCst);
        assert!(
            done,
            "the snapshot did not finish (seed {seed}):\n{}",
            run.log_tail(30)
        );
        writer.join().unwrap()
    });
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    assert!(written > 50, "the writer sent only {written} statements");
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    let mut read = 0;
    // The tables whose snapshot rows were read at each position.
    let mut positions: std::collections::BTreeMap<(String, i64), std::collections::BTreeSet<&str>> =
        Default::default();
    let mut tables_read = 0;
    for (name, select, key) in &tables {
        let source = db.table_map(select, key);
        let rows = lake.rows(name);
        let snapshot: Vec<_> = rows.iter().filter(|r| r.op == "snapshot").collect();
        // No row read twice.
        let mut keys: Vec<Vec<String>> = snapshot
            .iter()
            .map(|r| key.iter().map(|&k| format!("{:?}", r.values[k])).collect())
            .collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            all,
            "{name}: a snapshot row read twice (seed {seed})"
        );
        read += all;
        tables_read += usize::from(all > 0);
        for r in &snapshot {
            positions
                .entry((r.binlog_file.clone(), r.binlog_pos))
                .or_default()
                .insert(name.as_str());
        }
        assert_same_table(name, &source, &lake.replay(name, key));
    }
    // Tables shared consistent reads (one position served several tables),
    // and the writer's commits made the reader open new ones. How many
    // reads there were depends on the machine's pace beside the writer.
    let shared = positions.values().map(|t| t.len()).max().unwrap_or(0);
    eprintln!(
        "{tables_read} tables read at {} positions, at most {shared} at one",
        positions.len()
    );
    assert!(
        positions.len() > 1 && shared > 1,
        "{tables_read} tables read at {} positions, at most {shared} tables at one",
        positions.len()
    );
    // The writer deleted some rows before their table was read and added
    // others: the reads hold about the rows loaded.
    assert!(
        read > snapshot_rows / 2,
        "{read} snapshot rows of {snapshot_rows} loaded"
    );
}

/// Many tables through a store that loses answers and fails: 80 tables on
/// moto behind the fault proxy, which loses the answer to every 3rd Delta
/// commit (a put-if-absent the store took) and every 4th data file upload,
/// and answers 503 to two of every 9 reads, while a seeded writer changes a
/// few tables per transaction and sluice is killed once in the middle. At
/// the end every table equals its source, every table's log has one commit
/// per manifest that touched it and no file twice, and `status` calls no
/// table behind.
#[test]
fn many_tables_through_a_store_that_loses_answers_equal_the_source() {
    use crate::common::proxy::{Fault, Rule};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let (seed, _) = seeded_rng(4848);
    let mut rng = StdRng::seed_from_u64(seed);
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    const DBS: usize = 2;
    const PER_DB: usize = 40;
    let names: Vec<String> = (0..DBS)
        .flat_map(|d| (0..PER_DB).map(move |t| format!("lf{d}.t{t}")))
        .collect();
    let mut ddl = String::new();
    for d in 0..DBS {
        ddl.push_str(&format!("CREATE DATABASE lf{d};\n"));
    }
    for n in &names {
        ddl.push_str(&format!(
            "CREATE TABLE {n} (id INT PRIMARY KEY, v INT, s VARCHAR(16));\n"
        ));
    }
    db.sql(&ddl);
    let lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.include = vec![r"lf\d\..*".to_owned()];
    sluice.interval = "200ms".into();
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    proxy.route(&mut sluice, "5s");
    proxy.set_rules(vec![
        Rule::every("PUT", "/_delta_log/", 3, Fault::Drop),
        Rule::every("PUT", "/part-", 4, Fault::Drop),
        Rule::every("GET", "", 9, Fault::Status(503)).bursts(2),
    ]);

    // Rows per table so far: ids 1..=next are taken.
    let mut next = vec![0u32; names.len()];
    // A transaction of a few tables, or of every table (`wide`): a
    // checkpoint whose commits run many tables at once.
    let round = |rng: &mut StdRng, next: &mut Vec<u32>, wide: bool| {
        let mut script = String::from("BEGIN;\n");
        let touched: Vec<usize> = match wide {
            true => (0..names.len()).collect(),
            false => (0..rng.gen_range(1..6))
                .map(|_| rng.gen_range(0..names.len()))
                .collect(),
        };
        for t in touched {
            let n = &names[t];
            let v: u32 = rng.gen_range(0..1000);
            // Every statement changes a row: a round is never empty.
            match rng.gen_range(0..4) {
                _ if next[t] == 0 => {
                    next[t] += 1;
                    script.push_str(&format!("INSERT INTO {n} VALUES (1, {v}, 's{v}');\n"));
                }
                0 | 1 => {
                    next[t] += 1;
                    script.push_str(&format!(
                        "INSERT INTO {n} VALUES ({}, {v}, 's{v}');\n",
                        next[t]
                    ));
                }
                2 => {
                    let id = rng.gen_range(1..=next[t]);
                    script.push_str(&format!(
                        "UPDATE {n} SET v = {v}, s = 'u{v}' WHERE id = {id};\n"
                    ));
                }
                _ => {
                    let id = rng.gen_range(1..=next[t]);
                    script.push_str(&format!(
                        "INSERT INTO {n} VALUES ({id}, {v}, 'r{v}') ON DUPLICATE KEY UPDATE v = {v};\n"
                    ));
                    script.push_str(&format!("DELETE FROM {n} WHERE id = {id};\n"));
                }
            }
        }
        db.sql(&(script + "COMMIT;\n"));
    };
    let mut run = sluice.spawn_run(false);
    let mut kills = 0;
    for i in 0..30 {
        let manifests = lake.manifest_count();
        round(&mut rng, &mut next, i % 5 == 4);
        if i == 14 || i == 24 {
            // A kill -9 in the middle of a wide checkpoint's commits.
            std::thread::sleep(Duration::from_millis(rng.gen_range(200..900)));
            run.kill();
            kills += 1;
            run = sluice.spawn_run(false);
            continue;
        }
        // A checkpoint per round, however slow the faults make the store.
        let committed = wait_until(Duration::from_secs(20), || {
            lake.manifest_count() > manifests || run.try_wait().is_some()
        });
        assert!(
            committed && run.try_wait().is_none(),
            "round {i} was not committed: {}",
            run.log_text()
                .lines()
                .filter(|l| !l.contains("client::retry"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The faults go on while sluice catches up, then the store heals.
    std::thread::sleep(Duration::from_secs(2));
    proxy.pass();
    let committed = wait_until(Duration::from_secs(120), || {
        sluice.status_json()["lag_bytes"].as_u64() == Some(0)
    });
    let status = run.terminate(Duration::from_secs(60));
    assert!(status.success(), "exit {status}: {}", run.log_tail(40));
    let log = run.log_text();
    assert!(
        !regex::Regex::new(r"(?i)fenced|another writer")
            .unwrap()
            .is_match(&log),
        "a lost answer was taken for another writer (committed in time: {committed}):\n{log}"
    );
    sluice.run_until_caught_up_ok();
    eprintln!(
        "{} lost answers, {} 503s, {} manifests, {kills} kills",
        proxy.hits(Fault::Drop),
        proxy.hits(Fault::Status(503)),
        lake.manifest_count()
    );
    assert!(lake.manifest_count() >= 20, "too few checkpoints");
    assert!(
        proxy.hits(Fault::Drop) >= 10 && proxy.hits(Fault::Status(503)) >= 10,
        "the faults met too few requests: {} lost answers, {} 503s",
        proxy.hits(Fault::Drop),
        proxy.hits(Fault::Status(503))
    );

    let read = lake.read();
    for n in &names {
        let source = db.table_map(&format!("SELECT id, v, s FROM {n}"), &[0]);
        assert_same_table(n, &source, &read.replay(n, &[0]));
        if !read.files_of(n).is_empty() {
            crate::delta::assert_log_follows_manifests(&read, n);
        }
    }
    let s = sluice.status_json();
    assert_eq!(s["delta_lag"], serde_json::json!({}), "{s}");
    let behind: Vec<&String> = s["current_tables"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, c)| c["lag_manifests"].as_u64() != Some(0))
        .map(|(name, _)| name)
        .collect();
    assert!(behind.is_empty(), "current tables behind: {behind:?}\n{s}");
}

/// `benches/many_tables.sh`: the issue's workload. BENCH_TABLES tables in
/// BENCH_DBS databases hold BENCH_ROWS rows before the start; the initial
/// snapshot is timed, then BENCH_TXNS single-row transactions spread over
/// the tables and the catch-up, an idle start and `status`. BENCH_BACKEND=s3
/// puts the lake on moto_server, BENCH_DELAY_MS adds that much to every
/// request (a proxy in front of it). Defaults: sluice's, and 1,024 tables
/// in 16 databases, 51,200 rows, 30,000 transactions. Prints a Markdown row.
#[test]
#[ignore]
fn bench_many_tables() {
    let knob = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
            .unwrap_or(default)
    };
    let tables = knob("BENCH_TABLES", 1024);
    let dbs = knob("BENCH_DBS", 16).min(tables).max(1);
    let rows = knob("BENCH_ROWS", 51_200);
    let txns = knob("BENCH_TXNS", 30_000);
    let delay = knob("BENCH_DELAY_MS", 0);
    let backend = match std::env::var("BENCH_BACKEND").as_deref() {
        Ok("s3") => Backend::S3,
        _ => Backend::Local,
    };
    let per_db = tables.div_ceil(dbs);
    let names: Vec<String> = (0..tables)
        .map(|i| format!("bench{}.t{}", i / per_db, i % per_db))
        .collect();
    let db = MariaDb::start();
    let mut ddl = String::new();
    for d in 0..dbs {
        ddl.push_str(&format!("CREATE DATABASE bench{d};\n"));
    }
    for n in &names {
        ddl.push_str(&format!(
            "CREATE TABLE {n} (id INT PRIMARY KEY, v INT, s VARCHAR(32));\n"
        ));
    }
    db.sql(&ddl);
    let per_table = rows / tables;
    let mut load = String::new();
    for n in &names {
        let values: Vec<String> = (0..per_table)
            .map(|i| format!("({i}, {i}, 'row {i} of {n}')"))
            .collect();
        if !values.is_empty() {
            load.push_str(&format!("INSERT INTO {n} VALUES {};\n", values.join(", ")));
        }
    }
    db.sql(&load);

    let lake = TestLake::new(backend);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(&db, state.path());
    sluice.include = vec![r"bench\d+\..*".to_owned()];
    sluice.snapshot = "mode = \"initial\"".to_owned();
    sluice.default_flush = true;
    sluice.timeout = Duration::from_secs(7200);
    // BENCH_ROUTE=1: every table routed into one lake table (DESIGN.md
    // "Shard routing").
    let routed = std::env::var("BENCH_ROUTE").is_ok_and(|v| v == "1");
    if routed {
        sluice.extra = "[[routes]]\nmatch = 'bench\\d+\\.t\\d+'\ntable = 'benchall.t'\n".into();
    }
    let _proxy = (backend == Backend::S3).then(|| {
        let proxy = FaultProxy::start(lake.moto().unwrap().port());
        proxy.set_delay(Duration::from_millis(delay as u64));
        proxy.route(&mut sluice, "120s");
        proxy
    });
    let timed = |what: &dyn Fn()| {
        let t = Instant::now();
        what();
        t.elapsed().as_secs_f64()
    };
    // BENCH_LOG=FILE keeps the snapshot's log, FILE.catch-up the catch-up's
    // (RUST_LOG sets their level).
    let snapshot = timed(&|| {
        let out = sluice.run_until_caught_up_ok();
        if let Ok(file) = std::env::var("BENCH_LOG") {
            std::fs::write(file, &out.stderr).unwrap();
        }
    });
    // Single-row transactions, round robin over the tables: an update of
    // an existing row, or a new row where a table has none.
    let mut script = String::new();
    for i in 0..txns {
        let n = &names[i % tables];
        if per_table > 0 {
            script.push_str(&format!(
                "UPDATE {n} SET v = v + 1 WHERE id = {};\n",
                (i / tables) % per_table
            ));
        } else {
            script.push_str(&format!("INSERT INTO {n} VALUES ({i}, {i}, 'x');\n"));
        }
    }
    db.sql(&script);
    let catch_up = timed(&|| {
        let out = sluice.run_until_caught_up_ok();
        if let Ok(file) = std::env::var("BENCH_LOG") {
            std::fs::write(format!("{file}.catch-up"), &out.stderr).unwrap();
        }
    });
    let idle = timed(&|| {
        sluice.run_until_caught_up_ok();
    });
    let t = Instant::now();
    let s = sluice.status_json();
    let status = t.elapsed().as_secs_f64();
    assert_eq!(s["delta_lag"], serde_json::json!({}), "{s}");
    let behind = s["current_tables"]
        .as_object()
        .into_iter()
        .flat_map(|c| c.values())
        .filter(|c| c["lag_manifests"].as_u64() != Some(0))
        .count();
    println!(
        "\n| backend | delay ms | tables | routed | rows | transactions | snapshot s | catch-up s | idle start s | status s | current tables behind |\n\
         |---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n\
         | {backend:?} | {delay} | {tables} | {routed} | {rows} | {txns} | {snapshot:.2} | {catch_up:.2} | {idle:.2} | {status:.2} | {behind} |\n"
    );
}
