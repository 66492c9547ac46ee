//! The snapshot reader: one connection of its own, one table after another,
//! one consistent read per chunk, or for several small tables read in one
//! chunk each while the stream has not passed it (see the module above for
//! the protocol). Every table's key is read in one query at the start.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{Conn, Value};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::values::ChunkBuilder;
use super::{ChunkId, ChunkRows, KeyOrder, KeyValue, Message, Reply, WindowEnd};
use crate::config::{SnapshotMethod, SourceConfig};
use crate::error::{Error, Result};
use crate::schema::TableSchema;
use crate::source::{self, BinlogPosition};
use crate::types::ColumnKind;

mod key;
mod plan;
use key::{
    all_key_columns, key_columns, key_names, key_orders, resumes_under, same_order, KeyColumn,
};
pub use plan::plan;

/// A chunk whose consistent position the stream passed this many times in a
/// row (and every time as many more) is named in a warning.
const TOO_LATE_WARN_EVERY: u32 = 100;

/// A table the reader is to read, and where its committed snapshot ended.
#[derive(Debug, Clone)]
pub struct Work {
    pub table: String,
    pub after: Option<Vec<KeyValue>>,
    /// The key `after` is a key of (`None` from earlier releases).
    pub key: Option<Vec<KeyOrder>>,
}

/// Starts the reader; it reports through `to_pipeline` and ends with
/// `Finished` or `Failed`.
pub fn spawn(
    source: SourceConfig,
    server_id: u32,
    chunk_rows: usize,
    method: SnapshotMethod,
    work: Vec<Work>,
    to_pipeline: mpsc::Sender<Message>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let tx = to_pipeline.clone();
        let mut reader = Reader {
            tx: to_pipeline,
            chunk_rows,
            method,
            next_chunk: 0,
            key: None,
            open_read: None,
            keys: HashMap::new(),
            keys_at: BinlogPosition {
                file: String::new(),
                pos: 0,
            },
        };
        let outcome = reader.read_all(&source, server_id, work).await;
        let last = match outcome {
            Ok(()) => Message::Finished,
            Err(e) => Message::Failed(e),
        };
        // The pipeline may be gone (shutdown): nothing to tell then.
        let _ = tx.send(last).await;
    })
}

struct Reader {
    tx: mpsc::Sender<Message>,
    chunk_rows: usize,
    /// As configured until the session is prepared, then `Consistent` or
    /// `Watermark`.
    method: SnapshotMethod,
    next_chunk: ChunkId,
    /// The key of the table being read, sent with its chunks.
    key: Option<Vec<KeyOrder>>,
    /// The consistent read a table's last chunk ended in, still open for
    /// the next table: its position, and when it began.
    open_read: Option<(BinlogPosition, i64)>,
    /// The keys of the tables still to read, read together at `keys_at`
    /// (before the binlog head there): a table the stream saw changed at
    /// or after it asks for its key again.
    keys: HashMap<(String, String), Option<Vec<KeyColumn>>>,
    keys_at: BinlogPosition,
}

/// Why reading stops early.
enum Halt {
    /// The pipeline stopped listening (shutdown, or a retry that starts a
    /// new reader): the reader ends quietly.
    Stopped,
    Failed(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Self {
        Halt::Failed(e)
    }
}

impl Reader {
    async fn read_all(
        &mut self,
        cfg: &SourceConfig,
        server_id: u32,
        work: Vec<Work>,
    ) -> Result<()> {
        if work.is_empty() {
            return Ok(());
        }
        let mut conn = source::connect(cfg).await?;
        prepare_session(&mut conn, server_id).await?;
        self.method = resolve_method(&mut conn, self.method).await?;
        info!(method = ?self.method, "snapshot reader connected");
        self.keys_at = binlog_head(&mut conn)
            .await
            .map_err(|e| Error::Connection(format!("snapshot keys: {e}")))?;
        let databases: BTreeSet<&str> = work
            .iter()
            .filter_map(|w| w.table.split_once('.').map(|(db, _)| db))
            .collect();
        let databases: Vec<&str> = databases.into_iter().collect();
        self.keys = all_key_columns(&mut conn, &databases).await?;
        for w in work {
            match self.read_table(&mut conn, w).await {
                Ok(()) => {}
                Err(Halt::Stopped) => return Ok(()),
                Err(Halt::Failed(e)) => return Err(e),
            }
        }
        if self.open_read.take().is_some() {
            conn.query_drop("COMMIT")
                .await
                .map_err(|e| Error::Connection(format!("snapshot read: {e}")))?;
        }
        Ok(())
    }

    /// Where a table's read starts under `key`: logs it, and goes on after
    /// the saved last key only under a key of the same order.
    fn begin_table(
        &mut self,
        table: &str,
        w: &Work,
        key: Option<&[KeyColumn]>,
    ) -> Result<Option<Vec<KeyValue>>, Halt> {
        match key {
            Some(k) => {
                let names: Vec<&str> = k.iter().map(|c| c.name.as_str()).collect();
                info!(%table, key = %names.join(","), "snapshot of a table begins")
            }
            None => info!(%table, "snapshot of a table without a usable key: one consistent read"),
        }
        if self.method == SnapshotMethod::Watermark && key.is_none() {
            return Err(Halt::Failed(keyless_under_watermark(table)));
        }
        let mut after = w.after.clone();
        if after.is_some() && !resumes_under(w.key.as_deref(), key, after.as_deref()) {
            // Stopped mid-snapshot, and the key changed meanwhile: the saved
            // last key is a key of another order. Reading from the first row
            // again puts rows already read once more (the same rows, keyed
            // alike), never skips one; the DDL, once streamed, re-reads it.
            warn!(%table, from = ?w.key.as_ref().map(|k| k.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()), to = %key_names(key), "the table's key changed while sluice was stopped: its snapshot starts over from the first row");
            after = None;
        }
        self.key = key.map(key_orders);
        Ok(after)
    }

    async fn send(&self, m: Message) -> Result<(), Halt> {
        self.tx.send(m).await.map_err(|_| Halt::Stopped)
    }

    async fn read_table(&mut self, conn: &mut Conn, w: Work) -> Result<(), Halt> {
        let table = w.table.as_str();
        let (db, name) = table.split_once('.').ok_or_else(|| Error::Snapshot {
            table: table.to_string(),
            message: "not a db.table name".into(),
        })?;
        // The key read with the others, unless the stream saw the table
        // change since (the pipeline says so at the chunk's position).
        let (mut key, mut key_read_at) = match self.keys.remove(&(db.to_string(), name.to_string()))
        {
            Some(key) => (key, Some(self.keys_at.clone())),
            None => (key_columns(conn, db, name).await?, None),
        };
        let mut after = self.begin_table(table, &w, key.as_deref())?;
        let watermark = self.method == SnapshotMethod::Watermark;
        let mut retries = 0u32;
        loop {
            self.next_chunk += 1;
            let chunk = self.next_chunk;
            let sql = |e: mysql_async::Error| Halt::Failed(server_error(table, e));
            let (at, read_at_ms) = if watermark {
                // The window opens at the head: the rows read below are
                // those of some point after it.
                let at = binlog_head(conn).await.map_err(sql)?;
                (at, chrono::Utc::now().timestamp_millis())
            } else if let Some(open) = self.open_read.take() {
                // The read the last table ended in: still good while the
                // stream has not passed its position (else `TooLate`).
                open
            } else {
                conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                    .await
                    .map_err(sql)?;
                let at = snapshot_position(conn).await?;
                (at, chrono::Utc::now().timestamp_millis())
            };
            let (reply_tx, reply_rx) = oneshot::channel();
            self.send(Message::Announce {
                chunk,
                table: table.to_string(),
                at: at.clone(),
                keyless: key.is_none(),
                key_read_at: key_read_at.clone(),
                window: key
                    .as_ref()
                    .filter(|_| watermark)
                    .map(|k| k.iter().map(|c| c.name.clone()).collect()),
                reply: reply_tx,
            })
            .await?;
            let shape = match reply_rx.await.map_err(|_| Halt::Stopped)? {
                Reply::Accept { shape } => {
                    key_read_at = None;
                    shape
                }
                Reply::TooLate => {
                    if !watermark {
                        conn.query_drop("ROLLBACK").await.map_err(sql)?;
                    }
                    retries += 1;
                    debug!(%table, %at, retries, "the stream passed the chunk's position; reading again");
                    if retries % TOO_LATE_WARN_EVERY == 0 {
                        // A busy server whose every commit the stream reads
                        // before the announcement arrives: a consistent
                        // position may stay out of reach.
                        warn!(%table, retries, "the stream keeps passing this snapshot chunk's consistent position before it can be placed; still trying (snapshot.method = \"watermark\" places chunks where the stream is, for tables with a key)");
                    }
                    continue;
                }
                Reply::Skip => {
                    if !watermark {
                        conn.query_drop("ROLLBACK").await.map_err(sql)?;
                    }
                    return Ok(());
                }
                Reply::KeyChanged => {
                    if !watermark {
                        conn.query_drop("ROLLBACK").await.map_err(sql)?;
                    }
                    info!(%table, "the table changed since its key was read; reading the key again");
                    key = key_columns(conn, db, name).await?;
                    key_read_at = None;
                    after = self.begin_table(table, &w, key.as_deref())?;
                    continue;
                }
            };
            let read = match &key {
                Some(key) => {
                    self.read_chunk(
                        conn,
                        chunk,
                        table,
                        &shape,
                        key,
                        after.as_deref(),
                        read_at_ms,
                    )
                    .await
                }
                None => {
                    self.read_keyless(conn, chunk, table, &shape, read_at_ms)
                        .await
                }
            };
            match read {
                Ok(end) => {
                    if !watermark && end.last {
                        // The next table reads in the same consistent read:
                        // small tables cost one query each, not four.
                        self.open_read = Some((at, read_at_ms));
                        return Ok(());
                    }
                    if !watermark {
                        conn.query_drop("COMMIT").await.map_err(sql)?;
                    }
                    if end.last {
                        return Ok(());
                    }
                    after = end.last_key;
                    retries = 0;
                }
                Err(ReadError::Stopped) => return Err(Halt::Stopped),
                Err(ReadError::WindowChanged) => {
                    retries += 1;
                    debug!(%table, retries, "the table's shape changed inside the chunk's window; reading it again");
                    self.before_retry(conn, table, retries, &mut key, after.is_some())
                        .await?;
                }
                Err(e) => {
                    if !watermark {
                        let _ = conn.query_drop("ROLLBACK").await;
                    }
                    match (redo_reason(&e), key.is_some()) {
                        (Some(Redo::Again), true) => {
                            retries += 1;
                            debug!(%table, error = %e, retries, "the table changed under the chunk; reading it again");
                            self.send(Message::Abandoned { chunk }).await?;
                            self.before_retry(conn, table, retries, &mut key, after.is_some())
                                .await?;
                        }
                        // Part of a keyless read is already in the pipeline:
                        // a retry from the last checkpoint reads it again whole.
                        (Some(Redo::Again), false) => {
                            return Err(Halt::Failed(Error::Connection(format!(
                                "the table {table} changed during its one consistent read ({e}); reading it again"
                            ))))
                        }
                        (Some(Redo::Gone), _) => {
                            // Where the stream must have read to before it
                            // ends the table: the statement that took it is
                            // before the binlog's end now. Unknown (no
                            // answer), the next time the stream is idle.
                            let at = binlog_head(conn).await.unwrap_or_default();
                            info!(%table, %at, "the table is gone: its snapshot ends unless the stream finds it renamed before this position");
                            self.send(Message::Abandoned { chunk }).await?;
                            self.send(Message::Gone { table: table.to_string(), at }).await?;
                            return Ok(());
                        }
                        (None, _) => {
                            return Err(Halt::Failed(match e {
                                ReadError::Server(e) => server_error(table, e),
                                other => Error::Snapshot {
                                    table: table.to_string(),
                                    message: other.to_string(),
                                },
                            }))
                        }
                    }
                }
            }
        }
    }

    /// Before a chunk is read again because the table changed under it:
    /// waits (longer each time), gives up after `MAX_CHUNK_RETRIES` in a row
    /// with a definite error naming the table, and reads the key definition
    /// again, since the DDL may have renamed a key column (the old name would
    /// fail with 1054 at every retry) or replaced the key.
    async fn before_retry(
        &mut self,
        conn: &mut Conn,
        table: &str,
        retries: u32,
        key: &mut Option<Vec<KeyColumn>>,
        resumed: bool,
    ) -> Result<(), Halt> {
        if retries > MAX_CHUNK_RETRIES {
            return Err(Halt::Failed(Error::Snapshot {
                table: table.to_string(),
                message: format!(
                    "a chunk was read {retries} times in a row and the table changed under it every time; \
                     if DDL runs on it in a loop, pause that or exclude the table with [filter] exclude"
                ),
            }));
        }
        tokio::time::sleep(retry_delay(retries)).await;
        let (db, name) = table.split_once('.').expect("checked by read_table");
        let now = key_columns(conn, db, name).await?;
        if resumed && !same_order(key.as_deref(), now.as_deref()) {
            return Err(Halt::Failed(Error::Snapshot {
                table: table.to_string(),
                message: format!(
                    "its key changed during the snapshot (from {} to {}): the rows read so far follow the \
                     old key's order, so the snapshot cannot go on after its last key; run \
                     `sluice snapshot --replace {table}` to read it again under the new key",
                    key_names(key.as_deref()),
                    key_names(now.as_deref()),
                ),
            }));
        }
        if self.method == SnapshotMethod::Watermark && now.is_none() {
            return Err(Halt::Failed(keyless_under_watermark(table)));
        }
        self.key = now.as_deref().map(key_orders);
        *key = now;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn read_chunk(
        &mut self,
        conn: &mut Conn,
        chunk: ChunkId,
        table: &str,
        shape: &Arc<TableSchema>,
        key: &[KeyColumn],
        after: Option<&[KeyValue]>,
        read_at_ms: i64,
    ) -> std::result::Result<ChunkEnd, ReadError> {
        let (sql, params) = chunk_query(shape, key, after, self.chunk_rows)?;
        let width = shape.columns.len();
        let mut builder = ChunkBuilder::new(shape);
        let mut last_key = None;
        let mut result = conn.exec_iter(sql, params).await?;
        while let Some(row) = result.next().await? {
            let values = row.unwrap();
            if values.len() != width + key.len() {
                return Err(ReadError::Value(format!(
                    "the server returned {} columns, the chunk query asked for {}",
                    values.len(),
                    width + key.len()
                )));
            }
            builder.push(&values[..width]).map_err(ReadError::Value)?;
            last_key = Some(values[width..].to_vec());
        }
        drop(result);
        let last_key = match last_key {
            Some(values) => Some(
                values
                    .iter()
                    .map(KeyValue::from_value)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| ReadError::Value("a key column is NULL".into()))?,
            ),
            None => after.map(<[KeyValue]>::to_vec),
        };
        let last = builder.rows < self.chunk_rows;
        debug!(%table, chunk, rows = builder.rows, ?last_key, "snapshot chunk read");
        let (window_end, placed) = if self.method == SnapshotMethod::Watermark {
            // The window closes at the head after the read; the pipeline
            // places the chunk once its stream has passed it.
            let until = binlog_head(conn).await?;
            let (placed_tx, placed_rx) = oneshot::channel();
            (
                Some(WindowEnd {
                    until,
                    placed: placed_tx,
                }),
                Some(placed_rx),
            )
        } else {
            (None, None)
        };
        self.send_rows(
            chunk,
            table,
            builder,
            ChunkTail {
                last_key: last_key.clone(),
                last_chunk: last,
                last_part: true,
                window_end,
            },
            read_at_ms,
        )
        .await?;
        if let Some(placed) = placed {
            if !placed.await.map_err(|_| ReadError::Stopped)? {
                return Err(ReadError::WindowChanged);
            }
        }
        Ok(ChunkEnd { last_key, last })
    }

    async fn read_keyless(
        &mut self,
        conn: &mut Conn,
        chunk: ChunkId,
        table: &str,
        shape: &Arc<TableSchema>,
        read_at_ms: i64,
    ) -> std::result::Result<ChunkEnd, ReadError> {
        let sql = format!("SELECT {} FROM {}", select_list(shape), quoted_table(shape));
        let mut result = conn.exec_iter(sql, ()).await?;
        let mut builder = ChunkBuilder::new(shape);
        while let Some(row) = result.next().await? {
            builder.push(&row.unwrap()).map_err(ReadError::Value)?;
            if builder.rows >= self.chunk_rows {
                let full = std::mem::replace(&mut builder, ChunkBuilder::new(shape));
                self.send_rows(chunk, table, full, ChunkTail::part(false), read_at_ms)
                    .await?;
            }
        }
        drop(result);
        self.send_rows(chunk, table, builder, ChunkTail::part(true), read_at_ms)
            .await?;
        Ok(ChunkEnd {
            last_key: None,
            last: true,
        })
    }

    async fn send_rows(
        &mut self,
        chunk: ChunkId,
        table: &str,
        builder: ChunkBuilder,
        tail: ChunkTail,
        read_at_ms: i64,
    ) -> std::result::Result<(), ReadError> {
        let ChunkTail {
            last_key,
            last_chunk,
            last_part,
            window_end,
        } = tail;
        let (rows, zero_dates, bytes) = (builder.rows, builder.zero_dates, builder.bytes);
        let columns = builder.finish().map_err(ReadError::Value)?;
        self.tx
            .send(Message::Rows(ChunkRows {
                chunk,
                table: table.to_string(),
                columns,
                rows,
                last_key,
                key: self.key.clone(),
                last_chunk,
                last_part,
                zero_dates,
                read_at_ms,
                bytes,
                window_end,
            }))
            .await
            .map_err(|_| ReadError::Stopped)
    }
}

struct ChunkEnd {
    last_key: Option<Vec<KeyValue>>,
    last: bool,
}

/// What a part of a chunk tells besides its rows.
struct ChunkTail {
    last_key: Option<Vec<KeyValue>>,
    last_chunk: bool,
    last_part: bool,
    window_end: Option<WindowEnd>,
}

impl ChunkTail {
    /// A part of a keyless table's one read.
    fn part(last: bool) -> Self {
        ChunkTail {
            last_key: None,
            last_chunk: last,
            last_part: last,
            window_end: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Server(#[from] mysql_async::Error),
    #[error("{0}")]
    Value(String),
    #[error("the pipeline stopped")]
    Stopped,
    /// The table's shape changed inside a watermark window: read again.
    #[error("the table changed shape during the read")]
    WindowChanged,
}

/// Re-reads of one chunk in a row, because the table changed under it,
/// before the snapshot of the table fails.
const MAX_CHUNK_RETRIES: u32 = 30;

/// The wait before re-read `retries` of a chunk: 20 ms doubling to 2 s, with
/// jitter so that two sidecars do not retry in step.
fn retry_delay(retries: u32) -> Duration {
    let base = Duration::from_millis(20)
        .saturating_mul(1 << retries.min(7))
        .min(Duration::from_secs(2));
    base.mul_f64(rand::random::<f64>() * 0.5 + 0.75)
}

enum Redo {
    /// The table's definition changed after the read began: read again.
    Again,
    /// The table no longer exists.
    Gone,
}

fn redo_reason(e: &ReadError) -> Option<Redo> {
    let ReadError::Server(mysql_async::Error::Server(s)) = e else {
        return None;
    };
    match s.code {
        // ER_TABLE_DEF_CHANGED; ER_BAD_FIELD_ERROR (a column of the shape is gone)
        1412 | 1054 => Some(Redo::Again),
        // ER_NO_SUCH_TABLE
        1146 => Some(Redo::Gone),
        _ => None,
    }
}

/// A server error is definite (it refused the read); a lost connection is
/// transient: the pipeline retries from its last checkpoint.
fn server_error(table: &str, e: mysql_async::Error) -> Error {
    match e {
        mysql_async::Error::Server(s) => Error::Snapshot {
            table: table.to_string(),
            message: format!("the server refused the read: {s}"),
        },
        other => Error::Connection(format!("snapshot read of {table}: {other}")),
    }
}

/// Session settings every chunk read relies on; checked, not assumed.
async fn prepare_session(conn: &mut Conn, server_id: u32) -> Result<()> {
    let q = |e: mysql_async::Error| Error::Preflight(format!("snapshot connection: {e}"));
    for statement in [
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        // TIMESTAMP values as UTC, strings as the bytes stored (decoded
        // here by the binlog decoder's own charset rules).
        "SET NAMES utf8mb4",
        "SET time_zone = '+00:00', character_set_results = binary",
        // The server's or the user's sql_mode must not change what a read
        // returns: PAD_CHAR_TO_FULL_LENGTH pads CHAR values (and CHAR keys,
        // which then bind wrong), ORACLE and MSSQL change types and syntax.
        "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'",
    ] {
        conn.query_drop(statement).await.map_err(q)?;
    }
    // MySQL 8 knows only the newer name, MariaDB 10.11 only the older.
    let (id, isolation): (u32, String) = match conn
        .query_first("SELECT @@server_id, @@session.tx_isolation")
        .await
    {
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => conn
            .query_first("SELECT @@server_id, @@session.transaction_isolation")
            .await
            .map_err(q)?,
        other => other.map_err(q)?,
    }
    .unwrap_or_default();
    if id != server_id {
        return Err(Error::Preflight(format!(
            "the snapshot connection reached server_id {id}, the binlog stream server_id {server_id}: a proxy routes connections to different servers; point source.url at one server"
        )));
    }
    if !isolation.eq_ignore_ascii_case("REPEATABLE-READ") {
        return Err(Error::Preflight(format!(
            "the snapshot connection runs at {isolation} although REPEATABLE READ was asked for: a consistent read needs it; check the server's or proxy's session settings"
        )));
    }
    Ok(())
}

/// The method the server allows: `consistent` needs the position of a
/// consistent read (MariaDB's `binlog_snapshot_*` status variables).
async fn resolve_method(conn: &mut Conn, configured: SnapshotMethod) -> Result<SnapshotMethod> {
    if configured == SnapshotMethod::Watermark {
        return Ok(configured);
    }
    let rows: Vec<(String, Vec<u8>)> = conn
        .query("SHOW STATUS LIKE 'binlog_snapshot_position'")
        .await
        .map_err(|e| Error::Preflight(format!("snapshot connection: {e}")))?;
    match (configured, rows.is_empty()) {
        (_, false) => Ok(SnapshotMethod::Consistent),
        (SnapshotMethod::Auto, true) => Ok(SnapshotMethod::Watermark),
        _ => Err(Error::Preflight(
            "the server has no binlog_snapshot_position (MySQL), so [snapshot] method = \"consistent\" cannot place a read in the stream; use method = \"auto\" or \"watermark\"".into(),
        )),
    }
}

fn keyless_under_watermark(table: &str) -> Error {
    Error::Snapshot {
        table: table.to_string(),
        message: "has neither a primary key nor a NOT NULL unique key, and the watermark snapshot method (the server has no binlog_snapshot_position) needs one to leave rows that change during a read to the stream; add a key, exclude the table ([filter] exclude), or set [snapshot] mode = \"never\"".into(),
    }
}

/// Where the next event will be written: `SHOW MASTER STATUS`, or its
/// MySQL 8.4 name.
async fn binlog_head(conn: &mut Conn) -> std::result::Result<BinlogPosition, mysql_async::Error> {
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Err(mysql_async::Error::Server(e)) if e.code == 1064 => {
            conn.query_first("SHOW BINARY LOG STATUS").await?
        }
        other => other?,
    };
    let (file, pos) = row
        .and_then(|mut r| {
            Some((
                r.take_opt::<String, _>(0)?.ok()?,
                r.take_opt::<u64, _>(1)?.ok()?,
            ))
        })
        .unwrap_or_default();
    Ok(BinlogPosition { file, pos })
}

/// The binlog position of the consistent read just opened.
async fn snapshot_position(conn: &mut Conn) -> Result<BinlogPosition> {
    let rows: Vec<(String, Vec<u8>)> = conn
        .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(|e| Error::Connection(format!("snapshot position: {e}")))?;
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    match (get("Binlog_snapshot_file"), get("Binlog_snapshot_position")) {
        (Some(file), Some(pos)) if !file.is_empty() => Ok(BinlogPosition {
            file,
            pos: pos.parse().map_err(|_| Error::Preflight(format!("binlog_snapshot_position `{pos}` is not a number")))?,
        }),
        _ => Err(Error::Preflight(
            "the server has no binlog_snapshot_file/binlog_snapshot_position (MySQL): a consistent snapshot cannot be placed in the stream; set [snapshot] mode = \"never\"".into(),
        )),
    }
}

fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn quoted_table(shape: &TableSchema) -> String {
    format!("{}.{}", quote(&shape.database), quote(&shape.name))
}

fn select_list(shape: &TableSchema) -> String {
    shape
        .columns
        .iter()
        .map(|c| quote(&c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The chunk's SELECT: the shape's columns, then the key's values as they
/// are bound again, after `after` in key order. A composite key gets the
/// predicate the server can seek on, `a > ? OR (a = ? AND b > ?)`, never the
/// row constructor `(a, b) > (?, ?)` (a full index scan).
fn chunk_query(
    shape: &TableSchema,
    key: &[KeyColumn],
    after: Option<&[KeyValue]>,
    limit: usize,
) -> std::result::Result<(String, Vec<Value>), ReadError> {
    let key: Vec<KeyColumn> = key
        .iter()
        .map(|k| {
            let mut k = k.clone();
            match shape
                .columns
                .iter()
                .find(|c| c.name == k.name)
                .map(|c| &c.kind)
            {
                Some(ColumnKind::Decimal { precision, scale }) => {
                    k.decimal = Some((*precision, *scale))
                }
                Some(ColumnKind::Binary { .. }) => k.binary = true,
                _ => {}
            }
            k
        })
        .collect();
    let read_back = key
        .iter()
        .map(|k| match k.numeric {
            true => format!("({} + 0)", quote(&k.name)),
            false => quote(&k.name),
        })
        .collect::<Vec<_>>()
        .join(", ");
    // Bytes travel as hex text and are unhexed by the server: a string
    // parameter is read in the connection's charset (utf8mb4), which would
    // cut a latin1 or binary key at its first byte that is not UTF-8.
    let bound = |k: &KeyColumn| match (&k.collation, k.decimal, k.binary) {
        (Some((cs, co)), _, _) => format!("CONVERT(UNHEX(?) USING {cs}) COLLATE {co}"),
        (None, Some((p, s)), _) => format!("CAST(UNHEX(?) AS DECIMAL({p},{s}))"),
        (None, None, true) => "UNHEX(?)".to_string(),
        _ => "?".to_string(),
    };
    let column = |k: &KeyColumn| quote(&k.name);
    let mut params = Vec::new();
    let predicate = match after {
        None => String::new(),
        Some(after) => {
            if after.len() != key.len() {
                return Err(ReadError::Value(format!(
                    "the committed last key has {} values, the table's key {} columns",
                    after.len(),
                    key.len()
                )));
            }
            let values: Vec<Value> = after.iter().map(KeyValue::to_param).collect();
            let mut terms = Vec::new();
            for i in 0..key.len() {
                let mut parts = Vec::new();
                for (k, v) in key.iter().zip(&values).take(i) {
                    parts.push(format!("{} = {}", column(k), bound(k)));
                    params.push(v.clone());
                }
                parts.push(format!("{} > {}", column(&key[i]), bound(&key[i])));
                params.push(values[i].clone());
                terms.push(format!("({})", parts.join(" AND ")));
            }
            format!(" WHERE {}", terms.join(" OR "))
        }
    };
    let order = key
        .iter()
        .map(|k| quote(&k.name))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT {}, {read_back} FROM {}{predicate} ORDER BY {order} LIMIT {limit}",
        select_list(shape),
        quoted_table(shape),
    );
    Ok((sql, params))
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
