//! Shared harness for the integration tests: a private `mariadbd` per test,
//! a runner for the real `sluice` binary, a reader that checks the lake's
//! invariants, and a replay of the change rows the way DESIGN.md specifies.
//!
//! Every test starts its own server on a free loopback port in a temporary
//! directory, so tests run in parallel and never touch a server configured by
//! hand. Set `SLUICE_TEST_KEEP=1` to keep the temporary directories of a
//! failing test for inspection. `SLUICE_TEST_MYSQL_URL` runs them against an
//! existing server instead (see `external.rs`).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;
use tempfile::TempDir;

mod external;
pub mod proxy;
mod store;
pub use external::*;
#[allow(unused_imports)]
pub use store::*;

pub const MARIADBD: &str = "/usr/sbin/mariadbd";
pub const REPL_PASSWORD: &str = "replpass";

fn keep_dirs() -> bool {
    std::env::var_os("SLUICE_TEST_KEEP").is_some()
}

fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().unwrap().port()
}

/// Polls `cond` every 50 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------

/// A private `mariadbd` with binlog on (ROW, FULL image, UTC time zone),
/// killed and removed on drop.
pub struct MariaDb {
    dir: Option<TempDir>,
    /// None on the server of `SLUICE_TEST_MYSQL_URL`.
    child: Option<Child>,
    /// The full `mariadbd` command line, for `restart`.
    args: Vec<String>,
    port: u16,
    socket: PathBuf,
    error_log: PathBuf,
    namespace: Namespace,
}

impl MariaDb {
    pub fn start() -> MariaDb {
        Self::start_with(&[])
    }

    /// Starts a server; `extra` arguments come last, so they override the defaults
    /// (e.g. `--binlog-format=STATEMENT`). Tests that need such a server use
    /// `start_private`, which skips them on `SLUICE_TEST_MYSQL_URL`.
    pub fn start_with(extra: &[&str]) -> MariaDb {
        if let Some(server) = external_server() {
            assert!(
                extra.is_empty(),
                "SLUICE_TEST_MYSQL_URL is set: a test that passes {extra:?} needs a private server; start it with MariaDb::start_private"
            );
            return MariaDb::on_external(server);
        }
        let dir = tempfile::Builder::new()
            .prefix("sluice-mariadb-")
            .tempdir()
            .expect("create temp dir");
        let datadir = dir.path().join("data");
        let socket = dir.path().join("mysqld.sock");
        let error_log = dir.path().join("error.log");
        let root = running_as_root();
        // A private tmpdir: parallel bootstraps sharing /tmp trip over each
        // other's temporary tables ("Error on delete of '/tmp/#sql-temptable-…'").
        let tmpdir = dir.path().join("tmp");
        fs::create_dir(&tmpdir).expect("create tmpdir");

        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--tmpdir={}", tmpdir.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db");
        if root {
            install.arg("--user=root");
        }
        let out = install.output().expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        // The port is free when picked but may be taken before mariadbd binds it
        // (tests run in parallel): retry with another port then.
        let mut attempt = 0;
        let (child, args, port) = loop {
            let port = free_port();
            let mut args = vec![
                "--no-defaults".to_owned(),
                format!("--datadir={}", datadir.display()),
                format!("--socket={}", socket.display()),
                format!("--tmpdir={}", tmpdir.display()),
                format!("--port={port}"),
                "--bind-address=127.0.0.1".to_owned(),
                "--log-bin=binlog".to_owned(),
                "--server-id=1".to_owned(),
                "--binlog-format=ROW".to_owned(),
                "--binlog-row-image=FULL".to_owned(),
                format!("--log-error={}", error_log.display()),
                format!("--pid-file={}", dir.path().join("mysqld.pid").display()),
                "--innodb-buffer-pool-size=64M".to_owned(),
                "--skip-name-resolve".to_owned(),
                "--default-time-zone=+00:00".to_owned(),
                "--character-set-server=utf8mb4".to_owned(),
                "--collation-server=utf8mb4_general_ci".to_owned(),
                // No fsync at each commit: the redo log and the binlog reach the
                // OS at commit, so a killed mariadbd (resilience tests) loses
                // nothing, and the suite does not wait on the disk.
                "--innodb-flush-log-at-trx-commit=2".to_owned(),
                "--sync-binlog=0".to_owned(),
                "--innodb-doublewrite=0".to_owned(),
            ];
            if root {
                args.push("--user=root".to_owned());
            }
            args.extend(extra.iter().map(|a| a.to_string()));
            let mut child = spawn_mariadbd(&args);
            match wait_ready(&mut child, &socket, &error_log) {
                Ok(()) => break (child, args, port),
                Err(log) if attempt < 3 && log.contains("already in use") => attempt += 1,
                Err(log) => panic!("mariadbd did not start; error log:\n{log}"),
            }
        };
        let db = MariaDb {
            dir: Some(dir),
            child: Some(child),
            args,
            port,
            socket,
            error_log,
            namespace: Namespace::default(),
        };
        db.sql(&format!(
            "CREATE USER 'repl'@'%' IDENTIFIED BY '{p}';
             CREATE USER 'repl'@'localhost' IDENTIFIED BY '{p}';
             CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY '{p}';
             GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%';
             GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'localhost';
             GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'127.0.0.1';",
            p = REPL_PASSWORD
        ));
        db
    }

    /// Clean shutdown (SIGTERM, as an init system sends), waiting for the exit.
    pub fn stop(&mut self) {
        self.signal("TERM");
        let status = self.process().wait().expect("wait for mariadbd");
        assert!(status.success(), "mariadbd shut down with {status}");
    }

    /// SIGKILL: a crash. InnoDB and the binlog recover at the next start.
    pub fn kill(&mut self) {
        let child = self.process();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The private server's process (tests that control the server start
    /// it with `start_private`/`start_with`, never on the external one).
    fn process(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .expect("controlling the server needs a private mariadbd")
    }

    /// Starts the server again after `stop` or `kill`: same port, data
    /// directory and arguments.
    pub fn restart(&mut self) {
        assert!(
            self.process().try_wait().unwrap().is_some(),
            "restart: mariadbd is still running"
        );
        let child = self.child.insert(spawn_mariadbd(&self.args));
        if let Err(log) = wait_ready(child, &self.socket, &self.error_log) {
            panic!("mariadbd did not restart; error log:\n{log}");
        }
    }

    /// SIGSTOP: the server hangs with its connections open, the kernel still
    /// completes new TCP handshakes, and nothing answers.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after `freeze`.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("the external server has no pid here")
            .id()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    pub fn error_log_text(&self) -> String {
        fs::read_to_string(&self.error_log).unwrap_or_else(|e| format!("<no error log: {e}>"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    pub fn url(&self) -> String {
        match self.external() {
            Some(s) => format!("mysql://{}@{}:{}", s.user, s.host, s.port),
            None => format!("mysql://repl@127.0.0.1:{}", self.port),
        }
    }

    /// The password of `url`'s user.
    pub fn password(&self) -> String {
        match self.external() {
            Some(s) => s.password.clone(),
            None => REPL_PASSWORD.to_owned(),
        }
    }

    /// A `mariadb` client command as root over the socket, batch mode, no headers.
    /// (On `SLUICE_TEST_MYSQL_URL`, over TCP as the URL's user: feed it SQL
    /// through `namespace().to_server`.)
    pub fn client(&self) -> Command {
        match self.external() {
            Some(server) => {
                let mut cmd = MariaDb::external_client(server);
                cmd.arg("--default-character-set=utf8mb4")
                    .arg("-N")
                    .arg("-B");
                cmd
            }
            None => client_command(&self.socket),
        }
    }

    /// Runs a script through the `mariadb` client (fed on stdin) and returns stdout.
    /// Panics with the client's stderr on failure.
    pub fn sql(&self, script: &str) -> String {
        let script = self.namespace.to_server(script);
        let mut child = self
            .client()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mariadb client");
        {
            let mut stdin = child.stdin.take().unwrap();
            let script = script.to_string();
            // Write from a thread so a large result cannot dead-lock against a large script.
            std::thread::spawn(move || {
                let _ = stdin.write_all(script.as_bytes());
            });
        }
        let out = child.wait_with_output().expect("wait for mariadb client");
        if !out.status.success() {
            let shown: String = script.chars().take(2000).collect();
            panic!(
                "SQL failed: {}\n--- script ---\n{shown}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8(out.stdout).expect("client output is UTF-8");
        strip_namespaces(&text).into_owned()
    }

    /// Runs a query and parses the batch output: tab separated, `NULL` → None,
    /// batch-mode escapes (`\t`, `\n`, `\\`, `\0`) undone. Select `HEX(col)` for binary data.
    pub fn query_rows(&self, query: &str) -> Vec<Vec<Option<String>>> {
        let out = self.sql(query);
        out.lines()
            .map(|line| {
                line.split('\t')
                    .map(|f| {
                        if f == "NULL" {
                            None
                        } else {
                            Some(unescape_batch(f))
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// A single value (first column of the first row).
    pub fn query_value(&self, query: &str) -> Option<String> {
        self.query_rows(query)
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
    }

    /// `(file, position)` from SHOW MASTER STATUS.
    pub fn binlog_head(&self) -> (String, u64) {
        let rows = self.query_rows("SHOW MASTER STATUS");
        let row = rows
            .first()
            .expect("SHOW MASTER STATUS returned a row (binlog on?)");
        (
            row[0].clone().unwrap(),
            row[1].as_deref().unwrap().parse().unwrap(),
        )
    }

    /// `source_map` of a query whose columns render like the lake (see `mysql_text`).
    pub fn table_map(
        &self,
        query: &str,
        pk: &[usize],
    ) -> BTreeMap<Vec<String>, Vec<Option<String>>> {
        let mut map = BTreeMap::new();
        for row in self.query_rows(query) {
            let key = key_of(&row, pk);
            assert!(
                map.insert(key.clone(), row).is_none(),
                "duplicate key {key:?} in {query}"
            );
        }
        map
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            self.drop_test_databases();
            return;
        };
        let _ = child.kill();
        let _ = child.wait();
        if keep_dirs() {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping MariaDB dir {}", dir.keep().display());
            }
        }
    }
}

fn spawn_mariadbd(args: &[String]) -> Child {
    Command::new(MARIADBD)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mariadbd")
}

/// A `mariadb` client as root over `socket`, batch mode, no headers; for a
/// thread that outlives a borrow of the server (a writer across restarts).
pub fn client_command(socket: &Path) -> Command {
    let mut cmd = Command::new("mariadb");
    cmd.arg("--no-defaults")
        .arg("-uroot")
        .arg(format!("--socket={}", socket.display()))
        .arg("--default-character-set=utf8mb4")
        .arg("-N")
        .arg("-B");
    cmd
}

/// Waits until the server answers a ping on its socket. Err(error log) when it
/// exits during start-up; panics after 60 s.
fn wait_ready(child: &mut Child, socket: &Path, error_log: &Path) -> Result<(), String> {
    let log = || fs::read_to_string(error_log).unwrap_or_else(|e| format!("<no error log: {e}>"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("(mariadbd exited: {status})\n{}", log()));
        }
        let ping = Command::new("mariadb-admin")
            .arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", socket.display()))
            .arg("ping")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(ping, Ok(s) if s.success()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mariadbd not ready after 60 s; error log:\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn unescape_batch(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('0') => out.push('\0'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other)
            }
            None => out.push('\\'),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// sluice
// ---------------------------------------------------------------------------

static RUN_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The sluice binary the tests run: this build's, or for a benchmark that
/// compares two builds, the one `SLUICE_BENCH_BIN` names.
pub fn sluice_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SLUICE_BENCH_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_owned())
    })
}

/// One sidecar configuration. Fields are public so a test can change them before
/// running; the TOML file is rewritten on every run.
pub struct Sluice {
    dir: Option<TempDir>,
    pub config_path: PathBuf,
    pub url: String,
    pub password: String,
    pub server_id: u32,
    /// A TOML value: `"earliest"`, `"latest"` or `{ file = "...", pos = N }`.
    pub start: String,
    pub include: Vec<String>,
    pub sink_url: String,
    pub lake: PathBuf,
    pub state: PathBuf,
    pub max_rows: u64,
    pub max_buffer_bytes: String,
    pub interval: String,
    /// Leave `max_rows`, `max_buffer_bytes` and `interval` out of `[flush]`:
    /// sluice's own defaults apply.
    pub default_flush: bool,
    /// Raw TOML lines appended to the sections (e.g. `"max_rowz = 5"`).
    pub extra_source: String,
    pub extra_flush: String,
    /// Raw TOML lines appended to `[sink]` (e.g. `"endpoint = ..."`).
    pub extra_sink: String,
    /// Environment variables of the sluice process (e.g. `AWS_ENDPOINT_URL`).
    pub env: Vec<(String, String)>,
    /// Raw TOML lines of `[snapshot]`. The harness turns the initial
    /// snapshot off (`mode = "never"`) unless a test sets them: most tests
    /// check the stream from a start position.
    pub snapshot: String,
    /// Raw TOML lines of `[compaction]`. The harness turns compaction off
    /// (`enabled = false`) unless a test sets them: most tests check that
    /// a changelog table's Delta log holds exactly the manifests' files.
    pub compaction: String,
    /// Raw TOML appended at the end of the file (new sections).
    pub extra: String,
    /// Top-level keys (`shutdown_timeout`), before every section.
    pub top_level: String,
    pub rust_log: String,
    /// Timeout for `run_until_caught_up` and friends.
    pub timeout: Duration,
    /// The source's database renaming (`SLUICE_TEST_MYSQL_URL`), applied to
    /// `include` and to table arguments; sluice's output is read back without it.
    pub namespace: Namespace,
}

impl Sluice {
    /// A configuration for `db` whose start position is the server's binlog head
    /// *now*: create the captured tables before calling this.
    pub fn new(db: &MariaDb, lake: &Path, state: &Path) -> Sluice {
        let (file, pos) = db.binlog_head();
        let start = format!("{{ file = \"{file}\", pos = {pos} }}");
        let mut sluice = Self::with_source(db.url(), start, lake, state);
        sluice.password = db.password();
        sluice.namespace = db.namespace().clone();
        sluice
    }

    /// A configuration reading `url` (empty: none, for offline replay with
    /// `binlog_dir` in `extra_source`) from `start` (a TOML value).
    pub fn with_source(url: String, start: String, lake: &Path, state: &Path) -> Sluice {
        let dir = tempfile::Builder::new()
            .prefix("sluice-run-")
            .tempdir()
            .expect("temp dir");
        let config_path = dir.path().join("sluice.toml");
        fs::create_dir_all(lake).unwrap();
        fs::create_dir_all(state).unwrap();
        let lake = lake.canonicalize().unwrap();
        let state = state.canonicalize().unwrap();
        Sluice {
            dir: Some(dir),
            config_path,
            url,
            password: REPL_PASSWORD.to_owned(),
            server_id: 5401,
            start,
            include: vec![r"shop\..*".to_owned()],
            sink_url: lake.display().to_string(),
            lake,
            state,
            max_rows: 500_000,
            max_buffer_bytes: "256MiB".to_owned(),
            interval: "10s".to_owned(),
            default_flush: false,
            extra_source: String::new(),
            extra_flush: String::new(),
            extra_sink: String::new(),
            env: Vec::new(),
            snapshot: "mode = \"never\"".to_owned(),
            compaction: "enabled = false".to_owned(),
            extra: String::new(),
            top_level: String::new(),
            rust_log: std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
            timeout: Duration::from_secs(300),
            namespace: Namespace::default(),
        }
    }

    pub fn start_at(&mut self, file: &str, pos: u64) {
        self.start = format!("{{ file = \"{file}\", pos = {pos} }}");
    }

    pub fn work_dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    pub fn config_toml(&self) -> String {
        let include = self
            .include
            .iter()
            .map(|r| format!("'{}'", self.namespace.filter(r)))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "{top_level}\
             [source]\n\
             {url}\
             server_id = {server_id}\n\
             start = {start}\n\
             {extra_source}\n\
             [filter]\n\
             include = [{include}]\n\
             \n\
             [sink]\n\
             url = '{sink}'\n\
             {extra_sink}\n\
             [state]\n\
             dir = '{state}'\n\
             \n\
             [flush]\n\
             {flush}\
             {extra_flush}\n\
             [snapshot]\n\
             {snapshot}\n\
             [compaction]\n\
             {compaction}\n\
             {extra}\n",
            // An empty url leaves it out (offline replay from binlog_dir alone).
            url = if self.url.is_empty() {
                String::new()
            } else {
                format!("url = \"{}\"\n", self.url)
            },
            top_level = self.top_level,
            server_id = self.server_id,
            start = self.start,
            extra_source = self.extra_source,
            sink = self.sink_url,
            extra_sink = self.extra_sink,
            state = self.state.display(),
            flush = if self.default_flush {
                String::new()
            } else {
                format!(
                    "max_rows = {}\nmax_buffer_bytes = \"{}\"\ninterval = \"{}\"\n",
                    self.max_rows, self.max_buffer_bytes, self.interval
                )
            },
            extra_flush = self.extra_flush,
            snapshot = self.snapshot,
            compaction = self.compaction,
            extra = self.extra,
        )
    }

    pub fn write_config(&self) -> PathBuf {
        fs::write(&self.config_path, self.config_toml()).expect("write config");
        self.config_path.clone()
    }

    /// `sluice <args…> --config FILE …` with the password in the environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let config = self.write_config();
        let mut cmd = Command::new(sluice_bin());
        cmd.args(args)
            .arg("--config")
            .arg(&config)
            .env("SLUICE_SOURCE_PASSWORD", &self.password)
            .env("RUST_LOG", &self.rust_log)
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `sluice <args…> --config FILE [trailing…]` to completion with a timeout;
    /// output goes through files so a chatty child never blocks on a pipe.
    pub fn run_args(&self, args: &[&str], trailing: &[&str]) -> Output {
        let n = RUN_COUNTER.fetch_add(1, Ordering::SeqCst);
        let out_path = self.work_dir().join(format!("run-{n}.stdout"));
        let err_path = self.work_dir().join(format!("run-{n}.stderr"));
        let mut cmd = self.command(args);
        cmd.args(
            trailing
                .iter()
                .map(|a| self.namespace.to_server(a).into_owned()),
        )
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap());
        let mut child = cmd.spawn().expect("spawn sluice");
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sluice {args:?} did not finish within {:?}; stderr tail:\n{}",
                    self.timeout,
                    tail(&fs::read_to_string(&err_path).unwrap_or_default(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |path: &Path| {
            let bytes = fs::read(path).unwrap_or_default();
            strip_namespaces(&String::from_utf8_lossy(&bytes))
                .into_owned()
                .into_bytes()
        };
        Output {
            status,
            stdout: read(&out_path),
            stderr: read(&err_path),
        }
    }

    /// `sluice run --config FILE --until-caught-up`.
    pub fn run_until_caught_up(&self) -> Output {
        self.run_args(&["run"], &["--until-caught-up"])
    }

    /// Same, and panics with the log tail unless it exits 0.
    pub fn run_until_caught_up_ok(&self) -> Output {
        let out = self.run_until_caught_up();
        assert!(
            out.status.success(),
            "sluice run --until-caught-up failed ({}); stderr tail:\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 40)
        );
        out
    }

    /// Spawns `sluice run --config FILE [--until-caught-up]` in the background;
    /// stderr/stdout go to a log file. The process is SIGKILLed when the handle drops.
    pub fn spawn_run(&self, until_caught_up: bool) -> Running {
        let n = RUN_COUNTER.fetch_add(1, Ordering::SeqCst);
        let log = self.work_dir().join(format!("spawn-{n}.log"));
        let mut cmd = self.command(&["run"]);
        if until_caught_up {
            cmd.arg("--until-caught-up");
        }
        let file = File::create(&log).unwrap();
        cmd.stdout(file.try_clone().unwrap()).stderr(file);
        let child = cmd.spawn().expect("spawn sluice run");
        Running {
            child: Some(child),
            log,
            status: None,
        }
    }

    /// `sluice status --config FILE --json`, parsed.
    pub fn status_json(&self) -> Value {
        let out = self.run_args(&["status"], &["--json"]);
        assert!(
            out.status.success(),
            "sluice status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "sluice status --json printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if keep_dirs() {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping sluice run dir {}", dir.keep().display());
            }
        }
    }
}

/// A background `sluice run`.
pub struct Running {
    child: Option<Child>,
    pub log: PathBuf,
    status: Option<ExitStatus>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The exit status if the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(child) = self.child.as_mut() {
                self.status = child.try_wait().unwrap();
            }
        }
        self.status
    }

    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_until(timeout, || self.try_wait().is_some());
        self.try_wait()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) -> ExitStatus {
        if let Some(status) = self.try_wait() {
            return status;
        }
        let child = self.child.as_mut().unwrap();
        let _ = child.kill();
        let status = child.wait().unwrap();
        self.status = Some(status);
        status
    }

    /// SIGTERM, then wait up to `timeout` (SIGKILL after that).
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.try_wait() {
            return status;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        match self.wait_timeout(timeout) {
            Some(status) => status,
            None => {
                eprintln!("sluice ignored SIGTERM for {timeout:?}; killing it");
                self.kill()
            }
        }
    }

    pub fn log_text(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        strip_namespaces(&text).into_owned()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_text(), lines)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if self.status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The last non-empty line of stderr, which the CLI contract says is
/// `sluice: error: <problem and fix>` on failure.
pub fn last_stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned()
}

/// Asserts a definite failure: non-zero exit and a last stderr line
/// `sluice: error: …`; returns that line.
pub fn assert_definite_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected a non-zero exit, got {}; stderr:\n{}",
        out.status,
        tail(&stderr, 30)
    );
    let line = last_stderr_line(out);
    assert!(
        line.starts_with("sluice: error: "),
        "last stderr line must be `sluice: error: …`, got {line:?}; stderr:\n{}",
        tail(&stderr, 30)
    );
    line
}

/// Peak and current resident set of a process in KiB, from /proc.
pub fn proc_memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

// ---------------------------------------------------------------------------
// The lake
// ---------------------------------------------------------------------------

pub const CDC_COLUMNS: [&str; 9] = [
    "_op",
    "_seq",
    "_tx_seq",
    "_binlog_file",
    "_binlog_pos",
    "_gtid",
    "_ts",
    "_sql",
    "_before",
];

/// Paths of the manifests under `root`, sorted by name (no validation).
pub fn manifest_paths(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("_sluice").join("manifests");
    let mut paths: Vec<PathBuf> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    paths
}

pub fn manifest_path(root: &Path, seq: u64) -> PathBuf {
    root.join("_sluice")
        .join("manifests")
        .join(format!("{seq:020}.json"))
}

/// Every regular file under `root` outside `_sluice/` and the folders of
/// tables' Delta logs (`_delta_log/`: folders starting with `_` belong to a
/// table's Delta table, never to the manifests), as paths relative to root
/// (database names as the test wrote them, see `external.rs`).
pub fn data_files(root: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let underscored = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('_'));
            if path.is_dir() && underscored {
                continue;
            }
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                out.insert(strip_namespaces(&rel).into_owned());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// The manifest's JSON Schema; every manifest a test reads is validated
/// against it. A missing schema file fails the test: it is part of the repo.
fn manifest_schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/manifest.schema.json");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; manifests must be validated", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("manifest.schema.json is JSON");
    jsonschema::validator_for(&schema).expect("manifest.schema.json is a valid JSON Schema")
}

/// One committed Parquet file.
pub struct LakeFile {
    pub manifest_seq: u64,
    pub table: String,
    pub path: String,
    pub rows: u64,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// One change row, values rendered with `mysql_text`.
#[derive(Clone, Debug)]
pub struct Row {
    pub manifest_seq: u64,
    pub op: String,
    pub seq: i64,
    pub tx_seq: i64,
    pub binlog_file: String,
    pub binlog_pos: i64,
    pub gtid: Option<String>,
    pub ts_ms: Option<i64>,
    pub sql: Option<String>,
    pub values: Vec<Option<String>>,
    pub before: Option<Vec<Option<String>>>,
}

/// The committed state of a lake. `read` checks the invariants of DESIGN.md and
/// panics with a description of the first one broken.
pub struct Lake {
    pub root: PathBuf,
    pub manifests: Vec<Value>,
    pub files: Vec<LakeFile>,
}

impl Lake {
    pub fn read(root: &Path) -> Lake {
        Self::read_with(root, false)
    }

    /// Like `read`, but tolerates files no manifest lists: a killed sidecar
    /// leaves its pending files behind until the next start removes them.
    pub fn read_committed(root: &Path) -> Lake {
        Self::read_with(root, true)
    }

    fn read_with(root: &Path, allow_orphans: bool) -> Lake {
        let validator = manifest_schema();
        let mut manifests = Vec::new();
        for (i, path) in manifest_paths(root).iter().enumerate() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let expected_seq = i as u64 + 1;
            assert_eq!(
                name,
                format!("{expected_seq:020}.json"),
                "manifest names must be 20-digit seqs contiguous from 1"
            );
            let text = fs::read_to_string(path).unwrap();
            let manifest: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{name} is not JSON: {e}\n{text}"));
            let errors: Vec<String> = validator
                .iter_errors(&manifest)
                .map(|e| format!("{} at {}", e, e.instance_path))
                .collect();
            assert!(
                errors.is_empty(),
                "{name} violates manifest.schema.json: {errors:#?}\n{text}"
            );
            let format = if manifest.get("snapshot").is_some() {
                2
            } else {
                1
            };
            assert_eq!(
                manifest["format"], format,
                "{name}: format (2 with snapshot state)"
            );
            assert_eq!(
                manifest["seq"].as_u64(),
                Some(expected_seq),
                "{name}: seq field"
            );
            manifests.push(manifest);
        }

        let mut listed = BTreeSet::new();
        let mut files = Vec::new();
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        for manifest in &manifests {
            let mseq = manifest["seq"].as_u64().unwrap();
            let writer = manifest["writer"]["id"].as_str().unwrap_or("").to_owned();
            for entry in manifest["files"].as_array().expect("files is a list") {
                let table = entry["table"].as_str().unwrap().to_owned();
                let rel = entry["path"].as_str().unwrap().to_owned();
                assert!(
                    listed.insert(strip_namespaces(&rel).into_owned()),
                    "{rel} is listed by more than one manifest"
                );
                let (db, tbl) = table.split_once('.').expect("table is db.table");
                // Names an object key should not hold are percent-encoded (`a/a` is `a%2Fa`).
                let folder = object_store::path::Path::from_iter([db, tbl]);
                let prefix = format!("{folder}/part-{mseq:020}-");
                assert!(
                    rel.starts_with(&prefix) && rel.ends_with(&format!("-{writer}.parquet")),
                    "manifest {mseq}: file {rel} is not named {prefix}<n>-{writer}.parquet"
                );
                let abs = root.join(&rel);
                let meta = fs::metadata(&abs).unwrap_or_else(|e| {
                    panic!("manifest {mseq} lists {rel} but it is missing: {e}")
                });
                assert_eq!(
                    Some(meta.len()),
                    entry["bytes"].as_u64(),
                    "manifest {mseq}: bytes of {rel}"
                );
                let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&abs).unwrap())
                    .unwrap_or_else(|e| panic!("{rel} is not Parquet: {e}"));
                let schema = builder.schema().clone();
                let batches: Vec<RecordBatch> = builder
                    .with_batch_size(65536)
                    .build()
                    .unwrap()
                    .map(|b| b.unwrap_or_else(|e| panic!("reading {rel}: {e}")))
                    .collect();
                let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
                assert_eq!(
                    Some(rows),
                    entry["rows"].as_u64(),
                    "manifest {mseq}: rows of {rel}"
                );
                *totals.entry(table.clone()).or_default() += rows;
                files.push(LakeFile {
                    manifest_seq: mseq,
                    table: strip_namespaces(&table).into_owned(),
                    path: strip_namespaces(&rel).into_owned(),
                    rows,
                    schema,
                    batches,
                });
            }
            if let Some(t) = manifest.get("totals").and_then(|t| t.as_object()) {
                for (table, n) in &totals {
                    assert_eq!(
                        t.get(table).and_then(|v| v.as_u64()),
                        Some(*n),
                        "manifest {mseq}: totals[{table}] must be the cumulative row count"
                    );
                }
            }
        }

        let orphans: Vec<String> = data_files(root).difference(&listed).cloned().collect();
        assert!(
            allow_orphans || orphans.is_empty(),
            "files under the lake root that no manifest lists: {orphans:#?}"
        );

        // Table names as the test wrote them (see `external.rs`).
        let manifests = manifests
            .into_iter()
            .map(|m| serde_json::from_str(&strip_namespaces(&m.to_string())).unwrap())
            .collect();
        let lake = Lake {
            root: root.to_owned(),
            manifests,
            files,
        };
        lake.check_seq_order();
        lake
    }

    /// `_seq` unique across the lake; every row of manifest k+1 above every row of
    /// manifest k and below that manifest's `cursor.next_seq`; `_tx_seq` likewise.
    fn check_seq_order(&self) {
        let mut per_manifest: BTreeMap<u64, (i64, i64, i64, i64)> = BTreeMap::new();
        let mut all = Vec::new();
        for f in &self.files {
            for b in &f.batches {
                let seq = b.column_by_name("_seq").expect("_seq column");
                let seq = seq.as_primitive::<Int64Type>();
                let tx = b.column_by_name("_tx_seq").expect("_tx_seq column");
                let tx = tx.as_primitive::<Int64Type>();
                assert_eq!(seq.null_count(), 0, "{}: _seq has nulls", f.path);
                assert_eq!(tx.null_count(), 0, "{}: _tx_seq has nulls", f.path);
                for i in 0..b.num_rows() {
                    let (s, t) = (seq.value(i), tx.value(i));
                    all.push((s, t));
                    let e = per_manifest.entry(f.manifest_seq).or_insert((
                        i64::MAX,
                        i64::MIN,
                        i64::MAX,
                        i64::MIN,
                    ));
                    e.0 = e.0.min(s);
                    e.1 = e.1.max(s);
                    e.2 = e.2.min(t);
                    e.3 = e.3.max(t);
                }
            }
        }
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].0 != w[1].0, "_seq {} appears more than once", w[0].0);
            assert!(
                w[0].1 <= w[1].1,
                "_tx_seq must not decrease in _seq order: seq {} tx {} then seq {} tx {}",
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            );
        }
        let mut prev: Option<(u64, i64, i64)> = None;
        for (mseq, (min_s, max_s, min_t, max_t)) in &per_manifest {
            if let Some((pm, pmax_s, pmax_t)) = prev {
                assert!(
                    *min_s > pmax_s,
                    "manifest {mseq} has _seq {min_s} not above manifest {pm}'s max {pmax_s}"
                );
                assert!(
                    *min_t > pmax_t,
                    "a transaction spans manifests {pm} and {mseq} (_tx_seq {min_t} <= {pmax_t})"
                );
            }
            let cursor = &self.manifests[*mseq as usize - 1]["cursor"];
            if let Some(next) = cursor.get("next_seq").and_then(|v| v.as_i64()) {
                assert!(
                    *max_s < next,
                    "manifest {mseq}: _seq {max_s} >= cursor.next_seq {next}"
                );
            }
            if let Some(next) = cursor.get("next_tx_seq").and_then(|v| v.as_i64()) {
                assert!(
                    *max_t < next,
                    "manifest {mseq}: _tx_seq {max_t} >= cursor.next_tx_seq {next}"
                );
            }
            prev = Some((*mseq, *max_s, *max_t));
        }
    }

    pub fn tables(&self) -> BTreeSet<String> {
        self.files.iter().map(|f| f.table.clone()).collect()
    }

    pub fn files_of(&self, table: &str) -> Vec<&LakeFile> {
        self.files.iter().filter(|f| f.table == table).collect()
    }

    /// The Arrow schema of the table's first file (all files must agree).
    pub fn schema(&self, table: &str) -> SchemaRef {
        let files = self.files_of(table);
        let first = files
            .first()
            .unwrap_or_else(|| panic!("no file for {table} in the lake"));
        for f in &files {
            assert_eq!(
                f.schema.fields(),
                first.schema.fields(),
                "{} and {} have different schemas",
                first.path,
                f.path
            );
        }
        first.schema.clone()
    }

    pub fn row_count(&self, table: &str) -> u64 {
        self.files_of(table).iter().map(|f| f.rows).sum()
    }

    /// Every change row of `table`, in `_seq` order.
    pub fn rows(&self, table: &str) -> Vec<Row> {
        let mut rows = Vec::new();
        for f in self.files_of(table) {
            for b in &f.batches {
                rows.extend(batch_rows(b, f.manifest_seq));
            }
        }
        rows.sort_by_key(|r| r.seq);
        rows
    }

    /// The table replayed (see `replay`).
    pub fn replay(&self, table: &str, pk: &[usize]) -> BTreeMap<Vec<String>, Vec<Option<String>>> {
        replay(&self.rows(table), pk)
    }
}

fn table_column_count(schema: &Schema) -> usize {
    schema
        .fields()
        .iter()
        .position(|f| f.name() == "_op")
        .expect("every lake file has an _op column")
}

fn str_value(col: &dyn Array, row: usize) -> Option<String> {
    mysql_text(col, row)
}

/// Turns a batch into rows with rendered values.
pub fn batch_rows(batch: &RecordBatch, manifest_seq: u64) -> Vec<Row> {
    let n = table_column_count(batch.schema().as_ref());
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("column {name} missing"))
            .clone()
    };
    let op = col("_op");
    let seq = col("_seq");
    let tx = col("_tx_seq");
    let file = col("_binlog_file");
    let pos = col("_binlog_pos");
    let gtid = col("_gtid");
    let ts = col("_ts");
    let sql = col("_sql");
    let before = col("_before");
    let before = before.as_struct();
    let mut out = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let values = (0..n)
            .map(|c| mysql_text(batch.column(c).as_ref(), i))
            .collect();
        let before_values = if before.is_null(i) {
            None
        } else {
            Some(
                before
                    .columns()
                    .iter()
                    .map(|c| mysql_text(c.as_ref(), i))
                    .collect(),
            )
        };
        out.push(Row {
            manifest_seq,
            op: str_value(op.as_ref(), i).expect("_op is never null"),
            seq: seq.as_primitive::<Int64Type>().value(i),
            tx_seq: tx.as_primitive::<Int64Type>().value(i),
            binlog_file: str_value(file.as_ref(), i).expect("_binlog_file is never null"),
            binlog_pos: pos.as_primitive::<Int64Type>().value(i),
            gtid: str_value(gtid.as_ref(), i),
            ts_ms: if ts.is_null(i) {
                None
            } else {
                ts.as_primitive_opt::<TimestampMillisecondType>()
                    .map(|a| a.value(i))
            },
            sql: str_value(sql.as_ref(), i).map(|s| strip_namespaces(&s).into_owned()),
            values,
            before: before_values,
        });
    }
    out
}

pub fn key_of(values: &[Option<String>], pk: &[usize]) -> Vec<String> {
    pk.iter()
        .map(|&c| values[c].clone().unwrap_or_else(|| "NULL".to_owned()))
        .collect()
}

/// DESIGN.md's reading rule: `insert`/`snapshot` put the row under its key,
/// `update` removes the key of `_before` and puts the new row, `delete` removes
/// the key, `truncate` empties the table. `rows` must be in `_seq` order.
pub fn replay(rows: &[Row], pk: &[usize]) -> BTreeMap<Vec<String>, Vec<Option<String>>> {
    let mut map = BTreeMap::new();
    for r in rows {
        match r.op.as_str() {
            "insert" | "snapshot" => {
                map.insert(key_of(&r.values, pk), r.values.clone());
            }
            "update" => {
                let before = r
                    .before
                    .as_ref()
                    .unwrap_or_else(|| panic!("update row _seq {} has no _before", r.seq));
                map.remove(&key_of(before, pk));
                map.insert(key_of(&r.values, pk), r.values.clone());
            }
            "delete" => {
                map.remove(&key_of(&r.values, pk));
            }
            "truncate" => map.clear(),
            other => panic!("unknown _op {other:?} at _seq {}", r.seq),
        }
    }
    map
}

/// Asserts two replayed tables are equal, listing the first differences.
pub fn assert_same_table(
    what: &str,
    expected: &BTreeMap<Vec<String>, Vec<Option<String>>>,
    actual: &BTreeMap<Vec<String>, Vec<Option<String>>>,
) {
    if expected == actual {
        return;
    }
    let mut diffs = Vec::new();
    for (k, v) in expected {
        match actual.get(k) {
            None => diffs.push(format!("missing in lake: {k:?} = {v:?}")),
            Some(a) if a != v => {
                diffs.push(format!("differs at {k:?}:\n  source {v:?}\n  lake   {a:?}"))
            }
            _ => {}
        }
    }
    for (k, v) in actual {
        if !expected.contains_key(k) {
            diffs.push(format!("only in lake: {k:?} = {v:?}"));
        }
    }
    let n = diffs.len();
    diffs.truncate(15);
    panic!(
        "{what}: lake replay differs from the source ({} source rows, {} lake rows, {n} differences):\n{}",
        expected.len(),
        actual.len(),
        diffs.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Rendering Arrow values like the mariadb CLI
// ---------------------------------------------------------------------------

/// Formats an unscaled decimal integer (as a decimal string) with `scale` decimals.
fn scaled(digits: String, scale: i8) -> String {
    if scale <= 0 {
        return if scale == 0 {
            digits
        } else {
            format!("{digits}{}", "0".repeat((-scale) as usize))
        };
    }
    let (neg, abs) = match digits.strip_prefix('-') {
        Some(a) => (true, a.to_owned()),
        None => (false, digits),
    };
    let scale = scale as usize;
    let padded = format!("{abs:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if neg { "-" } else { "" })
}

fn micros_text(micros: i64) -> String {
    let dt = chrono::DateTime::from_timestamp_micros(micros)
        .unwrap_or_else(|| panic!("timestamp {micros} µs out of range"))
        .naive_utc();
    dt.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

fn to_micros(v: i64, unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => v * 1_000_000,
        TimeUnit::Millisecond => v * 1_000,
        TimeUnit::Microsecond => v,
        TimeUnit::Nanosecond => v / 1_000,
    }
}

/// MySQL TIME text: `[-]HH:MM:SS.ffffff` (hours may exceed 24, up to 838).
pub fn time_text(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let a = micros.unsigned_abs();
    let frac = a % 1_000_000;
    let secs = a / 1_000_000;
    format!(
        "{sign}{:02}:{:02}:{:02}.{frac:06}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// Renders one Arrow value the way the `mariadb` CLI prints the matching SELECT
/// expression (None for null):
/// integers in decimal (SELECT `bit+0`, `year+0`); decimals with exactly `scale`
/// decimals; floats shortest round-trip (compare numerically); Date32
/// `YYYY-MM-DD`; timestamps `YYYY-MM-DD HH:MM:SS.ffffff` (declare columns with
/// fsp 6, or SELECT DATE_FORMAT(col,'%Y-%m-%d %H:%i:%s.%f')); durations as TIME
/// `[-]HH:MM:SS.ffffff`; strings as is; binary as uppercase hex (SELECT HEX(col));
/// lists joined with `,` (SET); booleans 1/0. Dictionaries are looked through.
pub fn mysql_text(col: &dyn Array, row: usize) -> Option<String> {
    if let Some(dict) = col.as_any_dictionary_opt() {
        if dict.keys().is_null(row) {
            return None;
        }
        // Keys rendered as decimal: O(1) per value, unlike normalized_keys().
        let key: usize = mysql_text(dict.keys(), row).unwrap().parse().unwrap();
        return mysql_text(dict.values().as_ref(), key);
    }
    if col.is_null(row) {
        return None;
    }
    macro_rules! prim {
        ($t:ty) => {
            col.as_primitive::<$t>().value(row).to_string()
        };
    }
    let text = match col.data_type() {
        DataType::Null => return None,
        DataType::Boolean => (if col.as_boolean().value(row) {
            "1"
        } else {
            "0"
        })
        .to_owned(),
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Decimal32(_, s) => scaled(prim!(Decimal32Type), *s),
        DataType::Decimal64(_, s) => scaled(prim!(Decimal64Type), *s),
        DataType::Decimal128(_, s) => scaled(prim!(Decimal128Type), *s),
        DataType::Decimal256(_, s) => scaled(prim!(Decimal256Type), *s),
        DataType::Date32 => {
            let days = col.as_primitive::<Date32Type>().value(row);
            chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163)
                .expect("date in range")
                .format("%Y-%m-%d")
                .to_string()
        }
        DataType::Timestamp(unit, _) => {
            let v = match unit {
                TimeUnit::Second => col.as_primitive::<TimestampSecondType>().value(row),
                TimeUnit::Millisecond => col.as_primitive::<TimestampMillisecondType>().value(row),
                TimeUnit::Microsecond => col.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => col.as_primitive::<TimestampNanosecondType>().value(row),
            };
            micros_text(to_micros(v, unit))
        }
        DataType::Duration(unit) => {
            let v = match unit {
                TimeUnit::Second => col.as_primitive::<DurationSecondType>().value(row),
                TimeUnit::Millisecond => col.as_primitive::<DurationMillisecondType>().value(row),
                TimeUnit::Microsecond => col.as_primitive::<DurationMicrosecondType>().value(row),
                TimeUnit::Nanosecond => col.as_primitive::<DurationNanosecondType>().value(row),
            };
            time_text(to_micros(v, unit))
        }
        DataType::Utf8 => col.as_string::<i32>().value(row).to_owned(),
        DataType::LargeUtf8 => col.as_string::<i64>().value(row).to_owned(),
        DataType::Utf8View => col.as_string_view().value(row).to_owned(),
        DataType::Binary => hex(col.as_binary::<i32>().value(row)),
        DataType::LargeBinary => hex(col.as_binary::<i64>().value(row)),
        DataType::BinaryView => hex(col.as_binary_view().value(row)),
        DataType::FixedSizeBinary(_) => hex(col.as_fixed_size_binary().value(row)),
        DataType::List(_) => list_text(col.as_list::<i32>().value(row).as_ref()),
        DataType::LargeList(_) => list_text(col.as_list::<i64>().value(row).as_ref()),
        other => panic!("mysql_text: no rendering for {other:?}"),
    };
    Some(text)
}

fn list_text(items: &dyn Array) -> String {
    (0..items.len())
        .map(|i| mysql_text(items, i).unwrap_or_else(|| "NULL".to_owned()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The logical type a reader sees: dictionaries, large and view forms folded
/// into their plain type (DESIGN.md allows any of them), list item names and
/// nullability ignored.
pub fn logical_type(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, v) => logical_type(v),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::List(f) | DataType::LargeList(f) => DataType::List(std::sync::Arc::new(
            Field::new("item", logical_type(f.data_type()), true),
        )),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Field::new(f.name(), logical_type(f.data_type()), f.is_nullable()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Counts of `_op` values.
pub fn op_counts(rows: &[Row]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in rows {
        *counts.entry(r.op.clone()).or_default() += 1;
    }
    counts
}

/// A seeded random source for randomized tests: the seed from
/// `SLUICE_TEST_SEED` (else `default`), printed so that a failure can be
/// replayed, and a xorshift generator of numbers below `n`.
pub fn seeded_rng(default: u64) -> (u64, impl FnMut(u64) -> u64) {
    let seed: u64 = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    println!("SLUICE_TEST_SEED={seed}");
    let mut state = seed | 1;
    let rng = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    (seed, rng)
}

/// Every value of every Parquet file under `root` as text, and every other
/// file's bytes: where a value may hide (compressed pages included).
pub fn lake_text(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if path.extension().is_some_and(|x| x == "parquet") {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        bytes::Bytes::from(bytes),
                    )
                    .and_then(|b| b.build())
                    .unwrap_or_else(|e| panic!("{path:?}: {e}"));
                for batch in reader {
                    for column in batch.unwrap().columns() {
                        push_text(column.as_ref(), &mut text);
                    }
                }
            }
            out.push((path, text));
        }
    }
    out
}

/// Every text and binary value in `array`, nested ones included.
fn push_text(array: &dyn arrow::array::Array, out: &mut String) {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    match array.data_type() {
        DataType::Utf8 => {
            for v in array.as_string::<i32>().iter().flatten() {
                out.push_str(v);
                out.push('\n');
            }
        }
        DataType::Binary => {
            for v in array.as_binary::<i32>().iter().flatten() {
                out.push_str(&String::from_utf8_lossy(v));
                out.push('\n');
            }
        }
        DataType::Struct(_) => {
            for c in array.as_struct().columns() {
                push_text(c.as_ref(), out);
            }
        }
        DataType::List(_) => push_text(array.as_list::<i32>().values().as_ref(), out),
        DataType::Map(_, _) => {
            let map = array.as_map();
            push_text(map.keys().as_ref(), out);
            push_text(map.values().as_ref(), out);
        }
        DataType::Dictionary(_, _) => {
            let dict = array.as_any_dictionary();
            push_text(dict.values().as_ref(), out);
        }
        _ => {}
    }
}

pub fn holding<'a>(texts: &'a [(PathBuf, String)], needle: &str) -> Vec<&'a Path> {
    texts
        .iter()
        .filter(|(_, t)| t.contains(needle))
        .map(|(p, _)| p.as_path())
        .collect()
}
