//! Current tables folded with deletion vectors (`[current] deletion_vectors
//! = "auto"`, the default): a seeded random workload of updates, deletes,
//! re-inserts and inserts, with a hot key range, over many folds. After each
//! fold the current table equals `SELECT *` for every reader (deltalake's
//! SQL engine, Polars, DuckDB, Spark's API on Sail); the fold writes the
//! changed rows and vectors, not the files that hold them; a kill between
//! writing a vector file and the commit leaves the version and, after the
//! next start, no orphan; purges (`dataChange: false`) keep the live files
//! bounded; every one of the last versions reads as the changelog replayed
//! up to the manifest it records.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;
use crate::current::{current_rows, vector_counts};
use crate::delta::delta_commits;

const Z85: &[u8] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// The vector file a `u` descriptor names (the protocol's Z85-encoded UUID).
fn vector_file(dv: &Value) -> Option<String> {
    if dv["storageType"].as_str()? != "u" {
        return None;
    }
    let text = dv["pathOrInlineDv"].as_str()?.as_bytes();
    let id = &text[text.len() - 20..];
    let mut bytes = Vec::new();
    for chunk in id.chunks(5) {
        let v = chunk.iter().fold(0u64, |v, c| {
            v * 85 + Z85.iter().position(|z| z == c).expect("a Z85 digit") as u64
        });
        bytes.extend_from_slice(&(v as u32).to_be_bytes());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "deletion_vector_{}-{}-{}-{}-{}.bin",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// The live `add` actions of a table, by path, after its last commit.
pub(crate) fn live_files(dir: &Path) -> BTreeMap<String, Value> {
    let mut live = BTreeMap::new();
    for (_, actions) in delta_commits(dir) {
        // Removes first: a commit that marks a file removes it with its old
        // vector and adds it with the new.
        for a in &actions {
            if let Some(r) = a.get("remove") {
                live.remove(r["path"].as_str().unwrap());
            }
        }
        for a in &actions {
            if let Some(add) = a.get("add") {
                live.insert(add["path"].as_str().unwrap().to_string(), add.clone());
            }
        }
    }
    live
}

/// Every vector file in the folder is named by some commit of its log.
fn assert_no_orphan_vectors(dir: &Path) {
    let named: BTreeSet<String> = delta_commits(dir)
        .into_iter()
        .flat_map(|(_, a)| a)
        .filter_map(|a| {
            let x = a.get("add").or_else(|| a.get("remove"))?;
            vector_file(&x["deletionVector"])
        })
        .collect();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("deletion_vector_") {
            assert!(named.contains(&name), "{name} in {dir:?} is in no commit");
        }
    }
}

fn vector_files_on_disk(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("deletion_vector_"))
        .collect()
}

fn dv_dir(lake: &Path, db: &MariaDb) -> PathBuf {
    lake.join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("dv")
}

type Table = BTreeMap<Vec<String>, Vec<Option<String>>>;

#[test]
fn folds_mark_deletion_vectors_survive_a_kill_and_purge() {
    let (seed, mut rng) = seeded_rng(0xdec0_de57);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.dv (id INT PRIMARY KEY, g VARCHAR(12), v BIGINT, born DATETIME(6), note VARCHAR(200));",
    );
    const ROWS: u64 = 20_000;
    let value = |id: u64, r: u64| {
        let note = match r % 4 {
            0 => "NULL".to_string(),
            1 => format!("'ünï {r} ✓'"),
            _ => format!("'{}'", "n".repeat((r % 150) as usize)),
        };
        format!(
            "({id}, 'g{}', {}, '2026-01-{:02} 10:{:02}:00.{:06}', {note})",
            r % 9,
            r as i64 - 500_000,
            1 + r % 28,
            r % 60,
            r % 1_000_000
        )
    };
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra =
        "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"16KiB\"\npurge_threshold = 0.2\n"
            .into();
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut sql = String::new();
    let rows: Vec<String> = (1..=ROWS)
        .map(|id| {
            live.insert(id);
            value(id, rng(1_000_000))
        })
        .collect();
    for chunk in rows.chunks(1000) {
        sql += &format!("INSERT INTO shop.dv VALUES {};\n", chunk.join(", "));
    }
    db.sql(&sql);

    sluice.run_until_caught_up_ok();
    let dir = dv_dir(lake.path(), &db);
    let cols = ["id", "g", "v", "born", "note"];
    let source = |db: &MariaDb| -> Table {
        db.query_rows("SELECT id, g, v, born, note FROM shop.dv")
            .into_iter()
            .map(|r| (vec![r[0].clone().unwrap_or_default()], r))
            .collect()
    };
    assert_same_table(
        "shop.dv after its first fold",
        &source(&db),
        &current_rows(&dir, &cols, None),
    );
    let first = live_files(&dir);
    assert!(first.len() >= 8, "only {} files", first.len());
    let table_bytes: u64 = first.values().map(|a| a["size"].as_u64().unwrap()).sum();

    let mut most_files = 0;
    let mut killed = false;
    let mut inline = 0;
    for round in 0..10 {
        let mut sql = String::from("BEGIN;\n");
        for _ in 0..120 {
            // Half the updates go to a hot range of keys, the rest anywhere.
            let id = if rng(2) == 0 {
                1 + rng(400)
            } else {
                1 + rng(ROWS + 500)
            };
            match rng(10) {
                0..=5 => {
                    sql += &format!(
                        "UPDATE shop.dv SET v = v + {}, note = IF(note IS NULL, 'was null', NULL) WHERE id = {id};\n",
                        1 + rng(100)
                    );
                }
                6..=7 => {
                    sql += &format!("DELETE FROM shop.dv WHERE id = {id};\n");
                    live.remove(&id);
                }
                _ => {
                    // A new key, or one deleted before.
                    if live.insert(id) {
                        sql += &format!(
                            "INSERT INTO shop.dv VALUES {};\n",
                            value(id, rng(1_000_000))
                        );
                    }
                }
            }
        }
        if round == 3 {
            // Forty neighbours: one file's vector too large to go inline,
            // so that the fold killed below has a vector file to write.
            sql += "UPDATE shop.dv SET v = v + 1 WHERE id BETWEEN 5001 AND 5040;\n";
        }
        sql += "COMMIT;\n";
        db.sql(&sql);
        let versions_before = delta_commits(&dir).len();
        if round == 3 {
            // A kill after the fold wrote its vector file, before its commit.
            let on_disk = vector_files_on_disk(&dir);
            sluice.env = vec![("SLUICE_TEST_ABORT_IN_FOLD".into(), "vectors".into())];
            let out = sluice.run_until_caught_up();
            assert!(!out.status.success(), "the fold hook did not abort");
            assert_eq!(
                delta_commits(&dir).len(),
                versions_before,
                "a killed fold committed"
            );
            assert!(
                vector_files_on_disk(&dir).len() > on_disk.len(),
                "the killed fold wrote no vector file"
            );
            sluice.env.clear();
            killed = true;
        }
        sluice.run_until_caught_up_ok();
        assert_same_table(
            &format!("shop.dv after round {round} (seed {seed})"),
            &source(&db),
            &current_rows(&dir, &cols, None),
        );
        // The fold's own commit (not a purge): new rows and vectors only.
        let commits = delta_commits(&dir);
        let fold = commits[versions_before..]
            .iter()
            .find(|(_, a)| {
                a.iter().any(|x| {
                    x.get("commitInfo")
                        .is_some_and(|c| c["sluice"]["fold"] == "fold")
                })
            })
            .expect("a fold commit");
        let marked: Vec<&Value> = fold
            .1
            .iter()
            .filter_map(|a| a.get("add"))
            .filter(|a| !a["deletionVector"].is_null())
            .collect();
        assert!(!marked.is_empty(), "round {round}: no file got a vector");
        for add in &marked {
            let dv = &add["deletionVector"];
            let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
            assert!(dv["cardinality"].as_u64().unwrap() <= stats["numRecords"].as_u64().unwrap());
            assert_eq!(stats["tightBounds"], false);
            match dv["storageType"].as_str() {
                Some("u") => assert!(dir.join(vector_file(dv).unwrap()).exists()),
                Some("i") => {
                    // Small vectors ride in the log: Z85 of the bytes
                    // padded to a multiple of 4.
                    let size = dv["sizeInBytes"].as_u64().unwrap() as usize;
                    assert!(size <= 64, "{dv}");
                    let text = dv["pathOrInlineDv"].as_str().unwrap();
                    assert_eq!(text.len(), size.div_ceil(4) * 5, "{dv}");
                    inline += 1;
                }
                _ => panic!("a vector stored as {dv}"),
            }
        }
        let new_bytes: u64 = fold
            .1
            .iter()
            .filter_map(|a| a.get("add"))
            .filter(|a| a["deletionVector"].is_null())
            .map(|a| a["size"].as_u64().unwrap())
            .sum();
        assert!(
            new_bytes * 5 < table_bytes,
            "round {round}: the fold wrote {new_bytes} bytes of a {table_bytes}-byte table"
        );
        most_files = most_files.max(live_files(&dir).len());
        assert_no_orphan_vectors(&dir);
    }
    assert!(killed);
    assert!(inline > 0, "no fold stored a vector inline");
    let commits = delta_commits(&dir);
    let (_, purges) = vector_counts(&dir);
    assert!(purges >= 1, "no purge ran");
    // Purges add files with dataChange false and remove with it false.
    for (_, a) in &commits {
        if a.iter().any(|x| {
            x.get("commitInfo")
                .is_some_and(|c| c["sluice"]["fold"] == "purge")
        }) {
            assert!(a
                .iter()
                .filter_map(|x| x.get("add").or_else(|| x.get("remove")))
                .all(|x| x["dataChange"] == false));
        }
    }
    // Bounded: the files the table started with, small files below the
    // merge count, and the files purges wrote in place of heavy ones.
    assert!(
        most_files <= first.len() + 12,
        "{most_files} live files (the first fold wrote {})",
        first.len()
    );
    // No heavy file is left unpurged.
    for add in live_files(&dir).values() {
        let deleted = add["deletionVector"]["cardinality"].as_u64().unwrap_or(0);
        let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
        let rows = stats["numRecords"].as_u64().unwrap();
        assert!((deleted as f64) < 0.2 * rows as f64, "{add}");
    }

    // Time travel: each of the last 20 versions equals the changelog
    // replayed up to the manifest seq it records.
    let changelog = Lake::read(lake.path());
    let rows = changelog.rows("shop.dv");
    for (version, actions) in commits.iter().rev().take(20) {
        let seq = actions
            .iter()
            .find_map(|a| a.get("txn"))
            .and_then(|t| t["version"].as_u64())
            .unwrap();
        let upto: Vec<Row> = rows
            .iter()
            .filter(|r| r.manifest_seq <= seq)
            .cloned()
            .collect();
        let expected: Table = replay(&upto, &[0])
            .into_iter()
            .map(|(k, v)| (k, v[..cols.len()].to_vec()))
            .collect();
        assert_same_table(
            &format!("shop.dv version {version} (manifest {seq})"),
            &expected,
            &current_rows(&dir, &cols, Some(*version)),
        );
    }
}

/// Issue 42, item 6: a renamed table's current table starts from copies of
/// the old name's files and vector files; a copy that the fold rewrites
/// leaves its vector file in no version, so the fold deletes it at once
/// (no clean-up would ever find it). The new name's folder holds only vector
/// files its log names, and equals the source.
#[test]
fn a_renamed_tables_rewritten_copies_leave_no_vector_file_behind() {
    let db = MariaDb::start();
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.dv (id INT PRIMARY KEY, v INT);");
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.extra = "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"4KiB\"\npurge_threshold = 0.9\n".into();
    let rows: Vec<String> = (1..=3000).map(|i| format!("({i}, {i})")).collect();
    db.sql(&format!("INSERT INTO shop.dv VALUES {};", rows.join(", ")));
    sluice.run_until_caught_up_ok();
    // Enough rows of each file marked to need vector files.
    db.sql("UPDATE shop.dv SET v = v + 1 WHERE id % 3 = 0;");
    sluice.run_until_caught_up_ok();
    let old = dv_dir(lake.path(), &db);
    assert!(
        !vector_files_on_disk(&old).is_empty(),
        "the fold wrote no vector file"
    );
    db.sql(
        "RENAME TABLE shop.dv TO shop.dv2;
         UPDATE shop.dv2 SET v = v + 1 WHERE id % 3 = 1 AND id < 1500;",
    );
    sluice.run_until_caught_up_ok();
    let new = lake
        .path()
        .join("_current")
        .join(db.namespace().to_server("shop").as_ref())
        .join("dv2");
    assert_no_orphan_vectors(&new);
    let want = crate::current::source_rows(&db, "dv2", &["id", "v"]);
    let got = current_rows(&new, &["id", "v"], None);
    assert_same_table("_current/shop/dv2", &want, &got);
}
