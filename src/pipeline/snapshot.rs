//! The pipeline's side of the initial snapshot: announced chunks wait for the
//! stream to reach their position and are placed there (see `crate::snapshot`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, StructArray};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info};

use super::Pipeline;
use crate::batch;
use crate::config::{SnapshotConfig, SnapshotMethod, SourceConfig};
use crate::error::{Error, Result};
use crate::schema::TableSchema;
use crate::snapshot::progress::ProgressView;
use crate::snapshot::reader::{self, Work};
use crate::snapshot::{
    ChunkId, ChunkRows, Message, Reply, SnapshotProgress, SnapshotState, WindowEnd,
};
use crate::source::BinlogPosition;

/// A running snapshot: the reader's messages and the chunks on their way
/// into the stream.
pub(super) struct SnapshotRun {
    rx: mpsc::Receiver<Message>,
    task: tokio::task::JoinHandle<()>,
    /// Announced chunks whose position the stream has not reached, in order.
    waiting: VecDeque<Waiting>,
    /// Chunks placed before their rows arrived: the `_seq` range and `_tx_seq`
    /// kept for them.
    reserved: HashMap<ChunkId, Reserved>,
    /// Chunks read in a watermark window that is open: the keys the stream
    /// changed since it opened, and the rows once read.
    windows: HashMap<ChunkId, Window>,
    /// Every table's snapshot as placed so far.
    pub progress: SnapshotProgress,
    /// Placed snapshot rows per table, not yet written out.
    buffers: BTreeMap<String, SnapshotBuffer>,
    /// The reader has read every table.
    finished: bool,
    /// Where the stream last saw a DDL change each table: a key the reader
    /// read before that is read again.
    changed_at: HashMap<String, BinlogPosition>,
    /// Tables the reader found gone (1146) whose removal the stream has not
    /// reached yet: the statement ends them there (a DROP) or restarts them
    /// under their new name (a RENAME), or a heartbeat does when the stream
    /// has read past the binlog's end at the reader's failure and never saw
    /// one.
    pub(super) gone: BTreeMap<String, BinlogPosition>,
    /// Bars on a terminal, log lines otherwise.
    view: ProgressView,
    spawn: SpawnArgs,
}

#[derive(Clone)]
pub(super) struct SpawnArgs {
    pub source: SourceConfig,
    pub server_id: u32,
    pub chunk_rows: usize,
    pub method: SnapshotMethod,
    /// The plan a new lake started with.
    pub initial: SnapshotProgress,
}

struct Waiting {
    chunk: ChunkId,
    table: String,
    at: BinlogPosition,
    keyless: bool,
    key_read_at: Option<BinlogPosition>,
    window: Option<Vec<String>>,
    reply: oneshot::Sender<Reply>,
}

/// A watermark window (see `crate::snapshot`).
struct Window {
    table: String,
    shape: Arc<TableSchema>,
    /// The key columns' places in `shape` (and in a chunk's columns).
    key: Vec<usize>,
    /// Their places in the table's files, which leave excluded columns out.
    lake_key: Vec<usize>,
    /// Compares keys as the files hold them (a hashed key as its hash):
    /// the stream's keys come from written batches.
    converter: RowConverter,
    /// The keys of rows the stream changed since the window opened, in the
    /// converter's byte form: equal values, equal bytes.
    changed: HashSet<Box<[u8]>>,
    /// The table's shape changed (or it was emptied) inside the window: the
    /// read may have seen either side; it is read again.
    reshaped: bool,
    /// The chunk's rows and the window's end, once read.
    read: Option<(ChunkRows, WindowEnd)>,
}

struct Reserved {
    shape: Arc<TableSchema>,
    /// The next `_seq` of the chunk's rows.
    seq: i64,
    /// The end of the range kept for a keyed chunk.
    limit: Option<i64>,
    tx_seq: i64,
    at: BinlogPosition,
}

pub(super) struct SnapshotBuffer {
    pub shape: Arc<TableSchema>,
    pub batches: Vec<RecordBatch>,
    pub rows: usize,
    pub bytes: usize,
}

impl Drop for SnapshotRun {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The snapshot run of a start: a reader for the tables of `progress` that
/// are not done (none when no table has a snapshot).
pub(super) fn start_run(
    source: &SourceConfig,
    snapshot: &SnapshotConfig,
    server: &crate::source::ServerInfo,
    progress: Option<SnapshotProgress>,
) -> Option<SnapshotRun> {
    let progress = progress.filter(|p| !p.is_empty())?;
    let running = progress.values().filter(|t| !t.done()).count();
    if running > 0 {
        info!(
            tables = running,
            "initial snapshot: reading tables beside the stream"
        );
    }
    Some(SnapshotRun::start(
        progress.clone(),
        SpawnArgs {
            source: source.clone(),
            server_id: server.server_id,
            chunk_rows: snapshot.chunk_rows,
            method: snapshot.method,
            initial: progress,
        },
    ))
}

impl SnapshotRun {
    /// Starts a reader for the tables of `progress` that are not done.
    pub fn start(progress: SnapshotProgress, spawn: SpawnArgs) -> Self {
        let work: Vec<Work> = progress
            .iter()
            .filter(|(_, t)| t.to_read())
            .map(|(table, t)| Work {
                table: table.clone(),
                after: t.last_key.clone(),
                key: t.key.clone(),
            })
            .collect();
        let (tx, rx) = mpsc::channel(4);
        let task = reader::spawn(
            spawn.source.clone(),
            spawn.server_id,
            spawn.chunk_rows,
            spawn.method,
            work,
            tx,
        );
        SnapshotRun {
            rx,
            task,
            waiting: VecDeque::new(),
            reserved: HashMap::new(),
            windows: HashMap::new(),
            progress,
            buffers: BTreeMap::new(),
            finished: false,
            changed_at: HashMap::new(),
            gone: BTreeMap::new(),
            view: ProgressView::for_stderr(),
            spawn,
        }
    }

    /// The next message of the reader; never resolves once it has finished.
    pub async fn next(run: &mut Option<SnapshotRun>) -> Message {
        match run {
            Some(r) if !r.finished => match r.rx.recv().await {
                Some(m) => m,
                // It always says why it ends, unless it panicked: a bug,
                // which a retry would only repeat.
                None => Message::Failed(Error::Snapshot {
                    table: "(reader)".into(),
                    message: "the snapshot reader stopped unexpectedly (a bug: please report it with the log)".into(),
                }),
            },
            _ => std::future::pending().await,
        }
    }

    /// Every table's snapshot is done and every chunk is in the lake's buffers.
    pub fn done(&self) -> bool {
        // A re-read waiting for the stream to name its table has nothing to read yet.
        self.progress.values().all(|t| !t.to_read()) && self.reserved.is_empty()
    }

    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    pub fn has_buffered_rows(&self) -> bool {
        self.buffers.values().any(|b| b.rows > 0)
    }

    /// Starts over from the committed state (a retry from the last
    /// checkpoint): the newest manifest's, or the plan of a new lake.
    pub fn restart(&mut self, committed: Option<SnapshotProgress>) {
        let progress = committed.unwrap_or_else(|| self.spawn.initial.clone());
        *self = SnapshotRun::start(progress, self.spawn.clone());
    }

    /// Starts a new reader for the tables of `progress` that are not done
    /// (some were just added or started over), keeping the rows already
    /// placed. Chunks announced to the old reader are forgotten: none may be
    /// waiting for its rows.
    pub fn read_again(&mut self) {
        debug_assert!(self.reserved.is_empty());
        let buffers = std::mem::take(&mut self.buffers);
        let mut next = SnapshotRun::start(self.progress.clone(), self.spawn.clone());
        next.buffers = buffers;
        // The old reader is aborted as it drops.
        *self = next;
    }

    pub fn take_buffer(&mut self, table: &str) -> Option<SnapshotBuffer> {
        self.buffers.remove(table)
    }

    /// A DDL statement at `at` may have changed `table`'s key.
    pub fn note_key_change(&mut self, table: &str, at: &BinlogPosition) {
        self.changed_at.insert(table.to_string(), at.clone());
    }

    /// Ends the snapshot of `table` if the reader found it gone: the stream
    /// reached the statement that removed it.
    pub fn end_if_gone(&mut self, table: &str) {
        if self.gone.remove(table).is_some() {
            if let Some(t) = self.progress.get_mut(table) {
                finish_table(t);
            }
        }
    }

    /// Ends every table the reader found gone whose statement the stream
    /// must have passed: it has read to `read_to`, all the server has (a
    /// heartbeat), without a statement that renamed them. A heartbeat sent
    /// before the statement was written may arrive after the reader's news
    /// of it, which a position before the reader's leaves waiting.
    pub fn end_gone(&mut self, read_to: &BinlogPosition) {
        let passed: Vec<String> = self
            .gone
            .iter()
            .filter(|(_, at)| *at <= read_to)
            .map(|(table, _)| table.clone())
            .collect();
        for table in passed {
            self.gone.remove(&table);
            if let Some(t) = self.progress.get_mut(&table) {
                finish_table(t);
            }
        }
    }

    /// A watermark window is open on `table`.
    pub fn watches(&self, table: &str) -> bool {
        self.windows.values().any(|w| w.table == table)
    }

    /// A DDL statement at `at` changed or emptied `table`.
    pub fn table_changed(&mut self, table: &str, at: &BinlogPosition) {
        self.note_key_change(table, at);
        for w in self.windows.values_mut().filter(|w| w.table == table) {
            w.reshaped = true;
        }
    }

    /// Notes the keys of the rows in `changed` (rows of a committed
    /// transaction in the table's schema version `version`): the after
    /// image, and the before image of updates.
    pub fn note_changed_rows(
        &mut self,
        table: &str,
        version: u32,
        changed: &RecordBatch,
    ) -> Result<()> {
        let before = changed
            .column_by_name("_before")
            .and_then(|c| c.as_any().downcast_ref::<StructArray>());
        for w in self.windows.values_mut().filter(|w| w.table == table) {
            if w.shape.version != version {
                w.reshaped = true;
                continue;
            }
            let after: Vec<ArrayRef> = w
                .lake_key
                .iter()
                .map(|&i| Arc::clone(changed.column(i)))
                .collect();
            note_keys(w, &after)?;
            if let Some(before) = before {
                let keys: Vec<ArrayRef> = w
                    .lake_key
                    .iter()
                    .map(|&i| Arc::clone(before.column(i)))
                    .collect();
                note_keys(w, &keys)?;
            }
        }
        Ok(())
    }
}

fn note_keys(w: &mut Window, keys: &[ArrayRef]) -> Result<()> {
    let rows = w.converter.convert_columns(keys)?;
    // Rows whose key is null (the before image of inserts and deletes)
    // match no chunk row: chunk keys are never null.
    w.changed
        .extend(rows.iter().map(|r| Box::<[u8]>::from(r.as_ref())));
    Ok(())
}

impl Pipeline<'_> {
    /// Handles one message of the snapshot reader. Chunks whose position the
    /// stream has reached are placed when `place` is set (not while a
    /// checkpoint waits for rows: it would never end on an idle stream).
    pub(super) async fn on_snapshot_message(&mut self, msg: Message, place: bool) -> Result<()> {
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        match msg {
            Message::Announce {
                chunk,
                table,
                at,
                keyless,
                key_read_at,
                window,
                reply,
            } => {
                let at = if at >= self.read_to {
                    at
                } else if window.is_some() {
                    // A watermark window may open anywhere before the read,
                    // which waits for the reply: it opens where the stream
                    // is. Sending the reader for a newer head instead never
                    // ends while the stream keeps up with a busy server.
                    self.read_to.clone()
                } else {
                    // Events after the read's position already have their
                    // `_seq`: the chunk cannot go there any more.
                    let _ = reply.send(Reply::TooLate);
                    return Ok(());
                };
                run.waiting.push_back(Waiting {
                    chunk,
                    table,
                    at,
                    keyless,
                    key_read_at,
                    window,
                    reply,
                });
                if place && !self.in_tx {
                    let upto = self.read_to.clone();
                    self.place_chunks(&upto).await?;
                }
            }
            Message::Rows(mut rows) => {
                if let Some(end) = rows.window_end.take() {
                    if let Some(w) = run.windows.get_mut(&rows.chunk) {
                        w.read = Some((rows, end));
                    }
                    if place && !self.in_tx {
                        let upto = self.read_to.clone();
                        self.place_chunks(&upto).await?;
                    }
                    return Ok(());
                }
                self.fill_chunk(rows)?;
                self.flush_snapshot_buffers(false).await?;
            }
            Message::Abandoned { chunk } => {
                // Its reserved `_seq` range stays empty.
                run.reserved.remove(&chunk);
            }
            Message::Gone { table, at } => {
                // The reader's read can fail before the stream reaches the
                // statement that took the table away: a RENAME must restart
                // it under its new name there (`follow_renames`), which a
                // table already ended would not.
                let known = table.split_once('.').is_some_and(|(db, name)| {
                    self.tracker
                        .current_shape(&(db.to_string(), name.to_string()))
                        .is_some()
                });
                if known {
                    run.gone.insert(table, at);
                } else if let Some(t) = run.progress.get_mut(&table) {
                    finish_table(t);
                }
            }
            Message::Finished => {
                run.finished = true;
                info!("initial snapshot: every table is read");
            }
            Message::Failed(e) => return Err(e),
        }
        Ok(())
    }

    /// Places every waiting chunk whose position is at or before `upto`
    /// (the start of the next event, or what the stream has read when idle).
    /// Only called between transactions.
    pub(super) async fn place_chunks(&mut self, upto: &BinlogPosition) -> Result<()> {
        self.place_windows(upto).await?;
        loop {
            let Some(run) = self.snapshot.as_mut() else {
                return Ok(());
            };
            if run.waiting.front().is_none_or(|w| w.at > *upto) {
                return Ok(());
            }
            let w = run.waiting.pop_front().expect("checked above");
            let (db, name) = w.table.split_once('.').unwrap_or((&w.table, ""));
            let key = (db.to_string(), name.to_string());
            let shape = if self.tracker.captures(&key) {
                self.tracker.shape(&key)?
            } else {
                None
            };
            let Some(shape) = shape else {
                info!(table = %w.table, at = %w.at, "the table is gone before its snapshot chunk: its snapshot ends");
                if let Some(t) = run.progress.get_mut(&w.table) {
                    finish_table(t);
                }
                let _ = w.reply.send(Reply::Skip);
                continue;
            };
            if let (Some(read), Some(changed)) = (&w.key_read_at, run.changed_at.get(&w.table)) {
                if changed >= read {
                    let _ = w.reply.send(Reply::KeyChanged);
                    continue;
                }
            }
            let t = run
                .progress
                .entry(w.table.clone())
                .or_insert_with(|| crate::snapshot::TableSnapshot::new(0));
            if t.started_at.is_none() {
                t.started_at = Some(now());
            }
            if let Some(names) = &w.window {
                // The window opens here; the chunk is placed when it closes.
                let window = open_window(&w.table, &shape, names)?;
                run.windows.insert(w.chunk, window);
                let _ = w.reply.send(Reply::Accept { shape });
                continue;
            }
            let tx_seq = self.next_tx_seq;
            self.next_tx_seq += 1;
            let seq = self.next_seq;
            debug!(table = %w.table, at = %w.at, seq, tx_seq, "snapshot chunk placed");
            let chunk_rows = self.snapshot_chunk_rows() as i64;
            let reserved = Reserved {
                shape: Arc::clone(&shape),
                seq,
                limit: (!w.keyless).then_some(seq + chunk_rows),
                tx_seq,
                at: w.at.clone(),
            };
            if w.keyless {
                let Some(run) = self.snapshot.as_mut() else {
                    return Ok(());
                };
                run.reserved.insert(w.chunk, reserved);
                let _ = w.reply.send(Reply::Accept { shape });
                self.take_keyless_read(w.chunk).await?;
            } else {
                // The rows come later; the stream goes on meanwhile, after
                // the range kept for them.
                self.next_seq += chunk_rows;
                let Some(run) = self.snapshot.as_mut() else {
                    return Ok(());
                };
                run.reserved.insert(w.chunk, reserved);
                let _ = w.reply.send(Reply::Accept { shape });
            }
            // The cursor sits at this boundary: its counters move past the chunk.
            self.cursor.next_seq = self.next_seq;
            self.cursor.next_tx_seq = self.next_tx_seq;
        }
    }

    /// Places the chunks whose watermark window closed at or before `upto`,
    /// without the rows whose key the stream changed inside the window.
    /// Only called between transactions.
    async fn place_windows(&mut self, upto: &BinlogPosition) -> Result<()> {
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        let closed: Vec<ChunkId> = run
            .windows
            .iter()
            .filter(|(_, w)| w.read.as_ref().is_some_and(|(_, end)| end.until <= *upto))
            .map(|(&chunk, _)| chunk)
            .collect();
        for chunk in closed {
            let Some(run) = self.snapshot.as_mut() else {
                return Ok(());
            };
            let Some(mut w) = run.windows.remove(&chunk) else {
                continue;
            };
            let Some((mut rows, end)) = w.read.take() else {
                continue;
            };
            if w.reshaped {
                let _ = end.placed.send(false);
                continue;
            }
            let column_key = self.settings.columns.key.as_ref();
            let keys: Vec<ArrayRef> = w
                .key
                .iter()
                .map(|&i| {
                    batch::policy::police(
                        &w.shape,
                        &w.shape.columns[i],
                        &rows.columns[i],
                        column_key,
                    )
                })
                .collect::<Result<_>>()?;
            let converted = w.converter.convert_columns(&keys)?;
            let keep: BooleanArray = converted
                .iter()
                .map(|r| Some(!w.changed.contains(r.as_ref())))
                .collect();
            let kept = keep.true_count();
            if kept < rows.rows {
                debug!(table = %w.table, chunk, dropped = rows.rows - kept, "rows changed inside the window are left to the stream");
                rows.columns = rows
                    .columns
                    .iter()
                    .map(|c| arrow::compute::filter(c, &keep))
                    .collect::<std::result::Result<_, _>>()?;
                rows.rows = kept;
            }
            let tx_seq = self.next_tx_seq;
            self.next_tx_seq += 1;
            let seq = self.next_seq;
            self.next_seq += kept as i64;
            debug!(table = %w.table, at = %upto, seq, tx_seq, rows = kept, "snapshot chunk placed at its window's end");
            run.reserved.insert(
                chunk,
                Reserved {
                    shape: Arc::clone(&w.shape),
                    seq,
                    limit: Some(seq + kept as i64),
                    tx_seq,
                    at: upto.clone(),
                },
            );
            self.fill_chunk(rows)?;
            self.cursor.next_seq = self.next_seq;
            self.cursor.next_tx_seq = self.next_tx_seq;
            let _ = end.placed.send(true);
        }
        self.flush_snapshot_buffers(false).await
    }

    fn snapshot_chunk_rows(&self) -> usize {
        self.snapshot.as_ref().map_or(0, |r| r.spawn.chunk_rows)
    }

    /// A table without a usable key is read in one consistent read: its rows
    /// are taken in here as they come, spilled through the flush policy like
    /// a huge transaction's.
    async fn take_keyless_read(&mut self, chunk: ChunkId) -> Result<()> {
        loop {
            let Some(run) = self.snapshot.as_mut() else {
                return Ok(());
            };
            let msg = run.rx.recv().await.ok_or_else(|| {
                Error::Connection("the snapshot reader ended during a read".into())
            })?;
            match msg {
                Message::Rows(rows) if rows.chunk == chunk => {
                    let last = rows.last_part;
                    self.next_seq += rows.rows as i64;
                    self.fill_chunk(rows)?;
                    self.flush_snapshot_buffers(false).await?;
                    self.apply_memory_limits().await?;
                    if last {
                        return Ok(());
                    }
                }
                Message::Failed(e) => return Err(e),
                Message::Gone { .. } | Message::Abandoned { .. } => {
                    // The table went away during the read: nothing more comes.
                    if let Some(run) = self.snapshot.as_mut() {
                        run.reserved.remove(&chunk);
                    }
                    return Ok(());
                }
                _ => {
                    return Err(Error::Connection(
                        "the snapshot reader broke the keyless read's order".into(),
                    ))
                }
            }
        }
    }

    /// The rows of a placed chunk take the `_seq` values kept for them.
    fn fill_chunk(&mut self, rows: ChunkRows) -> Result<()> {
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        let Some(r) = run.reserved.get_mut(&rows.chunk) else {
            // A chunk of a reader that was replaced (a retry): dropped.
            debug!(
                chunk = rows.chunk,
                "rows of an unknown snapshot chunk dropped"
            );
            return Ok(());
        };
        if r.limit.is_some_and(|end| r.seq + rows.rows as i64 > end) {
            return Err(Error::Snapshot {
                table: rows.table,
                message: format!("a chunk brought {} rows, more than chunk_rows", rows.rows),
            });
        }
        let batch = batch::snapshot_batch(
            &r.shape,
            rows.columns,
            r.seq,
            r.tx_seq,
            (&r.at.file, r.at.pos),
            rows.read_at_ms,
            self.settings.columns.key.as_ref(),
        )?;
        r.seq += rows.rows as i64;
        let shape = Arc::clone(&r.shape);
        if rows.last_part {
            run.reserved.remove(&rows.chunk);
        }
        let t = run
            .progress
            .entry(rows.table.clone())
            .or_insert_with(|| crate::snapshot::TableSnapshot::new(0));
        t.rows += rows.rows as u64;
        if rows.last_part {
            t.chunks += 1;
            t.last_key = rows.last_key;
            t.key = rows.key;
        }
        if rows.last_chunk && rows.last_part {
            finish_table(t);
            info!(table = %rows.table, rows = t.rows, chunks = t.chunks, "snapshot of a table is done");
        }
        run.view.update(&rows.table, t);
        self.stats.zero_dates += rows.zero_dates;
        // One file never mixes schema versions (a DDL between two chunks).
        if run
            .buffers
            .get(&rows.table)
            .is_some_and(|b| b.shape.version != shape.version)
        {
            if let Some(stale) = run.buffers.remove(&rows.table) {
                self.write_snapshot_buffer(stale)?;
            }
        }
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        let buffer = run
            .buffers
            .entry(rows.table)
            .or_insert_with(|| SnapshotBuffer {
                shape: Arc::clone(&shape),
                batches: Vec::new(),
                rows: 0,
                bytes: 0,
            });
        buffer.rows += batch.num_rows();
        buffer.bytes += batch.get_array_memory_size();
        buffer.batches.push(batch);
        Ok(())
    }

    /// A checkpoint commits whole chunks only: it waits for the rows of
    /// chunks placed before it.
    pub(super) async fn await_reserved_chunks(&mut self) -> Result<()> {
        while self
            .snapshot
            .as_ref()
            .is_some_and(|r| !r.reserved.is_empty())
        {
            let msg = SnapshotRun::next(&mut self.snapshot).await;
            self.on_snapshot_message(msg, false).await?;
        }
        Ok(())
    }

    /// Writes snapshot buffers out as pending files: all of them, or those
    /// past the flush policy's limits.
    pub(super) async fn flush_snapshot_buffers(&mut self, all: bool) -> Result<()> {
        let limit = self.settings.flush.max_buffer_bytes / 4;
        let max_rows = self.settings.flush.max_rows;
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        let names: Vec<String> = run
            .buffers
            .iter()
            .filter(|(_, b)| b.rows > 0 && (all || b.rows >= max_rows || b.bytes >= limit))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let Some(buffer) = self.snapshot.as_mut().and_then(|r| r.take_buffer(&name)) else {
                continue;
            };
            self.write_snapshot_buffer(buffer)?;
            // Many small tables: as many files at once as the store takes.
            self.bound_in_flight(self.lake.in_flight).await?;
        }
        Ok(())
    }
}

impl Pipeline<'_> {
    fn write_snapshot_buffer(&mut self, buffer: SnapshotBuffer) -> Result<()> {
        if buffer.batches.is_empty() {
            return Ok(());
        }
        let batch = arrow::compute::concat_batches(&buffer.batches[0].schema(), &buffer.batches)?;
        self.write_batch(buffer.shape, batch, super::flush::FileKind::Snapshot)
    }
}

fn open_window(table: &str, shape: &Arc<TableSchema>, names: &[String]) -> Result<Window> {
    let key = names
        .iter()
        .map(|n| {
            shape
                .columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(n))
                .ok_or_else(|| Error::Snapshot {
                    table: table.to_string(),
                    message: format!(
                        "key column `{n}` is not in the table's shape at the chunk's position"
                    ),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let fields = key
        .iter()
        .map(|&i| SortField::new(shape.columns[i].lake_type()))
        .collect();
    let lake_key = key
        .iter()
        .map(|&i| shape.columns[..i].iter().filter(|c| c.in_lake()).count())
        .collect();
    Ok(Window {
        table: table.to_string(),
        shape: Arc::clone(shape),
        key,
        lake_key,
        converter: RowConverter::new(fields)?,
        changed: HashSet::new(),
        reshaped: false,
        read: None,
    })
}

pub(super) fn finish_table(t: &mut crate::snapshot::TableSnapshot) {
    if t.state != SnapshotState::Done {
        t.state = SnapshotState::Done;
        t.done_at = Some(now());
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
