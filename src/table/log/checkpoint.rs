//! Classic single-file checkpoints (`<version>.checkpoint.parquet`): the
//! schema sluice writes them in, reading any writer's (delta-rs, Spark) back
//! into actions, and writing one with its `_last_checkpoint` hint.

use super::*;

fn string_map() -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ])),
            false,
        )),
        false,
    )
}

fn strings() -> DataType {
    DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
}

fn nullable_struct(name: &str, fields: Vec<Field>) -> Field {
    Field::new(name, DataType::Struct(fields.into()), true)
}

/// A file's deletion vector descriptor, in `add` and `remove`.
fn deletion_vector() -> Field {
    let f = |name: &str, t: DataType| Field::new(name, t, true);
    nullable_struct(
        "deletionVector",
        vec![
            f("storageType", DataType::Utf8),
            f("pathOrInlineDv", DataType::Utf8),
            f("offset", DataType::Int32),
            f("sizeInBytes", DataType::Int32),
            f("cardinality", DataType::Int64),
        ],
    )
}

/// The columns of a classic checkpoint, as Spark writes them (every field
/// nullable), restricted to the actions sluice writes.
fn checkpoint_schema() -> Schema {
    let f = |name: &str, t: DataType| Field::new(name, t, true);
    Schema::new(vec![
        nullable_struct(
            "txn",
            vec![
                f("appId", DataType::Utf8),
                f("version", DataType::Int64),
                f("lastUpdated", DataType::Int64),
            ],
        ),
        nullable_struct(
            "add",
            vec![
                f("path", DataType::Utf8),
                f("partitionValues", string_map()),
                f("size", DataType::Int64),
                f("modificationTime", DataType::Int64),
                f("dataChange", DataType::Boolean),
                f("stats", DataType::Utf8),
                f("tags", string_map()),
                deletion_vector(),
            ],
        ),
        nullable_struct(
            "remove",
            vec![
                f("path", DataType::Utf8),
                f("deletionTimestamp", DataType::Int64),
                f("dataChange", DataType::Boolean),
                f("extendedFileMetadata", DataType::Boolean),
                f("partitionValues", string_map()),
                f("size", DataType::Int64),
                deletion_vector(),
            ],
        ),
        nullable_struct(
            "metaData",
            vec![
                f("id", DataType::Utf8),
                f("name", DataType::Utf8),
                f("description", DataType::Utf8),
                nullable_struct(
                    "format",
                    vec![f("provider", DataType::Utf8), f("options", string_map())],
                ),
                f("schemaString", DataType::Utf8),
                f("partitionColumns", strings()),
                f("configuration", string_map()),
                f("createdTime", DataType::Int64),
            ],
        ),
        nullable_struct(
            "protocol",
            vec![
                f("minReaderVersion", DataType::Int32),
                f("minWriterVersion", DataType::Int32),
                f("readerFeatures", strings()),
                f("writerFeatures", strings()),
            ],
        ),
    ])
}

/// The actions of a checkpoint file, one per row.
pub(crate) fn read_checkpoint(bytes: Bytes) -> std::result::Result<Vec<Value>, String> {
    let batch = crate::sink::decode_parquet(bytes).map_err(|e| format!("checkpoint: {e}"))?;
    let mut out = Vec::new();
    let mut writer = arrow::json::ArrayWriter::new(&mut out);
    writer
        .write(&batch)
        .and_then(|_| writer.finish())
        .map_err(|e| format!("checkpoint: {e}"))?;
    drop(writer);
    if out.is_empty() {
        return Ok(Vec::new());
    }
    let mut rows: Vec<Value> =
        serde_json::from_slice(&out).map_err(|e| format!("checkpoint: {e}"))?;
    for row in &mut rows {
        // Spark may keep an `add`'s statistics only as a struct
        // (`delta.checkpoint.writeStatsAsJson = false`): the fold and
        // compaction read the JSON form.
        if let Some(add) = row.get_mut("add").and_then(Value::as_object_mut) {
            if add.get("stats").is_none_or(Value::is_null) {
                if let Some(parsed) = add.get("stats_parsed").filter(|v| v.is_object()) {
                    let text = parsed.to_string();
                    add.insert("stats".into(), Value::String(text));
                }
            }
        }
    }
    Ok(rows)
}

/// The Parquet of a checkpoint of `version` holding `rows` (one action each).
pub(crate) fn encode_checkpoint(table: &Path, version: u64, rows: &[Value]) -> Result<Vec<u8>> {
    let schema = Arc::new(checkpoint_schema());
    let mut decoder = arrow::json::ReaderBuilder::new(schema.clone())
        .build_decoder()
        .map_err(|e| unreadable(table, format!("checkpoint {version}: {e}")))?;
    decoder
        .serialize(rows)
        .map_err(|e| unreadable(table, format!("checkpoint {version}: {e}")))?;
    let batch = decoder
        .flush()
        .map_err(|e| unreadable(table, format!("checkpoint {version}: {e}")))?
        .unwrap_or_else(|| arrow::record_batch::RecordBatch::new_empty(schema));
    let mut bytes = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None)?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(bytes)
}

/// Writes the checkpoint of `version` (the state of the log at it: protocol,
/// metaData, every txn, every live file, the tombstones younger than the
/// table's retention as of `now_ms`), then points `_last_checkpoint` at it.
/// Both are plain overwrites: a checkpoint of a version holds the same
/// files whoever writes it.
pub async fn write_checkpoint(
    store: &dyn ObjectStore,
    table: &Path,
    state: &TableState,
    version: u64,
    now_ms: i64,
) -> Result<()> {
    let mut rows: Vec<Value> = Vec::new();
    if let Some(p) = &state.protocol {
        rows.push(json!({"protocol": p}));
    }
    if let Some(m) = &state.metadata {
        rows.push(json!({"metaData": m}));
    }
    rows.extend(state.txns.values().map(|t| json!({"txn": t})));
    rows.extend(state.files.values().map(|a| {
        // The checkpoint's `add` has only the columns above.
        json!({"add": {
            "path": a["path"],
            "partitionValues": a.get("partitionValues").cloned().unwrap_or(json!({})),
            "size": a["size"],
            "modificationTime": a["modificationTime"],
            "dataChange": false,
            "stats": a.get("stats").cloned().unwrap_or(Value::Null),
            // Current tables keep each file's key range here.
            "tags": a.get("tags").cloned().unwrap_or(Value::Null),
            "deletionVector": a.get("deletionVector").cloned().unwrap_or(Value::Null),
        }})
    }));
    let retention = match tombstones::retention_ms(state.metadata.as_ref()) {
        Ok(ms) => Some(ms),
        Err(e) => {
            // Keeping every tombstone only makes the checkpoint larger;
            // dropping recent ones would let VACUUM delete live history.
            tracing::warn!(%table, version, error = %e, "the Delta checkpoint keeps every remove tombstone");
            None
        }
    };
    rows.extend(
        tombstones::kept(state.tombstones.values(), now_ms, retention)
            .into_iter()
            .map(|r| {
                json!({"remove": {
                    "path": r["path"],
                    "deletionTimestamp": r.get("deletionTimestamp").cloned().unwrap_or(Value::Null),
                    // As Spark writes them: a checkpoint changes no data.
                    "dataChange": false,
                    "extendedFileMetadata": r.get("extendedFileMetadata").cloned().unwrap_or(Value::Null),
                    "partitionValues": r.get("partitionValues").cloned().unwrap_or(Value::Null),
                    "size": r.get("size").cloned().unwrap_or(Value::Null),
                    "deletionVector": r.get("deletionVector").cloned().unwrap_or(Value::Null),
                }})
            }),
    );
    let bytes = encode_checkpoint(table, version, &rows)?;
    store
        .put(&checkpoint_path(table, version), PutPayload::from(bytes))
        .await?;
    let hint = json!({"version": version, "size": rows.len()});
    store
        .put(
            &last_checkpoint_path(table),
            PutPayload::from(hint.to_string()),
        )
        .await?;
    Ok(())
}

/// Test hook: a Delta checkpoint every this many versions instead of
/// [`CHECKPOINT_INTERVAL`], so that tests meet checkpoints in few commits.
pub const CHECKPOINT_INTERVAL_ENV: &str = "SLUICE_TEST_CHECKPOINT_INTERVAL";

fn checkpoint_interval() -> u64 {
    std::env::var(CHECKPOINT_INTERVAL_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(CHECKPOINT_INTERVAL)
}

/// After `version` of the table at `dir` committed: a Delta checkpoint
/// every [`CHECKPOINT_INTERVAL`] versions. A failure is logged only (readers
/// replay the commits instead).
pub(crate) async fn checkpoint_if_due(store: &dyn ObjectStore, dir: &Path, version: u64) {
    if version > 0 && version % checkpoint_interval() == 0 {
        if let Err(e) = checkpoint(store, dir, version).await {
            tracing::warn!(%dir, version, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not write a Delta checkpoint; readers replay the commits instead");
        }
    }
}

async fn checkpoint(store: &dyn ObjectStore, dir: &Path, version: u64) -> Result<()> {
    let state = load(store, dir, true).await?;
    if state.version != Some(version) {
        // A newer version exists already: its writer checkpoints.
        return Ok(());
    }
    let now = chrono::Utc::now().timestamp_millis();
    // The expired data files go before the checkpoint that forgets them.
    let files = crate::table::cleanup::expired_data_files(store, dir, &state, now)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%dir, version, error = %e, "could not delete the files removed from the Delta table longer ago than its retention; the next checkpoint tries again");
            0
        });
    write_checkpoint(store, dir, &state, version, now).await?;
    let logs = crate::table::cleanup::expired_log(store, dir, state.metadata.as_ref(), version, now)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%dir, version, error = %e, "could not delete the Delta log files older than its retention; the next checkpoint tries again");
            0
        });
    if files + logs > 0 {
        tracing::info!(%dir, version, data_files = files, log_files = logs, "deleted what the Delta table no longer needs (removed files and log entries past its retention)");
    }
    Ok(())
}
