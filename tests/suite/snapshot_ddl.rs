//! Snapshot reads under DDL and unusual session settings (DESIGN.md,
//! "Snapshot reads under DDL"): a chunk reads the key definition again after
//! DDL on its table, and the snapshot session sets its own `sql_mode`.

use std::time::Duration;

use crate::common::*;

fn keyed_table(db: &MariaDb, create: &str, rows: u64, value: impl Fn(u64) -> String) {
    db.sql(&format!("CREATE DATABASE shop; {create}"));
    let values: Vec<String> = (1..=rows).map(value).collect();
    for chunk in values.chunks(2000) {
        db.sql(&format!(
            "INSERT INTO shop.items VALUES {};",
            chunk.join(",")
        ));
    }
}

/// `shop.items` of 20,000 rows, and a sidecar reading it in chunks of 20
/// that has committed some: the lake, the state and the running sidecar.
fn items_being_read(db: &MariaDb) -> (tempfile::TempDir, tempfile::TempDir, Sluice, Running) {
    items_being_read_beside(db, "", "")
}

/// The same, with the statements `others` run after the CREATE of
/// `shop.items` and more `[snapshot]` lines.
fn items_being_read_beside(
    db: &MariaDb,
    others: &str,
    snapshot: &str,
) -> (tempfile::TempDir, tempfile::TempDir, Sluice, Running) {
    keyed_table(
        db,
        &format!("CREATE TABLE shop.items (id INT NOT NULL PRIMARY KEY, v VARCHAR(20)); {others}"),
        20_000,
        |i| format!("({i}, 'v{i}')"),
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(db, lake_dir.path(), state.path());
    sluice.snapshot = format!("chunk_rows = 20\n{snapshot}");
    sluice.interval = "100ms".into();
    let run = sluice.spawn_run(false);
    let started = wait_until(Duration::from_secs(60), || {
        let lake = Lake::read_committed(lake_dir.path());
        lake.manifests
            .last()
            .is_some_and(|m| m["snapshot"]["shop.items"]["rows"].as_u64().unwrap_or(0) > 0)
    });
    assert!(started, "the snapshot did not start:\n{}", run.log_tail(30));
    (lake_dir, state, sluice, run)
}

fn snapshot_done(lake: &std::path::Path, table: &str) -> bool {
    let lake = Lake::read_committed(lake);
    lake.manifests
        .last()
        .is_some_and(|m| m["snapshot"][table]["state"] == "done")
}

/// A key column renamed while its table is being read: the chunk query
/// names the old column (1054) until the reader reads the key again; it
/// must do so and finish, with every row once.
#[test]
fn a_key_column_renamed_during_the_snapshot_is_read_under_its_new_name() {
    let db = MariaDb::start();
    let (lake_dir, _state, sluice, mut run) = items_being_read(&db);
    db.sql(
        "ALTER TABLE shop.items RENAME COLUMN id TO item_id;
         UPDATE shop.items SET v = 'moved' WHERE item_id % 101 = 0;",
    );
    let done = wait_until(Duration::from_secs(120), || {
        snapshot_done(lake_dir.path(), "shop.items")
    });
    assert!(done, "the snapshot did not finish:\n{}", run.log_tail(30));
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    // The rename fell inside the snapshot: chunks were read after the
    // update that followed it.
    let rows = lake.rows("shop.items");
    let first_update = rows
        .iter()
        .filter(|r| r.op == "update")
        .map(|r| r.seq)
        .min();
    let last_chunk = rows
        .iter()
        .filter(|r| r.op == "snapshot")
        .map(|r| r.seq)
        .max();
    assert!(
        first_update.is_some() && last_chunk > first_update,
        "no chunk was read after the rename (first update {first_update:?}, last snapshot row {last_chunk:?})"
    );
    let source = db.table_map("SELECT item_id, v FROM shop.items", &[0]);
    assert_eq!(source.len(), 20_000);
    assert_same_table("shop.items", &source, &lake.replay("shop.items", &[0]));
}

/// The snapshot reads every table's key in one query when it starts. A
/// table whose key a DDL replaced before the reader reached it is read under
/// its new key: the stream saw the DDL after the keys were read, so the
/// table's key is read again. With `after_ddl = "never"` no re-read covers a
/// wrong read: the old key `id`, no longer unique, skips rows at chunk
/// boundaries (140 of 200 read when the check is taken out).
#[test]
fn a_key_replaced_before_the_reader_reaches_its_table_is_read_again() {
    let db = MariaDb::start();
    let later: Vec<String> = (1..=200)
        .map(|i| format!("({i}, {}, 'l{i}')", 1000 - i))
        .collect();
    let (lake_dir, _state, sluice, mut run) = items_being_read_beside(
        &db,
        &format!(
            "CREATE TABLE shop.later (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, v VARCHAR(20));
             INSERT INTO shop.later VALUES {};",
            later.join(",")
        ),
        "after_ddl = \"never\"",
    );
    db.sql(
        "ALTER TABLE shop.later DROP PRIMARY KEY, ADD PRIMARY KEY (k);
         UPDATE shop.later SET id = id % 7;",
    );
    let done = wait_until(Duration::from_secs(120), || {
        snapshot_done(lake_dir.path(), "shop.later")
    });
    assert!(done, "the snapshot did not finish:\n{}", run.log_tail(30));
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    let log = run.log_text();
    assert!(
        log.contains("the table changed since its key was read") && log.contains("key=k"),
        "the later table was not read under its new key:\n{}",
        tail(&log, 40)
    );
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    // Every row read once (the stream's updates alone would hide a row the
    // read skipped), and the table equal to the source.
    let read = lake
        .rows("shop.later")
        .iter()
        .filter(|r| r.op == "snapshot")
        .count();
    assert_eq!(read, 200, "snapshot rows of shop.later");
    let source = db.table_map("SELECT id, k, v FROM shop.later", &[1]);
    assert_eq!(source.len(), 200);
    assert_same_table("shop.later", &source, &lake.replay("shop.later", &[1]));
}

/// Issue 42, item 10: a table renamed while its rows are being read
/// restarts under its new name with a `truncate` marker after the RENAME
/// and a new snapshot. The marker carries the RENAME's GTID, as every row
/// but snapshot rows does on MariaDB; the new name replays to the source.
#[test]
fn a_table_renamed_during_its_snapshot_restarts_with_a_marker_in_the_renames_gtid() {
    let db = MariaDb::start();
    let (lake_dir, _state, _sluice, mut run) = items_being_read(&db);
    db.sql("RENAME TABLE shop.items TO shop.items2; UPDATE shop.items2 SET v = 'x' WHERE id = 7;");
    let done = wait_until(Duration::from_secs(120), || {
        snapshot_done(lake_dir.path(), "shop.items2")
    });
    assert!(
        done,
        "the new name's snapshot did not finish:\n{}",
        run.log_tail(30)
    );
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    let lake = Lake::read(lake_dir.path());
    let rows = lake.rows("shop.items2");
    let markers: Vec<&Row> = rows.iter().filter(|r| r.op == "truncate").collect();
    assert!(!markers.is_empty(), "no truncate marker under the new name");
    for r in &rows {
        assert!(
            r.op == "snapshot" || r.gtid.is_some(),
            "a {} row at _seq {} has no _gtid (sql {:?})",
            r.op,
            r.seq,
            r.sql
        );
    }
    assert!(
        markers
            .iter()
            .all(|m| m.sql.as_deref().is_some_and(|s| s.contains("renamed from"))),
        "{:?}",
        markers.iter().map(|m| &m.sql).collect::<Vec<_>>()
    );
    let source = db.table_map("SELECT id, v FROM shop.items2", &[0]);
    assert_eq!(source.len(), 20_000);
    assert_same_table("shop.items2", &source, &lake.replay("shop.items2", &[0]));
}

/// A server whose sql_mode pads CHAR values to their full length: the
/// snapshot session sets its own mode, so snapshot rows equal what the
/// binlog carries (no padding) and chunk bounds bind as stored.
#[test]
fn the_snapshot_session_sets_its_own_sql_mode() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    keyed_table(
        &db,
        "CREATE TABLE shop.items (code CHAR(10) NOT NULL PRIMARY KEY, v INT);",
        500,
        |i| format!("('c{i}', {i})"),
    );
    db.sql("SET GLOBAL sql_mode = CONCAT(@@global.sql_mode, ',PAD_CHAR_TO_FULL_LENGTH');");
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 7".into();
    db.sql("UPDATE shop.items SET v = -v WHERE v % 3 = 0;");
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let replayed = lake.replay("shop.items", &[0]);
    assert_eq!(replayed.len(), 500);
    for i in 1..=500i64 {
        let key = vec![format!("c{i}")];
        let v = if i % 3 == 0 { -i } else { i };
        assert_eq!(
            replayed.get(&key),
            Some(&vec![Some(format!("c{i}")), Some(v.to_string())]),
            "row c{i}: a padded key would neither match nor take the update"
        );
    }
}

/// XA transactions beside a watermark snapshot: prepared before a chunk's
/// window and committed inside it (the chunk read the old row; the stream
/// carries the new one at the commit), or prepared inside a window and
/// rolled back (the stream never carries the row: the chunk must keep it).
/// Keys are noted when a change commits, so the replay equals the source.
#[test]
fn xa_commits_and_rollbacks_inside_watermark_windows_leave_no_stale_or_lost_row() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    // Each writer ends after this many: the stream must be able to pass
    // them on a loaded machine (every XA PREPARE writes a file).
    const XA_TRANSACTIONS: u64 = 1_500;
    let db = MariaDb::start();
    let rows = 20_000u64;
    keyed_table(
        &db,
        "CREATE TABLE shop.items (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20));",
        rows,
        |i| format!("({i}, 0, 'r{i}')"),
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 400\nmethod = \"watermark\"".into();
    sluice.interval = "200ms".into();
    let seed = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7u64);
    eprintln!("SLUICE_TEST_SEED={seed}");
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|n| {
            let (client, ns, stop) = (
                client_command(db.socket()),
                db.namespace().clone(),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed + n);
                let mut tx = 0u64;
                super::snapshot::feed_client(client, &ns, &stop, move || {
                    if tx == XA_TRANSACTIONS {
                        return None;
                    }
                    tx += 1;
                    let xid = format!("'w{n}x{tx}'");
                    let id = rng.gen_range(1..=rows);
                    let outcome = if rng.gen_bool(0.3) { "ROLLBACK" } else { "COMMIT" };
                    Some(format!(
                        "XA START {xid}; UPDATE shop.items SET v = v + 1, w = 'x{n}-{tx}' WHERE id = {id};\n\
                         XA END {xid}; XA PREPARE {xid}; DO SLEEP(0.01); XA {outcome} {xid};\n"
                    ))
                })
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut run = sluice.spawn_run(false);
    let done = wait_until(Duration::from_secs(180), || {
        snapshot_done(lake_dir.path(), "shop.items")
    });
    stop.store(true, Ordering::SeqCst);
    let sent: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(done, "the snapshot did not finish:\n{}", run.log_tail(30));
    assert!(
        run.terminate(Duration::from_secs(30)).success(),
        "{}",
        run.log_tail(30)
    );
    sluice.run_until_caught_up_ok();
    assert!(sent > 200, "only {sent} XA transactions were sent");
    let lake = Lake::read(lake_dir.path());
    let source = db.table_map("SELECT id, v, w FROM shop.items", &[0]);
    assert_eq!(source.len() as u64, rows);
    assert_same_table("shop.items", &source, &lake.replay("shop.items", &[0]));
}

/// A snapshot stopped part-way whose key changes order while sluice is
/// stopped (a collation change of the key column, which keeps every value
/// and is not re-read): the saved last key belongs to the old order, so the
/// resumed snapshot starts the table over rather than going on after it in
/// the new order, which would skip rows.
#[test]
fn a_key_whose_order_changed_while_stopped_starts_the_snapshot_over() {
    let db = MariaDb::start();
    // Mixed case: `_general_ci` interleaves it, `_bin` puts capitals first.
    // 40,000 rows in chunks of 20 take long enough for a poll every 50 ms
    // to see the read part-way (6,000 were read in 0.1 s).
    keyed_table(
        &db,
        "CREATE TABLE shop.items (code VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci \
         NOT NULL PRIMARY KEY, v INT);",
        40_000,
        |i| {
            let c = if i % 2 == 0 { 'a' } else { 'A' };
            format!("('{c}{:05}', {i})", (i * 7_919) % 40_009)
        },
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 20".into();
    sluice.interval = "50ms".into();
    let mut run = sluice.spawn_run(false);
    let part_way = wait_until(Duration::from_secs(60), || {
        let lake = Lake::read_committed(lake_dir.path());
        lake.manifests.last().is_some_and(|m| {
            let rows = m["snapshot"]["shop.items"]["rows"].as_u64().unwrap_or(0);
            rows >= 400 && m["snapshot"]["shop.items"]["state"] == "running"
        })
    });
    assert!(
        part_way,
        "the snapshot did not get part-way:\n{}",
        run.log_tail(30)
    );
    run.kill();
    let lake = Lake::read_committed(lake_dir.path());
    let saved = &lake.manifests.last().unwrap()["snapshot"]["shop.items"];
    assert_eq!(saved["state"], "running", "{saved}");
    assert_eq!(
        saved["key"][0]["order"], "utf8mb4/utf8mb4_general_ci",
        "{saved}"
    );

    db.sql(
        "ALTER TABLE shop.items MODIFY code VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;",
    );
    let out = sluice.run_until_caught_up_ok();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("its snapshot starts over"),
        "the resumed snapshot went on after a key of the old order"
    );
    let lake = Lake::read(lake_dir.path());
    assert_eq!(
        lake.manifests.last().unwrap()["snapshot"]["shop.items"]["state"],
        "done"
    );
    let source = db.table_map("SELECT code, v FROM shop.items", &[0]);
    assert_eq!(source.len(), 40_000);
    assert_same_table("shop.items", &source, &lake.replay("shop.items", &[0]));
}
