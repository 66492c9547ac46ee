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
/// integer-like key columns ([`crate::sink::delta_packs`]) are
/// DELTA_BINARY_PACKED. A fold with deletion vectors reads the key pages of
/// the files a changed key falls in (unless the footer holds the key's
/// runs); sorted keys so encoded take a few bits a row, and decode several
/// times faster than zstd-compressed plain values (the decompression was
/// half of such a fold's time). Smaller key pages
/// (1,024 rows) would let a fold skip more of them, but cost more than they
/// save (`bench_key_scan`).
pub(super) fn keyed_file_properties(
    schema: &arrow::datatypes::Schema,
    key_idx: &[usize],
) -> Result<parquet::file::properties::WriterProperties> {
    let delta: Vec<ColumnPath> = key_idx
        .iter()
        .map(|i| schema.field(*i))
        .filter(|f| crate::sink::delta_packs(f.data_type()))
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

type FileWriter = AsyncArrowWriter<object_store::buffered::BufWriter>;

/// Batches a fold hands the encoder of a file ahead of it: the fold reads
/// and merges the next while the encoder (on another of the runtime's
/// threads) encodes and compresses these.
const ENCODER_QUEUE: usize = 2;

/// A file being written: its rows go to a task that encodes them, so that
/// encoding (about a third of a fold's time) runs beside the reading and
/// merging rather than after it.
pub(super) struct OpenFile {
    rows: Option<tokio::sync::mpsc::Sender<RecordBatch>>,
    /// The encoder: it hands the writer back once `rows` is closed (taken
    /// when awaited, which happens once).
    encoder: Option<tokio::task::JoinHandle<Result<FileWriter>>>,
    /// The file's bytes so far (written and buffered) and its rows, as of
    /// the batch the encoder took last.
    encoded: tokio::sync::watch::Receiver<(u64, u64)>,
    /// The rows handed to the encoder.
    rows_sent: u64,
    name: String,
    first: Vec<u8>,
    last: Vec<u8>,
    runs: Option<KeyRuns>,
}

impl OpenFile {
    fn new(writer: FileWriter, name: String, first: Vec<u8>, runs: Option<KeyRuns>) -> OpenFile {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<RecordBatch>(ENCODER_QUEUE);
        let (seen, encoded) = tokio::sync::watch::channel((0, 0));
        let encoder = tokio::spawn(async move {
            let mut writer = writer;
            let mut rows = 0;
            while let Some(batch) = rx.recv().await {
                writer.write(&batch).await?;
                rows += batch.num_rows() as u64;
                let bytes = (writer.bytes_written() + writer.in_progress_size()) as u64;
                // (No receiver left: the fold has stopped; the rest of its
                // queue is written and then dropped with the writer.)
                let _ = seen.send((bytes, rows));
            }
            Ok(writer)
        });
        OpenFile {
            rows: Some(tx),
            encoder: Some(encoder),
            encoded,
            rows_sent: 0,
            name,
            first,
            last: Vec::new(),
            runs,
        }
    }

    /// Hands `batch` to the encoder.
    async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let sent = match &self.rows {
            Some(rows) => rows.send(batch.clone()).await.is_ok(),
            None => false,
        };
        if sent {
            self.rows_sent += batch.num_rows() as u64;
            return Ok(());
        }
        // The encoder ended early: its error.
        match self.finish().await {
            Err(e) => Err(e),
            Ok(_) => Err(Error::Lake(
                "current table: a file's encoder ended early".into(),
            )),
        }
    }

    /// Closes the queue and waits for the encoder to hand the writer back.
    async fn finish(&mut self) -> Result<FileWriter> {
        self.rows = None;
        let encoder = self
            .encoder
            .take()
            .ok_or_else(|| Error::Lake("current table: a file's encoder ended early".into()))?;
        encoder
            .await
            .map_err(|e| Error::Lake(format!("current table: a file's encoder failed: {e}")))?
    }

    /// The file's bytes once the encoder has the rows sent: what it has
    /// encoded, at its bytes a row (`per_row` before it has any; without
    /// either, the first batch is awaited).
    async fn size(&mut self, per_row: Option<f64>) -> u64 {
        if per_row.is_none() {
            // Err: the encoder ended (its error comes with the next batch).
            let _ = self.encoded.wait_for(|e| e.1 > 0).await;
        }
        let (bytes, rows) = *self.encoded.borrow();
        match (rows, per_row) {
            (0, None) => 0,
            (0, Some(r)) => (r * self.rows_sent as f64) as u64,
            (rows, _) => bytes * self.rows_sent / rows,
        }
    }

    /// The writer, once the encoder has written every batch.
    async fn writer(mut self) -> Result<(FileWriter, String, Vec<u8>, Vec<u8>, Option<KeyRuns>)> {
        let writer = self.finish().await?;
        Ok((writer, self.name, self.first, self.last, self.runs))
    }
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
    /// The bytes a row of the last file written took.
    pub bytes_per_row: Option<f64>,
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
            let runs = self.runs_column.map(|_| KeyRuns::default());
            self.open = Some(OpenFile::new(writer, name, first.to_vec(), runs));
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if let (Some(runs), Some(i)) = (open.runs.as_mut(), self.runs_column) {
            runs.push(batch.column(i).as_ref());
        }
        if let Err(e) = open.write(batch).await {
            // The encoder is gone with its error: nothing can finish the
            // file (a `cut` would only meet the error again).
            self.open = None;
            return Err(e);
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        open.last = last.to_vec();
        // The encoder may be behind: the bytes of the rows it has not
        // taken yet are reckoned at its bytes a row so far.
        if open.size(self.bytes_per_row).await >= self.ctx.target_bytes {
            self.cut().await?;
        }
        Ok(())
    }

    /// Ends the file being written: what comes next starts a new one.
    pub(super) async fn cut(&mut self) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let rows = open.rows_sent;
        let (mut writer, name, first, last, runs) = open.writer().await?;
        if let Some(runs) = runs.as_ref().and_then(KeyRuns::encode) {
            writer.append_key_value_metadata(KeyValue::new(RUNS_KEY.to_string(), runs));
        }
        let meta = writer.finish().await?;
        let size = writer.bytes_written() as u64;
        if rows > 0 {
            self.bytes_per_row = Some(size as f64 / rows as f64);
        }
        self.added(name, size, &meta, &first, &last);
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    /// An encoder that fails (a batch of another schema) fails every later
    /// write and the end of the file with an error, never a panic.
    #[tokio::test]
    async fn a_failed_encoder_fails_every_later_call() {
        let store: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::memory::InMemory::new());
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let upload = object_store::buffered::BufWriter::new(store, Path::from("f.parquet"));
        let writer = AsyncArrowWriter::try_new(upload, schema.clone(), None).unwrap();
        let mut open = OpenFile::new(writer, "f.parquet".into(), Vec::new(), None);
        let good =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        let bad = RecordBatch::try_new(other, vec![Arc::new(Int32Array::from(vec![3]))]).unwrap();
        open.write(&good).await.unwrap();
        open.write(&bad).await.unwrap();
        let mut failed = 0;
        for _ in 0..4 {
            failed += usize::from(open.write(&good).await.is_err());
        }
        assert!(
            failed >= 3,
            "{failed} of 4 writes after the bad batch failed"
        );
        assert!(open.writer().await.is_err());
    }
}
