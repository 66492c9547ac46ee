//! Parquet encoding and the object store the lake lives in.

pub mod changelog_writer;
pub mod conditional;
use crate::error::store as store_error;
#[cfg(test)]
pub(crate) mod testing;

use std::path::Path as FsPath;
use std::sync::Arc;

use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::config::{LakeLocation, SinkConfig};
use crate::error::{Error, Result};

/// Size of one part of a multipart upload (S3 wants at least 5 MiB but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one file uploaded at the same time.
const PART_CONCURRENCY: usize = 4;

/// Opens the lake named by `[sink] url` as an object store whose root is the
/// lake root (the URL's prefix is applied by a [`PrefixStore`]).
pub fn open_store(sink: &SinkConfig) -> Result<Arc<dyn ObjectStore>> {
    let url = &sink.url;
    let cannot = |e: object_store::Error| {
        Error::Lake(format!(
            "sink.url `{url}`: cannot open the object store: {e}"
        ))
    };
    let (store, prefix): (Arc<dyn ObjectStore>, &str) = match &sink.location {
        LakeLocation::Local(root) => return open_local(root),
        LakeLocation::S3 { bucket, prefix } => {
            let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
            if let Some(endpoint) = &sink.s3.endpoint {
                b = b.with_endpoint(endpoint);
            }
            if let Some(region) = &sink.s3.region {
                b = b.with_region(region);
            }
            if let Some(allow) = sink.s3.allow_http {
                b = b.with_allow_http(allow);
            }
            (Arc::new(b.build().map_err(cannot)?), prefix)
        }
        LakeLocation::Gcs { bucket, prefix } => {
            let b = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
            (Arc::new(b.build().map_err(cannot)?), prefix)
        }
        LakeLocation::Azure { container, prefix } => {
            let b = MicrosoftAzureBuilder::from_env().with_container_name(container);
            (Arc::new(b.build().map_err(cannot)?), prefix)
        }
    };
    if prefix.is_empty() {
        Ok(store)
    } else {
        Ok(Arc::new(PrefixStore::new(store, prefix)))
    }
}

/// Opens a local directory as the lake root, creating it if needed.
pub fn open_local(root: &FsPath) -> Result<Arc<dyn ObjectStore>> {
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

/// Where the put-if-absent probe writes its object.
pub const PROBE_DIR: &str = "_sluice";

/// The folder where releases before 0.1 put the probe: on a local lake it
/// stayed behind, empty, and looked like a Delta table to crawlers.
pub const OLD_PROBE_DIR: &str = "_sluice/_delta_log";

/// Proves that the store refuses to overwrite with `PutMode::Create`, which
/// fencing (DESIGN.md "Exactly-once") and the Delta commits of every table
/// depend on: writes a probe object twice put-if-absent (the second must fail
/// with AlreadyExists) and deletes it. The probe lies directly in `_sluice/`
/// (`_sluice/probe-….json`), outside any `_delta_log/` folder: a catalog
/// crawler or `find` that takes every `_delta_log` folder for a Delta table
/// must not find one there, and on a local lake a folder would outlive the
/// object. A store that cannot do this is a definite error naming the lake.
pub async fn probe_put_if_absent(store: &dyn ObjectStore, url: &str) -> Result<()> {
    let path = Path::from(format!(
        "{PROBE_DIR}/probe-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let unsupported = |why: String| {
        Error::Lake(format!(
            "sink.url `{url}`: the object store cannot write put-if-absent ({why}); sluice needs it to \
             keep a second writer out of the lake. Use a store with conditional writes \
             (AWS S3, MinIO, Cloudflare R2, GCS, Azure Blob, a local path), and for s3:// do not \
             set AWS_CONDITIONAL_PUT=disabled"
        ))
    };
    // The probe's own name in its body: read back after a lost answer, it
    // can only be this probe (`conditional`).
    let body = Bytes::from(format!("sluice put-if-absent probe {path}\n"));
    let payload = || PutPayload::from(body.clone());
    match conditional::put_if_absent(store, &path, body.clone()).await {
        Ok(conditional::Created::Written) => {}
        Ok(conditional::Created::Taken(_)) => {
            return Err(Error::Lake(format!(
                "sink.url `{url}`: the probe object {path}, a fresh name, holds another writer's bytes: something else writes in this lake"
            )))
        }
        Ok(conditional::Created::Unknown(e)) => {
            return Err(Error::Lake(format!(
                "sink.url `{url}`: {}",
                store_error::explain(&e)
            )))
        }
        Err(
            e @ (object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }),
        ) => return Err(unsupported(e.to_string())),
        // The first request sluice sends to the lake: a wrong bucket, region or
        // credentials show here, named with the lake.
        Err(e) => {
            return Err(Error::Lake(format!(
                "sink.url `{url}`: {}",
                store_error::explain(&e)
            )))
        }
    }
    let second = store.put_opts(&path, payload(), create()).await;
    let cleanup = store.delete(&path).await;
    match second {
        Err(object_store::Error::AlreadyExists { .. }) => {}
        Ok(_) => return Err(unsupported(
            "a second put-if-absent of the same object succeeded: the store ignores If-None-Match"
                .into(),
        )),
        Err(
            e @ (object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }),
        ) => return Err(unsupported(e.to_string())),
        Err(e) => return Err(e.into()),
    }
    cleanup.map_err(|e| {
        Error::Lake(format!(
            "sink.url `{url}`: cannot delete the probe object {path}: {e}; sluice needs DeleteObject"
        ))
    })?;
    Ok(())
}

/// How changelog files are written (by the stream and by compaction).
///
/// Dictionary encoding is on only for the low-cardinality CDC columns
/// (`_op`, `_binlog_file`, `_sql`, `_gtid`): on table columns, mostly unique
/// values, the dictionary interner cost more CPU than zstd saved (perf
/// profile in BENCHMARKS.md).
pub fn changelog_properties(
    schema: &arrow::datatypes::Schema,
) -> Result<parquet::file::properties::WriterPropertiesBuilder> {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(128 * 1024))
        .set_dictionary_enabled(false);
    for field in schema.fields() {
        if matches!(field.data_type(), DataType::Dictionary(..)) || field.name() == "_gtid" {
            props =
                props.set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), true);
        }
    }
    for path in delta_packed_columns(schema) {
        props = props.set_column_encoding(path, parquet::basic::Encoding::DELTA_BINARY_PACKED);
    }
    Ok(props)
}

/// Whether columns of type `t` are written DELTA_BINARY_PACKED where they
/// are: integers, dates, times, timestamps and durations (Parquet INT32 and
/// INT64), whose rising values (keys, counters, clocks) take a few bits a
/// row so encoded.
pub(crate) fn delta_packs(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(..)
                | DataType::Duration(_)
        )
}

/// The changelog columns that are DELTA_BINARY_PACKED: the integer-like
/// ones ([`delta_packs`]), of the row and of its `_before` image, and
/// `_seq`, `_tx_seq`, `_binlog_pos`, `_ts`.
fn delta_packed_columns(schema: &arrow::datatypes::Schema) -> Vec<ColumnPath> {
    let mut paths = Vec::new();
    for field in schema.fields() {
        match field.data_type() {
            DataType::Struct(children) if field.name() == "_before" => {
                for child in children.iter().filter(|c| delta_packs(c.data_type())) {
                    paths.push(ColumnPath::new(vec![
                        field.name().clone(),
                        child.name().clone(),
                    ]));
                }
            }
            t if delta_packs(t) => paths.push(ColumnPath::from(field.name().as_str())),
            _ => {}
        }
    }
    paths
}

/// Encodes one batch as a zstd Parquet file. The Arrow schema travels in the
/// file metadata so Duration and time zones read back exactly.
pub fn encode_parquet(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut writer = changelog_writer::ChangelogWriter::try_new(batch.schema())?;
    writer.write(batch)?;
    writer.finish()
}

/// Reads back a file [`encode_parquet`] wrote, as one batch.
pub fn decode_parquet(bytes: Bytes) -> Result<RecordBatch> {
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
    let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(arrow::compute::concat_batches(&schema, &batches)?)
}

/// Writes a data file; the object is invisible to readers until a manifest
/// lists it. Files of at least `multipart_threshold` bytes go up in parts of
/// [`PART_SIZE`], a few at a time; an upload that fails is aborted.
pub async fn put_file(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Vec<u8>,
    multipart_threshold: usize,
) -> Result<u64> {
    let len = bytes.len() as u64;
    let bytes = Bytes::from(bytes);
    if bytes.len() < multipart_threshold {
        store.put(path, PutPayload::from(bytes)).await?;
        return Ok(len);
    }
    let mut upload = store.put_multipart(path).await?;
    let parts: Vec<_> = (0..bytes.len())
        .step_by(PART_SIZE)
        .map(|at| {
            upload.put_part(PutPayload::from(
                bytes.slice(at..(at + PART_SIZE).min(bytes.len())),
            ))
        })
        .collect();
    let sent = futures::stream::iter(parts)
        .buffer_unordered(PART_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await;
    let done = match sent {
        Ok(_) => upload.complete().await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = done {
        if let Err(abort) = upload.abort().await {
            tracing::warn!(%path, kind = %crate::error::HasKind::error_kind(&abort), error = %abort, "could not abort a failed multipart upload");
        }
        return Err(e.into());
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::testing::{Faults, FaultyStore};
    use super::*;

    /// Integer-like changelog columns, of the row and of `_before`, are
    /// DELTA_BINARY_PACKED and read back exactly, across the whole range of
    /// each type (deltas that overflow, nulls); other columns are not.
    #[test]
    fn changelog_integers_are_delta_packed_and_read_back_exactly() {
        use arrow::array::{
            ArrayRef, Date32Array, Int32Array, Int64Array, StringArray, StructArray,
            TimestampMillisecondArray, UInt64Array,
        };
        use arrow::datatypes::{Field, Fields};
        use parquet::file::reader::{FileReader, SerializedFileReader};
        // splitmix64, seeded: values from every part of the range.
        let mut state = 0x5eed_u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let n = 5000;
        let mut big: Vec<Option<u64>> = vec![Some(u64::MAX), Some(0), None, Some(1 << 63)];
        let mut id: Vec<i64> = vec![i64::MIN, i64::MAX, -1, 0];
        while big.len() < n {
            let v = next();
            big.push((v % 7 != 0).then_some(v >> (v % 64)));
            id.push(match v % 3 {
                0 => v as i64,
                1 => id.len() as i64,
                _ => -(v as i64 >> 40),
            });
        }
        let day: Vec<Option<i32>> = (0..n)
            .map(|i| (i % 5 != 0).then_some(next() as i32 % 3_000_000))
            .collect();
        let name: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..n).map(|i| format!("n{i}")),
        ));
        let id: ArrayRef = Arc::new(Int64Array::from(id));
        let before_fields = Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let before_valid: Vec<bool> = (0..n).map(|i| i % 2 == 0).collect();
        let before = StructArray::try_new(
            before_fields,
            vec![id.clone(), name.clone()],
            Some(before_valid.into()),
        )
        .unwrap();
        let batch = RecordBatch::try_from_iter([
            ("id", id),
            ("big", Arc::new(UInt64Array::from(big)) as ArrayRef),
            ("day", Arc::new(Date32Array::from(day)) as ArrayRef),
            (
                "small",
                Arc::new(Int32Array::from_iter_values((0..n).map(|i| i as i32 % 7))) as ArrayRef,
            ),
            ("name", name),
            (
                "_seq",
                Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
            ),
            (
                "_ts",
                Arc::new(
                    TimestampMillisecondArray::from_iter_values(
                        (0..n as i64).map(|i| 1_700_000_000_000 + i / 100),
                    )
                    .with_timezone("UTC"),
                ) as ArrayRef,
            ),
            ("_before", Arc::new(before) as ArrayRef),
        ])
        .unwrap();
        let bytes = Bytes::from(encode_parquet(&batch).unwrap());
        assert_eq!(decode_parquet(bytes.clone()).unwrap(), batch);
        let reader = SerializedFileReader::new(bytes).unwrap();
        let group = reader.metadata().row_group(0);
        let packed: Vec<String> = group
            .columns()
            .iter()
            .filter(|c| {
                c.encodings()
                    .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED)
            })
            .map(|c| c.column_path().string())
            .collect();
        assert_eq!(
            packed,
            ["id", "big", "day", "small", "_seq", "_ts", "_before.id"]
        );
    }

    #[tokio::test]
    async fn probe_accepts_a_local_lake_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_local(dir.path()).unwrap();
        probe_put_if_absent(store.as_ref(), "/lake").await.unwrap();
        let left: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert!(left.is_empty(), "probe left {left:?}");
        // Folders too: the local store leaves the ones it made behind, and a
        // `_delta_log` folder anywhere is a Delta table to a crawler.
        let folders: Vec<_> = std::fs::read_dir(dir.path().join("_sluice"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(folders.is_empty(), "probe left {folders:?} in _sluice/");
    }

    #[tokio::test]
    async fn probe_refuses_a_store_without_put_if_absent() {
        let dir = tempfile::tempdir().unwrap();
        for refuse in [false, true] {
            let store = FaultyStore {
                inner: open_local(dir.path()).unwrap(),
                faults: Faults {
                    refuse_create: refuse,
                    ignore_create: !refuse,
                    ..Default::default()
                },
            };
            let err = probe_put_if_absent(&store, "s3://bkt/lake")
                .await
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("s3://bkt/lake") && err.contains("put-if-absent"),
                "{err}"
            );
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[tokio::test]
    async fn large_files_go_up_in_parts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_local(dir.path()).unwrap();
        let threshold = 16 << 20;
        for len in [1000, threshold - 1, threshold, 2 * PART_SIZE + 12345] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let path = Path::from(format!("db/t/part-{len}.parquet"));
            let written = put_file(store.as_ref(), &path, bytes.clone(), threshold)
                .await
                .unwrap();
            assert_eq!(written, len as u64);
            let back = store.get(&path).await.unwrap().bytes().await.unwrap();
            assert!(back.as_ref() == bytes.as_slice(), "{len} bytes differ");
        }
    }
}
