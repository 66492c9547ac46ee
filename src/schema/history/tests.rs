use super::*;

fn version(v: u32, pos: u64, ckpt: u64, cols: &[(&str, &str)]) -> TableVersion {
    TableVersion {
        schema: TableSchema {
            database: "shop".into(),
            name: "t".into(),
            version: v,
            columns: cols
                .iter()
                .map(|(n, t)| {
                    let mut c =
                        ColumnDef::new(*n, *t, Some("utf8mb4".into()), true, *n == "id").unwrap();
                    // As the tracker records them (no name here needs another).
                    c.lake_name = n.to_string();
                    c
                })
                .collect(),
            charset: Some("utf8mb4".into()),
            unique_keys: Vec::new(),
        },
        order_key: v as i64 * 10,
        position: BinlogPosition {
            file: "binlog.000001".into(),
            pos,
        },
        gtid: Some(format!("0-1-{}", v * 5)),
        committed_at: format!("2026-01-01T00:00:0{v}Z"),
        statement: (v > 1).then(|| "ALTER TABLE t ADD c INT".to_string()),
        dropped: false,
        checkpoint: ckpt,
    }
}

#[test]
fn unique_keys_are_kept_and_old_versions_have_none() {
    let h = SchemaHistory::in_memory().unwrap();
    let mut v = version(1, 100, 1, &[("code", "varchar(3)"), ("n", "int")]);
    v.schema.unique_keys = vec![
        UniqueKey {
            name: "code".into(),
            columns: vec!["code".into()],
            prefix: false,
            hash: false,
        },
        UniqueKey {
            name: "k2".into(),
            columns: vec!["n".into(), "code".into()],
            prefix: true,
            hash: true,
        },
    ];
    h.insert(&v).unwrap();
    assert_eq!(h.versions("shop", "t").unwrap(), [v.clone()]);
    assert_eq!(TableVersion::from_json(&v.to_json()).unwrap(), v);
    // A lake version and a SQLite row from before unique keys were recorded.
    let mut old = v.to_json();
    old.as_object_mut().unwrap().remove("unique_keys");
    assert!(TableVersion::from_json(&old)
        .unwrap()
        .schema
        .unique_keys
        .is_empty());
    h.db.execute("UPDATE table_versions SET unique_keys = NULL", [])
        .unwrap();
    assert!(h.versions("shop", "t").unwrap()[0]
        .schema
        .unique_keys
        .is_empty());
    // `schema resync` shapes keep them too.
    let resync = as_pending_resync(&h, &v.schema);
    assert_eq!(resync.unique_keys, v.schema.unique_keys);
}

/// `schema` recorded as a `schema resync` shape, and read back.
fn as_pending_resync(h: &SchemaHistory, schema: &TableSchema) -> ResyncShape {
    let at = BinlogPosition {
        file: "binlog.000001".into(),
        pos: 700,
    };
    h.add_pending_resync(schema, &at).unwrap();
    h.pending_resync("shop", "t", &at).unwrap().unwrap()
}

#[test]
fn point_in_time_lookup_and_rollback() {
    let h = SchemaHistory::in_memory().unwrap();
    h.insert(&version(1, 100, 1, &[("id", "int")])).unwrap();
    h.insert(&version(2, 500, 2, &[("id", "int"), ("c", "varchar(3)")]))
        .unwrap();
    h.insert(&version(3, 900, 3, &[("id", "bigint")])).unwrap();
    let at = |s: &str| {
        h.at("shop", "t", &PointInTime::parse(s).unwrap())
            .unwrap()
            .map(|v| v.schema.version)
    };
    assert_eq!(at("binlog.000001:499"), Some(1));
    assert_eq!(at("binlog.000001:500"), Some(2));
    assert_eq!(at("binlog.000001:99"), None);
    assert_eq!(at("0-1-12"), Some(2));
    assert_eq!(at("2026-01-01T00:00:03Z"), Some(3));
    assert_eq!(h.remove_after(2).unwrap(), 1);
    assert_eq!(h.latest_all().unwrap()[0].schema.version, 2);
    let back = TableVersion::from_json(
        &version(2, 500, 2, &[("id", "int"), ("c", "varchar(3)")]).to_json(),
    )
    .unwrap();
    assert_eq!(back, h.versions("shop", "t").unwrap()[1]);
}

fn manifest(seq: u64, types: Option<u32>) -> Manifest {
    let mut m = json!({
        "format": 1,
        "seq": seq,
        "committed_at": "2026-01-01T00:00:00.000Z",
        "writer": {"id": "ab12", "version": "0.1.0"},
        "source": {"flavor": "mariadb", "server_id": 1, "server_uuid": null, "version": "10.11"},
        "cursor": {"file": "binlog.000001", "pos": 4, "gtid": null, "next_seq": 1, "next_tx_seq": 1},
        "files": [],
        "ddl": []
    });
    if let Some(t) = types {
        m["types"] = t.into();
    }
    serde_json::from_value(m).unwrap()
}

/// A version object as the first release wrote it: `arrow_type` as it mapped.
async fn put_old_version(store: &dyn ObjectStore, ckpt: u64, columns: serde_json::Value) {
    let mut v = version(1, 100, ckpt, &[("id", "int")]).to_json();
    v["columns"] = columns;
    let path = lake_path(&version(1, 100, ckpt, &[]), "ab12");
    store
        .put(&path, PutPayload::from(v.to_string().into_bytes()))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lake_of_the_first_releases_types_is_refused() {
    let store = object_store::memory::InMemory::new();
    // A lake whose every stored type is still this release's.
    put_old_version(
            &store,
            1,
            json!([{"name": "id", "mysql_type": "bigint(20)", "arrow_type": "Int64"},
                   {"name": "s", "mysql_type": "varchar(5)", "charset": "utf8mb4", "arrow_type": "Utf8"}]),
        )
        .await;
    check_lake_types(&store, &manifest(1, None)).await.unwrap();
    // A later checkpoint that never committed is not the lake's.
    put_old_version(
        &store,
        3,
        json!([{"name": "q", "mysql_type": "int(10) unsigned", "arrow_type": "UInt32"}]),
    )
    .await;
    check_lake_types(&store, &manifest(2, None)).await.unwrap();
    // Committed: refused, naming the column and what to do.
    let err = check_lake_types(&store, &manifest(3, None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("shop.t.q int(10) unsigned is UInt32 there, Int64 now")
            && err.contains("start a new lake")
            && err.contains("readable as Parquet")
            && !err.contains('\n'),
        "{err}"
    );
    // A manifest of this release proves the lake clean without a read.
    check_lake_types(&store, &manifest(3, Some(crate::lake::manifest::TYPES)))
        .await
        .unwrap();
    for (mysql, old) in [
        ("time(6)", "Duration(µs)"),
        ("decimal(65,30)", "Decimal256(65, 30)"),
        ("int(11)", "Int32"),
    ] {
        assert!(
            changed_column_type(
                "shop.t",
                &json!([{"name": "c", "mysql_type": mysql, "arrow_type": old}])
            )
            .is_some(),
            "{mysql} stored as {old}"
        );
    }
}

#[test]
fn bad_points_are_explained() {
    assert!(PointInTime::parse("yesterday")
        .unwrap_err()
        .contains("FILE:POS"));
    assert!(matches!(
        PointInTime::parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
        Ok(PointInTime::Gtid(_))
    ));
}

/// The primary key's order is stored with its columns; a version stored
/// before it was (in the lake or in SQLite) loads without places, and its
/// key folds in table order as it did.
#[test]
fn key_order_is_kept_and_old_versions_fold_in_table_order() {
    let h = SchemaHistory::in_memory().unwrap();
    let mut v = version(1, 100, 1, &[("a", "int"), ("b", "int"), ("v", "text")]);
    for (c, place) in v.schema.columns.iter_mut().zip([Some(2), Some(1), None]) {
        c.primary_key = place.is_some();
        c.key_position = place;
    }
    assert_eq!(v.schema.fold_key(), ["b", "a"]);
    h.insert(&v).unwrap();
    assert_eq!(h.versions("shop", "t").unwrap(), [v.clone()]);
    assert_eq!(TableVersion::from_json(&v.to_json()).unwrap(), v);
    // `schema resync` shapes keep it too.
    let resync = as_pending_resync(&h, &v.schema);
    assert_eq!(resync.columns, v.schema.columns);

    let without_places = |mut columns: serde_json::Value| {
        for c in columns.as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("key_position");
        }
        columns
    };
    let mut old = v.to_json();
    old["columns"] = without_places(old["columns"].take());
    let old = TableVersion::from_json(&old).unwrap();
    assert!(old.schema.columns.iter().all(|c| c.key_position.is_none()));
    assert_eq!(old.schema.fold_key(), ["a", "b"]);
    let stored = without_places(columns_json(&v.schema.columns)).to_string();
    h.db.execute("UPDATE table_versions SET columns = ?1", [stored])
        .unwrap();
    assert_eq!(
        h.versions("shop", "t").unwrap()[0].schema.fold_key(),
        ["a", "b"]
    );
    // A place that is no place is refused, naming the column.
    let mut bad = v.to_json();
    bad["columns"][0]["key_position"] = serde_json::json!(0);
    let e = TableVersion::from_json(&bad).unwrap_err();
    assert!(e.contains("`a`"), "{e}");
}
