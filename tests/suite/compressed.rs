//! MariaDB's `COMPRESSED` columns (VARCHAR, VARBINARY, TEXT, MEDIUMTEXT,
//! BLOB): random values (short ones the server stores as they are, long
//! compressible ones it deflates, with and without the zlib wrapper,
//! incompressible bytes, multibyte UTF-8, NULL, empty) inserted, updated
//! and deleted, then read back from the changelog replay and from the
//! current table by every reader, value by value against `SELECT`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::delta::read_delta;
use serde_json::Value;

const COLUMNS: [&str; 7] = ["id", "vc", "vl", "vb", "tx", "mt", "bl"];

fn create(table: &str) -> String {
    format!(
        "CREATE TABLE shop.{table} (
           id INT PRIMARY KEY,
           vc VARCHAR(1000) CHARACTER SET utf8mb4 COMPRESSED,
           vl VARCHAR(200) COMPRESSED CHARACTER SET latin1,
           vb VARBINARY(300) COMPRESSED,
           tx TEXT COMPRESSED CHARACTER SET utf8mb4,
           mt MEDIUMTEXT COMPRESSED CHARACTER SET utf8mb4,
           bl BLOB COMPRESSED
         );\n"
    )
}

fn seed() -> u64 {
    match std::env::var("SLUICE_FUZZ_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SLUICE_FUZZ_SEED={s:?} is not an unsigned integer")),
        Err(_) => rand::random::<u32>() as u64,
    }
}

const WORDS: [&str; 8] = ["lake", "sluice", "é", "日本", "🦀", "gate", " ", "ß"];

/// Text of at most `max_chars` characters (`latin1` keeps to its repertoire).
fn text(rng: &mut StdRng, max_chars: usize, latin1: bool) -> String {
    let chars = match rng.gen_range(0..6) {
        0 => 0,
        1 => rng.gen_range(1..20),
        2 => rng.gen_range(90..130).min(max_chars),
        _ => rng.gen_range(0..=max_chars),
    };
    let mut out = String::new();
    if rng.gen_bool(0.2) {
        // Hard to compress: the server keeps it as it is.
        while out.chars().count() < chars {
            out.push(char::from(rng.gen_range(b'!'..=b'~')));
        }
        return out;
    }
    while out.chars().count() < chars {
        let w = WORDS[rng.gen_range(0..WORDS.len())];
        if latin1 && !w.chars().all(|c| (c as u32) < 0x100) {
            continue;
        }
        out.push_str(w);
    }
    out.chars().take(chars).collect()
}

fn bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let len = match rng.gen_range(0..4) {
        0 => rng.gen_range(0..10),
        _ => rng.gen_range(0..=max),
    };
    if rng.gen_bool(0.5) {
        (0..len).map(|_| rng.gen()).collect()
    } else {
        (0..len).map(|i| (i % 7) as u8).collect()
    }
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

fn hex(b: &[u8]) -> String {
    format!(
        "X'{}'",
        b.iter().map(|x| format!("{x:02X}")).collect::<String>()
    )
}

/// The SQL values of one row's columns after `id`, each NULL at times.
fn values(rng: &mut StdRng) -> Vec<String> {
    let mut v = vec![
        quoted(&text(rng, 1000, false)),
        quoted(&text(rng, 200, true)),
        hex(&bytes(rng, 300)),
        quoted(&text(rng, 16_000, false)),
        quoted(&text(rng, 30_000, false)),
        hex(&bytes(rng, 65_535)),
    ];
    for x in v.iter_mut() {
        if rng.gen_bool(0.1) {
            *x = "NULL".into();
        }
    }
    v
}

/// Inserts, updates and deletes on `table`; the session's zlib wrapper
/// setting changes between statements.
fn workload(rng: &mut StdRng, table: &str, ids: std::ops::Range<i32>) -> String {
    let mut sql = String::new();
    for id in ids.clone() {
        let wrap = if rng.gen_bool(0.5) { "ON" } else { "OFF" };
        sql.push_str(&format!(
            "SET SESSION column_compression_zlib_wrap = {wrap};\nINSERT INTO shop.{table} VALUES ({id}, {});\n",
            values(rng).join(", ")
        ));
    }
    for id in ids.clone() {
        match rng.gen_range(0..4) {
            0 => sql.push_str(&format!("DELETE FROM shop.{table} WHERE id = {id};\n")),
            1 | 2 => {
                let v = values(rng);
                let set: Vec<String> = COLUMNS[1..]
                    .iter()
                    .zip(&v)
                    .filter(|_| rng.gen_bool(0.6))
                    .map(|(c, v)| format!("{c} = {v}"))
                    .collect();
                if !set.is_empty() {
                    sql.push_str(&format!(
                        "UPDATE shop.{table} SET {} WHERE id = {id};\n",
                        set.join(", ")
                    ));
                }
            }
            _ => {}
        }
    }
    sql
}

/// `SELECT` of the columns rendered as the lake's values are (`HEX` for bytes).
fn select_list() -> String {
    COLUMNS
        .iter()
        .map(|c| match *c {
            "vb" | "bl" => format!("HEX({c})"),
            c => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn source(
    db: &MariaDb,
    table: &str,
) -> std::collections::BTreeMap<Vec<String>, Vec<Option<String>>> {
    db.query_rows(&format!("SELECT {} FROM shop.{table}", select_list()))
        .into_iter()
        .map(|r| (vec![r[0].clone().unwrap()], r))
        .collect()
}

#[test]
fn compressed_columns_read_back_as_select_returns() {
    let seed = seed();
    eprintln!("compressed: seed {seed} (SLUICE_FUZZ_SEED={seed} repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let db = MariaDb::start();
    if !db.is_mariadb_or_skip("COMPRESSED columns") {
        return;
    }
    // `before` exists when sluice starts (its shape from information_schema,
    // which prints `/*M!100301 COMPRESSED*/` after the type); `after` is
    // created while sluice follows (its shape from the CREATE TABLE).
    db.sql(&format!("CREATE DATABASE shop;\n{}", create("before")));
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1s\"\n".into();
    sluice.run_until_caught_up_ok();

    let mut script = create("after");
    script.push_str(&workload(&mut rng, "before", 0..40));
    script.push_str(&workload(&mut rng, "after", 0..40));
    // The edges: empty, one byte, the threshold, the longest values.
    script.push_str(&format!(
        "INSERT INTO shop.after VALUES (100, '', '', '', '', '', ''), \
         (101, 'x', 'y', X'00', 'z', 'é', X'FF'), \
         (102, REPEAT('a', 100), REPEAT('b', 99), REPEAT(X'01', 101), REPEAT('🦀', 25), REPEAT('c', 101), REPEAT(X'00', 100)), \
         (103, REPEAT('🦀', 1000), REPEAT('ÿ', 200), REPEAT(X'AB', 300), REPEAT('d', 65535), REPEAT('日', 100000), {});\n",
        hex(&bytes(&mut StdRng::seed_from_u64(seed), 65_535))
    ));
    db.sql(&script);
    sluice.run_until_caught_up_ok();

    let read = Lake::read_committed(lake.path());
    let ns = |t: &str| format!("{}.{t}", db.namespace().to_server("shop"));
    for table in ["before", "after"] {
        let expected = source(&db, table);
        assert!(expected.len() > 10, "{table}: too few rows left");
        // The changelog replay, every value.
        let replayed = replay(&read.rows(&ns(table)), &[0]);
        assert_same_table(
            &format!("seed {seed}: changelog of {table}"),
            &expected,
            &replayed,
        );
        // The current table, by every reader (text columns: the readers print bytes each their own way).
        let dir = lake
            .path()
            .join("_current")
            .join(db.namespace().to_server("shop").as_ref())
            .join(table);
        let text_columns = ["id", "vc", "vl", "tx", "mt", "_seq"];
        let current = read_delta(
            &dir.display().to_string(),
            &text_columns,
            None,
            &Value::Null,
            crate::delta::ALL_READERS,
        );
        let want: Vec<Vec<Option<String>>> = expected
            .values()
            .map(|r| {
                vec![
                    r[0].clone(),
                    r[1].clone(),
                    r[2].clone(),
                    r[4].clone(),
                    r[5].clone(),
                ]
            })
            .collect();
        for (reader, rows) in &current.rows {
            let mut got: Vec<Vec<Option<String>>> = rows.iter().map(|r| r[..5].to_vec()).collect();
            got.sort_by_key(|r| r[0].as_ref().map(|id| id.parse::<i64>().unwrap()));
            let mut want = want.clone();
            want.sort_by_key(|r| r[0].as_ref().map(|id| id.parse::<i64>().unwrap()));
            assert!(
                got == want,
                "seed {seed}: {reader} reads _current/{table} unlike SELECT ({} rows, {} in the source)",
                got.len(),
                want.len()
            );
        }
    }
}
