//! Truncated or corrupted event bytes give an error, never a panic. Seeded
//! random cases (a property test with a bounded number of cases, run with
//! the unit tests) over the three decoders that read untrusted bytes:
//! TABLE_MAP metadata (the decode plan and the shape FULL metadata
//! describes), rows events against random table shapes, and MySQL's binary
//! JSON (documents and partial-update diffs).
//!
//! Each case starts from well-formed bytes (so the decoders get deep) and
//! then truncates them, flips bits or overwrites bytes. `SLUICE_FUZZ_SEED`
//! repeats a run, `SLUICE_FUZZ_CASES` scales it (default 20 000 per decoder).
//! A panic names the seed and the case.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use mysql_common::binlog::events::{Event, TableMapEvent};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::json::{apply_json_diffs, binary_json_to_text};
use super::rows::{decode_rows, DecodeStats, RowsKind};
use super::testing::jsonb::{self as jb, V};
use super::testing::*;
use crate::batch::TableBuffer;
use crate::decode::event_type;
use crate::schema::plan::TablePlan;
use crate::schema::{ColumnDef, TableSchema};

fn seed() -> u64 {
    std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| rand::random::<u32>() as u64)
}

fn cases() -> usize {
    std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(20_000)
}

/// Runs `case(rng)` `n` times, each with its own seeded generator, and
/// turns a panic into a failure that names the seed and case number.
fn run_cases(what: &str, mut case: impl FnMut(&mut StdRng) -> bool) {
    let seed = seed();
    let n = cases();
    let mut decoded = 0;
    for i in 0..n {
        let case_seed = seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
        let mut rng = StdRng::seed_from_u64(case_seed);
        match catch_unwind(AssertUnwindSafe(|| case(&mut rng))) {
            Ok(ok) => decoded += usize::from(ok),
            Err(_) => {
                panic!("{what}: case {i} panicked (SLUICE_FUZZ_SEED={seed}, case seed {case_seed})")
            }
        }
    }
    eprintln!("{what}: {n} cases, seed {seed}, {decoded} decoded without error");
}

/// Truncates, flips bits in or overwrites a few bytes of `bytes`, from
/// `protect` on (the part before it stays well-formed).
fn mutate(rng: &mut StdRng, bytes: &mut Vec<u8>, protect: usize) {
    let protect = protect.min(bytes.len());
    match rng.gen_range(0..4) {
        0 => {
            let cut = rng.gen_range(protect..=bytes.len());
            bytes.truncate(cut);
        }
        1 | 2 if bytes.len() > protect => {
            for _ in 0..rng.gen_range(1..=4) {
                let at = rng.gen_range(protect..bytes.len());
                if rng.gen() {
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                } else {
                    bytes[at] = rng.gen();
                }
            }
        }
        _ => {
            // Random bytes appended: trailing garbage after the last row.
            let n = rng.gen_range(1..16);
            bytes.extend((0..n).map(|_| rng.gen::<u8>()));
        }
    }
}

// ---------------------------------------------------------------------------
// Table shapes: a binlog column type, its metadata and the schema's type text
// ---------------------------------------------------------------------------

struct ColumnShape {
    binlog_type: u8,
    meta: Vec<u8>,
    schema_type: String,
}

fn column_shape(rng: &mut StdRng) -> ColumnShape {
    let fsp: u8 = rng.gen_range(0..=6);
    let (binlog_type, meta, schema_type): (u8, Vec<u8>, String) = match rng.gen_range(0..22) {
        0 => (1, vec![], "tinyint".into()),
        1 => (2, vec![], "smallint unsigned".into()),
        2 => (9, vec![], "mediumint".into()),
        3 => (3, vec![], "int".into()),
        4 => (8, vec![], "bigint unsigned".into()),
        5 => (4, vec![4], "float".into()),
        6 => (5, vec![8], "double".into()),
        7 => {
            let p: u8 = rng.gen_range(1..=65);
            let s: u8 = rng.gen_range(0..=p.min(30));
            (246, vec![p, s], format!("decimal({p},{s})"))
        }
        8 => (10, vec![], "date".into()),
        9 => (18, vec![fsp], format!("datetime({fsp})")),
        10 => (17, vec![fsp], format!("timestamp({fsp})")),
        11 => (19, vec![fsp], format!("time({fsp})")),
        12 => (13, vec![], "year".into()),
        13 => {
            let n: u8 = rng.gen_range(1..=64);
            (16, vec![n % 8, n / 8], format!("bit({n})"))
        }
        14 => (254, vec![247, 1], "enum('a','b','c')".into()),
        15 => (254, vec![248, 1], "set('a','b','c')".into()),
        16 => {
            let n: u8 = rng.gen_range(1..=60);
            if rng.gen() {
                (254, vec![254, n * 4], format!("char({n})"))
            } else {
                (254, vec![254, n], format!("binary({n})"))
            }
        }
        17 => {
            let n: u16 = rng.gen_range(1..=400);
            let ty = if rng.gen() { "varchar" } else { "varbinary" };
            (15, n.to_le_bytes().to_vec(), format!("{ty}({n})"))
        }
        18 => {
            let len_bytes = rng.gen_range(1..=4);
            let ty = ["tinytext", "text", "mediumtext", "longtext"][len_bytes as usize - 1];
            (252, vec![len_bytes], ty.into())
        }
        19 => (245, vec![4], "json".into()),
        20 => (255, vec![4], "geometry".into()),
        _ => (252, vec![2], "blob".into()),
    };
    ColumnShape {
        binlog_type,
        meta,
        schema_type,
    }
}

fn schema_of(shapes: &[ColumnShape]) -> Option<Arc<TableSchema>> {
    let columns = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let charset =
                crate::types::column::is_textual(&s.schema_type).then(|| "utf8mb4".to_string());
            ColumnDef::new(
                format!("c{i}"),
                s.schema_type.clone(),
                charset,
                true,
                i == 0,
            )
            .ok()
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Arc::new(TableSchema {
        database: "shop".into(),
        name: "items".into(),
        version: 1,
        columns,
        charset: None,
        unique_keys: Vec::new(),
    }))
}

/// FULL optional metadata: a few fields of random type and content, or
/// well-formed column names and ENUM/SET labels.
fn optional_metadata(rng: &mut StdRng, ncols: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.gen_range(0..4) {
        let (ty, body): (u8, Vec<u8>) = match rng.gen_range(0..3) {
            0 => {
                let mut b = Vec::new();
                for i in 0..ncols {
                    let name = format!("c{i}");
                    lenenc(name.len() as u64, &mut b);
                    b.extend(name.as_bytes());
                }
                (4, b)
            }
            1 => {
                // ENUM_STR_VALUE (6) or SET_STR_VALUE (5): per column, a count
                // and the labels.
                let mut b = Vec::new();
                lenenc(3, &mut b);
                for label in ["a", "🎉", "c"] {
                    lenenc(label.len() as u64, &mut b);
                    b.extend(label.as_bytes());
                }
                (*[5u8, 6].choose(rng).unwrap(), b)
            }
            _ => {
                let n = rng.gen_range(0..12);
                (rng.gen_range(1..=12), (0..n).map(|_| rng.gen()).collect())
            }
        };
        out.push(ty);
        lenenc(body.len() as u64, &mut out);
        out.extend(body);
    }
    out
}

/// A TABLE_MAP for `shapes`, maybe corrupted from its column types on.
fn table_map_event(rng: &mut StdRng, shapes: &[ColumnShape], corrupt: bool) -> Vec<u8> {
    table_map_event_with(rng, shapes, corrupt, true)
}

fn table_map_event_with(
    rng: &mut StdRng,
    shapes: &[ColumnShape],
    corrupt: bool,
    optional: bool,
) -> Vec<u8> {
    let columns: Vec<(u8, &[u8])> = shapes
        .iter()
        .map(|s| (s.binlog_type, s.meta.as_slice()))
        .collect();
    let mut body = table_map_body(42, "shop", "items", &columns, &vec![true; shapes.len()]);
    if optional && rng.gen_bool(0.5) {
        body.extend(optional_metadata(rng, shapes.len()));
    }
    if corrupt {
        // Table id, flags, names and the column count stay readable.
        mutate(rng, &mut body, 8 + 2 + 6 + 7);
    }
    event_bytes(event_type::TABLE_MAP, 0, &body, false)
}

#[test]
fn corrupt_table_map_metadata_is_an_error_not_a_panic() {
    run_cases("TABLE_MAP", |rng| {
        let shapes: Vec<ColumnShape> = (0..rng.gen_range(1..8))
            .map(|_| column_shape(rng))
            .collect();
        let bytes = table_map_event(rng, &shapes, true);
        let Ok(event) = Event::read(&fde(false), bytes.as_slice()) else {
            return false;
        };
        let Ok(tme) = event.read_event::<TableMapEvent<'_>>() else {
            return false;
        };
        // The shape FULL metadata describes, and the plan against a schema
        // that mostly agrees with the event.
        let derived = crate::schema::apply::derive_from_table_map(&tme, &[]);
        let mut ok = derived.is_ok();
        if let Some(schema) = schema_of(&shapes) {
            ok &= TablePlan::new(schema, &tme).is_ok();
        }
        ok
    });
}

// ---------------------------------------------------------------------------
// Rows events
// ---------------------------------------------------------------------------

/// Plausible bytes of one cell of the column: the right length for its
/// layout, random content.
fn cell(rng: &mut StdRng, shape: &ColumnShape, out: &mut Vec<u8>) {
    let fsp_bytes = |fsp: u8| (fsp as usize).div_ceil(2);
    let random =
        |rng: &mut StdRng, n: usize, out: &mut Vec<u8>| out.extend((0..n).map(|_| rng.gen::<u8>()));
    match shape.binlog_type {
        1 | 13 => random(rng, 1, out),
        2 => random(rng, 2, out),
        9 | 10 => random(rng, 3, out),
        3 | 4 => random(rng, 4, out),
        8 | 5 => random(rng, 8, out),
        246 => random(
            rng,
            crate::types::codec::decimal_size(shape.meta[0], shape.meta[1]),
            out,
        ),
        18 => random(rng, 5 + fsp_bytes(shape.meta[0]), out),
        17 => random(rng, 4 + fsp_bytes(shape.meta[0]), out),
        19 => random(rng, 3 + fsp_bytes(shape.meta[0]), out),
        16 => random(
            rng,
            shape.meta[1] as usize + usize::from(shape.meta[0] > 0),
            out,
        ),
        254 if shape.meta[0] != 254 => random(rng, 1, out),
        254 | 15 => {
            let max = if shape.binlog_type == 15 {
                u16::from_le_bytes([shape.meta[0], shape.meta[1]]) as usize
            } else {
                shape.meta[1] as usize
            };
            let len = rng.gen_range(0..=max.min(40));
            if max > 255 {
                out.extend((len as u16).to_le_bytes());
            } else {
                out.push(len as u8);
            }
            random(rng, len, out);
        }
        245 => {
            let doc = json_doc(rng, 0).doc();
            out.extend((doc.len() as u32).to_le_bytes());
            out.extend(doc);
        }
        _ => {
            let len_bytes = shape.meta[0] as usize;
            let len = rng.gen_range(0..40usize);
            out.extend(&len.to_le_bytes()[..len_bytes]);
            random(rng, len, out);
        }
    }
}

/// One row image over all columns: a null bitmap, then the non-null cells.
fn image(rng: &mut StdRng, shapes: &[ColumnShape], out: &mut Vec<u8>) {
    let mut nulls = vec![0u8; shapes.len().div_ceil(8)];
    for (i, _) in shapes.iter().enumerate() {
        if rng.gen_bool(0.2) {
            nulls[i / 8] |= 1 << (i % 8);
        }
    }
    out.extend(&nulls);
    for (i, shape) in shapes.iter().enumerate() {
        if nulls[i / 8] & (1 << (i % 8)) == 0 {
            cell(rng, shape, out);
        }
    }
}

#[test]
fn corrupt_rows_events_are_an_error_not_a_panic() {
    run_cases("rows", |rng| {
        let shapes: Vec<ColumnShape> = (0..rng.gen_range(1..8))
            .map(|_| column_shape(rng))
            .collect();
        let Some(schema) = schema_of(&shapes) else {
            return false;
        };
        let bytes = table_map_event_with(rng, &shapes, false, false);
        let event = Event::read(&fde(false), bytes.as_slice()).expect("a well-formed TABLE_MAP");
        let tme: TableMapEvent<'_> = event.read_event().expect("a well-formed TABLE_MAP");
        let plan = TablePlan::new(schema, &tme).expect("a schema that agrees with its TABLE_MAP");
        let kind = *[
            RowsKind::Write,
            RowsKind::Update,
            RowsKind::Delete,
            RowsKind::PartialUpdate,
        ]
        .choose(rng)
        .unwrap();
        let two_images = matches!(kind, RowsKind::Update | RowsKind::PartialUpdate);
        let ncols = shapes.len() as u64;
        let present = vec![0xFFu8; shapes.len().div_ceil(8)];
        let mut body = rows_v2_header(42, ncols, &present, two_images.then_some(&present[..]));
        let header = body.len();
        for _ in 0..rng.gen_range(1..4) {
            image(rng, &shapes, &mut body);
            if kind == RowsKind::PartialUpdate {
                body.push(0); // value_options: full after image
            }
            if two_images {
                image(rng, &shapes, &mut body);
            }
        }
        if rng.gen_bool(0.9) {
            // Mostly the rows; sometimes the header too.
            let protect = if rng.gen_bool(0.8) { header } else { 0 };
            mutate(rng, &mut body, protect);
        }
        let mut buffer = TableBuffer::new(Arc::clone(&plan.schema));
        let mut seq = 1;
        let result = decode_rows(
            &plan,
            kind,
            &body,
            10,
            &mut buffer,
            &origin(),
            &mut seq,
            &mut DecodeStats::default(),
        );
        match result {
            // Rows decoded without error make a consistent batch.
            Ok(_) => {
                buffer
                    .finish(None)
                    .expect("decoded rows make a record batch");
                true
            }
            Err(_) => false,
        }
    });
}

// ---------------------------------------------------------------------------
// Binary JSON
// ---------------------------------------------------------------------------

fn json_doc(rng: &mut StdRng, depth: usize) -> V {
    if depth >= 3 || rng.gen_bool(0.4) {
        return match rng.gen_range(0..11) {
            0 => jb::null(),
            1 => jb::bool(rng.gen()),
            2 => jb::i16(rng.gen()),
            3 => jb::u32(rng.gen()),
            4 => jb::i64(rng.gen()),
            5 => jb::u64(rng.gen()),
            6 => jb::f64(rng.gen()),
            7 => jb::string(["", "x", "é", "😀 a\"b"].choose(rng).unwrap()),
            // DECIMAL(5,2) 123.45, and random DECIMAL bytes.
            8 => jb::opaque(246, &[5, 2, 0x80, 123, 45]),
            9 => {
                let p = rng.gen_range(0..=70);
                let s = rng.gen_range(0..=35);
                let mut data = vec![p, s];
                data.extend((0..rng.gen_range(0..12)).map(|_| rng.gen::<u8>()));
                jb::opaque(246, &data)
            }
            _ => jb::opaque(
                *[7u8, 10, 11, 12, 15, 253, 1].choose(rng).unwrap(),
                &rng.gen::<u64>().to_le_bytes(),
            ),
        };
    }
    let n = rng.gen_range(0..4);
    let values: Vec<V> = (0..n).map(|_| json_doc(rng, depth + 1)).collect();
    match rng.gen_range(0..4) {
        0 => jb::array(&values),
        1 => jb::large_array(&values),
        k => {
            const KEYS: [&str; 4] = ["a", "b", "cc", "ddd"];
            let members: Vec<(&str, V)> = KEYS.iter().copied().zip(values).collect();
            if k == 2 {
                jb::object(&members)
            } else {
                jb::large_object(&members)
            }
        }
    }
}

#[test]
fn corrupt_binary_json_is_an_error_not_a_panic() {
    run_cases("binary JSON", |rng| {
        let mut doc = json_doc(rng, 0).doc();
        if rng.gen_bool(0.9) {
            mutate(rng, &mut doc, 0);
        }
        let whole = binary_json_to_text(&doc).is_ok();
        // Partial updates: diffs, well-formed or not, against the document.
        let mut diffs = Vec::new();
        for _ in 0..rng.gen_range(1..3) {
            let op = rng.gen_range(0..3);
            let path = [
                "$",
                "$.a",
                "$[0]",
                "$.a[last]",
                "$.\"k\"",
                "$[1 to 2]",
                "$.*",
                "$[",
            ]
            .choose(rng)
            .unwrap();
            let value = json_doc(rng, 1);
            jb::diff(op, path, (op != 2).then_some(&value), &mut diffs);
        }
        if rng.gen() {
            mutate(rng, &mut diffs, 0);
        }
        let patched = apply_json_diffs(&doc, &diffs, &mut String::new()).is_ok();
        whole || patched
    });
}
