//! Snapshots that start after the lake began: tables a widened filter adds
//! (`[snapshot] new_tables`) and `sluice snapshot` requests
//! (`crate::snapshot::request`). Both become *adoptions*: a table's snapshot
//! state restarts (with a `truncate` marker first when its earlier rows must
//! go), and the reader reads it beside the stream with the same chunks as
//! the initial snapshot.
//!
//! Which tables are new: each manifest records the `[filter]` it was
//! captured under. At start, a captured table that exists on the server and
//! that the newest manifest's filter left out has entered capture now. A
//! table created later needs nothing: its `CREATE TABLE` and every row are
//! in the stream. (A lake whose manifests predate the recorded filter falls
//! back to the schema history: a table it never knew is new.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use super::snapshot::{SnapshotRun, SpawnArgs};
use super::Pipeline;
use crate::batch::{RowOrigin, TableBuffer};
use crate::commit::Manifest;
use crate::config::{NewTables, SnapshotConfig, SourceConfig, TableFilter};
use crate::error::{Error, Result};
use crate::schema::tracker::{SchemaTracker, StreamPoint};
use crate::schema::TableSchema;
use crate::snapshot::request::{self, SnapshotRequest};
use crate::snapshot::{reader, SnapshotProgress, TableSnapshot};

/// Test hook: `SLUICE_CRASH_AT=after-request-commit` kills the process
/// (SIGKILL, as `kill -9` would) right after the manifest that adopts a
/// request commits, before the request object is deleted.
///
/// `SLUICE_CRASH_AT=rewind-after-adoption` fails the stream once with a
/// transient error right after a request is adopted, so the run rewinds to
/// the last committed manifest before the adoption commits.
const CRASH_ENV: &str = "SLUICE_CRASH_AT";

/// The rewind hook fires once per process.
static REWOUND_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One table whose snapshot (re)starts.
#[derive(Debug, Clone)]
pub(super) struct Adoption {
    table: String,
    /// Its fresh state (the server's row estimate, the request's id).
    entry: TableSnapshot,
    /// Earlier rows of the table in the lake must go: a `truncate` marker
    /// precedes the new snapshot's first chunk.
    marker: bool,
    /// A request's snapshot of a table already being read starts over only
    /// with `--replace`.
    replace: bool,
    /// The marker's `_sql`: why the rows restart.
    why: Arc<str>,
}

impl Adoption {
    /// A table whose rows restart after a DDL statement: its `truncate`
    /// marker is already at the statement's position (see `reread`).
    pub(super) fn after_ddl(table: String, entry: TableSnapshot, why: Arc<str>) -> Self {
        Adoption {
            table,
            entry,
            marker: false,
            replace: true,
            why,
        }
    }
}

/// Adoptions not yet committed, and the requests' objects to delete.
#[derive(Debug, Default)]
pub(super) struct RequestState {
    /// The tables a widened filter added at start: applied again after a
    /// rewind until a manifest commits them.
    widened: Vec<Adoption>,
    /// Requests adopted since the last commit.
    adopted: BTreeSet<String>,
    /// Requests a committed manifest adopted whose object could not be
    /// deleted yet.
    carried: BTreeSet<String>,
    last_listed: Option<Instant>,
    /// `sluice forget` records not yet noted by a committed manifest, by id
    /// (`super::erasures`).
    pub(super) erasures: std::collections::BTreeMap<String, serde_json::Value>,
}

impl RequestState {
    /// Requests are read only where the reader can read: a server to read
    /// tables from, not offline replay.
    pub(super) fn enabled(source: &SourceConfig) -> bool {
        source.binlog_dir.is_none()
    }

    /// The ids the next manifest records in `snapshot_requests`.
    pub fn to_commit(&self) -> Vec<String> {
        self.adopted.union(&self.carried).cloned().collect()
    }

    /// An adoption waits for a manifest.
    pub fn uncommitted(&self) -> bool {
        !self.adopted.is_empty()
    }

    /// A retry from the last checkpoint: adoptions of requests are forgotten
    /// (their objects are still in the lake and are adopted again).
    pub fn rewound(&mut self) {
        self.adopted.clear();
        self.last_listed = None;
    }
}

/// The captured tables that exist now and that the lake did not capture
/// before: the newest manifest's filter left them out (or, for a lake whose
/// manifests do not record it, the schema history never knew them). Empty
/// for a new lake: the initial snapshot covers it.
pub(super) fn widened_tables(
    committed: Option<&Manifest>,
    existing: impl Iterator<Item = (String, String)>,
    tracker: &SchemaTracker,
) -> Result<Vec<(String, String, bool)>> {
    let Some(m) = committed else {
        return Ok(Vec::new());
    };
    let before = match &m.filter {
        Some(p) => Some(TableFilter::new(&p.include, &p.exclude).map_err(|e| {
            Error::Lake(format!(
                "manifest {} records a filter this sluice cannot compile: {e}",
                m.seq
            ))
        })?),
        None => None,
    };
    let mut out = Vec::new();
    for (db, name) in existing {
        if before.as_ref().is_some_and(|f| f.captures(&db, &name)) {
            continue;
        }
        let known = !tracker.history().versions(&db, &name)?.is_empty();
        if before.is_some() || !known {
            out.push((db, name, known));
        }
    }
    Ok(out)
}

/// Plans the snapshots of tables that a widened filter added, as
/// `[snapshot] new_tables` says.
pub(super) async fn plan_widened(
    source: &SourceConfig,
    snapshot: &SnapshotConfig,
    widened: Vec<(String, String, bool)>,
) -> Result<Vec<Adoption>> {
    if widened.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = widened
        .iter()
        .map(|(db, t, _)| format!("{db}.{t}"))
        .collect();
    if snapshot.new_tables == NewTables::Skip || !RequestState::enabled(source) {
        info!(tables = %names.join(", "), "tables entered capture: captured from the stream on (new_tables = \"skip\")");
        return Ok(Vec::new());
    }
    info!(tables = %names.join(", "), "tables entered capture: their rows are read beside the stream (new_tables = \"snapshot\")");
    let pairs: Vec<(String, String)> = widened
        .iter()
        .map(|(db, t, _)| (db.clone(), t.clone()))
        .collect();
    let plan = reader::plan(source, snapshot.method, &pairs).await?;
    Ok(widened
        .into_iter()
        .filter_map(|(db, t, known)| {
            let table = format!("{db}.{t}");
            let entry = plan.get(&table)?.clone();
            Some(Adoption {
                table,
                entry,
                // Rows from an earlier time it was captured are stale.
                marker: known,
                replace: true,
                why: Arc::from("-- sluice: the table entered capture again; its rows restart from a new snapshot"),
            })
        })
        .collect())
}

impl Pipeline<'_> {
    /// At start, before the stream: the widened filter's tables, then the
    /// requests written while sluice was stopped.
    pub(super) async fn start_snapshot_work(&mut self, widened: Vec<Adoption>) -> Result<()> {
        self.apply_adoptions(&widened)?;
        self.requests.widened = widened;
        self.adopt_requests().await
    }

    /// Time to look for new requests (every `[flush] interval`).
    pub(super) fn requests_due(&self) -> bool {
        RequestState::enabled(self.settings.source)
            && self
                .requests
                .last_listed
                .is_none_or(|t| t.elapsed() >= self.settings.flush.interval)
    }

    /// Lists the lake's requests and adopts those no manifest has. Only
    /// called between transactions.
    pub(super) async fn adopt_requests(&mut self) -> Result<()> {
        if !RequestState::enabled(self.settings.source) {
            return Ok(());
        }
        self.requests.last_listed = Some(Instant::now());
        self.note_erasures().await;
        // The stream does not depend on requests: a store that fails to
        // list them is asked again at the next interval.
        let listed = match request::list(self.lake.store.as_ref()).await {
            Ok(listed) => listed,
            Err(e) => {
                warn!(kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not list snapshot requests; trying again in [flush] interval");
                return Ok(());
            }
        };
        if listed.is_empty() {
            return Ok(());
        }
        let committed: BTreeSet<String> = self
            .committed
            .iter()
            .flat_map(|m| m.snapshot_requests.iter().cloned())
            .collect();
        let mut adoptions = Vec::new();
        let mut adopted = Vec::new();
        for (id, parsed) in listed {
            if committed.contains(&id) {
                // Adopted by a committed manifest; its delete did not happen.
                if let Err(e) = request::delete(self.lake.store.as_ref(), &id).await {
                    warn!(request = %id, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not delete an adopted snapshot request; trying again after the next commit");
                    self.requests.carried.insert(id);
                }
                continue;
            }
            if self.requests.adopted.contains(&id) {
                continue;
            }
            match parsed {
                Ok(req) => adoptions.extend(self.plan_request(&id, &req).await?),
                Err(why) => {
                    warn!(request = %id, %why, "an object under _sluice/requests/ is not a snapshot request: ignored, and deleted with the next commit")
                }
            }
            adopted.push(id);
        }
        if adoptions.is_empty() && adopted.is_empty() {
            return Ok(());
        }
        // Chunks already placed get their rows first: the markers and the
        // new reader come after them.
        self.await_reserved_chunks().await?;
        self.apply_adoptions(&adoptions)?;
        self.requests.adopted.extend(adopted);
        if self.streamed
            && std::env::var(CRASH_ENV).as_deref() == Ok("rewind-after-adoption")
            && !REWOUND_ONCE.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            // Tests: a transient error between the adoption and the
            // checkpoint that would commit it.
            return Err(Error::Connection(format!(
                "{CRASH_ENV}: a transient error after adopting a request (test hook)"
            )));
        }
        Ok(())
    }

    /// The adoptions of one request: its tables that are captured and exist.
    async fn plan_request(&mut self, id: &str, req: &SnapshotRequest) -> Result<Vec<Adoption>> {
        info!(request = %id, tables = %req.tables.join(", "), replace = req.replace, requested_at = %req.requested_at, "snapshot request adopted");
        let mut out = Vec::new();
        for table in &req.tables {
            let Some((db, name)) = table.split_once('.') else {
                warn!(request = %id, %table, "not a DB.TABLE name: skipped");
                continue;
            };
            if !self.tracker.captures(&(db.to_string(), name.to_string())) {
                warn!(request = %id, %table, "the table is not captured (the filter changed since the request): skipped");
                continue;
            }
            let running = self
                .snapshot
                .as_ref()
                .and_then(|r| r.progress.get(table))
                .is_some_and(|t| !t.done());
            if running && !req.replace {
                info!(request = %id, %table, "the table is being snapshotted already: nothing to do for it (use --replace to start it over)");
                continue;
            }
            let pair = [(db.to_string(), name.to_string())];
            let plan = match reader::plan(
                self.settings.source,
                self.settings.snapshot.method,
                &pair,
            )
            .await
            {
                Ok(plan) => plan,
                // The table cannot be read (no transactions, no key
                // under the watermark method): the request cannot be
                // honoured for it, the stream goes on.
                Err(e @ Error::Snapshot { .. }) => {
                    warn!(request = %id, %table, kind = %crate::error::HasKind::error_kind(&e), error = %e, "the table cannot be snapshotted: skipped");
                    continue;
                }
                // The server is unreachable or failing: retried from the
                // last checkpoint, where the request is not adopted yet.
                Err(e) => {
                    return Err(Error::Connection(format!(
                        "planning the snapshot of {table} for request {id}: {e}"
                    )))
                }
            };
            let Some(mut entry) = plan.get(table).cloned() else {
                warn!(request = %id, %table, "the table does not exist on the server (or is not a base table): skipped");
                continue;
            };
            entry.request = Some(id.to_string());
            out.push(Adoption {
                table: table.clone(),
                entry,
                marker: req.replace,
                replace: req.replace,
                why: Arc::from(format!("-- sluice snapshot --replace (request {id})")),
            });
        }
        Ok(out)
    }

    /// Tables that a RENAME TABLE moved into captured names from names not
    /// captured (an online schema change's cut-over with its helper tables
    /// filtered out): a table sluice never saw took the name. Its shape is
    /// read from the server and its rows restart: a `truncate` marker, then
    /// a snapshot as `[snapshot] new_tables` says. Called at the statement,
    /// which is a transaction of its own.
    pub(super) async fn tables_entered(
        &mut self,
        entered: Vec<(String, String)>,
        at: &StreamPoint,
        statement: &str,
    ) -> Result<()> {
        if entered.is_empty() || !RequestState::enabled(self.settings.source) {
            return Ok(());
        }
        let mut conn = crate::source::connect(self.settings.source).await?;
        // Only these tables' shapes: every table's costs the server a table
        // open each.
        let wanted: crate::schema::bootstrap::TableNames =
            crate::schema::bootstrap::table_names(&mut conn, self.settings.filter)
                .await?
                .into_iter()
                .filter(|(name, _)| entered.contains(name))
                .collect();
        let shapes = crate::schema::bootstrap::read_shapes_of(&mut conn, &wanted, true).await?;
        drop(conn);
        let mut pairs = Vec::new();
        for key in entered {
            let table = format!("{}.{}", key.0, key.1);
            let Some(shape) = shapes.get(&key) else {
                info!(%table, "a table took a captured name (RENAME TABLE) and is gone from the server already: its shape comes from its first row event");
                continue;
            };
            self.tracker.entered_capture(shape, at, statement)?;
            pairs.push(key);
        }
        if pairs.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = pairs.iter().map(|(d, t)| format!("{d}.{t}")).collect();
        let why: Arc<str> = Arc::from(
            "-- sluice: a table not captured took this name (RENAME TABLE); its rows restart from a new snapshot",
        );
        // Chunks already placed get their rows first.
        self.await_reserved_chunks().await?;
        if self.settings.snapshot.new_tables == NewTables::Skip {
            info!(tables = %names.join(", "), "tables took captured names from tables not captured (RENAME TABLE): captured from the stream on (new_tables = \"skip\"); their earlier rows are not in the lake");
            for table in &names {
                self.push_restart_marker(table, &why, None)?;
            }
            return Ok(());
        }
        info!(tables = %names.join(", "), "tables took captured names from tables not captured (RENAME TABLE): their rows are read beside the stream (new_tables = \"snapshot\")");
        let plan = match reader::plan(self.settings.source, self.settings.snapshot.method, &pairs)
            .await
        {
            Ok(plan) => plan,
            Err(e @ Error::Snapshot { .. }) => {
                warn!(tables = %names.join(", "), kind = %crate::error::HasKind::error_kind(&e), error = %e, "the tables cannot be snapshotted: captured from the stream on, their earlier rows are not in the lake");
                for table in &names {
                    self.push_restart_marker(table, &why, None)?;
                }
                return Ok(());
            }
            Err(e) => {
                return Err(Error::Connection(format!(
                    "planning the snapshot of {}: {e}",
                    names.join(", ")
                )))
            }
        };
        let adoptions: Vec<Adoption> = names
            .iter()
            .filter_map(|table| {
                Some(Adoption {
                    table: table.clone(),
                    entry: plan.get(table)?.clone(),
                    marker: true,
                    replace: true,
                    why: why.clone(),
                })
            })
            .collect();
        self.apply_adoptions(&adoptions)
    }

    /// Starts the adopted tables' snapshots: markers first, then a reader
    /// for every table not done. No chunk may be waiting for its rows.
    pub(super) fn apply_adoptions(&mut self, adoptions: &[Adoption]) -> Result<()> {
        let mut changed = false;
        for a in adoptions {
            let running = self
                .snapshot
                .as_ref()
                .and_then(|r| r.progress.get(&a.table))
                .is_some_and(|t| !t.done());
            if running && !a.replace {
                info!(table = %a.table, request = a.entry.request.as_deref().unwrap_or(""), "the table is being snapshotted already: nothing to do for it (use --replace to start it over)");
                continue;
            }
            if a.marker {
                self.push_restart_marker(&a.table, &a.why, None)?;
            }
            let spawn = self.spawn_args();
            let run = self
                .snapshot
                .get_or_insert_with(|| SnapshotRun::start(SnapshotProgress::new(), spawn));
            run.progress.insert(a.table.clone(), a.entry.clone());
            changed = true;
        }
        if changed {
            if let Some(run) = self.snapshot.as_mut() {
                run.read_again();
            }
        }
        Ok(())
    }

    pub(super) fn spawn_args(&self) -> SpawnArgs {
        SpawnArgs {
            source: self.settings.source.clone(),
            server_id: self.server.server_id,
            chunk_rows: self.settings.snapshot.chunk_rows,
            method: self.settings.snapshot.method,
            initial: SnapshotProgress::new(),
        }
    }

    /// A `truncate` marker row for `table` at this boundary, in a
    /// transaction of its own: every earlier row of the table is gone, and
    /// the new snapshot's chunks, placed at or after the stream's position,
    /// come after it.
    pub(super) fn push_restart_marker(
        &mut self,
        table: &str,
        why: &Arc<str>,
        gtid: Option<&str>,
    ) -> Result<()> {
        let Some((db, name)) = table.split_once('.') else {
            return Ok(());
        };
        let Some(shape): Option<Arc<TableSchema>> =
            self.tracker.shape(&(db.to_string(), name.to_string()))?
        else {
            return Ok(());
        };
        let needs_new = self
            .buffers
            .get(table)
            .is_none_or(|b| !Arc::ptr_eq(&b.table, &shape));
        if needs_new {
            self.start_flush(table)?;
            self.buffers
                .insert(table.to_string(), TableBuffer::new(Arc::clone(&shape)));
        }
        let tx_seq = self.next_tx_seq;
        self.next_tx_seq += 1;
        // After the statement that caused it, when one did (its effect on
        // names comes first), else where the stream has read to.
        let (file, pos) = match self.statement_end {
            Some(end) => (self.file.clone(), end),
            None => (self.read_to.file.clone(), self.read_to.pos),
        };
        let origin = RowOrigin {
            tx_seq,
            file: &file,
            pos,
            gtid,
            timestamp: chrono::Utc::now().timestamp() as u32,
            sql: Some(why),
        };
        if let Some(b) = self.buffers.get_mut(table) {
            b.push_marker(self.next_seq, &origin);
            self.next_seq += 1;
        }
        // The cursor sits at this boundary: its counters move past the marker.
        self.cursor.next_seq = self.next_seq;
        self.cursor.next_tx_seq = self.next_tx_seq;
        info!(%table, seq = self.next_seq - 1, "truncate marker: the table's rows restart from its new snapshot");
        Ok(())
    }

    /// After a rewind: the widened filter's tables start again, unless a
    /// manifest committed them already.
    pub(super) fn readopt_after_rewind(&mut self) -> Result<()> {
        self.requests.rewound();
        let widened = self.requests.widened.clone();
        self.apply_adoptions(&widened)
    }

    /// After `manifest` committed: its adoptions are durable, so the
    /// requests' objects go.
    pub(super) async fn requests_committed(&mut self, manifest: &Manifest) {
        self.requests.widened.clear();
        self.requests.adopted.clear();
        if manifest.snapshot_requests.is_empty() {
            return;
        }
        if std::env::var(CRASH_ENV).as_deref() == Ok("after-request-commit") {
            crash();
        }
        for id in &manifest.snapshot_requests {
            match request::delete(self.lake.store.as_ref(), id).await {
                Ok(()) => {
                    self.requests.carried.remove(id);
                }
                Err(e) => {
                    warn!(request = %id, kind = %crate::error::HasKind::error_kind(&e), error = %e, "could not delete an adopted snapshot request; trying again after the next commit");
                    self.requests.carried.insert(id.clone());
                }
            }
        }
    }
}

fn crash() {
    warn!("{CRASH_ENV}: killing the process (test hook)");
    #[cfg(target_os = "linux")]
    // SAFETY: sends a signal to this process; no memory is touched.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort();
}
