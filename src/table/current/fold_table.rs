//! The fold of one table: the changes since its last fold, applied to the
//! files that hold their keys, in one Delta commit. Memory holds the changes
//! and one file's rows (plus its rewrite) at a time.

use std::collections::BTreeMap;

use super::*;

/// Rows of changelog files (and, when the key changed, of the table's own
/// files), in the current table's shape.
struct ChangeRows {
    batches: Vec<RecordBatch>,
    /// `(batch, row)` of each row a [`ChangeSet`] names.
    rows: Vec<(usize, usize)>,
    set: ChangeSet,
}

async fn decode(bytes: bytes::Bytes) -> Result<RecordBatch> {
    tokio::task::spawn_blocking(move || crate::sink::decode_parquet(bytes))
        .await
        .map_err(|e| Error::Lake(format!("current table: a decode task failed: {e}")))?
}

fn key_rows(conv: &RowConverter, batch: &RecordBatch, key_idx: &[usize]) -> Result<Rows> {
    let cols: Vec<ArrayRef> = key_idx.iter().map(|i| batch.column(*i).clone()).collect();
    conv.convert_columns(&cols)
        .map_err(|e| Error::Lake(format!("current table: key of a row: {e}")))
}

fn lake_err(t: &FoldTable, what: impl std::fmt::Display) -> Error {
    Error::Lake(format!("current table of {}: {what}", t.name()))
}

/// The shape a fold writes and how it compares keys.
struct Target<'a> {
    tv: &'a TableVersion,
    schema: SchemaRef,
    conv: RowConverter,
    key_idx: Vec<usize>,
}

/// Reads the changelog files after `folded` and applies them in `_seq` order.
async fn read_change_rows(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    files: &[(u64, DataFile)],
    folded: u64,
    target: &Target<'_>,
) -> Result<ChangeRows> {
    let (tv, schema, conv, key_idx) =
        (target.tv, &target.schema, &target.conv, &target.key_idx[..]);
    let ncols = tv.schema.columns.len();
    let mut batches = Vec::new();
    // (_seq, batch, row, op, key, before key)
    let mut entries: Vec<(i64, usize, usize, Op)> = Vec::new();
    let mut keys: Vec<Rows> = Vec::new();
    for (_, f) in files.iter().filter(|(seq, _)| *seq > folded) {
        let bytes = ctx.store.get(&stored_path(&f.path)).await?.bytes().await?;
        let batch = decode(bytes).await?;
        let sources = shape::origins(&t.versions, f.schema_version, tv.schema.version);
        let mut cols = shape::project(&batch, &sources, schema, ncols)?;
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| lake_err(t, format!("changelog file {} has no {name}", f.path)))
        };
        let seq = cast(&column("_seq")?, &DataType::Int64).map_err(|e| lake_err(t, e))?;
        let ts = cast(
            &column("_ts")?,
            &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        )
        .map_err(|e| lake_err(t, e))?;
        let ops = cast(&column("_op")?, &DataType::Utf8).map_err(|e| lake_err(t, e))?;
        cols.push(seq.clone());
        cols.push(ts);
        let values = RecordBatch::try_new(schema.clone(), cols).map_err(|e| lake_err(t, e))?;
        let krows = key_rows(conv, &values, key_idx)?;
        let before = shape::project_before(&batch, &sources, schema, ncols)?;
        let brows = match before {
            Some(b) => {
                let cols: Vec<ArrayRef> = key_idx.iter().map(|i| b[*i].clone()).collect();
                Some(conv.convert_columns(&cols).map_err(|e| lake_err(t, e))?)
            }
            None => None,
        };
        let seqs = seq.as_primitive::<arrow::datatypes::Int64Type>();
        let ops = ops.as_string::<i32>();
        let b = batches.len();
        for r in 0..values.num_rows() {
            let op = match ops.value(r) {
                "insert" | "snapshot" => Op::Put,
                "update" => match &brows {
                    Some(br) => Op::Update {
                        before: br.row(r).as_ref().to_vec(),
                    },
                    None => Op::Put,
                },
                "delete" => Op::Delete,
                "truncate" => Op::Truncate,
                other => {
                    return Err(lake_err(
                        t,
                        format!("changelog file {} has a row with _op `{other}`", f.path),
                    ))
                }
            };
            entries.push((seqs.value(r), b, r, op));
        }
        batches.push(values);
        keys.push(krows);
    }
    entries.sort_by_key(|e| e.0);
    let mut out = ChangeRows {
        batches,
        rows: Vec::with_capacity(entries.len()),
        set: ChangeSet::default(),
    };
    for (_, b, r, op) in entries {
        let key = keys[b].row(r).as_ref().to_vec();
        out.set.apply(op, key, out.rows.len());
        out.rows.push((b, r));
    }
    Ok(out)
}

/// One file to write: the rows and an estimate of their encoded size.
struct Output<'a> {
    ctx: &'a Ctx<'a>,
    dir: &'a Path,
    conv: &'a RowConverter,
    key_idx: &'a [usize],
    adds: Vec<Value>,
    written: Vec<Path>,
    n: usize,
    bytes: u64,
}

impl Output<'_> {
    async fn write(&mut self, batch: RecordBatch, est_bytes: u64) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let per = apply::split_rows(batch.num_rows(), est_bytes, self.ctx.target_bytes);
        let mut start = 0;
        while start < batch.num_rows() {
            let len = per.min(batch.num_rows() - start);
            let chunk = batch.slice(start, len);
            start += len;
            let keys = key_rows(self.conv, &chunk, self.key_idx)?;
            let first = hex(keys.row(0).as_ref());
            let last = hex(keys.row(len - 1).as_ref());
            let encoded = tokio::task::spawn_blocking(move || crate::sink::encode_parquet(&chunk))
                .await
                .map_err(|e| Error::Lake(format!("current table: an encode task failed: {e}")))??;
            let encoded = bytes::Bytes::from(encoded);
            let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(
                &encoded,
                Default::default(),
            )?;
            let stats = super::super::stats::stats(meta.metadata());
            let name = format!(
                "current-{:020}-{:05}-{}.parquet",
                self.ctx.s1,
                self.n,
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            );
            self.n += 1;
            let path = self.dir.clone().join(name.as_str());
            let size = encoded.len() as u64;
            self.ctx.store.put(&path, PutPayload::from(encoded)).await?;
            self.written.push(path);
            if std::env::var_os(ABORT_IN_FOLD).is_some() {
                // Tests: a kill in the middle of a fold.
                std::process::abort();
            }
            self.bytes += size;
            self.adds.push(json!({"add": {
                "path": name,
                "partitionValues": {},
                "size": size,
                "modificationTime": chrono::Utc::now().timestamp_millis(),
                "dataChange": true,
                "stats": stats.to_string(),
                "tags": {TAG_FIRST: first, TAG_LAST: last},
            }}));
        }
        Ok(())
    }
}

fn pick(sources: &[&RecordBatch], indices: &[(usize, usize)]) -> Result<RecordBatch> {
    interleave_record_batch(sources, indices)
        .map_err(|e| Error::Lake(format!("current table: merging rows: {e}")))
}

/// Folds the changes of `t` since its last fold into its current table. With
/// `seed`, the table starts from a copy of another table's files (RENAME
/// TABLE); with `live`, it is folded in that shape (the old name of a
/// renamed table, up to the rename).
pub(super) async fn fold_table(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    state: TableState,
    files: &[(u64, DataFile)],
    seed: Option<(Path, TableState)>,
    live: Option<&TableVersion>,
) -> Result<FoldReport> {
    let dir = current_dir(&t.db, &t.table);
    let folded = folded_seq(&state);
    if state.version.is_some() && folded >= ctx.s1 {
        return Ok(FoldReport::default());
    }
    remove_unfinished(ctx.store.as_ref(), &dir, folded).await?;
    let Some(tv) = live.or_else(|| t.keyed_at(ctx.s1)) else {
        return Ok(FoldReport::default());
    };
    let schema = shape::current_schema(&tv.schema);
    let keys = shape::key_columns(&tv.schema);
    let key_idx: Vec<usize> = keys
        .iter()
        .filter_map(|k| tv.schema.columns.iter().position(|c| &c.name == k))
        .collect();
    let key_fields: Vec<SortField> = key_idx
        .iter()
        .map(|i| SortField::new(schema.field(*i).data_type().clone()))
        .collect();
    let key_desc = key_idx
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                schema.field(*i).name(),
                schema.field(*i).data_type()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let conv = RowConverter::new(key_fields).map_err(|e| lake_err(t, e))?;
    let target = Target {
        tv,
        schema: schema.clone(),
        conv,
        key_idx,
    };
    let (conv, key_idx) = (&target.conv, &target.key_idx);

    // The starting point: the table's files, or a renamed table's copies.
    let mut copied = Vec::new();
    let (base_files, base_meta) = match &seed {
        Some((src_dir, src)) => {
            let mut files = BTreeMap::new();
            for (i, (path, add)) in src.files.iter().enumerate() {
                let name = format!("current-{:020}-{:05}-renamed.parquet", ctx.s1, i);
                let to = dir.clone().join(name.as_str());
                ctx.store
                    .copy(&src_dir.clone().join(path.as_str()), &to)
                    .await?;
                copied.push(to);
                let mut add = add.clone();
                add["path"] = json!(name);
                files.insert(name, add);
            }
            let mut meta = src.metadata.clone();
            if let (Some(m), Some(first)) = (meta.as_mut(), t.versions.first()) {
                m["configuration"][CONF_VERSION] = json!(first.schema.version.to_string());
            }
            (files, meta)
        }
        None => (state.files.clone(), state.metadata.clone()),
    };
    let conf = base_meta.as_ref().map(|m| &m["configuration"]);
    let file_version: Option<u32> = conf
        .and_then(|c| c[CONF_VERSION].as_str())
        .and_then(|v| v.parse().ok());
    let same_key = conf.and_then(|c| c[CONF_KEY].as_str()) == Some(key_desc.as_str());
    let reshape = file_version
        .filter(|v| *v != tv.schema.version)
        .map(|v| shape::origins(&t.versions, v, tv.schema.version));

    let mut changes = read_change_rows(ctx, t, files, folded, &target).await?;
    let mut report = FoldReport {
        changed_rows: changes.rows.len(),
        ..Default::default()
    };
    // Files by key range; unusable ranges (a changed key, no tags) mean
    // the table is rebuilt from all its rows.
    let mut ranged: Vec<(String, FileRange, u64)> = Vec::new();
    let mut unranged = !same_key || file_version.is_none();
    for (path, add) in &base_files {
        let tags = &add["tags"];
        let range = (|| {
            Some(FileRange {
                first: unhex(tags[TAG_FIRST].as_str()?)?,
                last: unhex(tags[TAG_LAST].as_str()?)?,
                bytes: add["size"].as_u64()?,
            })
        })();
        match range {
            Some(r) => ranged.push((
                path.clone(),
                r,
                add["stats"].as_str().map_or(0, num_records),
            )),
            None => unranged = true,
        }
    }
    ranged.sort_by(|a, b| a.1.first.cmp(&b.1.first));
    let total_rows: u64 = ranged.iter().map(|r| r.2).sum();
    let total_bytes: u64 = ranged.iter().map(|r| r.1.bytes).sum();
    let mut bytes_per_row = if total_rows > 0 {
        total_bytes.div_ceil(total_rows)
    } else {
        0
    };

    let mut out = Output {
        ctx,
        dir: &dir,
        conv,
        key_idx,
        adds: Vec::new(),
        written: Vec::new(),
        n: 0,
        bytes: 0,
    };
    let mut removed: Vec<&String> = Vec::new();
    let full = changes.set.truncated || (unranged && !base_files.is_empty());
    if full {
        if !changes.set.truncated {
            // Every row of the table joins the changes (under keys that no
            // change names): memory holds the whole table, only after a
            // change of the primary key.
            for path in base_files.keys() {
                let batch = read_own(ctx, &dir, path, reshape.as_deref(), &schema).await?;
                let krows = key_rows(conv, &batch, key_idx)?;
                let b = changes.batches.len();
                for r in 0..batch.num_rows() {
                    let key = krows.row(r).as_ref().to_vec();
                    if let std::collections::btree_map::Entry::Vacant(v) =
                        changes.set.keys.entry(key)
                    {
                        v.insert(Some(changes.rows.len()));
                        changes.rows.push((b, r));
                    }
                }
                changes.batches.push(batch);
            }
        }
        removed.extend(base_files.keys());
        let picked: Vec<(usize, usize)> = changes
            .set
            .keys
            .values()
            .flatten()
            .map(|r| changes.rows[*r])
            .collect();
        let refs: Vec<&RecordBatch> = changes.batches.iter().collect();
        if !picked.is_empty() {
            let batch = pick(&refs, &picked)?;
            if bytes_per_row == 0 {
                bytes_per_row = estimate_bytes_per_row(&batch);
            }
            let est = bytes_per_row * batch.num_rows() as u64;
            out.write(batch, est).await?;
        }
    } else {
        let ranges: Vec<FileRange> = ranged.iter().map(|r| r.1.clone()).collect();
        let mut plan = assign(
            &ranges,
            changes
                .set
                .keys
                .iter()
                .map(|(k, v)| (k.as_slice(), v.is_some())),
            ctx.target_bytes,
        );
        if reshape.is_some() {
            for i in 0..ranges.len() {
                plan.files.entry(i).or_default();
            }
        }
        let change_refs: Vec<&RecordBatch> = changes.batches.iter().collect();
        for (i, keys) in &plan.files {
            let (path, range, rows) = &ranged[*i];
            let file = read_own(ctx, &dir, path, reshape.as_deref(), &schema).await?;
            let krows = key_rows(conv, &file, key_idx)?;
            let mut indices = Vec::with_capacity(file.num_rows() + keys.len());
            let mut j = 0;
            let change = |k: &[u8]| {
                changes.set.keys[k].map(|r| {
                    let (b, row) = changes.rows[r];
                    (b + 1, row)
                })
            };
            for r in 0..file.num_rows() {
                let fk = krows.row(r);
                while j < keys.len() && keys[j] < fk.as_ref() {
                    indices.extend(change(keys[j]));
                    j += 1;
                }
                if j < keys.len() && keys[j] == fk.as_ref() {
                    indices.extend(change(keys[j]));
                    j += 1;
                } else {
                    indices.push((0, r));
                }
            }
            for k in &keys[j..] {
                indices.extend(change(k));
            }
            let mut sources: Vec<&RecordBatch> = vec![&file];
            sources.extend(change_refs.iter().copied());
            let merged = pick(&sources, &indices)?;
            let est = range.bytes * merged.num_rows() as u64 / (*rows).max(1);
            out.write(merged, est).await?;
            removed.push(path);
        }
        for keys in plan.gaps.values() {
            let picked: Vec<(usize, usize)> = keys
                .iter()
                .filter_map(|k| changes.set.keys[*k].map(|r| changes.rows[r]))
                .collect();
            if picked.is_empty() {
                continue;
            }
            let batch = pick(&change_refs, &picked)?;
            if bytes_per_row == 0 {
                bytes_per_row = estimate_bytes_per_row(&batch);
            }
            let est = bytes_per_row * batch.num_rows() as u64;
            out.write(batch, est).await?;
        }
    }

    // The commit: files out, files in, the shape and the seq folded.
    let fields: Vec<arrow::datatypes::Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let schema_string = super::super::schema::schema_string(&fields)
        .map_err(|e| lake_err(t, format!("a type Delta Lake cannot hold: {e}")))?;
    let protocol = super::super::schema::protocol(&fields);
    let now = chrono::Utc::now().timestamp_millis();
    let configuration = json!({CONF_VERSION: tv.schema.version.to_string(), CONF_KEY: key_desc});
    let metadata = match &state.metadata {
        None => Some(json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "name": t.name(),
            "description": format!("current state of {} (sluice)", t.name()),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_string,
            "partitionColumns": [],
            "configuration": configuration,
            "createdTime": now,
        })),
        Some(old)
            if old["schemaString"].as_str() != Some(schema_string.as_str())
                || old["configuration"] != configuration =>
        {
            let mut new = old.clone();
            new["schemaString"] = json!(schema_string);
            new["configuration"] = configuration;
            Some(new)
        }
        Some(_) => None,
    };
    let raise = match &state.protocol {
        None => true,
        Some(p) => p["minReaderVersion"].as_u64() < protocol["minReaderVersion"].as_u64(),
    };
    let Output { adds, written, .. } = out;
    let logged_removes: Vec<&String> = removed
        .iter()
        .copied()
        .filter(|p| state.files.contains_key(*p))
        .collect();
    if state.version.is_some() && adds.is_empty() && logged_removes.is_empty() && metadata.is_none()
    {
        // Nothing changed: no new version (`status` counts the table as
        // current when its changelog has nothing after the folded seq).
        return Ok(report);
    }
    let mut actions = commit_head(ctx, t, "fold");
    if raise {
        actions.push(json!({ "protocol": protocol }));
    }
    if let Some(md) = metadata {
        actions.push(json!({ "metaData": md }));
    }
    for p in &logged_removes {
        report.files_removed += 1;
        report.bytes_removed += state.files[*p]["size"].as_u64().unwrap_or(0);
        actions.push(remove_action(p, &state.files[*p]));
    }
    // Copies of a renamed table's files that were not rewritten go in as they are.
    let kept_copies: Vec<&Value> = base_files
        .iter()
        .filter(|(p, _)| seed.is_some() && !removed.contains(p))
        .map(|(_, a)| a)
        .collect();
    for add in kept_copies {
        actions.push(json!({ "add": add }));
    }
    report.files_added = adds.len();
    for add in &adds {
        report.bytes_added += add["add"]["size"].as_u64().unwrap_or(0);
    }
    actions.extend(adds);
    let version = state.version.map_or(0, |v| v + 1);
    if let Err(e) = commit(ctx, &dir, version, actions).await {
        for p in written.iter().chain(&copied) {
            let _ = ctx.store.delete(p).await;
        }
        return Err(e);
    }
    // Copies that were rewritten are in no version.
    for p in &copied {
        if p.filename()
            .is_some_and(|n| removed.iter().any(|r| r.as_str() == n))
        {
            let _ = ctx.store.delete(p).await;
        }
    }
    report.commits = 1;
    Ok(report)
}

/// A file of the current table, in the shape of `schema`.
async fn read_own(
    ctx: &Ctx<'_>,
    dir: &Path,
    path: &str,
    reshape: Option<&[Option<String>]>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let bytes = ctx
        .store
        .get(&dir.clone().join(path))
        .await?
        .bytes()
        .await?;
    let batch = decode(bytes).await?;
    match reshape {
        Some(sources) => shape::reshape(&batch, sources, schema),
        None if batch.schema().fields() == schema.fields() => Ok(batch),
        None => {
            // Same version, other nullability or metadata: names match.
            let names: Vec<Option<String>> = schema
                .fields()
                .iter()
                .take(schema.fields().len() - 2)
                .map(|f| Some(f.name().clone()))
                .collect();
            shape::reshape(&batch, &names, schema)
        }
    }
}

fn num_records(stats: &str) -> u64 {
    serde_json::from_str::<Value>(stats)
        .ok()
        .and_then(|v| v["numRecords"].as_u64())
        .unwrap_or(0)
}

/// Encoded bytes per row of a batch never written before: Arrow's in-memory
/// size over zstd's usual ratio on table data.
fn estimate_bytes_per_row(batch: &RecordBatch) -> u64 {
    let rows = batch.num_rows().max(1) as u64;
    (batch.get_array_memory_size() as u64 / 4 / rows).max(1)
}
