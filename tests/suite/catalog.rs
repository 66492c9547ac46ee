//! `[catalog]` (DESIGN.md "Tables by name"): every changelog and current
//! table registered by name in an Iceberg SQL catalog (SQLite, and a
//! PostgreSQL server the test starts) and read by name with pyiceberg's
//! `SqlCatalog`, and through the metadata file the catalog points at with
//! Polars, DuckDB and Spark on Sail, equal to the deltalake read of the
//! same folder; through RENAME TABLE, DROP TABLE and a name's reuse, a
//! catalog lost and rebuilt by `sluice catalog sync`, a pointer left behind
//! and repaired at start, and a name held by another table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::delta::read_delta;
use crate::iceberg::{ensure_iceberg_readers, sorted, Rows, ALL_ICEBERG_READERS};

/// A catalog as tests/iceberg_read.py reaches it: its `--catalog` value and
/// the environment it needs.
struct Reach {
    uri: String,
    env: Vec<(String, String)>,
}

impl Reach {
    fn uri(uri: String) -> Reach {
        Reach {
            uri,
            env: Vec::new(),
        }
    }
}

/// What tests/iceberg_read.py printed with `args`, as JSON.
fn iceberg_read(catalog: &Reach, args: &[&std::ffi::OsStr], what: &str) -> Value {
    ensure_iceberg_readers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/iceberg_read.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .args(["--catalog", &catalog.uri])
        .envs(catalog.env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run tests/iceberg_read.py");
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What pyiceberg's `SqlCatalog` lists: tables by namespace.
fn listed(catalog: &Reach) -> BTreeMap<String, Vec<String>> {
    let v = iceberg_read(
        catalog,
        &[std::ffi::OsStr::new("--list")],
        "listing the catalog",
    );
    serde_json::from_value(v["tables"].clone()).unwrap()
}

fn expect_listed(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(ns, tables)| {
            (
                ns.to_string(),
                tables.iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect()
}

/// `name` read through the catalog by `readers` equals the deltalake read
/// of `dir`'s latest Delta version, and the catalog points at the folder's
/// newest metadata file. The rows.
fn assert_by_name(
    catalog: &Reach,
    name: &str,
    dir: &Path,
    columns: &[&str],
    readers: &str,
) -> Rows {
    let joined = columns.join(",");
    let v = iceberg_read(
        catalog,
        &[
            dir.as_os_str(),
            joined.as_ref(),
            "--readers".as_ref(),
            readers.as_ref(),
            "--name".as_ref(),
            name.as_ref(),
        ],
        &format!("reading {name} from the catalog"),
    );
    let hint = std::fs::read_to_string(dir.join("metadata/version-hint.text")).unwrap();
    let newest = dir
        .join("metadata")
        .join(format!("v{}.metadata.json", hint.trim()));
    assert_eq!(
        v["metadata_location"].as_str().unwrap(),
        newest.to_str().unwrap(),
        "{name}: the catalog does not point at the folder's newest metadata file"
    );
    let delta = read_delta(
        &dir.display().to_string(),
        columns,
        None,
        &Value::Null,
        "deltalake",
    );
    let expected = sorted(delta.rows["deltalake"].clone());
    let rows: BTreeMap<String, Rows> = serde_json::from_value(v["rows"].clone()).unwrap();
    assert_eq!(
        rows.len(),
        readers.split(',').count(),
        "{name}: readers missing"
    );
    for (reader, got) in rows {
        assert_eq!(
            sorted(got),
            expected,
            "{name}: {reader}'s rows by name differ from the Delta version {}",
            delta.latest_version
        );
    }
    expected
}

/// The ids (first column) of `rows`, sorted as numbers.
fn ids(rows: &Rows) -> Vec<i64> {
    let mut ids: Vec<i64> = rows
        .iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    ids.sort();
    ids
}

fn server_ids(db: &MariaDb, table: &str) -> Vec<i64> {
    let rows = db.query_rows(&format!("SELECT id FROM {table} ORDER BY id"));
    rows.iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect()
}

fn sluice_with_catalog(db: &MariaDb, lake: &Path, state: &Path, catalog: &str) -> Sluice {
    let mut sluice = Sluice::new(db, lake, state);
    sluice.extra = format!(
        "[current]\nenabled = true\nrefresh = \"1h\"\n\n[iceberg]\nenabled = true\n\n[catalog]\ntype = \"sql\"\nuri = \"{catalog}\"\n"
    );
    sluice
}

fn sync(sluice: &Sluice) -> std::process::Output {
    sluice
        .command(&["catalog", "sync"])
        .output()
        .expect("run sluice catalog sync")
}

const CURRENT: [&str; 3] = ["id", "v", "_seq"];
const CHANGELOG: [&str; 4] = ["_seq", "_op", "id", "v"];

#[test]
fn tables_are_registered_by_name_through_renames_drops_and_reuse_and_a_lost_catalog_is_synced_back()
{
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.b (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.e (id INT PRIMARY KEY, v VARCHAR(20));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("catalog.db");
    let sluice = sluice_with_catalog(
        &db,
        lake.path(),
        state.path(),
        &format!("sqlite://{}", file.display()),
    );
    let py_uri = &Reach::uri(format!("sqlite:///{}", file.display()));
    let values = |from: i64, to: i64, tag: &str| {
        (from..=to)
            .map(|i| format!("({i}, '{tag}{i}')"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    db.sql(&format!(
        "INSERT INTO shop.a VALUES {}; INSERT INTO shop.b VALUES {}; INSERT INTO shop.e VALUES {};",
        values(1, 50, "a"),
        values(1, 30, "b"),
        values(1, 3, "e")
    ));
    sluice.run_until_caught_up_ok();

    let shop = db.namespace().to_server("shop").into_owned();
    let changelog_ns = format!("{shop}_changelog");
    let lake_dir = |t: &str| lake.path().join(&shop).join(t);
    let current_dir = |t: &str| lake.path().join("_current").join(&shop).join(t);
    assert_eq!(
        listed(py_uri),
        expect_listed(&[(&shop, &["a", "b", "e"]), (&changelog_ns, &["a", "b", "e"])])
    );
    // `e` loses every row: its current table stays, empty.
    db.sql("DELETE FROM shop.e;");
    sluice.run_until_caught_up_ok();
    assert_eq!(
        listed(py_uri),
        expect_listed(&[(&shop, &["a", "b", "e"]), (&changelog_ns, &["a", "b", "e"])])
    );
    for t in ["a", "b"] {
        let rows = assert_by_name(
            py_uri,
            &format!("{shop}.{t}"),
            &current_dir(t),
            &CURRENT,
            "pyiceberg",
        );
        assert_eq!(ids(&rows), server_ids(&db, &format!("shop.{t}")), "{t}");
        assert_by_name(
            py_uri,
            &format!("{changelog_ns}.{t}"),
            &lake_dir(t),
            &CHANGELOG,
            "pyiceberg",
        );
    }

    // RENAME: the current entry follows the table; the old name's changelog
    // stays and the new name gets its own. DROP: the current entry goes,
    // that of an empty table too.
    db.sql(&format!(
        "RENAME TABLE shop.a TO shop.c; DROP TABLE shop.b; DROP TABLE shop.e;
         INSERT INTO shop.c VALUES {}; UPDATE shop.c SET v = CONCAT(v, '!') WHERE id < 10;
         DELETE FROM shop.c WHERE id BETWEEN 20 AND 25;",
        values(51, 60, "c")
    ));
    sluice.run_until_caught_up_ok();
    assert_eq!(
        listed(py_uri),
        expect_listed(&[(&shop, &["c"]), (&changelog_ns, &["a", "b", "c", "e"])])
    );
    let rows = assert_by_name(
        py_uri,
        &format!("{shop}.c"),
        &current_dir("c"),
        &CURRENT,
        "pyiceberg",
    );
    assert_eq!(ids(&rows), server_ids(&db, "shop.c"));
    let a_log = assert_by_name(
        py_uri,
        &format!("{changelog_ns}.a"),
        &lake_dir("a"),
        &CHANGELOG,
        "pyiceberg",
    );
    assert_eq!(
        a_log.len(),
        50,
        "the changelog of the old name keeps its rows"
    );

    // A table created under the dropped name: registered again, in the
    // same folder's metadata, past the version that ended the old one.
    db.sql(&format!(
        "CREATE TABLE shop.b (id INT PRIMARY KEY, v VARCHAR(20)); INSERT INTO shop.b VALUES {};",
        values(100, 104, "n")
    ));
    sluice.run_until_caught_up_ok();
    let all = expect_listed(&[(&shop, &["b", "c"]), (&changelog_ns, &["a", "b", "c", "e"])]);
    assert_eq!(listed(py_uri), all);
    let rows = assert_by_name(
        py_uri,
        &format!("{shop}.b"),
        &current_dir("b"),
        &CURRENT,
        ALL_ICEBERG_READERS,
    );
    assert_eq!(ids(&rows), vec![100, 101, 102, 103, 104]);

    // A lost catalog: `catalog sync` registers everything again, and a
    // second sync changes nothing.
    std::fs::remove_file(&file).unwrap();
    let out = sync(&sluice);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "catalog sluice: 6 registered, 0 moved, 0 dropped, 2 unchanged",
        "six live tables; the current tables of `a` and `e` ended"
    );
    assert_eq!(listed(py_uri), all);
    let out = sync(&sluice);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "catalog sluice: 0 registered, 0 moved, 0 dropped, 8 unchanged"
    );

    // A pointer left at an older metadata file (a crash between the
    // Iceberg commit and the catalog's) is moved at the next start.
    let conn = rusqlite::Connection::open(&file).unwrap();
    let older = format!(
        "file://{}",
        current_dir("c").join("metadata/v1.metadata.json").display()
    );
    let moved = conn
        .execute(
            "UPDATE iceberg_tables SET metadata_location = ?1 WHERE table_namespace = ?2 AND table_name = 'c'",
            [&older, &shop],
        )
        .unwrap();
    assert_eq!(moved, 1);
    sluice.run_until_caught_up_ok();
    assert_by_name(
        py_uri,
        &format!("{shop}.c"),
        &current_dir("c"),
        &CURRENT,
        ALL_ICEBERG_READERS,
    );

    // A name held by another table is never taken over: sync fails naming
    // it and the fix, and leaves the entry as it was.
    let foreign = "file:///elsewhere/metadata/v3.metadata.json";
    conn.execute(
        "UPDATE iceberg_tables SET metadata_location = ?1 WHERE table_namespace = ?2 AND table_name = 'c'",
        [foreign, &shop],
    )
    .unwrap();
    let out = sync(&sluice);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{shop}.c is registered at {foreign}"))
            && err.contains("drop that entry"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("0 registered, 0 moved, 0 dropped, 7 unchanged"));
    let held: String = conn
        .query_row(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ?1 AND table_name = 'c'",
            [&shop],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(held, foreign);
    conn.execute(
        "DELETE FROM iceberg_tables WHERE table_name = 'c' AND table_namespace = ?1",
        [&shop],
    )
    .unwrap();
    let out = sync(&sluice);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "catalog sluice: 1 registered, 0 moved, 0 dropped, 7 unchanged"
    );
}

/// A PostgreSQL server of the test's own: `initdb` in a temporary
/// directory (as the `postgres` user when the test runs as root, which
/// PostgreSQL refuses), a free port, password authentication.
struct Postgres {
    _dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

const PG_PASSWORD: &str = "cat-pw";

fn pg_bin(name: &str) -> PathBuf {
    let on_path = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path
        .or_else(|| glob_first(&format!("/usr/lib/postgresql/*/bin/{name}")))
        .unwrap_or_else(|| {
            panic!("PostgreSQL's {name} is not installed (scripts/test.sh installs it)")
        })
}

fn glob_first(pattern: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("ls -d {pattern} 2>/dev/null | sort -V | tail -1"),
        ])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

impl Postgres {
    fn start() -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
        let as_server = |program: PathBuf| {
            if root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            } else {
                Command::new(program)
            }
        };
        if root {
            let ok = Command::new("chown")
                .args(["postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PG_PASSWORD).unwrap();
        if root {
            Command::new("chown")
                .arg("postgres")
                .arg(&pwfile)
                .status()
                .unwrap();
        }
        let data = dir.path().join("data");
        let out = as_server(pg_bin("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "sluice", "-A", "scram-sha-256", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let child = as_server(pg_bin("postgres"))
            .arg("-D")
            .arg(&data)
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ])
            .arg("-k")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ready = wait_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(ready, "PostgreSQL did not start on {port}");
        // Accepting connections is not yet accepting logins.
        let isready = pg_bin("pg_isready");
        assert!(wait_until(Duration::from_secs(30), || {
            Command::new(&isready)
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .output()
                .is_ok_and(|o| o.status.success())
        }));
        Postgres {
            _dir: dir,
            child,
            port,
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        if self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(500));
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[test]
fn a_postgresql_catalog_registers_and_moves_tables_with_the_password_from_the_environment() {
    let pg = Postgres::start();
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(20));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = sluice_with_catalog(
        &db,
        lake.path(),
        state.path(),
        &format!("postgresql://sluice@127.0.0.1:{}/postgres", pg.port),
    );
    let py_uri = &Reach::uri(format!(
        "postgresql+psycopg2://sluice:{PG_PASSWORD}@127.0.0.1:{}/postgres",
        pg.port
    ));

    // Without the password: the run stops, naming the catalog.
    db.sql("INSERT INTO shop.a VALUES (1, 'x'), (2, 'y');");
    sluice.env = vec![("SLUICE_CATALOG_PASSWORD".into(), "wrong".into())];
    let out = sluice.run_until_caught_up();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("catalog") && log.contains("PostgreSQL catalog at 127.0.0.1"),
        "a wrong password is named in the log:\n{}",
        tail(&log, 20)
    );

    sluice.env = vec![("SLUICE_CATALOG_PASSWORD".into(), PG_PASSWORD.into())];
    sluice.run_until_caught_up_ok();
    let shop = db.namespace().to_server("shop").into_owned();
    let changelog_ns = format!("{shop}_changelog");
    let current_dir = |t: &str| lake.path().join("_current").join(&shop).join(t);
    assert_eq!(
        listed(py_uri),
        expect_listed(&[(&shop, &["a"]), (&changelog_ns, &["a"])])
    );
    db.sql("RENAME TABLE shop.a TO shop.b; INSERT INTO shop.b VALUES (3, 'z'); UPDATE shop.b SET v = 'w' WHERE id = 1;");
    sluice.run_until_caught_up_ok();
    assert_eq!(
        listed(py_uri),
        expect_listed(&[(&shop, &["b"]), (&changelog_ns, &["a", "b"])])
    );
    let rows = assert_by_name(
        py_uri,
        &format!("{shop}.b"),
        &current_dir("b"),
        &CURRENT,
        "pyiceberg,duckdb",
    );
    assert_eq!(ids(&rows), server_ids(&db, "shop.b"));
    let out = sync(&sluice);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "catalog sluice: 0 registered, 0 moved, 0 dropped, 4 unchanged",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn glue_registers_iceberg_tables_in_lower_case_and_follows_a_rename() {
    let moto = MotoServer::start();
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.Orders (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(20));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1h\"\n\n[iceberg]\nenabled = true\n\n[catalog]\ntype = \"glue\"\n".into();
    sluice.env = moto.env();
    let glue = &Reach {
        uri: format!("glue:{}", moto.endpoint()),
        env: moto.env(),
    };
    db.sql("INSERT INTO shop.Orders VALUES (1, 'x'), (2, 'y'), (3, 'z'); INSERT INTO shop.a VALUES (7, 'q');");
    sluice.run_until_caught_up_ok();
    let shop = db.namespace().to_server("shop").into_owned();
    let changelog_ns = format!("{shop}_changelog");
    let current_dir = |t: &str| lake.path().join("_current").join(&shop).join(t);
    assert_eq!(
        listed(glue),
        expect_listed(&[(&shop, &["a", "orders"]), (&changelog_ns, &["a", "orders"])]),
        "Glue names are lower case"
    );
    let rows = assert_by_name(
        glue,
        &format!("{shop}.orders"),
        &current_dir("Orders"),
        &CURRENT,
        "pyiceberg,duckdb",
    );
    assert_eq!(ids(&rows), vec![1, 2, 3]);

    db.sql("RENAME TABLE shop.a TO shop.b; INSERT INTO shop.b VALUES (8, 'r'); UPDATE shop.Orders SET v = 'w' WHERE id = 2;");
    sluice.run_until_caught_up_ok();
    assert_eq!(
        listed(glue),
        expect_listed(&[
            (&shop, &["b", "orders"]),
            (&changelog_ns, &["a", "b", "orders"])
        ])
    );
    let rows = assert_by_name(
        glue,
        &format!("{shop}.b"),
        &current_dir("b"),
        &CURRENT,
        "pyiceberg",
    );
    assert_eq!(ids(&rows), vec![7, 8]);
    assert_by_name(
        glue,
        &format!("{shop}.orders"),
        &current_dir("Orders"),
        &CURRENT,
        "pyiceberg",
    );
    let out = sync(&sluice);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "catalog sluice: 0 registered, 0 moved, 0 dropped, 6 unchanged",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_online_schema_change_cut_over_keeps_the_name_and_routed_shards_take_one_name() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.orders_1 (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.orders_2 (id INT PRIMARY KEY, v VARCHAR(20));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("catalog.db");
    let mut sluice = sluice_with_catalog(
        &db,
        lake.path(),
        state.path(),
        &format!("sqlite://{}", file.display()),
    );
    sluice.extra.push_str(&format!(
        "\n[[routes]]\nmatch = '{}'\ntable = '{}'\n",
        db.namespace().filter(r"shop\.orders_\d+"),
        db.namespace().to_server("shop.orders"),
    ));
    let catalog = &Reach::uri(format!("sqlite:///{}", file.display()));
    db.sql(
        "INSERT INTO shop.t VALUES (1, 'a'), (2, 'b'), (3, 'c');
         INSERT INTO shop.orders_1 VALUES (1, 'x'), (2, 'y');
         INSERT INTO shop.orders_2 VALUES (1, 'p');",
    );
    sluice.run_until_caught_up_ok();
    let shop = db.namespace().to_server("shop").into_owned();
    let changelog_ns = format!("{shop}_changelog");
    let current_dir = |t: &str| lake.path().join("_current").join(&shop).join(t);
    assert_eq!(
        listed(catalog),
        expect_listed(&[(&shop, &["orders", "t"]), (&changelog_ns, &["orders", "t"])]),
        "the shards are one routed table"
    );
    let rows = assert_by_name(
        catalog,
        &format!("{shop}.orders"),
        &current_dir("orders"),
        &CURRENT,
        "pyiceberg",
    );
    assert_eq!(
        ids(&rows),
        vec![1, 1, 2],
        "both shards' rows, keyed by shard"
    );

    // gh-ost's cut-over, the ghost table captured: `t` keeps its name and
    // entry with the new rows and column; the helpers' current tables end
    // and leave the catalog, their changelogs stay.
    db.sql(
        "CREATE TABLE shop._t_gho (id INT PRIMARY KEY, v VARCHAR(20), w INT DEFAULT 1);
         INSERT INTO shop._t_gho (id, v) SELECT id, v FROM shop.t;
         INSERT INTO shop.t VALUES (4, 'd'); INSERT INTO shop._t_gho (id, v) VALUES (4, 'd');
         RENAME TABLE shop.t TO shop._t_del, shop._t_gho TO shop.t;
         DROP TABLE shop._t_del;
         INSERT INTO shop.t VALUES (5, 'e', 9);",
    );
    sluice.run_until_caught_up_ok();
    assert_eq!(
        listed(catalog),
        expect_listed(&[
            (&shop, &["orders", "t"]),
            (&changelog_ns, &["_t_del", "_t_gho", "orders", "t"])
        ])
    );
    let columns = ["id", "v", "w", "_seq"];
    let rows = assert_by_name(
        catalog,
        &format!("{shop}.t"),
        &current_dir("t"),
        &columns,
        ALL_ICEBERG_READERS,
    );
    assert_eq!(ids(&rows), server_ids(&db, "shop.t"));
    assert!(
        rows.iter()
            .any(|r| r[0].as_deref() == Some("5") && r[2].as_deref() == Some("9")),
        "the new column reads by name: {rows:?}"
    );
}
