//! DDL whose effect on existing rows sluice cannot replay (DESIGN.md "DDL
//! whose effect sluice cannot replay is re-read from the source"): a type
//! conversion, NOT NULL, a column added with values, another row key. The
//! binlog carries no rows for what the statement did to the rows the table
//! had, so with `[snapshot] after_ddl = "reread"` the table's rows restart:
//! a `truncate` marker at the statement's position, then a snapshot of the
//! table whose chunks the stream places after the statement, exactly as
//! `sluice snapshot --replace` does. Replay and the current table then hold
//! the server's own values, never a cast of the old ones.
//!
//! The marker and the snapshot's state commit together with the statement
//! (one checkpoint follows it), so a crash before that checkpoint reads the
//! statement again and starts over, and one after it resumes the snapshot
//! from its committed last key.

use std::sync::Arc;

use tracing::{info, warn};

use super::requests::{Adoption, RequestState};
use super::Pipeline;
use crate::batch::{RowOrigin, TableBuffer};
use crate::config::AfterDdl;
use crate::error::{Error, Result};
use crate::schema::reread::RereadReason;
use crate::schema::tracker::StreamPoint;
use crate::snapshot::{reader, SnapshotProgress, TableSnapshot};

use super::snapshot::SnapshotRun;

impl Pipeline<'_> {
    /// Called right after the statement at `at` changed the tables in
    /// `rereads` (their buffers are written out already).
    pub(super) async fn reread_after_ddl(
        &mut self,
        rereads: Vec<(String, RereadReason)>,
        at: &StreamPoint,
    ) -> Result<()> {
        if rereads.is_empty() {
            return Ok(());
        }
        if self.settings.snapshot.after_ddl == AfterDdl::Never {
            for (table, why) in &rereads {
                warn!(%table, at = %at.position, %why, "the server changed existing rows in a way the binlog does not carry; the lake keeps the values from before the statement (snapshot.after_ddl = \"never\"); `sluice snapshot --replace` re-reads the table");
            }
            return Ok(());
        }
        if !RequestState::enabled(self.settings.source) {
            for (table, why) in &rereads {
                warn!(%table, at = %at.position, %why, "the server changed existing rows in a way the binlog does not carry, and offline replay has no server to re-read the table from; the lake keeps the values from before the statement");
            }
            return Ok(());
        }
        let mut adoptions = Vec::new();
        for (table, why) in rereads {
            let Some((db, name)) = table.split_once('.') else {
                continue;
            };
            let pair = [(db.to_string(), name.to_string())];
            // The replay of a table without a key is a multiset: a re-read
            // placed after rows that the stream carries after the statement
            // would count them twice, so such a table keeps its old values.
            let keyed = self
                .tracker
                .current_shape(&pair[0])
                .is_some_and(|shape| !shape.fold_key().is_empty());
            if !keyed {
                warn!(%table, at = %at.position, %why, "the server changed existing rows in a way the binlog does not carry, and the table has no primary key or NOT NULL unique key to re-read it by: the lake keeps the values from before the statement; `sluice snapshot --replace` re-reads it");
                continue;
            }
            let plan = match reader::plan(
                self.settings.source,
                self.settings.snapshot.method,
                &pair,
            )
            .await
            {
                Ok(plan) => plan,
                // The table cannot be read consistently (no
                // transactions, no key under the watermark method).
                Err(e @ Error::Snapshot { .. }) => {
                    warn!(%table, at = %at.position, %why, kind = %crate::error::HasKind::error_kind(&e), error = %e, "the server changed existing rows in a way the binlog does not carry, and the table cannot be re-read: the lake keeps the values from before the statement");
                    continue;
                }
                // Retried from the last checkpoint, which reads the
                // statement again.
                Err(e) => {
                    return Err(Error::Connection(format!(
                        "planning the re-read of {table} after the DDL at {}: {e}",
                        at.position
                    )))
                }
            };
            let Some(entry) = plan.get(&table).cloned() else {
                // Gone from the server since: a later RENAME, not yet
                // streamed, moved it (the re-read follows it there) or a
                // DROP ended it.
                info!(%table, at = %at.position, %why, "the table changed by this DDL no longer has this name on the server: its re-read waits for the stream to reach the RENAME or DROP that took the name");
                let spawn = self.spawn_args();
                self.snapshot
                    .get_or_insert_with(|| SnapshotRun::start(SnapshotProgress::new(), spawn))
                    .progress
                    .insert(table, TableSnapshot::awaiting());
                continue;
            };
            let sql: Arc<str> = Arc::from(format!(
                "-- sluice: {why}; the table is re-read from the source"
            ));
            if matches!(why, RereadReason::Renamed { .. }) {
                // After the statement, under the name it gave the table, in
                // its event group (its GTID, as every streamed row has).
                self.push_restart_marker(&table, &sql, at.gtid.as_deref())?;
            } else {
                self.push_ddl_marker(&table, at, &sql).await?;
            }
            info!(%table, at = %at.position, %why, "the table is re-read after a DDL statement the binlog cannot replay");
            adoptions.push(Adoption::after_ddl(table, entry, sql));
        }
        if adoptions.is_empty() {
            return Ok(());
        }
        self.tracker.mark_reread();
        // Chunks already placed get their rows first: the new reader starts
        // after them.
        self.await_reserved_chunks().await?;
        self.apply_adoptions(&adoptions)
    }

    /// Called right after the statement at `at` renamed captured tables: a
    /// table whose snapshot or re-read is not complete restarts under its
    /// new name. The reader reads by name, and from this statement on the
    /// old name on the server is not this table (it may be no table, or
    /// another one: a swap), so its rows restart under the new name: a
    /// marker here, then a re-read of the new name. A re-read waiting for
    /// its name ([`TableSnapshot::awaiting`]) finds it here; one whose table
    /// the statement dropped ends.
    pub(super) async fn follow_renames(
        &mut self,
        renamed: &[(String, String)],
        at: &StreamPoint,
    ) -> Result<()> {
        let Some(run) = self.snapshot.as_mut() else {
            return Ok(());
        };
        // Followed through the statement's pairs (`a TO t, b TO a, t TO b`).
        let mut moved: Vec<(String, RereadReason)> = Vec::new();
        for (from, to) in renamed {
            if let Some((m, _)) = moved.iter_mut().find(|(m, _)| m == from) {
                *m = to.clone();
            } else if let Some(t) = run.progress.get_mut(from).filter(|t| !t.done()) {
                run.gone.remove(from);
                super::snapshot::finish_table(t);
                let why = RereadReason::Renamed { from: from.clone() };
                moved.push((to.clone(), why));
            }
        }
        // Renamed out of capture: the rows leave the lake with the name.
        moved.retain(|(to, _)| {
            to.split_once('.').is_some_and(|(db, name)| {
                self.tracker.captures(&(db.to_string(), name.to_string()))
            })
        });
        // A waiting re-read whose table is gone (dropped) ends.
        for (table, t) in run.progress.iter_mut() {
            if t.awaiting && !t.done() {
                let gone = table.split_once('.').is_none_or(|(db, name)| {
                    !self.tracker.captures(&(db.to_string(), name.to_string()))
                        || self
                            .tracker
                            .current_shape(&(db.to_string(), name.to_string()))
                            .is_none()
                });
                if gone {
                    super::snapshot::finish_table(t);
                }
            }
        }
        self.reread_after_ddl(moved, at).await
    }

    /// A `truncate` marker for `table` in its new shape, at the statement's
    /// position and in its transaction: every earlier row of the table is
    /// gone, and the re-read's chunks come after it.
    async fn push_ddl_marker(
        &mut self,
        table: &str,
        at: &StreamPoint,
        sql: &Arc<str>,
    ) -> Result<()> {
        let Some((db, name)) = table.split_once('.') else {
            return Ok(());
        };
        let Some(shape) = self.tracker.shape(&(db.to_string(), name.to_string()))? else {
            return Ok(());
        };
        let stale = self
            .buffers
            .get(table)
            .is_some_and(|b| !Arc::ptr_eq(&b.table, &shape));
        if stale {
            self.flush_table(table).await?;
            self.buffers.remove(table);
        }
        let buffer = self
            .buffers
            .entry(table.to_string())
            .or_insert_with(|| TableBuffer::new(Arc::clone(&shape)));
        let origin = RowOrigin {
            tx_seq: at.tx_seq,
            file: &self.file,
            pos: at.position.pos,
            gtid: at.gtid.as_deref(),
            timestamp: at.timestamp,
            sql: Some(sql),
        };
        buffer.push_marker(self.next_seq, &origin);
        self.next_seq += 1;
        Ok(())
    }
}
