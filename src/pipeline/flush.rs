//! Table buffers on their way to the store: `flush.max_rows` and
//! `flush.max_buffer_bytes` send buffers off, encoded in the background
//! while decoding goes on. The stream's buffers of a table go into one open
//! changelog file, a row group at a time, which is closed and uploaded when
//! it reaches its size or at the checkpoint: few large files, in the memory
//! of their compressed pages, where each buffer made a file of its own
//! before (a fold reads a file's footer and opens its column chunks once
//! per file: BENCHMARKS.md, "Fewer, larger changelog files"). A written
//! file stays pending until a checkpoint commits it.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use object_store::path::Path;
use tokio::sync::oneshot;
use tracing::debug;

use super::{xa, Pipeline};
use crate::batch::savepoint::seq_range;
use crate::commit::{self, DataFile};
use crate::error::{Error, Result};
use crate::http::metrics::op_counts;
use crate::schema::TableSchema;
use crate::sink;
use crate::sink::changelog_writer::ChangelogWriter;

/// A table buffer on its way to the store: Parquet encoding on the blocking
/// pool, then the upload.
pub(super) struct Flush {
    pub(super) task: tokio::task::JoinHandle<Result<Flushed>>,
    /// The buffer's memory estimate, held until the file is written.
    bytes: usize,
    /// Rows of a prepared XA transaction: a held file, not a pending one.
    held: bool,
}

/// What a background flush did.
pub(super) enum Flushed {
    /// Wrote a whole file, now pending (or held).
    File(DataFile),
    /// Appended rows to the open file of a table (by qualified name) at
    /// `path`, which now takes `memory` bytes.
    Appended {
        table: String,
        path: String,
        memory: usize,
    },
}

/// Where a batch goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum FileKind {
    /// Rows of the stream: appended to the table's open file.
    Stream,
    /// A snapshot chunk: a file of its own, rows in key order.
    Snapshot,
    /// Rows of a prepared XA transaction: a held file.
    Held,
}

/// A table's changelog file open across flushes. Its writer passes from
/// each flush's task to the next through a channel, so that the row groups
/// go in in the stream's order while the decoder goes on.
pub(super) struct OpenFile {
    table: Arc<TableSchema>,
    schema: SchemaRef,
    path: Path,
    rows: u64,
    /// The writer's encoded bytes and pages in progress, as of its last
    /// finished flush.
    memory: usize,
    writer: oneshot::Receiver<ChangelogWriter>,
}

/// A routed table's batches from its shards, gathered into one row group.
pub(super) struct Gathered {
    /// The routed table's version they are of.
    table: Arc<TableSchema>,
    batches: Vec<RecordBatch>,
    bytes: usize,
}

/// A routed table's rows from its shards are gathered up to this many bytes
/// before they go into its open file as one row group.
const ROUTED_ROW_GROUP_BYTES: usize = 4 << 20;

/// At most this many buffers are encoded and uploaded at once; the decoder
/// waits for the oldest beyond that.
const MAX_IN_FLIGHT: usize = 2;

/// The open files take this share of the stream's memory together, and one
/// file at most half of it: 9 MiB of compressed pages with the default
/// `max_buffer_bytes`, about 100,000 rows of 1 KB in one row group.
const OPEN_FILES_SHARE: usize = 4;

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
            .filter(|(_, b)| b.rows() >= self.settings.flush.max_rows)
            .map(|(k, _)| k.clone())
            .collect();
        for name in full {
            self.flush_table(&name).await?;
        }
        let (limit, files) = self.stream_budget();
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
        let open_files = |p: &Self| p.open_files.values().map(|f| f.memory).sum::<usize>();
        while open_files(self) > files {
            let largest = self
                .open_files
                .iter()
                .max_by_key(|(_, f)| f.memory)
                .map(|(k, _)| k.clone());
            match largest {
                Some(name) => self.close_open_file(&name),
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
        let column_key = self.settings.columns.key.as_ref();
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
        let kind = match self.xa_active {
            true => FileKind::Held,
            false => FileKind::Stream,
        };
        self.write_batch(table, batch, kind)
    }

    /// Encodes and uploads one batch in the background: into the table's
    /// open file, or as a pending file of its own (or a held file of a
    /// prepared XA transaction).
    pub(super) fn write_batch(
        &mut self,
        table: Arc<TableSchema>,
        batch: RecordBatch,
        kind: FileKind,
    ) -> Result<()> {
        let shard = table.qualified_name();
        let (table, batch) = self.route(table, batch)?;
        if kind == FileKind::Stream {
            if table.qualified_name() != shard {
                return self.gather_routed(table, batch);
            }
            return self.append_batch(table, batch);
        }
        let held = kind == FileKind::Held;
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
            self.next_data_file_path(&table)
        };
        self.file_seqs.insert(path.to_string(), seq_range(&batch));
        if !held {
            self.file_ops.insert(path.to_string(), op_counts(&batch));
        }
        let store = Arc::clone(&self.lake.store);
        let threshold = self.settings.multipart_threshold;
        let task = tokio::spawn(async move {
            let rows = batch.num_rows() as u64;
            let encoded = tokio::task::spawn_blocking(move || sink::encode_parquet(&batch))
                .await
                .map_err(|e| Error::Lake(format!("parquet encoder task failed: {e}")))??;
            upload(store.as_ref(), &path, encoded, threshold, &table, rows).await
        });
        self.in_flight.push_back(Flush { task, bytes, held });
        self.sample_buffer_bytes();
        Ok(())
    }

    /// The path of the next pending file of a table.
    fn next_data_file_path(&mut self, table: &TableSchema) -> Path {
        self.file_counter += 1;
        commit::data_file_path(
            &table.database,
            &table.name,
            self.next_manifest_seq(),
            self.file_counter - 1,
            &self.writer_id,
        )
    }

    /// The stream's share of `flush.max_buffer_bytes`, split into the part
    /// of the table buffers and those in flight, and the part of the open
    /// files.
    fn stream_budget(&self) -> (usize, usize) {
        let limit = self.settings.stream_memory;
        let files = limit / OPEN_FILES_SHARE;
        (limit - files, files)
    }

    /// Sampled per written buffer, not per event: the moments of most memory.
    fn sample_buffer_bytes(&self) {
        let open: usize = self
            .buffers
            .values()
            .map(|b| b.approx_bytes())
            .sum::<usize>()
            + self.open_files.values().map(|f| f.memory).sum::<usize>();
        self.metrics
            .set_buffer_bytes(open + self.in_flight.iter().map(|f| f.bytes).sum::<usize>());
    }

    /// Appends a batch of the stream to its table's open file as a row
    /// group, in the background; opens the file first if there is none, or
    /// if the table's shape changed since, or if the open one is full.
    fn append_batch(&mut self, table: Arc<TableSchema>, batch: RecordBatch) -> Result<()> {
        let name = table.qualified_name();
        let full = self.stream_budget().1 / 2;
        if self.open_files.get(&name).is_some_and(|f| {
            !Arc::ptr_eq(&f.table, &table) || f.schema != batch.schema() || f.memory >= full
        }) {
            self.close_open_file(&name);
        }
        if !self.open_files.contains_key(&name) {
            let writer = ChangelogWriter::try_new(batch.schema())?;
            let memory = writer.memory_size();
            let (sender, receiver) = oneshot::channel();
            // The receiver is right here: this cannot fail.
            let _ = sender.send(writer);
            let path = self.next_data_file_path(&table);
            let file = OpenFile {
                table: Arc::clone(&table),
                schema: batch.schema(),
                path,
                rows: 0,
                memory,
                writer: receiver,
            };
            self.open_files.insert(name.clone(), file);
        }
        let Some(file) = self.open_files.get_mut(&name) else {
            return Ok(());
        };
        let path = file.path.to_string();
        let seqs = seq_range(&batch);
        self.file_seqs
            .entry(path.clone())
            .and_modify(|r| *r = r.start.min(seqs.start)..r.end.max(seqs.end))
            .or_insert(seqs);
        let ops = op_counts(&batch);
        let counts = self.file_ops.entry(path.clone()).or_default();
        for (sum, n) in counts.iter_mut().zip(ops) {
            *sum += n;
        }
        file.rows += batch.num_rows() as u64;
        // What the batch holds and the encoder's scratch; the compressed
        // pages count with the open file once written.
        let bytes = batch.get_array_memory_size() * 5 / 4;
        let (sender, receiver) = oneshot::channel();
        let previous = std::mem::replace(&mut file.writer, receiver);
        let task = tokio::spawn(async move {
            let mut writer = previous
                .await
                .map_err(|_| Error::Lake(format!("an earlier flush into {path} failed")))?;
            let writer = tokio::task::spawn_blocking(move || {
                writer.write(&batch)?;
                Ok::<_, Error>(writer)
            })
            .await
            .map_err(|e| Error::Lake(format!("parquet encoder task failed: {e}")))??;
            let memory = writer.memory_size();
            // No receiver: the run rewound and dropped the file.
            let _ = sender.send(writer);
            Ok(Flushed::Appended {
                table: name,
                path,
                memory,
            })
        });
        self.in_flight.push_back(Flush {
            task,
            bytes,
            held: false,
        });
        self.sample_buffer_bytes();
        Ok(())
    }

    /// Closes a table's open file and uploads it in the background; it
    /// becomes pending like any written file.
    pub(super) fn close_open_file(&mut self, name: &str) {
        let Some(file) = self.open_files.remove(name) else {
            return;
        };
        let store = Arc::clone(&self.lake.store);
        let threshold = self.settings.multipart_threshold;
        let OpenFile {
            table,
            path,
            rows,
            memory,
            writer,
            ..
        } = file;
        let task = tokio::spawn(async move {
            let writer = writer
                .await
                .map_err(|_| Error::Lake(format!("an earlier flush into {path} failed")))?;
            let encoded = tokio::task::spawn_blocking(move || writer.finish())
                .await
                .map_err(|e| Error::Lake(format!("parquet encoder task failed: {e}")))??;
            upload(store.as_ref(), &path, encoded, threshold, &table, rows).await
        });
        self.in_flight.push_back(Flush {
            task,
            bytes: memory,
            held: false,
        });
    }

    /// Closes every open file (a checkpoint, or rows taken back), with the
    /// shards' rows gathered for them.
    pub(super) fn close_open_files(&mut self) -> Result<()> {
        self.write_gathered()?;
        let names: Vec<String> = self.open_files.keys().cloned().collect();
        for name in names {
            self.close_open_file(&name);
        }
        Ok(())
    }

    /// Gathers a routed table's batch from one shard with the others' until
    /// they make a row group of [`ROUTED_ROW_GROUP_BYTES`]: a checkpoint of
    /// 1,024 shards of a few rows each wrote 1,024 row groups (and as many
    /// encoder tasks) into the routed table's file.
    fn gather_routed(&mut self, table: Arc<TableSchema>, batch: RecordBatch) -> Result<()> {
        let name = table.qualified_name();
        if self
            .routed_batches
            .get(&name)
            .is_some_and(|g| !Arc::ptr_eq(&g.table, &table))
        {
            self.write_routed(&name)?;
        }
        let bytes = batch.get_array_memory_size();
        let gathered = self
            .routed_batches
            .entry(name.clone())
            .or_insert_with(|| Gathered {
                table,
                batches: Vec::new(),
                bytes: 0,
            });
        gathered.batches.push(batch);
        gathered.bytes += bytes;
        if gathered.bytes >= ROUTED_ROW_GROUP_BYTES {
            self.write_routed(&name)?;
        }
        Ok(())
    }

    /// Appends a routed table's gathered batches to its open file, as one.
    fn write_routed(&mut self, name: &str) -> Result<()> {
        let Some(g) = self.routed_batches.remove(name) else {
            return Ok(());
        };
        let Some(first) = g.batches.first() else {
            return Ok(());
        };
        let batch = arrow::compute::concat_batches(&first.schema(), &g.batches)?;
        self.append_batch(g.table, batch)
    }

    /// Appends every routed table's gathered batches.
    pub(super) fn write_gathered(&mut self) -> Result<()> {
        let names: Vec<String> = self.routed_batches.keys().cloned().collect();
        for name in &names {
            self.write_routed(name)?;
        }
        Ok(())
    }

    /// Waits for the oldest background flushes until at most `most` run.
    pub(super) async fn bound_in_flight(&mut self, most: usize) -> Result<()> {
        while self.in_flight.len() > most {
            self.finish_oldest_flush().await?;
        }
        Ok(())
    }

    /// Waits for the oldest background flush; its file becomes pending.
    pub(super) async fn finish_oldest_flush(&mut self) -> Result<()> {
        let Some(flush) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let flushed = flush
            .task
            .await
            .map_err(|e| Error::Lake(format!("flush task failed: {e}")))??;
        let file = match flushed {
            Flushed::File(file) => file,
            Flushed::Appended {
                table,
                path,
                memory,
            } => {
                if let Some(open) = self
                    .open_files
                    .get_mut(&table)
                    .filter(|f| f.path.as_ref() == path)
                {
                    open.memory = memory;
                }
                return Ok(());
            }
        };
        if flush.held {
            self.xa_written.push(file.path.clone());
            self.xa_files.push(file);
        } else {
            self.pending.push(file);
        }
        Ok(())
    }
}

/// Uploads an encoded file of a table: now a written file, pending or held.
async fn upload(
    store: &dyn object_store::ObjectStore,
    path: &Path,
    encoded: Vec<u8>,
    threshold: usize,
    table: &TableSchema,
    rows: u64,
) -> Result<Flushed> {
    let size = sink::put_file(store, path, encoded, threshold).await?;
    debug!(%path, rows, size, "wrote pending file");
    Ok(Flushed::File(DataFile {
        table: table.qualified_name(),
        path: path.to_string(),
        rows,
        bytes: size,
        schema_version: table.version,
    }))
}
