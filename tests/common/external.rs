//! `SLUICE_TEST_MYSQL_URL=mysql://user:password@host:port`: the integration
//! tests run against that server (a MySQL 8, or a MariaDB) instead of a
//! private `mariadbd` each.
//!
//! The server is shared, by the tests of one run and perhaps by other runs,
//! so every `MariaDb` handle gets a namespace: the databases the tests use
//! (`shop`, `other`) become `sluicet_<8 hex digits>_shop` and so on in the SQL
//! sent to the server and in sluice's table filter, and the prefix is taken
//! out again of what the tests read back (the lake's table names, `_sql`,
//! manifests, sluice's output), so a test reads the same names either way.
//! A handle drops its databases when it goes.
//!
//! Tests that need a server of their own (arguments for `mariadbd`, a
//! second server, its data directory) start it with
//! [`MariaDb::start_private`], which prints `skipped: needs a private server`
//! and returns `None` here. Without the variable nothing of this applies.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use regex::Regex;

use super::MariaDb;

/// The databases the tests create; only these are renamed.
const TEST_DATABASES: &str = "shop|other";
const PREFIX_PATTERN: &str = "sluicet_[0-9a-f]{8}_";

/// The server `SLUICE_TEST_MYSQL_URL` names.
pub struct ExternalServer {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
}

/// The external server, if `SLUICE_TEST_MYSQL_URL` is set; panics on a
/// malformed URL rather than silently testing against a private server.
pub fn external_server() -> Option<&'static ExternalServer> {
    static SERVER: OnceLock<Option<ExternalServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let text = std::env::var("SLUICE_TEST_MYSQL_URL").ok()?;
            let url = url::Url::parse(&text).unwrap_or_else(|e| {
                panic!(
                    "SLUICE_TEST_MYSQL_URL={text:?} is not a URL (mysql://user:pw@host:port): {e}"
                )
            });
            assert_eq!(
                url.scheme(),
                "mysql",
                "SLUICE_TEST_MYSQL_URL must be mysql://…"
            );
            let decode = |s: &str| {
                url::form_urlencoded::parse(format!("x={s}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            Some(ExternalServer {
                host: url.host_str().unwrap_or("127.0.0.1").to_owned(),
                port: url.port().unwrap_or(3306),
                user: match url.username() {
                    "" => "root".to_owned(),
                    u => decode(u),
                },
                password: decode(url.password().unwrap_or("")),
            })
        })
        .as_ref()
}

/// What a test prints, and how it returns, when it cannot run here.
pub fn skip(why: &str) {
    eprintln!("skipped: {why}");
}

/// A handle's database prefix; none for a private server.
#[derive(Clone, Default)]
pub struct Namespace {
    prefix: Option<String>,
}

fn rename_patterns() -> &'static [Regex; 2] {
    static RES: OnceLock<[Regex; 2]> = OnceLock::new();
    RES.get_or_init(|| {
        [
            // `shop.t`, `` `shop`.`t` ``, `shop.*`
            Regex::new(&format!(r"(`?)\b({TEST_DATABASES})\b(`?\s*\.)")).unwrap(),
            // CREATE/DROP DATABASE [IF [NOT] EXISTS] shop, USE shop
            Regex::new(&format!(
                r"(?i)\b(DATABASE|SCHEMA|USE)(\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?`?)({TEST_DATABASES})\b"
            ))
            .unwrap(),
        ]
    })
}

impl Namespace {
    /// A namespace with this prefix (`sluicet_0123abcd_`).
    pub fn with_prefix(prefix: &str) -> Namespace {
        Namespace {
            prefix: Some(prefix.to_owned()),
        }
    }

    fn fresh() -> Namespace {
        Namespace {
            prefix: Some(format!("sluicet_{:08x}_", rand::random::<u32>())),
        }
    }

    /// SQL (or a table name) with the test databases renamed.
    pub fn to_server<'a>(&self, sql: &'a str) -> Cow<'a, str> {
        let Some(p) = &self.prefix else {
            return Cow::Borrowed(sql);
        };
        let [qualified, named] = rename_patterns();
        let sql = qualified.replace_all(sql, format!("${{1}}{p}${{2}}${{3}}").as_str());
        Cow::Owned(
            named
                .replace_all(&sql, format!("${{1}}${{2}}{p}${{3}}").as_str())
                .into_owned(),
        )
    }

    /// Bytes the renaming adds to each database name.
    pub fn prefix_len(&self) -> usize {
        self.prefix.as_ref().map_or(0, String::len)
    }

    /// A table filter pattern (`shop\..*`) for the renamed databases.
    pub fn filter(&self, pattern: &str) -> String {
        match &self.prefix {
            Some(p) if TEST_DATABASES.split('|').any(|db| pattern.starts_with(db)) => {
                format!("{p}{pattern}")
            }
            _ => pattern.to_owned(),
        }
    }
}

/// `text` without any handle's database prefix: what a test reads back
/// names `shop.t` whatever the server calls it.
pub fn strip_namespaces(text: &str) -> Cow<'_, str> {
    static RE: OnceLock<Regex> = OnceLock::new();
    if external_server().is_none() {
        return Cow::Borrowed(text);
    }
    RE.get_or_init(|| Regex::new(PREFIX_PATTERN).unwrap())
        .replace_all(text, "")
}

impl MariaDb {
    /// A server of the test's own, which `extra` arguments configure; with
    /// `SLUICE_TEST_MYSQL_URL` set there is none: prints why and returns None,
    /// so the test returns without passing for something it did not check.
    pub fn start_private(extra: &[&str]) -> Option<MariaDb> {
        if external_server().is_some() {
            skip("needs a private server");
            return None;
        }
        Some(MariaDb::start_with(extra))
    }

    /// A handle on the external server, with a fresh namespace.
    pub(super) fn on_external(server: &'static ExternalServer) -> MariaDb {
        MariaDb {
            dir: None,
            child: None,
            args: Vec::new(),
            port: server.port,
            socket: PathBuf::new(),
            error_log: PathBuf::new(),
            namespace: Namespace::fresh(),
        }
    }

    /// The external server this handle is on, if it is.
    pub fn external(&self) -> Option<&'static ExternalServer> {
        external_server().filter(|_| self.namespace.prefix.is_some())
    }

    /// MariaDB or MySQL (`@@version` says `MariaDB` for the former).
    pub fn is_mariadb(&self) -> bool {
        self.query_value("SELECT @@version")
            .is_some_and(|v| v.to_ascii_lowercase().contains("mariadb"))
    }

    /// For tests of MariaDB's own features: false (after printing why the
    /// test is skipped) on another server.
    pub fn is_mariadb_or_skip(&self, feature: &str) -> bool {
        let mariadb = self.is_mariadb();
        if !mariadb {
            skip(&format!("needs MariaDB ({feature})"));
        }
        mariadb
    }

    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Best effort, from `Drop` (also while a failed test unwinds): a
    /// failure leaves the databases behind, it does not panic.
    pub(super) fn drop_test_databases(&self) {
        let drops: String = TEST_DATABASES
            .split('|')
            .map(|d| format!("DROP DATABASE IF EXISTS {d};"))
            .collect();
        let drops = self.namespace.to_server(&drops).into_owned();
        let _ = self
            .client()
            .args(["-e", &drops])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// The client over TCP with the URL's account; the session in UTC as
    /// the private servers are.
    pub(super) fn external_client(server: &ExternalServer) -> Command {
        let program = if which("mariadb") { "mariadb" } else { "mysql" };
        let mut cmd = Command::new(program);
        cmd.arg("--no-defaults")
            .arg(format!("-h{}", server.host))
            .arg(format!("-P{}", server.port))
            .arg(format!("-u{}", server.user))
            .arg("--protocol=TCP")
            .arg("--init-command=SET time_zone = '+00:00'")
            .env("MYSQL_PWD", &server.password);
        cmd
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
