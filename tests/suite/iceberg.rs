//! Iceberg metadata beside the Delta log (`[iceberg] enabled`, DESIGN.md
//! "Tables by name"): every changelog and current table reads as Iceberg in
//! pyiceberg, Polars' `scan_iceberg`, DuckDB's iceberg extension and Spark's
//! API on Sail, equal to the deltalake read of the Delta version its
//! snapshot names, through a seeded workload with DDL (an added column, a
//! promotion, a type change Iceberg cannot promote), deletion vectors as
//! position deletes, a kill between a Delta commit and its Iceberg commit,
//! and time travel to older snapshots.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use serde_json::Value;

use crate::common::*;
use crate::delta::{delta_commits, ensure_readers, read_delta};

/// Iceberg readers beside the Delta ones (versions checked on this
/// machine; DuckDB's extensions must have DuckDB's exact version).
const ICEBERG_READERS: [&str; 5] = [
    "pyiceberg==0.12.0",
    "duckdb-extension-iceberg==1.5.5",
    "duckdb-extension-avro==1.5.5",
    // pyiceberg's SQL catalog, on SQLite and PostgreSQL.
    "sqlalchemy==2.1.9",
    "psycopg2-binary==2.9.13",
];

pub(crate) const ALL_ICEBERG_READERS: &str = "pyiceberg,polars,duckdb,spark";

pub(crate) fn ensure_iceberg_readers() {
    ensure_readers();
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let present = Command::new("python3")
            .args([
                "-c",
                "import pyiceberg, duckdb_extension_iceberg, duckdb_extension_avro, sqlalchemy, psycopg2; \
                 assert pyiceberg.__version__ == '0.12.0'",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if present {
            return;
        }
        eprintln!("Iceberg readers missing: installing {ICEBERG_READERS:?} with pip");
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet"])
            .args(ICEBERG_READERS)
            .output()
            .expect("run python3 -m pip");
        assert!(
            out.status.success(),
            "pip install of the Iceberg readers failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

pub(crate) type Rows = Vec<Vec<Option<String>>>;

/// What tests/iceberg_read.py saw of one table.
struct IcebergRead {
    current: i64,
    /// (snapshot id, Delta version, manifest seq), oldest first.
    snapshots: Vec<(i64, u64, u64)>,
    schema: Vec<String>,
    /// How many manifests the snapshot's manifest list names.
    manifests: u64,
    rows: BTreeMap<String, Rows>,
}

fn read_iceberg(dir: &Path, columns: &[&str], snapshot: Option<i64>) -> IcebergRead {
    ensure_iceberg_readers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/iceberg_read.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(dir)
        .arg(columns.join(","))
        .args(["--readers", ALL_ICEBERG_READERS]);
    if let Some(s) = snapshot {
        cmd.args(["--snapshot", &s.to_string()]);
    }
    let out = cmd.output().expect("run tests/iceberg_read.py");
    assert!(
        out.status.success(),
        "reading {dir:?} as Iceberg (snapshot {snapshot:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iceberg_read.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    IcebergRead {
        current: v["current"].as_i64().unwrap(),
        snapshots: v["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].as_i64().unwrap(),
                    s["delta_version"].as_u64().unwrap(),
                    s["manifest_seq"].as_u64().unwrap(),
                )
            })
            .collect(),
        schema: serde_json::from_value(v["schema"].clone()).unwrap(),
        manifests: v["manifests"].as_u64().unwrap(),
        rows: serde_json::from_value(v["rows"].clone()).unwrap(),
    }
}

pub(crate) fn sorted(mut rows: Rows) -> Rows {
    rows.sort();
    rows
}

/// Every Iceberg reader's rows of `dir` at `snapshot` (the current one
/// without) equal deltalake's rows of the Delta version the snapshot
/// names; the current snapshot names the Delta log's latest version. The
/// read, and the rows.
fn assert_iceberg_is_delta(
    what: &str,
    dir: &Path,
    columns: &[&str],
    snapshot: Option<i64>,
) -> (IcebergRead, Rows) {
    let ice = read_iceberg(dir, columns, snapshot);
    let id = snapshot.unwrap_or(ice.current);
    let &(_, version, seq) = ice
        .snapshots
        .iter()
        .find(|s| s.0 == id)
        .unwrap_or_else(|| panic!("{what}: no snapshot {id} in {:?}", ice.snapshots));
    assert_eq!(
        id,
        version as i64 + 1,
        "{what}: a snapshot's id is its Delta version + 1"
    );
    let delta = read_delta(
        &dir.display().to_string(),
        columns,
        Some(version),
        &Value::Null,
        "deltalake",
    );
    if snapshot.is_none() {
        assert_eq!(
            delta.latest_version, version,
            "{what}: the current Iceberg snapshot is not the latest Delta version"
        );
    }
    assert!(seq > 0, "{what}: snapshot {id} names no manifest seq");
    let expected = sorted(delta.rows["deltalake"].clone());
    assert_eq!(
        ice.rows.len(),
        ALL_ICEBERG_READERS.split(',').count(),
        "{what}: readers missing"
    );
    for (reader, rows) in &ice.rows {
        let got = sorted(rows.clone());
        if got != expected {
            let missing: Vec<_> = expected
                .iter()
                .filter(|r| !got.contains(r))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .iter()
                .filter(|r| !expected.contains(r))
                .take(5)
                .collect();
            panic!(
                "{what}: {reader} read snapshot {id} as {} rows, Delta version {version} has {}; missing {missing:?}, extra {extra:?}",
                got.len(),
                expected.len()
            );
        }
    }
    (ice, expected)
}

/// The Delta version of the current snapshot of the metadata file that
/// `version-hint.text` names.
fn iceberg_delta_version(dir: &Path) -> u64 {
    let meta = dir.join("metadata");
    let n = std::fs::read_to_string(meta.join("version-hint.text")).unwrap();
    let md: Value = serde_json::from_slice(
        &std::fs::read(meta.join(format!("v{}.metadata.json", n.trim()))).unwrap(),
    )
    .unwrap();
    let current = &md["current-snapshot-id"];
    let snapshot = md["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["snapshot-id"] == current)
        .unwrap();
    snapshot["summary"]["sluice.delta-version"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn live_delete_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("metadata"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("deletes-"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn every_table_reads_as_iceberg_equal_to_its_delta_version_through_ddl_kills_and_time_travel() {
    let (seed, mut rng) = seeded_rng(0x1ceb_e7a1);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, price DECIMAL(10,2), born DATETIME(6));",
    );
    let value = |id: u64, r: u64| {
        let name = if r % 7 == 0 {
            "NULL".to_string()
        } else {
            format!("'n{} ü'", r % 1000)
        };
        format!(
            "({id}, {name}, {}, {}.{:02}, '2026-02-{:02} 08:{:02}:00.{:06}')",
            r % 500,
            r % 10_000,
            r % 100,
            1 + r % 28,
            r % 60,
            r % 1_000_000
        )
    };
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"16KiB\"\npurge_threshold = 0.3\n\n[iceberg]\nenabled = true\n".into();
    let mut live: Vec<u64> = (1..=3000).collect();
    let rows: Vec<String> = live.iter().map(|id| value(*id, rng(1_000_000))).collect();
    db.sql(&format!(
        "INSERT INTO shop.items VALUES {};",
        rows.join(", ")
    ));
    sluice.run_until_caught_up_ok();

    let server = db.namespace().to_server("shop");
    let changelog: PathBuf = lake.path().join(server.as_ref()).join("items");
    let current: PathBuf = lake
        .path()
        .join("_current")
        .join(server.as_ref())
        .join("items");
    let mut columns = vec!["id", "name", "qty", "price", "born"];
    let cdc = ["_op", "_seq"];
    let with_cdc = |columns: &[&'static str]| -> Vec<&'static str> {
        columns.iter().chain(cdc.iter()).copied().collect()
    };
    // A current table's rows carry the `_seq` of their last change.
    let with_seq = |columns: &[&'static str]| -> Vec<&'static str> {
        columns.iter().chain(["_seq"].iter()).copied().collect()
    };

    let mut next_id = 3001u64;
    let mut older: Vec<(i64, i64)> = Vec::new();
    for round in 0..6 {
        let mut sql = String::from("BEGIN;\n");
        for _ in 0..150 {
            let id = live[rng(live.len() as u64) as usize];
            match rng(10) {
                0..=4 => {
                    // After round 4 qty is a string.
                    let qty = if round < 5 {
                        format!("qty + {}", 1 + rng(50))
                    } else {
                        format!("'v{}'", 1 + rng(50))
                    };
                    sql += &format!(
                        "UPDATE shop.items SET qty = {qty}, name = IF(name IS NULL, 'back', NULL) WHERE id = {id};\n"
                    )
                }
                5..=6 => {
                    sql += &format!("DELETE FROM shop.items WHERE id = {id};\n");
                    live.retain(|x| *x != id);
                }
                _ => {
                    sql += &format!(
                        "INSERT INTO shop.items (id, name, qty, price, born) VALUES {};\n",
                        value(next_id, rng(1_000_000))
                    );
                    live.push(next_id);
                    next_id += 1;
                }
            }
        }
        sql += "COMMIT;\n";
        match round {
            // An added column, a promotion Iceberg allows (INT to BIGINT,
            // the same field id), and one it does not (BIGINT to a string:
            // a new field id).
            1 => {
                sql += "ALTER TABLE shop.items ADD COLUMN note VARCHAR(20) DEFAULT 'x';\nUPDATE shop.items SET note = 'y' WHERE id % 5 = 0;\n";
                columns.push("note");
            }
            2 => sql += "ALTER TABLE shop.items MODIFY qty BIGINT;\n",
            4 => sql += "ALTER TABLE shop.items MODIFY qty VARCHAR(30);\nUPDATE shop.items SET qty = CONCAT(qty, 'q') WHERE id % 3 = 0;\n",
            _ => {}
        }
        db.sql(&sql);
        if round == 3 {
            // A kill after a Delta commit, before its Iceberg commit (the
            // manifests and the manifest list are written): the Iceberg
            // side is behind until the next start's commits repair it.
            sluice.env = vec![("SLUICE_TEST_ABORT_BEFORE_ICEBERG_COMMIT".into(), "1".into())];
            let out = sluice.run_until_caught_up();
            assert!(!out.status.success(), "the Iceberg hook did not abort");
            sluice.env.clear();
            let latest = delta_commits(&changelog).len() as u64 - 1;
            assert!(
                iceberg_delta_version(&changelog) < latest,
                "the kill did not leave the changelog's Iceberg side behind Delta version {latest}"
            );
            // Nothing new to commit: the start catches the Iceberg side up.
            sluice.run_until_caught_up_ok();
            assert_eq!(iceberg_delta_version(&changelog), latest);
            db.sql("UPDATE shop.items SET price = price + 1 WHERE id % 11 = 0;");
        }
        sluice.run_until_caught_up_ok();

        let what = format!("round {round} (seed {seed:#x})");
        let (log, _) = assert_iceberg_is_delta(
            &format!("shop.items changelog, {what}"),
            &changelog,
            &with_cdc(&columns),
            None,
        );
        let (cur, rows) = assert_iceberg_is_delta(
            &format!("shop.items current, {what}"),
            &current,
            &with_seq(&columns),
            None,
        );
        // The current table is the server's table.
        let source =
            sorted(db.query_rows(&format!("SELECT {} FROM shop.items", columns.join(", "))));
        assert_eq!(rows.len(), source.len(), "{what}: current rows");
        assert_eq!(
            log.schema
                .iter()
                .filter(|c| columns.contains(&c.as_str()))
                .count(),
            columns.len(),
            "{what}: {:?}",
            log.schema
        );
        // Time travel: the snapshot of an earlier round still reads as its
        // Delta version (before the type change Iceberg cannot promote: a
        // snapshot from before it reads that column through the name
        // mapping's new id, as the README says).
        if round == 3 {
            for (log_id, cur_id) in older.clone() {
                assert_iceberg_is_delta(
                    &format!("changelog snapshot {log_id}, {what}"),
                    &changelog,
                    &with_cdc(&columns),
                    Some(log_id),
                );
                assert_iceberg_is_delta(
                    &format!("current snapshot {cur_id}, {what}"),
                    &current,
                    &with_seq(&columns),
                    Some(cur_id),
                );
            }
        }
        if round == 5 {
            let (log_id, cur_id) = older[4];
            assert_iceberg_is_delta(
                &format!("changelog snapshot {log_id} after the type change"),
                &changelog,
                &with_cdc(&columns),
                Some(log_id),
            );
            assert_iceberg_is_delta(
                &format!("current snapshot {cur_id} after the type change"),
                &current,
                &with_seq(&columns),
                Some(cur_id),
            );
        }
        older.push((log.current, cur.current));
        if round == 0 {
            assert!(
                live_delete_files(&current) > 0,
                "{what}: the fold's deletion vectors became no position delete file"
            );
        }
    }
}

/// One long run: every checkpoint's and fold's Delta commit is followed by
/// its own snapshot made from the one before (no rebuild from the log), the
/// manifests of many commits are merged, and the newest and older snapshots
/// read as their Delta versions.
#[test]
fn a_long_run_follows_every_delta_version_with_its_own_snapshot() {
    let (seed, mut rng) = seeded_rng(0x1ceb_0002);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v BIGINT, s VARCHAR(20));",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "100ms".into();
    sluice.extra = "[current]\nenabled = true\nrefresh = \"300ms\"\ntarget_file_size = \"4KiB\"\npurge_threshold = 0.5\n\n[iceberg]\nenabled = true\n".into();
    db.sql(&format!(
        "INSERT INTO shop.t VALUES {};",
        (1..=500)
            .map(|i| format!("({i}, {i}, 's{i}')"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut run = sluice.spawn_run(false);
    let server = db.namespace().to_server("shop");
    let changelog = lake.path().join(server.as_ref()).join("t");
    let current = lake.path().join("_current").join(server.as_ref()).join("t");
    let mut next = 501;
    // Enough checkpoints that the changelog's manifests are merged.
    let versions_of = |dir: &Path| {
        if dir.join("_delta_log").exists() {
            delta_commits(dir).len()
        } else {
            0
        }
    };
    while versions_of(&changelog) < spec_merge_at() + 8 {
        let mut sql = String::new();
        for _ in 0..5 {
            match rng(3) {
                0 => {
                    sql += &format!("INSERT INTO shop.t VALUES ({next}, {}, 'n');\n", rng(1000));
                    next += 1;
                }
                1 => {
                    sql += &format!(
                        "UPDATE shop.t SET v = v + 1 WHERE id = {};\n",
                        1 + rng(next)
                    )
                }
                _ => sql += &format!("DELETE FROM shop.t WHERE id = {};\n", 1 + rng(next)),
            }
        }
        db.sql(&sql);
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(
            run.try_wait().is_none(),
            "sluice exited: {}",
            std::fs::read_to_string(&run.log).unwrap_or_default()
        );
    }
    let status = run.terminate(std::time::Duration::from_secs(60));
    assert!(status.success(), "sluice run: {status:?}");
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(
        !log.contains("Iceberg metadata of the table is behind"),
        "an Iceberg commit failed (seed {seed:#x}):\n{log}"
    );

    for (name, dir, columns) in [
        ("changelog", &changelog, vec!["id", "v", "s", "_op", "_seq"]),
        ("current", &current, vec!["id", "v", "s", "_seq"]),
    ] {
        let (ice, _) = assert_iceberg_is_delta(&format!("shop.t {name}"), dir, &columns, None);
        // Each Delta version of the run has its own snapshot (the first
        // one of the process is built whole; the rest follow it).
        let versions: Vec<u64> = ice.snapshots.iter().map(|s| s.1).collect();
        let latest = delta_commits(dir).len() as u64 - 1;
        let expected: Vec<u64> = (latest + 1 - versions.len() as u64..=latest).collect();
        assert_eq!(
            versions, expected,
            "shop.t {name}: snapshots by Delta version"
        );
        assert!(
            ice.manifests as usize <= spec_merge_at() + 2,
            "shop.t {name}: {} manifests in the current snapshot",
            ice.manifests
        );
        // Older snapshots of the same run read as their Delta versions.
        for back in [2, versions.len() / 2] {
            let (id, _, _) =
                ice.snapshots[ice.snapshots.len() - 1 - back.min(ice.snapshots.len() - 1)];
            assert_iceberg_is_delta(
                &format!("shop.t {name} snapshot {id}"),
                dir,
                &columns,
                Some(id),
            );
        }
    }
    let (_, rows) =
        assert_iceberg_is_delta("shop.t current", &current, &["id", "v", "s", "_seq"], None);
    assert_eq!(
        rows.len(),
        db.query_rows("SELECT id FROM shop.t").len(),
        "the current table is the server's"
    );
}

/// `MERGE_AT` of src/table/iceberg: manifests beyond it are merged.
fn spec_merge_at() -> usize {
    32
}
