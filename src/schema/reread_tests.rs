use super::*;
use crate::schema::UniqueKey;

/// `(name, type, charset, nullable, primary key)`.
type Col<'a> = (&'a str, &'a str, Option<&'a str>, bool, bool);

fn table(columns: &[Col<'_>]) -> TableSchema {
    TableSchema {
        database: "shop".into(),
        name: "t".into(),
        version: 1,
        columns: columns
            .iter()
            .map(|(n, ty, cs, null, pk)| {
                ColumnDef::new(*n, *ty, cs.map(str::to_string), *null, *pk).unwrap()
            })
            .collect(),
        charset: Some("utf8mb4".into()),
        unique_keys: Vec::new(),
    }
}

/// The step of a statement that kept every column under its name.
fn same_names(t: &TableSchema) -> ColumnStep {
    ColumnStep {
        origins: t.columns.iter().map(|c| Some(c.name.clone())).collect(),
        fills_rows: vec![false; t.columns.len()],
    }
}

const ID: Col<'static> = ("id", "int", None, false, true);

/// One column `c` of type `from` changed to `to` (nullable both).
fn retyped(from: &str, to: &str, cs: Option<&str>) -> Option<RereadReason> {
    let before = table(&[ID, ("c", from, cs, true, false)]);
    let after = table(&[ID, ("c", to, cs, true, false)]);
    needs_reread(&before, &after, &same_names(&after))
}

#[test]
fn allow_listed_type_changes_keep_values() {
    for (from, to, cs) in [
        ("int", "bigint", None),
        ("tinyint", "int", None),
        ("smallint unsigned", "mediumint unsigned", None),
        ("int unsigned", "bigint", None),
        ("int(11)", "int", None),
        ("varchar(10)", "varchar(20)", Some("utf8mb4")),
        ("varchar(10)", "text", Some("utf8mb4")),
        ("varchar(60)", "tinytext", Some("utf8mb4")),
        ("tinytext", "mediumtext", Some("latin1")),
        ("text", "longtext", Some("utf8mb4")),
        ("varbinary(8)", "varbinary(9)", None),
        ("varbinary(200)", "tinyblob", None),
        ("blob", "longblob", None),
        ("decimal(10,2)", "decimal(12,2)", None),
        ("decimal(10,2) unsigned", "decimal(12,2)", None),
        ("decimal(30,2)", "decimal(40,2)", None),
        ("datetime(6)", "datetime(6)", None),
        ("double", "double", None),
        // A column restated, or given another collation or default: the
        // same type in the same charset converts no value.
        ("char(10)", "char(10)", Some("utf8mb4")),
        ("CHAR(10)", "char(10)", Some("utf8mb4")),
        ("binary(8)", "binary(8)", None),
        ("json", "json", Some("utf8mb4")),
    ] {
        assert_eq!(retyped(from, to, cs), None, "{from} to {to}");
    }
    // utf8 is utf8mb3.
    let before = table(&[ID, ("c", "varchar(5)", Some("utf8"), true, false)]);
    let after = table(&[ID, ("c", "varchar(6)", Some("utf8mb3"), true, false)]);
    assert_eq!(needs_reread(&before, &after, &same_names(&after)), None);
}

#[test]
fn conversions_are_re_read() {
    for (from, to, cs) in [
        ("decimal(5,2)", "int", None),
        ("decimal(10,2)", "decimal(10,1)", None),
        ("decimal(10,2)", "decimal(9,2)", None),
        ("decimal(10,2)", "decimal(12,2) unsigned", None),
        ("bigint", "int", None),
        ("int", "int unsigned", None),
        ("int unsigned", "int", None),
        ("bigint unsigned", "bigint", None),
        ("int", "varchar(20)", Some("utf8mb4")),
        ("varchar(20)", "varchar(10)", Some("utf8mb4")),
        ("varchar(100)", "tinytext", Some("utf8mb4")),
        ("text", "varchar(100)", Some("utf8mb4")),
        ("char(10)", "varchar(10)", Some("utf8mb4")),
        ("varchar(10)", "char(10)", Some("utf8mb4")),
        ("binary(4)", "binary(8)", None),
        ("varbinary(300)", "tinyblob", None),
        ("blob", "tinyblob", None),
        ("datetime(6)", "datetime", None),
        ("datetime", "timestamp", None),
        ("float", "double", None),
        ("float", "float(7,2)", None),
        ("double", "float", None),
        ("time(3)", "time", None),
        ("bit(5)", "bit(8)", None),
        ("date", "datetime", None),
    ] {
        match retyped(from, to, cs) {
            Some(RereadReason::Type { column, .. }) => assert_eq!(column, "c", "{from} to {to}"),
            other => panic!("{from} to {to}: {other:?}"),
        }
    }
}

#[test]
fn charset_conversion_is_re_read() {
    let before = table(&[ID, ("c", "varchar(10)", Some("latin1"), true, false)]);
    let after = table(&[ID, ("c", "varchar(10)", Some("utf8mb4"), true, false)]);
    let r = needs_reread(&before, &after, &same_names(&after));
    assert_eq!(
        r,
        Some(RereadReason::Charset {
            column: "c".into(),
            from: "latin1".into(),
            to: "utf8mb4".into()
        })
    );
    assert_eq!(
        r.unwrap().to_string(),
        "column `c` converted from latin1 to utf8mb4"
    );
}

#[test]
fn enum_and_set_label_changes_are_re_read() {
    for (from, to) in [
        ("enum('a','b')", "enum('a','b','c')"),
        ("enum('a','b')", "enum('b','a')"),
        ("set('x','y')", "set('x')"),
    ] {
        assert!(
            matches!(
                retyped(from, to, Some("utf8mb4")),
                Some(RereadReason::Labels { .. })
            ),
            "{from} to {to}"
        );
    }
    assert_eq!(
        retyped("enum('a','b')", "enum('a','b')", Some("utf8mb4")),
        None
    );
}

#[test]
fn null_to_not_null_is_re_read_and_the_reverse_is_not() {
    let nullable = table(&[ID, ("c", "int", None, true, false)]);
    let not_null = table(&[ID, ("c", "int", None, false, false)]);
    assert_eq!(
        needs_reread(&nullable, &not_null, &same_names(&not_null)),
        Some(RereadReason::NotNull { column: "c".into() })
    );
    assert_eq!(
        needs_reread(&not_null, &nullable, &same_names(&nullable)),
        None
    );
}

#[test]
fn added_columns_are_re_read_only_when_they_fill_rows() {
    let before = table(&[ID]);
    let after = table(&[ID, ("c", "int", None, true, false)]);
    let mut step = ColumnStep {
        origins: vec![Some("id".into()), None],
        fills_rows: vec![false, false],
    };
    assert_eq!(needs_reread(&before, &after, &step), None);
    // DEFAULT 5, a generated column, AUTO_INCREMENT.
    step.fills_rows[1] = true;
    assert_eq!(
        needs_reread(&before, &after, &step),
        Some(RereadReason::FilledColumn { column: "c".into() })
    );
    // NOT NULL without a default: the type's implicit default.
    let after = table(&[ID, ("c", "int", None, false, false)]);
    step.fills_rows[1] = false;
    assert!(matches!(
        needs_reread(&before, &after, &step),
        Some(RereadReason::FilledColumn { .. })
    ));
    // A step that does not say: re-read, never guess.
    let after = table(&[ID, ("c", "int", None, true, false)]);
    let unknown = ColumnStep {
        origins: vec![Some("id".into()), None],
        fills_rows: vec![],
    };
    assert!(needs_reread(&before, &after, &unknown).is_some());
}

#[test]
fn drop_and_rename_keep_values() {
    let before = table(&[
        ID,
        ("a", "int", None, false, false),
        ("b", "text", Some("utf8mb4"), true, false),
    ]);
    let dropped = table(&[ID, ("b", "text", Some("utf8mb4"), true, false)]);
    assert_eq!(needs_reread(&before, &dropped, &same_names(&dropped)), None);
    // RENAME COLUMN a TO z: the column's values go with it, NOT NULL and all.
    let renamed = table(&[
        ID,
        ("z", "int", None, false, false),
        ("b", "text", Some("utf8mb4"), true, false),
    ]);
    let step = ColumnStep {
        origins: vec![Some("id".into()), Some("a".into()), Some("b".into())],
        fills_rows: vec![false; 3],
    };
    assert_eq!(needs_reread(&before, &renamed, &step), None);
    // A renamed key column is the same key.
    let before = table(&[ID, ("a", "int", None, true, false)]);
    let after = table(&[
        ("key_id", "int", None, false, true),
        ("a", "int", None, true, false),
    ]);
    let step = ColumnStep {
        origins: vec![Some("id".into()), Some("a".into())],
        fills_rows: vec![false; 2],
    };
    assert_eq!(needs_reread(&before, &after, &step), None);
}

#[test]
fn a_new_row_key_is_re_read() {
    let before = table(&[ID, ("b", "int", None, false, false)]);
    // DROP PRIMARY KEY, ADD PRIMARY KEY (b)
    let after = table(&[
        ("id", "int", None, false, false),
        ("b", "int", None, false, true),
    ]);
    assert_eq!(
        needs_reread(&before, &after, &same_names(&after)),
        Some(RereadReason::RowKey {
            before: vec!["id".into()],
            after: vec!["b".into()]
        })
    );
    // A wider key.
    let after = table(&[ID, ("b", "int", None, false, true)]);
    assert!(matches!(
        needs_reread(&before, &after, &same_names(&after)),
        Some(RereadReason::RowKey { .. })
    ));
    // A table without a key gets one from a NOT NULL unique index.
    let keyless = table(&[("a", "int", None, false, false)]);
    let mut keyed = keyless.clone();
    keyed.unique_keys.push(UniqueKey {
        name: "a".into(),
        columns: vec!["a".into()],
        prefix: false,
        hash: false,
    });
    assert!(matches!(
        needs_reread(&keyless, &keyed, &same_names(&keyed)),
        Some(RereadReason::RowKey { .. })
    ));
    // Another unique index beside the primary key keys nothing new.
    let mut indexed = before.clone();
    indexed.unique_keys.push(UniqueKey {
        name: "b".into(),
        columns: vec!["b".into()],
        prefix: false,
        hash: false,
    });
    assert_eq!(needs_reread(&before, &indexed, &same_names(&indexed)), None);
    // Dropping the key column drops the key.
    let before = table(&[ID, ("b", "int", None, true, false)]);
    let after = table(&[("b", "int", None, true, false)]);
    assert!(matches!(
        needs_reread(&before, &after, &same_names(&after)),
        Some(RereadReason::RowKey { .. })
    ));
}

#[test]
fn an_unchanged_shape_keeps_values() {
    // Comments, engine options, partitions, plain indexes, RENAME TABLE.
    let t = table(&[
        ID,
        ("c", "decimal(5,2)", None, true, false),
        ("s", "set('a')", Some("utf8mb4"), true, false),
    ]);
    assert_eq!(needs_reread(&t, &t, &same_names(&t)), None);
}

/// The decision for `ALTER TABLE s.t <clauses>` on `before`, through the
/// statement's one parse and the tracker's way of applying it.
fn after_alter(before: &TableSchema, clauses: &str) -> Option<RereadReason> {
    use crate::schema::apply::apply_alter;
    use crate::schema::ddl::{parse_ddl, Change};
    let sql = format!("ALTER TABLE s.t {clauses}");
    let Change::Alter { ops, .. } = parse_ddl(&sql, "s").unwrap().remove(0) else {
        panic!("{sql} is no ALTER");
    };
    let altered = apply_alter(before, &ops).unwrap();
    let after = TableSchema {
        columns: altered.columns.clone(),
        unique_keys: altered.unique_keys.clone(),
        ..before.clone()
    };
    let step = ColumnStep::of_alter(&altered.columns, &altered.origins, &ops);
    needs_reread(before, &after, &step)
}

#[test]
fn statements_decide_through_their_one_parse() {
    let t = table(&[
        ID,
        ("a", "int", None, false, false),
        ("b", "int", None, false, false),
        ("p", "decimal(6,2)", None, true, false),
    ]);
    for clauses in [
        "ADD COLUMN c INT",
        "ADD COLUMN c INT NULL DEFAULT NULL",
        "ADD COLUMN c TIMESTAMP NULL",
        "ADD COLUMN c VARCHAR(10) FIRST",
        "DROP COLUMN b",
        "RENAME COLUMN a TO z",
        "CHANGE a z BIGINT NOT NULL",
        "MODIFY p DECIMAL(9,2)",
        "ADD INDEX ia (a), COMMENT 'x', ENGINE = InnoDB",
        "ADD UNIQUE KEY ub (b)",
        "DROP COLUMN b, ADD COLUMN b INT",
    ] {
        assert_eq!(after_alter(&t, clauses), None, "{clauses}");
    }
    for (clauses, column) in [
        ("ADD COLUMN c INT NOT NULL DEFAULT 5", "c"),
        ("ADD COLUMN c INT DEFAULT 5", "c"),
        ("ADD COLUMN c INT NOT NULL", "c"),
        ("ADD COLUMN c INT AS (a + 1) VIRTUAL", "c"),
        ("ADD COLUMN c INT AS (a + 1) PERSISTENT", "c"),
        ("ADD COLUMN c TIMESTAMP", "c"),
        (
            "ADD COLUMN c BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE",
            "c",
        ),
        ("ADD COLUMN c INT, MODIFY c INT DEFAULT 3", "c"),
    ] {
        assert_eq!(
            after_alter(&t, clauses),
            Some(RereadReason::FilledColumn {
                column: column.into()
            }),
            "{clauses}"
        );
    }
    assert!(matches!(
        after_alter(&t, "MODIFY p INT"),
        Some(RereadReason::Type { .. })
    ));
    assert!(matches!(
        after_alter(&t, "DROP PRIMARY KEY, ADD PRIMARY KEY (b)"),
        Some(RereadReason::RowKey { .. })
    ));
    assert!(matches!(
        after_alter(&t, "MODIFY p DECIMAL(6,2) NOT NULL"),
        Some(RereadReason::NotNull { .. })
    ));
}

#[test]
fn a_reordered_primary_key_keeps_values() {
    // DROP PRIMARY KEY, ADD PRIMARY KEY (b, a) of a key (a, b): the same
    // columns tell the same rows apart.
    let mut before = table(&[
        ("a", "int", None, false, true),
        ("b", "int", None, false, true),
    ]);
    let mut after = before.clone();
    for (c, place) in before.columns.iter_mut().zip([1, 2]) {
        c.key_position = Some(place);
    }
    for (c, place) in after.columns.iter_mut().zip([2, 1]) {
        c.key_position = Some(place);
    }
    assert_eq!(after.fold_key(), ["b", "a"]);
    assert_eq!(needs_reread(&before, &after, &same_names(&after)), None);
}
