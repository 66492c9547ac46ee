//! Many tables on a store that answers slowly (DESIGN.md "Many tables"):
//! the store round trips made one after another by `status`, an idle start
//! and a checkpoint must not grow with the table count, since every
//! table's reads and commits are issued together (`[sink]
//! requests_in_flight`). Counted at a proxy in front of moto_server, which
//! logs when each request went out and when its answer came back. Up to
//! `requests_in_flight` tables a round costs the same; past it, one more
//! round per that many tables.

use crate::common::proxy::FaultProxy;
use crate::common::*;

/// What one lake of `tables` tables (in 2 databases) costs in sequential
/// round trips: `status`, an idle `run --until-caught-up`, and a run whose
/// one transaction touches every table (a checkpoint of all of them).
fn round_trips(db: &MariaDb, prefix: &str, tables: usize) -> (usize, usize, usize) {
    let mut ddl = String::new();
    for d in 0..2 {
        ddl.push_str(&format!("CREATE DATABASE {prefix}{d};\n"));
        for t in 0..tables / 2 {
            ddl.push_str(&format!(
                "CREATE TABLE {prefix}{d}.t{t} (id INT PRIMARY KEY, v INT);\n"
            ));
        }
    }
    db.sql(&ddl);
    let every_table = |v: usize| {
        let mut script = String::from("BEGIN;\n");
        for d in 0..2 {
            for t in 0..tables / 2 {
                script.push_str(&format!(
                    "INSERT INTO {prefix}{d}.t{t} VALUES ({v}, {v});\n"
                ));
            }
        }
        script + "COMMIT;\n"
    };
    let lake = TestLake::new(Backend::S3);
    let state = tempfile::tempdir().unwrap();
    let mut sluice = lake.sluice(db, state.path());
    sluice.include = vec![format!(r"{prefix}\d\..*")];
    sluice.extra_sink = "requests_in_flight = 64".to_owned();
    let proxy = FaultProxy::start(lake.moto().unwrap().port());
    proxy.route(&mut sluice, "30s");
    db.sql(&every_table(1));
    sluice.run_until_caught_up_ok();

    let measure = |what: &dyn Fn()| {
        proxy.clear_log();
        what();
        proxy.sequential_round_trips()
    };
    let status = measure(&|| {
        let s = sluice.status_json();
        assert_eq!(s["delta_lag"], serde_json::json!({}), "{s}");
    });
    let idle = measure(&|| {
        sluice.run_until_caught_up_ok();
    });
    db.sql(&every_table(2));
    let checkpoint = measure(&|| {
        sluice.run_until_caught_up_ok();
    });
    (status, idle, checkpoint)
}

#[test]
fn status_a_start_and_a_checkpoint_cost_round_trips_that_do_not_grow_with_tables() {
    let db = MariaDb::start();
    let few = round_trips(&db, "few", 4);
    let many = round_trips(&db, "many", 60);
    eprintln!("sequential round trips (status, idle start, checkpoint): 4 tables {few:?}, 60 tables {many:?}");
    // A few more where requests of 60 tables queue behind each other at
    // the proxy; before they were issued together, 48 tables cost 6× the
    // round trips of 4 at start and 8× at a checkpoint.
    assert!(many.0 <= few.0 + 3, "status: {few:?} → {many:?}");
    assert!(many.1 <= few.1 + 3, "idle start: {few:?} → {many:?}");
    assert!(many.2 <= few.2 + 3, "checkpoint: {few:?} → {many:?}");
}
