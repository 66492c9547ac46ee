//! Every MySQL type family of DESIGN.md, with edge values, goes through the
//! binlog into Parquet and reads back as what SELECT returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use arrow::datatypes::{DataType, Field, TimeUnit};

const CREATE: &str = r#"
CREATE DATABASE shop;
CREATE TABLE shop.types (
  id   INT NOT NULL PRIMARY KEY,
  ti   TINYINT,            tiu TINYINT UNSIGNED,
  si   SMALLINT,           siu SMALLINT UNSIGNED,
  mi   MEDIUMINT,          miu MEDIUMINT UNSIGNED,
  i    INT,                iu  INT UNSIGNED,
  bi   BIGINT,             biu BIGINT UNSIGNED,
  flag BOOLEAN,
  d65  DECIMAL(65,30),     d10 DECIMAL(10,2),
  f    FLOAT,              dbl DOUBLE,
  dt   DATETIME(6),        dt0 DATETIME,
  ts   TIMESTAMP(6) NULL DEFAULT NULL,
  tm   TIME(6),            tm0 TIME,
  dte  DATE,               yr  YEAR,
  b1   BIT(1),             b64 BIT(64),
  en   ENUM('small','medium','large'),
  st   SET('a','b','c'),
  ch   CHAR(5) CHARACTER SET utf8mb4,
  vc   VARCHAR(100) CHARACTER SET utf8mb4,
  l1   VARCHAR(50) CHARACTER SET latin1,
  l1t  TEXT CHARACTER SET latin1,
  bn   BINARY(8),          vb  VARBINARY(20),
  bl   BLOB,               js  JSON,
  pt   POINT
) ENGINE=InnoDB;
CREATE TABLE shop.other (id INT PRIMARY KEY, v INT);
"#;

/// A TIME as the lake holds it: signed microseconds.
macro_rules! time_micros {
    ($c:literal) => {
        concat!("CAST(TIME_TO_SEC(", $c, ") * 1000000 AS SIGNED)")
    };
}

/// (column, SELECT expression rendering like `mysql_text`, Arrow type of DESIGN.md)
fn columns() -> Vec<(&'static str, &'static str, DataType)> {
    use DataType::*;
    let us = TimeUnit::Microsecond;
    vec![
        ("id", "id", Int64),
        ("ti", "ti", Int64),
        ("tiu", "tiu", Int64),
        ("si", "si", Int64),
        ("siu", "siu", Int64),
        ("mi", "mi", Int64),
        ("miu", "miu", Int64),
        ("i", "i", Int64),
        ("iu", "iu", Int64),
        ("bi", "bi", Int64),
        ("biu", "biu", Decimal128(20, 0)),
        ("flag", "flag", Int64),
        ("d65", "d65", Utf8),
        ("d10", "d10", Decimal128(10, 2)),
        ("f", "f", Float32),
        ("dbl", "dbl", Float64),
        (
            "dt",
            "NULLIF(dt, '0000-00-00 00:00:00')",
            Timestamp(us, None),
        ),
        (
            "dt0",
            "CAST(NULLIF(dt0, '0000-00-00 00:00:00') AS DATETIME(6))",
            Timestamp(us, None),
        ),
        (
            "ts",
            "NULLIF(ts, '0000-00-00 00:00:00')",
            Timestamp(us, Some("UTC".into())),
        ),
        ("tm", time_micros!("tm"), Int64),
        ("tm0", time_micros!("tm0"), Int64),
        ("dte", "NULLIF(dte, '0000-00-00')", Date32),
        ("yr", "yr+0", Int16),
        ("b1", "b1+0", Int64),
        ("b64", "b64+0", Decimal128(20, 0)),
        ("en", "en", Utf8),
        ("st", "st", List(Arc::new(Field::new("item", Utf8, true)))),
        ("ch", "ch", Utf8),
        ("vc", "vc", Utf8),
        ("l1", "l1", Utf8),
        ("l1t", "l1t", Utf8),
        ("bn", "HEX(bn)", Binary),
        ("vb", "HEX(vb)", Binary),
        ("bl", "HEX(bl)", Binary),
        ("js", "js", Utf8),
        ("pt", "HEX(pt)", Binary),
    ]
}

const FLOAT_COLS: [(&str, usize); 2] = [("f", 6), ("dbl", 17)];

const D65_MAX: &str = "99999999999999999999999999999999999.999999999999999999999999999999";

fn insert_script() -> String {
    let ones = "1".repeat(64);
    format!(
        r#"
SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION';
BEGIN;
-- 1: minimum values
INSERT INTO shop.types VALUES (1,
  -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0,
  -{D65_MAX}, -99999999.99, -3.40282e38, -1.7976931348623157e308,
  '1000-01-01 00:00:00.000000', '1000-01-01 00:00:00', '1970-01-01 00:00:01.000000',
  '-838:59:59.000000', '-838:59:59', '1000-01-01', 1901,
  b'0', b'0', 'small', '', '', '', '', '',
  x'', x'', x'', '{{}}', ST_GeomFromText('POINT(0 0)'));
-- 2: maximum values
INSERT INTO shop.types VALUES (2,
  127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
  9223372036854775807, 18446744073709551615, 1,
  {D65_MAX}, 99999999.99, 3.40282e38, 1.7976931348623157e308,
  '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59', '2038-01-19 03:14:07.999999',
  '838:59:59.000000', '838:59:59', '9999-12-31', 2155,
  b'1', b'{ones}', 'large', 'a,b,c', 'abc', '😀 漢字 ünïcödé 🇩🇪', '€ àéîõü ß ÿ', 'Ça coûte 5 € — naïve „quoted“',
  x'00410042', x'00FF00', REPEAT(x'00FF', 5000),
  '{{"a": [1, 2.5, "x"], "b": null, "c": {{"d": true}}}}', ST_GeomFromText('POINT(1 2)'));
-- 3: NULL in every nullable column
INSERT INTO shop.types (id) VALUES (3);
-- 4: fractions, small values, TIME over 24 h, YEAR 0
INSERT INTO shop.types VALUES (4,
  -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, 1,
  0.000000000000000000000000000001, -12.34, 1.5, 0.1,
  '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56', '2024-02-29 12:34:56.000001',
  '100:00:00.5', '-00:00:01', '2024-02-29', 0,
  b'1', b'1010', 'medium', 'a,c', 'x y', '中文テキスト', 'Ä', REPEAT('é', 300),
  x'FF', x'', x'DEADBEEF', '[1, 2, 3]', ST_GeomFromText('POINT(-1.5 1e10)'));
-- 5: zero dates (null in the lake), a tiny negative TIME
INSERT INTO shop.types VALUES (5,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  -1.5, 0.00, -0.25, -2.5e-300,
  '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00',
  '-00:00:00.000001', '00:00:00', '0000-00-00', 2000,
  b'0', b'1', 'small', 'b', 'z', 'plain', 'plain', 'plain',
  x'0000000000000001', x'01', x'00', '"str"', ST_GeomFromText('POINT(3 4)'));
COMMIT;
-- 6: a transaction of its own
INSERT INTO shop.types (id, vc, d10, tm) VALUES (6, 'six', 6.00, '-12:00:00.25');
INSERT INTO shop.other VALUES (1, 1);
"#
    )
}

fn update_script() -> String {
    r#"
SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION';
-- every column of row 4 changes
UPDATE shop.types SET
  ti = 100, tiu = 200, si = 30000, siu = 60000, mi = 8000000, miu = 16000000,
  i = 2000000000, iu = 4000000000, bi = 9000000000000000000, biu = 18000000000000000000, flag = 0,
  d65 = -12345678901234567890.123456789012345678901234567890, d10 = 42.42, f = -7.25, dbl = 6.02214076e23,
  dt = '1999-12-31 23:59:59.999999', dt0 = '1999-12-31 23:59:59', ts = '2001-09-09 01:46:40.5',
  tm = '-100:00:00.000001', tm0 = '23:59:59', dte = '1999-12-31', yr = 1999,
  b1 = b'0', b64 = b'1000000000000000000000000000000000000000000000000000000000000000',
  en = 'large', st = '', ch = 'chg', vc = 'changed ✓', l1 = 'ñ', l1t = 'Œuvre',
  bn = x'0102030405060708', vb = x'ABCDEF', bl = x'', js = '{"k": "v"}',
  pt = ST_GeomFromText('POINT(9 9)')
WHERE id = 4;
-- every column of row 1 changes, from minimum to NULL
UPDATE shop.types SET
  ti = NULL, tiu = NULL, si = NULL, siu = NULL, mi = NULL, miu = NULL, i = NULL, iu = NULL,
  bi = NULL, biu = NULL, flag = NULL, d65 = NULL, d10 = NULL, f = NULL, dbl = NULL,
  dt = NULL, dt0 = NULL, ts = NULL, tm = NULL, tm0 = NULL, dte = NULL, yr = NULL,
  b1 = NULL, b64 = NULL, en = NULL, st = NULL, ch = NULL, vc = NULL, l1 = NULL, l1t = NULL,
  bn = NULL, vb = NULL, bl = NULL, js = NULL, pt = NULL
WHERE id = 1;
-- the primary key changes
UPDATE shop.types SET id = 50, vc = 'moved' WHERE id = 5;
"#
    .to_owned()
}

/// Floats compared at the precision the client prints them with.
fn normalize_floats(row: &mut [Option<String>], names: &[&str]) {
    for (col, digits) in FLOAT_COLS {
        let i = names.iter().position(|n| *n == col).unwrap();
        if let Some(v) = &row[i] {
            let x: f64 = v
                .parse()
                .unwrap_or_else(|_| panic!("{col} = {v:?} is not a number"));
            row[i] = Some(format!("{:.*e}", digits - 1, x));
        }
    }
}

/// The top-level columns of a table's first file as the parquet crate
/// prints the file's own schema: `name → "INT64"`, `"FIXED_LEN_BYTE_ARRAY
/// (9) (DECIMAL(20,0))"`, `"BYTE_ARRAY (STRING)"`, … (no Arrow in between).
fn parquet_types(lake: &Lake, table: &str) -> BTreeMap<String, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = &lake.files_of(table)[0];
    let reader =
        SerializedFileReader::new(std::fs::File::open(lake.root.join(&file.path)).unwrap())
            .unwrap();
    let mut text = Vec::new();
    parquet::schema::printer::print_schema(&mut text, reader.metadata().file_metadata().schema());
    String::from_utf8(text)
        .unwrap()
        .lines()
        // `  OPTIONAL INT64 ti;` or `  OPTIONAL BYTE_ARRAY d65 (STRING);`
        .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && l.ends_with(';'))
        .filter_map(|l| {
            let mut words = l.trim().trim_end_matches(';').splitn(3, ' ');
            let (_repetition, physical, rest) = (words.next()?, words.next()?, words.next()?);
            // `(9) name (DECIMAL(20,0))`: the name is the first word not in parentheses.
            let mut parts = rest.split(' ');
            let mut physical = physical.to_string();
            let mut name = parts.next()?;
            if name.starts_with('(') {
                physical = format!("{physical} {name}");
                name = parts.next()?;
            }
            let logical: Vec<&str> = parts.collect();
            let t = if logical.is_empty() {
                physical
            } else {
                format!("{physical} {}", logical.join(" "))
            };
            Some((name.to_string(), t))
        })
        .collect()
}

fn select_list() -> String {
    columns()
        .iter()
        .map(|(_, e, _)| *e)
        .collect::<Vec<_>>()
        .join(", ")
}

fn source_rows(db: &MariaDb, where_: &str) -> BTreeMap<Vec<String>, Vec<Option<String>>> {
    let names: Vec<&str> = columns().iter().map(|c| c.0).collect();
    let mut map = db.table_map(
        &format!("SELECT {} FROM shop.types {where_}", select_list()),
        &[0],
    );
    for row in map.values_mut() {
        normalize_floats(row, &names);
    }
    map
}

#[test]
fn every_type_reads_back_as_select_returns_it() {
    every_type_reads_back(Backend::Local);
}

/// The same on S3 (moto_server), with the endpoint and region given as
/// `[sink]` keys rather than environment variables.
#[test]
fn every_type_reads_back_as_select_returns_it_on_s3() {
    every_type_reads_back(Backend::S3);
}

fn every_type_reads_back(backend: Backend) {
    let db = MariaDb::start();
    db.sql(CREATE);
    let test_lake = TestLake::new(backend);
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = test_lake.sluice(&db, state_dir.path());
    test_lake.use_sink_keys(&mut sluice);
    let (start_file, start_pos) = db.binlog_head();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;

    db.sql(&insert_script());
    let before_update = source_rows(&db, "WHERE id IN (1, 4, 5)");
    db.sql(&update_script());
    let before_delete = source_rows(&db, "WHERE id IN (2, 3)");
    db.sql("DELETE FROM shop.types WHERE id IN (2, 3)");
    let expected = source_rows(&db, "");
    assert_eq!(expected.len(), 4);

    let out = sluice.run_until_caught_up_ok();
    eprintln!(
        "sluice stderr tail:\n{}",
        tail(&String::from_utf8_lossy(&out.stderr), 10)
    );
    let status = sluice.status_json();
    assert!(
        status.to_string().contains("shop.types"),
        "status --json names the committed tables: {status}"
    );
    let lake = test_lake.read();
    let finished = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(
        lake.tables().into_iter().collect::<Vec<_>>(),
        vec!["shop.other".to_string(), "shop.types".to_string()]
    );

    // The Parquet schema: table columns in table order with the types of DESIGN.md,
    // then the CDC columns.
    let schema = lake.schema("shop.types");
    let names: Vec<&str> = columns().iter().map(|c| c.0).collect();
    let mut expected_names: Vec<&str> = names.clone();
    expected_names.extend(CDC_COLUMNS);
    let actual_names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(actual_names, expected_names);
    let mut wrong = Vec::new();
    for (name, _, want) in columns() {
        let got = schema.field_with_name(name).unwrap().data_type();
        if logical_type(got) != want {
            wrong.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    let cdc_types = [
        ("_op", DataType::Utf8),
        ("_seq", DataType::Int64),
        ("_tx_seq", DataType::Int64),
        ("_binlog_file", DataType::Utf8),
        ("_binlog_pos", DataType::Int64),
        ("_gtid", DataType::Utf8),
        (
            "_ts",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        ),
        ("_sql", DataType::Utf8),
    ];
    for (name, want) in cdc_types {
        let got = schema.field_with_name(name).unwrap().data_type();
        if logical_type(got) != want {
            wrong.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    match schema.field_with_name("_before").unwrap().data_type() {
        DataType::Struct(children) => {
            let child_names: Vec<&str> = children.iter().map(|f| f.name().as_str()).collect();
            assert_eq!(child_names, names, "_before has the table's columns");
            for (child, (name, _, want)) in children.iter().zip(columns()) {
                if logical_type(child.data_type()) != want || !child.is_nullable() {
                    wrong.push(format!(
                        "_before.{name}: got {:?} nullable={}, want {want:?} nullable",
                        child.data_type(),
                        child.is_nullable()
                    ));
                }
            }
        }
        other => wrong.push(format!("_before: got {other:?}, want a struct")),
    }
    assert!(schema.field_with_name("_before").unwrap().is_nullable());
    assert!(
        wrong.is_empty(),
        "Arrow types differ from DESIGN.md:\n{}",
        wrong.join("\n")
    );

    // What a reader that ignores the embedded Arrow schema sees (Delta
    // readers, DuckDB, Spark): Parquet's own types, no unsigned integer,
    // no TIME, no decimal above 38 digits.
    let parquet = parquet_types(&lake, "shop.types");
    eprintln!("Parquet types: {parquet:?}");
    for (column, want) in [
        ("ti", "INT64"),
        ("iu", "INT64"),
        ("biu", "FIXED_LEN_BYTE_ARRAY (9) (DECIMAL(20,0))"),
        ("b64", "FIXED_LEN_BYTE_ARRAY (9) (DECIMAL(20,0))"),
        ("b1", "INT64"),
        ("tm", "INT64"),
        ("d65", "BYTE_ARRAY (STRING)"),
        ("yr", "INT32 (INTEGER(16,true))"),
        ("dt", "INT64 (TIMESTAMP(MICROS,false))"),
        ("ts", "INT64 (TIMESTAMP(MICROS,true))"),
    ] {
        assert_eq!(
            parquet.get(column).map(String::as_str),
            Some(want),
            "Parquet type of {column}: {parquet:?}"
        );
    }
    assert!(
        !parquet
            .values()
            .any(|t| t.contains(",false))") && t.contains("INTEGER")),
        "no unsigned integer in the Parquet schema: {parquet:?}"
    );

    // The change rows.
    let mut rows = lake.rows("shop.types");
    for r in rows.iter_mut() {
        normalize_floats(&mut r.values, &names);
        if let Some(b) = r.before.as_mut() {
            normalize_floats(b, &names);
        }
    }
    let counts = op_counts(&rows);
    assert_eq!(counts.get("insert"), Some(&6), "{counts:?}");
    assert_eq!(counts.get("update"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("delete"), Some(&2), "{counts:?}");
    assert_eq!(rows.len(), 11, "{counts:?}");

    // Replay equals SELECT, for every column.
    let replayed = replay(&rows, &[0]);
    eprintln!("lake row 4: {:?}", replayed.get(&vec!["4".to_string()]));
    assert_same_table("shop.types", &expected, &replayed);

    // Inserts and deletes carry no before image; updates carry the pre-update row.
    for r in &rows {
        match r.op.as_str() {
            "insert" | "delete" => assert!(
                r.before.is_none(),
                "{} row _seq {} has a _before",
                r.op,
                r.seq
            ),
            _ => {}
        }
    }
    let updates: Vec<&Row> = rows.iter().filter(|r| r.op == "update").collect();
    let befores: Vec<Vec<Option<String>>> =
        updates.iter().map(|r| r.before.clone().unwrap()).collect();
    for id in ["4", "1", "5"] {
        let want = &before_update[&vec![id.to_string()]];
        let got = befores
            .iter()
            .find(|b| b[0].as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no update with _before.id = {id}"));
        assert_same_table(
            &format!("_before of the update of id {id}"),
            &BTreeMap::from([(vec![id.to_string()], want.clone())]),
            &BTreeMap::from([(vec![id.to_string()], got.clone())]),
        );
    }
    let deletes: BTreeMap<Vec<String>, Vec<Option<String>>> = rows
        .iter()
        .filter(|r| r.op == "delete")
        .map(|r| (key_of(&r.values, &[0]), r.values.clone()))
        .collect();
    assert_same_table("deleted rows", &before_delete, &deletes);

    // CDC columns.
    // MariaDB: domain-server-seq. MySQL: uuid:n, or null with gtid_mode OFF.
    let mariadb = db.is_mariadb();
    let gtid = if mariadb {
        regex::Regex::new(r"^0-1-\d+$").unwrap()
    } else {
        regex::Regex::new(r"^[0-9a-f-]{36}:\d+$").unwrap()
    };
    for r in &rows {
        assert_eq!(r.binlog_file, start_file);
        assert!(
            r.binlog_pos as u64 >= start_pos,
            "_binlog_pos {} before start {start_pos}",
            r.binlog_pos
        );
        match r.gtid.as_deref() {
            Some(g) => assert!(gtid.is_match(g), "_gtid {g:?} is not {gtid}"),
            None => assert!(!mariadb, "_gtid is null on MariaDB (_seq {})", r.seq),
        }
        let ts = r.ts_ms.expect("_ts is set");
        assert!(
            ts >= started - 2_000 && ts <= finished + 2_000 && ts % 1000 == 0,
            "_ts {ts} not a whole second between {started} and {finished}"
        );
    }
    // The first five inserts are one transaction; every later statement its own.
    let inserts: Vec<&Row> = rows.iter().filter(|r| r.op == "insert").collect();
    assert!(inserts[..5]
        .iter()
        .all(|r| r.tx_seq == inserts[0].tx_seq && r.gtid == inserts[0].gtid));
    assert!(inserts[5].tx_seq > inserts[0].tx_seq);
    let mut tx: Vec<i64> = rows[5..].iter().map(|r| r.tx_seq).collect();
    tx.dedup();
    assert_eq!(
        tx.len(),
        5,
        "row 6, three updates and the delete are five transactions"
    );
    let deleted: Vec<&Row> = rows.iter().filter(|r| r.op == "delete").collect();
    assert_eq!(deleted[0].tx_seq, deleted[1].tx_seq);
}

/// A row read by the initial snapshot equals the binlog row of the same
/// value, for every type: the same values are snapshotted in `shop.types`
/// and then copied by `INSERT … SELECT` into a twin table through the binlog.
#[test]
fn a_snapshot_row_equals_the_binlog_row_of_the_same_value() {
    let db = MariaDb::start();
    db.sql(CREATE);
    db.sql(&insert_script());
    db.sql(&update_script());
    db.sql("CREATE TABLE shop.twin LIKE shop.types");
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    sluice.snapshot = "chunk_rows = 2".into();
    sluice.run_until_caught_up_ok();
    db.sql("INSERT INTO shop.twin SELECT * FROM shop.types");
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(lake_dir.path());
    let snapshot: Vec<Row> = lake.rows("shop.types");
    let copied: Vec<Row> = lake.rows("shop.twin");
    assert!(
        snapshot.iter().all(|r| r.op == "snapshot"),
        "{:?}",
        op_counts(&snapshot)
    );
    assert!(
        copied.iter().all(|r| r.op == "insert"),
        "{:?}",
        op_counts(&copied)
    );
    let by_id = |rows: &[Row]| -> BTreeMap<String, Vec<Option<String>>> {
        rows.iter()
            .map(|r| (r.values[0].clone().unwrap(), r.values.clone()))
            .collect()
    };
    let (snapshot, copied) = (by_id(&snapshot), by_id(&copied));
    assert_eq!(snapshot.len(), source_rows(&db, "").len());
    assert_eq!(
        snapshot, copied,
        "snapshot rows and binlog rows of the same values"
    );
    assert_eq!(
        lake.schema("shop.types").fields().len(),
        lake.schema("shop.twin").fields().len()
    );
    let names: Vec<&str> = columns().iter().map(|c| c.0).collect();
    let mut replayed = lake.replay("shop.types", &[0]);
    for row in replayed.values_mut() {
        normalize_floats(row, &names);
    }
    assert_same_table("shop.types", &source_rows(&db, ""), &replayed);
    let zero_dates = lake.manifests.last().unwrap()["zero_dates"]
        .as_u64()
        .unwrap();
    assert!(
        zero_dates > 0 && zero_dates % 2 == 0,
        "zero dates counted for both tables: {zero_dates}"
    );
}

/// MariaDB's INET4, INET6 and UUID read as the text SELECT prints, whether
/// the shape comes from information_schema (a table that exists at start)
/// or from CREATE/ALTER in the binlog, with and without FULL row metadata
/// (which shows these columns as BINARY(4)/BINARY(16)).
fn address_types_read_as_select_prints_them(metadata: &str) {
    let Some(db) = MariaDb::start_private(&[&format!("--binlog-row-metadata={metadata}")]) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.before_start (id INT PRIMARY KEY, a INET4, b INET6, c UUID);",
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    const VALUES: &str = "(1, '1.2.3.4', '::ffff:1.2.3.4', '123e4567-e89b-12d3-a456-426614174000'),
        (2, '0.0.0.0', '::', '00000000-0000-0000-0000-000000000000'),
        (3, '255.255.255.255', '2001:db8::1', '6ccd780c-baba-1026-9564-5b8c656024db'),
        (4, '10.0.0.0', '::1.2.3.4', 'ffffffff-ffff-ffff-ffff-ffffffffffff'),
        (5, '192.168.0.1', '1:0:0:2:0:0:3:4', UUID()),
        (6, NULL, 'fe80::', NULL),
        (7, '8.8.8.8', '2001:db8:0:0:1::', '01234567-89ab-7def-8123-456789abcdef')";
    db.sql(&format!(
        "INSERT INTO shop.before_start VALUES {VALUES};
         CREATE TABLE shop.after_start (id INT PRIMARY KEY, a INET4, b inet6 NOT NULL DEFAULT '::');
         ALTER TABLE shop.after_start ADD c UUID AFTER a;
         INSERT INTO shop.after_start (id, a, c, b) SELECT id, a, c, COALESCE(b, '::') FROM shop.before_start;
         UPDATE shop.after_start SET b = '::2', c = UUID() WHERE id = 2;
         DELETE FROM shop.before_start WHERE id = 3;"
    ));
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    for table in ["shop.before_start", "shop.after_start"] {
        let expected = db.table_map(&format!("SELECT id, a, c, b FROM {table}"), &[0]);
        let schema = lake.schema(table);
        for name in ["a", "b", "c"] {
            assert_eq!(
                logical_type(schema.field_with_name(name).unwrap().data_type()),
                DataType::Utf8,
                "{table}.{name}"
            );
        }
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let (a, b, c) = (
            names.iter().position(|n| *n == "a").unwrap(),
            names.iter().position(|n| *n == "b").unwrap(),
            names.iter().position(|n| *n == "c").unwrap(),
        );
        let replayed: BTreeMap<Vec<String>, Vec<Option<String>>> = lake
            .replay(table, &[0])
            .into_iter()
            .map(|(k, v)| {
                (
                    k,
                    vec![v[0].clone(), v[a].clone(), v[c].clone(), v[b].clone()],
                )
            })
            .collect();
        assert!(expected.len() >= 6, "{table}: {expected:?}");
        assert_same_table(
            &format!("{table} ({metadata} metadata)"),
            &expected,
            &replayed,
        );
    }
}

#[test]
fn inet_and_uuid_read_as_select_prints_them() {
    address_types_read_as_select_prints_them("MINIMAL");
}

#[test]
fn inet_and_uuid_read_as_select_prints_them_with_full_metadata() {
    address_types_read_as_select_prints_them("FULL");
}
