//! The DDL corpus against a real MariaDB: table-shape statements of
//! tests/data/ddl_corpus.jsonl (hand-written forms, then the CREATE / ALTER /
//! RENAME / DROP / TRUNCATE TABLE statements of MariaDB's own test suite that
//! succeed on a fresh server; tests/data/ddl_corpus.py regenerates it) are run
//! in order, with a row inserted into every table whose shape changed.
//! `check_corpus` runs any part of it: the hand-written forms alone, and the
//! whole corpus (1,891 statements, about 2 min on a 2-core machine). sluice
//! replays the whole binlog once; then the shape it recorded at the position
//! right after each statement must equal the server's shape at that moment
//! (column names in order, types, nullability, primary key, charset, and the
//! row key: the primary key or the unique key the server uses in its place),
//! and at
//! the end every table's rows, replayed from the lake, must equal the server's,
//! and so must its current-state table (every table with a row key). Each
//! test file works in a database of its own that no later file touches, so
//! the end of the run is the end of each test file for its tables.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use serde_json::Value;

const CORPUS: &str = include_str!("../data/ddl_corpus.jsonl");
const SETUP: &str = include_str!("../data/ddl_corpus_setup.sql");
/// Steps of the final phase are numbered from here on.
const FINAL_STEP: usize = 1_000_000;

struct Entry {
    db: String,
    src: String,
    sql: String,
    tables: Vec<String>,
}

fn corpus() -> Vec<Entry> {
    CORPUS
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("corpus line is JSON");
            Entry {
                db: v["db"].as_str().unwrap().to_owned(),
                src: v["src"].as_str().unwrap().to_owned(),
                sql: v["sql"].as_str().unwrap().to_owned(),
                tables: v["tables"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect(),
            }
        })
        .collect()
}

fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// One column as the comparison sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Col {
    name: String,
    mysql_type: String,
    nullable: bool,
    primary_key: bool,
    charset: Option<String>,
    /// A column of the key rows are told apart by: the primary key, else the
    /// unique key the server uses in its place (`COLUMN_KEY = 'PRI'`); for
    /// sluice, `TableSchema::fold_key` of the recorded version.
    row_key: bool,
}

/// Splits `base(args) rest` of a type text, lower-cased outside quotes.
fn split_type(t: &str) -> (String, Option<String>, String) {
    let t = t.trim();
    let Some(open) = t.find('(') else {
        let lower = t.to_ascii_lowercase();
        let (base, rest) = split_words(&lower);
        return (base, None, rest);
    };
    let mut depth = 0;
    let mut quote = None;
    let mut close = t.len();
    let chars: Vec<(usize, char)> = t.char_indices().collect();
    let mut k = 0;
    while k < chars.len() {
        let (i, c) = chars[k];
        if i >= open {
            match (quote, c) {
                (Some(q), c) if c == q => {
                    if chars.get(k + 1).map(|x| x.1) == Some(q) {
                        k += 1;
                    } else {
                        quote = None;
                    }
                }
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') => {
                    depth -= 1;
                    if depth == 0 {
                        close = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        k += 1;
    }
    let base = t[..open].trim().to_ascii_lowercase();
    let args = t[open + 1..close].to_string();
    let rest = t.get(close + 1..).unwrap_or("").trim().to_ascii_lowercase();
    (base, Some(args), rest)
}

/// Multi-word base types (`double precision`, `national char`, `long varchar`).
fn split_words(lower: &str) -> (String, String) {
    let words: Vec<&str> = lower.split_whitespace().collect();
    for n in (1..=3).rev() {
        if words.len() >= n {
            let base = words[..n].join(" ");
            if n == 1 || canonical_base(&base) != base {
                return (base, words[n..].join(" "));
            }
        }
    }
    (String::new(), String::new())
}

fn canonical_base(base: &str) -> String {
    match base {
        "integer" | "int4" => "int",
        "int1" => "tinyint",
        "int2" => "smallint",
        "int3" | "middleint" => "mediumint",
        "int8" => "bigint",
        "bool" | "boolean" => "tinyint",
        "dec" | "numeric" | "fixed" => "decimal",
        "real" | "double precision" | "float8" => "double",
        "float4" => "float",
        "character" | "nchar" | "national char" | "national character" => "char",
        "nvarchar"
        | "national varchar"
        | "character varying"
        | "nchar varchar"
        | "national character varying"
        | "varcharacter" => "varchar",
        "long varchar" | "long" => "mediumtext",
        "long varbinary" => "mediumblob",
        "json" => "longtext",
        other => other,
    }
    .to_owned()
}

/// The canonical text of a column type, so that the server's `COLUMN_TYPE`
/// (`int(11) unsigned`) and a DDL spelling (`INTEGER UNSIGNED`) compare equal
/// while any real difference (length, precision, labels, text size) does not.
fn canonical_type(t: &str) -> String {
    let (base, args, rest) = split_type(t);
    let (base, rest) = if args.is_none() {
        (base, rest)
    } else {
        split_words(&format!("{base} {rest}"))
    };
    let unsigned = rest
        .split_whitespace()
        .any(|w| w == "unsigned" || w == "zerofill");
    let mut base = canonical_base(&base);
    let mut args = args.map(|a| a.trim().to_owned());
    if t.trim().eq_ignore_ascii_case("serial") {
        return "bigint unsigned".into();
    }
    match base.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => args = None,
        "decimal" => {
            let nums: Vec<String> = args
                .as_deref()
                .unwrap_or("10")
                .split(',')
                .map(|n| n.trim().to_owned())
                .collect();
            args = Some(format!(
                "{},{}",
                nums[0],
                nums.get(1).cloned().unwrap_or_else(|| "0".into())
            ));
        }
        "float" => {
            if let Some(a) = &args {
                if !a.contains(',') {
                    let p: u32 = a.parse().unwrap_or(0);
                    if p > 24 {
                        base = "double".into();
                    }
                    args = None;
                }
            }
        }
        "char" | "binary" | "bit" => {
            args.get_or_insert_with(|| "1".into());
        }
        "datetime" | "timestamp" | "time" if args.as_deref() == Some("0") => args = None,
        "year" => args = None,
        "enum" | "set" => {
            let labels = parse_labels(args.as_deref().unwrap_or(""));
            args = Some(
                labels
                    .iter()
                    .map(|l| format!("'{}'", l.replace('\'', "''")))
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        _ => {}
    }
    let mut out = base;
    if let Some(a) = args {
        out.push('(');
        out.push_str(&a.split(',').map(str::trim).collect::<Vec<_>>().join(","));
        out.push(')');
    }
    if unsigned {
        out.push_str(" unsigned");
    }
    out
}

fn parse_labels(args: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut chars = args.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' || c == '"' {
            let mut label = String::new();
            while let Some(ch) = chars.next() {
                if ch == c && chars.peek() == Some(&c) {
                    chars.next();
                    label.push(c);
                } else if ch == c {
                    break;
                } else if ch == '\\' {
                    if let Some(e) = chars.next() {
                        label.push(e);
                    }
                } else {
                    label.push(ch);
                }
            }
            labels.push(label);
        }
    }
    labels
}

fn server_col(fields: &[Option<String>]) -> Col {
    let f = |i: usize| fields[i].clone().unwrap_or_default();
    Col {
        name: f(3),
        mysql_type: canonical_type(&f(4)),
        nullable: f(5) == "YES",
        primary_key: f(6) == "PRI",
        charset: Some(f(7)).filter(|c| c != "-"),
        row_key: f(8) == "KEY",
    }
}

/// The columns of a recorded version's row key: its primary key's, else
/// those of the first unique key (in the recorded order, the server's) that
/// has no prefix part, is no long hash key and has NOT NULL columns only.
fn recorded_row_key(version: &Value) -> BTreeSet<String> {
    let columns = version["columns"].as_array().unwrap();
    let name = |c: &Value| c.as_str().unwrap().to_ascii_lowercase();
    let pk: BTreeSet<String> = columns
        .iter()
        .filter(|c| c["primary_key"] == true)
        .map(|c| name(&c["name"]))
        .collect();
    if !pk.is_empty() {
        return pk;
    }
    let not_null = |n: &str| {
        columns
            .iter()
            .any(|c| name(&c["name"]) == n && c["nullable"] == false)
    };
    let keys = version["unique_keys"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    keys.iter()
        .map(|k| {
            (
                k,
                k["columns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(name)
                    .collect::<BTreeSet<String>>(),
            )
        })
        .find(|(k, cols)| {
            k["prefix"] == false && k["hash"] == false && cols.iter().all(|c| not_null(c))
        })
        .map(|(_, cols)| cols)
        .unwrap_or_default()
}

fn sluice_cols(version: &Value) -> Vec<Col> {
    let row_key = recorded_row_key(version);
    version["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Col {
            name: c["name"].as_str().unwrap().to_owned(),
            mysql_type: canonical_type(c["mysql_type"].as_str().unwrap()),
            nullable: c["nullable"].as_bool().unwrap(),
            primary_key: c["primary_key"].as_bool().unwrap(),
            charset: c["charset"].as_str().map(str::to_owned),
            row_key: row_key.contains(&c["name"].as_str().unwrap().to_ascii_lowercase()),
        })
        .collect()
}

/// The server's output of the script: per step, the binlog position after
/// the statement and the shapes of the tables whose shape changed.
#[derive(Default)]
struct Observed {
    position: BTreeMap<usize, (String, u64)>,
    shapes: BTreeMap<(usize, String, String), Vec<Col>>,
}

fn observe(out: &str, dbs: &BTreeMap<usize, String>, observed: &mut Observed) {
    let mut step = None;
    let mut last = None;
    for line in out.lines() {
        let fields: Vec<Option<String>> = line
            .split('\t')
            .map(|f| (f != "NULL").then(|| f.to_owned()))
            .collect();
        match fields[0].as_deref() {
            Some("#step") => step = Some(fields[1].as_deref().unwrap().parse::<usize>().unwrap()),
            Some("#shape") => {
                let i: usize = fields[1].as_deref().unwrap().parse().unwrap();
                let key = (i, dbs[&i].clone(), fields[2].clone().unwrap());
                let columns = observed.shapes.entry(key.clone()).or_default();
                // A table printed again for the same step starts over.
                if last.as_ref() != Some(&key) {
                    columns.clear();
                }
                columns.push(server_col(&fields));
                last = Some(key);
                continue;
            }
            Some(f) if f.starts_with("binlog.") => {
                let i = step.expect("SHOW MASTER STATUS after a #step line");
                let pos = fields[1].as_deref().unwrap().parse().unwrap();
                observed.position.insert(i, (f.to_owned(), pos));
            }
            _ => {}
        }
        last = None;
    }
}

/// The version of a table's history in force at `(file, pos)`.
fn version_at<'a>(history: &'a [Value], file: &str, pos: u64) -> Option<&'a Value> {
    history
        .iter()
        .filter(|v| {
            let vf = v["position"]["file"].as_str().unwrap();
            let vp = v["position"]["pos"].as_u64().unwrap();
            (vf, vp) <= (file, pos)
        })
        .max_by_key(|v| {
            (
                v["position"]["file"].as_str().unwrap().to_owned(),
                v["position"]["pos"].as_u64().unwrap(),
                v["version"].as_u64().unwrap(),
            )
        })
}

/// The forms of issue 10 alone (tests/data/ddl_forms.sql): `IF [NOT] EXISTS`
/// on column, index, constraint and partition clauses (and their no-op
/// cases), `RENAME` without `TO`, `ORDER BY`, `CONVERT TO CHARACTER SET`
/// widening TINYTEXT/TEXT/MEDIUMTEXT, a CHAR length kept across a MODIFY of
/// another column, and the primary key after `DROP i, ADD i … AUTO_INCREMENT`.
#[test]
fn hand_written_alter_forms_follow_the_server() {
    let entries: Vec<Entry> = corpus()
        .into_iter()
        .filter(|e| e.src.starts_with("tests/data/ddl_forms.sql"))
        .collect();
    assert!(entries.len() >= 70, "{} hand-written forms", entries.len());
    for form in [
        "ADD COLUMN IF NOT EXISTS b BIGINT",
        "ALTER TABLE t RENAME t2",
        "ORDER BY a DESC, id",
        "ALTER TABLE w1 CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE w2 MODIFY n BIGINT NOT NULL",
        "DROP i, ADD i INT UNSIGNED NOT NULL AUTO_INCREMENT",
    ] {
        assert!(
            entries.iter().any(|e| e.sql.contains(form)),
            "no form with {form}"
        );
    }
    check_corpus(&entries, 7);
}

/// The whole corpus: the hand-written forms, then the table-shape statements
/// of MariaDB's own test suite (tests/data/ddl_corpus.py says which files and
/// which statements are left out). Every statement is read, and every shape
/// equals the server's.
#[test]
fn mariadb_test_suite_ddl_follows_the_server() {
    let entries = corpus();
    assert!(entries.len() >= 600, "{} statements", entries.len());
    check_corpus(&entries, 20);
}

/// Runs `entries` on a fresh server and sluice over its binlog, then compares
/// every shape and, at the end, every table's rows (at least `min_tables`).
fn check_corpus(entries: &[Entry], min_tables: usize) {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(SETUP);
    let databases: BTreeSet<&str> = entries.iter().map(|e| e.db.as_str()).collect();
    db.sql(
        &databases
            .iter()
            .map(|d| format!("CREATE DATABASE {d};\n"))
            .collect::<String>(),
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    sluice.include = vec![r"c[0-9]+\..*".into()];
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1h\"\n".into();

    // Every statement, its position, and a row in each changed shape.
    let mut script = String::new();
    let mut dbs = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        dbs.insert(i, e.db.clone());
        script.push_str(&format!(
            "USE {};\n{};\nSELECT '#step', {i};\nSHOW MASTER STATUS;\nCALL corpus_meta.after_ddl('{}', {i}, {});\n",
            e.db,
            e.sql,
            e.db,
            sql_text(&e.tables.join("/"))
        ));
    }
    let mut observed = Observed::default();
    observe(&db.sql(&script), &dbs, &mut observed);

    // The final phase: every table emptied and given two rows in its last
    // shape. System-versioned tables cannot be truncated (and a DELETE keeps
    // their rows as history), and a MERGE table holds no rows of its own (its
    // underlying tables may no longer match it): their shapes are compared
    // above, not their rows.
    let alive = db.query_rows(
        "SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA RLIKE '^c[0-9]+$' AND TABLE_TYPE = 'BASE TABLE' \
         AND ENGINE <> 'MRG_MyISAM' ORDER BY 1, 2",
    );
    let mut final_script = String::from("SET foreign_key_checks = 0;\n");
    let mut final_tables = Vec::new();
    for (k, row) in alive.iter().enumerate() {
        let (d, t) = (row[0].clone().unwrap(), row[1].clone().unwrap());
        let i = FINAL_STEP + k;
        dbs.insert(i, d.clone());
        // Emptied first, so that the replay holds rows in the last shape only.
        final_script.push_str(&format!(
            "TRUNCATE TABLE `{d}`.`{}`;\nSELECT '#step', {i};\nSHOW MASTER STATUS;\n",
            t.replace('`', "``")
        ));
        for _ in 0..2 {
            final_script.push_str(&format!(
                "DELETE FROM corpus_meta.seen WHERE db = '{d}' AND tbl = {t_text};\n\
                 CALL corpus_meta.after_ddl('{d}', {i}, {t_text});\nSELECT '#next';\n",
                t_text = sql_text(&t)
            ));
        }
        // BLACKHOLE keeps no rows, though the binlog has them.
        if row[2].as_deref() != Some("BLACKHOLE") {
            final_tables.push((i, d, t));
        }
    }
    observe(&db.sql(&final_script), &dbs, &mut observed);

    let out = sluice.run_until_caught_up();
    assert!(
        out.status.success(),
        "sluice could not follow the corpus: {}",
        last_stderr_line(&out)
    );

    // Shapes: after every statement, the version in force equals the server's.
    let mut histories: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for ((i, d, t), server) in &observed.shapes {
        let history = histories.entry((d.clone(), t.clone())).or_insert_with(|| {
            let out = sluice.run_args(&["schema", "history"], &[&format!("{d}.{t}"), "--json"]);
            if !out.status.success() {
                return Vec::new();
            }
            serde_json::from_slice::<Value>(&out.stdout)
                .unwrap()
                .as_array()
                .unwrap()
                .clone()
        });
        let (file, pos) = &observed.position[i];
        // Just before the end of the statement: the next transaction starts at `pos`.
        let ours = version_at(history, file, pos - 1).map(sluice_cols);
        checked += 1;
        if ours.as_ref() != Some(server) {
            let what = entries
                .get(*i)
                .map(|e| format!("{} `{}`", e.src, e.sql))
                .unwrap_or_else(|| "final phase".into());
            mismatches.push(format!(
                "{d}.{t} after {what}:\n  server {server:?}\n  sluice {ours:?}"
            ));
        }
    }
    // `schema show --at` answers the same as the history for a sample of the points.
    for ((i, d, t), _) in observed.shapes.iter().step_by(40) {
        let (file, pos) = &observed.position[i];
        let out = sluice.run_args(
            &["schema", "show"],
            &[
                &format!("{d}.{t}"),
                "--at",
                &format!("{file}:{}", pos - 1),
                "--json",
            ],
        );
        assert!(
            out.status.success(),
            "schema show failed: {}",
            last_stderr_line(&out)
        );
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        let from_history = version_at(&histories[&(d.clone(), t.clone())], file, pos - 1).unwrap();
        assert_eq!(
            shown["version"], from_history["version"],
            "{d}.{t} at {file}:{pos}"
        );
        assert_eq!(sluice_cols(&shown), sluice_cols(from_history));
    }
    for m in &mismatches {
        eprintln!("differs: {m}");
    }
    eprintln!(
        "ddl corpus: {} statements, {} shapes checked, {} differ",
        entries.len(),
        checked,
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} of {checked} shapes differ from the server's; the first ones:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(25)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Rows: each remaining table replayed from the lake equals the server's rows.
    let lake = Lake::read_committed(lake_dir.path());
    let mut compared = 0;
    let mut current_compared = 0;
    for (i, d, t) in &final_tables {
        let server_shape = &observed.shapes[&(*i, d.clone(), t.clone())];
        let select: Vec<String> = server_shape
            .iter()
            .map(|c| select_expr(&c.name, &c.mysql_type))
            .collect();
        let source = multiset(db.query_rows(&format!(
            "SELECT {} FROM `{d}`.`{}`",
            select.join(", "),
            t.replace('`', "``")
        )));
        let table = format!("{d}.{t}");
        let rows = lake.rows(&table);
        let replayed = replay_multiset(&rows);
        assert_eq!(
            multiset(replayed),
            source,
            "{table}: the lake's rows differ from the server's"
        );
        compared += 1;
        // The current-state table: every table with a row key has one.
        let current = lake_dir.path().join("_current").join(d).join(t);
        if server_shape.iter().any(|c| c.row_key) {
            let rows = current_table_rows(&current, server_shape.len())
                .unwrap_or_else(|| panic!("{table} has a row key but no current table"));
            assert_eq!(
                multiset(rows),
                source,
                "{table}: the current table differs from the server's rows"
            );
            current_compared += 1;
        }
    }
    eprintln!(
        "ddl corpus: {compared} tables' rows and {current_compared} current tables equal the server's"
    );
    assert!(compared >= min_tables, "only {compared} tables compared");
    assert!(
        current_compared * 4 >= compared,
        "only {current_compared} current tables compared"
    );
}

/// The rows of the latest version of a current-state table (its first
/// `columns` columns, rendered as `mysql_text` renders them), from the files
/// its Delta log names; `None` when it has no log.
fn current_table_rows(dir: &std::path::Path, columns: usize) -> Option<Vec<Vec<Option<String>>>> {
    if !dir.join("_delta_log").exists() {
        return None;
    }
    let mut live = BTreeSet::new();
    for (_, actions) in crate::delta::delta_commits(dir) {
        for a in actions {
            if let Some(path) = a["add"]["path"].as_str() {
                live.insert(percent_decoded(path));
            } else if let Some(path) = a["remove"]["path"].as_str() {
                live.remove(&percent_decoded(path));
            }
        }
    }
    let mut rows = Vec::new();
    for path in live {
        let file = std::fs::File::open(dir.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            for i in 0..batch.num_rows() {
                rows.push(
                    (0..columns)
                        .map(|c| mysql_text(batch.column(c).as_ref(), i))
                        .collect(),
                );
            }
        }
    }
    Some(rows)
}

/// A Delta `add`/`remove` path (a URI path, percent-encoded) as a file path.
fn percent_decoded(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&path[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).expect("a UTF-8 path")
}

/// A SELECT expression that the `mariadb` client prints the way `mysql_text`
/// renders the lake's value.
fn select_expr(name: &str, canonical: &str) -> String {
    let c = format!("`{}`", name.replace('`', "``"));
    let base = canonical.split('(').next().unwrap_or("");
    let base = base.split_whitespace().next().unwrap_or("");
    match base {
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "geometry"
        | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" => format!("HEX({c})"),
        "bit" | "year" => format!("{c} + 0"),
        "datetime" | "timestamp" => format!("DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')"),
        "time" => format!("TIME_FORMAT({c}, '%H:%i:%s.%f')"),
        _ => c,
    }
}

/// The lake's change rows replayed as a multiset of rows (tables may lack a key).
fn replay_multiset(rows: &[Row]) -> Vec<Vec<Option<String>>> {
    let mut out: Vec<Vec<Option<String>>> = Vec::new();
    for r in rows {
        match r.op.as_str() {
            "insert" => out.push(r.values.clone()),
            // A re-read after DDL the binlog cannot replay is placed where it
            // was read, after the later changes the stream carries: its rows
            // put-or-replace (by key, which a multiset does not know; the
            // corpus's final rows differ from each other, so an equal row is
            // the same row).
            "snapshot" => {
                if !out.contains(&r.values) {
                    out.push(r.values.clone())
                }
            }
            "update" => {
                let before = r.before.as_ref().expect("update has a before image");
                if let Some(k) = out.iter().position(|x| x == before) {
                    out.remove(k);
                }
                out.push(r.values.clone());
            }
            "delete" => {
                if let Some(k) = out.iter().position(|x| x == &r.values) {
                    out.remove(k);
                }
            }
            "truncate" => out.clear(),
            other => panic!("unexpected _op {other}"),
        }
    }
    out
}

fn multiset(mut rows: Vec<Vec<Option<String>>>) -> Vec<Vec<Option<String>>> {
    rows.sort();
    rows
}
