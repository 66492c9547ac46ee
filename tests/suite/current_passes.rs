//! Folds of more changes than the fold's memory share sorts at once read
//! them in two passes: each key's last change found from the key columns,
//! then only those rows. When those rows come in key order — a bulk INSERT,
//! then a bulk UPDATE and DELETE in key order, as `benches/e2e.sh` writes —
//! the second pass streams them straight into the table and nothing is
//! sorted (`rows_sorted=0` in the fold's report); otherwise they go through
//! the sorter. Either way the current table equals the source after each
//! fold, for every reader, with deletion vectors and without.

use std::collections::BTreeSet;

use crate::common::*;
use crate::current::{current_dir, current_rows, source_rows};

const COLS: [&str; 4] = ["id", "g", "v", "body"];

/// One round of bulk statements and what the fold's second pass must do
/// with their last changes.
struct Round {
    sql: String,
    /// Whether each key's last change comes in key order (no sorting).
    in_order: bool,
}

fn bulk_changes_fold(vectors: &str, seed_default: u64) {
    let (seed, mut rng) = seeded_rng(seed_default);
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.bulk (id INT PRIMARY KEY, g VARCHAR(12), v BIGINT, body TEXT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    // A fold's share is a quarter of this: every round's changelog is past
    // a sixteenth of it, so every fold takes two passes.
    sluice.max_buffer_bytes = "1MiB".into();
    sluice.extra = format!(
        "[current]\nenabled = true\nrefresh = \"1h\"\ntarget_file_size = \"256KiB\"\ndeletion_vectors = \"{vectors}\"\n"
    );
    let dir = current_dir(lake.path(), &db, "bulk");
    let mut next = 1u64;
    // Every kind of round once, in a seeded order after the first, then
    // two at random.
    let mut picks = vec![0, 1, 2, 3, 4, 5];
    for i in (2..picks.len()).rev() {
        picks.swap(i, 1 + rng(i as u64) as usize);
    }
    picks.extend([rng(6), rng(6)]);
    for pick in picks {
        let n = 4_000 + rng(6_000);
        let (from, to) = (next, next + n - 1);
        next = to + 1;
        let insert = format!(
            "INSERT INTO shop.bulk SELECT seq, CONCAT('g', seq % 7), seq * {}, REPEAT(MD5(seq + {seed}), 1 + seq % 4)
             FROM shop.seq_{from}_to_{to};\n",
            1 + rng(100)
        );
        // Deletes of one key in m: their keys, kept aside in memory, take
        // less than the quarter of the share that bounds them (64 KiB, about
        // 17 bytes a key).
        let m = 4 + rng(4);
        let r = rng(m);
        // 0: a load, updated in key order, some deleted (the e2e
        // benchmark's bulk phase; first, into an empty table).
        let round = match pick {
            0 => Round {
                sql: format!(
                    "{insert}UPDATE shop.bulk SET v = v + 1, g = 'updated' WHERE id >= {from} ORDER BY id;\n\
                     DELETE FROM shop.bulk WHERE id >= {from} AND id % {m} = {r} ORDER BY id;\n"
                ),
                in_order: true,
            },
            // Every row of the table updated in key order, then some deleted.
            1 => Round {
                sql: format!(
                    "UPDATE shop.bulk SET v = v - 1, body = CONCAT('r', body) ORDER BY id;\n\
                     DELETE FROM shop.bulk WHERE id % {} = {r} ORDER BY id;\n",
                    10 * m
                ),
                in_order: true,
            },
            // Updated against key order: the last changes come backwards.
            2 => Round {
                sql: format!(
                    "{insert}UPDATE shop.bulk SET v = v * 2 WHERE id >= {from} ORDER BY id DESC;\n"
                ),
                in_order: false,
            },
            // A key below all others changed last.
            3 => Round {
                sql: "UPDATE shop.bulk SET g = 'again' ORDER BY id;\n\
                     UPDATE shop.bulk SET g = 'first' WHERE id = (SELECT MIN(id) FROM (SELECT id FROM shop.bulk) AS m);\n"
                    .to_string(),
                in_order: false,
            },
            // More keys deleted than the share lets a fold keep aside (nine
            // in ten of at least 7,000 rows, 17 bytes each): sorted.
            5 => Round {
                sql: format!(
                    "{insert}UPDATE shop.bulk SET v = 0 WHERE id >= {from} ORDER BY id;\n\
                     DELETE FROM shop.bulk WHERE id % 10 != 0 ORDER BY id;\n"
                ),
                in_order: false,
            },
            // Keys moved (an update of the key) after the load.
            _ => Round {
                sql: format!(
                    "{insert}UPDATE shop.bulk SET id = id + 1000000 WHERE id BETWEEN {from} AND {} ORDER BY id DESC;\n",
                    from + 10
                ),
                in_order: false,
            },
        };
        db.sql(&format!("BEGIN;\n{}COMMIT;\n", round.sql));
        let out = sluice.run_until_caught_up_ok();
        // A run's first fold starts at its first checkpoint, so a round may
        // be folded in two: the part of a fold too small for two passes (at
        // most a sixteenth of the share, 16 KiB of changelog: far fewer than
        // 2,000 of these rows) is sorted in memory.
        let folds = folds(&out.stderr);
        let sorted: u64 = folds.iter().map(|f| f.1).sum();
        let large: Vec<&(u64, u64)> = folds.iter().filter(|f| f.0 >= 2_000).collect();
        assert!(!large.is_empty(), "round {pick}: no large fold: {folds:?}");
        if round.in_order {
            assert!(
                large.iter().all(|f| f.1 == 0),
                "round {pick}: changes sorted (changes, sorted: {folds:?}; seed {seed}, vectors {vectors})"
            );
        } else {
            assert!(
                sorted > 0,
                "round {pick}: nothing sorted (seed {seed}, vectors {vectors})"
            );
        }
        let source = source_rows(&db, "bulk", &COLS);
        assert_same_table(
            &format!("shop.bulk after a round {pick} (seed {seed}, vectors {vectors})"),
            &source,
            &current_rows(&dir, &COLS, None),
        );
        let keys: BTreeSet<String> = source.keys().map(|k| k[0].clone()).collect();
        assert!(!keys.is_empty());
    }
}

/// Each fold's changes and the changes it sorted, from sluice's log.
fn folds(stderr: &[u8]) -> Vec<(u64, u64)> {
    let figure = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("current tables folded"))
        .map(|l| (figure(l, "changed_rows"), figure(l, "rows_sorted")))
        .collect()
}

#[test]
fn bulk_changes_in_key_order_fold_without_sorting() {
    bulk_changes_fold("auto", 0xb01c_2026_1203);
}

#[test]
fn bulk_changes_in_key_order_fold_without_sorting_or_vectors() {
    bulk_changes_fold("never", 0xb01c_2026_1204);
}
