//! Dispatch of binlog events, one at a time in stream order: the events a
//! file begins with move the cursor, GTID and Query events open and end
//! transactions, TABLE_MAP events pick a decode plan, rows events fill the
//! table buffers, and DDL statements make new schema versions.

use std::sync::Arc;

use mysql_common::binlog::consts::EventType;
use mysql_common::binlog::events::{Event, ExecuteLoadQueryEvent, QueryEvent, TableMapEvent};
use tracing::{debug, info};

use super::{xa, Pipeline};
use crate::batch::{RowOrigin, TableBuffer};
use crate::decode::rows::{decode_rows, DecodeStats, RowsKind};
use crate::decode::{self, classify_query, event_type as et, QueryKind};
use crate::error::{Error, Result};
use crate::schema::tracker::StreamPoint;
use crate::source::BinlogPosition;

impl Pipeline<'_> {
    /// Handles one event; returns true at a transaction boundary.
    pub(super) async fn handle(&mut self, event: &Event, saw_fde: &mut bool) -> Result<bool> {
        let header = event.header();
        let end = header.log_pos() as u64;
        let start = end.saturating_sub(header.event_size() as u64);
        let ty = header.event_type_raw();
        // Artificial events (the opening rotate, heartbeats) sit nowhere.
        let real = end > 0 && ty != et::HEARTBEAT && ty != et::HEARTBEAT_V2;
        if real && !self.in_tx && self.snapshot.as_ref().is_some_and(|s| s.has_waiting()) {
            let here = BinlogPosition {
                file: self.file.clone(),
                pos: start,
            };
            self.place_chunks(&here).await?;
        }
        let boundary = self.handle_event(event, start, end, saw_fde).await?;
        if real {
            self.read_ts = header.timestamp();
            if self.idle {
                self.idle = false;
                self.metrics.set_idle(false);
            }
        } else if ty == et::HEARTBEAT || ty == et::HEARTBEAT_V2 {
            // The server has sent everything it has: the lag is nil once
            // everything read is committed.
            let idle = !self.in_tx && !self.dirty();
            if let Some(run) = self.snapshot.as_mut().filter(|_| !self.in_tx) {
                run.end_gone(&self.read_to);
            }
            if idle != self.idle {
                self.idle = idle;
                self.metrics.set_idle(idle);
            }
        }
        if real {
            if ty == et::ROTATE || self.read_to.file != self.file {
                // A new file; a stream resumed inside it (by GTID) reads
                // from the cursor on, whatever its header events say.
                let resumed = match self.cursor.file == self.file {
                    true => self.cursor.pos,
                    false => 4,
                };
                self.read_to = BinlogPosition {
                    file: self.file.clone(),
                    pos: if ty == et::ROTATE {
                        4
                    } else {
                        end.max(resumed)
                    },
                };
            } else if end > self.read_to.pos {
                self.read_to.pos = end;
            }
        }
        Ok(boundary)
    }

    async fn handle_event(
        &mut self,
        event: &Event,
        start: u64,
        end: u64,
        saw_fde: &mut bool,
    ) -> Result<bool> {
        let header = event.header();
        if header.event_type_raw() == et::TRANSACTION_PAYLOAD {
            // MySQL binlog transaction compression: the inner events have no
            // positions of their own; they all sit at the payload's.
            let inner =
                decode::payload::payload_events(event, self.settings.flush.max_buffer_bytes)
                    .map_err(|m| Error::decode(&self.file, start, m))?;
            let mut boundary = false;
            for e in inner {
                let e = e.map_err(|m| Error::decode(&self.file, start, m))?;
                boundary |= self.handle_at(&e, start, end, saw_fde).await?;
            }
            return Ok(boundary);
        }
        self.handle_at(event, start, end, saw_fde).await
    }

    /// Handles one event that spans `start..end` of the current file.
    async fn handle_at(
        &mut self,
        event: &Event,
        start: u64,
        end: u64,
        saw_fde: &mut bool,
    ) -> Result<bool> {
        let header = event.header();
        let ty = header.event_type_raw();
        let body = event.data();
        let at = |msg: String| Error::decode(&self.file, start, msg);
        match ty {
            et::ROTATE => {
                let mut name = body.get(8..).unwrap_or_default();
                if !*saw_fde && self.server.checksum && name.len() > 4 {
                    // The first fake rotate precedes the format description, so
                    // its checksum has not been stripped (notes: MariaDB facts).
                    name = &name[..name.len() - 4];
                }
                let pos = decode::values::le_uint(body.get(..8).unwrap_or_default());
                self.file = String::from_utf8_lossy(name).into_owned();
                // The rotate a stream begins with (log_pos 0) restates where
                // it starts; after a GTID start it says "file:4" although the
                // server skips to the GTID, so it moves the cursor only to
                // another file. A real rotate ends a file.
                let opening = end == 0;
                if !self.in_tx && (!opening || self.cursor.file != self.file) {
                    self.cursor.file = self.file.clone();
                    self.cursor.pos = pos;
                }
                debug!(file = %self.file, pos, "rotate");
                Ok(false)
            }
            et::FORMAT_DESCRIPTION => {
                *saw_fde = true;
                // The server version of the file's writer (bytes 2..52).
                if let Some(v) = body.get(2..52) {
                    let v = String::from_utf8_lossy(v);
                    self.tracker.set_server_version(v.trim_end_matches('\0'));
                }
                self.pass_file_header(end);
                Ok(false)
            }
            et::MARIADB_GTID => {
                let (gtid, standalone) = decode::mariadb_gtid(body, header.server_id())
                    .ok_or_else(|| at("GTID event too short".into()))?;
                self.in_tx = true;
                // MariaDB's GTID event takes the place of BEGIN; a standalone
                // one is a DDL statement that ends with itself.
                self.tx_open = !standalone;
                self.savepoints.begin(self.next_seq);
                self.tx_gtid = Some(gtid);
                const FL_PREPARED_XA: u8 = 0x40;
                if body.get(12).is_some_and(|f| f & FL_PREPARED_XA != 0) {
                    self.begin_xa()?;
                }
                Ok(false)
            }
            et::MYSQL_GTID => {
                self.in_tx = true;
                self.savepoints.begin(self.next_seq);
                self.tx_gtid = decode::mysql_gtid(body);
                Ok(false)
            }
            et::MYSQL_PREVIOUS_GTIDS if self.gtid_state.is_empty() => {
                // MySQL: the set executed before this file, where a
                // position-started lake learns its GTID state.
                let prev: mysql_common::binlog::events::PreviousGtidsEvent<'_> = event
                    .read_event()
                    .map_err(|e| at(format!("bad Previous_gtids event: {e}")))?;
                for sid in prev.sids() {
                    let uuid = mysql_common::uuid::Uuid::from_bytes(sid.uuid()).to_string();
                    let key = match sid.tag() {
                        Some(tag) => format!("{uuid}:{}", tag.as_str()),
                        None => uuid,
                    };
                    for iv in sid.intervals() {
                        // GnoInterval ends are exclusive.
                        self.gtid_state.add_range(&key, iv.start(), iv.end().saturating_sub(1));
                    }
                }
                self.pass_file_header(end);
                Ok(false)
            }
            et::MYSQL_PREVIOUS_GTIDS | et::MARIADB_GTID_LIST | et::MARIADB_BINLOG_CHECKPOINT => {
                self.pass_file_header(end);
                Ok(false)
            }
            et::QUERY => {
                let q: QueryEvent<'_> = event.read_event().map_err(|e| at(format!("bad Query event: {e}")))?;
                let statement = q.query();
                match classify_query(&statement) {
                    QueryKind::Begin => {
                        if !self.tx_open {
                            self.savepoints.begin(self.next_seq);
                        }
                        if xa::is_xa_start(&statement) {
                            self.begin_xa()?;
                        }
                        self.in_tx = true;
                        self.tx_open = true;
                        Ok(false)
                    }
                    QueryKind::Commit => {
                        if let Some(xa::XaOutcome::Commit { xid, one_phase }) =
                            xa::xa_outcome(&statement)
                        {
                            if one_phase {
                                self.commit_one_phase_xa().await?;
                            } else {
                                self.commit_xa(&xid).await?;
                            }
                        }
                        self.boundary(end)?;
                        Ok(true)
                    }
                    QueryKind::Rollback => {
                        // Logged only when a non-transactional table changed
                        // in the transaction: the rest of its rows are undone.
                        if !self.savepoints.rollback(self.next_seq).is_empty() {
                            self.take_back_rows().await?;
                        }
                        if let Some(xa::XaOutcome::Rollback { xid }) = xa::xa_outcome(&statement) {
                            if let Some(p) = self.prepared.remove(&xid) {
                                info!(%xid, "XA ROLLBACK: the prepared rows are dropped");
                                self.xa_done.extend(p.files.into_iter().map(|f| f.path));
                            }
                        }
                        self.boundary(end)?;
                        Ok(true)
                    }
                    QueryKind::Savepoint(name) => {
                        self.savepoints.set(&name, self.next_seq);
                        Ok(false)
                    }
                    QueryKind::RollbackTo(name) => {
                        let taken = self
                            .savepoints
                            .rollback_to(&name, self.next_seq)
                            .map_err(at)?;
                        if !taken.is_empty() {
                            debug!(savepoint = %name, rows = taken.end - taken.start, "rows taken back by ROLLBACK TO SAVEPOINT");
                            self.take_back_rows().await?;
                        }
                        Ok(false)
                    }
                    QueryKind::Other => {
                        decode::dml::refuse_captured(&statement, &q.schema(), self.settings.filter, &self.file, start)?;
                        let at = self.stream_point(start, header.timestamp());
                        let mut fx = self.tracker.apply_ddl(&statement, &q.schema(), ansi_quotes(&q), &at)?;
                        if fx.captured {
                            self.tx_ddl = true;
                            self.apply_ddl_effects(&mut fx, &at).await?;
                            let rereads = std::mem::take(&mut fx.rereads);
                            let entered = std::mem::take(&mut fx.entered);
                            let renamed = std::mem::take(&mut fx.renamed);
                            self.statement_end = Some(end);
                            let effects = async {
                                // Reads running before the statement first: a
                                // table entering capture starts one of its own.
                                self.follow_renames(&renamed, &at).await?;
                                self.tables_entered(entered, &at, &statement).await?;
                                self.reread_after_ddl(rereads, &at).await
                            }
                            .await;
                            self.statement_end = None;
                            effects?;
                        }
                        // Inside a transaction (SAVEPOINT, ROLLBACK TO
                        // SAVEPOINT, XA END, the CREATE TABLE of a CREATE
                        // TABLE … SELECT) a statement is no boundary: a
                        // checkpoint there would split the transaction.
                        if self.tx_open {
                            return Ok(false);
                        }
                        self.boundary(end)?;
                        Ok(true)
                    }
                }
            }
            et::EXECUTE_LOAD_QUERY => {
                let q: ExecuteLoadQueryEvent<'_> = event.read_event().map_err(|e| at(format!("bad Execute_load_query event: {e}")))?;
                decode::dml::refuse_captured(&q.query(), &q.schema(), self.settings.filter, &self.file, start)?;
                Ok(false)
            }
            et::MYSQL_ROWS_QUERY | et::MARIADB_ANNOTATE_ROWS => {
                let text = decode::statement_text(ty, body, self.settings.source.max_sql_bytes);
                self.tx_sql = Some(text);
                Ok(false)
            }
            et::XID => {
                self.boundary(end)?;
                Ok(true)
            }
            et::XA_PREPARE => {
                let xid = xa::prepare_xid(body)
                    .ok_or_else(|| at("XA_PREPARE event too short for its xid".into()))?;
                self.prepare_xa(xid).await?;
                self.boundary(end)?;
                Ok(true)
            }
            et::TABLE_MAP => {
                // MariaDB's compressed columns have types mysql_common does not know.
                let id_len = match event.fde().get_event_type_header_length(EventType::TABLE_MAP_EVENT) {
                    6 => 4,
                    _ => 6,
                };
                let plain = decode::compressed::plain_table_map(body, id_len).map_err(|e| at(format!("bad TABLE_MAP: {e}")))?;
                let (tme, compressed): (TableMapEvent<'_>, &[usize]) = match &plain {
                    None => (event.read_event().map_err(|e| at(format!("bad TABLE_MAP: {e}")))?, &[][..]),
                    Some(plain) => (
                        decode::compressed::read_table_map(event.fde(), &plain.body).map_err(|e| at(format!("bad TABLE_MAP: {e}")))?,
                        plain.compressed.as_slice(),
                    ),
                };
                let point = self.stream_point(start, header.timestamp());
                let plan = self.tracker.plan_for(&tme, compressed, &point)?;
                self.plans.insert(tme.table_id(), plan);
                Ok(false)
            }
            et::WRITE_ROWS_V1 | et::UPDATE_ROWS_V1 | et::DELETE_ROWS_V1 | et::WRITE_ROWS_V2 | et::UPDATE_ROWS_V2
            | et::DELETE_ROWS_V2 | et::PARTIAL_UPDATE_ROWS => {
                self.close_outdated_buffer(body).await?;
                self.rows_event(ty, body, start, header.timestamp())?;
                self.apply_memory_limits().await?;
                Ok(false)
            }
            t if (et::MARIADB_COMPRESSED_FIRST..=et::MARIADB_COMPRESSED_LAST).contains(&t) => Err(at(
                "compressed binlog events (log_bin_compress=ON) are not supported; set log_bin_compress=OFF on the source".into(),
            )),
            _ => Ok(false),
        }
    }

    /// The events a binlog file begins with (format description, GTID list,
    /// binlog checkpoint, previous GTIDs) hold no rows: reading may resume
    /// after them, so the cursor moves over them. Without this, a file that
    /// holds nothing else (the server restarted, or flushed its logs, and
    /// nothing was written since) would leave the cursor at its position 4
    /// while the head is past them, and `--until-caught-up` would never end.
    fn pass_file_header(&mut self, end: u64) {
        if !self.in_tx && self.cursor.file == self.file && end > self.cursor.pos {
            self.cursor.pos = end;
        }
    }

    /// One Parquet file never mixes schema versions: when the rows event's
    /// table has a newer version than its open buffer, the buffer is written out.
    async fn close_outdated_buffer(&mut self, body: &[u8]) -> Result<()> {
        let table_id = decode::values::le_uint(body.get(..6).unwrap_or_default());
        let Some(Some(plan)) = self.plans.get(&table_id) else {
            return Ok(());
        };
        let name = plan.schema.qualified_name();
        if self
            .buffers
            .get(&name)
            .is_some_and(|b| !Arc::ptr_eq(&b.table, &plan.schema))
        {
            self.flush_table(&name).await?;
            self.buffers.remove(&name);
        }
        Ok(())
    }

    fn rows_event(&mut self, ty: u8, body: &[u8], start: u64, timestamp: u32) -> Result<()> {
        let table_id = decode::values::le_uint(body.get(..6).unwrap_or_default());
        let plan = match self.plans.get(&table_id) {
            Some(Some(plan)) => Arc::clone(plan),
            Some(None) => return Ok(()),
            None => {
                return Err(Error::decode(
                    &self.file,
                    start,
                    format!("rows event for table id {table_id} without a TABLE_MAP"),
                ))
            }
        };
        let Some((kind, post_header)) = RowsKind::of_event_type(ty) else {
            return Err(Error::decode(
                &self.file,
                start,
                format!("event type {ty} is not a rows event"),
            ));
        };
        let name = plan.schema.qualified_name();
        let first_seq = self.next_seq;
        let buffer = self
            .buffers
            .entry(name.clone())
            .or_insert_with(|| TableBuffer::new(Arc::clone(&plan.schema)));
        let origin = RowOrigin {
            tx_seq: self.next_tx_seq,
            file: &self.file,
            pos: start,
            gtid: self.tx_gtid.as_deref(),
            timestamp,
            sql: self.tx_sql.as_ref(),
        };
        let rows = decode_rows(
            &plan,
            kind,
            body,
            post_header,
            buffer,
            &origin,
            &mut self.next_seq,
            &mut self.stats,
        )
        .map_err(|e| Error::decode(&self.file, start, format!("{name}: {e}")))?;
        self.tx_rows += rows as u64;
        // Rows of a prepared XA transaction are noted from its held files
        // when it commits (`copy_held_file`): its prepare may fall before a
        // window and its commit inside, or its rollback after.
        let watched = self.snapshot.as_ref().is_some_and(|r| r.watches(&name));
        if watched && !self.xa_active {
            // A chunk's watermark window is open on the table: its rows
            // whose key changes here are left to the stream, once the
            // transaction commits (`boundary`).
            let mut changed = TableBuffer::new(Arc::clone(&plan.schema));
            let origin = RowOrigin {
                tx_seq: 0,
                file: &self.file,
                pos: start,
                gtid: None,
                timestamp,
                sql: None,
            };
            let mut seq = first_seq;
            decode_rows(
                &plan,
                kind,
                body,
                post_header,
                &mut changed,
                &origin,
                &mut seq,
                &mut DecodeStats::default(),
            )
            .map_err(|e| Error::decode(&self.file, start, format!("{name}: {e}")))?;
            let column_key = self.settings.columns.key.as_ref();
            self.window_notes
                .push((name, plan.schema.version, changed.finish(column_key)?));
        }
        Ok(())
    }

    /// Where the stream is, for schema versions taking effect here.
    fn stream_point(&self, start: u64, timestamp: u32) -> StreamPoint {
        StreamPoint {
            position: BinlogPosition {
                file: self.file.clone(),
                pos: start,
            },
            gtid: self.tx_gtid.clone(),
            timestamp,
            tx_seq: self.next_tx_seq,
            checkpoint: self.next_manifest_seq(),
        }
    }

    /// A DDL statement changed captured tables: `truncate` markers for
    /// TRUNCATE/DROP, then the affected buffers are written out so that no
    /// file mixes two schema versions. Takes the markers and the closed
    /// tables of `fx`; its renames, entries and re-reads stay for the
    /// snapshot's follow-up.
    async fn apply_ddl_effects(
        &mut self,
        fx: &mut crate::schema::tracker::DdlEffects,
        at: &StreamPoint,
    ) -> Result<()> {
        let markers = std::mem::take(&mut fx.markers);
        let closed = std::mem::take(&mut fx.closed);
        if let Some(run) = self.snapshot.as_mut() {
            for name in markers.iter().map(|s| s.qualified_name()) {
                run.table_changed(&name, &at.position);
            }
            for name in &closed {
                run.table_changed(name, &at.position);
                // A table the reader found gone ends here, unless the
                // statement renamed it: its read restarts under the new
                // name (`follow_renames`).
                if !fx.renamed.iter().any(|(from, _)| from == name) {
                    run.end_if_gone(name);
                }
            }
            // Renamed tables, and tables read again, have their keys read
            // again too (a snapshot window needs no more than the above).
            let renamed = fx.renamed.iter().flat_map(|(from, to)| [from, to]);
            let entered = fx.entered.iter().map(|t| format!("{}.{}", t.0, t.1));
            let reread = fx.rereads.iter().map(|(t, _)| t.clone());
            for name in renamed.cloned().chain(entered).chain(reread) {
                run.note_key_change(&name, &at.position);
            }
        }
        for shape in markers {
            let name = shape.qualified_name();
            let needs_new = self
                .buffers
                .get(&name)
                .is_none_or(|b| !Arc::ptr_eq(&b.table, &shape));
            if needs_new {
                self.flush_table(&name).await?;
                self.buffers
                    .insert(name.clone(), TableBuffer::new(Arc::clone(&shape)));
            }
            let origin = RowOrigin {
                tx_seq: at.tx_seq,
                file: &self.file,
                pos: at.position.pos,
                gtid: at.gtid.as_deref(),
                timestamp: at.timestamp,
                sql: None,
            };
            if let Some(b) = self.buffers.get_mut(&name) {
                b.push_marker(self.next_seq, &origin);
                self.next_seq += 1;
            }
        }
        for name in closed {
            self.flush_table(&name).await?;
            self.buffers.remove(&name);
        }
        Ok(())
    }
}

/// Whether the session that ran a Query event had `ANSI_QUOTES` in its
/// `sql_mode` (double quotes then quote names, not strings). The status
/// variable is absent from events of servers that do not write it: the
/// default `sql_mode`, without it.
fn ansi_quotes(q: &QueryEvent<'_>) -> bool {
    use mysql_common::binlog::consts::StatusVarKey;
    use mysql_common::binlog::events::StatusVarVal;
    use mysql_common::constants::SqlMode;
    q.status_vars()
        .get_status_var(StatusVarKey::SqlMode)
        .and_then(|v| match v.get_value() {
            Ok(StatusVarVal::SqlMode(mode)) => Some(mode.get().contains(SqlMode::MODE_ANSI_QUOTES)),
            _ => None,
        })
        .unwrap_or(false)
}
