//! Parquet files of the lake read and written as streams: a file is read
//! one row group at a time by ranges, and written through a multipart
//! upload as its row groups fill, so that neither holds a whole file.
//! The current-state fold and the changelog compaction share them.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, RowSelection, RowSelector};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use roaring::RoaringTreemap;

use crate::error::Result;

/// Rows per batch read from a Parquet file.
pub(crate) const READ_BATCH_ROWS: usize = 4096;

/// A Parquet file in the store, read by ranges.
#[derive(Clone)]
pub(crate) struct StoreFile {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
}

fn parquet_err(e: object_store::Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.store
            .get_range(&self.path, range)
            .map_err(parquet_err)
            .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(parquet_err)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

impl StoreFile {
    /// The file at `path`, of `size` bytes when known (else asked of the
    /// store).
    pub(crate) async fn open(
        store: &Arc<dyn ObjectStore>,
        path: Path,
        size: Option<u64>,
    ) -> Result<Self> {
        let size = match size.filter(|s| *s > 0) {
            Some(s) => s,
            None => store.head(&path).await?.size,
        };
        Ok(StoreFile {
            store: store.clone(),
            path,
            size,
        })
    }
}

/// The metadata of a Parquet file in the store, with its page indexes
/// when it has them, and its Arrow schema.
pub(crate) async fn parquet_metadata(
    store: &Arc<dyn ObjectStore>,
    path: Path,
    size: Option<u64>,
) -> Result<(Arc<ParquetMetaData>, arrow::datatypes::SchemaRef)> {
    let file = StoreFile::open(store, path, size).await?;
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    let builder = ParquetRecordBatchStreamBuilder::new_with_options(file, options).await?;
    Ok((builder.metadata().clone(), builder.schema().clone()))
}

/// The batches of a Parquet file in the store, one row group at a time.
pub(crate) async fn open_parquet(
    store: &Arc<dyn ObjectStore>,
    path: Path,
    size: Option<u64>,
) -> Result<ParquetRecordBatchStream<StoreFile>> {
    open_parquet_leaves(store, path, size, |_| true).await
}

/// The same, reading only the leaf columns whose path `wanted` accepts
/// (`["_before", "id"]` for a field of a struct).
pub(crate) async fn open_parquet_leaves(
    store: &Arc<dyn ObjectStore>,
    path: Path,
    size: Option<u64>,
    wanted: impl Fn(&[String]) -> bool,
) -> Result<ParquetRecordBatchStream<StoreFile>> {
    open_parquet_rows(store, path, size, wanted, None).await
}

/// The same, and with `rows` only the rows at those positions of the file:
/// the rows between them are skipped rather than decoded, and pages that
/// hold none of them are not read (the file's page index says where they
/// are).
pub(crate) async fn open_parquet_rows(
    store: &Arc<dyn ObjectStore>,
    path: Path,
    size: Option<u64>,
    wanted: impl Fn(&[String]) -> bool,
    rows: Option<&RoaringTreemap>,
) -> Result<ParquetRecordBatchStream<StoreFile>> {
    let file = StoreFile::open(store, path, size).await?;
    let options = match rows {
        Some(_) => ArrowReaderOptions::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional),
        None => ArrowReaderOptions::new(),
    };
    let builder = ParquetRecordBatchStreamBuilder::new_with_options(file, options).await?;
    let descr = builder.metadata().file_metadata().schema_descr_ptr();
    let total = builder.metadata().file_metadata().num_rows().max(0) as u64;
    let leaves = descr
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| wanted(c.path().parts()))
        .map(|(i, _)| i);
    let mask = parquet::arrow::ProjectionMask::leaves(&descr, leaves);
    let mut builder = builder
        .with_projection(mask)
        .with_batch_size(READ_BATCH_ROWS);
    if let Some(rows) = rows {
        builder = builder.with_row_selection(selection(rows, total));
    }
    Ok(builder.build()?)
}

/// Which leaf columns of a file are read, by their path.
pub(crate) type Leaves = Box<dyn Fn(&[String]) -> bool + Send>;

/// A file a [`ReadAhead`] reads: its leaf columns that `wanted` accepts
/// and, with `rows`, only those rows (as [`open_parquet_rows`]; a file with
/// none is not opened).
pub(crate) struct AheadFile {
    pub path: Path,
    pub size: Option<u64>,
    pub wanted: Leaves,
    pub rows: Option<RoaringTreemap>,
}

/// Files read one after another by a task of their own, which opens and
/// decodes them ahead of the reader while the batches waiting for the
/// reader hold no more than `ahead_bytes` (or one batch): decompressing
/// and decoding run on another of the runtime's threads beside whatever
/// the reader does with the batches before. Each batch comes with the
/// index of its file. Dropping it stops the task.
pub(crate) struct ReadAhead {
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Ahead>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

type Ahead = (
    usize,
    arrow::record_batch::RecordBatch,
    tokio::sync::OwnedSemaphorePermit,
);

impl ReadAhead {
    pub fn spawn(store: Arc<dyn ObjectStore>, files: Vec<AheadFile>, ahead_bytes: usize) -> Self {
        let cap = ahead_bytes.clamp(1, u32::MAX as usize) as u32;
        let room = Arc::new(tokio::sync::Semaphore::new(cap as usize));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            for (i, f) in files.into_iter().enumerate() {
                if f.rows.as_ref().is_some_and(RoaringTreemap::is_empty) {
                    continue;
                }
                let opened =
                    open_parquet_rows(&store, f.path, f.size, f.wanted, f.rows.as_ref()).await;
                let mut stream = match opened {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                loop {
                    let batch = match stream.try_next().await {
                        Ok(Some(batch)) => batch,
                        Ok(None) => break,
                        Err(e) => {
                            let _ = tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let bytes = (batch.get_array_memory_size() as u64).clamp(1, cap as u64);
                    let Ok(permit) = room.clone().acquire_many_owned(bytes as u32).await else {
                        return;
                    };
                    if tx.send(Ok((i, batch, permit))).is_err() {
                        return;
                    }
                }
            }
        });
        ReadAhead {
            rx,
            task: Some(task),
        }
    }

    /// The next batch and the index of its file; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<(usize, arrow::record_batch::RecordBatch)>> {
        if let Some(next) = self.rx.recv().await {
            // Its bytes no longer wait: the permit goes.
            let (i, batch, _waiting) = next?;
            return Ok(Some((i, batch)));
        }
        // The task ended: after the last file, or by a panic, which must not
        // pass for the end of the rows.
        match self.task.take() {
            Some(task) => task.await.map(|()| None).map_err(|e| {
                crate::Error::Lake(format!("reading Parquet files ahead: the task failed: {e}"))
            }),
            None => Ok(None),
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Below this many rows a run of selected or skipped rows, on average, a
/// selection is a bitmap rather than runs (the `parquet` crate's own
/// threshold for reading one through a mask).
const MASK_RUN_ROWS: u64 = 32;

/// The rows at `rows` (below `total`) of a file of `total` rows: as runs of
/// rows selected and skipped, or as a bitmap when the runs are short (a
/// fold's second pass picking every other row of a bulk UPDATE). The reader
/// walks the runs once for every column it reads, to find the pages that
/// hold a selected row; a bitmap it tests a page at a time.
fn selection(rows: &RoaringTreemap, total: u64) -> RowSelection {
    let runs = rows
        .iter()
        .take_while(|p| *p < total)
        .scan(None, |last: &mut Option<u64>, p| {
            let starts = last.is_none_or(|l| l + 1 != p);
            *last = Some(p);
            Some(starts)
        })
        .filter(|starts| *starts)
        .count() as u64;
    if runs * 2 * MASK_RUN_ROWS > total {
        let mut mask = arrow::array::BooleanBufferBuilder::new(total as usize);
        mask.append_n(total as usize, false);
        for p in rows.iter().take_while(|p| *p < total) {
            mask.set_bit(p as usize, true);
        }
        return RowSelection::from_boolean_buffer(mask.finish());
    }
    let mut selectors = Vec::new();
    let mut next = 0u64;
    let mut run: Option<(u64, u64)> = None;
    let mut close = |(from, to): (u64, u64), selectors: &mut Vec<RowSelector>| {
        if from > next {
            selectors.push(RowSelector::skip((from - next) as usize));
        }
        selectors.push(RowSelector::select((to - from) as usize));
        next = to;
    };
    for p in rows.iter().take_while(|p| *p < total) {
        run = match run {
            Some((from, to)) if to == p => Some((from, p + 1)),
            Some(done) => {
                close(done, &mut selectors);
                Some((p, p + 1))
            }
            None => Some((p, p + 1)),
        };
    }
    if let Some(done) = run {
        close(done, &mut selectors);
    }
    if total > next {
        selectors.push(RowSelector::skip((total - next) as usize));
    }
    RowSelection::from(selectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_names_the_rows_and_skips_the_rest() {
        let rows: RoaringTreemap = [0u64, 1, 2, 5, 9, 10, 30].into_iter().collect();
        let sel = selection(&rows, 12);
        let runs: Vec<(bool, usize)> = sel.iter().map(|s| (s.skip, s.row_count)).collect();
        assert_eq!(
            runs,
            vec![
                (false, 3),
                (true, 2),
                (false, 1),
                (true, 3),
                (false, 2),
                (true, 1)
            ]
        );
        assert_eq!(sel.row_count(), 6);
        let none = selection(&RoaringTreemap::new(), 4);
        assert_eq!(none.row_count(), 0);
        assert_eq!(none.skipped_row_count(), 4);
    }

    async fn put_ids(store: &Arc<dyn ObjectStore>, path: &str, ids: std::ops::Range<i64>) {
        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = arrow::record_batch::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(ids))],
        )
        .unwrap();
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        store.put(&Path::from(path), bytes.into()).await.unwrap();
    }

    fn ahead_file(path: &str, rows: Option<RoaringTreemap>) -> AheadFile {
        AheadFile {
            path: Path::from(path),
            size: None,
            wanted: Box::new(|_| true),
            rows,
        }
    }

    /// Files read ahead come in order, each batch with its file, the rows
    /// selected only, files with no row selected passed over; a file that
    /// cannot be read is an error, never an early end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_read_ahead_come_in_order_and_fail_loudly() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        put_ids(&store, "a.parquet", 0..10_000).await;
        put_ids(&store, "b.parquet", 10_000..10_010).await;
        put_ids(&store, "c.parquet", 20_000..20_005).await;
        let every_third: RoaringTreemap = (0u64..10_000).step_by(3).collect();
        for ahead_bytes in [1, 1 << 20] {
            let files = vec![
                ahead_file("a.parquet", Some(every_third.clone())),
                ahead_file("b.parquet", Some(RoaringTreemap::new())),
                ahead_file("c.parquet", None),
            ];
            let mut read = ReadAhead::spawn(store.clone(), files, ahead_bytes);
            let mut got = Vec::new();
            while let Some((i, batch)) = read.next().await.unwrap() {
                let ids = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>();
                got.extend(ids.unwrap().values().iter().map(|id| (i, *id)));
            }
            let want: Vec<(usize, i64)> = (0..10_000)
                .step_by(3)
                .map(|id| (0, id))
                .chain((20_000..20_005).map(|id| (2, id)))
                .collect();
            assert_eq!(got, want, "ahead_bytes {ahead_bytes}");
            assert!(read.next().await.unwrap().is_none());
        }
        let files = vec![
            ahead_file("c.parquet", None),
            ahead_file("gone.parquet", None),
            ahead_file("a.parquet", None),
        ];
        let mut read = ReadAhead::spawn(store.clone(), files, 1 << 20);
        let (i, batch) = read.next().await.unwrap().unwrap();
        assert_eq!((i, batch.num_rows()), (0, 5));
        let e = read.next().await.unwrap_err().to_string();
        assert!(e.contains("gone.parquet"), "{e}");
    }

    #[test]
    fn short_runs_make_a_bitmap_and_long_ones_runs() {
        // Every other row of 10,000: runs of one, a bitmap.
        let every_other: RoaringTreemap = (0u64..10_000).step_by(2).collect();
        let sel = selection(&every_other, 10_001);
        let mask = sel.as_mask().expect("a bitmap");
        assert_eq!(mask.len(), 10_001);
        assert_eq!(mask.count_set_bits(), 5_000);
        assert!(mask.value(0) && !mask.value(1) && mask.value(9_998) && !mask.value(10_000));
        // Positions past the file's rows are left out.
        let past: RoaringTreemap = [1u64, 3, 20].into_iter().collect();
        let sel = selection(&past, 5);
        assert_eq!(sel.row_count(), 2);
        assert_eq!(sel.skipped_row_count(), 3);
        // Two runs of 1,000 rows in 10,000: runs.
        let long: RoaringTreemap = (100u64..1_100).chain(5_000..6_000).collect();
        let sel = selection(&long, 10_000);
        assert!(sel.as_mask().is_none());
        let runs: Vec<(bool, usize)> = sel.iter().map(|s| (s.skip, s.row_count)).collect();
        assert_eq!(
            runs,
            vec![
                (true, 100),
                (false, 1_000),
                (true, 3_900),
                (false, 1_000),
                (true, 4_000)
            ]
        );
    }
}
