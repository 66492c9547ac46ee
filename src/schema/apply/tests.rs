use super::*;
use crate::schema::ddl::{parse_ddl, Change};

fn create(sql: &str) -> TableSchema {
    let Change::Create {
        table,
        columns: specs,
        unique_keys,
        charset,
        ..
    } = parse_ddl(sql, "s").unwrap().remove(0)
    else {
        panic!()
    };
    let charset = charset.unwrap_or_else(|| "utf8mb4".into());
    let columns = columns_from_specs(&specs, &charset).unwrap();
    TableSchema {
        database: table.0,
        name: table.1,
        version: 1,
        unique_keys: unique_keys_from_specs(&specs, &unique_keys, &columns).unwrap(),
        columns,
        charset: Some(charset),
    }
}

fn alter(base: &TableSchema, sql: &str) -> Result<Altered, String> {
    let Change::Alter { ops, .. } = parse_ddl(sql, "s").unwrap().remove(0) else {
        panic!()
    };
    apply_alter(base, &ops)
}

#[test]
fn a_column_added_and_modified_in_one_statement_takes_the_modification() {
    let base = create("CREATE TABLE t (id INT PRIMARY KEY)");
    let t = alter(
        &base,
        "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 2, ALTER COLUMN c DROP DEFAULT, \
             MODIFY COLUMN c BIGINT, ADD (d INT, e CHAR(3)), DROP CONSTRAINT PRIMARY KEY",
    )
    .unwrap();
    let cols: Vec<(&str, &str, bool)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.mysql_type.as_str(), c.nullable))
        .collect();
    assert!(t.columns.iter().all(|c| !c.primary_key));
    assert_eq!(
        cols,
        [
            ("id", "int", false),
            ("c", "bigint", true),
            ("d", "int", true),
            ("e", "char(3)", true)
        ]
    );
}

#[test]
fn columns_change_before_adds_and_keys_after_them() {
    let base = create("CREATE TABLE t (i INT, z INT, y INT, PRIMARY KEY (z))");
    // The old z becomes y (the old y goes), then a new z is added.
    let t = alter(
        &base,
        "ALTER TABLE t DROP COLUMN y, ADD COLUMN z BIGINT, CHANGE COLUMN z y INT",
    )
    .unwrap();
    let cols: Vec<(&str, &str)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.mysql_type.as_str()))
        .collect();
    assert_eq!(cols, [("i", "int"), ("y", "int"), ("z", "bigint")]);
    // The new i gets the primary key added in the same statement.
    let t = alter(
        &base,
        "ALTER TABLE t DROP i, ADD i INT UNSIGNED NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (i)",
    )
    .unwrap();
    let pk: Vec<&str> = t
        .columns
        .iter()
        .filter(|c| c.primary_key)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(pk, ["i"]);
    // IF NOT EXISTS: the table has a primary key, so nothing changes.
    let t = alter(&base, "ALTER TABLE t ADD PRIMARY KEY IF NOT EXISTS (i)").unwrap();
    let pk: Vec<&str> = t
        .columns
        .iter()
        .filter(|c| c.primary_key)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(pk, ["z"]);
}

#[test]
fn alter_clauses_apply_in_order() {
    let t =
        create("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5), b INT) DEFAULT CHARSET=latin1");
    assert_eq!(t.columns[1].charset.as_deref(), Some("latin1"));
    let a = alter(
            &t,
            "ALTER TABLE t ADD c TEXT FIRST, DROP b, CHANGE a a2 VARCHAR(9) AFTER id, ADD d INT AFTER c, \
             CONVERT TO CHARACTER SET utf8mb4",
        )
        .unwrap();
    let names: Vec<&str> = a.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["c", "d", "id", "a2"]);
    assert!(a
        .columns
        .iter()
        .filter(|c| c.charset.is_some())
        .all(|c| c.charset.as_deref() == Some("utf8mb4")));
    assert!(a.columns[2].primary_key);
    assert_eq!(a.charset, "utf8mb4");
}

#[test]
fn if_exists_clauses_skip_what_the_server_skips() {
    let t = create("CREATE TABLE t (id INT PRIMARY KEY, b INT)");
    let a = alter(
            &t,
            "ALTER TABLE t ADD COLUMN IF NOT EXISTS b BIGINT, ADD IF NOT EXISTS c INT FIRST, \
             DROP COLUMN IF EXISTS nope, MODIFY IF EXISTS ghost INT, CHANGE COLUMN IF EXISTS b b2 DATE, \
             RENAME COLUMN IF EXISTS gone TO g2, ADD INDEX IF NOT EXISTS ix (b2), DROP KEY IF EXISTS k",
        )
        .unwrap();
    let cols: Vec<(&str, &str)> = a
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.mysql_type.as_str()))
        .collect();
    assert_eq!(cols, vec![("c", "int"), ("id", "int"), ("b2", "date")]);
    let a = alter(
        &t,
        "ALTER TABLE t DROP COLUMN IF EXISTS b, ADD COLUMN IF NOT EXISTS b TEXT",
    )
    .unwrap();
    assert_eq!(a.columns.len(), 1);
}

#[test]
fn rename_without_to_and_order_by() {
    let t = create("CREATE TABLE t (id INT, a INT)");
    let a = alter(
        &t,
        "ALTER TABLE t RENAME t2, ADD b INT, ORDER BY a DESC, id",
    )
    .unwrap();
    assert_eq!(a.renamed_to, Some(("s".to_string(), "t2".to_string())));
    assert_eq!(a.columns.len(), 3);
    let a = alter(&t, "ALTER TABLE t ORDER BY id, RENAME AS x.t3").unwrap();
    assert_eq!(a.renamed_to, Some(("x".to_string(), "t3".to_string())));
}

#[test]
fn convert_widens_text_types_like_the_server() {
    let t = create(
        "CREATE TABLE t (a TINYTEXT, b TEXT, c MEDIUMTEXT, d VARCHAR(20000), e CHAR(10), f INT) \
             DEFAULT CHARSET=latin1",
    );
    let a = alter(&t, "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4").unwrap();
    let types: Vec<&str> = a.columns.iter().map(|c| c.mysql_type.as_str()).collect();
    assert_eq!(
        types,
        vec![
            "text",
            "mediumtext",
            "longtext",
            "mediumtext",
            "char(10)",
            "int"
        ]
    );
    // Back to a charset with fewer bytes per character: nothing shrinks.
    let b = apply_alter(
        &TableSchema {
            columns: a.columns.clone(),
            charset: Some(a.charset.clone()),
            ..t.clone()
        },
        &[AlterOp::ConvertCharset("latin1".into())],
    )
    .unwrap();
    assert_eq!(b.columns[0].mysql_type, "text");
    assert_eq!(b.columns[0].charset.as_deref(), Some("latin1"));
}

#[test]
fn bad_alters_are_errors_not_guesses() {
    let t = create("CREATE TABLE t (id INT)");
    assert!(alter(&t, "ALTER TABLE t DROP nope")
        .unwrap_err()
        .contains("nope"));
    assert!(alter(&t, "ALTER TABLE t ADD id INT")
        .unwrap_err()
        .contains("exists"));
    assert!(alter(&t, "ALTER TABLE t ADD x INT AFTER ghost")
        .unwrap_err()
        .contains("ghost"));
}

#[test]
fn enum_label_change_and_primary_key_moves() {
    let t = create("CREATE TABLE t (id INT, e ENUM('a','b'))");
    let a = alter(
        &t,
        "ALTER TABLE t MODIFY e ENUM('a','b','c') NOT NULL, ADD PRIMARY KEY (id)",
    )
    .unwrap();
    assert!(
        matches!(&a.columns[1].kind, crate::types::ColumnKind::Enum { labels } if labels.len() == 3)
    );
    assert!(a.columns[0].primary_key);
    let b = apply_alter(
        &TableSchema {
            columns: a.columns,
            ..t
        },
        &[AlterOp::DropPrimaryKey],
    )
    .unwrap();
    assert!(!b.columns[0].primary_key);
}

fn keys(t: &TableSchema) -> Vec<(String, Vec<String>)> {
    t.unique_keys
        .iter()
        .map(|k| (k.name.clone(), k.columns.clone()))
        .collect()
}

fn key_list(list: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    list.iter()
        .map(|(n, c)| (n.to_string(), c.iter().map(|c| c.to_string()).collect()))
        .collect()
}

fn altered(base: &TableSchema, sql: &str) -> TableSchema {
    let a = alter(base, sql).unwrap();
    TableSchema {
        columns: a.columns,
        unique_keys: a.unique_keys,
        charset: Some(a.charset),
        ..base.clone()
    }
}

/// The order and names checked against MariaDB 10.11 (`SHOW CREATE TABLE`).
#[test]
fn unique_keys_are_named_and_ordered_like_the_server() {
    let t = create(
            "CREATE TABLE t (a INT, b INT NOT NULL, c INT NOT NULL, n VARCHAR(20) NOT NULL, \
             x TEXT NOT NULL, UNIQUE KEY ua (a), UNIQUE KEY un (n(5)), UNIQUE KEY ub (c, b), UNIQUE (b), \
             UNIQUE (x), UNIQUE (b))",
        );
    assert_eq!(
        keys(&t),
        key_list(&[
            ("ub", &["c", "b"]),
            ("b", &["b"]),
            ("b_2", &["b"]),
            ("un", &["n"]),
            ("ua", &["a"]),
            ("x", &["x"]),
        ])
    );
    assert!(t.unique_keys[3].prefix && t.unique_keys[5].hash);
    assert_eq!(t.fold_key(), ["c", "b"]);
    assert_eq!(t.clustering_key().unwrap().name, "ub");
    // A key longer than 3072 bytes is a long hash key, as USING HASH is.
    let t = create(
        "CREATE TABLE t (a VARCHAR(768) NOT NULL, b VARCHAR(769) NOT NULL, c INT NOT NULL, \
             UNIQUE (b), UNIQUE (c) USING HASH, UNIQUE (a)) CHARSET utf8mb4",
    );
    let hash: Vec<bool> = t.unique_keys.iter().map(|k| k.hash).collect();
    assert_eq!(
        keys(&t),
        key_list(&[("a", &["a"]), ("b", &["b"]), ("c", &["c"])])
    );
    assert_eq!(hash, [false, true, true]);
    assert_eq!(t.fold_key(), ["a"]);
}

#[test]
fn serial_is_a_not_null_unique_key() {
    let t = create("CREATE TABLE t (pk SERIAL, b TEXT)");
    assert_eq!(keys(&t), key_list(&[("pk", &["pk"])]));
    assert_eq!(t.fold_key(), ["pk"]);
}

#[test]
fn nullable_unique_keys_key_nothing() {
    let t = create("CREATE TABLE t (code INT UNIQUE, v INT)");
    assert_eq!(keys(&t), key_list(&[("code", &["code"])]));
    assert!(t.fold_key().is_empty());
    let t = altered(&t, "ALTER TABLE t MODIFY code INT NOT NULL");
    assert_eq!(t.fold_key(), ["code"]);
    let t = altered(&t, "ALTER TABLE t MODIFY code BIGINT NULL");
    assert!(t.fold_key().is_empty());
}

#[test]
fn alter_keeps_the_unique_keys_up_to_date() {
    let base = create(
        "CREATE TABLE t (a INT NOT NULL, b INT NOT NULL, c INT NOT NULL, d INT, \
             UNIQUE KEY u (a, b), UNIQUE KEY v (c))",
    );
    assert_eq!(base.fold_key(), ["a", "b"]);
    // A nullable column sends its key behind the NOT NULL ones; NOT NULL
    // again, it stays there (the server sorts the old order stably).
    let t = altered(&base, "ALTER TABLE t MODIFY a INT NULL");
    assert_eq!(keys(&t), key_list(&[("v", &["c"]), ("u", &["a", "b"])]));
    assert_eq!(t.fold_key(), ["c"]);
    let t = altered(&t, "ALTER TABLE t MODIFY a INT NOT NULL");
    assert_eq!(keys(&t), key_list(&[("v", &["c"]), ("u", &["a", "b"])]));
    assert_eq!(t.fold_key(), ["c"]);
    // Renamed columns are renamed in their keys.
    let t = altered(
        &base,
        "ALTER TABLE t CHANGE a x INT NOT NULL, RENAME COLUMN b TO y",
    );
    assert_eq!(keys(&t), key_list(&[("u", &["x", "y"]), ("v", &["c"])]));
    assert_eq!(t.fold_key(), ["x", "y"]);
    // DROP INDEX / KEY / CONSTRAINT, RENAME INDEX, ADD UNIQUE after drops.
    let t = altered(&base, "ALTER TABLE t DROP INDEX u");
    assert_eq!(t.fold_key(), ["c"]);
    let t = altered(
        &base,
        "ALTER TABLE t DROP KEY v, DROP CONSTRAINT u, ADD UNIQUE KEY u (b)",
    );
    assert_eq!(keys(&t), key_list(&[("u", &["b"])]));
    let t = altered(
        &base,
        "ALTER TABLE t RENAME INDEX u TO z, DROP KEY IF EXISTS nope",
    );
    assert_eq!(keys(&t), key_list(&[("z", &["a", "b"]), ("v", &["c"])]));
    // Added keys come after the old ones, NOT NULL ones first; an unnamed
    // key takes its first column's name, else with _2; an existing name
    // adds nothing (IF NOT EXISTS).
    let t = altered(
        &base,
        "ALTER TABLE t ADD UNIQUE (d), ADD UNIQUE (c), ADD CONSTRAINT w UNIQUE KEY (a), \
             ADD UNIQUE INDEX (a), ADD UNIQUE INDEX IF NOT EXISTS v (d), ADD e INT NOT NULL UNIQUE",
    );
    assert_eq!(
        keys(&t),
        key_list(&[
            ("u", &["a", "b"]),
            ("v", &["c"]),
            ("c", &["c"]),
            ("w", &["a"]),
            ("a", &["a"]),
            ("e", &["e"]),
            ("d", &["d"]),
        ])
    );
    // Dropping a key's only column drops the key.
    let t = altered(&base, "ALTER TABLE t DROP COLUMN c");
    assert_eq!(keys(&t), key_list(&[("u", &["a", "b"])]));
    let t = altered(&t, "ALTER TABLE t DROP INDEX u");
    assert!(t.fold_key().is_empty());
    // A primary key takes over, and hands back when dropped.
    let t = altered(&base, "ALTER TABLE t ADD PRIMARY KEY (d)");
    assert_eq!(t.fold_key(), ["d"]);
    assert!(t.clustering_key().is_none());
    // The server drops keys before it adds any, whatever the clause order.
    let moved = altered(
        &t,
        "ALTER TABLE t ADD PRIMARY KEY (a, b), DROP INDEX `PRIMARY`",
    );
    assert_eq!(moved.fold_key(), ["a", "b"]);
    assert!(moved.columns[0].primary_key && !moved.columns[3].primary_key);
    let t = altered(&t, "ALTER TABLE t DROP PRIMARY KEY");
    assert_eq!(t.fold_key(), ["a", "b"]);
}

fn primary_key(t: &TableSchema) -> Vec<(&str, bool)> {
    t.columns
        .iter()
        .filter(|c| c.primary_key)
        .map(|c| (c.name.as_str(), c.nullable))
        .collect()
}

/// Checked against MariaDB 10.11: keys follow a column dropped and added
/// again by name in one statement, not a column renamed to that name.
#[test]
fn a_column_dropped_and_added_again_keeps_its_keys() {
    // mysql-test/main/alter_table.test:1144.
    let base =
        create("CREATE TABLE t1(c CHAR(10), i INT UNSIGNED AUTO_INCREMENT NOT NULL PRIMARY KEY)");
    let t = altered(
        &base,
        "ALTER TABLE t1 DROP i, ADD i INT UNSIGNED NOT NULL AUTO_INCREMENT, AUTO_INCREMENT = 1",
    );
    assert_eq!(primary_key(&t), [("i", false)]);
    // Added nullable, it is NOT NULL as a primary key column.
    let base = create("CREATE TABLE a5 (a INT, b INT, PRIMARY KEY (a))");
    let t = altered(&base, "ALTER TABLE a5 DROP a, ADD a INT");
    assert_eq!(primary_key(&t), [("a", false)]);
    // DROP PRIMARY KEY in the same statement, before or after: no key.
    let t = altered(
        &base,
        "ALTER TABLE a4 DROP a, ADD a INT, DROP PRIMARY KEY, ADD PRIMARY KEY (b)",
    );
    assert_eq!(primary_key(&t), [("b", false)]);
    let t = altered(&base, "ALTER TABLE a4 DROP PRIMARY KEY, DROP a, ADD a INT");
    assert!(primary_key(&t).is_empty());
    // A column renamed to the dropped one's name takes none of its keys.
    let base = create("CREATE TABLE a2 (a INT, b INT, c INT, UNIQUE KEY u (a), PRIMARY KEY (c))");
    let t = altered(&base, "ALTER TABLE a2 DROP a, CHANGE b a INT");
    assert!(keys(&t).is_empty());
    assert_eq!(primary_key(&t), [("c", false)]);
    // Several at once: part of a primary key, and a unique key.
    let base = create(
        "CREATE TABLE a3 (a INT, b INT, c INT NOT NULL, UNIQUE KEY u (a), PRIMARY KEY (c, b))",
    );
    let t = altered(
        &base,
        "ALTER TABLE a3 DROP a, ADD a INT, DROP b, ADD b INT NOT NULL FIRST",
    );
    let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["b", "c", "a"]);
    assert_eq!(primary_key(&t), [("b", false), ("c", false)]);
    assert_eq!(keys(&t), key_list(&[("u", &["a"])]));
    // Dropped and not added again: the key goes.
    let t = altered(&base, "ALTER TABLE a3 DROP a");
    assert!(keys(&t).is_empty());
}

/// Each column's place in the primary key, in table order.
fn key_positions(t: &TableSchema) -> Vec<(&str, Option<u32>)> {
    t.columns
        .iter()
        .map(|c| (c.name.as_str(), c.key_position))
        .collect()
}

/// The primary key folds in its own order, not the table's: the server
/// keeps `PRIMARY KEY (b, a)` sorted by b first.
#[test]
fn a_primary_key_keeps_its_column_order() {
    let base = create("CREATE TABLE t (a INT, b INT, v TEXT, PRIMARY KEY (b, a))");
    assert_eq!(
        key_positions(&base),
        [("a", Some(2)), ("b", Some(1)), ("v", None)]
    );
    assert_eq!(base.fold_key(), ["b", "a"]);
    let inline = create("CREATE TABLE t (v INT, id INT PRIMARY KEY)");
    assert_eq!(key_positions(&inline), [("v", None), ("id", Some(1))]);
    // Renamed, re-typed and moved columns keep their places.
    let t = altered(
        &base,
        "ALTER TABLE t CHANGE a x BIGINT NOT NULL FIRST, RENAME COLUMN b TO y, MODIFY v TEXT AFTER x",
    );
    assert_eq!(
        key_positions(&t),
        [("x", Some(2)), ("v", None), ("y", Some(1))]
    );
    assert_eq!(t.fold_key(), ["y", "x"]);
    let text = create("CREATE TABLE t (a VARCHAR(10), b INT, PRIMARY KEY (b, a)) CHARSET latin1");
    let t = altered(&text, "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4");
    assert_eq!(t.fold_key(), ["b", "a"]);
    // ADD PRIMARY KEY gives its own order; DROP PRIMARY KEY forgets it.
    let t = altered(
        &base,
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (a, b)",
    );
    assert_eq!(t.fold_key(), ["a", "b"]);
    let t = altered(&base, "ALTER TABLE t DROP PRIMARY KEY");
    assert_eq!(key_positions(&t), [("a", None), ("b", None), ("v", None)]);
    let t = altered(&t, "ALTER TABLE t ADD PRIMARY KEY (v(10), b)");
    assert_eq!(t.fold_key(), ["v", "b"]);
    // A dropped key column leaves the others in their order (MySQL narrows
    // the key), numbered again; one dropped and added again keeps its place.
    let wide = create("CREATE TABLE w (a INT, b INT, c INT, PRIMARY KEY (c, a, b))");
    let t = altered(&wide, "ALTER TABLE w DROP COLUMN a");
    assert_eq!(key_positions(&t), [("b", Some(2)), ("c", Some(1))]);
    let t = altered(&wide, "ALTER TABLE w DROP a, ADD a INT FIRST");
    assert_eq!(t.fold_key(), ["c", "a", "b"]);
    // System versioning appends the row end to the key.
    let t = altered(
        &base,
        "ALTER TABLE t ADD rs TIMESTAMP(6) AS ROW START, ADD re TIMESTAMP(6) AS ROW END, \
         ADD PERIOD FOR SYSTEM_TIME (rs, re), ADD SYSTEM VERSIONING",
    );
    assert_eq!(t.fold_key(), ["b", "a", "re"]);
}

/// A shape stored before key order was recorded has no places: its key
/// folds in table order, as it did.
#[test]
fn a_key_without_recorded_places_folds_in_table_order() {
    let mut t = create("CREATE TABLE t (a INT, b INT, v TEXT, PRIMARY KEY (b, a))");
    for c in &mut t.columns {
        c.key_position = None;
    }
    assert_eq!(t.fold_key(), ["a", "b"]);
    // DDL on such a shape keeps the key unplaced and in table order ...
    let changed = altered(
        &t,
        "ALTER TABLE t ADD w INT FIRST, CHANGE a aa INT NOT NULL",
    );
    assert_eq!(changed.fold_key(), ["aa", "b"]);
    // ... and a system-versioned row end joins it in table order too.
    let versioned = altered(
        &t,
        "ALTER TABLE t ADD rs TIMESTAMP(6) AS ROW START FIRST, ADD re TIMESTAMP(6) AS ROW END FIRST, \
         ADD PERIOD FOR SYSTEM_TIME (rs, re), ADD SYSTEM VERSIONING",
    );
    assert_eq!(versioned.fold_key(), ["re", "a", "b"]);
    // A new key records its order.
    let rekeyed = altered(&t, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (b, a)");
    assert_eq!(rekeyed.fold_key(), ["b", "a"]);
}

/// A TABLE_MAP's FULL metadata lists the primary key's columns in key
/// order (SIMPLE_PRIMARY_KEY): a shape derived from it keeps that order.
#[test]
fn a_shape_from_table_map_metadata_keeps_the_key_order() {
    use crate::decode::testing::{event_bytes, lenenc, read_event, table_map_body};
    use mysql_common::binlog::events::TableMapEvent;

    const LONG: u8 = 3;
    let mut body = table_map_body(
        7,
        "shop",
        "t",
        &[(LONG, &[]), (LONG, &[]), (LONG, &[])],
        &[false, false, true],
    );
    let mut field = |kind: u8, content: Vec<u8>| {
        body.push(kind);
        lenenc(content.len() as u64, &mut body);
        body.extend(content);
    };
    // COLUMN_NAME (4): a, b, v.
    let mut names = Vec::new();
    for name in ["a", "b", "v"] {
        lenenc(1, &mut names);
        names.extend(name.as_bytes());
    }
    field(4, names);
    // SIMPLE_PRIMARY_KEY (8): column 1 (b), then column 0 (a).
    field(8, vec![1, 0]);
    let event = read_event(
        &event_bytes(crate::decode::event_type::TABLE_MAP, 0, &body, false),
        false,
    );
    let tme = event.read_event::<TableMapEvent<'_>>().unwrap();
    let t = TableSchema {
        columns: derive_from_table_map(&tme, &[]).unwrap().unwrap(),
        ..create("CREATE TABLE t (a INT)")
    };
    assert_eq!(
        key_positions(&t),
        [("a", Some(2)), ("b", Some(1)), ("v", None)]
    );
    assert_eq!(t.fold_key(), ["b", "a"]);
}
