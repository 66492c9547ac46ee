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

/// The rows at `rows` (below `total`) of a file of `total` rows, as runs of
/// rows selected and skipped.
fn selection(rows: &RoaringTreemap, total: u64) -> RowSelection {
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
}
