//! Column policies at ingest (DESIGN.md "Column policies and erasure"):
//! `[[columns]]` entries hash, mask, truncate and exclude columns of every
//! type family in snapshot rows, stream rows, `_before`, the rows re-read
//! after an ALTER, the current table and the Delta statistics, as
//! `deltalake`, Polars, DuckDB and Spark read them; `_sql` is null for the
//! policed table; no raw value of a policed column (seeded random
//! tokens) is anywhere in the lake or the state dir; the schema history and
//! `schema show` name each column's policy and lake type; a policy changed
//! between runs applies from the next run's first checkpoint, which the
//! manifest notes; a policy that cannot apply stops sluice with one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use serde_json::Value;
use sha2::Digest;

use crate::common::*;
use crate::delta::read_delta;

const READERS: &str = crate::delta::ALL_READERS;

const POLICIES: &str = r#"
[current]
enabled = true
refresh = "1s"

[[columns]]
match = 'shop\.people\.(id|email|born|price_h|doc_h|blob_h)'
action = "hash"

[[columns]]
match = 'shop\.people\.(amount|secret_m|born_m)'
action = "mask"

[[columns]]
match = 'shop\.people\.(name|photo|doc_t)'
action = { truncate = 3 }

[[columns]]
match = 'shop\.people\.(ssn|doc|n)'
action = "exclude"
"#;

/// HMAC-SHA256 (RFC 2104) over sha2 alone, as a user would compute it:
/// independent of the `hmac` crate sluice uses.
pub(crate) fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = sha2::Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = sha2::Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

/// A token no lake byte holds by chance.
fn token(rng: &mut rand::rngs::StdRng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let body: String = (0..20)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    format!("Zq{body}")
}

/// One state of a row of `shop.people`, as the test wrote it.
#[derive(Clone, Debug)]
struct Person {
    id: i64,
    email: String,
    born: String,
    price_h: String,
    doc_h: String,
    blob_h: String,
    amount: String,
    secret_m: String,
    name: String,
    photo: String,
    doc_t: String,
    ssn: String,
    doc: String,
    note: String,
}

impl Person {
    fn random(id: i64, rng: &mut rand::rngs::StdRng) -> Person {
        let prefix: String = (0..3)
            .map(|_| (b'a' + rng.gen_range(0..26u8)) as char)
            .collect();
        Person {
            id,
            email: format!("{}@example.com", token(rng)),
            born: format!(
                "19{:02}-0{}-1{} 0{}:1{}:2{}",
                rng.gen_range(10..99),
                rng.gen_range(1..9),
                rng.gen_range(0..9),
                rng.gen_range(0..9),
                rng.gen_range(0..9),
                rng.gen_range(0..9)
            ),
            price_h: format!("{}.{:02}", rng.gen_range(0..100000), rng.gen_range(0..100)),
            doc_h: format!("{{\"k\": \"{}\"}}", token(rng)),
            blob_h: token(rng),
            amount: format!("{}.{:02}", rng.gen_range(0..1000), rng.gen_range(0..100)),
            secret_m: token(rng),
            // Multibyte: truncate keeps characters, not bytes.
            name: format!("Ærø{}", token(rng)),
            photo: format!("{prefix}{}", token(rng)),
            doc_t: format!("{{\"t\": \"{}\"}}", token(rng)),
            ssn: token(rng),
            doc: format!("[\"{}\"]", token(rng)),
            note: format!("note {id}"),
        }
    }

    /// The raw values that must reach no byte of the lake.
    fn secrets(&self) -> Vec<String> {
        let tail = |s: &str| s.chars().skip(3).collect::<String>();
        vec![
            self.email.clone(),
            self.doc_h.clone(),
            self.blob_h.clone(),
            self.secret_m.clone(),
            tail(&self.name),
            tail(&self.photo),
            tail(&self.doc_t),
            self.ssn.clone(),
            self.doc.clone(),
        ]
    }

    fn values_sql(&self) -> String {
        format!(
            "({id}, '{email}', '{born}', {price_h}, '{doc_h}', '{blob_h}', {amount}, '{secret_m}', '{name}', '{photo}', '{doc_t}', '{ssn}', '{doc}', {id}, '{note}')",
            id = self.id,
            email = self.email,
            born = self.born,
            price_h = self.price_h,
            doc_h = self.doc_h,
            blob_h = self.blob_h,
            amount = self.amount,
            secret_m = self.secret_m,
            name = self.name,
            photo = self.photo,
            doc_t = self.doc_t,
            ssn = self.ssn,
            doc = self.doc,
            note = self.note,
        )
    }

    /// The columns read back, as the lake must hold them under the policies
    /// (`photo` as Python prints bytes).
    fn policed(&self, key: &[u8]) -> Vec<Option<String>> {
        let h = |s: &str| Some(hmac_hex(key, s.as_bytes()));
        let first3 = |s: &str| Some(s.chars().take(3).collect::<String>());
        vec![
            h(&self.id.to_string()),
            h(&self.email),
            h(&self.born),
            h(&self.price_h),
            h(&self.doc_h),
            h(&self.blob_h),
            None,
            None,
            None,
            first3(&self.name),
            Some(format!("b'{}'", &self.photo[..3])),
            first3(&self.doc_t),
            Some(self.note.clone()),
        ]
    }
}

const COLUMNS: [&str; 13] = [
    "id", "email", "born", "price_h", "doc_h", "blob_h", "amount", "secret_m", "born_m", "name",
    "photo", "doc_t", "note",
];

fn table_dir(lake: &Path, db: &MariaDb, table: &str) -> PathBuf {
    lake.join(db.namespace().to_server("shop").as_ref())
        .join(table)
}

/// Reads a Delta table with every reader; they must agree.
fn read_all(dir: &Path, columns: &[&str]) -> (Vec<String>, Vec<Vec<Option<String>>>) {
    let read = read_delta(
        &dir.display().to_string(),
        columns,
        None,
        &Value::Null,
        READERS,
    );
    assert_eq!(
        read.rows.len(),
        READERS.split(',').count(),
        "{dir:?}: a reader is missing"
    );
    let mut readers = read.rows.iter();
    let (first, rows) = readers.next().unwrap();
    for (name, other) in readers {
        assert_eq!(rows, other, "{dir:?}: {name} reads otherwise than {first}");
    }
    (read.schema, rows.clone())
}

/// Every file under `root` that holds one of `needles` (in its bytes or,
/// for Parquet, in its decoded values), and which.
fn files_holding(root: &Path, needles: &[String]) -> Vec<(PathBuf, String)> {
    let texts = lake_text(root);
    needles
        .iter()
        .flat_map(|n| {
            holding(&texts, n)
                .into_iter()
                .map(move |p| (p.to_path_buf(), n.clone()))
        })
        .collect()
}

fn insert(db: &MariaDb, people: &[Person]) {
    let values: Vec<String> = people.iter().map(Person::values_sql).collect();
    db.sql(&format!(
        "INSERT INTO shop.people (id, email, born, price_h, doc_h, blob_h, amount, secret_m, name, photo, doc_t, ssn, doc, n, note) VALUES {};",
        values.join(", ")
    ));
}

fn update(db: &MariaDb, p: &Person) {
    db.sql(&format!(
        "UPDATE shop.people SET email = '{}', born = '{}', price_h = {}, doc_h = '{}', blob_h = '{}', amount = {}, secret_m = '{}', name = '{}', photo = '{}', doc_t = '{}', ssn = '{}', doc = '{}', note = '{}' WHERE id = {};",
        p.email, p.born, p.price_h, p.doc_h, p.blob_h, p.amount, p.secret_m, p.name, p.photo,
        p.doc_t, p.ssn, p.doc, p.note, p.id
    ));
}

#[test]
fn policies_apply_to_snapshot_stream_before_and_current_and_leak_nothing() {
    let seed: u64 = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    println!("column policies: seed {seed} (SLUICE_TEST_SEED={seed} repeats it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let key = token(&mut rng);

    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.people (
           id INT PRIMARY KEY,
           email VARCHAR(80),
           born DATETIME,
           price_h DECIMAL(10,2),
           doc_h JSON,
           blob_h BLOB,
           amount DECIMAL(10,2) NOT NULL,
           secret_m VARCHAR(40) NOT NULL,
           born_m DATETIME NOT NULL DEFAULT '2001-02-03 04:05:06',
           name VARCHAR(60) CHARACTER SET utf8mb4,
           photo BLOB,
           doc_t JSON,
           ssn VARCHAR(40) NOT NULL,
           doc JSON,
           n INT,
           note VARCHAR(40)
         ) DEFAULT CHARSET = utf8mb4;
         CREATE TABLE shop.plain (id INT PRIMARY KEY, v VARCHAR(20));",
    );
    // Rows before sluice starts: the initial snapshot reads them.
    let mut states: BTreeMap<i64, Vec<Person>> = BTreeMap::new();
    let first: Vec<Person> = (1..=3).map(|id| Person::random(id, &mut rng)).collect();
    insert(&db, &first);
    for p in first {
        states.insert(p.id, vec![p]);
    }

    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.snapshot = "mode = \"initial\"".into();
    sluice.extra = POLICIES.into();
    sluice.env = vec![("SLUICE_COLUMN_KEY".into(), key.clone())];
    let out = sluice.run_until_caught_up_ok();
    let mut logs = String::from_utf8_lossy(&out.stderr).into_owned();

    // Stream rows: inserts, updates (a `_before` image) and a delete.
    let more: Vec<Person> = (4..=6).map(|id| Person::random(id, &mut rng)).collect();
    insert(&db, &more);
    for p in more {
        states.insert(p.id, vec![p]);
    }
    for id in [2, 5] {
        let mut next = Person::random(id, &mut rng);
        next.note = format!("note {id} updated");
        update(&db, &next);
        states.get_mut(&id).unwrap().push(next);
    }
    // An ALTER whose effect the binlog does not carry: a `truncate` marker
    // and a re-read of the table, under the same policies.
    db.sql(
        "DELETE FROM shop.people WHERE id = 3; INSERT INTO shop.plain VALUES (1, 'x');
         ALTER TABLE shop.people ADD COLUMN extra INT NOT NULL DEFAULT 5;",
    );
    let out = sluice.run_until_caught_up_ok();
    logs.push_str(&String::from_utf8_lossy(&out.stderr));

    // What `SELECT` prints is what is hashed.
    for r in db.query_rows("SELECT id, CAST(born AS CHAR), CAST(price_h AS CHAR) FROM shop.people")
    {
        let id: i64 = r[0].as_deref().unwrap().parse().unwrap();
        let p = states[&id].last().unwrap();
        assert_eq!(r[1].as_deref(), Some(p.born.as_str()));
        assert_eq!(r[2].as_deref(), Some(p.price_h.as_str()));
    }

    let k = key.as_bytes();
    let by_hash: BTreeMap<String, i64> = states
        .keys()
        .map(|id| (hmac_hex(k, id.to_string().as_bytes()), *id))
        .collect();

    // The changelog: every row policed, `_sql` null, excluded columns gone.
    let dir = table_dir(lake.path(), &db, "people");
    let mut columns = vec!["_seq", "_op", "_sql", "_before"];
    columns.extend(COLUMNS);
    let (schema, rows) = read_all(&dir, &columns);
    for gone in ["ssn", "doc", "n"] {
        assert!(!schema.iter().any(|c| c == gone), "{gone} in {schema:?}");
    }
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    let mut ops = Vec::new();
    let mut reread = false;
    for r in &rows {
        let op = r[1].clone().unwrap();
        ops.push(op.clone());
        assert_eq!(r[2], None, "_sql of a policed table: {r:?}");
        if op == "truncate" {
            reread = true;
            continue;
        }
        let id = by_hash[r[4].as_deref().unwrap()];
        let history = &states[&id];
        let n = seen.entry(id).or_default();
        let now = match op.as_str() {
            // The re-read after the ALTER reads the rows as they are now.
            "snapshot" if reread => history.last().unwrap(),
            "snapshot" | "insert" => &history[0],
            "update" => {
                *n += 1;
                let before = r[3].as_deref().expect("an update has a _before image");
                let was = history[*n - 1].policed(k);
                for (c, v) in COLUMNS.iter().zip(&was) {
                    let shown = match v {
                        None => format!("'{c}': None"),
                        Some(v) if *c == "photo" => format!("'{c}': {v}"),
                        Some(v) => format!("'{c}': '{v}'"),
                    };
                    assert!(before.contains(&shown), "_before lacks {shown}: {before}");
                }
                assert!(!before.contains("'ssn'"), "{before}");
                &history[*n]
            }
            "delete" => history.last().unwrap(),
            other => panic!("unexpected op {other}"),
        };
        assert_eq!(&r[4..], now.policed(k).as_slice(), "{op} row of id {id}");
    }
    ops.sort();
    ops.dedup();
    assert_eq!(ops, ["delete", "insert", "snapshot", "truncate", "update"]);
    assert!(reread, "the ALTER was not followed by a re-read");

    // The same statements kept their `_sql` for a table without a policy.
    let (_, plain) = read_all(&table_dir(lake.path(), &db, "plain"), &["_seq", "_sql"]);
    assert!(plain.iter().all(|r| r[1].is_some()), "{plain:?}");

    // The current table, keyed by the hashed id.
    let current = lake
        .path()
        .join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("people");
    let mut with_seq = COLUMNS.to_vec();
    with_seq.push("_seq");
    let (schema, rows) = read_all(&current, &with_seq);
    for gone in ["ssn", "doc", "n"] {
        assert!(!schema.iter().any(|c| c == gone), "{gone} in {schema:?}");
    }
    let mut got: Vec<Vec<Option<String>>> = rows
        .into_iter()
        .map(|r| r[..COLUMNS.len()].to_vec())
        .collect();
    let mut want: Vec<Vec<Option<String>>> = states
        .iter()
        .filter(|(id, _)| **id != 3)
        .map(|(_, h)| h.last().unwrap().policed(k))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "the current table");

    // Not one raw value of a policed column, nor the key, anywhere.
    let mut needles: Vec<String> = states
        .values()
        .flatten()
        .flat_map(Person::secrets)
        .collect();
    needles.push(key.clone());
    for root in [lake.path(), state.path()] {
        let hits = files_holding(root, &needles);
        assert!(hits.is_empty(), "seed {seed}: raw values found: {hits:?}");
    }
    assert!(!logs.contains(&key), "the key is in the log");

    // Delta statistics come from the written values: hashes, no raw bound.
    let hex = |v: &Value| {
        v.as_str()
            .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut stats_seen = 0;
    for (_, actions) in crate::delta::delta_commits(&dir) {
        for add in actions.iter().filter_map(|a| a.get("add")) {
            let Some(stats) = add["stats"].as_str() else {
                continue;
            };
            let stats: Value = serde_json::from_str(stats).unwrap();
            stats_seen += 1;
            for c in ["id", "email", "born", "price_h"] {
                let (lo, hi) = (&stats["minValues"][c], &stats["maxValues"][c]);
                if lo.is_null() {
                    // The file of the `truncate` marker: no value at all.
                    assert_eq!(stats["nullCount"][c], stats["numRecords"], "{c}: {stats}");
                    continue;
                }
                assert!(hex(lo) && hex(hi), "{c}: stats {lo} {hi} are no hashes");
            }
            for c in ["amount", "secret_m", "born_m"] {
                assert!(stats["minValues"][c].is_null(), "{c}: {stats}");
                assert_eq!(stats["nullCount"][c], stats["numRecords"], "{c}: {stats}");
            }
            for c in ["ssn", "doc", "n"] {
                assert!(stats["nullCount"].get(c).is_none(), "{c}: {stats}");
            }
        }
    }
    assert!(stats_seen > 0, "no add action carries stats");

    // The schema history: each column's policy and lake type.
    let out = sluice.run_args(&["schema", "show"], &["shop.people", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let column = |name: &str| {
        v["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(column("id")["policy"], "hash");
    assert_eq!(column("id")["arrow_type"], "Utf8");
    assert_eq!(column("amount")["policy"], "mask");
    assert_eq!(column("name")["policy"], "truncate(3)");
    assert_eq!(column("ssn")["policy"], "exclude");
    assert_eq!(column("note")["policy"], Value::Null);
    let text = sluice.run_args(&["schema", "show"], &["shop.people"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("policy") && text.contains("truncate(3)"),
        "{text}"
    );

    // A policy added later: from the next run's first checkpoint on, noted
    // in its manifest; rows written before keep what they hold.
    sluice.extra =
        format!("{POLICIES}\n[[columns]]\nmatch = 'shop\\.people\\.note'\naction = \"hash\"\n");
    db.sql("UPDATE shop.people SET note = 'later' WHERE id = 1;");
    sluice.run_until_caught_up_ok();
    let noted: Vec<Value> = manifest_paths(lake.path())
        .iter()
        .map(|p| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).unwrap())
        .filter(|m| m.get("column_policies").is_some())
        .collect();
    assert_eq!(noted.len(), 1, "one manifest notes the change");
    let entry = &noted[0]["column_policies"][0];
    assert_eq!(entry["column"], "note");
    assert_eq!(entry["from"], "none");
    assert_eq!(entry["to"], "hash");
    let (_, rows) = read_all(&dir, &["_seq", "_op", "note"]);
    let last = rows.last().unwrap();
    assert_eq!(last[2], Some(hmac_hex(k, b"later")), "{rows:?}");
    assert!(
        rows.iter().any(|r| r[2].as_deref() == Some("note 4")),
        "earlier rows keep theirs"
    );
}

#[test]
fn policies_that_cannot_apply_stop_sluice_with_one_line() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10), n INT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    for (columns, env, message) in [
        (
            "[[columns]]\nmatch = 'shop\\.t\\.id'\naction = \"exclude\"\n",
            true,
            "[[columns]] entry 1 (match 'shop\\.t\\.id'): shop.t.id is part of the key of shop.t, and a key column can only be hashed, not excluded",
        ),
        (
            "[[columns]]\nmatch = 'shop\\.t\\.v'\naction = \"hash\"\n[[columns]]\nmatch = 'shop\\.t\\.id'\naction = \"mask\"\n",
            true,
            "[[columns]] entry 2 (match 'shop\\.t\\.id'): shop.t.id is part of the key of shop.t, and a key column can only be hashed, not masked",
        ),
        (
            "[[columns]]\nmatch = 'shop\\.t\\.n'\naction = { truncate = 2 }\n",
            true,
            "[[columns]] entry 1 (match 'shop\\.t\\.n'): shop.t.n is int(11); truncate applies to text and binary columns only",
        ),
        (
            "[[columns]]\nmatch = 'shop\\.t\\.v'\naction = \"hash\"\n",
            false,
            "[[columns]] entry 1: action \"hash\" needs a key; set SLUICE_COLUMN_KEY or [column_key] file",
        ),
    ] {
        sluice.extra = columns.into();
        sluice.env = if env {
            vec![("SLUICE_COLUMN_KEY".into(), "k".into())]
        } else {
            Vec::new()
        };
        let out = sluice.run_until_caught_up();
        let line = assert_definite_error(&out);
        assert!(line.contains(message), "{line}");
    }
    // Nothing was written under a policy that could not apply.
    assert!(data_files(lake.path()).is_empty());
    // An entry that matches no column: a warning at start and in `check`.
    sluice.extra = "[[columns]]\nmatch = 'shop\\.t\\.v'\naction = \"mask\"\n[[columns]]\nmatch = 'shop\\.nope\\..*'\naction = \"mask\"\n".into();
    let out = sluice.run_args(&["check"], &[]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("[warn] column policies")
            && report.contains("entry 2 (match 'shop\\.nope\\..*') matches no column"),
        "{report}"
    );
    assert!(report.contains("[ok] column policies"), "{report}");
    let out = sluice.run_until_caught_up_ok();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("[[columns]] entry 2 matches no column"),
        "{log}"
    );
    // A DDL that makes an excluded column part of the key stops the stream
    // before any row of the new shape is written.
    sluice.extra = "[[columns]]\nmatch = 'shop\\.t\\.n'\naction = \"exclude\"\n".into();
    sluice.env = Vec::new();
    db.sql("INSERT INTO shop.t VALUES (1, 'a', 1);");
    sluice.run_until_caught_up_ok();
    db.sql(
        "ALTER TABLE shop.t DROP PRIMARY KEY, ADD PRIMARY KEY (id, n);
         INSERT INTO shop.t VALUES (2, 'b', 2);",
    );
    let out = sluice.run_until_caught_up();
    let line = assert_definite_error(&out);
    assert!(
        line.contains("shop.t.n is part of the key of shop.t, and a key column can only be hashed, not excluded"),
        "{line}"
    );
}

/// A watermark window compares the keys the stream changed with the chunk's
/// keys as the files hold them: here hashed, and in another place of the
/// file than in the table (an excluded column comes first). Rows changed
/// inside a window are left to the stream, and the replay by hashed key
/// equals the source.
#[test]
fn watermark_windows_compare_hashed_keys() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::snapshot::{
        all_done, feed_client, snapshot_state, stop_after_the_snapshot, HAMMER_CHANGES,
    };

    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.hot (w VARCHAR(20), id INT PRIMARY KEY, v INT NOT NULL);",
    );
    let rows = 20_000u64;
    let values: Vec<String> = (1..=rows).map(|i| format!("('r{i}', {i}, 0)")).collect();
    for chunk in values.chunks(5000) {
        db.sql(&format!("INSERT INTO shop.hot VALUES {};", chunk.join(",")));
    }
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 2000\nmethod = \"watermark\"".into();
    sluice.interval = "200ms".into();
    sluice.extra = "[[columns]]\nmatch = 'shop\\.hot\\.id'\naction = \"hash\"\n\
                    [[columns]]\nmatch = 'shop\\.hot\\.w'\naction = \"exclude\"\n"
        .into();
    let key = "watermark-key";
    sluice.env = vec![("SLUICE_COLUMN_KEY".into(), key.into())];
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let (client, ns, stop) = (
            client_command(db.socket()),
            db.namespace().clone(),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            let mut batches = 0;
            feed_client(client, &ns, &stop, move || {
                batches += 1;
                if batches * 50 > HAMMER_CHANGES {
                    return None;
                }
                let mut batch = String::new();
                for _ in 0..50 {
                    let id = rng.gen_range(1..=rows);
                    batch.push_str(&match rng.gen_range(0..10) {
                        0 => format!("DELETE FROM shop.hot WHERE id = {id};\n"),
                        1 => format!("REPLACE INTO shop.hot VALUES ('back', {id}, -1);\n"),
                        _ => format!("UPDATE shop.hot SET v = v + 1, w = 'u' WHERE id = {id};\n"),
                    });
                }
                Some(batch)
            }) * 50
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let run = sluice.spawn_run(false);
    let done = wait_until(Duration::from_secs(180), || {
        all_done(&snapshot_state(&Lake::read_committed(lake_dir.path())))
    });
    stop.store(true, Ordering::SeqCst);
    let sent = hammer.join().unwrap();
    let lake = stop_after_the_snapshot(run, done, &sluice, lake_dir.path());
    let hash = |id: &str| hmac_hex(key.as_bytes(), id.as_bytes());
    let source: BTreeMap<Vec<String>, Vec<Option<String>>> = db
        .table_map("SELECT id, v FROM shop.hot", &[0])
        .into_iter()
        .map(|(k, r)| {
            let h = hash(&k[0]);
            (vec![h.clone()], vec![Some(h), r[1].clone()])
        })
        .collect();
    assert_same_table("shop.hot", &source, &lake.replay("shop.hot", &[0]));
    let snapshot_rows = lake
        .rows("shop.hot")
        .iter()
        .filter(|r| r.op == "snapshot")
        .count() as u64;
    assert!(sent > 1_000, "only {sent} changes were sent");
    assert!(
        snapshot_rows < rows && snapshot_rows > rows / 2,
        "{snapshot_rows} snapshot rows of {rows}"
    );
}
