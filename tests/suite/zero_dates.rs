//! Zero and partly-zero dates have no Arrow value: they become null, and
//! the count of them is where users look (`sluice status`, its `--json`,
//! every manifest), cumulative across runs, not only in a run's exit line.

use crate::common::*;

#[test]
fn zero_dates_are_counted_in_status_and_manifests() {
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.d (id INT PRIMARY KEY, d DATE, dt DATETIME);",
    );
    let dir = tempfile::tempdir().unwrap();
    let s = Sluice::new(&db, &dir.path().join("lake"), &dir.path().join("state"));
    // A permissive sql_mode lets the zero dates in, as older applications do.
    db.sql(
        "SET SESSION sql_mode = '';
         INSERT INTO shop.d VALUES
           (1, '0000-00-00', '2024-01-02 03:04:05'),
           (2, '2024-05-00', '0000-00-00 00:00:00'),
           (3, '2024-05-06', '2024-05-06 07:08:09');",
    );
    s.run_until_caught_up_ok();

    let rows = Lake::read(&s.lake).rows("shop.d");
    let dates: Vec<(Option<String>, Option<String>)> = rows
        .iter()
        .map(|r| (r.values[1].clone(), r.values[2].clone()))
        .collect();
    assert_eq!(
        dates,
        vec![
            (None, Some("2024-01-02 03:04:05.000000".into())),
            (None, None),
            (
                Some("2024-05-06".into()),
                Some("2024-05-06 07:08:09.000000".into())
            ),
        ]
    );
    assert_eq!(s.status_json()["zero_dates"], 3);
    let lake = Lake::read(&s.lake);
    assert_eq!(lake.manifests.last().unwrap()["zero_dates"], 3);

    // A second run adds to the count of the first; a run without zero
    // dates keeps it.
    db.sql(
        "SET SESSION sql_mode = '';
         UPDATE shop.d SET d = '0000-00-00' WHERE id = 3;",
    );
    s.run_until_caught_up_ok();
    // The update's before image (2024-05-06) is a date; its after image is not.
    assert_eq!(s.status_json()["zero_dates"], 4);
    db.sql("INSERT INTO shop.d VALUES (4, '2024-06-07', '2024-06-07 00:00:00')");
    s.run_until_caught_up_ok();
    let status = s.status_json();
    assert_eq!(status["zero_dates"], 4);
    let lake = Lake::read(&s.lake);
    let counts: Vec<u64> = lake
        .manifests
        .iter()
        .map(|m| m["zero_dates"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.last(), Some(&4), "{counts:?}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");

    let out = s.run_args(&["status"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("zero dates") && l.contains(" 4 written as null")),
        "{text}"
    );
}
