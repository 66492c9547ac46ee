//! Tests of the test harness itself: it must work before sluice does.

use std::sync::Arc;

use crate::common::*;
use arrow::array::*;
use arrow::datatypes::*;

#[test]
fn harness_starts_private_mariadb() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    assert_ne!(db.port(), 3306, "never the system server");
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, s VARCHAR(20), b VARBINARY(4))");
    db.sql("INSERT INTO shop.t VALUES (1, 'a\tb', x'00ff'), (2, NULL, NULL), (3, 'back\\\\slash\nline', '')");
    let rows = db.query_rows("SELECT id, s, HEX(b) FROM shop.t ORDER BY id");
    assert_eq!(
        rows,
        vec![
            vec![Some("1".into()), Some("a\tb".into()), Some("00FF".into())],
            vec![Some("2".into()), None, None],
            vec![
                Some("3".into()),
                Some("back\\slash\nline".into()),
                Some("".into())
            ],
        ]
    );
    let (file, pos) = db.binlog_head();
    assert_eq!(file, "binlog.000001");
    assert!(pos > 4);
    assert_eq!(
        db.query_value("SELECT @@binlog_format").as_deref(),
        Some("ROW")
    );
    assert_eq!(
        db.query_value("SELECT @@time_zone").as_deref(),
        Some("+00:00")
    );
    // The replication user exists and can log in over TCP.
    let out = std::process::Command::new("mariadb")
        .args(["--no-defaults", "-urepl", "-preplpass", "-h127.0.0.1"])
        .arg(format!("-P{}", db.port()))
        .args(["-N", "-B", "-e", "SHOW MASTER STATUS"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mysql_text_renders_like_the_client() {
    let dec = Decimal128Array::from(vec![Some(-12340), Some(5), None])
        .with_precision_and_scale(10, 3)
        .unwrap();
    assert_eq!(mysql_text(&dec, 0).as_deref(), Some("-12.340"));
    assert_eq!(mysql_text(&dec, 1).as_deref(), Some("0.005"));
    assert_eq!(mysql_text(&dec, 2), None);

    let d256 = Decimal256Array::from(vec![i256::from_i128(-1)])
        .with_precision_and_scale(65, 30)
        .unwrap();
    assert_eq!(
        mysql_text(&d256, 0).as_deref(),
        Some("-0.000000000000000000000000000001")
    );

    let dur = DurationMicrosecondArray::from(vec![
        -(838 * 3600 + 59 * 60 + 59) * 1_000_000,
        360_000_500_000,
    ]);
    assert_eq!(mysql_text(&dur, 0).as_deref(), Some("-838:59:59.000000"));
    assert_eq!(mysql_text(&dur, 1).as_deref(), Some("100:00:00.500000"));

    let ts = TimestampMicrosecondArray::from(vec![1_000_000_123_456]).with_timezone("UTC");
    assert_eq!(
        mysql_text(&ts, 0).as_deref(),
        Some("1970-01-12 13:46:40.123456")
    );

    let date = Date32Array::from(vec![-354285, 2932896]);
    assert_eq!(mysql_text(&date, 0).as_deref(), Some("1000-01-01"));
    assert_eq!(mysql_text(&date, 1).as_deref(), Some("9999-12-31"));

    let dict: DictionaryArray<Int32Type> = vec![Some("update"), None, Some("insert")]
        .into_iter()
        .collect();
    assert_eq!(mysql_text(&dict, 0).as_deref(), Some("update"));
    assert_eq!(mysql_text(&dict, 1), None);
    assert_eq!(mysql_text(&dict, 2).as_deref(), Some("insert"));

    let bin = BinaryArray::from(vec![&b"\x00\xab"[..]]);
    assert_eq!(mysql_text(&bin, 0).as_deref(), Some("00AB"));

    let mut set = ListBuilder::new(StringBuilder::new());
    set.values().append_value("a");
    set.values().append_value("c");
    set.append(true);
    set.append(true);
    set.append(false);
    let set = set.finish();
    assert_eq!(mysql_text(&set, 0).as_deref(), Some("a,c"));
    assert_eq!(mysql_text(&set, 1).as_deref(), Some(""));
    assert_eq!(mysql_text(&set, 2), None);

    assert_eq!(
        logical_type(&DataType::Dictionary(
            Box::new(DataType::Int32),
            Box::new(DataType::LargeUtf8)
        )),
        DataType::Utf8
    );
    assert_eq!(
        logical_type(&DataType::List(Arc::new(Field::new(
            "element",
            DataType::Utf8View,
            false
        )))),
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
    );
}

fn row(op: &str, seq: i64, values: &[&str], before: Option<&[&str]>) -> Row {
    let conv = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    Row {
        manifest_seq: 1,
        op: op.into(),
        seq,
        tx_seq: seq,
        binlog_file: "binlog.000001".into(),
        binlog_pos: 4,
        gtid: None,
        ts_ms: None,
        sql: None,
        values: conv(values),
        before: before.map(conv),
    }
}

#[test]
fn replay_follows_the_design_rule() {
    let rows = vec![
        row("insert", 1, &["1", "a"], None),
        row("insert", 2, &["2", "b"], None),
        row("update", 3, &["3", "b2"], Some(&["2", "b"])),
        row("delete", 4, &["1", "a"], None),
        row("truncate", 5, &["", ""], None),
        row("snapshot", 6, &["7", "x"], None),
        row("insert", 7, &["8", "y"], None),
        row("update", 8, &["8", "z"], Some(&["8", "y"])),
    ];
    let map = replay(&rows[..4], &[0]);
    assert_eq!(map.len(), 1);
    assert_eq!(map[&vec!["3".to_string()]][1].as_deref(), Some("b2"));
    let map = replay(&rows, &[0]);
    assert_eq!(map.len(), 2);
    assert_eq!(map[&vec!["8".to_string()]][1].as_deref(), Some("z"));
}

/// `SLUICE_TEST_MYSQL_URL`: the SQL a test sends names its own databases.
#[test]
fn test_databases_are_renamed_on_a_shared_server() {
    let ns = Namespace::with_prefix("sluicet_0123abcd_");
    let sql = "CREATE DATABASE shop; CREATE DATABASE IF NOT EXISTS `other`; USE shop; \
                   INSERT INTO shop.t SELECT * FROM `shop`.`u` WHERE v = 'shop'; \
                   GRANT SELECT ON shop.* TO x; SELECT workshop.a, shops.b";
    assert_eq!(
            ns.to_server(sql),
            "CREATE DATABASE sluicet_0123abcd_shop; CREATE DATABASE IF NOT EXISTS `sluicet_0123abcd_other`; \
             USE sluicet_0123abcd_shop; INSERT INTO sluicet_0123abcd_shop.t SELECT * FROM \
             `sluicet_0123abcd_shop`.`u` WHERE v = 'shop'; GRANT SELECT ON sluicet_0123abcd_shop.* TO x; \
             SELECT workshop.a, shops.b"
        );
    assert_eq!(ns.filter(r"shop\..*"), r"sluicet_0123abcd_shop\..*");
    assert_eq!(Namespace::default().to_server(sql), sql);
}
