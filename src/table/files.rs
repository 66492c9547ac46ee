//! Parquet files of the lake read and written as streams: a file is read
//! one row group at a time by ranges, and written through a multipart
//! upload as its row groups fill, so that neither holds a whole file.
//! The current-state fold and the changelog compaction share them.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};
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
