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
    keyed_table(
        &db,
        "CREATE TABLE shop.items (id INT NOT NULL PRIMARY KEY, v VARCHAR(20));",
        20_000,
        |i| format!("({i}, 'v{i}')"),
    );
    let lake_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake_dir.path(), state.path());
    sluice.snapshot = "chunk_rows = 20".into();
    sluice.interval = "100ms".into();
    let mut run = sluice.spawn_run(false);
    let started = wait_until(Duration::from_secs(60), || {
        let lake = Lake::read_committed(lake_dir.path());
        lake.manifests
            .last()
            .is_some_and(|m| m["snapshot"]["shop.items"]["rows"].as_u64().unwrap_or(0) > 0)
    });
    assert!(started, "the snapshot did not start:\n{}", run.log_tail(30));
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
