//! The new files of a fold: how a current table's files are written, and
//! the writer that cuts them near the target size.

use parquet::arrow::AsyncArrowWriter;
use parquet::schema::types::ColumnPath;

use parquet::file::metadata::KeyValue;

use super::key_runs::{KeyRuns, RUNS_KEY};
use super::*;

/// Row groups of a current table's files stay below this (encoded), so that
/// reading or writing one holds little.
pub(super) const ROW_GROUP_BYTES: usize = 8 << 20;

/// How a current table's files are written (see [`delta_file_properties`]).
fn file_properties_builder() -> Result<parquet::file::properties::WriterPropertiesBuilder> {
    Ok(parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(
            parquet::basic::ZstdLevel::try_new(1)?,
        ))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_dictionary_enabled(false))
}

/// The same for a table whose key columns are `key_idx` of `schema`:
/// integer-like key columns are DELTA_BINARY_PACKED. A fold with deletion
/// vectors reads the key pages of the files a changed key falls in (unless
/// the footer holds the key's runs); sorted keys so encoded take a few bits
/// a row, and decode several times faster than zstd-compressed plain values
/// (the decompression was half of such a fold's time). Smaller key pages
/// (1,024 rows) would let a fold skip more of them, but cost more than they
/// save (`bench_key_scan`).
pub(super) fn keyed_file_properties(
    schema: &arrow::datatypes::Schema,
    key_idx: &[usize],
) -> Result<parquet::file::properties::WriterProperties> {
    let delta: Vec<ColumnPath> = key_idx
        .iter()
        .map(|i| schema.field(*i))
        .filter(|f| {
            f.data_type().is_integer()
                || matches!(
                    f.data_type(),
                    DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)
                )
        })
        .map(|f| ColumnPath::from(f.name().as_str()))
        .collect();
    delta_file_properties(&delta)
}

/// The same with the columns `delta` DELTA_BINARY_PACKED (a rewrite of a
/// file keeps the encoding of its key columns).
pub(crate) fn delta_file_properties(
    delta: &[ColumnPath],
) -> Result<parquet::file::properties::WriterProperties> {
    let mut props = file_properties_builder()?;
    for column in delta {
        props = props.set_column_encoding(
            column.clone(),
            parquet::basic::Encoding::DELTA_BINARY_PACKED,
        );
    }
    Ok(props.build())
}

/// A file being written.
pub(super) struct OpenFile {
    writer: AsyncArrowWriter<object_store::buffered::BufWriter>,
    name: String,
    first: Vec<u8>,
    last: Vec<u8>,
    runs: Option<KeyRuns>,
}

/// The new files of a fold, written as rows arrive in key order and cut
/// near the target size; each file's key range goes into its `add` tags.
pub(super) struct Output<'a> {
    pub ctx: &'a Ctx<'a>,
    pub dir: &'a Path,
    pub schema: SchemaRef,
    pub props: parquet::file::properties::WriterProperties,
    /// The one integer key column, whose runs go into each file's footer.
    pub runs_column: Option<usize>,
    pub open: Option<OpenFile>,
    pub adds: Vec<Value>,
    pub written: Vec<Path>,
    pub n: usize,
    /// Whether the files change the table's data (`false`: a purge).
    pub data_change: bool,
}

impl Output<'_> {
    /// Appends rows whose keys run from `first` to `last`, all after the
    /// rows before them.
    pub(super) async fn push(
        &mut self,
        batch: &RecordBatch,
        first: &[u8],
        last: &[u8],
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.open.is_none() {
            let (name, path) = self.next_name();
            let props = self.props.clone();
            let upload =
                object_store::buffered::BufWriter::new(self.ctx.store.clone(), path.clone());
            let writer = AsyncArrowWriter::try_new(upload, self.schema.clone(), Some(props))?;
            self.written.push(path);
            self.open = Some(OpenFile {
                writer,
                name,
                first: first.to_vec(),
                last: Vec::new(),
                runs: self.runs_column.map(|_| KeyRuns::default()),
            });
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if let (Some(runs), Some(i)) = (open.runs.as_mut(), self.runs_column) {
            runs.push(batch.column(i).as_ref());
        }
        open.writer.write(batch).await?;
        open.last = last.to_vec();
        let size = open.writer.bytes_written() + open.writer.in_progress_size();
        if size as u64 >= self.ctx.target_bytes {
            self.cut().await?;
        }
        Ok(())
    }

    /// Ends the file being written: what comes next starts a new one.
    pub(super) async fn cut(&mut self) -> Result<()> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        if let Some(runs) = open.runs.as_ref().and_then(KeyRuns::encode) {
            open.writer
                .append_key_value_metadata(KeyValue::new(RUNS_KEY.to_string(), runs));
        }
        let meta = open.writer.finish().await?;
        let size = open.writer.bytes_written() as u64;
        self.added(open.name, size, &meta, &open.first, &open.last);
        Ok(())
    }

    /// The name and path of the next new file.
    pub(super) fn next_name(&mut self) -> (String, Path) {
        let name = format!(
            "current-{:020}-{:05}-{}.parquet",
            self.ctx.s1,
            self.n,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        self.n += 1;
        let path = self.dir.clone().join(name.as_str());
        (name, path)
    }

    /// The `add` of a file written, whose keys run from `first` to `last`.
    pub(super) fn added(
        &mut self,
        name: String,
        size: u64,
        meta: &parquet::file::metadata::ParquetMetaData,
        first: &[u8],
        last: &[u8],
    ) {
        if std::env::var_os(ABORT_IN_FOLD).is_some_and(|v| v != "vectors") {
            // Tests: a kill in the middle of a fold.
            std::process::abort();
        }
        let stats = crate::table::stats::stats(meta);
        self.adds.push(json!({"add": {
            "path": name,
            "partitionValues": {},
            "size": size,
            "modificationTime": chrono::Utc::now().timestamp_millis(),
            "dataChange": self.data_change,
            "stats": stats.to_string(),
            "tags": {TAG_FIRST: hex(first), TAG_LAST: hex(last)},
        }}));
    }
}
