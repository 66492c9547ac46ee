use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray, StructArray};
use mysql_common::binlog::events::{Event, TableMapEvent};

use super::*;
use crate::decode::event_type;
use crate::decode::testing::jsonb::{self as jb, V};
use crate::decode::testing::*;

const TABLE_ID: u64 = 0x2A;

/// `shop.items (id INT, doc JSON, meta JSON, note VARCHAR(20) utf8mb4)`.
fn table_map() -> Event {
    let body = table_map_body(
        TABLE_ID,
        "shop",
        "items",
        &[(3, &[]), (245, &[4]), (245, &[4]), (15, &[80, 0])],
        &[false, true, true, true],
    );
    read_event(&event_bytes(event_type::TABLE_MAP, 0, &body, false), false)
}

fn plan() -> TablePlan {
    let tm = table_map();
    let tme: TableMapEvent<'_> = tm.read_event().unwrap();
    let schema = table_schema(&[
        ("id", "int"),
        ("doc", "json"),
        ("meta", "json"),
        ("note", "varchar(20)"),
    ]);
    TablePlan::new(schema, &tme).unwrap()
}

/// One image of the four columns; `None` is NULL. JSON cells are given
/// as their bytes after the 4-byte length (a document or a diff vector).
fn image(id: i32, doc: Option<&[u8]>, meta: Option<&[u8]>, note: Option<&str>) -> Vec<u8> {
    let mut nulls = 0u8;
    let mut values = id.to_le_bytes().to_vec();
    for (i, cell) in [doc, meta].into_iter().enumerate() {
        match cell {
            Some(bytes) => {
                values.extend((bytes.len() as u32).to_le_bytes());
                values.extend(bytes);
            }
            None => nulls |= 1 << (i + 1),
        }
    }
    match note {
        Some(s) => {
            values.push(s.len() as u8);
            values.extend(s.as_bytes());
        }
        None => nulls |= 1 << 3,
    }
    let mut b = vec![nulls];
    b.extend(values);
    b
}

fn diffs(list: &[(u8, &str, Option<V>)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (op, path, value) in list {
        jb::diff(*op, path, value.as_ref(), &mut b);
    }
    b
}

fn decode(plan: &TablePlan, kind: RowsKind, body: &[u8]) -> Result<RecordBatch, String> {
    let mut buffer = TableBuffer::new(Arc::clone(&plan.schema));
    let mut seq = 1;
    decode_rows(
        plan,
        kind,
        body,
        10,
        &mut buffer,
        &origin(),
        &mut seq,
        &mut DecodeStats::default(),
    )?;
    Ok(buffer.finish(None).unwrap())
}

fn strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let a = batch.column_by_name(column).unwrap();
    let a = a.as_any().downcast_ref::<StringArray>().unwrap();
    a.iter().map(|v| v.map(str::to_string)).collect()
}

fn before_strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let before = batch.column_by_name("_before").unwrap();
    let before = before.as_any().downcast_ref::<StructArray>().unwrap();
    let a = before.column_by_name(column).unwrap();
    let a = a.as_any().downcast_ref::<StringArray>().unwrap();
    a.iter().map(|v| v.map(str::to_string)).collect()
}

fn text(v: &V) -> Option<String> {
    Some(crate::decode::json::binary_json_to_text(&v.doc()).unwrap())
}

const REPLACE: u8 = 0;
const INSERT: u8 = 1;
const REMOVE: u8 = 2;

/// A document and what each partial update below makes of it.
fn before_doc() -> V {
    jb::object(&[
        (
            "a",
            jb::object(&[(
                "b",
                jb::array(&[jb::i16(0), jb::i16(1), jb::i16(2), jb::i16(3)]),
            )]),
        ),
        ("old", jb::bool(true)),
        ("tags", jb::array(&[jb::string("x")])),
        ("key with space", jb::i16(1)),
    ])
}

fn after_doc() -> V {
    jb::object(&[
        (
            "a",
            jb::object(&[(
                "b",
                jb::array(&[jb::i16(0), jb::i16(1), jb::i16(2), jb::string("three")]),
            )]),
        ),
        ("n", jb::f64(1.5)),
        ("tags", jb::array(&[jb::string("w"), jb::string("x")])),
        ("key with space", jb::i16(2)),
    ])
}

#[test]
fn partial_json_updates_rebuild_the_full_document() {
    let plan = plan();
    let meta_before = jb::array(&[jb::i16(1)]).doc();
    let meta_after = jb::array(&[jb::i16(1), jb::i16(2)]).doc();
    let doc_diffs = diffs(&[
        (REPLACE, "$.a.b[3]", Some(jb::string("three"))),
        (INSERT, "$.n", Some(jb::f64(1.5))),
        (INSERT, "$.tags[0]", Some(jb::string("w"))),
        (REMOVE, "$.old", None),
        (REPLACE, r#"$."key with space""#, Some(jb::i16(2))),
    ]);
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], Some(&[0x0F]));
    // Row 1: `doc` logged as diffs (partial bit 0 set), `meta` in full.
    body.extend(image(
        1,
        Some(&before_doc().doc()),
        Some(&meta_before),
        Some("x"),
    ));
    body.extend([1, 0b01]);
    body.extend(image(1, Some(&doc_diffs), Some(&meta_after), Some("y")));
    // Row 2: `doc` marked partial but set to NULL: a NULL like any other.
    body.extend(image(2, Some(&before_doc().doc()), None, None));
    body.extend([1, 0b01]);
    body.extend(image(2, None, None, None));
    // Row 3: value_options 0, no partial bits: full after image.
    body.extend(image(3, Some(&meta_before), None, Some("z")));
    body.push(0);
    body.extend(image(3, Some(&meta_after), Some(&meta_before), Some("z")));

    let batch = decode(&plan, RowsKind::PartialUpdate, &body).unwrap();
    assert_eq!(batch.num_rows(), 3);
    let ids = batch.column_by_name("id").unwrap();
    let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(ids.values().to_vec(), vec![1, 2, 3]);
    let doc = strings(&batch, "doc");
    // Exactly the text the full after image would have given.
    assert_eq!(doc[0], text(&after_doc()));
    assert_eq!(
        doc[0].as_deref(),
        Some(
            r#"{"a": {"b": [0, 1, 2, "three"]}, "n": 1.5, "tags": ["w", "x"], "key with space": 2}"#
        )
    );
    assert_eq!(doc[1], None);
    assert_eq!(doc[2].as_deref(), Some("[1, 2]"));
    assert_eq!(
        strings(&batch, "meta"),
        vec![Some("[1, 2]".into()), None, Some("[1]".into())]
    );
    assert_eq!(
        strings(&batch, "note"),
        vec![Some("y".into()), None, Some("z".into())]
    );
    let before = before_strings(&batch, "doc");
    assert_eq!(before[0], text(&before_doc()));
    assert_eq!(before[2].as_deref(), Some("[1]"));
    assert_eq!(before_strings(&batch, "meta")[0].as_deref(), Some("[1]"));
}

#[test]
fn partial_update_of_a_null_before_image_is_an_error() {
    let plan = plan();
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], Some(&[0x0F]));
    body.extend(image(1, None, None, None));
    body.extend([1, 0b01]);
    let d = diffs(&[(INSERT, "$.a", Some(jb::i16(1)))]);
    body.extend(image(1, Some(&d), None, None));
    let err = decode(&plan, RowsKind::PartialUpdate, &body).unwrap_err();
    assert!(err.contains("column `doc`"), "{err}");
    assert!(err.contains("before image has no value"), "{err}");
}

#[test]
fn a_diff_mysql_would_reject_is_an_error_naming_the_column() {
    let plan = plan();
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], Some(&[0x0F]));
    body.extend(image(1, Some(&before_doc().doc()), None, None));
    body.extend([1, 0b01]);
    let d = diffs(&[(REMOVE, "$.missing", None)]);
    body.extend(image(1, Some(&d), None, None));
    let err = decode(&plan, RowsKind::PartialUpdate, &body).unwrap_err();
    assert!(
        err.contains("column `doc`") && err.contains("$.missing"),
        "{err}"
    );
}

#[test]
fn unknown_value_options_are_refused() {
    let plan = plan();
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], Some(&[0x0F]));
    body.extend(image(1, None, None, None));
    body.extend([2]);
    body.extend(image(1, None, None, None));
    let err = decode(&plan, RowsKind::PartialUpdate, &body).unwrap_err();
    assert!(err.contains("value options"), "{err}");
}

#[test]
fn full_json_images_print_each_cell_on_its_own() {
    // Two JSON cells per image share one text buffer: none may leak into the next.
    let plan = plan();
    let a = jb::object(&[("k", jb::string("long value"))]).doc();
    let b = jb::array(&[]).doc();
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], Some(&[0x0F]));
    body.extend(image(7, Some(&a), Some(&b), Some("n")));
    body.extend(image(7, Some(&b), Some(&a), Some("n")));
    let batch = decode(&plan, RowsKind::Update, &body).unwrap();
    assert_eq!(strings(&batch, "doc"), vec![Some("[]".into())]);
    assert_eq!(
        strings(&batch, "meta"),
        vec![Some(r#"{"k": "long value"}"#.into())]
    );
    assert_eq!(
        before_strings(&batch, "doc"),
        vec![Some(r#"{"k": "long value"}"#.into())]
    );
    assert_eq!(before_strings(&batch, "meta"), vec![Some("[]".into())]);
}

#[test]
fn inserts_and_deletes_fill_the_table_columns() {
    let plan = plan();
    let doc = jb::array(&[jb::bool(true)]).doc();
    for kind in [RowsKind::Write, RowsKind::Delete] {
        let mut body = rows_v2_header(TABLE_ID, 4, &[0x0F], None);
        body.extend(image(5, Some(&doc), None, Some("é")));
        let batch = decode(&plan, kind, &body).unwrap();
        assert_eq!(
            strings(&batch, "doc"),
            vec![Some("[true]".into())],
            "{kind:?}"
        );
        assert_eq!(strings(&batch, "note"), vec![Some("é".into())], "{kind:?}");
        assert!(
            batch.column_by_name("_before").unwrap().is_null(0),
            "{kind:?}"
        );
    }
}

#[test]
fn images_that_leave_columns_out_are_refused_naming_them_and_the_setting() {
    let plan = plan();
    let doc = jb::array(&[jb::bool(true)]).doc();
    let row = image(5, Some(&doc), None, Some("x"));
    // MINIMAL insert: only `id` and `doc` logged (the rest defaulted).
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x03], None);
    body.extend([0u8, 5, 0, 0, 0]);
    let e = decode(&plan, RowsKind::Write, &body).unwrap_err();
    assert!(
        e.contains("after image leaves out column(s) `meta`, `note`")
            && e.contains("binlog_row_image = MINIMAL"),
        "{e}"
    );
    // NOBLOB delete: the JSON (blob) columns are left out.
    let mut body = rows_v2_header(TABLE_ID, 4, &[0x09], None);
    body.extend(row.clone());
    let e = decode(&plan, RowsKind::Delete, &body).unwrap_err();
    assert!(
        e.contains("before image leaves out column(s) `doc`, `meta`")
            && e.contains("binlog_row_image = NOBLOB"),
        "{e}"
    );
    // MINIMAL update: a full before image is not enough, the after
    // image is checked as well (and the other way round).
    for (before, after, which) in [(0x0F, 0x08, "after"), (0x01, 0x0F, "before")] {
        let mut body = rows_v2_header(TABLE_ID, 4, &[before], Some(&[after]));
        body.extend(row.clone());
        body.extend(row.clone());
        let e = decode(&plan, RowsKind::Update, &body).unwrap_err();
        assert!(
            e.contains(&format!("{which} image leaves out")) && e.contains("MINIMAL"),
            "{e}"
        );
    }
    // Bits past the last column mean nothing: a full image passes.
    let mut body = rows_v2_header(TABLE_ID, 4, &[0xFF], Some(&[0x1F]));
    body.extend(row.clone());
    body.extend(row);
    let batch = decode(&plan, RowsKind::Update, &body).unwrap();
    assert_eq!(strings(&batch, "note"), vec![Some("x".into())]);
}

#[test]
fn event_types_map_to_kinds() {
    assert_eq!(
        RowsKind::of_event_type(event_type::PARTIAL_UPDATE_ROWS),
        Some((RowsKind::PartialUpdate, 10))
    );
    assert_eq!(
        RowsKind::of_event_type(event_type::UPDATE_ROWS_V1),
        Some((RowsKind::Update, 8))
    );
    assert_eq!(RowsKind::of_event_type(event_type::XID), None);
}

/// MariaDB's compressed VARCHAR (type 141) and TEXT (140), from the
/// TABLE_MAP rewrite through the decoder: a value stored as it is, one
/// deflated without and one with the zlib wrapper, an empty one, NULL.
#[test]
fn compressed_columns_decode_to_their_original_text() {
    use std::io::Write;
    let body = table_map_body(
        TABLE_ID,
        "shop",
        "items",
        &[(3, &[]), (141, &[0xD0, 0x07]), (140, &[2])],
        &[false, true, true],
    );
    let event = read_event(&event_bytes(event_type::TABLE_MAP, 0, &body, false), false);
    assert!(event
        .read_event::<TableMapEvent<'_>>()
        .is_ok_and(|t| t.get_raw_column_type(1).is_err()));
    let plain = crate::decode::compressed::plain_table_map(event.data(), 6)
        .unwrap()
        .unwrap();
    let tme = crate::decode::compressed::read_table_map(event.fde(), &plain.body).unwrap();
    let schema = table_schema(&[("id", "int"), ("v", "varchar(500)"), ("t", "text")]);
    let plan = TablePlan::with_compressed(schema, &tme, &plain.compressed).unwrap();
    let long = "sluice é 日本 🦀 ".repeat(40);
    let deflated = |wrap: bool| {
        let mut stored = vec![0x80 | 2 | if wrap { 0 } else { 0x08 }];
        stored.extend((long.len() as u16).to_be_bytes());
        let level = flate2::Compression::default();
        stored.extend(if wrap {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(long.as_bytes()).unwrap();
            e.finish().unwrap()
        } else {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
            e.write_all(long.as_bytes()).unwrap();
            e.finish().unwrap()
        });
        stored
    };
    let mut rows = rows_v2_header(TABLE_ID, 3, &[0xFF], None);
    let cell = |stored: &[u8]| {
        let mut c = (stored.len() as u16).to_le_bytes().to_vec();
        c.extend(stored);
        c
    };
    // Row 1: "short" stored as it is, and the deflated text.
    rows.push(0);
    rows.extend(1i32.to_le_bytes());
    rows.extend(cell(b"\x00short"));
    rows.extend(cell(&deflated(false)));
    // Row 2: the wrapped stream, and an empty value.
    rows.push(0);
    rows.extend(2i32.to_le_bytes());
    rows.extend(cell(&deflated(true)));
    rows.extend(cell(b""));
    // Row 3: NULLs.
    rows.push(0b110);
    rows.extend(3i32.to_le_bytes());
    let batch = decode(&plan, RowsKind::Write, &rows).unwrap();
    assert_eq!(
        strings(&batch, "v"),
        [Some("short".to_string()), Some(long.clone()), None]
    );
    assert_eq!(
        strings(&batch, "t"),
        [Some(long.clone()), Some(String::new()), None]
    );
    // A corrupt value is an error naming the column.
    let mut bad = rows_v2_header(TABLE_ID, 3, &[0xFF], None);
    bad.push(0b100);
    bad.extend(4i32.to_le_bytes());
    let mut stored = deflated(false);
    stored.truncate(stored.len() - 4);
    bad.extend(cell(&stored));
    let err = decode(&plan, RowsKind::Write, &bad).unwrap_err();
    assert!(err.contains("column `v`"), "{err}");
}
