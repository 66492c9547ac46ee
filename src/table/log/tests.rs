use super::*;

/// The `add` of data file `part-<n>.parquet`, of size `n`.
fn add(n: u64) -> Value {
    json!({"add": {"path": format!("part-{n}.parquet"), "partitionValues": {}, "size": n,
           "modificationTime": 1000 + n, "dataChange": true}})
}

#[tokio::test]
async fn reads_multi_part_checkpoints_and_refuses_v2_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("db/t");
    put_commit(store.as_ref(), &table, 0, &[add(1)])
        .await
        .unwrap();
    put_commit(store.as_ref(), &table, 1, &[add(2)])
        .await
        .unwrap();
    let state = load(store.as_ref(), &table, true).await.unwrap();
    write_checkpoint(store.as_ref(), &table, &state, 1, 0)
        .await
        .unwrap();
    // Two parts as Spark names them (here the same actions twice), and a
    // commit after them that only the parts' version skips to.
    let one = store
        .get(&checkpoint_path(&table, 1))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    store.delete(&checkpoint_path(&table, 1)).await.unwrap();
    for i in 1..=2 {
        let part = log_dir(&table).join(format!("{:020}.checkpoint.{i:010}.{:010}.parquet", 1, 2));
        store
            .put(&part, PutPayload::from(one.clone()))
            .await
            .unwrap();
    }
    store.delete(&commit_path(&table, 0)).await.unwrap();
    store
        .put(
            &last_checkpoint_path(&table),
            PutPayload::from(r#"{"version":1,"size":4,"parts":2}"#),
        )
        .await
        .unwrap();
    put_commit(store.as_ref(), &table, 2, &[add(3)])
        .await
        .unwrap();
    let got = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(got.version, Some(2));
    assert_eq!(got.files.len(), 3);

    // A hint naming a V2 checkpoint, or the single-file checkpoint 1
    // that is not there: the log is listed, read from its complete
    // multi-part checkpoint, and the hint names that one again.
    for hint in [
        r#"{"version":1,"size":4,"v2Checkpoint":{"path":"x"}}"#,
        r#"{"version":1,"size":4}"#,
    ] {
        store
            .put(&last_checkpoint_path(&table), PutPayload::from(hint))
            .await
            .unwrap();
        let got = load(store.as_ref(), &table, true).await.unwrap();
        assert_eq!((got.version, got.files.len()), (Some(2), 3), "{hint}");
        let repaired = hint_of(store.as_ref(), &table).await;
        assert_eq!(repaired["version"], 1);
        assert_eq!(repaired["parts"], 2);
    }

    // Only a V2 checkpoint covers commit 0: no complete chain reads the
    // log, and the error names the table and the way out.
    for i in 1..=2 {
        let part = log_dir(&table).join(format!("{:020}.checkpoint.{i:010}.{:010}.parquet", 1, 2));
        store.delete(&part).await.unwrap();
    }
    let v2 = log_dir(&table).join(format!(
        "{:020}.checkpoint.{}.json",
        1,
        uuid::Uuid::new_v4()
    ));
    store.put(&v2, PutPayload::from("{}")).await.unwrap();
    let err = load(store.as_ref(), &table, true).await.unwrap_err();
    assert!(
        err.to_string().contains("db/t") && err.to_string().contains("V2"),
        "{err}"
    );
}

async fn hint_of(store: &dyn ObjectStore, table: &Path) -> Value {
    let got = store.get(&last_checkpoint_path(table)).await.unwrap();
    serde_json::from_slice(&got.bytes().await.unwrap()).unwrap()
}

/// delta-rs's `create_checkpoint` raced by a clean-up: `_last_checkpoint`
/// names a checkpoint that is gone while a newer one is there, or names
/// one when the log has none. The load lists the log and repairs the
/// hint (delta-kernel readers refuse a hint without a checkpoint).
#[tokio::test]
async fn a_stale_last_checkpoint_is_a_hint_the_load_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("db/t");
    for v in 0..4 {
        put_commit(store.as_ref(), &table, v, &[add(v)])
            .await
            .unwrap();
    }
    // No checkpoint at all, and a hint naming 3.
    let stale = PutPayload::from(r#"{"version":3,"size":9}"#);
    store
        .put(&last_checkpoint_path(&table), stale)
        .await
        .unwrap();
    let got = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!((got.version, got.files.len()), (Some(3), 4));
    assert!(
        store.head(&last_checkpoint_path(&table)).await.is_err(),
        "a hint without any checkpoint is removed"
    );

    // Checkpoint 2 (another writer's), a hint naming 1, which the
    // clean-up took with commits 0 and 1.
    write_checkpoint(
        store.as_ref(),
        &table,
        &load(store.as_ref(), &table, true).await.unwrap(),
        2,
        0,
    )
    .await
    .unwrap();
    let stale = PutPayload::from(r#"{"version":1,"size":3}"#);
    store
        .put(&last_checkpoint_path(&table), stale)
        .await
        .unwrap();
    for v in 0..2 {
        store.delete(&commit_path(&table, v)).await.unwrap();
    }
    put_commit(store.as_ref(), &table, 4, &[add(4)])
        .await
        .unwrap();
    let got = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!((got.version, got.files.len()), (Some(4), 5));
    assert_eq!(hint_of(store.as_ref(), &table).await["version"], 2);
    // Read once more through the repaired hint alone.
    let again = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(
        again.files.keys().collect::<Vec<_>>(),
        got.files.keys().collect::<Vec<_>>()
    );
}

/// delta-rs writes a checkpoint's live `add` of a file before the
/// tombstones of its earlier entries, one of them without a vector: the
/// file stays live with its vector (an entry is its path and vector).
#[tokio::test]
async fn a_foreign_checkpoint_lists_tombstones_after_the_live_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("_current/db/t");
    let dv = |id: &str| json!({"storageType": "u", "pathOrInlineDv": id, "offset": 1, "sizeInBytes": 82, "cardinality": 5});
    let rows = vec![
        json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                            "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}}),
        json!({"txn": {"appId": "sluice-current", "version": 7, "lastUpdated": 1}}),
        json!({"add": {"path": "current-1.parquet", "partitionValues": {}, "size": 10,
                       "modificationTime": 1, "dataChange": false, "deletionVector": dv("0000000007VIO-#S3{GI"),
                       "tags": {"sluice.first": "01", "sluice.last": "ff"}}}),
        json!({"remove": {"path": "current-1.parquet", "deletionTimestamp": 5, "dataChange": true,
                          "deletionVector": dv("0000000006HF[ZLxxJ&u")}}),
        json!({"remove": {"path": "current-1.parquet", "deletionTimestamp": 4, "dataChange": true}}),
    ];
    let bytes = encode_checkpoint(&table, 6, &rows).unwrap();
    store
        .put(&checkpoint_path(&table, 6), PutPayload::from(bytes))
        .await
        .unwrap();
    let hint = PutPayload::from(r#"{"version":6,"size":5}"#);
    store
        .put(&last_checkpoint_path(&table), hint)
        .await
        .unwrap();
    let got = load(store.as_ref(), &table, true).await.unwrap();
    let live = &got.files["current-1.parquet"];
    assert_eq!(
        live["deletionVector"]["pathOrInlineDv"],
        "0000000007VIO-#S3{GI"
    );
    assert_eq!(live["tags"]["sluice.first"], "01");
    assert_eq!(got.tombstones.len(), 2);
    assert_eq!(got.txns["sluice-current"]["version"], 7);
}

#[tokio::test]
async fn a_checkpoint_replays_like_the_commits_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("db/t");
    let add = |n: u64| {
        json!({"add": {"path": format!("part-{n}.parquet"), "partitionValues": {}, "size": n,
               "modificationTime": 1000 + n, "dataChange": true,
               "stats": format!("{{\"numRecords\":{n}}}")}})
    };
    let first = vec![
        json!({"commitInfo": {"operation": "WRITE", "sluice": {"seq": 1}}}),
        json!({"txn": {"appId": APP_ID, "version": 1, "lastUpdated": 5}}),
        json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                            "readerFeatures": ["timestampNtz"], "writerFeatures": ["timestampNtz"]}}),
        json!({"metaData": {"id": "abc", "format": {"provider": "parquet", "options": {}},
                            "schemaString": "{}", "partitionColumns": [], "configuration": {},
                            "createdTime": 7}}),
        add(1),
        add(2),
    ];
    assert!(matches!(
        put_commit(store.as_ref(), &table, 0, &first).await.unwrap(),
        Put::Written
    ));
    assert!(matches!(
        put_commit(store.as_ref(), &table, 0, &first[1..])
            .await
            .unwrap(),
        Put::Taken
    ));
    let second = vec![
        json!({"txn": {"appId": APP_ID, "version": 4, "lastUpdated": 6}}),
        add(3),
    ];
    put_commit(store.as_ref(), &table, 1, &second)
        .await
        .unwrap();
    let state = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(state.version, Some(1));
    assert_eq!(state.applied, 4);
    assert_eq!(state.files.len(), 3);
    assert_eq!(state.last_info, Some(json!({"seq": 1})));

    write_checkpoint(store.as_ref(), &table, &state, 1, 0)
        .await
        .unwrap();
    let again = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(again.version, Some(1));
    assert_eq!(again.applied, 4);
    assert_eq!(again.protocol, state.protocol);
    assert_eq!(again.metadata.as_ref().unwrap()["id"], "abc");
    assert_eq!(
        again.files.keys().collect::<Vec<_>>(),
        state.files.keys().collect::<Vec<_>>()
    );
    assert_eq!(again.files["part-3.parquet"]["stats"], "{\"numRecords\":3}");
    assert_eq!(again.files["part-3.parquet"]["size"], 3);

    put_commit(store.as_ref(), &table, 2, &[add(9)])
        .await
        .unwrap();
    let after = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(after.version, Some(2));
    assert_eq!(after.files.len(), 4);

    // A gap in the log is an error that names the table, not a panic.
    store
        .put(&commit_path(&table, 4), PutPayload::from("{}\n"))
        .await
        .unwrap();
    let err = load(store.as_ref(), &table, false).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "lake: Delta log of db/t: commit 3 is missing (the log has 4)"
    );
}

#[tokio::test]
async fn a_checkpoint_carries_the_recent_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("db/t");
    let now: i64 = 100 * 86_400_000;
    let add = |p: &str| {
        json!({"add": {"path": p, "partitionValues": {}, "size": 1,
               "modificationTime": 1, "dataChange": true}})
    };
    let remove = |p: &str, at: i64| {
        json!({"remove": {"path": p, "deletionTimestamp": at, "dataChange": true,
                          "extendedFileMetadata": true, "partitionValues": {}, "size": 1}})
    };
    let md = json!({"metaData": {"id": "abc", "format": {"provider": "parquet", "options": {}},
                    "schemaString": "{}", "partitionColumns": [],
                    "configuration": {"delta.deletedFileRetentionDuration": "interval 2 days"},
                    "createdTime": 7}});
    put_commit(
        store.as_ref(),
        &table,
        0,
        &[md, add("a"), add("b"), add("c"), add("d")],
    )
    .await
    .unwrap();
    let day = 86_400_000;
    put_commit(
        store.as_ref(),
        &table,
        1,
        &[
            remove("a", now - 3 * day),
            remove("b", now - day),
            remove("c", now - 1),
            // Removed, then added again: live, no tombstone.
            remove("d", now - 1),
            add("d"),
        ],
    )
    .await
    .unwrap();
    let state = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(state.files.keys().collect::<Vec<_>>(), ["d"]);
    assert_eq!(state.tombstones.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    write_checkpoint(store.as_ref(), &table, &state, 1, now)
        .await
        .unwrap();
    let again = load(store.as_ref(), &table, true).await.unwrap();
    assert_eq!(again.files.keys().collect::<Vec<_>>(), ["d"]);
    assert_eq!(again.tombstones.keys().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(again.tombstones["b"]["deletionTimestamp"], now - day);
    assert_eq!(again.tombstones["b"]["dataChange"], false);
    assert_eq!(again.tombstones["b"]["size"], 1);
}

#[tokio::test]
async fn a_commit_read_back_as_ours_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sink::open_local(dir.path()).unwrap();
    let table = Path::from("db/t");
    let ours = [json!({"txn": {"appId": APP_ID, "version": 3, "lastUpdated": 5}})];
    put_commit(store.as_ref(), &table, 0, &ours).await.unwrap();
    // "Already exists" for the same bytes: a resend of a put that landed.
    assert!(matches!(
        put_commit(store.as_ref(), &table, 0, &ours).await.unwrap(),
        Put::Written
    ));
    let theirs = [json!({"txn": {"appId": APP_ID, "version": 4, "lastUpdated": 5}})];
    assert!(matches!(
        put_commit(store.as_ref(), &table, 0, &theirs)
            .await
            .unwrap(),
        Put::Taken
    ));
}
