//! The initial snapshot (DESIGN.md, "Initial snapshot"): a new lake starts
//! with every captured table's rows, read in chunks while a writer changes
//! the tables, and the replay by `_seq` equals the source.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CREATE: &str = "
CREATE DATABASE shop;
-- A composite key whose leading column is low-cardinality, case-insensitive
-- and accented: chunks must follow the server's collation.
CREATE TABLE shop.pairs (name VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_german1_ci NOT NULL,
                         n INT NOT NULL, v INT, note VARCHAR(40) CHARACTER SET utf8mb4,
                         PRIMARY KEY (name, n));
CREATE TABLE shop.items (id BIGINT PRIMARY KEY, qty INT NOT NULL, price DECIMAL(12,2),
                         seen DATETIME(6), label TEXT);
-- No primary key, a NOT NULL unique key: read along it.
CREATE TABLE shop.coded (code CHAR(8) NOT NULL, payload VARCHAR(30), UNIQUE KEY (code));
-- Only a nullable unique key: no usable key, one consistent read.
CREATE TABLE shop.loose (id INT NULL, payload VARCHAR(30), UNIQUE KEY (id));
-- No key at all.
CREATE TABLE shop.bare (a INT, b VARCHAR(10));
";

const NAMES: [&str; 6] = ["Ä", "a", "Ö", "o", "Straße", "strasse"];

fn fill(db: &MariaDb, rows: u64) {
    // Portable (MariaDB's seq_1_to_N tables do not exist on MySQL).
    let numbers = |n: u64| {
        let digit = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
        format!(
            "(SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS seq \
             FROM {digit} a, {digit} b, {digit} c, {digit} e, {digit} f \
             HAVING seq <= {n}) AS numbers"
        )
    };
    assert!(rows < 100_000);
    db.sql(&format!(
        "INSERT INTO shop.items SELECT seq, seq % 17, seq / 7, '2024-01-01' + INTERVAL seq SECOND, REPEAT('x', seq % 50) FROM {};
         INSERT INTO shop.coded SELECT CONCAT('c', LPAD(seq, 7, '0')), CONCAT('p', seq) FROM {};
         INSERT INTO shop.loose SELECT seq, CONCAT('l', seq) FROM {};
         INSERT INTO shop.bare SELECT seq, CONCAT('b', seq) FROM {};",
        numbers(rows),
        numbers(rows / 4),
        numbers(rows / 4),
        numbers(rows / 8)
    ));
    let mut values = Vec::new();
    for i in 0..rows / 2 {
        values.push(format!(
            "('{}', {i}, {}, 'n{i}')",
            NAMES[i as usize % NAMES.len()],
            i % 100
        ));
    }
    for chunk in values.chunks(2000) {
        db.sql(&format!(
            "SET NAMES utf8mb4; INSERT INTO shop.pairs VALUES {};",
            chunk.join(",")
        ));
    }
}

/// Random changes to every table: inserts, updates, deletes, primary-key
/// moves (across chunk ranges) and multi-statement transactions.
fn writer(
    client: std::process::Command,
    namespace: Namespace,
    seed: u64,
    stop: Arc<AtomicBool>,
    rows: u64,
) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next_id = rows as i64 * 10;
    let mut next_low = 0i64;
    let mut sent = 0;
    // The pieces are SET NAMES and then one transaction each.
    let pieces = feed_client(client, &namespace, &stop, move || {
        if sent == 0 {
            sent += 1;
            return Some("SET NAMES utf8mb4;\n".to_owned());
        }
        let mut tx = String::from("BEGIN;\n");
        for _ in 0..rng.gen_range(1..6) {
            let id = rng.gen_range(1..=rows as i64);
            let stmt = match rng.gen_range(0..12) {
                0 => {
                    next_id += 1;
                    format!("INSERT INTO shop.items VALUES ({next_id}, 1, 2.50, NOW(6), 'new');")
                }
                1 => format!(
                    "UPDATE shop.items SET qty = qty + 1, label = 'u{sent}' WHERE id = {id};"
                ),
                2 => format!("DELETE FROM shop.items WHERE id = {id};"),
                // A key moves from the start of the table to its end and back.
                3 => {
                    next_id += 1;
                    format!("UPDATE shop.items SET id = {next_id} WHERE id = {id};")
                }
                4 => {
                    next_low -= 1;
                    format!("UPDATE shop.items SET id = {next_low} WHERE id = {id};")
                }
                5 => format!(
                    "UPDATE shop.pairs SET v = v + 1 WHERE name = '{}' AND n = {};",
                    NAMES[rng.gen_range(0..NAMES.len())],
                    rng.gen_range(0..rows / 2)
                ),
                6 => format!(
                    "UPDATE shop.pairs SET name = '{}' WHERE name = '{}' AND n = {};",
                    NAMES[rng.gen_range(0..NAMES.len())],
                    NAMES[rng.gen_range(0..NAMES.len())],
                    rng.gen_range(0..rows / 2)
                ),
                7 => format!(
                    "DELETE FROM shop.pairs WHERE n = {};",
                    rng.gen_range(0..rows / 2)
                ),
                8 => format!(
                    "UPDATE shop.coded SET payload = 'w{sent}' WHERE code = 'c{:07}';",
                    rng.gen_range(1..rows / 4)
                ),
                9 => {
                    next_id += 1;
                    format!("INSERT INTO shop.loose VALUES ({next_id}, 'w{sent}');")
                }
                10 => format!(
                    "DELETE FROM shop.loose WHERE id = {};",
                    rng.gen_range(1..rows / 4)
                ),
                _ => {
                    next_id += 1;
                    format!("INSERT INTO shop.bare VALUES ({next_id}, 'w{sent}');")
                }
            };
            tx.push_str(&stmt);
            tx.push('\n');
        }
        tx.push_str("COMMIT;\n");
        sent += 1;
        std::thread::sleep(Duration::from_millis(rng.gen_range(1..6)));
        Some(tx)
    });
    pieces.saturating_sub(1)
}

/// Feeds what `next` returns through one long-lived `mariadb` client until
/// `stop` or until `next` returns `None`; returns how many pieces were sent
/// (the client must succeed).
///
/// Writers beside a snapshot should end by themselves: one that writes as
/// fast as the server takes it can outrun a stream on a loaded machine, and
/// a watermark chunk is placed only once the stream has reached the binlog
/// head of its read.
pub(crate) fn feed_client(
    mut client: std::process::Command,
    namespace: &Namespace,
    stop: &AtomicBool,
    mut next: impl FnMut() -> Option<String>,
) -> u64 {
    let mut child = client
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mariadb client");
    let mut stdin = child.stdin.take().unwrap();
    let mut sent = 0;
    while !stop.load(Ordering::SeqCst) {
        let Some(piece) = next() else { break };
        if stdin
            .write_all(namespace.to_server(&piece).as_bytes())
            .and_then(|()| stdin.flush())
            .is_err()
        {
            break;
        }
        sent += 1;
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the client failed after {sent} pieces: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sent
}

/// `(table, key columns)` and the SELECT each is compared with: those a
/// snapshot of `method` reads (the watermark method refuses keyless tables).
fn tables(method: &str) -> Vec<(&'static str, Vec<usize>, &'static str)> {
    let all = vec![
        (
            "shop.pairs",
            vec![0, 1],
            "SELECT name, n, v, note FROM shop.pairs",
        ),
        (
            "shop.items",
            vec![0],
            "SELECT id, qty, price, seen, label FROM shop.items",
        ),
        (
            "shop.coded",
            vec![0],
            "SELECT code, payload FROM shop.coded",
        ),
        ("shop.loose", vec![0], "SELECT id, payload FROM shop.loose"),
        ("shop.bare", vec![0, 1], "SELECT a, b FROM shop.bare"),
    ];
    all.into_iter()
        .filter(|(t, _, _)| method != WATERMARK || KEYED.contains(t))
        .collect()
}

const WATERMARK: &str = "watermark";
const KEYED: &str = r"shop\.(pairs|items|coded)";

/// The `[snapshot]` lines of a test: chunk rows and method.
fn snapshot_keys(chunk_rows: usize, method: &str) -> String {
    format!("chunk_rows = {chunk_rows}\nmethod = \"{method}\"")
}

/// The consistent method needs MariaDB's `binlog_snapshot_*`.
fn consistent_skipped() -> bool {
    let skip = std::env::var_os("SLUICE_TEST_MYSQL_URL").is_some();
    if skip {
        eprintln!("skipped: the consistent method needs MariaDB");
    }
    skip
}

fn assert_lake_equals_source(db: &MariaDb, lake: &Lake, method: &str) {
    for (table, pk, select) in tables(method) {
        let source = db.table_map(select, &pk);
        let replayed = lake.replay(table, &pk);
        assert_same_table(table, &source, &replayed);
    }
}

/// Stops a run whose snapshot is `done` (SIGTERM, exit 0), lets a second
/// run commit whatever followed, and reads the lake.
pub(crate) fn stop_after_the_snapshot(
    mut run: Running,
    done: bool,
    sluice: &Sluice,
    lake: &std::path::Path,
) -> Lake {
    assert!(
        done,
        "the snapshot did not finish; log:\n{}",
        run.log_tail(30)
    );
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    sluice.run_until_caught_up_ok();
    Lake::read(lake)
}

pub(crate) fn snapshot_state(lake: &Lake) -> serde_json::Value {
    lake.manifests
        .last()
        .map(|m| m["snapshot"].clone())
        .unwrap_or(serde_json::Value::Null)
}

pub(crate) fn all_done(snapshot: &serde_json::Value) -> bool {
    snapshot
        .as_object()
        .is_some_and(|t| !t.is_empty() && t.values().all(|s| s["state"] == "done"))
}

/// Snapshot rows: `_op = snapshot`, `_gtid`, `_sql`, `_before` null, one
/// `_tx_seq` per chunk, the chunk's position in `_binlog_*`.
fn assert_snapshot_rows_are_marked(lake: &Lake, method: &str) {
    let state = snapshot_state(lake);
    for (table, _, _) in tables(method) {
        let rows: Vec<Row> = lake
            .rows(table)
            .into_iter()
            .filter(|r| r.op == "snapshot")
            .collect();
        assert!(!rows.is_empty(), "{table}: no snapshot rows");
        for r in &rows {
            assert!(
                r.gtid.is_none(),
                "{table}: snapshot row with _gtid {:?}",
                r.gtid
            );
            assert!(
                r.sql.is_none() && r.before.is_none(),
                "{table}: snapshot row with _sql or _before"
            );
            assert!(
                r.binlog_file.starts_with("binlog.") && r.binlog_pos >= 4,
                "{table}: {}:{}",
                r.binlog_file,
                r.binlog_pos
            );
        }
        let tx: BTreeSet<i64> = rows.iter().map(|r| r.tx_seq).collect();
        let s = &state[table];
        assert_eq!(s["state"], "done", "{table}: {s}");
        assert_eq!(
            s["rows"].as_u64(),
            Some(rows.len() as u64),
            "{table}: rows in the manifest"
        );
        assert!(
            tx.len() as u64 <= s["chunks"].as_u64().unwrap() && !tx.is_empty(),
            "{table}: {} transactions for {} chunks",
            tx.len(),
            s["chunks"]
        );
        // One position per chunk.
        let per_tx: BTreeMap<i64, BTreeSet<(String, i64)>> =
            rows.iter().fold(BTreeMap::new(), |mut m, r| {
                m.entry(r.tx_seq)
                    .or_default()
                    .insert((r.binlog_file.clone(), r.binlog_pos));
                m
            });
        assert!(
            per_tx.values().all(|p| p.len() == 1),
            "{table}: a chunk with several positions"
        );
    }
}

#[test]
fn a_new_lake_starts_with_every_table_read_beside_a_busy_writer() {
    if !consistent_skipped() {
        busy_writer_snapshot("consistent");
    }
}

/// The same with the method for servers without `binlog_snapshot_*`
/// (MySQL 8), forced on MariaDB: rows whose key changes inside a chunk's
/// window are left to the stream.
#[test]
fn a_watermark_snapshot_beside_a_busy_writer_equals_the_source() {
    busy_writer_snapshot(WATERMARK);
}

fn busy_writer_snapshot(method: &str) {
    let db = MariaDb::start();
    db.sql(CREATE);
    let rows = 8_000;
    fill(&db, rows);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = snapshot_keys(300, method);
    sluice.interval = "200ms".into();
    if method == WATERMARK {
        sluice.include = vec![KEYED.into()];
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer_thread = {
        let (client, ns, stop) = (
            client_command(db.socket()),
            db.namespace().clone(),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || writer(client, ns, 7, stop, rows))
    };
    let mut run = sluice.spawn_run(false);
    let done = wait_until(Duration::from_secs(240), || {
        all_done(&snapshot_state(&Lake::read_committed(lake_dir.path())))
    });
    stop.store(true, Ordering::SeqCst);
    let sent = writer_thread.join().unwrap();
    assert!(
        done,
        "the snapshot did not finish; log:\n{}",
        run.log_tail(40)
    );
    assert!(sent > 20, "the writer sent only {sent} transactions");
    let status = run.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "sluice run: {status}; log:\n{}",
        run.log_tail(40)
    );
    // Whatever the writer did after the last checkpoint.
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    assert_lake_equals_source(&db, &lake, method);
    assert_snapshot_rows_are_marked(&lake, method);
    let pairs = &snapshot_state(&lake)["shop.pairs"];
    assert!(
        pairs["chunks"].as_u64().unwrap() >= rows / 2 / 300,
        "{pairs}"
    );
    // The writer's changes interleave with the chunks: some stream rows
    // come before the last snapshot row of a table.
    let items = lake.rows("shop.items");
    let last_snapshot = items
        .iter()
        .filter(|r| r.op == "snapshot")
        .map(|r| r.seq)
        .max()
        .unwrap();
    assert!(
        items
            .iter()
            .any(|r| r.op != "snapshot" && r.seq < last_snapshot),
        "no change of shop.items was placed between its chunks"
    );
    for m in &lake.manifests {
        let format = m["format"].as_u64().unwrap();
        assert_eq!(format, 2, "manifest {} carries snapshot state", m["seq"]);
    }
}

#[test]
fn a_snapshot_killed_again_and_again_resumes_after_its_last_committed_key() {
    if consistent_skipped() {
        return;
    }
    let db = MariaDb::start();
    db.sql(CREATE);
    let rows = 40_000;
    fill(&db, rows);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 50".into();
    sluice.interval = "50ms".into();
    let stop = Arc::new(AtomicBool::new(false));
    let writer_thread = {
        let (client, ns, stop) = (
            client_command(db.socket()),
            db.namespace().clone(),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || writer(client, ns, 11, stop, rows))
    };
    let mut rng = StdRng::seed_from_u64(3);
    let mut kills = 0;
    let mut progress = Vec::new();
    for _ in 0..6 {
        let mut run = sluice.spawn_run(false);
        std::thread::sleep(Duration::from_millis(rng.gen_range(400..1500)));
        run.kill();
        kills += 1;
        let lake = Lake::read_committed(lake_dir.path());
        let state = snapshot_state(&lake);
        let read: u64 = state
            .as_object()
            .map_or(0, |t| t.values().map(|s| s["rows"].as_u64().unwrap()).sum());
        progress.push(read);
        if all_done(&state) {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    writer_thread.join().unwrap();
    sluice.run_until_caught_up_ok();
    // A kill during an upload may leave the local store's staging file
    // (`…parquet#N`); no manifest lists it.
    let lake = Lake::read_committed(lake_dir.path());
    assert!(
        all_done(&snapshot_state(&lake)),
        "{}",
        snapshot_state(&lake)
    );
    assert!(kills >= 2, "killed {kills} times: {progress:?}");
    assert!(
        progress.windows(2).all(|w| w[0] <= w[1]) && progress.iter().any(|&p| p > 0),
        "committed snapshot rows per kill: {progress:?}"
    );
    assert_lake_equals_source(&db, &lake, "consistent");
    assert_snapshot_rows_are_marked(&lake, "consistent");
}

#[test]
fn chunks_seek_along_a_composite_key_in_the_server_collation() {
    let db = MariaDb::start();
    db.sql(CREATE);
    fill(&db, 8_000);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.include = vec![r"shop\.pairs".into()];
    sluice.snapshot = "chunk_rows = 100".into();
    let read_next = |db: &MariaDb| -> u64 {
        db.query_value("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'HANDLER_READ_NEXT'")
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = read_next(&db);
    sluice.run_until_caught_up_ok();
    let reads = read_next(&db) - before;
    let lake = Lake::read(lake_dir.path());
    let state = &snapshot_state(&lake)["shop.pairs"];
    assert_eq!(state["rows"].as_u64(), Some(4_000), "{state}");
    assert_eq!(state["chunks"].as_u64(), Some(41), "{state}");
    // A seek per chunk reads each row about once; the row-constructor form
    // `(name, n) > (?, ?)` scans the index from its start for every chunk
    // (some 80,000 reads here).
    assert!(
        reads < 10_000,
        "Handler_read_next grew by {reads} for 4,000 rows in 41 chunks"
    );
    let source = db.table_map("SELECT name, n, v, note FROM shop.pairs", &[0, 1]);
    assert_same_table("shop.pairs", &source, &lake.replay("shop.pairs", &[0, 1]));
    let chunks: BTreeSet<i64> = lake.rows("shop.pairs").iter().map(|r| r.tx_seq).collect();
    assert_eq!(
        chunks.len(),
        40,
        "one _tx_seq per chunk with rows (the 41st is empty)"
    );
}

#[test]
fn an_idle_server_gets_its_snapshot_placed_without_any_write() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10)); USE shop; INSERT INTO shop.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000;");
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 64".into();
    let (file, pos) = db.binlog_head();
    let out = sluice.run_until_caught_up_ok();
    assert_eq!(
        db.binlog_head(),
        (file.clone(), pos),
        "sluice wrote to the source"
    );
    let lake = Lake::read(lake_dir.path());
    let rows = lake.rows("shop.t");
    assert_eq!(
        rows.len(),
        1000,
        "{}",
        tail(&String::from_utf8_lossy(&out.stderr), 20)
    );
    assert!(rows
        .iter()
        .all(|r| r.op == "snapshot" && r.binlog_file == file && r.binlog_pos == pos as i64));
    let source = db.table_map("SELECT id, v FROM shop.t", &[0]);
    assert_same_table("shop.t", &source, &lake.replay("shop.t", &[0]));
    let status = sluice.status_json();
    let t = &status["snapshot"]["shop.t"];
    assert_eq!(t["state"], "done", "{status}");
    assert_eq!(t["rows"], 1000, "{status}");
    assert_eq!(t["chunks"], 16, "{status}");
    assert!(t["rows_per_second"].as_f64().unwrap() > 0.0, "{status}");
    assert!(t["eta_seconds"].is_null(), "{status}");
    // A second run has nothing to do: the snapshot is done.
    sluice.run_until_caught_up_ok();
    assert_eq!(Lake::read(lake_dir.path()).rows("shop.t").len(), 1000);
}

#[test]
fn progress_is_a_bar_on_a_terminal_and_log_lines_otherwise() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop;");
    small_table(&db, "t", 3000);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 100".into();
    let config = sluice.write_config();
    // `script` gives sluice a pseudo-terminal as stderr and copies what it
    // drew to our stdout.
    let command = format!(
        "{} run --config {} --until-caught-up",
        sluice_bin(),
        config.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("SLUICE_SOURCE_PASSWORD", &sluice.password)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(
        drawn.contains("snapshot shop.t") && drawn.contains("3,000/3,000 rows"),
        "no finished progress bar in:\n{drawn}"
    );
    assert_eq!(Lake::read(lake_dir.path()).rows("shop.t").len(), 3000);

    // Without a terminal: log lines, no bar.
    let state = tempfile::tempdir().unwrap();
    let lake_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state.path());
    let mut sluice = sluice;
    sluice.snapshot = "chunk_rows = 100".into();
    let out = sluice.run_until_caught_up_ok();
    let logged = String::from_utf8_lossy(&out.stderr);
    assert!(logged.contains("snapshot of a table is done"), "{logged}");
    assert!(!logged.contains("3,000/3,000 rows"), "{logged}");
}

#[test]
fn a_table_no_consistent_read_covers_is_refused_by_name() {
    assert_refused_by_name(
        "CREATE TABLE shop.legacy (id INT PRIMARY KEY) ENGINE=Aria TRANSACTIONAL=0;",
        String::new(),
        &["shop.legacy", "Aria"],
    );
}

/// Starting a new lake with the table `create` makes in `shop` (beside a
/// readable `shop.t`) is a definite error naming it, `words` and the ways
/// out, and writes nothing; without the table, the same lake starts.
fn assert_refused_by_name(create: &str, snapshot: String, words: &[&str]) {
    let db = MariaDb::start();
    db.sql(&format!(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY); {create}"
    ));
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = snapshot;
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    for word in words.iter().chain(&["mode = \"never\"", "exclude"]) {
        assert!(line.contains(word), "no `{word}` in: {line}");
    }
    assert!(
        manifest_paths(lake_dir.path()).is_empty(),
        "the lake is untouched"
    );
    sluice.include = vec![r"shop\.t".into()];
    sluice.run_until_caught_up_ok();
}

#[test]
fn ddl_and_truncate_during_the_snapshot_are_placed_where_they_happened() {
    if !consistent_skipped() {
        ddl_during_the_snapshot("consistent");
    }
}

#[test]
fn ddl_and_truncate_inside_a_watermark_window_read_the_chunk_again() {
    ddl_during_the_snapshot(WATERMARK);
}

#[test]
fn a_keyless_table_under_the_watermark_method_is_refused_by_name() {
    assert_refused_by_name(
        "CREATE TABLE shop.bare (a INT, b INT, UNIQUE KEY (a));",
        snapshot_keys(100, WATERMARK),
        &["shop.bare", "primary key"],
    );
}

fn ddl_during_the_snapshot(method: &str) {
    let db = MariaDb::start();
    db.sql(CREATE);
    fill(&db, 40_000);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.include = vec![r"shop\.(items|pairs)".into()];
    sluice.snapshot = snapshot_keys(20, method);
    sluice.interval = "100ms".into();
    let run = sluice.spawn_run(false);
    let started = wait_until(Duration::from_secs(60), || {
        let state = snapshot_state(&Lake::read_committed(lake_dir.path()));
        state["shop.items"]["rows"].as_u64().unwrap_or(0) > 0
    });
    assert!(
        started,
        "the snapshot of shop.items did not start; log:\n{}",
        run.log_tail(30)
    );
    db.sql(
        "ALTER TABLE shop.items ADD COLUMN extra INT NOT NULL DEFAULT 7;
         UPDATE shop.items SET extra = 9, qty = 100 WHERE id % 97 = 0;
         TRUNCATE shop.pairs;
         INSERT INTO shop.pairs VALUES ('after', 1, 1, 'truncated');",
    );
    let done = wait_until(Duration::from_secs(120), || {
        all_done(&snapshot_state(&Lake::read_committed(lake_dir.path())))
    });
    let lake = stop_after_the_snapshot(run, done, &sluice, lake_dir.path());

    // Both shapes are in the lake: chunks before the ALTER in the old one,
    // chunks after it read again in the new one.
    let items = lake.rows("shop.items");
    let widths: BTreeSet<usize> = items
        .iter()
        .filter(|r| r.op == "snapshot")
        .map(|r| r.values.len())
        .collect();
    assert_eq!(
        widths,
        BTreeSet::from([5, 6]),
        "snapshot rows in the shape of their position"
    );
    let source = db.table_map(
        "SELECT id, qty, price, seen, label, extra FROM shop.items",
        &[0],
    );
    let mut replayed = lake.replay("shop.items", &[0]);
    for (key, row) in replayed.iter_mut() {
        if row.len() == 5 {
            // Never changed since the ALTER: the column's default applies.
            assert_ne!(
                source[key][1].as_deref(),
                Some("100"),
                "{key:?} was updated after the ALTER"
            );
            row.push(Some("7".into()));
        }
    }
    assert_same_table("shop.items", &source, &replayed);
    let pairs = db.table_map("SELECT name, n, v, note FROM shop.pairs", &[0, 1]);
    assert_eq!(pairs.len(), 1);
    assert_same_table("shop.pairs", &pairs, &lake.replay("shop.pairs", &[0, 1]));
}

/// Changes each hammer of a watermark snapshot sends at most.
pub(crate) const HAMMER_CHANGES: u64 = 20_000;

/// Rows that change while a chunk is read: two clients update random rows
/// of the table being read as fast as the server takes them (up to
/// `HAMMER_CHANGES` each), so that many changes fall between a chunk's read
/// and the end of its window. The watermark method must leave exactly those
/// rows to the stream.
#[test]
fn rows_changed_inside_a_watermark_window_are_left_to_the_stream() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.hot (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20));");
    let rows = 30_000u64;
    let mut values = Vec::new();
    for i in 1..=rows {
        values.push(format!("({i}, 0, 'r{i}')"));
    }
    for chunk in values.chunks(5000) {
        db.sql(&format!("INSERT INTO shop.hot VALUES {};", chunk.join(",")));
    }
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = snapshot_keys(3000, WATERMARK);
    sluice.interval = "200ms".into();
    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (client, ns, stop) = (
                client_command(db.socket()),
                db.namespace().clone(),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut changes = 0u64;
                let batches = feed_client(client, &ns, &stop, move || {
                    if changes >= HAMMER_CHANGES {
                        return None;
                    }
                    let mut batch = String::new();
                    for _ in 0..50 {
                        let id = rng.gen_range(1..=rows);
                        batch.push_str(&match rng.gen_range(0..10) {
                            0 => format!("DELETE FROM shop.hot WHERE id = {id};\n"),
                            1 => format!("REPLACE INTO shop.hot VALUES ({id}, -1, 'back');\n"),
                            _ => format!(
                                "UPDATE shop.hot SET v = v + 1, w = 'u{changes}' WHERE id = {id};\n"
                            ),
                        });
                        changes += 1;
                    }
                    Some(batch)
                });
                batches * 50
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let run = sluice.spawn_run(false);
    let done = wait_until(Duration::from_secs(180), || {
        all_done(&snapshot_state(&Lake::read_committed(lake_dir.path())))
    });
    stop.store(true, Ordering::SeqCst);
    let sent: u64 = hammers.into_iter().map(|h| h.join().unwrap()).sum();
    let lake = stop_after_the_snapshot(run, done, &sluice, lake_dir.path());
    let source = db.table_map("SELECT id, v, w FROM shop.hot", &[0]);
    assert_same_table("shop.hot", &source, &lake.replay("shop.hot", &[0]));
    let hot = lake.rows("shop.hot");
    let snapshot_rows = hot.iter().filter(|r| r.op == "snapshot").count() as u64;
    assert!(sent > 2_000, "only {sent} changes were sent");
    // Rows of the table that the stream changed inside windows are missing
    // from the snapshot: fewer snapshot rows than the table held.
    assert!(
        snapshot_rows < rows && snapshot_rows > rows / 2,
        "{snapshot_rows} snapshot rows of {rows}"
    );
}

// ---- Snapshots after the start: a widened filter, `sluice snapshot` ----

/// `shop.<name>` with `rows` rows `(id, 'v<id>')`, written portably.
/// A server with `shop.a` of `rows` rows, and sluice over it without an
/// initial snapshot (the lake has only what the stream brings), reading
/// requested snapshots in chunks of 100 and checkpointing every 100 ms.
fn stream_only_lake(rows: u64) -> (MariaDb, tempfile::TempDir, tempfile::TempDir, Sluice) {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop;");
    small_table(&db, "a", rows);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"never\"\nchunk_rows = 100".into();
    sluice.interval = "100ms".into();
    (db, lake_dir, state, sluice)
}

fn small_table(db: &MariaDb, name: &str, rows: u64) {
    db.sql(&format!(
        "CREATE TABLE shop.{name} (id INT PRIMARY KEY, v VARCHAR(20));"
    ));
    let values: Vec<String> = (1..=rows).map(|i| format!("({i}, 'v{i}')")).collect();
    for chunk in values.chunks(2000) {
        db.sql(&format!(
            "INSERT INTO shop.{name} VALUES {};",
            chunk.join(",")
        ));
    }
}

fn assert_small_table_replays(db: &MariaDb, lake: &Lake, name: &str) {
    let table = format!("shop.{name}");
    let source = db.table_map(&format!("SELECT id, v FROM {table}"), &[0]);
    assert!(!source.is_empty(), "{table} is empty in the source");
    assert_same_table(&table, &source, &lake.replay(&table, &[0]));
}

fn ops_of(lake: &Lake, table: &str) -> BTreeMap<String, usize> {
    lake.rows(table).iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.op.clone()).or_default() += 1;
        m
    })
}

/// The request files waiting in the lake.
fn request_files(lake: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(lake.join("_sluice/requests"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `sluice snapshot --config F TABLES…`; returns the request id it printed.
fn request_snapshot(sluice: &Sluice, tables: &[&str]) -> String {
    let out = sluice.run_args(&["snapshot"], tables);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sluice snapshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = stdout
        .strip_prefix("snapshot request ")
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no request id in: {stdout}"))
        .to_owned();
    assert!(
        request_files(&sluice.lake).contains(&format!("{id}.json")),
        "request {id} is not in the lake: {:?}",
        request_files(&sluice.lake)
    );
    id
}

/// Widens the filter between two runs: the table it adds is read as
/// `snapshot` rows (after the stream's changes to it since the cursor), the
/// one created while sluice was stopped comes from the stream alone, and
/// with `new_tables = "skip"` nothing is read.
fn widen_the_filter(new_tables: &str) -> (MariaDb, Lake, Sluice, [tempfile::TempDir; 2]) {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop;");
    small_table(&db, "a", 300);
    small_table(&db, "b", 500);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.include = vec![r"shop\.(a|c)".into()];
    sluice.snapshot = format!("chunk_rows = 64\nnew_tables = \"{new_tables}\"");
    let state_dir = state;
    sluice.interval = "100ms".into();
    sluice.run_until_caught_up_ok();
    let first = Lake::read(lake_dir.path());
    assert_eq!(
        ops_of(&first, "shop.a"),
        BTreeMap::from([("snapshot".into(), 300)])
    );
    assert!(first.rows("shop.b").is_empty());
    assert_eq!(
        first.manifests.last().unwrap()["filter"]["include"],
        serde_json::json!([r"shop\.(a|c)"])
    );

    // While sluice is stopped: changes to b (in the stream from the cursor
    // on), and a table c created under the old filter.
    db.sql(
        "UPDATE shop.b SET v = 'changed' WHERE id <= 10;
         DELETE FROM shop.b WHERE id > 490;
         INSERT INTO shop.b VALUES (1000, 'new');
         INSERT INTO shop.a VALUES (1000, 'new');",
    );
    small_table(&db, "c", 50);
    sluice.include = vec![r"shop\.(a|b|c)".into()];
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(log.contains("tables entered capture"), "{}", tail(&log, 20));
    let lake = Lake::read(lake_dir.path());
    assert_eq!(
        ops_of(&lake, "shop.c"),
        BTreeMap::from([("insert".into(), 50)]),
        "a table created later comes from the stream alone"
    );
    assert_small_table_replays(&db, &lake, "a");
    assert_small_table_replays(&db, &lake, "c");
    let state = snapshot_state(&lake);
    assert!(state.get("shop.c").is_none(), "{state}");
    (db, lake, sluice, [lake_dir, state_dir])
}

#[test]
fn a_table_a_widened_filter_adds_is_snapshotted_beside_the_stream() {
    let (db, lake, mut sluice, dirs) = widen_the_filter("snapshot");
    // b: the stream's changes since the cursor (10 updates, 10 deletes, one
    // insert), then the snapshot of its 491 rows.
    let ops = ops_of(&lake, "shop.b");
    assert_eq!(ops.get("snapshot"), Some(&491), "{ops:?}");
    assert_eq!(ops.get("update"), Some(&10), "{ops:?}");
    assert_eq!(ops.get("delete"), Some(&10), "{ops:?}");
    assert_small_table_replays(&db, &lake, "b");
    let rows = lake.rows("shop.b");
    let first_snapshot = rows.iter().position(|r| r.op == "snapshot").unwrap();
    assert!(
        rows[first_snapshot..].iter().all(|r| r.op == "snapshot"),
        "the snapshot is placed after the stream's changes (the writer stopped)"
    );
    let state = snapshot_state(&lake);
    assert_eq!(state["shop.b"]["state"], "done", "{state}");
    assert_eq!(state["shop.b"]["rows"], 491, "{state}");
    assert_eq!(state["shop.a"]["rows"], 300, "{state}");

    // b left out while it changes (the stream passes those changes by), then
    // captured again: its rows in the lake are stale, so they restart (a
    // truncate marker) from a new snapshot.
    // Its shape changes while it is out (the history does not see that DDL):
    // the stream's rows after it comes back are read with the new shape.
    sluice.include = vec![r"shop\.(a|c)".into()];
    db.sql(
        "DELETE FROM shop.b WHERE id <= 100; UPDATE shop.b SET v = 'while out' WHERE id = 200;
         ALTER TABLE shop.b ADD COLUMN w INT NOT NULL DEFAULT 7 AFTER id, MODIFY v VARCHAR(40);",
    );
    sluice.run_until_caught_up_ok();
    assert_eq!(Lake::read(dirs[0].path()).rows("shop.b").len(), rows.len());
    db.sql("INSERT INTO shop.b VALUES (5000, 9, 'back in the stream')");
    sluice.include = vec![r"shop\.(a|b|c)".into()];
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(dirs[0].path());
    let source = db.table_map("SELECT id, w, v FROM shop.b", &[0]);
    assert_same_table("shop.b", &source, &lake.replay("shop.b", &[0]));
    let rows = lake.rows("shop.b");
    let markers: Vec<&Row> = rows.iter().filter(|r| r.op == "truncate").collect();
    assert_eq!(markers.len(), 1);
    let after: Vec<&Row> = rows.iter().filter(|r| r.seq > markers[0].seq).collect();
    // The stream's insert, then a snapshot that reads it too (the replay's
    // put-or-replace makes that one row).
    assert_eq!(after.len(), 393);
    assert!(after.iter().any(|r| r.op == "insert"
        && r.values
            == [
                Some("5000".into()),
                Some("9".into()),
                Some("back in the stream".into())
            ]));
    assert_eq!(after.iter().filter(|r| r.op == "snapshot").count(), 392);
    assert_eq!(snapshot_state(&lake)["shop.b"]["rows"], 392);
}

#[test]
fn a_table_a_widened_filter_adds_is_not_read_with_new_tables_skip() {
    let (db, lake, _sluice, _dirs) = widen_the_filter("skip");
    let ops = ops_of(&lake, "shop.b");
    assert_eq!(
        ops,
        BTreeMap::from([
            ("delete".into(), 10),
            ("insert".into(), 1),
            ("update".into(), 10)
        ])
    );
    // Only the rows the stream touched: the replay holds b's changed and new rows.
    let replayed = lake.replay("shop.b", &[0]);
    assert_eq!(replayed.len(), 11);
    assert!(db.table_map("SELECT id, v FROM shop.b", &[0]).len() > 11);
    let state = snapshot_state(&lake);
    assert!(state.get("shop.b").is_none(), "{state}");
}

/// Rows deleted in the source with the binlog off: the lake keeps them
/// until a `--replace` snapshot restarts the table.
fn delete_unlogged(db: &MariaDb, table: &str, cond: &str) {
    db.sql(&format!(
        "SET SESSION sql_log_bin = 0; DELETE FROM {table} WHERE {cond}; SET SESSION sql_log_bin = 1;"
    ));
}

/// Waits until the newest committed manifest says `table`'s snapshot for
/// request `id` is done.
fn wait_for_request_done(lake: &std::path::Path, table: &str, id: &str, run: &Running) {
    let done = wait_until(Duration::from_secs(90), || {
        let state = snapshot_state(&Lake::read_committed(lake));
        state[table]["request"] == id && state[table]["state"] == "done"
    });
    assert!(
        done,
        "request {id} for {table} was not done; log:\n{}",
        run.log_tail(30)
    );
}

/// A transient error between a request's adoption and the checkpoint that
/// commits it: the run rewinds to the last manifest, adopts the request
/// again, and the table's rows come in once.
#[test]
fn a_rewind_between_a_requests_adoption_and_its_commit_adopts_it_again() {
    let (db, lake_dir, _state, mut sluice) = stream_only_lake(1000);
    sluice
        .env
        .push(("SLUICE_CRASH_AT".into(), "rewind-after-adoption".into()));
    let run = sluice.spawn_run(false);
    db.sql("UPDATE shop.a SET v = 'before' WHERE id <= 5;");
    // The stream runs (a transient error before it does ends the run).
    assert!(wait_until(Duration::from_secs(30), || !manifest_paths(
        lake_dir.path()
    )
    .is_empty()));
    let id = request_snapshot(&sluice, &["shop.a"]);
    wait_for_request_done(lake_dir.path(), "shop.a", &id, &run);
    db.sql("UPDATE shop.a SET v = 'after' WHERE id BETWEEN 6 AND 8;");
    std::thread::sleep(Duration::from_millis(500));
    let log = run.log_text();
    assert!(
        log.contains("a transient error after adopting a request"),
        "the hook did not fire:\n{}",
        tail(&log, 30)
    );
    let lake = stop_after_the_snapshot(run, true, &sluice, lake_dir.path());
    assert_small_table_replays(&db, &lake, "a");
    let rows = lake.rows("shop.a");
    assert_eq!(rows.iter().filter(|r| r.op == "snapshot").count(), 1000);
    let snapshot_ids: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.op == "snapshot")
        .map(|r| r.values[0].as_deref().unwrap())
        .collect();
    assert_eq!(snapshot_ids.len(), 1000, "no row read into the lake twice");
    let adopting = lake
        .manifests
        .iter()
        .filter(|m| {
            m["snapshot_requests"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == id.as_str()))
        })
        .count();
    assert_eq!(adopting, 1, "adopted by exactly one manifest");
    assert!(request_files(lake_dir.path()).is_empty());
}

#[test]
fn a_snapshot_request_is_adopted_by_the_running_sidecar_and_replace_restarts_the_rows() {
    let (db, lake_dir, _state, sluice) = stream_only_lake(1000);
    let run = sluice.spawn_run(false);
    db.sql("UPDATE shop.a SET v = 'before' WHERE id <= 5;");
    let id = request_snapshot(&sluice, &["shop.a"]);
    wait_for_request_done(lake_dir.path(), "shop.a", &id, &run);
    db.sql("UPDATE shop.a SET v = 'after' WHERE id BETWEEN 6 AND 8;");
    assert!(
        wait_until(Duration::from_secs(30), || request_files(lake_dir.path())
            .is_empty()),
        "the adopted request was not deleted: {:?}",
        request_files(lake_dir.path())
    );
    let adopting: Vec<u64> = Lake::read_committed(lake_dir.path())
        .manifests
        .iter()
        .filter(|m| {
            m["snapshot_requests"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == id.as_str()))
        })
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(adopting.len(), 1, "adopted by exactly one manifest");

    // The source loses rows the binlog never sees: only a replace brings
    // the lake back to it.
    delete_unlogged(&db, "shop.a", "id > 900");
    let replace = {
        let out = sluice.run_args(&["snapshot"], &["shop.a", "--replace"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(stdout.contains("(replace)"), "{stdout}");
        stdout.split_whitespace().nth(2).unwrap().to_owned()
    };
    wait_for_request_done(lake_dir.path(), "shop.a", &replace, &run);
    db.sql("UPDATE shop.a SET v = 'last' WHERE id = 1;");
    std::thread::sleep(Duration::from_millis(500));
    let lake = stop_after_the_snapshot(run, true, &sluice, lake_dir.path());
    assert_small_table_replays(&db, &lake, "a");
    let rows = lake.rows("shop.a");
    let markers: Vec<&Row> = rows.iter().filter(|r| r.op == "truncate").collect();
    assert_eq!(markers.len(), 1, "one truncate marker");
    let marker = markers[0];
    assert!(
        marker.sql.as_deref().is_some_and(|s| s.contains(&replace)),
        "{:?}",
        marker.sql
    );
    assert!(marker.values.iter().all(|v| v.is_none()));
    let before: Vec<&Row> = rows.iter().filter(|r| r.seq < marker.seq).collect();
    let after: Vec<&Row> = rows.iter().filter(|r| r.seq > marker.seq).collect();
    assert_eq!(before.iter().filter(|r| r.op == "snapshot").count(), 1000);
    assert_eq!(after.iter().filter(|r| r.op == "snapshot").count(), 900);
    assert!(after
        .iter()
        .filter(|r| r.op == "snapshot")
        .all(|r| r.tx_seq > marker.tx_seq));
    let state = snapshot_state(&lake);
    assert_eq!(state["shop.a"]["rows"], 900, "{state}");
    assert!(request_files(lake_dir.path()).is_empty());
}

#[test]
fn a_request_written_while_sluice_is_stopped_is_adopted_at_the_next_start() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop;");
    small_table(&db, "a", 700);
    small_table(&db, "b", 40);
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "mode = \"never\"\nchunk_rows = 128".into();
    sluice.interval = "100ms".into();
    db.sql("INSERT INTO shop.b VALUES (100, 'x');");
    sluice.run_until_caught_up_ok();
    assert!(Lake::read(lake_dir.path()).rows("shop.a").is_empty());
    let id = request_snapshot(&sluice, &["shop.a", "shop.a"]);
    let status = sluice.status_json();
    let waiting = &status["snapshot_requests"][0];
    assert_eq!(waiting["id"], id.as_str(), "{status}");
    assert_eq!(waiting["tables"], serde_json::json!(["shop.a"]), "{status}");
    assert_eq!(waiting["adopted"], false, "{status}");
    let out = sluice.run_until_caught_up_ok();
    assert!(String::from_utf8_lossy(&out.stderr).contains("snapshot request adopted"));
    let lake = Lake::read(lake_dir.path());
    assert_eq!(
        ops_of(&lake, "shop.a"),
        BTreeMap::from([("snapshot".into(), 700)])
    );
    assert_small_table_replays(&db, &lake, "a");
    assert_eq!(
        ops_of(&lake, "shop.b"),
        BTreeMap::from([("insert".into(), 1)])
    );
    let state = snapshot_state(&lake);
    assert_eq!(state["shop.a"]["request"], id.as_str(), "{state}");
    assert_eq!(state["shop.a"]["chunks"], 6, "{state}");
    assert!(request_files(lake_dir.path()).is_empty());
    let status = sluice.status_json();
    assert_eq!(status["snapshot"]["shop.a"]["rows"], 700, "{status}");
    assert!(
        status["snapshot"]["shop.a"]["estimated_rows"].is_u64(),
        "{status}"
    );
    assert_eq!(
        status["snapshot_requests"],
        serde_json::json!([]),
        "{status}"
    );
}

#[test]
fn a_request_for_a_table_not_captured_is_refused_and_writes_nothing() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE DATABASE other;");
    small_table(&db, "a", 10);
    db.sql("CREATE TABLE other.t (id INT PRIMARY KEY);");
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.run_until_caught_up_ok();
    let before = data_files(lake_dir.path());
    let manifests = manifest_paths(lake_dir.path());
    for (args, words) in [
        (vec!["other.t"], "other.t is not captured"),
        (vec!["shop.a", "other.t"], "other.t is not captured"),
        (vec!["shop"], "not a table name of the form DB.TABLE"),
    ] {
        let out = sluice.run_args(&["snapshot"], &args);
        let line = assert_definite_error(&out);
        assert!(line.contains(words), "{args:?}: {line}");
        assert_eq!(line.lines().count(), 1);
    }
    assert!(request_files(lake_dir.path()).is_empty());
    assert!(!lake_dir.path().join("_sluice/requests").exists());
    assert_eq!(data_files(lake_dir.path()), before);
    assert_eq!(manifest_paths(lake_dir.path()), manifests);
}

#[test]
fn a_kill_right_after_adoption_neither_adopts_the_request_twice_nor_reads_a_row_twice() {
    let (db, lake_dir, _state, mut sluice) = stream_only_lake(1500);
    sluice.run_until_caught_up_ok();
    let id = request_snapshot(&sluice, &["shop.a"]);
    sluice.env = vec![("SLUICE_CRASH_AT".into(), "after-request-commit".into())];
    let out = sluice.run_until_caught_up();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "killed right after the adopting commit: {}",
        tail(&String::from_utf8_lossy(&out.stderr), 20)
    );
    // The adoption is committed, the request object still there.
    let lake = Lake::read_committed(lake_dir.path());
    let last = lake.manifests.last().unwrap();
    assert_eq!(last["snapshot_requests"], serde_json::json!([id.as_str()]));
    assert_eq!(last["snapshot"]["shop.a"]["request"], id.as_str());
    assert_eq!(request_files(lake_dir.path()), vec![format!("{id}.json")]);

    sluice.env.clear();
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !log.contains("snapshot request adopted"),
        "adopted again:\n{}",
        tail(&log, 30)
    );
    assert!(request_files(lake_dir.path()).is_empty());
    let lake = Lake::read(lake_dir.path());
    let rows = lake.rows("shop.a");
    let keys: BTreeSet<&Option<String>> = rows.iter().map(|r| &r.values[0]).collect();
    assert_eq!(rows.len(), 1500, "no row twice");
    assert_eq!(keys.len(), 1500);
    assert!(rows.iter().all(|r| r.op == "snapshot"));
    assert_small_table_replays(&db, &lake, "a");
    let state = snapshot_state(&lake);
    assert_eq!(state["shop.a"]["state"], "done", "{state}");
    assert_eq!(state["shop.a"]["rows"], 1500, "{state}");
    // 15 full chunks and the empty one that finds the end.
    assert_eq!(state["shop.a"]["chunks"], 16, "{state}");
}

#[test]
fn a_second_request_for_a_table_being_snapshotted_is_a_no_op_unless_it_replaces() {
    let (db, lake_dir, _state, sluice) = stream_only_lake(900);
    sluice.run_until_caught_up_ok();
    // Both wait for the next start; the first starts the table's snapshot,
    // the second finds it running.
    let first = request_snapshot(&sluice, &["shop.a"]);
    std::thread::sleep(Duration::from_millis(5));
    let second = request_snapshot(&sluice, &["shop.a"]);
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        log.contains("being snapshotted already"),
        "{}",
        tail(&log, 20)
    );
    let lake = Lake::read(lake_dir.path());
    assert_eq!(
        ops_of(&lake, "shop.a"),
        BTreeMap::from([("snapshot".into(), 900)])
    );
    let state = snapshot_state(&lake);
    assert_eq!(state["shop.a"]["request"], first.as_str(), "{state}");
    let adopted: BTreeSet<String> = lake
        .manifests
        .iter()
        .flat_map(|m| {
            m["snapshot_requests"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(adopted, BTreeSet::from([first.clone(), second.clone()]));
    assert!(request_files(lake_dir.path()).is_empty());

    // With --replace the same situation starts the table over: one marker,
    // then 900 rows again.
    let replace = {
        let out = sluice.run_args(&["snapshot"], &["shop.a", "--replace"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_owned()
    };
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    assert_eq!(
        ops_of(&lake, "shop.a"),
        BTreeMap::from([("snapshot".into(), 1800), ("truncate".into(), 1)])
    );
    assert_small_table_replays(&db, &lake, "a");
    assert_eq!(snapshot_state(&lake)["shop.a"]["request"], replace.as_str());
}
