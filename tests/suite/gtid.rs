//! GTID resume and failover: sluice follows a primary under a writer, is
//! killed, the primary dies, its GTID replica is promoted, and sluice pointed
//! at the promoted server continues with no lost and no duplicate row.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crate::common::*;

const CREATE: &str = "CREATE DATABASE shop;
CREATE TABLE shop.t (id BIGINT PRIMARY KEY, v VARCHAR(32), n INT NOT NULL);";

/// Transactions of a few statements each: inserts, updates and deletes.
fn write_some(db: &MariaDb, next: &AtomicI64, count: usize) {
    let mut sql = String::new();
    for _ in 0..count {
        let id = next.fetch_add(1, Ordering::SeqCst);
        sql.push_str(&format!(
            "BEGIN; INSERT INTO shop.t VALUES ({id}, 'v{id}', 0); UPDATE shop.t SET n = n + 1 WHERE id = {};",
            id / 2
        ));
        if id % 7 == 0 {
            sql.push_str(&format!("DELETE FROM shop.t WHERE id = {};", id - 3));
        }
        sql.push_str("COMMIT;");
    }
    db.sql(&sql);
}

fn gtid_pos(db: &MariaDb) -> String {
    db.query_value("SELECT @@gtid_binlog_pos")
        .unwrap_or_default()
}

#[test]
fn failover_to_a_promoted_gtid_replica_loses_and_repeats_nothing() {
    let Some(primary) = MariaDb::start_private(&[]) else {
        return;
    };
    let replica = MariaDb::start_with(&["--server-id=2", "--log-slave-updates=ON"]);
    // The replica starts empty and replicates from the primary's state now
    // (both servers created the same users at start-up).
    let from = gtid_pos(&primary);
    replica.sql(&format!(
        "RESET MASTER;
         SET GLOBAL gtid_slave_pos = '{from}';
         CHANGE MASTER TO master_host = '127.0.0.1', master_port = {port},
             master_user = 'repl', master_password = '{REPL_PASSWORD}', master_use_gtid = slave_pos;
         START SLAVE;",
        port = primary.port()
    ));
    primary.sql(CREATE);
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(
        &primary,
        &dir.path().join("lake"),
        &dir.path().join("state"),
    );
    sluice.interval = "200ms".into();
    // Start before the tables exist: the CREATE is in the stream.
    sluice.start = "\"earliest\"".into();

    let next = AtomicI64::new(1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                write_some(&primary, &next, 10);
            }
        });
        let mut run = sluice.spawn_run(false);
        // Let sluice commit a few checkpoints under the writer, then kill it.
        assert!(
            wait_until(Duration::from_secs(60), || manifest_paths(&sluice.lake)
                .len()
                >= 3),
            "no checkpoints; log:\n{}",
            run.log_tail(30)
        );
        run.kill();
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
    });
    // More transactions sluice has not seen, then the replica catches up.
    write_some(&primary, &next, 50);
    let last = gtid_pos(&primary);
    let waited = replica.query_value(&format!("SELECT MASTER_GTID_WAIT('{last}', 60)"));
    assert_eq!(waited.as_deref(), Some("0"), "the replica did not catch up");
    let lake = Lake::read(&sluice.lake);
    let cursor = &lake.manifests.last().unwrap()["cursor"];
    let cursor_gtid = cursor["gtid"]
        .as_str()
        .expect("the cursor has a GTID state")
        .to_string();
    assert!(cursor_gtid.starts_with("0-1-"), "{cursor_gtid}");
    drop(primary);

    // Promote the replica; its binlog files and offsets differ from the primary's.
    replica.sql("STOP SLAVE; RESET SLAVE ALL;");
    sluice.url = replica.url();
    write_some(&replica, &next, 30);
    sluice.run_until_caught_up_ok();
    write_some(&replica, &next, 10);
    sluice.run_until_caught_up_ok();

    let lake = Lake::read(&sluice.lake);
    let rows = lake.rows("shop.t");
    let mut seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), rows.len(), "a _seq appears twice");
    let replayed = lake.replay("shop.t", &[0]);
    let source = replica.table_map("SELECT id, v, n FROM shop.t", &[0]);
    assert_eq!(replayed.len(), source.len(), "row count after failover");
    for (key, row) in &source {
        assert_eq!(replayed.get(key), Some(row), "row {key:?} after failover");
    }
    // Every transaction appears once: inserts are unique per id.
    let inserts = rows.iter().filter(|r| r.op == "insert").count() as i64;
    assert_eq!(
        inserts,
        next.load(Ordering::SeqCst) - 1,
        "each insert exactly once"
    );
    // Rows written on the promoted server carry its GTIDs.
    let gtids: Vec<&str> = rows.iter().filter_map(|r| r.gtid.as_deref()).collect();
    assert!(gtids.iter().any(|g| g.starts_with("0-1-")));
    assert!(
        gtids.iter().any(|g| g.starts_with("0-2-")),
        "no GTID of the promoted server"
    );
    let last_cursor = &lake.manifests.last().unwrap()["cursor"];
    assert_eq!(
        last_cursor["gtid"].as_str(),
        Some(gtid_pos(&replica).as_str()),
        "the cursor's GTID state is the new primary's"
    );
}

#[test]
fn start_gtid_begins_after_the_state_and_a_state_ahead_of_the_server_is_refused() {
    let db = MariaDb::start();
    if !db.is_mariadb_or_skip("@@gtid_binlog_pos, domain-server-seq GTIDs") {
        return;
    }
    db.sql(CREATE);
    let next = AtomicI64::new(1);
    write_some(&db, &next, 5);
    let mid = gtid_pos(&db);
    write_some(&db, &next, 5);
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    s.start = format!("{{ gtid = \"{mid}\" }}");
    s.run_until_caught_up_ok();
    let rows = Lake::read(&s.lake).rows("shop.t");
    let first: i64 = rows[0].values[0].as_deref().unwrap().parse().unwrap();
    assert_eq!(first, 6, "starts with the transaction after {mid}");
    assert_eq!(rows.iter().filter(|r| r.op == "insert").count(), 5);

    // A GTID the server never had is a clear error, and nothing is committed.
    let mut bad = Sluice::new(&db, &dir.path().join("lake2"), &dir.path().join("state2"));
    bad.start = "{ gtid = \"0-1-999999\" }".into();
    let err = assert_definite_error(&bad.run_until_caught_up());
    assert!(err.contains("GTID") || err.contains("gtid"), "{err}");
    assert!(manifest_paths(&bad.lake).is_empty());
}
