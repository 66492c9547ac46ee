//! The DDL-aware schema history against a real MariaDB: a lagging replay
//! through many schema changes, point-in-time lookups, a crash between a DDL
//! and its checkpoint, a lost state dir, and the way out of a DDL sluice
//! cannot read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::*;
use arrow::datatypes::DataType;
use serde_json::Value;

/// A row with its file's column names and schema version.
struct NamedRow {
    row: Row,
    names: Vec<String>,
    schema_version: u64,
}

fn named_rows(lake: &Lake, table: &str) -> Vec<NamedRow> {
    let versions: BTreeMap<String, u64> = lake
        .manifests
        .iter()
        .flat_map(|m| m["files"].as_array().cloned().unwrap_or_default())
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["schema_version"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut out = Vec::new();
    for f in lake.files_of(table) {
        let names: Vec<String> = f
            .schema
            .fields()
            .iter()
            .map(|x| x.name().clone())
            .take_while(|n| n != "_op")
            .collect();
        for b in &f.batches {
            for row in batch_rows(b, f.manifest_seq) {
                out.push(NamedRow {
                    row,
                    names: names.clone(),
                    schema_version: versions[&f.path],
                });
            }
        }
    }
    out.sort_by_key(|r| r.row.seq);
    out
}

fn value<'a>(r: &'a NamedRow, name: &str) -> Option<&'a str> {
    let i = r.names.iter().position(|n| n == name)?;
    r.row.values[i].as_deref()
}

/// Replays by the `id` column, keeping each row's values by name.
fn replay_by_name(rows: &[NamedRow]) -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    let mut state = BTreeMap::new();
    for r in rows {
        let as_map = |values: &[Option<String>]| -> BTreeMap<String, Option<String>> {
            r.names
                .iter()
                .cloned()
                .zip(values.iter().cloned())
                .collect()
        };
        match r.row.op.as_str() {
            "insert" | "snapshot" => {
                state.insert(value(r, "id").unwrap().to_string(), as_map(&r.row.values));
            }
            "update" => {
                let before = r.row.before.as_ref().expect("update has a before image");
                state.remove(
                    before[r.names.iter().position(|n| n == "id").unwrap()]
                        .as_deref()
                        .unwrap(),
                );
                state.insert(value(r, "id").unwrap().to_string(), as_map(&r.row.values));
            }
            "delete" => {
                state.remove(value(r, "id").unwrap());
            }
            "truncate" => state.clear(),
            other => panic!("unexpected _op {other}"),
        }
    }
    state
}

/// The source table as `id → {column → value}` for the given columns.
fn source_by_name(
    db: &MariaDb,
    table: &str,
    columns: &[&str],
) -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    db.query_rows(&format!("SELECT {} FROM {table}", columns.join(", ")))
        .into_iter()
        .map(|row| {
            let id = row[0].clone().unwrap();
            (id, columns.iter().map(|c| c.to_string()).zip(row).collect())
        })
        .collect()
}

fn history_json(sluice: &Sluice, table: &str) -> Vec<Value> {
    let out = sluice.run_args(&["schema", "history"], &[table, "--json"]);
    assert!(
        out.status.success(),
        "schema history failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn column_names(version: &Value) -> Vec<String> {
    version["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

const LAGGING_SCRIPT: &str = r#"
CREATE DATABASE shop CHARACTER SET utf8mb4;
CREATE DATABASE other;
CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20), qty INT) DEFAULT CHARSET=latin1;
INSERT INTO shop.items VALUES (1, 'a€', 1), (2, 'b', 2);
CREATE TABLE IF NOT EXISTS shop.items (x INT);
CREATE TABLE shop.tags LIKE shop.items;
INSERT INTO shop.tags VALUES (10, 't', 1);
/* two columns at once */ ALTER TABLE shop.items ADD COLUMN price DECIMAL(8,2) AFTER name, ADD COLUMN flag TINYINT FIRST;
INSERT INTO shop.items (id, name, price, qty, flag) VALUES (3, 'c', 1.50, 3, 1);
UPDATE shop.items SET price = 9.99 WHERE id = 1;
ALTER TABLE shop.items DROP COLUMN qty, MODIFY name VARCHAR(40) NOT NULL;
INSERT INTO shop.items (id, name, price, flag) VALUES (4, 'dddd', 2.00, 0);
ALTER   TABLE `shop`.`items`
   CHANGE COLUMN name title VARCHAR(40),   RENAME COLUMN price TO cost;
INSERT INTO shop.items (id, title, cost, flag) VALUES (5, 'five', 5.00, 0);
ALTER TABLE shop.items CONVERT TO CHARACTER SET utf8mb4;
INSERT INTO shop.items (id, title, cost, flag) VALUES (6, '😀 漢字', 6.00, 0);
ALTER TABLE shop.items ADD COLUMN state ENUM('new','old') DEFAULT 'new';
INSERT INTO shop.items (id, title, state) VALUES (7, 'seven', 'old');
ALTER TABLE shop.items MODIFY state ENUM('new','old','gone') DEFAULT 'new';
UPDATE shop.items SET state = 'gone' WHERE id = 7;
UPDATE shop.items SET flag = 0 WHERE flag IS NULL;
ALTER TABLE shop.items DROP PRIMARY KEY, ADD PRIMARY KEY (id, flag);
DELETE FROM shop.items WHERE id = 2;
ALTER TABLE shop.items DROP PRIMARY KEY, ADD PRIMARY KEY (id);
RENAME TABLE shop.items TO shop.goods, shop.tags TO shop.labels;
INSERT INTO shop.goods (id, title, flag) VALUES (8, 'eight', 1);
TRUNCATE shop.labels;
INSERT INTO shop.labels VALUES (11, 'l', 2);
CREATE TABLE shop.tmp1 (id INT PRIMARY KEY);
CREATE TABLE shop.tmp2 (id INT PRIMARY KEY);
INSERT INTO shop.tmp1 VALUES (1);
INSERT INTO shop.tmp2 VALUES (2);
DROP TABLE shop.tmp1, shop.tmp2;
GRANT SELECT ON shop.* TO 'repl'@'%';
CREATE VIEW shop.v AS SELECT 1 AS one;
CREATE TABLE other.x (a INT);
ALTER TABLE other.x ADD b INT;
INSERT INTO other.x VALUES (1, 2);
ALTER TABLE shop.goods ALGORITHM=INPLACE, ADD COLUMN note TEXT;
UPDATE shop.goods SET note = CONCAT('n', id);
ALTER TABLE shop.labels MODIFY qty BIGINT;
UPDATE shop.labels SET qty = qty + 1;
"#;

const GOODS_COLUMNS: [&str; 6] = ["id", "flag", "title", "cost", "state", "note"];

/// The server's shape of every `shop` table after each statement:
/// `(binlog end position, table → [(column, Arrow type)])`.
type ServerShapes = Vec<((String, u64), BTreeMap<String, Vec<(String, DataType)>>)>;

/// Runs `script` one statement at a time and reads information_schema.COLUMNS
/// after each, with the binlog position it holds from.
fn run_recording_server_shapes(db: &MariaDb, script: &str) -> ServerShapes {
    let mut shapes = Vec::new();
    for statement in script.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        db.sql(&format!("{statement};"));
        let mut tables: BTreeMap<String, Vec<(String, DataType)>> = BTreeMap::new();
        for row in db.query_rows(
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'shop' ORDER BY TABLE_NAME, ORDINAL_POSITION",
        ) {
            let [table, column, ty] = [&row[0], &row[1], &row[2]].map(|v| v.clone().unwrap());
            tables
                .entry(format!("shop.{table}"))
                .or_default()
                .push((column, arrow_type_of(&ty)));
        }
        shapes.push((db.binlog_head(), tables));
    }
    shapes
}

/// The README's type table, for the types the scripts here use.
fn arrow_type_of(column_type: &str) -> DataType {
    let t = column_type.to_ascii_lowercase();
    let base = t.split(['(', ' ']).next().unwrap();
    let unsigned = t.contains("unsigned");
    match (base, unsigned) {
        ("tinyint" | "smallint" | "mediumint" | "int", _) | ("bigint", false) => DataType::Int64,
        ("bigint", true) => DataType::Decimal128(20, 0),
        ("decimal", _) => {
            let args = &t[t.find('(').unwrap() + 1..t.find(')').unwrap()];
            let (p, s) = args.split_once(',').unwrap();
            DataType::Decimal128(p.parse().unwrap(), s.parse().unwrap())
        }
        ("char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum", _) => {
            DataType::Utf8
        }
        ("inet4" | "inet6" | "uuid", _) => DataType::Utf8,
        _ => panic!("no Arrow type in this test for {column_type}"),
    }
}

/// The server's shape of `table` for a row at `at`: the last one read at
/// or before that position (a DDL's own marker rows sit at its start,
/// before its shape).
fn server_shape_at(
    shapes: &ServerShapes,
    table: &str,
    at: &(String, u64),
) -> Vec<(String, DataType)> {
    shapes
        .iter()
        .rev()
        .find(|(pos, _)| pos <= at)
        .and_then(|(_, tables)| tables.get(table).cloned())
        .unwrap_or_else(|| panic!("{table} has no server shape at {at:?}"))
}

fn lagging_replay(metadata: &str) {
    let Some(db) = MariaDb::start_private(&[&format!("--binlog-row-metadata={metadata}")]) else {
        return;
    };
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    // The start position is taken before the first CREATE: everything is replayed.
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    sluice.include = vec![r"shop\..*".into()];
    let shapes = run_recording_server_shapes(&db, LAGGING_SCRIPT);
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    // Every file's columns, in order and with the Arrow type of the type
    // table, are the server's shape where its rows were written.
    for table in [
        "shop.items",
        "shop.goods",
        "shop.tags",
        "shop.labels",
        "shop.tmp1",
    ] {
        for f in lake.files_of(table) {
            let got: Vec<(String, DataType)> = f
                .schema
                .fields()
                .iter()
                .take_while(|x| x.name() != "_op")
                .map(|x| (x.name().clone(), logical_type(x.data_type())))
                .collect();
            for b in &f.batches {
                for r in batch_rows(b, f.manifest_seq) {
                    let at = (r.binlog_file.clone(), r.binlog_pos as u64);
                    let want = server_shape_at(&shapes, table, &at);
                    assert_eq!(
                        got, want,
                        "{table}: file {} (_seq {}, {at:?}) against information_schema.COLUMNS there",
                        f.path, r.seq
                    );
                }
            }
        }
        if metadata == "FULL" {
            let history = history_json(&sluice, table);
            assert!(
                history.iter().all(|v| !v["statement"].as_str().unwrap_or("").contains("derived")),
                "{table}: with FULL metadata the history and the binlog agree, no shape is derived: {history:?}"
            );
        }
    }

    // Values under the names of their time.
    let items = named_rows(&lake, "shop.items");
    let find = |id: &str, op: &str| {
        items
            .iter()
            .find(|r| value(r, "id") == Some(id) && r.row.op == op)
            .unwrap_or_else(|| panic!("{op} of {id}"))
    };
    let r1 = find("1", "insert");
    assert_eq!(
        (value(r1, "name"), value(r1, "qty")),
        (Some("a€"), Some("1"))
    );
    assert!(!r1.names.contains(&"price".to_string()));
    let r3 = find("3", "insert");
    assert_eq!(r3.names, ["flag", "id", "name", "price", "qty"]);
    assert_eq!(
        (value(r3, "price"), value(r3, "flag")),
        (Some("1.50"), Some("1"))
    );
    let r5 = find("5", "insert");
    assert_eq!(r5.names, ["flag", "id", "title", "cost"]);
    assert_eq!(value(r5, "title"), Some("five"));
    assert_eq!(value(find("6", "insert"), "title"), Some("😀 漢字"));
    assert_eq!(value(find("7", "update"), "state"), Some("gone"));

    // The replayed final tables equal the source.
    let goods = named_rows(&lake, "shop.goods");
    let expected = source_by_name(&db, "shop.goods", &GOODS_COLUMNS);
    let actual: BTreeMap<_, _> = replay_by_name(&goods)
        .into_iter()
        .map(|(k, row)| {
            (
                k,
                row.into_iter()
                    .filter(|(n, _)| GOODS_COLUMNS.contains(&n.as_str()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(actual, expected, "shop.goods replayed");
    // Rows written before the rename stay in the old name's folder.
    let items_state = replay_by_name(&items);
    assert_eq!(
        items_state.keys().cloned().collect::<Vec<_>>(),
        ["1", "3", "4", "5", "6", "7"]
    );

    let labels = named_rows(&lake, "shop.labels");
    assert_eq!(
        labels.iter().map(|r| r.row.op.as_str()).collect::<Vec<_>>(),
        ["truncate", "insert", "update"]
    );
    assert!(
        labels[0].row.values.iter().all(|v| v.is_none()),
        "a truncate marker has null table columns"
    );
    let labels_state = replay_by_name(&labels);
    assert_eq!(labels_state.len(), 1);
    assert_eq!(labels_state["11"]["qty"].as_deref(), Some("3"));
    // INT to BIGINT changes no lake type: the files before and after the
    // MODIFY, and the schema history's versions, all say Int64.
    let label_files = lake.files_of("shop.labels");
    let qty_types: BTreeMap<u64, DataType> = lake
        .manifests
        .iter()
        .flat_map(|m| m["files"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["table"] == "shop.labels")
        .map(|f| {
            let file = label_files.iter().find(|x| x.path == f["path"]).unwrap();
            let qty = file.schema.field_with_name("qty").unwrap();
            (
                f["schema_version"].as_u64().unwrap(),
                qty.data_type().clone(),
            )
        })
        .collect();
    let history = history_json(&sluice, "shop.labels");
    let qty = |v: &Value| {
        v["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "qty")
            .map(|c| {
                (
                    c["mysql_type"].as_str().unwrap().to_ascii_lowercase(),
                    c["arrow_type"].as_str().unwrap().to_string(),
                )
            })
    };
    let (before, after) = (
        qty(&history[history.len() - 2]).unwrap(),
        qty(history.last().unwrap()).unwrap(),
    );
    assert!(
        before.0.starts_with("int") && after.0.starts_with("bigint"),
        "{before:?} then {after:?}"
    );
    assert_eq!((before.1.as_str(), after.1.as_str()), ("Int64", "Int64"));
    assert!(
        qty_types.len() >= 2 && qty_types.values().all(|t| *t == DataType::Int64),
        "shop.labels.qty by schema version: {qty_types:?}"
    );
    for t in ["shop.tmp1", "shop.tmp2"] {
        let ops: Vec<String> = named_rows(&lake, t).into_iter().map(|r| r.row.op).collect();
        assert_eq!(
            ops,
            ["insert", "truncate"],
            "{t}: DROP TABLE writes a truncate marker"
        );
    }
    assert!(
        !lake.tables().iter().any(|t| t.starts_with("other.")),
        "other.* is not captured"
    );

    // A DDL statement is a transaction of its own: the marker's _tx_seq is unique.
    let marker = &labels[0].row;
    let all: Vec<i64> = lake
        .tables()
        .iter()
        .flat_map(|t| lake.rows(t))
        .filter(|r| r.tx_seq == marker.tx_seq)
        .map(|r| r.seq)
        .collect();
    assert_eq!(all, vec![marker.seq]);

    // The manifests record the DDL, with the rename pairs.
    let ddl: Vec<&Value> = lake
        .manifests
        .iter()
        .flat_map(|m| m["ddl"].as_array().unwrap().iter())
        .collect();
    let rename = ddl
        .iter()
        .find(|d| d["statement"].as_str().unwrap().starts_with("RENAME TABLE"))
        .expect("rename in a manifest");
    assert_eq!(
        rename["renamed"],
        serde_json::json!([{"from": "shop.items", "to": "shop.goods"}, {"from": "shop.tags", "to": "shop.labels"}])
    );
    assert!(!ddl
        .iter()
        .any(|d| d["statement"].as_str().unwrap().contains("GRANT")));

    // `schema history` lists every version of items in order with its statement.
    let history = history_json(&sluice, "shop.items");
    let statements: Vec<&str> = history
        .iter()
        .map(|v| v["statement"].as_str().unwrap_or(""))
        .collect();
    let ddl_versions: Vec<&str> = statements
        .iter()
        .copied()
        .filter(|s| !s.is_empty())
        .collect();
    assert!(ddl_versions.len() >= 10, "{statements:?}");
    assert!(ddl_versions[0].starts_with("CREATE TABLE shop.items"));
    assert!(ddl_versions.last().unwrap().starts_with("RENAME TABLE"));
    assert_eq!(history.last().unwrap()["dropped"], true);
    let positions: Vec<(String, u64)> = history
        .iter()
        .map(|v| {
            (
                v["position"]["file"].as_str().unwrap().to_string(),
                v["position"]["pos"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] <= w[1]),
        "versions in stream order: {positions:?}"
    );

    // `schema show --at` between two ALTERs answers with the shape of that moment.
    let v = |n: u64| history.iter().find(|v| v["version"] == n).unwrap();
    let with_price = history
        .iter()
        .find(|v| column_names(v).contains(&"price".to_string()))
        .unwrap();
    let next = v(with_price["version"].as_u64().unwrap() + 1);
    let (file, pos) = (
        with_price["position"]["file"].as_str().unwrap(),
        with_price["position"]["pos"].as_u64().unwrap(),
    );
    let next_pos = next["position"]["pos"].as_u64().unwrap();
    assert_eq!(
        next["position"]["file"].as_str().unwrap(),
        file,
        "both ALTERs in one binlog file"
    );
    let show = |at: String| -> Value {
        let out = sluice.run_args(&["schema", "show"], &["shop.items", "--at", &at, "--json"]);
        assert!(
            out.status.success(),
            "schema show failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(
        column_names(&show(format!("{file}:{}", (pos + next_pos) / 2))),
        ["flag", "id", "name", "price", "qty"]
    );
    assert_eq!(
        show(format!("{file}:{pos}"))["version"],
        with_price["version"]
    );
    assert_eq!(
        column_names(&show(format!("{file}:{next_pos}"))),
        ["flag", "id", "name", "price"]
    );
    let human = sluice.run_args(
        &["schema", "show"],
        &["shop.items", "--at", &format!("{file}:{}", next_pos - 1)],
    );
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("price") && text.contains("qty") && text.contains("Decimal128(8, 2)"),
        "{text}"
    );
}

#[test]
fn lagging_replay_follows_every_schema_change_with_minimal_metadata() {
    lagging_replay("MINIMAL");
}

#[test]
fn lagging_replay_follows_every_schema_change_with_full_metadata() {
    lagging_replay("FULL");
}

#[test]
fn crash_after_ddl_before_checkpoint_leaves_no_phantom_version() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.c (id INT PRIMARY KEY, v INT); INSERT INTO shop.c VALUES (1, 1);");
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    sluice.start = "\"earliest\"".into();
    sluice.run_until_caught_up_ok();
    let manifests_before = manifest_paths(lake_dir.path()).len();
    let committed = history_json(&sluice, "shop.c");
    let n = committed.len() as i64;
    assert_eq!(
        committed.last().unwrap()["statement"],
        "CREATE TABLE shop.c (id INT PRIMARY KEY, v INT)"
    );

    // A long interval: the ALTER is applied but no checkpoint follows it.
    sluice.interval = "10m".into();
    let mut running = sluice.spawn_run(false);
    std::thread::sleep(Duration::from_millis(1500));
    db.sql("ALTER TABLE shop.c ADD COLUMN w INT");
    let store = state_dir.path().join("schema_history.sqlite");
    let applied = wait_until(Duration::from_secs(30), || {
        rusqlite::Connection::open(&store)
            .and_then(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM table_versions WHERE table_name = 'c' AND version = ?1",
                    [n + 1],
                    |r| r.get::<_, i64>(0),
                )
            })
            .map(|n| n == 1)
            .unwrap_or(false)
    });
    assert!(
        applied,
        "the ALTER reached the history store; log:\n{}",
        running.log_tail(30)
    );
    assert_eq!(
        manifest_paths(lake_dir.path()).len(),
        manifests_before,
        "no checkpoint after the DDL yet"
    );
    running.kill();

    // Only committed versions are visible, before and after the restart.
    let before = history_json(&sluice, "shop.c");
    assert_eq!(before, committed, "the uncommitted version is not shown");

    db.sql("INSERT INTO shop.c VALUES (2, 2, 2);");
    sluice.interval = "10s".into();
    sluice.run_until_caught_up_ok();
    let history = history_json(&sluice, "shop.c");
    assert_eq!(
        history.len() as i64,
        n + 1,
        "exactly one new version: {history:?}"
    );
    assert_eq!(&history[..committed.len()], &committed[..]);
    let alter = history.last().unwrap();
    assert_eq!(alter["version"].as_i64().unwrap(), n + 1);
    assert_eq!(alter["statement"], "ALTER TABLE shop.c ADD COLUMN w INT");
    let lake = Lake::read(lake_dir.path());
    let rows = named_rows(&lake, "shop.c");
    let last = rows.last().unwrap();
    assert_eq!(
        (last.schema_version as i64, value(last, "w")),
        (n + 1, Some("2"))
    );
    assert_eq!(
        rows.iter().filter(|r| value(r, "id") == Some("2")).count(),
        1,
        "no duplicate row"
    );
}

#[test]
fn lost_state_dir_is_rebuilt_from_the_lake() {
    let db = MariaDb::start();
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    db.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, a VARCHAR(10));
         INSERT INTO shop.t VALUES (1, 'x');
         ALTER TABLE shop.t ADD COLUMN b INT;
         INSERT INTO shop.t VALUES (2, 'y', 2);",
    );
    sluice.run_until_caught_up_ok();
    let before = history_json(&sluice, "shop.t");
    std::fs::remove_dir_all(state_dir.path()).unwrap();

    // While the state dir is gone, more DDL and rows arrive.
    db.sql("ALTER TABLE shop.t DROP COLUMN a; INSERT INTO shop.t VALUES (3, 3); UPDATE shop.t SET b = id * 10;");
    sluice.run_until_caught_up_ok();
    let after = history_json(&sluice, "shop.t");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the old versions came back from the lake"
    );
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(column_names(after.last().unwrap()), ["id", "b"]);

    let lake = Lake::read(lake_dir.path());
    let state = replay_by_name(&named_rows(&lake, "shop.t"));
    let expected = source_by_name(&db, "shop.t", &["id", "b"]);
    assert_eq!(state, expected);
}

#[test]
fn unreadable_ddl_stops_with_the_way_out_and_resync_continues() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.u (id INT PRIMARY KEY);");
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    db.sql("INSERT INTO shop.u VALUES (1);");
    sluice.run_until_caught_up_ok();
    let manifests = manifest_paths(lake_dir.path());
    db.sql(
        "ALTER TABLE shop.u ADD COLUMN p POINT REF_SYSTEM_ID=4326;
         INSERT INTO shop.u VALUES (2, ST_GeomFromText('POINT(1 2)'));",
    );
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert_eq!(
        manifest_paths(lake_dir.path()),
        manifests,
        "the failed run committed nothing"
    );
    for needle in [
        "shop.u",
        "REF_SYSTEM_ID",
        "sluice schema resync",
        "binlog.000001:",
    ] {
        assert!(line.contains(needle), "`{needle}` in: {line}");
    }

    let resync = sluice.run_args(&["schema", "resync"], &["shop.u"]);
    assert!(
        resync.status.success(),
        "resync failed: {}",
        String::from_utf8_lossy(&resync.stderr)
    );
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    let rows = named_rows(&lake, "shop.u");
    let r2 = rows
        .iter()
        .find(|r| value(r, "id") == Some("2"))
        .expect("row 2 after the resync");
    let hex = db
        .query_value("SELECT HEX(p) FROM shop.u WHERE id = 2")
        .unwrap();
    assert_eq!(value(r2, "p"), Some(hex.as_str()));
    let history = history_json(&sluice, "shop.u");
    assert_eq!(column_names(history.last().unwrap()), ["id", "p"]);
    assert!(history.last().unwrap()["statement"]
        .as_str()
        .unwrap()
        .contains("REF_SYSTEM_ID"));
}

fn resync_ok(sluice: &Sluice, args: &[&str]) -> String {
    let out = sluice.run_args(&["schema", "resync"], args);
    assert!(
        out.status.success(),
        "resync {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The position an unreadable-DDL stop names (`… at binlog.000001:1234: …`).
fn stop_position(line: &str) -> String {
    let at = line.find("binlog.").expect("the stop names its position");
    line[at..]
        .split(|c: char| c == ':' || c.is_whitespace())
        .take(2)
        .collect::<Vec<_>>()
        .join(":")
}

#[test]
fn resync_keeps_a_shape_per_stop_and_takes_one_for_a_table_gone_from_the_server() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.u (id INT PRIMARY KEY); CREATE TABLE shop.g (id INT PRIMARY KEY);");
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    db.sql("INSERT INTO shop.u VALUES (1); INSERT INTO shop.g VALUES (1);");
    sluice.run_until_caught_up_ok();
    // Two unreadable statements on one table before any checkpoint, and one
    // on a table dropped later.
    db.sql(
        "ALTER TABLE shop.u ADD COLUMN p POINT REF_SYSTEM_ID=4326;
         INSERT INTO shop.u VALUES (2, ST_GeomFromText('POINT(1 2)'));
         ALTER TABLE shop.u ADD COLUMN q POINT REF_SYSTEM_ID=4326;
         INSERT INTO shop.u VALUES (3, ST_GeomFromText('POINT(3 4)'), ST_GeomFromText('POINT(5 6)'));
         ALTER TABLE shop.g ADD COLUMN p POINT REF_SYSTEM_ID=4326;
         INSERT INTO shop.g VALUES (2, ST_GeomFromText('POINT(7 8)'));",
    );
    let g_hex = db
        .query_value("SELECT HEX(p) FROM shop.g WHERE id = 2")
        .unwrap();
    db.sql("DROP TABLE shop.g;");

    // First stop: the server's shape now has q too, which is wrong here; the
    // user gives the shape after the first statement.
    let first = stop_position(&assert_definite_error(&sluice.run_until_caught_up()));
    let said = resync_ok(
        &sluice,
        &[
            "shop.u",
            "--shape",
            "CREATE TABLE u (id INT NOT NULL PRIMARY KEY, p POINT)",
        ],
    );
    assert!(
        said.contains(&first),
        "recorded at the stop {first}: {said}"
    );

    // Second stop on the same table: recorded there, the first kept.
    let second = stop_position(&assert_definite_error(&sluice.run_until_caught_up()));
    assert_ne!(first, second);
    let said = resync_ok(&sluice, &["shop.u"]);
    assert!(
        said.contains(&second),
        "recorded at the stop {second}: {said}"
    );

    // Third stop: a table the server no longer has.
    let line = assert_definite_error(&sluice.run_until_caught_up());
    assert!(line.contains("shop.g"), "{line}");
    let third = stop_position(&line);
    let out = sluice.run_args(&["schema", "resync"], &["shop.g"]);
    let refused = assert_definite_error(&out);
    assert!(
        refused.contains("--shape"),
        "the way out is named: {refused}"
    );
    let said = resync_ok(
        &sluice,
        &[
            "shop.g",
            "--shape",
            "CREATE TABLE g (id INT NOT NULL PRIMARY KEY, p POINT) DEFAULT CHARSET=latin1",
        ],
    );
    assert!(said.contains(&third), "{said}");
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    let rows = named_rows(&lake, "shop.u");
    let hex = |id: i32, col: &str| {
        db.query_value(&format!("SELECT HEX({col}) FROM shop.u WHERE id = {id}"))
    };
    let r2 = rows
        .iter()
        .find(|r| value(r, "id") == Some("2"))
        .expect("row 2");
    assert_eq!(value(r2, "p"), hex(2, "p").as_deref());
    let r3 = rows
        .iter()
        .find(|r| value(r, "id") == Some("3"))
        .expect("row 3");
    assert_eq!(value(r3, "p"), hex(3, "p").as_deref());
    assert_eq!(value(r3, "q"), hex(3, "q").as_deref());
    let g = named_rows(&lake, "shop.g");
    let g2 = g
        .iter()
        .find(|r| value(r, "id") == Some("2"))
        .expect("shop.g row 2");
    assert_eq!(value(g2, "p"), Some(g_hex.as_str()));
    let history = history_json(&sluice, "shop.u");
    let shapes: Vec<Vec<String>> = history.iter().map(column_names).collect();
    assert_eq!(shapes, [vec!["id"], vec!["id", "p"], vec!["id", "p", "q"]]);
}

/// The row key a recorded shape gives (`TableSchema::fold_key`): the primary
/// key's columns, else the first unique key (in the recorded key order) that
/// is no prefix and no long hash key and has only NOT NULL columns.
fn recorded_key(version: &Value) -> BTreeSet<String> {
    let columns = version["columns"].as_array().unwrap();
    let pk: BTreeSet<String> = columns
        .iter()
        .filter(|c| c["primary_key"] == true)
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    if !pk.is_empty() {
        return pk;
    }
    let not_null = |name: &str| {
        columns
            .iter()
            .any(|c| c["name"].as_str() == Some(name) && c["nullable"] == false)
    };
    version["unique_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| {
            k["prefix"] == false
                && k["hash"] == false
                && k["columns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|c| not_null(c.as_str().unwrap()))
        })
        .map(|k| {
            k["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Table shapes with unique keys, each a CREATE TABLE and ALTER TABLEs.
const KEYED_SHAPES: &[&[&str]] = &[
    &["CREATE TABLE {t} (id INT, code VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (code))"],
    &["CREATE TABLE {t} (a INT, b INT NOT NULL, c INT NOT NULL, n VARCHAR(20) NOT NULL, \
       x TEXT NOT NULL, UNIQUE KEY ua (a), UNIQUE KEY un (n(5)), UNIQUE KEY ub (c, b), UNIQUE (b), \
       UNIQUE (x), UNIQUE (b))"],
    &["CREATE TABLE {t} (id INT PRIMARY KEY, u INT NOT NULL UNIQUE)"],
    &[
        "CREATE TABLE {t} (a INT NOT NULL, b INT NOT NULL, PRIMARY KEY (b, a), UNIQUE (a))",
        "ALTER TABLE {t} DROP PRIMARY KEY",
    ],
    &[
        "CREATE TABLE {t} (a INT NOT NULL, b INT NOT NULL, c INT NOT NULL, d INT, \
         UNIQUE KEY u (a, b), UNIQUE KEY v (c))",
        "ALTER TABLE {t} MODIFY a INT NULL",
        "ALTER TABLE {t} ADD UNIQUE (d), ADD CONSTRAINT w UNIQUE KEY (b), ADD e INT NOT NULL UNIQUE",
        "ALTER TABLE {t} RENAME INDEX v TO v2, CHANGE c cc INT NOT NULL, RENAME COLUMN b TO bb",
    ],
    &["CREATE TABLE {t} (code INT UNIQUE, v INT)"],
    &["CREATE TABLE {t} (a VARCHAR(768) NOT NULL, b VARCHAR(769) NOT NULL, c INT NOT NULL, \
       UNIQUE (b), UNIQUE (c) USING HASH, UNIQUE (a)) CHARSET utf8mb4"],
    &[
        "CREATE TABLE {t} (a INT NOT NULL, b INT NOT NULL, c INT, UNIQUE KEY k (a), UNIQUE KEY k2 (b))",
        "ALTER TABLE {t} DROP INDEX k",
        "ALTER TABLE {t} DROP COLUMN b",
    ],
    &[
        "CREATE TABLE {t} (a INT NOT NULL, b INT, UNIQUE KEY k (b))",
        "ALTER TABLE {t} ADD PRIMARY KEY (a)",
        "ALTER TABLE {t} MODIFY b INT NOT NULL, DROP PRIMARY KEY",
    ],
    // Primary keys in an order of their own.
    &["CREATE TABLE {t} (a INT, b INT, v TEXT, PRIMARY KEY (b, a))"],
    &[
        "CREATE TABLE {t} (a INT NOT NULL, b INT NOT NULL, c INT NOT NULL, PRIMARY KEY (c, a))",
        "ALTER TABLE {t} CHANGE a aa BIGINT NOT NULL FIRST, RENAME COLUMN c TO cc",
        "ALTER TABLE {t} ADD d INT NOT NULL FIRST",
    ],
    &[
        "CREATE TABLE {t} (a INT, b INT NOT NULL, c INT)",
        "ALTER TABLE {t} ADD PRIMARY KEY (c, b, a)",
        "ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (b, c)",
    ],
];

/// A table read from information_schema at start has the unique keys and
/// the primary key's order of the same table built from its statements,
/// and both key it as the server does (the columns it shows as PRI, the
/// primary key in its SEQ_IN_INDEX order).
#[test]
fn bootstrapped_unique_keys_equal_those_of_the_statements() {
    let db = MariaDb::start();
    let script = |database: &str| {
        KEYED_SHAPES
            .iter()
            .enumerate()
            .flat_map(|(i, statements)| {
                statements
                    .iter()
                    .map(move |s| s.replace("{t}", &format!("{database}.k{i}")) + ";\n")
            })
            .collect::<String>()
    };
    db.sql(&format!(
        "CREATE DATABASE shop; CREATE DATABASE other;\n{}",
        script("shop")
    ));
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    sluice.include = vec![r"shop\..*".into(), r"other\..*".into()];
    // shop's tables are read from information_schema at start (the initial
    // snapshot commits them) ...
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.run_until_caught_up_ok();
    // ... other's are built from the statements in the binlog.
    db.sql(&script("other"));
    sluice.run_until_caught_up_ok();
    for (i, statements) in KEYED_SHAPES.iter().enumerate() {
        let bootstrapped = history_json(&sluice, &format!("shop.k{i}"));
        let parsed = history_json(&sluice, &format!("other.k{i}"));
        let (boot, ddl) = (bootstrapped.last().unwrap(), parsed.last().unwrap());
        assert!(boot["statement"].is_null(), "shop.k{i} is bootstrapped");
        let shape = |v: &Value| {
            let columns: Vec<(Value, Value, Value, Value)> = v["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].clone(),
                        c["nullable"].clone(),
                        c["primary_key"].clone(),
                        c["key_position"].clone(),
                    )
                })
                .collect();
            (columns, v["unique_keys"].clone())
        };
        assert_eq!(shape(boot), shape(ddl), "k{i}: {statements:?}");
        // The key is the one the server shows as PRI (its primary key, or
        // the unique key it uses in its place).
        let pri: BTreeSet<String> = db
            .query_rows(&format!(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{}' \
                 AND TABLE_NAME = 'k{i}' AND COLUMN_KEY = 'PRI'",
                db.namespace().to_server("shop")
            ))
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
        assert_eq!(recorded_key(boot), pri, "k{i}: {statements:?}");
        let server_order: Vec<String> = db
            .query_rows(&format!(
                "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '{}' \
                 AND TABLE_NAME = 'k{i}' AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
                db.namespace().to_server("shop")
            ))
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
        let mut recorded_order: Vec<(u64, String)> = boot["columns"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| Some((c["key_position"].as_u64()?, c["name"].as_str()?.to_owned())))
            .collect();
        recorded_order.sort();
        let recorded_order: Vec<String> = recorded_order.into_iter().map(|(_, n)| n).collect();
        assert_eq!(recorded_order, server_order, "k{i}: {statements:?}");
    }
}
