//! Finding changed keys in a current table's file, for a fold with
//! deletion vectors: the positions of the rows they replace.
//!
//! A file is sorted by key, and the bounds of its key pages are in its page
//! index. A cursor reads only the pages of the first key column whose
//! bounds hold a key it is asked for (and the same rows of the other key
//! columns), so that a few changes in a large file read a few of its pages. A file without such an index (or
//! with a first key column whose statistics do not order like the keys)
//! is read whole, forward, as the keys ascend.

use std::cmp::Ordering;
use std::ops::Range;

use arrow::array::{make_comparator, Array, DynComparator};
use arrow::compute::SortOptions;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};

use super::super::super::files::{StoreFile, READ_BATCH_ROWS};
use super::key_runs::{integers, KeyRuns, RUNS_KEY};
use super::*;

/// The keys of a batch of changes, as columns, numbered so that a cursor
/// knows when its comparators are stale.
pub(super) struct SoughtKeys {
    pub id: usize,
    pub cols: Vec<ArrayRef>,
}

impl SoughtKeys {
    fn len(&self) -> usize {
        self.cols.first().map_or(0, |c| c.len())
    }
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

fn comparator(a: &dyn Array, b: &dyn Array) -> Result<DynComparator> {
    make_comparator(a, b, SortOptions::default())
        .map_err(|e| Error::Lake(format!("current table: keys compared: {e}")))
}

/// The first of `0..n` for which `below` is false (`below` is true on a
/// prefix of the range).
fn first_not(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The runs of the keys of `meta`'s column `name` from its footer, if it
/// has them for all its rows.
fn key_runs(meta: &ArrowReaderMetadata, name: &str) -> Option<KeyRuns> {
    let integer = meta
        .schema()
        .field_with_name(name)
        .is_ok_and(|f| f.data_type().is_integer());
    let file = meta.metadata().file_metadata();
    let text = file
        .key_value_metadata()?
        .iter()
        .find(|kv| kv.key == RUNS_KEY)?
        .value
        .as_deref()?;
    let runs = KeyRuns::decode(text)?;
    (integer && runs.rows() == file.num_rows().max(0) as u64).then_some(runs)
}

/// The pages of a file's first key column: where each starts, how many
/// rows it holds, and the least and greatest key it holds.
struct Pages {
    /// Per page: its row group, its first row in the row group, its rows.
    at: Vec<(usize, u64, u64)>,
    /// Per row group: its first row in the file, its rows.
    groups: Vec<(u64, u64)>,
    mins: ArrayRef,
    maxs: ArrayRef,
}

impl Pages {
    /// The pages of `meta`'s column `name`, if its page index has them all
    /// and their bounds order like the keys.
    fn of(meta: &ArrowReaderMetadata, name: &str) -> Option<Pages> {
        let schema = meta.schema();
        let ordered = schema.field_with_name(name).ok().is_some_and(|f| {
            let t = f.data_type();
            t.is_integer()
                || matches!(
                    t,
                    DataType::Date32
                        | DataType::Date64
                        | DataType::Timestamp(..)
                        | DataType::Utf8
                        | DataType::LargeUtf8
                        | DataType::Binary
                        | DataType::LargeBinary
                )
        });
        let parquet = meta.metadata();
        let index = parquet.page_index()?;
        if !ordered || !index.is_complete() {
            return None;
        }
        let conv =
            StatisticsConverter::try_new(name, schema, parquet.file_metadata().schema_descr())
                .ok()?;
        let all: Vec<usize> = (0..parquet.num_row_groups()).collect();
        let mins = conv.data_page_mins(index.as_ref(), &all).ok()?;
        let maxs = conv.data_page_maxes(index.as_ref(), &all).ok()?;
        let mut at = Vec::new();
        let mut groups = Vec::new();
        let mut file_row = 0u64;
        for (g, group) in parquet.row_groups().iter().enumerate() {
            let counts = conv
                .data_page_row_counts(index.as_ref(), parquet.row_groups(), [&all[g]])
                .ok()??;
            if counts.null_count() > 0 {
                return None;
            }
            let mut row = 0u64;
            for n in counts.values() {
                at.push((g, row, *n));
                row += n;
            }
            let rows = group.num_rows().max(0) as u64;
            if row != rows {
                return None;
            }
            groups.push((file_row, rows));
            file_row += rows;
        }
        if mins.len() != at.len() || maxs.len() != at.len() {
            return None;
        }
        if mins.null_count() > 0 || maxs.null_count() > 0 {
            return None;
        }
        Some(Pages {
            at,
            groups,
            mins,
            maxs,
        })
    }
}

/// The key columns of one file, read forward as the keys sought ascend.
///
/// Keys are compared column by column with Arrow's comparators (the order
/// of the row format the changes are sorted in, ascending, nulls first),
/// so a file's rows are never converted: a seek costs a binary search, and
/// a batch below every sought key costs only its decoding.
pub(super) struct KeyCursor {
    file: StoreFile,
    /// The runs of the file's keys from its footer: no page is read.
    footer_runs: Option<KeyRuns>,
    /// The sought batch `.0`'s keys as integers, for `runs`.
    ints: Option<(usize, Vec<i128>)>,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    pages: Option<Pages>,
    /// Comparators of the pages' bounds against the sought batch `.0`.
    bounds: Option<(usize, DynComparator, DynComparator)>,
    /// Pages below this were looked at by the stream being read: those
    /// that may hold a key sought from now on are in it.
    horizon: usize,
    stream: Option<ParquetRecordBatchStream<StoreFile>>,
    /// Where the stream's rows are in the file: runs of (row of the
    /// stream, row of the file).
    runs: Vec<(u64, u64)>,
    /// Rows of the stream before `cols`.
    read: u64,
    cols: Option<Vec<ArrayRef>>,
    /// Comparators of `cols` against the sought batch `.0`.
    cmp: Option<(usize, Vec<DynComparator>)>,
    /// The first row of `cols` not below the last key sought.
    at: usize,
    done: bool,
}

impl KeyCursor {
    pub(super) async fn open(
        store: &Arc<dyn ObjectStore>,
        path: Path,
        size: Option<u64>,
        names: &[String],
    ) -> Result<Self> {
        let mut file = StoreFile::open(store, path, size).await?;
        let meta = ArrowReaderMetadata::load_async(&mut file, ArrowReaderOptions::new()).await?;
        let runs = match names {
            [name] => key_runs(&meta, name),
            _ => None,
        };
        // Without runs, the page index too (the footer already read is
        // kept: only the index's bytes are fetched).
        let meta = match runs {
            Some(_) => meta,
            None => {
                let mut reader =
                    ParquetMetaDataReader::new_with_metadata(meta.metadata().as_ref().clone())
                        .with_page_index_policy(PageIndexPolicy::Optional);
                reader.load_page_index(&mut file).await?;
                let options =
                    ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
                ArrowReaderMetadata::try_new(Arc::new(reader.finish()?), options)?
            }
        };
        let descr = meta.metadata().file_metadata().schema_descr_ptr();
        let leaves = descr
            .columns()
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                let parts = c.path().parts();
                parts.len() == 1 && names.iter().any(|n| n == &parts[0])
            })
            .map(|(i, _)| i);
        let mask = ProjectionMask::leaves(&descr, leaves);
        let pages = match runs {
            Some(_) => None,
            None => names.first().and_then(|n| Pages::of(&meta, n)),
        };
        let mut cursor = KeyCursor {
            file,
            footer_runs: runs,
            ints: None,
            meta,
            mask,
            pages,
            bounds: None,
            horizon: 0,
            stream: None,
            runs: vec![(0, 0)],
            read: 0,
            cols: None,
            cmp: None,
            at: 0,
            done: false,
        };
        if cursor.pages.is_none() && cursor.footer_runs.is_none() {
            cursor.stream = Some(cursor.builder().build()?);
        }
        Ok(cursor)
    }

    fn builder(&self) -> ParquetRecordBatchStreamBuilder<StoreFile> {
        ParquetRecordBatchStreamBuilder::new_with_metadata(self.file.clone(), self.meta.clone())
            .with_projection(self.mask.clone())
            .with_batch_size(READ_BATCH_ROWS)
    }

    /// The pages whose bounds hold key `key` of `sought`: `lo..hi`, empty
    /// when none does; `lo` is the page count when the key is above them all.
    fn candidates(&mut self, sought: &SoughtKeys, key: usize) -> Result<Range<usize>> {
        let Some(pages) = &self.pages else {
            return Ok(0..1);
        };
        if self.bounds.as_ref().is_none_or(|(id, ..)| *id != sought.id) {
            let mins = comparator(pages.mins.as_ref(), sought.cols[0].as_ref())?;
            let maxs = comparator(pages.maxs.as_ref(), sought.cols[0].as_ref())?;
            self.bounds = Some((sought.id, mins, maxs));
        }
        let Some((_, mins, maxs)) = &self.bounds else {
            return Ok(0..0);
        };
        let n = pages.at.len();
        let lo = first_not(n, |p| maxs(p, key) == Ordering::Less);
        let hi = first_not(n, |p| mins(p, key) != Ordering::Greater);
        Ok(lo..hi.max(lo))
    }

    /// Starts reading the pages that may hold keys `from..` of `sought`.
    fn load(&mut self, sought: &SoughtKeys, from: usize) -> Result<()> {
        let mut wanted: Vec<Range<usize>> = Vec::new();
        for key in from..sought.len() {
            let c = self.candidates(sought, key)?;
            if c.start >= self.pages.as_ref().map_or(1, |p| p.at.len()) {
                break;
            }
            match wanted.last_mut() {
                Some(last) if c.start <= last.end => last.end = last.end.max(c.end),
                _ if c.is_empty() => {}
                _ => wanted.push(c),
            }
        }
        let Some(pages) = &self.pages else {
            return Ok(());
        };
        let mut groups: Vec<usize> = Vec::new();
        let mut selectors: Vec<RowSelector> = Vec::new();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut rows = 0u64;
        // The next row of the current row group not yet selected or skipped.
        let mut pos = 0u64;
        for p in wanted.iter().flat_map(|r| r.clone()) {
            let (g, start, n) = pages.at[p];
            if groups.last() != Some(&g) {
                if let Some(last) = groups.last() {
                    let left = pages.groups[*last].1 - pos;
                    if left > 0 {
                        selectors.push(RowSelector::skip(left as usize));
                    }
                }
                groups.push(g);
                pos = 0;
            }
            if start > pos {
                selectors.push(RowSelector::skip((start - pos) as usize));
            }
            selectors.push(RowSelector::select(n as usize));
            runs.push((rows, pages.groups[g].0 + start));
            rows += n;
            pos = start + n;
        }
        if let Some(last) = groups.last() {
            let left = pages.groups[*last].1 - pos;
            if left > 0 {
                selectors.push(RowSelector::skip(left as usize));
            }
        }
        self.horizon = wanted.last().map_or(self.horizon, |r| r.end);
        self.runs = if runs.is_empty() { vec![(0, 0)] } else { runs };
        self.stream = Some(
            self.builder()
                .with_row_groups(groups)
                .with_row_selection(RowSelection::from(selectors))
                .build()?,
        );
        self.read = 0;
        self.cols = None;
        self.cmp = None;
        self.at = 0;
        self.done = false;
        Ok(())
    }

    /// The position in the file of row `n` of the stream.
    fn position(&self, n: u64) -> u64 {
        let i = self.runs.partition_point(|(s, _)| *s <= n).max(1) - 1;
        let (s, f) = self.runs[i];
        f + (n - s)
    }

    /// The position in the file of row `key` of `sought`, if the file has
    /// it; keys sought must ascend.
    pub(super) async fn seek(
        &mut self,
        sought: &SoughtKeys,
        key: usize,
        names: &[String],
    ) -> Result<Option<u64>> {
        if let Some(runs) = &self.footer_runs {
            if self.ints.as_ref().is_none_or(|(id, _)| *id != sought.id) {
                let ints = integers(sought.cols[0].as_ref()).ok_or_else(|| {
                    Error::Lake("current table fold: keys of changes are not integers".into())
                })?;
                self.ints = Some((sought.id, ints));
            }
            let Some((_, ints)) = &self.ints else {
                return Ok(None);
            };
            return Ok(ints.get(key).and_then(|k| runs.position(*k)));
        }
        let c = self.candidates(sought, key)?;
        if c.is_empty() {
            return Ok(None);
        }
        if self.pages.is_some() && c.end > self.horizon {
            self.load(sought, key)?;
        }
        loop {
            if let Some(cols) = &self.cols {
                if self.cmp.as_ref().is_none_or(|(id, _)| *id != sought.id) {
                    let cmps = cols
                        .iter()
                        .zip(&sought.cols)
                        .map(|(a, b)| comparator(a.as_ref(), b.as_ref()))
                        .collect::<Result<Vec<_>>>()?;
                    self.cmp = Some((sought.id, cmps));
                }
                let Some((_, cmps)) = &self.cmp else {
                    return Ok(None);
                };
                let n = cols[0].len();
                let at = self.at;
                let lo = at + first_not(n - at, |i| compare(cmps, at + i, key) == Ordering::Less);
                self.at = lo;
                if lo < n {
                    let found = compare(cmps, lo, key) == Ordering::Equal;
                    return Ok(found.then(|| self.position(self.read + lo as u64)));
                }
                self.read += n as u64;
                self.cols = None;
                self.cmp = None;
            }
            let Some(stream) = self.stream.as_mut().filter(|_| !self.done) else {
                return Ok(None);
            };
            match stream.try_next().await? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use parquet::arrow::AsyncArrowWriter;
    use rand::{Rng, SeedableRng};

    /// Rows a page of the key columns holds at most in these files.
    const KEY_PAGE_ROWS: usize = 1024;

    #[test]
    fn first_not_finds_the_end_of_a_prefix() {
        let v = [1, 3, 3, 5, 8];
        assert_eq!(first_not(v.len(), |i| v[i] < 3), 1);
        assert_eq!(first_not(v.len(), |i| v[i] <= 3), 3);
        assert_eq!(first_not(v.len(), |i| v[i] < 9), 5);
        assert_eq!(first_not(v.len(), |i| v[i] < 0), 0);
        assert_eq!(first_not(0, |_| true), 0);
    }

    /// Seeded random files of a two-column key (`a` repeats across pages,
    /// `b` a string), in several row groups, with and without a page index:
    /// every key sought, present or not, in batches of random sizes, is
    /// found exactly where the file holds it.
    #[tokio::test]
    async fn a_cursor_finds_each_key_where_the_file_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let names = vec!["a".to_string(), "b".to_string()];
        for seed in 0..6u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // Runs of equal `a` from 1 to 3,000 rows long, `b` ascending
            // within a run, gaps between keys for absent ones to fall in.
            let mut keys: Vec<(i64, String)> = Vec::new();
            let mut a = -50i64;
            while keys.len() < 20_000 {
                a += rng.gen_range(1..4);
                let run = if rng.gen_bool(0.2) {
                    rng.gen_range(1..3000)
                } else {
                    rng.gen_range(1..5)
                };
                for j in 0..run {
                    keys.push((a, format!("k{:06}", 2 * j + 1)));
                }
            }
            let indexed = seed % 3 != 0;
            let mut props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(rng.gen_range(3000..9000)))
                .set_column_data_page_row_count_limit("a".into(), KEY_PAGE_ROWS)
                .set_column_data_page_row_count_limit("b".into(), KEY_PAGE_ROWS);
            if !indexed {
                props = props
                    .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None);
            }
            let path = Path::from(format!("f{seed}.parquet"));
            let upload = object_store::buffered::BufWriter::new(store.clone(), path.clone());
            let mut w =
                AsyncArrowWriter::try_new(upload, schema.clone(), Some(props.build())).unwrap();
            for chunk in keys.chunks(4000) {
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from_iter_values(chunk.iter().map(|k| k.0))),
                        Arc::new(StringArray::from_iter_values(
                            chunk.iter().map(|k| k.1.as_str()),
                        )),
                        Arc::new(Int64Array::from_iter_values(0..chunk.len() as i64)),
                    ],
                )
                .unwrap();
                w.write(&batch).await.unwrap();
            }
            w.close().await.unwrap();
            // Present keys (their position) and absent ones (an even `b`,
            // an `a` between runs, below and above every key), ascending.
            let mut sought: Vec<((i64, String), Option<u64>)> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                if rng.gen_bool(0.01) {
                    sought.push((k.clone(), Some(i as u64)));
                }
                if rng.gen_bool(0.005) {
                    sought.push(((k.0, format!("k{:06}", 2 * rng.gen_range(0..3000))), None));
                }
                if rng.gen_bool(0.002) {
                    sought.push(((k.0 + 1, "k".into()), None));
                }
            }
            sought.push(((-1000, "x".into()), None));
            sought.push(((i64::MAX, "x".into()), None));
            sought.sort();
            sought.dedup_by(|x, y| x.0 == y.0);
            let size = store.head(&path).await.unwrap().size;
            let mut cursor = KeyCursor::open(&store, path, Some(size), &names)
                .await
                .unwrap();
            assert_eq!(cursor.pages.is_some(), indexed, "seed {seed}");
            if let Some(pages) = &cursor.pages {
                // Pages of the key columns (a page may take up to twice
                // the limit where a write ends), not of the row groups.
                assert!(
                    pages.at.len() >= keys.len() / KEY_PAGE_ROWS / 2,
                    "seed {seed}"
                );
            }
            let mut from = 0;
            let mut id = 0;
            while from < sought.len() {
                let to = (from + rng.gen_range(1..700)).min(sought.len());
                let batch = &sought[from..to];
                id += 1;
                let keys = SoughtKeys {
                    id,
                    cols: vec![
                        Arc::new(Int64Array::from_iter_values(batch.iter().map(|s| s.0 .0))),
                        Arc::new(StringArray::from_iter_values(
                            batch.iter().map(|s| s.0 .1.as_str()),
                        )),
                    ],
                };
                for (k, (key, want)) in batch.iter().enumerate() {
                    let got = cursor.seek(&keys, k, &names).await.unwrap();
                    assert_eq!(got, *want, "seed {seed}, key {key:?}");
                }
                from = to;
            }
        }
    }

    /// A file of one integer key with its runs in the footer is searched
    /// there (and found right); one whose footer runs do not cover its
    /// rows is read instead, and found right too.
    #[tokio::test]
    async fn a_cursor_finds_keys_by_the_runs_in_a_footer() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let names = vec!["id".to_string()];
        for seed in 0..6u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut keys: Vec<i64> = Vec::new();
            let mut k = rng.gen_range(-1000..1000);
            while keys.len() < 30_000 {
                keys.push(k);
                k += if rng.gen_bool(0.01) {
                    rng.gen_range(2..50)
                } else {
                    1
                };
            }
            let whole = seed % 2 == 0;
            let mut runs = KeyRuns::default();
            let covered = if whole { keys.len() } else { keys.len() - 1 };
            runs.push(&Int64Array::from(keys[..covered].to_vec()));
            let path = Path::from(format!("r{seed}.parquet"));
            let upload = object_store::buffered::BufWriter::new(store.clone(), path.clone());
            let props = crate::table::current::delta_file_properties(&["id".into()]).unwrap();
            let mut w = AsyncArrowWriter::try_new(upload, schema.clone(), Some(props)).unwrap();
            for chunk in keys.chunks(7000) {
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(chunk.to_vec())),
                        Arc::new(Int64Array::from(chunk.to_vec())),
                    ],
                )
                .unwrap();
                w.write(&batch).await.unwrap();
            }
            w.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
                RUNS_KEY.to_string(),
                runs.encode().unwrap(),
            ));
            w.close().await.unwrap();
            let size = store.head(&path).await.unwrap().size;
            let mut cursor = KeyCursor::open(&store, path, Some(size), &names)
                .await
                .unwrap();
            assert_eq!(cursor.footer_runs.is_some(), whole, "seed {seed}");
            let mut sought: Vec<(i64, Option<u64>)> = Vec::new();
            for probe in keys[0] - 5..keys[keys.len() - 1] + 5 {
                if rng.gen_bool(0.05) {
                    sought.push((probe, keys.binary_search(&probe).ok().map(|p| p as u64)));
                }
            }
            assert!(sought.iter().filter(|s| s.1.is_none()).count() > 5);
            for (id, batch) in sought.chunks(900).enumerate() {
                let keys = SoughtKeys {
                    id,
                    cols: vec![Arc::new(Int64Array::from_iter_values(
                        batch.iter().map(|s| s.0),
                    ))],
                };
                for (k, (key, want)) in batch.iter().enumerate() {
                    let got = cursor.seek(&keys, k, &names).await.unwrap();
                    assert_eq!(got, *want, "seed {seed}, key {key}");
                }
            }
        }
    }
}
