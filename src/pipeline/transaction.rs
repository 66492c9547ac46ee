//! Transaction boundaries and what comes with them: the cursor moves at a
//! boundary, a logged ROLLBACK or ROLLBACK TO SAVEPOINT takes rows back, and
//! the rows of a prepared XA transaction are held until its outcome (see
//! [`super::xa`]).

use object_store::ObjectStoreExt;
use tracing::{info, warn};

use super::{xa, Pipeline};
use crate::batch::savepoint::seq_range;
use crate::commit::{self, Cursor, DataFile, PreparedXa};
use crate::error::{Error, Result};
use crate::http::metrics::op_counts;
use crate::sink;
use crate::source;

impl Pipeline<'_> {
    /// The end of a transaction (XID, COMMIT, or a DDL statement).
    pub(super) fn boundary(&mut self, end: u64) -> Result<()> {
        for (table, version, rows) in std::mem::take(&mut self.window_notes) {
            let rows = self.savepoints.keep(&table, rows)?;
            if let Some(run) = self.snapshot.as_mut() {
                run.note_changed_rows(&table, version, &rows)?;
            }
        }
        self.in_tx = false;
        self.tx_open = false;
        self.savepoints.end_transaction();
        if self.tx_rows > 0 || self.tx_ddl {
            self.next_tx_seq += 1;
        }
        self.tx_ddl = false;
        self.tx_sql = None;
        self.tx_rows = 0;
        if let Some(gtid) = self.tx_gtid.take() {
            self.gtid_state.add(&gtid);
        }
        self.cursor = Cursor {
            file: self.file.clone(),
            pos: end,
            gtid: (!self.gtid_state.is_empty()).then(|| self.gtid_state.to_string()),
            next_seq: self.next_seq,
            next_tx_seq: self.next_tx_seq,
        };
        Ok(())
    }

    /// A logged ROLLBACK or ROLLBACK TO SAVEPOINT took rows back. The server
    /// undoes them only in transactional tables, so their engines are asked
    /// first (offline replay has no server to ask: every table counts as
    /// transactional there). Rows may already be in pending files (a buffer
    /// written out under memory pressure): those files are written again
    /// without them, under new names, and the old ones deleted. Rows still
    /// in buffers are left out when the buffers are written.
    pub(super) async fn take_back_rows(&mut self) -> Result<()> {
        if self.settings.source.binlog_dir.is_none() {
            let mut conn = source::connect(self.settings.source).await?;
            let kept: Vec<(String, String)> = mysql_async::prelude::Queryable::query(
                &mut conn,
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME FROM information_schema.TABLES t \
                 JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE \
                 WHERE e.TRANSACTIONS <> 'YES' \
                 AND t.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
            )
            .await
            .map_err(|e| Error::Connection(format!("reading the tables' engines: {e}")))?;
            drop(conn);
            self.savepoints
                .keep_tables(kept.into_iter().map(|(db, t)| format!("{db}.{t}")));
        } else {
            warn!("a logged rollback took rows back in offline replay: every table counts as transactional");
        }
        self.close_open_files()?;
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        for i in 0..self.pending.len() {
            let old = self.pending[i].path.clone();
            let table_name = self.pending[i].table.clone();
            let Some(seqs) = self.file_seqs.get(&old).cloned() else {
                continue;
            };
            if !self.savepoints.overlaps(&table_name, &seqs) {
                continue;
            }
            let old_path = crate::commit::stored_path(&old);
            let bytes = self.lake.store.get(&old_path).await?.bytes().await?;
            let batch = self
                .savepoints
                .keep(&table_name, sink::decode_parquet(bytes)?)?;
            let (db, table) = self.pending[i]
                .table
                .split_once('.')
                .ok_or_else(|| Error::Lake(format!("pending file {old} of an unnamed table")))?;
            let path = commit::data_file_path(
                db,
                table,
                self.next_manifest_seq(),
                self.file_counter,
                &self.writer_id,
            );
            self.file_counter += 1;
            let rows = batch.num_rows() as u64;
            let bytes = if rows > 0 {
                let encoded = sink::encode_parquet(&batch)?;
                sink::put_file(
                    self.lake.store.as_ref(),
                    &path,
                    encoded,
                    self.settings.multipart_threshold,
                )
                .await?
            } else {
                0
            };
            self.file_seqs.remove(&old);
            self.file_seqs.insert(path.to_string(), seq_range(&batch));
            let file = &mut self.pending[i];
            file.path = path.to_string();
            file.rows = rows;
            file.bytes = bytes;
            self.lake.store.delete(&old_path).await?;
        }
        self.pending.retain(|f| f.rows > 0);
        Ok(())
    }

    /// The prepared part of an XA transaction begins: what the buffers hold
    /// belongs to earlier transactions and goes off as pending files; what
    /// is written from here to the XA_PREPARE is held.
    pub(super) fn begin_xa(&mut self) -> Result<()> {
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
        }
        self.xa_active = true;
        self.xa_files.clear();
        Ok(())
    }

    /// XA_PREPARE: the transaction's rows go to held files, listed under its
    /// xid by every manifest until its outcome. Its rows consume no
    /// `_tx_seq` here; they get one at XA COMMIT.
    pub(super) async fn prepare_xa(&mut self, xid: String) -> Result<()> {
        if !self.xa_active {
            warn!(%xid, at = %self.position(), "XA_PREPARE outside an XA transaction");
            return Ok(());
        }
        let names: Vec<String> = self.buffers.keys().cloned().collect();
        for name in names {
            self.start_flush(&name)?;
        }
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        self.xa_active = false;
        self.tx_rows = 0;
        let files = std::mem::take(&mut self.xa_files);
        if !files.is_empty() {
            info!(%xid, files = files.len(), "XA PREPARE: rows held until XA COMMIT");
            self.prepared.insert(
                xid.clone(),
                PreparedXa {
                    xid,
                    gtid: self.tx_gtid.clone(),
                    files,
                },
            );
        }
        Ok(())
    }

    /// XA COMMIT of a prepared transaction: its held rows enter the stream
    /// here, with `_seq` and `_tx_seq` of this point.
    pub(super) async fn commit_xa(&mut self, xid: &str) -> Result<()> {
        let Some(p) = self.prepared.remove(xid) else {
            if self.xa_active {
                // MySQL: XA COMMIT of a transaction in hand that was never prepared.
                return self.commit_one_phase_xa().await;
            }
            warn!(%xid, at = %self.position(), "XA COMMIT of a transaction prepared before the lake's start position: its rows are not in the lake");
            return Ok(());
        };
        for file in p.files {
            let tx_seq = self.next_tx_seq;
            let first = self.next_seq;
            let copied = self.copy_held_file(&file, Some((first, tx_seq))).await?;
            self.next_seq += copied.rows as i64;
            self.tx_rows += copied.rows;
            self.pending.push(copied);
            self.xa_done.push(file.path);
        }
        Ok(())
    }

    /// MySQL's `XA COMMIT … ONE PHASE` ends an XA transaction that was never
    /// prepared: an ordinary transaction. Rows written out while it ran were
    /// held; they move to the table folders as they are (their `_seq` is
    /// already in order).
    pub(super) async fn commit_one_phase_xa(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.finish_oldest_flush().await?;
        }
        self.xa_active = false;
        for file in std::mem::take(&mut self.xa_files) {
            let copied = self.copy_held_file(&file, None).await?;
            self.pending.push(copied);
            self.xa_done.push(file.path);
        }
        Ok(())
    }

    /// Copies a held file into its table's folder as a pending data file,
    /// optionally with new `_seq` (from `first`) and `_tx_seq`.
    async fn copy_held_file(
        &mut self,
        file: &DataFile,
        resequence: Option<(i64, i64)>,
    ) -> Result<DataFile> {
        let held = crate::commit::stored_path(&file.path);
        let bytes = self.lake.store.get(&held).await?.bytes().await?;
        let mut batch = sink::decode_parquet(bytes)?;
        if let Some((first, tx_seq)) = resequence {
            batch = xa::resequence(&batch, first, tx_seq)?;
        }
        // The rows commit here: a watermark window open on the table leaves
        // their keys to the stream (rows held while prepared were not noted).
        if let Some(run) = self.snapshot.as_mut().filter(|r| r.watches(&file.table)) {
            run.note_changed_rows(&file.table, file.schema_version, &batch)?;
        }
        let (db, table) = file
            .table
            .split_once('.')
            .ok_or_else(|| Error::Lake(format!("held file {} of an unnamed table", file.path)))?;
        let path = commit::data_file_path(
            db,
            table,
            self.next_manifest_seq(),
            self.file_counter,
            &self.writer_id,
        );
        self.file_counter += 1;
        self.file_seqs.insert(path.to_string(), seq_range(&batch));
        self.file_ops.insert(path.to_string(), op_counts(&batch));
        let encoded = sink::encode_parquet(&batch)?;
        let size = sink::put_file(
            self.lake.store.as_ref(),
            &path,
            encoded,
            self.settings.multipart_threshold,
        )
        .await?;
        Ok(DataFile {
            table: file.table.clone(),
            path: path.to_string(),
            rows: batch.num_rows() as u64,
            bytes: size,
            schema_version: file.schema_version,
        })
    }
}
