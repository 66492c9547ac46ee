use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;

use super::names::decode_part;
use super::*;

#[test]
fn folder_names_decode() {
    assert_eq!(decode_part("a%2Fa"), "a/a");
    assert_eq!(decode_part("plain"), "plain");
    assert_eq!(decode_part("bad%2"), "bad%2");
    assert_eq!(decode_part("%"), "%");
    let f = DataFile {
        table: "a/a.t".into(),
        path: crate::commit::data_file_path("a/a", "t", 3, 0, "w").to_string(),
        rows: 1,
        bytes: 1,
        schema_version: 1,
    };
    let dir = table_dir(&f);
    assert_eq!(dir.as_ref(), "a%2Fa/t");
    assert_eq!(table_names(&dir), Some(("a/a".into(), "t".into())));
}

/// A file of `shop.t` whose `n` is `n`, written at checkpoint `seq`.
async fn shop_t_file(store: &dyn ObjectStore, seq: u64, n: ArrayRef) -> DataFile {
    use arrow::array::Int64Array;
    let rows = n.len();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        Field::new("id", arrow::datatypes::DataType::Int64, false),
        Field::new("n", n.data_type().clone(), true),
    ]));
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let batch = RecordBatch::try_new(schema, vec![ids, n]).unwrap();
    let path = crate::commit::data_file_path("shop", "t", seq, 0, "w");
    let bytes = crate::sink::encode_parquet(&batch).unwrap();
    let size = crate::sink::put_file(store, &path, bytes, 16 << 20)
        .await
        .unwrap();
    DataFile {
        table: "shop.t".into(),
        path: path.to_string(),
        rows: rows as u64,
        bytes: size,
        schema_version: seq as u32,
    }
}

fn manifest_of(seq: u64, file: DataFile) -> Manifest {
    serde_json::from_value(json!({
        "format": crate::commit::FORMAT,
        "seq": seq,
        "committed_at": "2026-12-05T00:00:00Z",
        "writer": {"id": "w", "version": "0"},
        "source": {"flavor": "mariadb", "server_id": 1, "version": "x"},
        "cursor": {"file": "binlog.000001", "pos": 4, "next_seq": 1, "next_tx_seq": 1},
        "files": [file],
        "ddl": [],
    }))
    .unwrap()
}

#[tokio::test]
async fn a_type_change_rewrite_whose_version_another_commit_took_tries_again() {
    use arrow::array::{Decimal128Array, Int32Array};
    let dir = tempfile::tempdir().unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = crate::sink::testing::FaultyStore {
        inner: Arc::new(local),
        faults: Default::default(),
    };
    let mut tables = TableLogs::new();
    let schemas = SchemaVersions::default();
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3]));
    let first = manifest_of(1, shop_t_file(&store, 1, ints).await);
    assert_eq!(
        tables
            .commit_manifest(&store, &first, &schemas)
            .await
            .unwrap(),
        1
    );

    // `n` became DECIMAL(12,2): the next commit copies the first file in
    // the new type at version 1, which a compaction takes just before.
    let decimals = Decimal128Array::from(vec![Some(450), None])
        .with_precision_and_scale(12, 2)
        .unwrap();
    let second = manifest_of(2, shop_t_file(&store, 2, Arc::new(decimals)).await);
    let taken = Path::from("shop/t/_delta_log/00000000000000000001.json");
    let foreign = r#"{"commitInfo":{"timestamp":1,"operation":"OPTIMIZE"}}"#;
    *store.faults.race.lock().unwrap() =
        Some(("_rewritten/".into(), taken, bytes::Bytes::from(foreign)));
    assert_eq!(
        tables
            .commit_manifest(&store, &second, &schemas)
            .await
            .unwrap(),
        1
    );
    assert!(
        store.faults.race.lock().unwrap().is_none(),
        "the race was run"
    );

    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("shop/t/_rewritten"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let first_name = Path::parse(&first.files[0].path).unwrap();
    let first_name = first_name.filename().unwrap();
    // The copy of the lost try is gone; the one of the second try stays.
    assert_eq!(names, vec![format!("v2-{first_name}")]);
    let log = dir.path().join("shop/t/_delta_log");
    let version = |v: u64| std::fs::read_to_string(log.join(format!("{v:020}.json"))).unwrap();
    assert_eq!(version(1), foreign);
    let rewrite = version(2);
    assert!(
        rewrite.contains(&format!("_rewritten/v2-{first_name}")),
        "{rewrite}"
    );
    assert!(rewrite.contains("\"remove\""), "{rewrite}");
    assert!(version(3).contains(
        Path::parse(&second.files[0].path)
            .unwrap()
            .filename()
            .unwrap()
    ));
    assert!(!log.join(format!("{:020}.json", 4)).exists());
}
