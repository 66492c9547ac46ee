//! The fold with deletion vectors (`[current] deletion_vectors = "auto"`):
//! the rows a change replaces or removes are marked deleted in vectors of
//! the files that hold them, and only the changed keys' new rows are
//! written, into new files. What it costs follows the changes: the new rows,
//! the vectors, and the pages of key columns whose bounds hold a changed
//! key (never the other columns of a file; see [`super::keys`]).
//!
//! Files of a table folded this way may overlap in key range (a file of
//! updated rows spans the keys it updated), but each is sorted by key and
//! each key has at most one live row in the table. The changes come in key
//! order; the files are visited in order of their first key, and each file
//! whose range holds a change is read with a cursor that moves forward as
//! the changes do.

use std::collections::BTreeMap;

use arrow::array::{Array, BinaryArray};
use arrow::compute::{filter_record_batch, not};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use roaring::RoaringTreemap;

use super::super::super::files::StoreFile;
use super::keys::{KeyCursor, SoughtKeys};
use super::*;

/// What a fold with vectors found: for each file (index into the files it
/// was given) the positions of rows its changes replace or remove.
pub(super) struct Marks {
    pub by_file: BTreeMap<usize, RoaringTreemap>,
}

/// Applies the changes of `merge` (in key order) to `files` (sorted by first
/// key): the new rows go to `out`, the positions of the rows they replace
/// or remove are returned.
pub(super) async fn mark_changes(
    ctx: &Ctx<'_>,
    dir: &Path,
    target: &Target<'_>,
    files: &[(String, FileRange)],
    adds: &BTreeMap<String, Value>,
    mut merge: Changes<'_>,
    out: &mut Output<'_>,
) -> Result<Marks> {
    let names: Vec<String> = target
        .key_idx
        .iter()
        .map(|i| target.schema.field(*i).name().clone())
        .collect();
    let mut cursors: Vec<Option<KeyCursor>> = (0..files.len()).map(|_| None).collect();
    let mut active: Vec<usize> = Vec::new();
    let mut next_open = 0;
    let mut by_file: BTreeMap<usize, RoaringTreemap> = BTreeMap::new();
    let parser = target.conv.parser();
    let mut batches = 0;
    while let Some(batch) = merge.next_batch().await? {
        let keys: BinaryArray = batch.column(KEY).as_binary::<i32>().clone();
        batches += 1;
        let sought = SoughtKeys {
            id: batches,
            cols: target
                .conv
                .convert_rows(keys.iter().flatten().map(|k| parser.parse(k)))
                .map_err(|e| Error::Lake(format!("current table: keys of changes: {e}")))?,
        };
        if sought.cols.first().map(|c| c.len()) != Some(keys.len()) {
            return Err(Error::Lake(format!(
                "current table: {} keys of {} changes",
                sought.cols.first().map_or(0, |c| c.len()),
                keys.len()
            )));
        }
        let removed = batch.column(REMOVED).as_boolean().clone();
        let values =
            RecordBatch::try_new(target.schema.clone(), batch.columns()[VALUES..].to_vec())
                .map_err(|e| Error::Lake(format!("current table: a change batch: {e}")))?;
        // The rows the changes put, in key order.
        let puts = not(&removed).map_err(|e| Error::Lake(format!("current table: {e}")))?;
        let put_rows: Vec<usize> = (0..puts.len()).filter(|r| puts.value(*r)).collect();
        if let (Some(&f), Some(&l)) = (put_rows.first(), put_rows.last()) {
            let rows = filter_record_batch(&values, &puts)
                .map_err(|e| Error::Lake(format!("current table: {e}")))?;
            out.push(&rows, keys.value(f), keys.value(l)).await?;
        }
        for r in 0..keys.len() {
            let key = keys.value(r);
            while next_open < files.len() && files[next_open].1.first.as_slice() <= key {
                active.push(next_open);
                next_open += 1;
            }
            active.retain(|i| {
                let open = files[*i].1.last.as_slice() >= key;
                if !open {
                    cursors[*i] = None;
                }
                open
            });
            for &i in &active {
                if cursors[i].is_none() {
                    let (path, _) = &files[i];
                    let at = dir.clone().join(path.as_str());
                    let size = adds[path]["size"].as_u64();
                    cursors[i] = Some(KeyCursor::open(&ctx.store, at, size, &names).await?);
                }
                let Some(cursor) = cursors[i].as_mut() else {
                    continue;
                };
                if let Some(pos) = cursor.seek(&sought, r, &names).await? {
                    by_file.entry(i).or_default().insert(pos);
                }
            }
        }
    }
    Ok(Marks { by_file })
}

/// A file's rows in order, without those its deletion vector marks.
pub(in crate::table::current) struct LiveRows {
    stream: ParquetRecordBatchStream<StoreFile>,
    deleted: RoaringTreemap,
    base: u64,
}

impl LiveRows {
    pub async fn open(
        store: &Arc<dyn ObjectStore>,
        dir: &Path,
        path: &str,
        add: &Value,
    ) -> Result<Self> {
        let deleted = dv::read(store.as_ref(), dir, add).await?;
        let stream = open_parquet(store, dir.clone().join(path), add["size"].as_u64()).await?;
        Ok(LiveRows {
            stream,
            deleted,
            base: 0,
        })
    }

    pub async fn next(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(batch) = self.stream.try_next().await? else {
                return Ok(None);
            };
            let n = batch.num_rows() as u64;
            let (base, end) = (self.base, self.base + n);
            self.base = end;
            let below = |p: u64| if p == 0 { 0 } else { self.deleted.rank(p - 1) };
            if n == 0 || below(end) == below(base) {
                return Ok(Some(batch));
            }
            let keep: BooleanArray = (base..end)
                .map(|p| Some(!self.deleted.contains(p)))
                .collect();
            let live = filter_record_batch(&batch, &keep)
                .map_err(|e| Error::Lake(format!("current table: {e}")))?;
            if live.num_rows() > 0 {
                return Ok(Some(live));
            }
        }
    }
}

/// The vectors of the files `marks` names (each the union of its old
/// vector and the new marks), written into one vector file of this fold:
/// the `add` of each file whose vector grew, and the file written.
pub(super) async fn with_vectors(
    ctx: &Ctx<'_>,
    dir: &Path,
    files: &[(String, FileRange)],
    adds: &BTreeMap<String, Value>,
    marks: Marks,
    report: &mut FoldReport,
) -> Result<(Vec<(String, Value)>, Option<Path>)> {
    let mut file = dv::VectorFile::new(ctx.s1);
    let mut marked = Vec::new();
    for (i, new) in marks.by_file {
        let path = &files[i].0;
        let add = &adds[path];
        let old = dv::read(ctx.store.as_ref(), dir, add).await?;
        let before = old.len();
        let all = old | new;
        if all.len() == before {
            continue;
        }
        report.rows_marked += all.len() - before;
        report.files_marked += 1;
        let mut add = add.clone();
        add["deletionVector"] = file.push(&all);
        add["dataChange"] = json!(true);
        // The bounds still hold every live row, but are no longer tight.
        if let Some(mut stats) = add["stats"]
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
        {
            stats["tightBounds"] = json!(false);
            add["stats"] = json!(stats.to_string());
        }
        marked.push((path.clone(), add));
    }
    report.vector_bytes += file.inline_bytes();
    if file.is_empty() {
        return Ok((marked, None));
    }
    let path = file.path(dir);
    report.vector_bytes += file.write(ctx.store.as_ref(), dir).await?;
    if std::env::var_os(ABORT_IN_FOLD).is_some_and(|v| v == "vectors") {
        // Tests: a kill between the vector file and the commit.
        std::process::abort();
    }
    Ok((marked, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use parquet::arrow::AsyncArrowWriter;

    /// What finding changed keys in a file costs a fold, per row of the
    /// file, at one change in 200 rows (50,000 changes in 10M rows) and one
    /// in 1,000 (in 50M rows): with the key column plain in pages of 20,000
    /// rows, DELTA_BINARY_PACKED in such pages and in pages of 1,024 rows
    /// (the fold reads the pages that may hold a key), and as a fold writes
    /// it, with the runs of its keys in the footer
    /// (`cargo test --release --lib -- key_scan --ignored --nocapture`).
    #[tokio::test]
    #[ignore]
    async fn bench_key_scan() {
        let rows: i32 = std::env::var("BENCH_ROWS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(10_000_000);
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::Int32, true),
            Field::new("pad", DataType::Utf8, true),
        ]));
        let id = parquet::schema::types::ColumnPath::from("id");
        let small_pages = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_max_row_group_bytes(Some(output::ROW_GROUP_BYTES))
            .set_dictionary_enabled(false)
            .set_column_encoding(id.clone(), parquet::basic::Encoding::DELTA_BINARY_PACKED)
            .set_column_data_page_row_count_limit(id, 1024)
            .build();
        let keyed = keyed_file_properties(&schema, &[0]).unwrap();
        let variants: Vec<(&str, parquet::file::properties::WriterProperties)> = vec![
            ("plain, 20k-row pages", delta_file_properties(&[]).unwrap()),
            ("delta, 20k-row pages", keyed.clone()),
            ("delta, 1024-row pages", small_pages),
            // With the key's runs in the footer.
            ("as folds write it", keyed),
        ];
        let names = vec!["id".to_string()];
        for (name, props) in variants {
            let path = Path::from("f.parquet");
            let upload = object_store::buffered::BufWriter::new(store.clone(), path.clone());
            let mut w = AsyncArrowWriter::try_new(upload, schema.clone(), Some(props)).unwrap();
            for from in (0..rows).step_by(65536) {
                let to = (from + 65536).min(rows);
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int32Array::from_iter_values(from..to)),
                        Arc::new(Int32Array::from_iter_values(from..to)),
                        Arc::new(StringArray::from_iter_values(
                            (from..to).map(|i| format!("{:032x}", i as u128 * 0x9e37_79b9)),
                        )),
                    ],
                )
                .unwrap();
                w.write(&batch).await.unwrap();
            }
            if name == "as folds write it" {
                let mut runs = super::super::key_runs::KeyRuns::default();
                runs.push(&Int32Array::from_iter_values(0..rows));
                w.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
                    super::super::key_runs::RUNS_KEY.to_string(),
                    runs.encode().unwrap(),
                ));
            }
            w.close().await.unwrap();
            let size = store.head(&path).await.unwrap().size;
            for every in [200u64, 1000] {
                // Keys picked by a multiplicative hash, ascending.
                let sought: Vec<i32> = (0..rows)
                    .filter(|i| (*i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) % every == 0)
                    .collect();
                let mut best = f64::MAX;
                for _ in 0..3 {
                    let start = std::time::Instant::now();
                    let mut cursor = KeyCursor::open(&store, path.clone(), Some(size), &names)
                        .await
                        .unwrap();
                    let mut found = 0;
                    for (id, chunk) in sought.chunks(2048).enumerate() {
                        let keys = SoughtKeys {
                            id,
                            cols: vec![Arc::new(Int32Array::from(chunk.to_vec()))],
                        };
                        for (k, want) in chunk.iter().enumerate() {
                            let at = cursor.seek(&keys, k, &names).await.unwrap();
                            assert_eq!(at, Some(*want as u64));
                            found += 1;
                        }
                    }
                    assert_eq!(found, sought.len());
                    best = best.min(start.elapsed().as_secs_f64() * 1000.0);
                }
                println!(
                    "{name}: {size} bytes; {} keys, one in {every} rows, found in {best:.1} ms ({:.2} ns a row of the file)",
                    sought.len(),
                    best * 1e6 / rows as f64
                );
            }
        }
    }
}
