//! The fold with deletion vectors (`[current] deletion_vectors = "auto"`):
//! the rows a change replaces or removes are marked deleted in vectors of
//! the files that hold them, and only the changed keys' new rows are
//! written, into new files. What it costs follows the changes: the new rows,
//! the vectors, and the key columns of the files whose key range holds a
//! changed key (never their other columns).
//!
//! Files of a table folded this way may overlap in key range (a file of
//! updated rows spans the keys it updated), but each is sorted by key and
//! each key has at most one live row in the table. The changes come in key
//! order; the files are visited in order of their first key, and each file
//! whose range holds a change is read once, key columns only, with a cursor
//! that moves forward as the changes do.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use arrow::array::{make_comparator, Array, BinaryArray, DynComparator};
use arrow::compute::SortOptions;
use arrow::compute::{filter_record_batch, not};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use roaring::RoaringTreemap;

use super::super::super::files::{open_parquet_leaves, StoreFile};
use super::*;

/// The key columns of one file, read forward one batch at a time.
///
/// Keys are compared column by column with Arrow's comparators (the order
/// of the row format the changes are sorted in, ascending, nulls first),
/// so a file's rows are never converted: a seek costs a binary search, and
/// a batch below every sought key costs only its decoding.
struct KeyCursor {
    stream: ParquetRecordBatchStream<StoreFile>,
    cols: Option<Vec<ArrayRef>>,
    /// Comparators of `cols` against the change batch numbered `.0`.
    cmp: Option<(usize, Vec<DynComparator>)>,
    /// The first row of `cols` not below the last key sought.
    at: usize,
    /// The position in the file of the first row of `cols`.
    base: u64,
    done: bool,
}

/// The keys of a batch of changes, as columns, numbered so that a cursor
/// knows when its comparators are stale.
struct SoughtKeys {
    id: usize,
    cols: Vec<ArrayRef>,
}

fn compare(cmps: &[DynComparator], row: usize, key: usize) -> Ordering {
    for c in cmps {
        match c(row, key) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    Ordering::Equal
}

impl KeyCursor {
    async fn open(
        ctx: &Ctx<'_>,
        dir: &Path,
        path: &str,
        add: &Value,
        names: &[String],
    ) -> Result<Self> {
        let stream = open_parquet_leaves(
            &ctx.store,
            dir.clone().join(path),
            add["size"].as_u64(),
            |parts| parts.len() == 1 && names.iter().any(|n| n == &parts[0]),
        )
        .await?;
        Ok(KeyCursor {
            stream,
            cols: None,
            cmp: None,
            at: 0,
            base: 0,
            done: false,
        })
    }

    /// The position in the file of row `key` of `sought`, if the file has
    /// it; keys sought must ascend.
    async fn seek(
        &mut self,
        sought: &SoughtKeys,
        key: usize,
        names: &[String],
    ) -> Result<Option<u64>> {
        loop {
            if let Some(cols) = &self.cols {
                if self.cmp.as_ref().is_none_or(|(id, _)| *id != sought.id) {
                    let cmps = cols
                        .iter()
                        .zip(&sought.cols)
                        .map(|(a, b)| {
                            make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()
                        .map_err(|e| Error::Lake(format!("current table: keys compared: {e}")))?;
                    self.cmp = Some((sought.id, cmps));
                }
                let Some((_, cmps)) = &self.cmp else {
                    unreachable!("set above")
                };
                let n = cols[0].len();
                let (mut lo, mut hi) = (self.at, n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if compare(cmps, mid, key) == Ordering::Less {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                self.at = lo;
                if lo < n {
                    let found = compare(cmps, lo, key) == Ordering::Equal;
                    return Ok(found.then_some(self.base + lo as u64));
                }
                self.base += n as u64;
                self.cols = None;
                self.cmp = None;
            }
            if self.done {
                return Ok(None);
            }
            match self.stream.try_next().await? {
                Some(batch) if batch.num_rows() > 0 => {
                    let cols = names
                        .iter()
                        .map(|n| {
                            batch.column_by_name(n).cloned().ok_or_else(|| {
                                Error::Lake(format!(
                                    "current table fold: a file lacks its key column {n}"
                                ))
                            })
                        })
                        .collect::<Result<Vec<ArrayRef>>>()?;
                    self.cols = Some(cols);
                    self.at = 0;
                }
                Some(_) => {}
                None => self.done = true,
            }
        }
    }
}

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
                    cursors[i] = Some(KeyCursor::open(ctx, dir, path, &adds[path], &names).await?);
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
        let deleted = dv::read(store, dir, add).await?;
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
        let old = dv::read(&ctx.store, dir, add).await?;
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

    /// What reading a file's key column costs a fold, per row of the file
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
        let variants: Vec<(&str, parquet::file::properties::WriterProperties)> = vec![
            ("plain", delta_file_properties(&[]).unwrap()),
            (
                "delta",
                delta_file_properties(&[parquet::schema::types::ColumnPath::from("id")]).unwrap(),
            ),
        ];
        for (name, props) in variants {
            let path = Path::from(format!("{name}.parquet"));
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
            w.close().await.unwrap();
            let size = store.head(&path).await.unwrap().size;
            for _ in 0..3 {
                let start = std::time::Instant::now();
                let mut stream = open_parquet_leaves(&store, path.clone(), Some(size), |p| {
                    p.len() == 1 && p[0] == "id"
                })
                .await
                .unwrap();
                let mut n = 0;
                while let Some(b) = stream.try_next().await.unwrap() {
                    n += b.num_rows();
                }
                assert_eq!(n, rows as usize);
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                println!(
                    "{name}: {size} bytes, key column of {rows} rows read in {ms:.1} ms ({:.2} ns a row)",
                    ms * 1e6 / rows as f64
                );
            }
        }
    }
}
