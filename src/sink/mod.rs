//! Parquet encoding and the object store the lake lives in.

use std::path::Path as FsPath;
use std::sync::Arc;

use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};

/// Opens the lake root as an object store.
pub fn open_store(root: &FsPath) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(root).map_err(|e| {
        Error::Lake(format!(
            "cannot create the lake root {}: {e}",
            root.display()
        ))
    })?;
    let store = LocalFileSystem::new_with_prefix(root)
        .map_err(|e| Error::Lake(format!("cannot open the lake root {}: {e}", root.display())))?;
    Ok(Arc::new(store))
}

/// Encodes one batch as a zstd Parquet file. The Arrow schema travels in the
/// file metadata so Duration and time zones read back exactly.
///
/// Dictionary encoding is on only for the low-cardinality CDC columns
/// (`_op`, `_binlog_file`, `_sql`, `_gtid`): on table columns, mostly unique
/// values, the dictionary interner cost more CPU than zstd saved (perf
/// profile in BENCHMARKS.md).
pub fn encode_parquet(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(128 * 1024))
        .set_dictionary_enabled(false);
    for field in batch.schema().fields() {
        if matches!(field.data_type(), DataType::Dictionary(..)) || field.name() == "_gtid" {
            props =
                props.set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), true);
        }
    }
    let props = props.build();
    let mut out = Vec::with_capacity(batch.get_array_memory_size() / 4);
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(out)
}

/// Writes a data file; the object is invisible to readers until a manifest lists it.
pub async fn put_file(store: &dyn ObjectStore, path: &Path, bytes: Vec<u8>) -> Result<u64> {
    let len = bytes.len() as u64;
    store
        .put(path, PutPayload::from(Bytes::from(bytes)))
        .await?;
    Ok(len)
}
