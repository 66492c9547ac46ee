//! Every table folder is a Delta Lake table (DESIGN.md "The lake as tables"):
//! independent readers from PyPI (the `deltalake` package, Polars'
//! `scan_delta`, DuckDB's delta extension, Spark's DataFrame API through a
//! Sail Spark Connect server) read exactly the rows of the
//! manifests' files, through DDL, after a kill between a manifest and its
//! Delta commit, on a local path and on S3.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use crate::common::*;
use serde_json::Value;

/// Pinned reader versions (checked on this machine; DuckDB's extension must
/// have DuckDB's exact version).
const READERS: [&str; 9] = [
    "deltalake==1.6.6",
    "polars==2.1.0",
    "duckdb==1.5.5",
    "duckdb-extension-delta==1.5.5",
    "duckdb-extension-httpfs==1.5.5",
    "pyarrow",
    "pysail==0.7.2",
    "pyspark-client==4.2.0",
    // DuckDB's Python client turns TIMESTAMP WITH TIME ZONE (`_ts`) into
    // Python values through it.
    "pytz",
];

/// Every reader tests/delta_read.py knows, for `read_delta`'s `readers`.
pub(crate) const ALL_READERS: &str = "deltalake,polars,duckdb,spark";

/// Installs the readers with pip unless they import already.
pub(crate) fn ensure_readers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let present = Command::new("python3")
            .args([
                "-c",
                "import deltalake, polars, duckdb, duckdb_extension_delta, duckdb_extension_httpfs, pyarrow, pysail, pyspark, pytz; \
                 assert deltalake.__version__ == '1.6.6' and duckdb.__version__ == '1.5.5'",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if present {
            return;
        }
        eprintln!("Delta readers missing: installing {READERS:?} with pip");
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet"])
            .args(READERS)
            .output()
            .expect("run python3 -m pip");
        assert!(
            out.status.success(),
            "pip install of the Delta readers failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// What tests/delta_read.py saw of one table.
pub(crate) struct Read {
    pub latest_version: u64,
    pub files: Vec<String>,
    pub schema: Vec<String>,
    pub protocol: (u64, u64),
    pub rows: BTreeMap<String, Vec<Vec<Option<String>>>>,
}

pub(crate) fn read_delta(
    uri: &str,
    columns: &[&str],
    version: Option<u64>,
    storage: &Value,
    readers: &str,
) -> Read {
    ensure_readers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta_read.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(uri).arg(columns.join(",")).args([
        "--storage",
        &storage.to_string(),
        "--readers",
        readers,
    ]);
    if let Some(v) = version {
        cmd.args(["--version", &v.to_string()]);
    }
    let out = cmd.output().expect("run tests/delta_read.py");
    assert!(
        out.status.success(),
        "reading {uri} (version {version:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "delta_read.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let strings = |x: &Value| -> Vec<String> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    Read {
        latest_version: v["latest_version"].as_u64().unwrap(),
        files: strings(&v["files"]),
        schema: strings(&v["schema"]),
        protocol: (
            v["protocol"][0].as_u64().unwrap(),
            v["protocol"][1].as_u64().unwrap(),
        ),
        rows: serde_json::from_value(v["rows"].clone()).unwrap(),
    }
}

/// The rows of the committed files of `table` (from the manifests), up to
/// manifest `until`, as `columns` (by name; null where a file lacks one).
fn manifest_rows(
    lake: &Lake,
    table: &str,
    columns: &[&str],
    until: u64,
) -> Vec<Vec<Option<String>>> {
    let mut out = Vec::new();
    for f in lake.files_of(table) {
        if f.manifest_seq > until {
            continue;
        }
        let names: Vec<&str> = f
            .schema
            .fields()
            .iter()
            .map(|x| x.name().as_str())
            .collect();
        for b in &f.batches {
            for r in batch_rows(b, f.manifest_seq) {
                let value = |c: &str| -> Option<String> {
                    match c {
                        "_seq" => Some(r.seq.to_string()),
                        "_op" => Some(r.op.clone()),
                        _ => {
                            let i = names.iter().position(|n| *n == c)?;
                            r.values.get(i).cloned().flatten()
                        }
                    }
                };
                out.push(columns.iter().map(|c| value(c)).collect());
            }
        }
    }
    out.sort_by_key(|r: &Vec<Option<String>>| r[0].as_ref().unwrap().parse::<i64>().unwrap());
    out
}

/// The committed file names of `table` (from the manifests), up to `until`.
fn manifest_files(lake: &Lake, table: &str, until: u64) -> Vec<String> {
    let mut names: Vec<String> = lake
        .files_of(table)
        .iter()
        .filter(|f| f.manifest_seq <= until)
        .map(|f| f.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The table folder of `table` in a local lake (the server's names).
pub(crate) fn folder(lake: &Lake, table: &str) -> PathBuf {
    for m in &lake.manifests {
        for f in m["files"].as_array().unwrap() {
            if strip_namespaces(f["table"].as_str().unwrap()) == table {
                let path = f["path"].as_str().unwrap();
                return lake.root.join(path.rsplit_once('/').unwrap().0);
            }
        }
    }
    panic!("no file of {table} in the manifests");
}

/// The commits of a local table's log: (version, its actions).
pub(crate) fn delta_commits(table_dir: &Path) -> Vec<(u64, Vec<Value>)> {
    let dir = table_dir.join("_delta_log");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(v) = name
            .strip_suffix(".json")
            .and_then(|d| d.parse::<u64>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let actions = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}: {l}")))
            .collect();
        out.push((v, actions));
    }
    out.sort_by_key(|(v, _)| *v);
    out
}

/// The log's txn versions equal the seqs of the manifests that touched the
/// table, in order, one commit each; every committed file is added once.
pub(crate) fn assert_log_follows_manifests(lake: &Lake, table: &str) -> Vec<(u64, Vec<Value>)> {
    let commits = delta_commits(&folder(lake, table));
    let versions: Vec<u64> = commits.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        versions,
        (0..commits.len() as u64).collect::<Vec<_>>(),
        "{table}: versions contiguous from 0"
    );
    // Rewrites in a new column type are commits of their own, without txn.
    let rewrite = |actions: &Vec<Value>| {
        actions
            .iter()
            .find_map(|a| a.get("commitInfo"))
            .is_some_and(|i| i["sluice"]["rewritten"].is_string())
    };
    let seqs: Vec<u64> = commits
        .iter()
        .filter(|(_, actions)| !rewrite(actions))
        .map(|(v, actions)| {
            let txns: Vec<&Value> = actions.iter().filter_map(|a| a.get("txn")).collect();
            assert_eq!(txns.len(), 1, "{table} version {v}: one txn");
            assert_eq!(txns[0]["appId"], "sluice");
            let info = actions
                .iter()
                .find_map(|a| a.get("commitInfo"))
                .unwrap_or_else(|| panic!("{table} version {v}: no commitInfo"));
            assert_eq!(info["sluice"]["seq"], txns[0]["version"]);
            assert!(info["sluice"]["cursor"]["file"].is_string());
            txns[0]["version"].as_u64().unwrap()
        })
        .collect();
    let touched: BTreeSet<u64> = lake
        .files_of(table)
        .iter()
        .map(|f| f.manifest_seq)
        .collect();
    assert_eq!(
        seqs,
        touched.into_iter().collect::<Vec<_>>(),
        "{table}: one Delta commit per manifest that touched it"
    );
    // The live files: each manifest file once, as itself or as its copy
    // in a newer type (`_rewritten/v<version>-<name>`).
    let mut live = BTreeSet::new();
    for (v, actions) in &commits {
        for a in actions {
            if let Some(add) = a.get("add") {
                let path = add["path"].as_str().unwrap().to_owned();
                assert!(
                    live.insert(path.clone()),
                    "{table} version {v}: {path} added twice"
                );
            }
            if let Some(remove) = a.get("remove") {
                let path = remove["path"].as_str().unwrap();
                assert!(
                    live.remove(path),
                    "{table} version {v}: {path} removed but not live"
                );
            }
        }
    }
    let mut originals: Vec<String> = live
        .iter()
        .map(|p| match p.strip_prefix("_rewritten/v") {
            Some(rest) => rest.split_once('-').unwrap().1.to_owned(),
            None => p.clone(),
        })
        .collect();
    originals.sort();
    assert_eq!(
        originals,
        manifest_files(lake, table, u64::MAX),
        "{table}: files"
    );
    commits
}

/// Every reader reads `table` (latest and version 0) as the manifests say.
fn assert_readers_agree(
    lake: &Lake,
    uri: &str,
    table: &str,
    columns: &[&str],
    storage: &Value,
    readers: &str,
) -> Read {
    let read = read_delta(uri, columns, None, storage, readers);
    let want = manifest_rows(lake, table, columns, u64::MAX);
    assert!(!want.is_empty(), "{table}: the workload wrote rows");
    assert_eq!(
        read.files,
        manifest_files(lake, table, u64::MAX),
        "{table}: files of the latest version"
    );
    for c in columns {
        assert!(
            read.schema.iter().any(|s| s == c),
            "{table}: {c} not in {:?}",
            read.schema
        );
    }
    assert_eq!(read.rows.len(), readers.split(',').count());
    for (reader, rows) in &read.rows {
        assert_eq!(rows, &want, "{table}: rows read by {reader}");
    }
    // Time travel: version 0 holds the files of the first manifest only.
    let first_seq = lake
        .files_of(table)
        .iter()
        .map(|f| f.manifest_seq)
        .min()
        .unwrap();
    let v0 = read_delta(uri, columns, Some(0), storage, readers);
    assert_eq!(
        v0.files,
        manifest_files(lake, table, first_seq),
        "{table}: files of version 0"
    );
    let want0 = manifest_rows(lake, table, columns, first_seq);
    for (reader, rows) in &v0.rows {
        assert_eq!(rows, &want0, "{table}: rows of version 0 read by {reader}");
    }
    read
}

const CREATE: &str = "
CREATE DATABASE shop;
CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(8,2), born DATETIME(6));
CREATE TABLE shop.u (id INT PRIMARY KEY, v INT NOT NULL);
";

/// Each step is committed by a run of its own, so each is a manifest.
const STEPS: [&str; 7] = [
    "INSERT INTO shop.t VALUES (1, 'one', 1.50, '2024-01-02 03:04:05'), (2, 'two', NULL, NULL);
     INSERT INTO shop.u VALUES (1, 10), (2, 20);",
    "ALTER TABLE shop.t ADD COLUMN extra INT;
     INSERT INTO shop.t VALUES (3, 'three', 3.00, '2024-02-03 04:05:06.5', 33);
     UPDATE shop.t SET extra = 11 WHERE id = 1;",
    "ALTER TABLE shop.t MODIFY name VARCHAR(40);
     ALTER TABLE shop.u MODIFY v BIGINT NOT NULL;
     INSERT INTO shop.t VALUES (4, 'a longer name for four', 4.25, NULL, 44);
     INSERT INTO shop.u VALUES (3, 30000000000);",
    "ALTER TABLE shop.t RENAME COLUMN extra TO extra2;
     INSERT INTO shop.t VALUES (5, 'five', 5.00, NULL, 55);",
    "ALTER TABLE shop.t DROP COLUMN born;
     INSERT INTO shop.t VALUES (6, 'six', 6.60, 66);
     DELETE FROM shop.t WHERE id = 2;",
    "DELETE FROM shop.u WHERE id = 1;",
    "RENAME TABLE shop.u TO shop.u2;
     INSERT INTO shop.u2 VALUES (9, 9);",
];

const T_COLUMNS: [&str; 7] = ["_seq", "_op", "id", "name", "price", "extra", "extra2"];
const U_COLUMNS: [&str; 4] = ["_seq", "_op", "id", "v"];

/// ADD, MODIFY within the lake type, RENAME and DROP COLUMN: every reader
/// reads every version of both tables as the manifests' files hold them.
#[test]
fn readers_see_the_manifests_rows_through_ddl() {
    let db = MariaDb::start();
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, dir.path(), state.path());
    for step in STEPS {
        db.sql(step);
        sluice.run_until_caught_up_ok();
    }
    let lake = Lake::read(dir.path());
    let t = assert_log_follows_manifests(&lake, "shop.t");
    let u = assert_log_follows_manifests(&lake, "shop.u");
    // DATETIME needs timestampNtz (reader 3 / writer 7); shop.u is plain.
    let protocol = |commits: &[(u64, Vec<Value>)]| {
        commits[0]
            .1
            .iter()
            .find_map(|a| a.get("protocol"))
            .cloned()
            .unwrap()
    };
    assert_eq!(protocol(&t)["minReaderVersion"], 3);
    assert_eq!(
        protocol(&t)["readerFeatures"],
        serde_json::json!(["timestampNtz"])
    );
    assert_eq!(protocol(&u)["minReaderVersion"], 1);
    assert_eq!(protocol(&u)["minWriterVersion"], 2);
    // The schema widened at ADD and RENAME only (MODIFY within the lake type
    // and DROP change nothing): metaData in versions 0, 1 (extra), 3 (extra2).
    let with_metadata: Vec<u64> = t
        .iter()
        .filter(|(_, a)| a.iter().any(|x| x.get("metaData").is_some()))
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(with_metadata, [0, 1, 3]);
    // Statistics: numRecords and bounds of the key.
    let add = t[0].1.iter().find_map(|a| a.get("add")).unwrap();
    let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
    assert_eq!(stats["numRecords"], 2);
    assert_eq!(stats["minValues"]["id"], 1);
    assert_eq!(stats["maxValues"]["id"], 2);
    assert_eq!(stats["nullCount"]["price"], 1);

    for (table, columns, commits, protocol) in [
        ("shop.t", &T_COLUMNS[..], &t, (3, 7)),
        ("shop.u", &U_COLUMNS[..], &u, (1, 2)),
    ] {
        let uri = folder(&lake, table).display().to_string();
        let read = assert_readers_agree(&lake, &uri, table, columns, &Value::Null, ALL_READERS);
        assert_eq!(read.latest_version, commits.len() as u64 - 1, "{table}");
        assert_eq!(read.protocol, protocol, "{table}");
    }
    let born = read_delta(
        &folder(&lake, "shop.t").display().to_string(),
        &["_seq", "born"],
        None,
        &Value::Null,
        ALL_READERS,
    );
    for rows in born.rows.values() {
        assert_eq!(rows[0][1].as_deref(), Some("2024-01-02 03:04:05.000000"));
    }

    // RENAME TABLE: the new name's folder is a new Delta table whose first
    // commit names the statement (and so the old name).
    let u2 = assert_log_follows_manifests(&lake, "shop.u2");
    let info = u2[0].1.iter().find_map(|a| a.get("commitInfo")).unwrap();
    let renamed_by = info["sluice"]["renamed_by"].as_str().unwrap_or_default();
    assert!(
        renamed_by.contains("RENAME TABLE") && renamed_by.contains(".u TO "),
        "{info}"
    );

    let status = sluice.status_json();
    assert_eq!(status["delta_versions"]["shop.t"], t.len() as u64 - 1);
    assert_eq!(status["delta_versions"]["shop.u"], u.len() as u64 - 1);
}

/// A decimal as a number whatever its scale: "1.50" and "1.5000" agree.
fn decimal_text(v: &Option<String>) -> Option<String> {
    v.as_ref().map(|s| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.clone()
        }
    })
}

/// A column changes to another lake type (DECIMAL scale, FLOAT to DOUBLE, a
/// number to a string): the Delta table is rewritten in the new type by
/// copies under `_rewritten/` (the manifests' files untouched), and every
/// reader reads every row in the new type, including a manifest that holds
/// files of both types.
#[test]
fn a_column_that_changes_its_type_is_rewritten_for_every_reader() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.p (id INT PRIMARY KEY, price DECIMAL(8,2), ratio FLOAT, code INT);",
    );
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, dir.path(), state.path());
    // The old files' rewrite in the new types is what is checked here, not
    // the re-read that these conversions get by default (tests/suite/reread.rs).
    sluice.snapshot = "mode = \"never\"\nafter_ddl = \"never\"".into();
    let steps = [
        "INSERT INTO shop.p VALUES (1, 1.50, 0.5, 7), (2, -999999.99, NULL, NULL);",
        "ALTER TABLE shop.p MODIFY price DECIMAL(12,4);
         INSERT INTO shop.p VALUES (3, 12345678.1234, 0.25, 30);
         UPDATE shop.p SET price = 2.0001 WHERE id = 1;",
        // Rows of the old and the new shape in one manifest.
        "INSERT INTO shop.p VALUES (4, 4.5, 1.75, 40);
         ALTER TABLE shop.p MODIFY ratio DOUBLE, MODIFY code VARCHAR(20);
         INSERT INTO shop.p VALUES (5, 5, 0.1, 'X-5');
         UPDATE shop.p SET code = CONCAT('C', code) WHERE id = 3;",
    ];
    for step in steps {
        db.sql(step);
        sluice.run_until_caught_up_ok();
    }
    let lake = Lake::read(dir.path());
    let commits = assert_log_follows_manifests(&lake, "shop.p");
    let table_dir = folder(&lake, "shop.p");

    // Two rewrites: each a commit that removes files and adds their copies,
    // no data change, no txn.
    let rewrites: Vec<&(u64, Vec<Value>)> = commits
        .iter()
        .filter(|(_, a)| a.iter().any(|x| x.get("remove").is_some()))
        .collect();
    assert_eq!(rewrites.len(), 2, "{commits:#?}");
    for (v, actions) in &rewrites {
        assert!(
            actions.iter().all(|a| a.get("txn").is_none()),
            "version {v}"
        );
        for a in actions.iter().filter_map(|a| a.get("add")) {
            let path = a["path"].as_str().unwrap();
            assert!(path.starts_with("_rewritten/"), "{path}");
            assert_eq!(a["dataChange"], false);
            assert!(table_dir.join(path).is_file(), "{path}");
        }
    }
    // The latest schema has the new types, in `_before` too.
    let schema: Value = commits
        .iter()
        .rev()
        .find_map(|(_, a)| a.iter().find_map(|x| x.get("metaData")))
        .map(|m| serde_json::from_str(m["schemaString"].as_str().unwrap()).unwrap())
        .unwrap();
    let type_of = |fields: &Value, name: &str| {
        fields["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["type"].clone())
            .unwrap()
    };
    assert_eq!(type_of(&schema, "price"), "decimal(12,4)");
    assert_eq!(type_of(&schema, "ratio"), "double");
    assert_eq!(type_of(&schema, "code"), "string");
    let before = type_of(&schema, "_before");
    assert_eq!(type_of(&before, "price"), "decimal(12,4)");
    assert_eq!(type_of(&before, "code"), "string");

    // Every reader reads the manifests' rows, in the new types.
    let columns = ["_seq", "_op", "id", "price", "ratio", "code"];
    let want: Vec<Vec<Option<String>>> = manifest_rows(&lake, "shop.p", &columns, u64::MAX)
        .into_iter()
        .map(|r| r.iter().map(decimal_text).collect())
        .collect();
    assert_eq!(want.len(), 7, "five inserts and two updates");
    let uri = table_dir.display().to_string();
    let read = read_delta(&uri, &columns, None, &Value::Null, ALL_READERS);
    assert_eq!(read.rows.len(), ALL_READERS.split(',').count());
    for (reader, rows) in &read.rows {
        let got: Vec<Vec<Option<String>>> = rows
            .iter()
            .map(|r| r.iter().map(decimal_text).collect())
            .collect();
        assert_eq!(got, want, "rows read by {reader}");
    }
    // The manifests' files are untouched and still hold the old types;
    // version 0 reads them as they were.
    let first = &lake.files_of("shop.p")[0];
    assert_eq!(
        first.schema.field_with_name("price").unwrap().data_type(),
        &arrow::datatypes::DataType::Decimal128(8, 2)
    );
    let v0 = read_delta(&uri, &columns, Some(0), &Value::Null, ALL_READERS);
    for (reader, rows) in &v0.rows {
        assert_eq!(rows.len(), 2, "version 0 read by {reader}");
        assert_eq!(
            rows[0][3].as_deref().map(|s| s.trim_end_matches('0')),
            Some("1.5")
        );
    }
}

/// 200 tables in 4 databases, every checkpoint touching all of them: the
/// Delta commits run several at once (`requests_in_flight = 8`). A kill in
/// the middle of them (after 90 commits) leaves some tables' logs behind the
/// manifest; the next start makes exactly the missing ones, and every log
/// ends with one commit per manifest that touched its table, no file twice,
/// and no table behind in `status`.
#[test]
fn a_kill_in_the_middle_of_a_checkpoints_parallel_commits_is_repaired() {
    const DBS: usize = 4;
    const TABLES: usize = 50;
    let db = MariaDb::start();
    let mut ddl = String::new();
    for d in 0..DBS {
        ddl.push_str(&format!("CREATE DATABASE shop{d};\n"));
        for t in 0..TABLES {
            ddl.push_str(&format!(
                "CREATE TABLE shop{d}.t{t} (id INT PRIMARY KEY, v INT);\n"
            ));
        }
    }
    db.sql(&ddl);
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, dir.path(), state.path());
    sluice.include = vec![r"shop\d\..*".to_owned()];
    sluice.extra_sink = "requests_in_flight = 8".to_owned();
    sluice.extra = "[current]\nenabled = false\n".to_owned();
    // One transaction with a row of every table: one manifest of all 200.
    let every_table = |sql: &dyn Fn(usize, usize) -> String| {
        let mut script = String::from("BEGIN;\n");
        for d in 0..DBS {
            for t in 0..TABLES {
                script.push_str(&sql(d, t));
            }
        }
        script.push_str("COMMIT;\n");
        script
    };
    db.sql(&every_table(&|d, t| {
        format!("INSERT INTO shop{d}.t{t} VALUES (1, {t}), (2, {d});\n")
    }));
    sluice
        .env
        .push(("SLUICE_TEST_ABORT_AFTER_TABLE_COMMITS".into(), "90".into()));
    let out = sluice.run_until_caught_up();
    assert!(!out.status.success(), "the hook kills sluice");
    let lake = Lake::read_committed(dir.path());
    let names: Vec<String> = (0..DBS)
        .flat_map(|d| (0..TABLES).map(move |t| format!("shop{d}.t{t}")))
        .collect();
    let with_log = names
        .iter()
        .filter(|n| folder(&lake, n).join("_delta_log").exists())
        .count();
    assert!(
        (90..DBS * TABLES).contains(&with_log),
        "the kill came in the middle of the commits: {with_log} of {} logs",
        DBS * TABLES
    );

    // A second manifest of every table, and the start that repairs.
    db.sql(&every_table(&|d, t| {
        format!("UPDATE shop{d}.t{t} SET v = v + 1 WHERE id = 1; DELETE FROM shop{d}.t{t} WHERE id = 2;\n")
    }));
    sluice.env.clear();
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(dir.path());
    for name in &names {
        let commits = assert_log_follows_manifests(&lake, name);
        assert_eq!(commits.len(), 2, "{name}: {commits:?}");
    }
    let status = sluice.status_json();
    assert_eq!(status["delta_lag"], serde_json::json!({}), "{status}");
    // Three of the tables as the readers see them: the manifests' rows, and
    // the last change of each key is the source's row.
    for name in ["shop0.t0", "shop2.t17", "shop3.t49"] {
        let (d, t) = name.split_once('.').unwrap();
        let uri = folder(&lake, name).display().to_string();
        let columns = ["_seq", "_op", "id", "v"];
        let read = assert_readers_agree(&lake, &uri, name, &columns, &Value::Null, ALL_READERS);
        let want = db.query_rows(&format!("SELECT id, v FROM {d}.{t}"));
        for (reader, rows) in &read.rows {
            let mut last: BTreeMap<String, &[Option<String>]> = BTreeMap::new();
            for r in rows {
                last.insert(r[2].clone().unwrap(), &r[1..]);
            }
            let live: Vec<Vec<Option<String>>> = last
                .values()
                .filter(|r| r[0].as_deref() != Some("delete"))
                .map(|r| r[1..].to_vec())
                .collect();
            assert_eq!(live, want, "{name} read by {reader}: {rows:?}");
        }
    }
}

/// A kill after a manifest and before its Delta commits: the next start
/// makes them, once; a lake without Delta logs gets them built.
#[test]
fn a_kill_before_the_delta_commit_is_repaired_at_start() {
    let db = MariaDb::start();
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, dir.path(), state.path());
    db.sql(STEPS[0]);
    sluice.run_until_caught_up_ok();
    db.sql(STEPS[1]);
    sluice
        .env
        .push(("SLUICE_TEST_ABORT_BEFORE_DELTA".into(), "1".into()));
    let out = sluice.run_until_caught_up();
    assert!(!out.status.success(), "the hook kills sluice");
    let lake = Lake::read_committed(dir.path());
    let touched: BTreeSet<u64> = lake
        .files_of("shop.t")
        .iter()
        .map(|f| f.manifest_seq)
        .collect();
    assert_eq!(
        touched.len(),
        2,
        "the second manifest with rows of shop.t is committed"
    );
    let t_dir = folder(&lake, "shop.t");
    assert_eq!(delta_commits(&t_dir).len(), 1, "its Delta commit is not");

    sluice.env.clear();
    let out = sluice.run_until_caught_up_ok();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Delta logs caught up with the manifests"),
        "{}",
        tail(&String::from_utf8_lossy(&out.stderr), 20)
    );
    let lake = Lake::read(dir.path());
    assert_eq!(assert_log_follows_manifests(&lake, "shop.t").len(), 2);
    assert_eq!(assert_log_follows_manifests(&lake, "shop.u").len(), 1);
    // Never twice: another start makes no commit.
    sluice.run_until_caught_up_ok();
    assert_eq!(delta_commits(&t_dir).len(), 2);

    // A lake of a sluice without Delta logs: built at start, in manifest order.
    for table in ["shop.t", "shop.u"] {
        std::fs::remove_dir_all(folder(&lake, table).join("_delta_log")).unwrap();
    }
    db.sql(STEPS[2]);
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(dir.path());
    assert_eq!(assert_log_follows_manifests(&lake, "shop.t").len(), 3);
    assert_eq!(assert_log_follows_manifests(&lake, "shop.u").len(), 2);
    let uri = folder(&lake, "shop.t").display().to_string();
    assert_readers_agree(
        &lake,
        &uri,
        "shop.t",
        &T_COLUMNS[..6],
        &Value::Null,
        ALL_READERS,
    );
}

/// Every `<dir>/_delta_log` folder below `root`.
fn delta_log_folders(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() == "_delta_log" {
                    out.push(entry.path());
                } else {
                    todo.push(entry.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// A crawler that takes every `_delta_log` folder for a Delta table finds
/// exactly the changelog and current-state tables: the store probe writes
/// outside any such folder, and the empty `_sluice/_delta_log/` that earlier
/// releases left is removed at start.
#[test]
fn only_tables_have_delta_log_folders() {
    let db = MariaDb::start();
    db.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, dir.path(), state.path());
    db.sql(STEPS[0]);
    let stray = dir.path().join("_sluice/_delta_log");
    std::fs::create_dir_all(&stray).unwrap();
    sluice.run_until_caught_up_ok();
    assert!(
        !stray.exists(),
        "the empty probe folder of an earlier release is removed"
    );
    let lake = Lake::read(dir.path());
    let mut tables: Vec<PathBuf> = ["shop.t", "shop.u"]
        .iter()
        .flat_map(|t| {
            let changelog = folder(&lake, t);
            let (db_name, table) = t.split_once('.').unwrap();
            [
                changelog,
                dir.path().join("_current").join(db_name).join(table),
            ]
        })
        .map(|table| table.join("_delta_log"))
        .collect();
    tables.sort();
    assert_eq!(delta_log_folders(dir.path()), tables);
    // `check` probes the store too, and leaves nothing either.
    let check = sluice.run_args(&["check"], &[]);
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(report.contains("put-if-absent works"), "{report}");
    assert_eq!(delta_log_folders(dir.path()), tables);
}

/// 101 manifests of one table: version 100 is a checkpoint that
/// `_last_checkpoint` names, readers read through it, and a restart loads
/// the log from it.
#[test]
fn a_checkpoint_every_hundred_commits() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.u (id INT PRIMARY KEY, v INT NOT NULL);");
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, dir.path(), state.path());
    // A checkpoint at every transaction boundary of a stream that trickles.
    sluice.interval = "1ms".into();
    let mut running = sluice.spawn_run(false);
    let log = dir.path().join("shop").join("u").join("_delta_log");
    let commits = |log: &Path| {
        std::fs::read_dir(log)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .count()
            })
            .unwrap_or(0)
    };
    // Transactions that arrive together share a checkpoint: insert until
    // the log has 101 commits.
    let mut i = 0;
    while commits(&log) <= 100 && i < 400 {
        i += 1;
        db.sql(&format!("INSERT INTO shop.u VALUES ({i}, {i});"));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let enough = wait_until(std::time::Duration::from_secs(60), || commits(&log) > 100);
    running.terminate(std::time::Duration::from_secs(30));
    assert!(
        enough,
        "{} Delta commits; log:\n{}",
        commits(&log),
        running.log_tail(30)
    );
    let lake = Lake::read(dir.path());
    let all = assert_log_follows_manifests(&lake, "shop.u");
    assert!(all.len() > 100, "{} commits", all.len());
    let hint: Value =
        serde_json::from_str(&std::fs::read_to_string(log.join("_last_checkpoint")).unwrap())
            .unwrap();
    assert_eq!(hint["version"], 100);
    assert!(log.join(format!("{:020}.checkpoint.parquet", 100)).exists());
    let uri = folder(&lake, "shop.u").display().to_string();
    assert_readers_agree(&lake, &uri, "shop.u", &U_COLUMNS, &Value::Null, ALL_READERS);
    // A restart loads the log from the checkpoint and goes on.
    db.sql("INSERT INTO shop.u VALUES (1000, 1);");
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(dir.path());
    assert_eq!(
        assert_log_follows_manifests(&lake, "shop.u").len(),
        all.len() + 1
    );
}

/// On S3 (moto): the logs are written put-if-absent in the bucket and read
/// from there by the `deltalake` package and Polars.
#[test]
fn s3_lakes_have_delta_logs() {
    let db = MariaDb::start();
    db.sql(CREATE);
    let test_lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let sluice = test_lake.sluice(&db, state.path());
    for step in &STEPS[..3] {
        db.sql(step);
        sluice.run_until_caught_up_ok();
    }
    let lake = test_lake.read();
    let local_t = assert_log_follows_manifests(&lake, "shop.t");
    assert_eq!(local_t.len(), 3);
    let moto = test_lake.moto().unwrap();
    let env: BTreeMap<String, String> = moto.env().into_iter().collect();
    let storage = serde_json::json!({
        "AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": env["AWS_REGION"],
        "AWS_ALLOW_HTTP": "true",
    });
    let rel = folder(&lake, "shop.t");
    let rel = rel.strip_prefix(&lake.root).unwrap().display().to_string();
    let uri = format!("{}/{rel}", test_lake.sink_url());
    // DuckDB on S3: the delta extension with an S3 secret (the httpfs wheel).
    assert_readers_agree(
        &lake,
        &uri,
        "shop.t",
        &T_COLUMNS[..6],
        &storage,
        ALL_READERS,
    );
}
