//! Schema churn (issue 42): seeded random sequences over a few reused names
//! of CREATE, DROP and RENAME TABLE and ADD, DROP, MODIFY and CHANGE COLUMN
//! with types of every family, rows between them, across several
//! `run --until-caught-up` and a kill -9. At the end no Delta log and no
//! current table is behind (`status`, and the exit code of every run), every
//! current table equals `SELECT *` in deltalake, Polars, DuckDB and Spark,
//! every changelog replays (by the manifests, across renames) to the source,
//! and every changelog's Delta table, its columns in their changelog
//! supertypes, reads alike in the four readers with every committed row.
//! `SLUICE_TEST_SEED` replays a run; the seed is printed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::delta::{read_delta, ALL_READERS};
use crate::renames::assert_lake_equals_source;

const NAMES: &[&str] = &["t0", "t1", "t2"];

/// Types of every family whose values the server, the lake and the readers
/// print alike; `value` gives a literal of the type from a number.
const TYPES: &[&str] = &[
    "INT",
    "BIGINT",
    "BIGINT UNSIGNED",
    "DECIMAL(10,2)",
    "DECIMAL(30,4)",
    "VARCHAR(40)",
    "TEXT",
    "VARBINARY(40)",
    "BLOB",
    "DATE",
    "DATETIME(6)",
];

fn value(ty: &str, n: u64) -> String {
    match ty {
        "INT" => format!("{}", n as i64 % 100_000 - 50_000),
        "BIGINT" => format!("{}", (n as i64 % 1000 - 500) * 1_000_000_007),
        "BIGINT UNSIGNED" => format!("{}", n % 1_000_000 * 18_000_000_000_000),
        "DECIMAL(10,2)" => format!("{}.{:02}", n as i64 % 100_000 - 50_000, n % 100),
        "DECIMAL(30,4)" => format!("{}{:010}.{:04}", n % 97, n % 1_000_000_007, n % 10_000),
        "VARCHAR(40)" | "TEXT" => format!("'s{n}'"),
        "VARBINARY(40)" | "BLOB" => format!("'b{n}'"),
        "DATE" => format!("'2024-{:02}-{:02}'", 1 + n % 12, 1 + n % 28),
        "DATETIME(6)" => format!(
            "'2024-03-{:02} {:02}:{:02}:{:02}'",
            1 + n % 28,
            n % 24,
            n % 60,
            n % 59
        ),
        other => panic!("no values of {other}"),
    }
}

/// Whether MODIFY from `from` to `to` converts every value of `from` this
/// test writes into a value the server prints as `to` would (no zero
/// dates, no strings that are no numbers).
fn convertible(from: &str, to: &str) -> bool {
    let numeric = |t: &str| t.contains("INT") || t.starts_with("DECIMAL");
    let text = |t: &str| t.starts_with("VARCHAR") || t == "TEXT";
    let bytes = |t: &str| t.starts_with("VARBINARY") || t == "BLOB";
    let temporal = |t: &str| t == "DATE" || t == "DATETIME(6)";
    match (from, to) {
        // Negative values do not fit an unsigned column.
        (_, "BIGINT UNSIGNED") => from == "BIGINT UNSIGNED",
        // Wide values do not fit the narrow ones.
        ("BIGINT" | "BIGINT UNSIGNED" | "DECIMAL(30,4)", "INT" | "DECIMAL(10,2)") => false,
        ("DECIMAL(30,4)", "BIGINT") => false,
        (f, t) if numeric(f) && numeric(t) => true,
        (f, t) if temporal(f) && temporal(t) => true,
        (_, t) if text(t) || bytes(t) => true,
        _ => false,
    }
}

struct Table {
    /// Column name and type, `id INT` first.
    columns: Vec<(String, &'static str)>,
    next_id: u64,
}

struct Churn {
    rng: Box<dyn FnMut(u64) -> u64>,
    tables: BTreeMap<&'static str, Table>,
    column_counter: u64,
    values: u64,
}

impl Churn {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.rng)(items.len() as u64) as usize]
    }

    fn row(&mut self, t: &Table, id: u64) -> String {
        let mut out = vec![id.to_string()];
        for (_, ty) in &t.columns[1..] {
            self.values += 1;
            let n = (self.rng)(1_000_000) + self.values;
            out.push(if (self.rng)(10) == 0 {
                "NULL".into()
            } else {
                value(ty, n)
            });
        }
        format!("({})", out.join(", "))
    }

    fn create(&mut self, name: &'static str) -> String {
        let n = 1 + (self.rng)(3);
        let mut columns = vec![("id".to_string(), "INT")];
        for _ in 0..n {
            self.column_counter += 1;
            let ty = self.pick(TYPES);
            columns.push((format!("c{}", self.column_counter), ty));
        }
        let defs: Vec<String> = columns
            .iter()
            .map(|(c, t)| match c.as_str() {
                "id" => "id INT PRIMARY KEY".to_string(),
                _ => format!("{c} {t}"),
            })
            .collect();
        let mut t = Table {
            columns,
            next_id: 1,
        };
        let rows: Vec<String> = (0..5)
            .map(|_| {
                let id = t.next_id;
                t.next_id += 1;
                self.row(&t, id)
            })
            .collect();
        let sql = format!(
            "CREATE TABLE shop.{name} ({}); INSERT INTO shop.{name} VALUES {};",
            defs.join(", "),
            rows.join(", ")
        );
        self.tables.insert(name, t);
        sql
    }

    /// One random statement (or a few rows), as SQL.
    fn step(&mut self) -> String {
        let free: Vec<&'static str> = NAMES
            .iter()
            .copied()
            .filter(|n| !self.tables.contains_key(n))
            .collect();
        let held: Vec<&'static str> = self.tables.keys().copied().collect();
        if held.is_empty() {
            let name = self.pick(&free);
            return self.create(name);
        }
        let name = self.pick(&held);
        match (self.rng)(12) {
            0 if !free.is_empty() => {
                let to = self.pick(&free);
                let t = self.tables.remove(name).unwrap();
                self.tables.insert(to, t);
                format!("RENAME TABLE shop.{name} TO shop.{to};")
            }
            1 => {
                self.tables.remove(name);
                let sql = format!("DROP TABLE shop.{name};");
                // The name is reused at once, with other types.
                format!("{sql} {}", self.create(name))
            }
            2 | 3 => {
                self.column_counter += 1;
                let ty = self.pick(TYPES);
                let c = format!("c{}", self.column_counter);
                self.tables
                    .get_mut(name)
                    .unwrap()
                    .columns
                    .push((c.clone(), ty));
                format!("ALTER TABLE shop.{name} ADD COLUMN {c} {ty};")
            }
            4 if self.tables[name].columns.len() > 2 => {
                let i = 1 + (self.rng)(self.tables[name].columns.len() as u64 - 1) as usize;
                let (c, _) = self.tables.get_mut(name).unwrap().columns.remove(i);
                format!("ALTER TABLE shop.{name} DROP COLUMN {c};")
            }
            5..=7 => {
                let i = 1 + (self.rng)(self.tables[name].columns.len() as u64 - 1) as usize;
                let from = self.tables[name].columns[i].1;
                let to = self.pick(TYPES);
                if !convertible(from, to) {
                    return self.rows(name);
                }
                let old = self.tables[name].columns[i].0.clone();
                if (self.rng)(2) == 0 {
                    self.tables.get_mut(name).unwrap().columns[i].1 = to;
                    format!("ALTER TABLE shop.{name} MODIFY {old} {to};")
                } else {
                    self.column_counter += 1;
                    let new = format!("c{}", self.column_counter);
                    self.tables.get_mut(name).unwrap().columns[i] = (new.clone(), to);
                    format!("ALTER TABLE shop.{name} CHANGE {old} {new} {to};")
                }
            }
            _ => self.rows(name),
        }
    }

    /// Inserts, updates and deletes of `name`'s rows.
    fn rows(&mut self, name: &'static str) -> String {
        let mut t = self.tables.remove(name).unwrap();
        let mut sql = String::new();
        let inserts: Vec<String> = (0..1 + (self.rng)(4))
            .map(|_| {
                let id = t.next_id;
                t.next_id += 1;
                self.row(&t, id)
            })
            .collect();
        sql += &format!("INSERT INTO shop.{name} VALUES {};", inserts.join(", "));
        if t.columns.len() > 1 {
            let (c, ty) = t.columns[1 + (self.rng)(t.columns.len() as u64 - 1) as usize].clone();
            let v = value(ty, (self.rng)(1_000_000));
            sql += &format!(
                "UPDATE shop.{name} SET {c} = {v} WHERE id % 3 = {};",
                (self.rng)(3)
            );
        }
        sql += &format!(
            "DELETE FROM shop.{name} WHERE id = {};",
            1 + (self.rng)(t.next_id)
        );
        self.tables.insert(name, t);
        sql
    }
}

/// Rows with decimals compared by value: readers give a DECIMAL at its
/// scale or not (`2.50`, `2.5`).
fn plain(rows: &[Vec<Option<String>>]) -> Vec<Vec<Option<String>>> {
    let decimal = regex::Regex::new(r"^-?[0-9]+\.[0-9]+$").unwrap();
    rows.iter()
        .map(|r| {
            r.iter()
                .map(|v| {
                    v.as_ref().map(|v| match decimal.is_match(v) {
                        true => v.trim_end_matches('0').trim_end_matches('.').to_string(),
                        false => v.clone(),
                    })
                })
                .collect()
        })
        .collect()
}

fn run_ok(sluice: &Sluice, seed: u64) {
    let out = sluice.run_until_caught_up();
    assert!(
        out.status.success(),
        "run exited {:?} (SLUICE_TEST_SEED={seed}):\n{}",
        out.status.code(),
        tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
}

#[test]
fn random_schema_churn_leaves_no_table_behind() {
    let (seed, rng) = seeded_rng(0x5c4e_3a11);
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop;");
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.interval = "300ms".into();
    let mut churn = Churn {
        rng: Box::new(rng),
        tables: BTreeMap::new(),
        column_counter: 0,
        values: 0,
    };
    let mut did: Vec<String> = Vec::new();
    for round in 0..6 {
        let mut script = String::new();
        for _ in 0..8 {
            let sql = churn.step();
            script += &sql;
            script.push('\n');
            did.push(sql);
        }
        db.sql(&script);
        if round == 3 {
            // A kill -9 after some checkpoint of this round. The count is
            // taken before the start: a loaded machine may let the run
            // commit this round's only checkpoint before a later count.
            let before = Lake::read_committed(lake.path()).manifests.len();
            let mut running = sluice.spawn_run(false);
            let committed = wait_until(Duration::from_secs(30), || {
                Lake::read_committed(lake.path()).manifests.len() > before
            });
            assert!(committed, "no checkpoint:\n{}", running.log_tail(30));
            running.kill();
        }
        run_ok(&sluice, seed);
    }
    let what = format!("SLUICE_TEST_SEED={seed} after {did:#?}");
    let status = sluice.status_json();
    assert_eq!(
        status["delta_lag"],
        serde_json::json!({}),
        "{what}\n{status:#}"
    );
    for (table, c) in status["current_tables"].as_object().unwrap() {
        assert_eq!(c["lag_manifests"], 0, "_current/{table} is behind: {what}");
    }
    assert_lake_equals_source(&what, lake.path(), &db, NAMES, &|_| true);

    // Every changelog's Delta table: all its columns, in four readers, with
    // every committed row of its folder.
    let committed = Lake::read(lake.path());
    let shop = db.namespace().to_server("shop").into_owned();
    for entry in std::fs::read_dir(lake.path().join(&shop))
        .unwrap()
        .flatten()
    {
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let schema = read_delta(
            &dir.display().to_string(),
            &["_seq"],
            None,
            &Value::Null,
            "deltalake",
        )
        .schema;
        let columns: Vec<&str> = schema
            .iter()
            .map(String::as_str)
            .filter(|c| *c != "_before")
            .collect();
        let read = read_delta(
            &dir.display().to_string(),
            &columns,
            None,
            &Value::Null,
            ALL_READERS,
        );
        let rows = committed.row_count(&format!("shop.{name}"));
        let first = plain(&read.rows["deltalake"]);
        assert_eq!(
            first.len() as u64,
            rows,
            "shop.{name}: rows of the Delta table vs the manifests ({what})"
        );
        for (reader, r) in &read.rows {
            assert_eq!(
                plain(r),
                first,
                "shop.{name}: {reader} vs deltalake ({what})"
            );
        }
    }
}
