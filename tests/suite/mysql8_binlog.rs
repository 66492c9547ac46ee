//! MySQL 8.0 binlog files built by hand from the documented formats (no
//! MySQL 8 server runs here) and replayed offline: GTIDs and Previous_gtids,
//! DDL in Query events, TABLE_MAPs with FULL metadata, Rows_query, a
//! zstd-compressed transaction, partial JSON updates and binary JSON of
//! every kind, as the lake shows them.

use std::fs;
use std::path::Path;

use crate::binlog_builder::jsonb as jb;
use crate::binlog_builder::*;
use crate::common::*;
use sluice::decode::event_type as et;

const UUID: [u8; 16] = [
    0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62,
];
const UUID_TEXT: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
/// 2024-02-29 13:05:09 UTC.
const TS: u32 = 1_709_211_909;
const SERVER_ID: u32 = 8036;
const ITEMS: u64 = 90;
const DOCS: u64 = 91;

const CREATE_ITEMS: &str = "CREATE TABLE items (id INT NOT NULL, qty INT UNSIGNED, \
    name VARCHAR(40), price DECIMAL(10,2), created DATETIME(6), PRIMARY KEY (id))";
const INSERT_ITEMS: &str = "INSERT INTO items VALUES (1, 4294967295, 'héllo', 12.5, \
    '2024-02-29 13:05:09.12'), (2, 0, NULL, -0.01, '1999-12-31 23:59:59.999999'), \
    (-2147483648, 7, '', 99999999.99, NULL)";
const UPDATE_ITEMS: &str = "UPDATE items SET qty = 5, name = 'world' WHERE id = 1";
const INSERT_DOCS: &str = "INSERT INTO docs VALUES (1, @scalars, 'a'), (2, @opaques, NULL), \
    (3, '\"top\"', 'c'), (18446744073709551615, NULL, 'd')";
const DELETE_ITEM: &str = "DELETE FROM items WHERE id = 2";
const UPDATE_DOCS: &str = "UPDATE docs SET doc = JSON_REMOVE(JSON_SET(doc, '$.str', 'new', \
    '$.i16', 7, '$.added', JSON_ARRAY(1, 2)), '$.n'), note = 'b' WHERE id IN (1, 3)";

/// `shop.items`, whose shape also comes from its CREATE TABLE.
fn items() -> Vec<Column> {
    vec![
        Column::new("id", ty::LONG, &[]).key(),
        Column::new("qty", ty::LONG, &[]).unsigned(),
        Column::new("name", ty::VARCHAR, &[160, 0]),
        Column::new("price", ty::NEWDECIMAL, &[10, 2]),
        Column::new("created", ty::DATETIME2, &[6]),
    ]
}

/// `shop.docs`, known only from the TABLE_MAP's FULL metadata.
fn docs() -> Vec<Column> {
    vec![
        Column::new("id", ty::LONGLONG, &[]).unsigned().key(),
        Column::new("doc", ty::JSON, &[4]),
        Column::new("note", ty::VARCHAR, &[80, 0]),
    ]
}

fn doc(id: u64, doc: Option<Vec<u8>>, note: Option<&str>) -> Cells {
    vec![cell::ubigint(id), doc, note.and_then(cell::varchar)]
}

fn items_map() -> (u8, Vec<u8>) {
    (
        et::TABLE_MAP,
        table_map_full(ITEMS, "shop", "items", &items()),
    )
}

fn docs_map() -> (u8, Vec<u8>) {
    (et::TABLE_MAP, table_map_full(DOCS, "shop", "docs", &docs()))
}

fn item_1() -> Cells {
    vec![
        cell::int(1),
        cell::uint(u32::MAX),
        cell::varchar("héllo"),
        cell::decimal("12.50", 10, 2),
        cell::datetime6(2024, 2, 29, 13, 5, 9, 120_000),
    ]
}

fn item_2() -> Cells {
    vec![
        cell::int(2),
        cell::uint(0),
        None,
        cell::decimal("-0.01", 10, 2),
        cell::datetime6(1999, 12, 31, 23, 59, 59, 999_999),
    ]
}

fn item_3() -> Cells {
    vec![
        cell::int(i32::MIN),
        cell::uint(7),
        cell::varchar(""),
        cell::decimal("99999999.99", 10, 2),
        None,
    ]
}

/// Every scalar type of binary JSON, keys in MySQL's order (shorter first).
fn scalars() -> jb::V {
    jb::object(&[
        ("f", jb::bool(false)),
        ("n", jb::null()),
        ("t", jb::bool(true)),
        ("dbl", jb::f64(1.5)),
        ("i16", jb::i16(-5)),
        ("i32", jb::i32(-100_000)),
        ("i64", jb::i64(-9_007_199_254_740_993)),
        ("str", jb::string("quote\" back\\ tab\t é")),
        ("u16", jb::u16(65_535)),
        ("u32", jb::u32(4_000_000_000)),
        ("u64", jb::u64(u64::MAX)),
        ("int_dbl", jb::f64(3.0)),
    ])
}
const SCALARS_TEXT: &str = r#"{"f": false, "n": null, "t": true, "dbl": 1.5, "i16": -5, "i32": -100000, "i64": -9007199254740993, "str": "quote\" back\\ tab\t é", "u16": 65535, "u32": 4000000000, "u64": 18446744073709551615, "int_dbl": 3.0}"#;

/// Opaque values (DECIMAL, the temporal types, others as base64) and
/// containers, small and large, empty and nested.
fn opaques() -> jb::V {
    jb::array(&[
        json_opaque::decimal("12.50", 10, 2),
        json_opaque::decimal("-0.001", 5, 3),
        json_opaque::datetime(2024, 2, 29, 13, 5, 9, 120_000),
        json_opaque::timestamp(1970, 1, 1, 0, 0, 1, 0),
        json_opaque::date(2024, 2, 29),
        json_opaque::time(true, 838, 59, 59, 0),
        json_opaque::time(false, 12, 34, 56, 789),
        jb::opaque(ty::BLOB, b"hi"),
        jb::opaque(16, &[1]),
        jb::array(&[]),
        jb::object(&[]),
        jb::large_object(&[("k", jb::large_array(&[jb::i32(1), jb::string("x")]))]),
    ])
}
const OPAQUES_TEXT: &str = r#"[12.50, -0.001, "2024-02-29 13:05:09.120000", "1970-01-01 00:00:01.000000", "2024-02-29", "-838:59:59.000000", "12:34:56.000789", "base64:type252:aGk=", "base64:type16:AQ==", [], {}, {"k": [1, "x"]}]"#;

/// The partial update of document 1: what MySQL logs for `UPDATE_DOCS`.
fn doc_1_diffs() -> Vec<u8> {
    const REPLACE: u8 = 0;
    const INSERT: u8 = 1;
    const REMOVE: u8 = 2;
    let mut d = Vec::new();
    jb::diff(REPLACE, "$.str", Some(&jb::string("new")), &mut d);
    jb::diff(REPLACE, "$.i16", Some(&jb::i16(7)), &mut d);
    jb::diff(
        INSERT,
        "$.added",
        Some(&jb::array(&[jb::i16(1), jb::i16(2)])),
        &mut d,
    );
    jb::diff(REMOVE, "$.n", None, &mut d);
    d
}
const DOC_1_AFTER: &str = r#"{"f": false, "t": true, "dbl": 1.5, "i16": 7, "i32": -100000, "i64": -9007199254740993, "str": "new", "u16": 65535, "u32": 4000000000, "u64": 18446744073709551615, "added": [1, 2], "int_dbl": 3.0}"#;

fn gtid(gno: u64, ddl: bool) -> Gtid {
    Gtid {
        uuid: UUID,
        gno,
        ddl,
    }
}

fn begin() -> (u8, Vec<u8>) {
    (et::QUERY, query_body("shop", "BEGIN", None))
}

fn xid(n: u64) -> (u8, Vec<u8>) {
    (et::XID, n.to_le_bytes().to_vec())
}

/// Where events of interest start, to compare with `_binlog_pos`.
struct Positions {
    insert_items: u64,
    update_items: u64,
    /// The write of transaction 5, whose checksum the corrupt test breaks.
    insert_items_event: std::ops::Range<u64>,
    payload: u64,
    partial_update: u64,
    second_file_len: u64,
}

/// `binlog.000001` (closed: it ends with a rotate) and `binlog.000002`
/// (the server's current file) under `dir`: Previous_gtids 1-2, then
/// transactions 3 to 7.
fn write_binlogs(dir: &Path) -> Positions {
    fs::create_dir_all(dir).unwrap();
    let mut f = BinlogFile::mysql8("binlog.000001", SERVER_ID, TS);
    f.event(
        et::MYSQL_PREVIOUS_GTIDS,
        &previous_gtids_body(&[(UUID, &[(1, 3)])]),
    );
    f.transaction(
        &gtid(3, true),
        &[(et::QUERY, query_body("", "CREATE DATABASE shop", Some(11)))],
    );
    f.transaction(
        &gtid(4, true),
        &[(et::QUERY, query_body("shop", CREATE_ITEMS, Some(12)))],
    );
    let at = f.transaction(
        &gtid(5, false),
        &[
            begin(),
            (et::MYSQL_ROWS_QUERY, rows_query_body(INSERT_ITEMS)),
            items_map(),
            (
                et::WRITE_ROWS_V2,
                rows_body(ITEMS, &[item_1(), item_2(), item_3()]),
            ),
            (et::MYSQL_ROWS_QUERY, rows_query_body(UPDATE_ITEMS)),
            items_map(),
            (
                et::UPDATE_ROWS_V2,
                update_body(
                    ITEMS,
                    &[(item_1(), {
                        let mut after = item_1();
                        after[1] = cell::uint(5);
                        after[2] = cell::varchar("world");
                        after
                    })],
                ),
            ),
            xid(13),
        ],
    );
    let positions = (at[3], at[6], at[3]..at[4]);
    f.rotate("binlog.000002");
    fs::write(dir.join(f.name.clone()), f.finish(false)).unwrap();

    let mut f = BinlogFile::mysql8("binlog.000002", SERVER_ID, TS + 60);
    f.event(
        et::MYSQL_PREVIOUS_GTIDS,
        &previous_gtids_body(&[(UUID, &[(1, 6)])]),
    );
    // Transaction 6 compressed: the GTID event stays outside the payload.
    let inner = [
        begin(),
        (et::MYSQL_ROWS_QUERY, rows_query_body(INSERT_DOCS)),
        docs_map(),
        (
            et::WRITE_ROWS_V2,
            rows_body(
                DOCS,
                &[
                    doc(1, cell::json(&scalars()), Some("a")),
                    doc(2, cell::json(&opaques()), None),
                    doc(3, cell::json(&jb::string("top")), Some("c")),
                    doc(u64::MAX, None, Some("d")),
                ],
            ),
        ),
        (et::MYSQL_ROWS_QUERY, rows_query_body(DELETE_ITEM)),
        items_map(),
        (et::DELETE_ROWS_V2, rows_body(ITEMS, &[item_2()])),
        xid(14),
    ];
    let payload = zstd_payload(&inner, f.timestamp, SERVER_ID);
    let payload = f.transaction(&gtid(6, false), &[(et::TRANSACTION_PAYLOAD, payload)])[0];
    // Transaction 7: a partial JSON update (document 1 as diffs, document 3
    // in full) of a table whose JSON column is the first of its kind.
    let at = f.transaction(
        &gtid(7, false),
        &[
            begin(),
            (et::MYSQL_ROWS_QUERY, rows_query_body(UPDATE_DOCS)),
            docs_map(),
            (
                et::PARTIAL_UPDATE_ROWS,
                partial_update_body(
                    DOCS,
                    &[
                        (
                            doc(1, cell::json(&scalars()), Some("a")),
                            0b1,
                            doc(1, cell::json_bytes(&doc_1_diffs()), Some("b")),
                        ),
                        (
                            doc(3, cell::json(&jb::string("top")), Some("c")),
                            0b0,
                            doc(3, cell::json(&jb::object(&[("x", jb::i16(1))])), Some("b")),
                        ),
                    ],
                ),
            ),
            xid(15),
        ],
    );
    let second_file_len = f.pos();
    fs::write(dir.join(f.name.clone()), f.finish(true)).unwrap();
    Positions {
        insert_items: positions.0,
        update_items: positions.1,
        insert_items_event: positions.2,
        payload,
        partial_update: at[3],
        second_file_len,
    }
}

/// sluice over `binlogs` alone: no server, shapes from the binlog.
fn offline(binlogs: &Path, work: &Path) -> Sluice {
    let mut s = Sluice::with_source(
        String::new(),
        "\"earliest\"".into(),
        &work.join("lake"),
        &work.join("state"),
    );
    s.extra_source = format!("binlog_dir = '{}'", binlogs.display());
    s
}

/// `sluice run` to the end of the last file; panics unless it exits 0.
fn replay(s: &Sluice) {
    let out = s.run_args(&["run"], &[]);
    assert!(
        out.status.success(),
        "{}",
        tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
}

fn text(values: &[&str]) -> Vec<Option<String>> {
    values
        .iter()
        .map(|v| (*v != "NULL").then(|| v.to_string()))
        .collect()
}

#[test]
fn a_mysql_8_binlog_replays_offline_into_the_lake() {
    let work = tempfile::tempdir().unwrap();
    let binlogs = work.path().join("binlogs");
    let at = write_binlogs(&binlogs);
    let s = offline(&binlogs, work.path());
    replay(&s);
    let lake = Lake::read(&s.lake);
    let gtid = |n: u64| Some(format!("{UUID_TEXT}:{n}"));

    let items = lake.rows("shop.items");
    let ops: Vec<&str> = items.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["insert", "insert", "insert", "update", "delete"]);
    let row_1 = text(&[
        "1",
        "4294967295",
        "héllo",
        "12.50",
        "2024-02-29 13:05:09.120000",
    ]);
    let row_2 = text(&["2", "0", "NULL", "-0.01", "1999-12-31 23:59:59.999999"]);
    let row_3 = text(&["-2147483648", "7", "", "99999999.99", "NULL"]);
    let row_1_after = text(&["1", "5", "world", "12.50", "2024-02-29 13:05:09.120000"]);
    assert_eq!(items[0].values, row_1);
    assert_eq!(items[1].values, row_2);
    assert_eq!(items[2].values, row_3);
    assert_eq!(items[3].values, row_1_after);
    assert_eq!(items[3].before.as_ref(), Some(&row_1));
    assert_eq!(items[4].values, row_2, "a delete holds the deleted row");
    assert!(items.iter().all(|r| r.op == "update" || r.before.is_none()));
    for r in &items[..3] {
        assert_eq!(
            (r.gtid.clone(), r.sql.as_deref(), r.binlog_file.as_str()),
            (gtid(5), Some(INSERT_ITEMS), "binlog.000001")
        );
        assert_eq!(r.binlog_pos, at.insert_items as i64);
        assert_eq!(r.ts_ms, Some(TS as i64 * 1000));
    }
    assert_eq!(items[3].sql.as_deref(), Some(UPDATE_ITEMS));
    assert_eq!(
        (items[3].gtid.clone(), items[3].binlog_pos),
        (gtid(5), at.update_items as i64)
    );
    assert_eq!(items[3].tx_seq, items[0].tx_seq, "one transaction");
    // Inside the compressed transaction every row sits at the payload event.
    assert_eq!(
        (
            items[4].gtid.clone(),
            items[4].sql.as_deref(),
            items[4].binlog_file.as_str(),
            items[4].binlog_pos
        ),
        (
            gtid(6),
            Some(DELETE_ITEM),
            "binlog.000002",
            at.payload as i64
        )
    );
    assert!(items[4].tx_seq > items[3].tx_seq);

    let docs = lake.rows("shop.docs");
    let ops: Vec<&str> = docs.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(
        ops,
        ["insert", "insert", "insert", "insert", "update", "update"]
    );
    assert_eq!(docs[0].values, text(&["1", SCALARS_TEXT, "a"]));
    assert_eq!(docs[1].values, text(&["2", OPAQUES_TEXT, "NULL"]));
    assert_eq!(docs[2].values, text(&["3", "\"top\"", "c"]));
    assert_eq!(docs[3].values, text(&["18446744073709551615", "NULL", "d"]));
    for r in &docs[..4] {
        assert_eq!(
            (r.gtid.clone(), r.sql.as_deref(), r.binlog_pos),
            (gtid(6), Some(INSERT_DOCS), at.payload as i64)
        );
        assert_eq!(
            r.tx_seq, items[4].tx_seq,
            "the delete is in the same transaction"
        );
    }
    // The partial update rebuilt the whole document from the before image.
    assert_eq!(docs[4].values, text(&["1", DOC_1_AFTER, "b"]));
    assert_eq!(docs[4].before, Some(text(&["1", SCALARS_TEXT, "a"])));
    assert_eq!(docs[5].values, text(&["3", r#"{"x": 1}"#, "b"]));
    assert_eq!(docs[5].before, Some(text(&["3", "\"top\"", "c"])));
    for r in &docs[4..] {
        assert_eq!(
            (r.gtid.clone(), r.sql.as_deref(), r.binlog_pos),
            (gtid(7), Some(UPDATE_DOCS), at.partial_update as i64)
        );
    }

    // Column types from CREATE TABLE (items) and from FULL metadata (docs).
    let types = |table: &str| -> Vec<String> {
        lake.schema(table)
            .fields()
            .iter()
            .take_while(|f| f.name() != "_op")
            .map(|f| format!("{} {}", f.name(), logical_type(f.data_type())))
            .collect()
    };
    assert_eq!(
        types("shop.items"),
        [
            "id Int64",
            "qty Int64",
            "name Utf8",
            "price Decimal128(10, 2)",
            "created Timestamp(µs)"
        ]
    );
    assert_eq!(
        types("shop.docs"),
        ["id Decimal128(20, 0)", "doc Utf8", "note Utf8"]
    );

    let last = lake.manifests.last().unwrap();
    let cursor = &last["cursor"];
    assert_eq!(cursor["gtid"], format!("{UUID_TEXT}:1-7"), "{last}");
    assert_eq!(cursor["file"], "binlog.000002");
    assert_eq!(cursor["pos"], at.second_file_len);
    assert_eq!(last["source"]["flavor"], "mysql");
    assert_eq!(last["source"]["version"], "8.0.36");
    assert_eq!(last["source"]["server_id"], SERVER_ID);
    assert_eq!(last["totals"]["shop.items"], 5);
    assert_eq!(last["totals"]["shop.docs"], 6);

    // A second run has nothing more to read and commits nothing.
    let manifests = lake.manifests.len();
    replay(&s);
    assert_eq!(Lake::read(&s.lake).manifests.len(), manifests);
}

#[test]
fn a_corrupt_checksum_stops_with_the_file_and_position_and_commits_nothing() {
    let work = tempfile::tempdir().unwrap();
    let binlogs = work.path().join("binlogs");
    let at = write_binlogs(&binlogs);
    let path = binlogs.join("binlog.000001");
    let mut bytes = fs::read(&path).unwrap();
    // One bit of a row value, past the rows event's header: only the CRC32 can tell.
    let flip = at.insert_items_event.start as usize + 19 + 14;
    bytes[flip] ^= 0x10;
    fs::write(&path, bytes).unwrap();

    let s = offline(&binlogs, work.path());
    let out = s.run_args(&["run"], &[]);
    let err = assert_definite_error(&out);
    assert!(err.contains("binlog.000001"), "{err}");
    assert!(err.contains("checksum"), "{err}");
    assert!(
        err.contains(&at.insert_items_event.start.to_string()),
        "the error names where the bad event starts: {err}"
    );
    assert!(manifest_paths(&s.lake).is_empty(), "nothing was committed");
    assert!(data_files(&s.lake).is_empty(), "no data file is left");
}

#[test]
fn a_replay_of_the_closed_file_alone_resumes_with_the_next_one() {
    let work = tempfile::tempdir().unwrap();
    let all = work.path().join("all");
    write_binlogs(&all);
    let binlogs = work.path().join("binlogs");
    fs::create_dir_all(&binlogs).unwrap();
    fs::copy(all.join("binlog.000001"), binlogs.join("binlog.000001")).unwrap();
    let s = offline(&binlogs, work.path());
    replay(&s);
    // Nothing new: the cursor is past the rotate, in a file not copied yet.
    replay(&s);
    let lake = Lake::read(&s.lake);
    assert_eq!(lake.row_count("shop.items"), 4);
    assert_eq!(lake.manifests.len(), 1);
    assert_eq!(
        lake.manifests[0]["cursor"]["gtid"],
        format!("{UUID_TEXT}:1-5")
    );

    fs::copy(all.join("binlog.000002"), binlogs.join("binlog.000002")).unwrap();
    replay(&s);
    let lake = Lake::read(&s.lake);
    assert_eq!(lake.row_count("shop.items"), 5);
    assert_eq!(lake.row_count("shop.docs"), 6);
    let seqs: Vec<i64> = lake.rows("shop.items").iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(
        lake.manifests.last().unwrap()["cursor"]["gtid"],
        format!("{UUID_TEXT}:1-7")
    );
}
