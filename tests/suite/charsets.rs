//! Legacy charsets read as the server reads them: every single byte, every
//! two-byte sequence of the multibyte charsets and every three-byte one of
//! ujis/eucjpms goes through the binlog and must come out of the lake as
//! `CONVERT(… USING utf8mb4)` shows it; then random strings of valid
//! characters (seeded, `SLUICE_FUZZ_SEED`) with updates and deletes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Charsets whose values are text in the client's utf8mb4 without a table
/// of their own (Unicode encodings) or that are no text at all.
const NOT_LEGACY: [&str; 7] = [
    "binary", "utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32",
];
const MULTIBYTE: [&str; 8] = [
    "big5", "cp932", "eucjpms", "euckr", "gb2312", "gbk", "sjis", "ujis",
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02X}");
        s
    })
}

fn legacy_charsets(db: &MariaDb) -> Vec<String> {
    db.query_rows("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS ORDER BY 1")
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .filter(|c| !NOT_LEGACY.contains(&c.as_str()))
        .collect()
}

/// The lake's replay of `shop.<table>` (`id`, `v`) against
/// `SELECT id, HEX(CONVERT(v USING utf8mb4))`; returns the rows compared.
fn compare(
    db: &MariaDb,
    lake: &Lake,
    table: &str,
    what: &str,
    problems: &mut Vec<String>,
) -> usize {
    let want: BTreeMap<String, Option<String>> = db
        .query_rows(&format!(
            "SELECT id, HEX(CONVERT(v USING utf8mb4)), HEX(v) FROM shop.{table}"
        ))
        .into_iter()
        .map(|r| {
            let id = r[0].clone().unwrap();
            (
                id,
                r[1].clone()
                    .map(|h| format!("{h} (bytes {})", r[2].clone().unwrap())),
            )
        })
        .collect();
    let name = format!("shop.{table}");
    let rows = if lake.tables().contains(&name) {
        lake.rows(&name)
    } else {
        Vec::new()
    };
    let got = replay(&rows, &[0]);
    for (id, w) in &want {
        let g = got.get(&vec![id.clone()]).map(|v| v[1].clone());
        let same = match (w, &g) {
            (None, Some(None)) => true,
            (Some(w), Some(Some(g))) => w.split(' ').next() == Some(hex(g.as_bytes()).as_str()),
            _ => false,
        };
        if !same {
            problems.push(format!(
                "{what} {table} id {id}: server {w:?}, lake {:?}",
                g.map(|v| v.map(|s| format!("{} {s:?}", hex(s.as_bytes()))))
            ));
        }
    }
    if got.len() != want.len() {
        problems.push(format!(
            "{what} {table}: {} rows in the server, {} in the lake",
            want.len(),
            got.len()
        ));
    }
    want.len()
}

fn report(problems: &mut Vec<String>, what: &str) {
    if !problems.is_empty() {
        let n = problems.len();
        problems.truncate(40);
        panic!("{what}: {n} values differ:\n{}", problems.join("\n"));
    }
}

#[test]
fn every_byte_sequence_reads_as_the_server_converts_it() {
    // The Sequence engine makes the byte sweeps: MariaDB only.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    let charsets = legacy_charsets(&db);
    for needed in [
        "armscii8", "latin5", "tis620", "sjis", "cp932", "ujis", "eucjpms", "big5",
    ] {
        assert!(
            charsets.iter().any(|c| c == needed),
            "the server has no {needed}"
        );
    }
    let mut ddl = String::from("CREATE DATABASE shop;\n");
    for cs in &charsets {
        ddl.push_str(&format!(
            "CREATE TABLE shop.t_{cs} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(3) CHARACTER SET {cs});\n"
        ));
    }
    db.sql(&ddl);
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    // Ill-formed sequences are refused by the server (strict mode, INSERT
    // IGNORE skips them): what it stores is what sluice must read.
    let mut dml = String::from("SET SESSION sql_mode = 'STRICT_ALL_TABLES';\n");
    for cs in &charsets {
        let into = format!(
            "INSERT IGNORE INTO shop.t_{cs} (v) SELECT CAST(b AS CHAR CHARACTER SET {cs}) FROM"
        );
        dml.push_str(&format!(
            "{into} (SELECT CHAR(seq) b FROM shop.seq_0_to_255) s;\n"
        ));
        if MULTIBYTE.contains(&cs.as_str()) {
            dml.push_str(&format!(
                "{into} (SELECT CONCAT(CHAR(a.seq), CHAR(c.seq)) b FROM shop.seq_128_to_255 a, shop.seq_64_to_255 c) s;\n"
            ));
        }
        if cs == "ujis" || cs == "eucjpms" {
            dml.push_str(&format!(
                "{into} (SELECT CONCAT(CHAR(143), CHAR(a.seq), CHAR(c.seq)) b FROM shop.seq_161_to_254 a, shop.seq_161_to_254 c) s;\n"
            ));
        }
    }
    db.sql(&dml);
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let mut problems = Vec::new();
    let mut compared = 0;
    for cs in &charsets {
        let rows = compare(&db, &lake, &format!("t_{cs}"), cs, &mut problems);
        assert!(rows >= 128, "{cs}: only {rows} rows stored");
        compared += rows;
    }
    eprintln!(
        "charsets: {} charsets, {compared} values compared",
        charsets.len()
    );
    report(&mut problems, "byte sweep");
}

/// Issue 11: random strings in each multibyte charset, made of the
/// characters the server itself has for it (every well-formed pair and
/// high single byte it maps to something other than `?`), mixed with ASCII, through inserts, updates
/// and deletes; the lake replayed must equal SELECT value by value.
#[test]
fn random_multibyte_strings_replay_to_what_select_returns() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    let seed: u64 = match std::env::var("SLUICE_FUZZ_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .expect("SLUICE_FUZZ_SEED is an unsigned integer"),
        Err(_) => rand::random::<u32>() as u64,
    };
    eprintln!("charsets: seed {seed} (SLUICE_FUZZ_SEED={seed} repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    db.sql("CREATE DATABASE shop;");
    // The characters of each charset, as the server lists them.
    let mut alphabets: Vec<(&str, Vec<Vec<u8>>)> = Vec::new();
    for cs in MULTIBYTE {
        let mut chars: Vec<Vec<u8>> = db
            .query_rows(&format!(
                "SELECT HEX(b) FROM (SELECT CONCAT(CHAR(a.seq), CHAR(c.seq)) b \
                 FROM shop.seq_129_to_254 a, shop.seq_64_to_254 c \
                 UNION ALL SELECT CHAR(seq) FROM shop.seq_128_to_255) s \
                 WHERE CHAR_LENGTH(CAST(b AS CHAR CHARACTER SET {cs})) = 1 \
                 AND CONVERT(CAST(b AS CHAR CHARACTER SET {cs}) USING utf8mb4) <> '?'"
            ))
            .into_iter()
            .map(|r| {
                let h = r[0].clone().unwrap();
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect();
        assert!(chars.len() > 1000, "{cs}: {} characters", chars.len());
        chars.extend(b"aZ09 _-'\\".iter().map(|b| vec![*b]));
        alphabets.push((cs, chars));
    }
    let mut ddl = String::new();
    for (cs, _) in &alphabets {
        ddl.push_str(&format!(
            "CREATE TABLE shop.r_{cs} (id INT PRIMARY KEY, v VARCHAR(30) CHARACTER SET {cs}) ;\n"
        ));
    }
    db.sql(&ddl);
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    let mut dml = String::from("SET SESSION sql_mode = 'STRICT_ALL_TABLES';\n");
    for (cs, chars) in &alphabets {
        let random_value = |rng: &mut StdRng| {
            if rng.gen_bool(0.05) {
                return "NULL".to_string();
            }
            let n = rng.gen_range(0..=30);
            let bytes: Vec<u8> = (0..n)
                .flat_map(|_| chars.choose(rng).unwrap().clone())
                .collect();
            format!("CAST(x'{}' AS CHAR CHARACTER SET {cs})", hex(&bytes))
        };
        for id in 0..150 {
            dml.push_str(&format!(
                "INSERT INTO shop.r_{cs} VALUES ({id}, {});\n",
                random_value(&mut rng)
            ));
        }
        for _ in 0..60 {
            let id = rng.gen_range(0..150);
            if rng.gen_bool(0.2) {
                dml.push_str(&format!("DELETE FROM shop.r_{cs} WHERE id = {id};\n"));
            } else {
                dml.push_str(&format!(
                    "UPDATE shop.r_{cs} SET v = {} WHERE id = {id};\n",
                    random_value(&mut rng)
                ));
            }
        }
    }
    db.sql(&dml);
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let mut problems = Vec::new();
    for (cs, _) in &alphabets {
        compare(
            &db,
            &lake,
            &format!("r_{cs}"),
            &format!("seed {seed}"),
            &mut problems,
        );
        // Every update's before image is decoded as exactly.
        let name = format!("shop.r_{cs}");
        let mut held: BTreeMap<String, Option<String>> = BTreeMap::new();
        for r in lake.rows(&name) {
            let id = r.values[0].clone().unwrap();
            if let Some(before) = &r.before {
                if held.get(&id) != Some(&before[1]) {
                    problems.push(format!(
                        "seed {seed} {name} id {id}: _before {:?}, replay {:?}",
                        before[1],
                        held.get(&id)
                    ));
                }
            }
            match r.op.as_str() {
                "delete" => held.remove(&id),
                _ => held.insert(id, r.values[1].clone()),
            };
        }
    }
    report(
        &mut problems,
        &format!("seed {seed} (SLUICE_FUZZ_SEED={seed} repeats it)"),
    );
}
