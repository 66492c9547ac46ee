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
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::Result;

/// Rows per batch read from a Parquet file.
pub(crate) const READ_BATCH_ROWS: usize = 4096;

/// A Parquet file in the store, read by ranges.
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
    async fn open(store: &Arc<dyn ObjectStore>, path: Path, size: Option<u64>) -> Result<Self> {
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
    let file = StoreFile::open(store, path, size).await?;
    let builder = ParquetRecordBatchStreamBuilder::new(file).await?;
    let descr = builder.metadata().file_metadata().schema_descr_ptr();
    let leaves = descr
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| wanted(c.path().parts()))
        .map(|(i, _)| i);
    let mask = parquet::arrow::ProjectionMask::leaves(&descr, leaves);
    Ok(builder
        .with_projection(mask)
        .with_batch_size(READ_BATCH_ROWS)
        .build()?)
}
