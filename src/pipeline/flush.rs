//! Table buffers on their way to the store: `flush.max_rows` and
//! `flush.max_buffer_bytes` send buffers off as Parquet files, encoded and
//! uploaded in the background while decoding goes on. A written file stays
//! pending until a checkpoint commits it.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use tracing::debug;

use super::{current, xa, Pipeline};
use crate::batch::savepoint::seq_range;
use crate::commit::{self, DataFile};
use crate::error::{Error, Result};
use crate::http::metrics::op_counts;
use crate::schema::TableSchema;
use crate::sink;

/// A table buffer on its way to the store: Parquet encoding on the blocking
/// pool, then the upload.
pub(super) struct Flush {
    pub(super) task: tokio::task::JoinHandle<Result<DataFile>>,
    /// The buffer's memory estimate, held until the file is written.
    bytes: usize,
    /// Rows of a prepared XA transaction: a held file, not a pending one.
    held: bool,
}

/// At most this many buffers are encoded and uploaded at once; the decoder
/// waits for the oldest beyond that.
const MAX_IN_FLIGHT: usize = 2;

impl Pipeline<'_> {
    /// `max_rows` per table and `max_buffer_bytes` overall, honoured even
    /// inside a transaction: files written here are pending until the next
    /// checkpoint commits them.
    ///
    /// The budget covers the open buffers and those being encoded. A buffer
    /// is sent off once the open ones pass half of it, so that one can be
    /// encoded while the next fills; the decoder waits only when the
    /// encoder falls behind.
    pub(super) async fn apply_memory_limits(&mut self) -> Result<()> {
        let full: Vec<String> = self
            .buffers
            .iter()
            .filter(|(_, b)| b.rows() >= self.config.flush.max_rows)
            .map(|(k, _)| k.clone())
            .collect();
        for name in full {
            self.flush_table(&name).await?;
        }
        let limit = self.config.flush.max_buffer_bytes - current::fold_share(self.config);
        let open = |p: &Self| p.buffers.values().map(|b| b.approx_bytes()).sum::<usize>();
        while open(self) > limit / 2 {
            let largest = self
                .buffers
                .iter()
                .filter(|(_, b)| b.rows() > 0)
                .max_by_key(|(_, b)| b.approx_bytes())
                .map(|(k, _)| k.clone());
            match largest {
                Some(name) => self.flush_table(&name).await?,
                None => break,
            }
        }
        while !self.in_flight.is_empty()
            && open(self) + self.in_flight.iter().map(|f| f.bytes).sum::<usize>() > limit
        {
            self.finish_oldest_flush().await?;
        }
        Ok(())
    }

    /// Sends one table's buffer off to become a pending Parquet file, and
    /// waits for the oldest upload when too many are running.
    pub(super) async fn flush_table(&mut self, name: &str) -> Result<()> {
        self.start_flush(name)?;
        while self.in_flight.len() > MAX_IN_FLIGHT {
            self.finish_oldest_flush().await?;
        }
        Ok(())
    }

    /// Starts encoding and uploading one table's buffer in the background.
    /// The file's name is fixed here, so names follow the stream's order.
    pub(super) fn start_flush(&mut self, name: &str) -> Result<()> {
        let column_key = self.config.columns.key.as_ref();
        let Some(buffer) = self.buffers.get_mut(name) else {
            return Ok(());
        };
        if buffer.rows() == 0 {
            return Ok(());
        }
        let table = Arc::clone(&buffer.table);
        let estimate = buffer.approx_bytes();
        let batch = self
            .savepoints
            .keep(&table.qualified_name(), buffer.finish(column_key)?)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        debug!(table = %table.qualified_name(), estimate, rows = batch.num_rows(), "flushing a buffer");
        self.write_batch(table, batch, self.xa_active)
    }

    /// Encodes and uploads one batch in the background as a pending file
    /// (or a held file of a prepared XA transaction).
    pub(super) fn write_batch(
        &mut self,
        table: Arc<TableSchema>,
        batch: RecordBatch,
        held: bool,
    ) -> Result<()> {
        // What the batch holds, plus the encoder's compressed pages of the
        // row group and the file's bytes: each up to a quarter of the batch
        // with zstd on these tables.
        let bytes = batch.get_array_memory_size() * 3 / 2;
        let path = if held {
            self.xa_counter += 1;
            xa::held_file_path(
                self.next_manifest_seq(),
                &self.writer_id,
                self.xa_counter,
                &table.database,
                &table.name,
            )
        } else {
            self.file_counter += 1;
            commit::data_file_path(
                &table.database,
                &table.name,
                self.next_manifest_seq(),
                self.file_counter - 1,
                &self.writer_id,
            )
        };
        self.file_seqs.insert(path.to_string(), seq_range(&batch));
        if !held {
            self.file_ops.insert(path.to_string(), op_counts(&batch));
        }
        let store = Arc::clone(&self.lake.store);
        let threshold = self.config.sink.multipart_threshold;
        let task = tokio::spawn(async move {
            let rows = batch.num_rows() as u64;
            let encoded = tokio::task::spawn_blocking(move || sink::encode_parquet(&batch))
                .await
                .map_err(|e| Error::Lake(format!("parquet encoder task failed: {e}")))??;
            let size = sink::put_file(store.as_ref(), &path, encoded, threshold).await?;
            debug!(%path, rows, size, "wrote pending file");
            Ok(DataFile {
                table: table.qualified_name(),
                path: path.to_string(),
                rows,
                bytes: size,
                schema_version: table.version,
            })
        });
        self.in_flight.push_back(Flush { task, bytes, held });
        // Sampled per written buffer, not per event: the moments of most memory.
        let open: usize = self.buffers.values().map(|b| b.approx_bytes()).sum();
        self.metrics
            .set_buffer_bytes(open + self.in_flight.iter().map(|f| f.bytes).sum::<usize>());
        Ok(())
    }

    /// Waits for the oldest background flush; its file becomes pending.
    pub(super) async fn finish_oldest_flush(&mut self) -> Result<()> {
        let Some(flush) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let file = flush
            .task
            .await
            .map_err(|e| Error::Lake(format!("flush task failed: {e}")))??;
        if flush.held {
            self.xa_written.push(file.path.clone());
            self.xa_files.push(file);
        } else {
            self.pending.push(file);
        }
        Ok(())
    }
}
