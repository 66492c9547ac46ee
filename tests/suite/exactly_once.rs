//! A sidecar SIGKILLed at random moments under a steady workload loses nothing
//! and duplicates nothing: the replayed lake equals the source row for row.

use std::collections::{BTreeSet, HashMap};
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
CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(12,2),
                          note VARCHAR(64), updated DATETIME(6));
CREATE TABLE shop.items (order_id BIGINT, line INT, sku VARCHAR(16) NOT NULL, qty INT NOT NULL,
                         PRIMARY KEY (order_id, line));
CREATE TABLE shop.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, kind VARCHAR(8), payload TEXT);
";

/// Generates transactions whose every statement changes at least one row, so
/// the number of transactions equals the number of distinct `_tx_seq`.
struct Workload {
    rng: StdRng,
    next_order: i64,
    orders: Vec<i64>,
    next_line: HashMap<i64, i32>,
    items: Vec<(i64, i32)>,
    events: u64,
    stmt: u64,
}

impl Workload {
    fn new(seed: u64) -> Self {
        Workload {
            rng: StdRng::seed_from_u64(seed),
            next_order: 1,
            orders: Vec::new(),
            next_line: HashMap::new(),
            items: Vec::new(),
            events: 0,
            stmt: 0,
        }
    }

    fn amount(&mut self) -> String {
        format!(
            "{}.{:02}",
            self.rng.gen_range(0..100_000),
            self.rng.gen_range(0..100)
        )
    }

    fn statement(&mut self) -> String {
        self.stmt += 1;
        let s = self.stmt;
        loop {
            match self.rng.gen_range(0..100) {
                0..=29 => {
                    let id = self.next_order;
                    self.next_order += 1;
                    self.orders.push(id);
                    let note = if self.rng.gen_bool(0.2) {
                        "NULL".to_owned()
                    } else {
                        format!("'new {s}'")
                    };
                    return format!(
                        "INSERT INTO shop.orders VALUES ({id}, {}, {}, {note}, NOW(6));",
                        self.rng.gen_range(1..500),
                        self.amount()
                    );
                }
                30..=49 if !self.orders.is_empty() => {
                    let order = self.orders[self.rng.gen_range(0..self.orders.len())];
                    let n = self.rng.gen_range(1..=4);
                    let mut values = Vec::new();
                    for _ in 0..n {
                        let line = self.next_line.entry(order).or_insert(0);
                        *line += 1;
                        self.items.push((order, *line));
                        values.push(format!(
                            "({order}, {}, 'SKU-{s}', {})",
                            *line,
                            self.rng.gen_range(1..10)
                        ));
                    }
                    return format!("INSERT INTO shop.items VALUES {};", values.join(", "));
                }
                50..=61 if !self.orders.is_empty() => {
                    let order = self.orders[self.rng.gen_range(0..self.orders.len())];
                    let amount = self.amount();
                    return format!(
                        "UPDATE shop.orders SET amount = {amount}, note = 'upd {s}', updated = NOW(6) WHERE id = {order};"
                    );
                }
                62..=65 if !self.orders.is_empty() => {
                    // The primary key changes: replay must drop the old key.
                    let i = self.rng.gen_range(0..self.orders.len());
                    let old = self.orders[i];
                    let new = self.next_order;
                    self.next_order += 1;
                    self.orders[i] = new;
                    return format!(
                        "UPDATE shop.orders SET id = {new}, note = 'moved {s}' WHERE id = {old};"
                    );
                }
                66..=71 if !self.orders.is_empty() => {
                    let i = self.rng.gen_range(0..self.orders.len());
                    let id = self.orders.swap_remove(i);
                    return format!("DELETE FROM shop.orders WHERE id = {id};");
                }
                72..=79 if !self.items.is_empty() => {
                    // One statement, several rows of one rows event.
                    let (order, _) = self.items[self.rng.gen_range(0..self.items.len())];
                    return format!(
                        "UPDATE shop.items SET qty = qty + 1 WHERE order_id = {order};"
                    );
                }
                80..=85 if !self.items.is_empty() => {
                    let i = self.rng.gen_range(0..self.items.len());
                    let (order, line) = self.items.swap_remove(i);
                    return format!(
                        "DELETE FROM shop.items WHERE order_id = {order} AND line = {line};"
                    );
                }
                86..=95 => {
                    self.events += 1;
                    let payload = "x".repeat(self.rng.gen_range(0..300));
                    return format!(
                        "INSERT INTO shop.events (kind, payload) VALUES ('k{}', '{payload}');",
                        s % 7
                    );
                }
                96..=99 if self.events > 0 => {
                    self.events -= self.events.min(3);
                    return "DELETE FROM shop.events ORDER BY id LIMIT 3;".to_owned();
                }
                _ => continue,
            }
        }
    }

    fn transaction(&mut self) -> String {
        let n = self.rng.gen_range(1..=50);
        let mut tx = String::from("BEGIN;\n");
        for _ in 0..n {
            tx.push_str(&self.statement());
            tx.push('\n');
        }
        tx.push_str("COMMIT;\n");
        tx
    }
}

/// Feeds transactions through one long-lived `mariadb` client until `stop`;
/// returns the number of transactions sent.
fn run_writer(
    db_client: std::process::Command,
    namespace: Namespace,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut cmd = db_client;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mariadb client");
    let mut stdin = child.stdin.take().unwrap();
    let mut workload = Workload::new(seed);
    let mut pace = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut sent = 0;
    while !stop.load(Ordering::SeqCst) {
        let tx = workload.transaction();
        if stdin
            .write_all(namespace.to_server(&tx).as_bytes())
            .is_err()
        {
            break; // the client died: reported below
        }
        stdin.flush().unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(pace.gen_range(2..25)));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "workload client failed after {sent} transactions: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sent
}

#[test]
fn resumes_after_kill_without_loss_or_duplicates() {
    resumes_after_kill(Backend::Local, 5);
}

/// The same with the lake on S3 (moto_server), in fewer kill cycles.
#[test]
fn resumes_after_kill_without_loss_or_duplicates_on_s3() {
    resumes_after_kill(Backend::S3, 3);
}

fn resumes_after_kill(backend: Backend, cycles: usize) {
    let seed: u64 = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (set SLUICE_TEST_SEED to repeat)");
    let mut rng = StdRng::seed_from_u64(seed);

    let db = MariaDb::start();
    db.sql(CREATE);
    let test_lake = TestLake::new(backend);
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state_dir.path());
    sluice.interval = "200ms".into();
    sluice.max_rows = 1000;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = db.client();
        let namespace = db.namespace().clone();
        std::thread::spawn(move || run_writer(client, namespace, seed, stop))
    };

    let mut manifests_per_cycle = Vec::new();
    let mut left_by_last_kill: BTreeSet<String> = BTreeSet::new();
    for cycle in 0..cycles {
        let before = test_lake.manifest_count();
        let mut running = sluice.spawn_run(false);
        // A start deletes the files of the newest manifest's seq that it does
        // not list at once, and files named for later checkpoints (which a
        // live second writer might still commit) right after its own first
        // commit: all of them are gone soon after that commit.
        assert!(
            wait_until(Duration::from_secs(60), || test_lake.manifest_count()
                > before),
            "cycle {cycle}: the restarted sluice committed nothing within 60 s; log:\n{}",
            running.log_tail(40)
        );
        let mut survivors: Vec<String> = Vec::new();
        wait_until(Duration::from_secs(30), || {
            survivors = test_lake
                .data_files()
                .intersection(&left_by_last_kill)
                .cloned()
                .collect();
            survivors.is_empty()
        });
        assert!(
            survivors.is_empty(),
            "cycle {cycle}: files the last kill left uncommitted survived the restart: {survivors:?}"
        );
        let ms = rng.gen_range(300..2000);
        std::thread::sleep(Duration::from_millis(ms));
        if let Some(status) = running.try_wait() {
            panic!(
                "cycle {cycle}: sluice exited on its own ({status}); log:\n{}",
                running.log_tail(40)
            );
        }
        running.kill();
        // What is committed at the moment of a kill is already consistent.
        let committed = test_lake.read_committed();
        let listed: BTreeSet<String> = committed.files.iter().map(|f| f.path.clone()).collect();
        left_by_last_kill = test_lake
            .data_files()
            .difference(&listed)
            .cloned()
            .collect();
        let new_manifests = committed.manifests.len() - before;
        assert!(new_manifests >= 1, "cycle {cycle}: nothing committed");
        manifests_per_cycle.push((ms, new_manifests, left_by_last_kill.len()));
    }
    eprintln!(
        "(ms alive, manifests committed, uncommitted files left) per kill cycle: {manifests_per_cycle:?}"
    );

    stop.store(true, Ordering::SeqCst);
    let transactions = writer.join().expect("writer thread");
    eprintln!("{transactions} transactions written");

    sluice.run_until_caught_up_ok();
    let lake = test_lake.read(); // contiguous seqs, no orphans, no repeated _seq

    let tables: [(&str, &str, &[usize]); 3] = [
        (
            "shop.orders",
            "SELECT id, customer, amount, note, updated FROM shop.orders",
            &[0],
        ),
        (
            "shop.items",
            "SELECT order_id, line, sku, qty FROM shop.items",
            &[0, 1],
        ),
        (
            "shop.events",
            "SELECT id, kind, payload FROM shop.events",
            &[0],
        ),
    ];
    let mut tx_seqs = BTreeSet::new();
    for (table, query, pk) in tables {
        let rows = lake.rows(table);
        for w in rows.windows(2) {
            assert!(w[0].seq < w[1].seq, "{table}: _seq repeats or goes back");
        }
        tx_seqs.extend(rows.iter().map(|r| r.tx_seq));
        let expected = db.table_map(query, pk);
        assert_same_table(table, &expected, &replay(&rows, pk));
        eprintln!(
            "{table}: {} change rows, {} rows at the end",
            rows.len(),
            expected.len()
        );
    }
    assert_eq!(
        tx_seqs.len() as u64,
        transactions,
        "every source transaction appears exactly once as a _tx_seq"
    );
}
