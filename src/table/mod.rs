//! The Delta Lake log of each table folder (DESIGN.md "The lake as tables"):
//! after a manifest commits, one Delta commit per table it touched adds
//! exactly that manifest's files of the table, with `txn {appId: "sluice",
//! version: <seq>}`. The manifest stays the commit of record; at start the
//! Delta commits missing for committed manifests are made, in manifest
//! order, never one twice (the `txn` version says which are done).
//!
//! The log is written here with the protocol's JSON actions rather than
//! through `delta_kernel`: the kernel's default engine rebuilds arrow and
//! parquet with more features and brings reqwest 0.13, chrono-tz and a second
//! `rand`, several minutes of CI build for a few hundred lines of JSON. The
//! rest of `table` reaches the log only through [`format::TableFormat`]
//! (load, commit, maintain, redact): the Delta log (`log/`, with `cleanup`,
//! `redact` and `tombstones`) is its one implementation, so moving to the
//! kernel, or a second format, touches one place.

pub mod catalog;
mod cleanup;
pub mod compaction;
pub mod current;
pub(crate) mod files;
pub mod format;
pub mod iceberg;
mod lag;
mod legacy_names;
mod log;
pub mod names;
mod redact;
mod rewrite;
mod schema;
pub(crate) mod stats;
pub(crate) mod supertype;
mod tombstones;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow::datatypes::{Field, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::json;

use crate::commit::{stored_path, DataFile, Manifest};
use crate::error::{Error, Result};
use crate::schema::history::SchemaHistory;
use legacy_names::LakeNames;

use format::{Commit, Operation, Put, TableFormat, FORMAT};
use lag::first_failure;
pub use lag::{delta_needs, lake_lags, DeltaLag};
pub use log::{TableState, APP_ID, CHECKPOINT_INTERVAL, LOG_DIR};

/// The table folder `<db>/<table>` of a data file, as stored (encoded).
pub(crate) fn table_dir(file: &DataFile) -> Path {
    let path = stored_path(&file.path);
    let parts: Vec<_> = path.parts().collect();
    Path::from_iter(parts[..parts.len().saturating_sub(1)].iter().cloned())
}

/// `(db, table)` of a changelog table folder.
fn table_names(dir: &Path) -> Option<(String, String)> {
    names::LakeTable::from_dir(dir)
        .filter(|t| t.kind == names::Kind::Changelog)
        .map(|t| (t.db, t.table))
}

/// The file schemas of every version of some tables, from the schema
/// history, with the manifest seq that commits each: read from SQLite before
/// any await, so the Delta commits hold no reference to the history.
#[derive(Default)]
pub struct SchemaVersions(
    HashMap<(String, String), Vec<(u64, SchemaRef)>>,
    /// The RENAME statement that gave a table its name, if its history
    /// starts with one: the first Delta commit of its folder names it.
    HashMap<(String, String), String>,
    /// The source and lake names of each table's versions: files of a
    /// release before lake names are copied under the lake names.
    HashMap<(String, String), LakeNames>,
);

impl SchemaVersions {
    pub fn load(
        history: &SchemaHistory,
        tables: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self> {
        let mut map = HashMap::new();
        let mut renames = HashMap::new();
        let mut names = HashMap::new();
        for (db, table) in tables {
            let all = history.versions(&db, &table)?;
            names.insert((db.clone(), table.clone()), LakeNames::of(&all));
            if let Some(stmt) = all.first().and_then(|v| v.statement.as_ref()) {
                if stmt.to_ascii_uppercase().contains("RENAME") {
                    renames.insert((db.clone(), table.clone()), stmt.clone());
                }
            }
            let versions = all
                .into_iter()
                .filter(|v| !v.dropped)
                .map(|v| (v.checkpoint, crate::batch::arrow_schema(&v.schema)))
                .collect();
            map.insert((db, table), versions);
        }
        Ok(SchemaVersions(map, renames, names))
    }

    /// Every table the history knows.
    pub fn load_all(history: &SchemaHistory) -> Result<Self> {
        let tables: BTreeSet<(String, String)> = history
            .latest_all()?
            .into_iter()
            .map(|v| (v.schema.database, v.schema.name))
            .collect();
        Self::load(history, tables)
    }

    /// The tables named by the files of `m`.
    pub fn for_manifest(history: &SchemaHistory, m: &Manifest) -> Result<Self> {
        let tables: BTreeSet<(String, String)> = m
            .files
            .iter()
            .filter_map(|f| table_names(&table_dir(f)))
            .collect();
        Self::load(history, tables)
    }
}

/// One table's files of one manifest.
struct TableFiles<'a> {
    dir: Path,
    files: Vec<&'a DataFile>,
}

fn by_table(m: &Manifest) -> BTreeMap<String, TableFiles<'_>> {
    let mut out: BTreeMap<String, TableFiles<'_>> = BTreeMap::new();
    for f in &m.files {
        let dir = table_dir(f);
        out.entry(dir.to_string())
            .or_insert_with(|| TableFiles {
                dir,
                files: Vec::new(),
            })
            .files
            .push(f);
    }
    out
}

/// What a start found and made.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Delta commits made for manifests committed before.
    pub commits: usize,
    /// Tables whose log was built from the start.
    pub built: usize,
}

/// The Delta logs of the lake's table folders, as far as this run knows them.
pub struct TableLogs {
    tables: HashMap<String, TableState>,
    /// How many tables' commits run at once (`[sink] requests_in_flight`).
    in_flight: usize,
    /// A Delta commit failed: the next checkpoint repairs before it commits.
    pub behind: bool,
    lag: lag::Lags,
    /// Per lagging table folder: when its log may be tried again, and how
    /// many tries in a row failed (the wait doubles, up to [`RETRY_MAX`]).
    retry: HashMap<String, (std::time::Instant, u32)>,
}

/// The first wait after a table's Delta commit failed, and the longest.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// The key of a whole repair's wait in `TableLogs::retry`.
const REPAIR_KEY: &str = "";

/// How many times a commit version taken by someone else is re-read.
const CONFLICT_TRIES: u32 = 5;

impl Default for TableLogs {
    fn default() -> Self {
        TableLogs {
            tables: HashMap::new(),
            in_flight: crate::config::DEFAULT_REQUESTS_IN_FLIGHT,
            behind: false,
            lag: lag::Lags::default(),
            retry: HashMap::new(),
        }
    }
}

/// The state of the log at `dir` that `cache` holds, loaded into it first
/// when it holds none.
async fn cached<'c>(
    cache: &'c mut Option<TableState>,
    store: &dyn ObjectStore,
    dir: &Path,
) -> Result<&'c mut TableState> {
    let state = match cache.take() {
        Some(known) => known,
        None => FORMAT.load(store, dir, false).await?,
    };
    Ok(cache.insert(state))
}

impl TableLogs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Up to `n` tables' commits (and start-up reads) at once.
    pub fn with_requests_in_flight(mut self, n: usize) -> Self {
        self.in_flight = n.max(1);
        self
    }

    async fn state(&mut self, store: &dyn ObjectStore, dir: &Path) -> Result<&mut TableState> {
        match self.tables.entry(dir.to_string()) {
            Entry::Occupied(known) => Ok(known.into_mut()),
            Entry::Vacant(new) => Ok(new.insert(FORMAT.load(store, dir, false).await?)),
        }
    }

    /// Makes the Delta commits of `tables`' files of `m` (unless a log has
    /// them already), up to `in_flight` tables at once; each table's own
    /// commits stay in order, as it has one here. Keeps each table's lag: a
    /// failure adds `m` to it, a success at `m` clears every manifest up to
    /// it. The results in the order of `tables`: false where a log had it.
    async fn commit_tables<'m>(
        &mut self,
        store: &dyn ObjectStore,
        m: &'m Manifest,
        tables: Vec<TableFiles<'m>>,
        schemas: &SchemaVersions,
    ) -> Vec<(TableFiles<'m>, Result<bool>)> {
        let jobs: Vec<_> = tables
            .into_iter()
            .map(|t| {
                let cache = self.tables.remove(&t.dir.to_string());
                (t, cache)
            })
            .collect();
        let done: Vec<_> = futures::stream::iter(jobs)
            .map(|(t, mut cache)| async move {
                let result = commit_table_files(store, m, &t, schemas, &mut cache).await;
                (t, cache, result)
            })
            .buffered(self.in_flight)
            .collect()
            .await;
        let mut out = Vec::with_capacity(done.len());
        for (t, cache, result) in done {
            if let Some(state) = cache {
                self.tables.insert(t.dir.to_string(), state);
            }
            match &result {
                Ok(_) => self.lag.caught_up(&t.dir, m.seq),
                Err(e) => self
                    .lag
                    .missed(&t.dir, &t.files[0].table, (m.seq, &m.committed_at), e),
            }
            out.push((t, result));
        }
        out
    }

    /// The Delta commit of `t`'s files of `m` alone. False if the log has it.
    async fn commit_table(
        &mut self,
        store: &dyn ObjectStore,
        m: &Manifest,
        t: TableFiles<'_>,
        schemas: &SchemaVersions,
    ) -> Result<bool> {
        match self.commit_tables(store, m, vec![t], schemas).await.pop() {
            Some((_, result)) => result,
            None => Ok(false),
        }
    }

    /// Makes the Delta commits of manifest `m`, one per table it touched,
    /// unless a table's log has them already. Returns how many it made.
    pub async fn commit_manifest(
        &mut self,
        store: &dyn ObjectStore,
        m: &Manifest,
        schemas: &SchemaVersions,
    ) -> Result<usize> {
        let mut made = 0;
        let mut failed = Vec::new();
        let tables = by_table(m).into_values().collect();
        // One table's failure holds back no other table's commit: the
        // repair at the next checkpoint or start retries it.
        for (t, result) in self.commit_tables(store, m, tables, schemas).await {
            match result {
                Ok(true) => made += 1,
                Ok(false) => {}
                Err(e) => failed.push((t.files[0].table.clone(), e)),
            }
        }
        first_failure(m.seq, failed).map_or(Ok(made), Err)
    }
}

/// The Delta commit of `t`'s files of `m`, on the log state `cache` holds
/// (read first when it holds none; emptied when the log must be read
/// again). False if the log has it.
async fn commit_table_files(
    store: &dyn ObjectStore,
    m: &Manifest,
    t: &TableFiles<'_>,
    schemas: &SchemaVersions,
    cache: &mut Option<TableState>,
) -> Result<bool> {
    let table_name = t.files[0].table.clone();
    let facts: Vec<stats::FileFacts> = futures::stream::iter(
        t.files
            .iter()
            .map(|f| async move { stats::file_facts(store, &stored_path(&f.path)).await }),
    )
    .buffered(8)
    .try_collect()
    .await?;
    // The union of the table's columns over its history up to this
    // manifest, then of the files themselves (their types win).
    let mut fields: Vec<Field> = Vec::new();
    if let Some(versions) = table_names(&t.dir).and_then(|k| schemas.0.get(&k)) {
        for (_, s) in versions.iter().filter(|(ckpt, _)| *ckpt <= m.seq) {
            schema::widen(&mut fields, s);
        }
    }
    let names = table_names(&t.dir).and_then(|k| schemas.2.get(&k));
    // Files of a release before lake names: their columns' lake names.
    let legacy: Vec<Option<Vec<String>>> = facts
        .iter()
        .map(|f| f.schema.as_ref().and_then(|s| names?.renames(s)))
        .collect();
    for (f, lake) in facts.iter().zip(&legacy) {
        match (&f.schema, lake) {
            (Some(s), Some(lake)) => {
                schema::widen(&mut fields, &legacy_names::renamed_schema(s, lake))
            }
            (Some(s), None) => schema::widen(&mut fields, s),
            (None, _) => {}
        }
    }
    let schema_string = schema::schema_string(&fields).map_err(|e| {
            Error::Lake(format!(
                "table {table_name} cannot have a Delta log: {e}, a type Delta Lake cannot hold; start a new lake at another path or prefix"
            ))
        })?;
    let protocol = schema::protocol(&fields);
    // A column's type changed: the files that hold the old type are
    // copied in the new one first, in a commit of their own.
    rewrite_old_types(
        store,
        &t.dir,
        &table_name,
        (&fields, &schema_string, &protocol),
        names,
        cache,
    )
    .await?;
    // This manifest's own files of the old type (a DDL inside the
    // checkpoint) join as copies.
    let mut adds: Vec<(String, stats::FileFacts)> = Vec::with_capacity(facts.len());
    for ((f, facts), lake) in t.files.iter().zip(facts).zip(legacy) {
        let stored = stored_path(&f.path);
        let name = stored.filename().unwrap_or(&f.path).to_string();
        if lake.is_some()
            || facts
                .schema
                .as_ref()
                .is_some_and(|s| rewrite::conflicts(s, &fields))
        {
            let version = cached(cache, store, &t.dir)
                .await?
                .version
                .map_or(0, |v| v + 1);
            let copy =
                rewrite::copy_conformed(store, &t.dir, &name, &fields, version, names).await?;
            adds.push((copy.path, copy.facts));
        } else {
            adds.push((name, facts));
        }
    }
    let mut tries = 0;
    loop {
        let state = cached(cache, store, &t.dir).await?;
        if state.applied >= m.seq {
            return Ok(false);
        }
        let version = state.version.map_or(0, |v| v + 1);
        let mut commit = Commit::new(version, Operation::Append, json!({}));
        let now = commit.now_ms;
        // A table that a RENAME TABLE named: its first version says so.
        let renamed_by = state
            .version
            .is_none()
            .then(|| table_names(&t.dir).and_then(|k| schemas.1.get(&k)))
            .flatten();
        let info = json!({
            "seq": m.seq,
            "table": table_name,
            "committed_at": m.committed_at,
            "cursor": m.cursor,
            "rows": m.totals.get(&table_name),
            "renamed_by": renamed_by,
        });
        commit.facts = info.clone();
        commit.seq = Some(m.seq);
        // Never lower a protocol: a column's type only widens the union.
        let raise = match &state.protocol {
            None => true,
            Some(p) => p["minReaderVersion"].as_u64() < protocol["minReaderVersion"].as_u64(),
        };
        if raise {
            commit.protocol = Some(protocol.clone());
        }
        commit.metadata = match &state.metadata {
            None => Some(json!({
                "id": uuid::Uuid::new_v4().to_string(),
                "name": table_name,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_string,
                "partitionColumns": [],
                "configuration": {},
                "createdTime": now,
            })),
            Some(old) if old["schemaString"].as_str() != Some(schema_string.as_str()) => {
                let mut new = old.clone();
                new["schemaString"] = json!(schema_string);
                Some(new)
            }
            Some(_) => None,
        };
        for (name, facts) in &adds {
            commit.files.push(json!({"add": {
                "path": name,
                "partitionValues": {},
                "size": facts.size,
                "modificationTime": facts.modified_ms,
                "dataChange": true,
                "stats": facts.stats.to_string(),
            }}));
        }
        match FORMAT.commit(store, &t.dir, &commit).await? {
            Put::Written => {
                state.version = Some(version);
                state.applied = m.seq;
                // What a repair in this run reads to tell whether the
                // log lags (a stale one would hide a lagging table).
                state.last_info = Some(info);
                if let Some(p) = commit.protocol {
                    state.protocol = Some(p);
                }
                if let Some(md) = commit.metadata {
                    state.metadata = Some(md);
                }
                abort_after_commits();
                FORMAT.maintain(store, &t.dir, version).await;
                return Ok(true);
            }
            Put::Unknown(e) => {
                // Whether it landed, the next load of the log says.
                *cache = None;
                return Err(e);
            }
            Put::Taken => {
                // Another try of ours that landed, or a second sidecar's
                // repair: read the log again, the txn says which.
                tries += 1;
                if tries >= CONFLICT_TRIES {
                    return Err(Error::Lake(format!(
                            "Delta log of {}: version {version} is taken {tries} times in a row by commits without manifest {}; stop any other sidecar on this lake and restart",
                            t.dir, m.seq
                        )));
                }
                *cache = None;
            }
        }
    }
}

/// When the Delta schema of `dir` gives a column another type than
/// `fields` (DESIGN.md: DECIMAL precision or scale, FLOAT to DOUBLE, a
/// number to a string), commits copies of the files of the old type in
/// the new one, which replace them, with the new schema. The same for a
/// Delta schema with names that differ only in case (a lake of a release
/// before lake names): its files are copied under their lake names.
async fn rewrite_old_types(
    store: &dyn ObjectStore,
    dir: &Path,
    table_name: &str,
    (fields, schema_string, protocol): (&[Field], &str, &serde_json::Value),
    names: Option<&LakeNames>,
    cache: &mut Option<TableState>,
) -> Result<()> {
    let state = cached(cache, store, dir).await?;
    let Some(old) = state
        .metadata
        .as_ref()
        .and_then(|m| m["schemaString"].as_str())
    else {
        return Ok(());
    };
    let renames = legacy_names::has_case_duplicates(old);
    if !renames && !rewrite::schema_changes_types(old, fields) {
        return Ok(());
    }
    let why = if renames {
        "column names that differ only in case: the files are copied under their lake names"
    } else {
        "a column changed to another type: the files of the old type are copied in the new one"
    };
    let mut tries = 0;
    loop {
        let live = FORMAT.load(store, dir, true).await?;
        let version = live.version.map_or(0, |v| v + 1);
        let mut commit = Commit::new(
            version,
            Operation::Overwrite,
            json!({
                "table": table_name,
                "rewritten": why,
            }),
        );
        let now = commit.now_ms;
        let raise = live
            .protocol
            .as_ref()
            .is_none_or(|p| p["minReaderVersion"].as_u64() < protocol["minReaderVersion"].as_u64());
        if raise {
            commit.protocol = Some(protocol.clone());
        }
        let mut metadata = live.metadata.clone().unwrap_or_default();
        metadata["schemaString"] = json!(schema_string);
        commit.metadata = Some(metadata);
        let mut copies = 0;
        let mut written = Vec::new();
        for path in live.files.keys() {
            let file = path.split('/').fold(dir.clone(), |p, part| p.join(part));
            let facts = stats::file_facts(store, &file).await?;
            let legacy = facts
                .schema
                .as_ref()
                .and_then(|s| names?.renames(s))
                .is_some();
            if !legacy
                && !facts
                    .schema
                    .as_ref()
                    .is_some_and(|s| rewrite::conflicts(s, fields))
            {
                continue;
            }
            let copy = rewrite::copy_conformed(store, dir, path, fields, version, names).await?;
            commit.files.push(rewrite::remove_action(path, now, &copy));
            commit.files.push(rewrite::add_action(&copy));
            written.push(copy.path);
            copies += 1;
        }
        match FORMAT.commit(store, dir, &commit).await? {
            Put::Written => {
                tracing::info!(table = %table_name, version, files = copies, "the Delta table's files are rewritten: {why}");
                FORMAT.maintain(store, dir, version).await;
                break;
            }
            Put::Taken => {
                // A compaction of this table beside the stream, or
                // another writer: the copies are no one's, and the
                // files to copy are read again from the newer log.
                for path in &written {
                    let file = path.split('/').fold(dir.clone(), |p, part| p.join(part));
                    if let Err(e) = store.delete(&file).await {
                        tracing::warn!(%file, error = %e, "could not delete a copy no commit took");
                    }
                }
                tries += 1;
                if tries >= CONFLICT_TRIES {
                    return Err(Error::Lake(format!(
                            "Delta log of {dir}: version {version} was taken {tries} times in a row while sluice rewrote the table in a new column type; stop any other sidecar on this lake and restart"
                        )));
                }
                *cache = None;
                continue;
            }
            Put::Unknown(e) => {
                *cache = None;
                return Err(e);
            }
        }
    }
    // The next commit reads the log again.
    *cache = None;
    Ok(())
}

impl TableLogs {
    /// A Delta table of a release before lake names whose schema has names
    /// that differ only in case, which no reader reads: its files are copied
    /// under their lake names, whether or not new changes come.
    async fn rename_legacy(
        &mut self,
        store: &dyn ObjectStore,
        dir: &Path,
        upto: u64,
        schemas: &SchemaVersions,
    ) -> Result<()> {
        let Some(key) = table_names(dir) else {
            return Ok(());
        };
        let mut fields: Vec<Field> = Vec::new();
        for (_, s) in schemas
            .0
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(ckpt, _)| *ckpt <= upto)
        {
            schema::widen(&mut fields, s);
        }
        let table_name = format!("{}.{}", key.0, key.1);
        let schema_string = schema::schema_string(&fields)
            .map_err(|e| Error::Lake(format!("table {table_name} cannot have a Delta log: {e}")))?;
        let protocol = schema::protocol(&fields);
        let mut cache = self.tables.remove(&dir.to_string());
        let done = rewrite_old_types(
            store,
            dir,
            &table_name,
            (&fields, &schema_string, &protocol),
            schemas.2.get(&key),
            &mut cache,
        )
        .await;
        if let Some(state) = cache {
            self.tables.insert(dir.to_string(), state);
        }
        done
    }
}

/// Test hook: with this variable set to N, sluice aborts right after the
/// N-th changelog Delta commit it makes (in the middle of a checkpoint's
/// commits, which run several at once).
pub const ABORT_AFTER_TABLE_COMMITS: &str = "SLUICE_TEST_ABORT_AFTER_TABLE_COMMITS";

fn abort_after_commits() {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(limit) = std::env::var(ABORT_AFTER_TABLE_COMMITS)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    if MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= limit {
        eprintln!("{ABORT_AFTER_TABLE_COMMITS}: aborting after {limit} Delta commits");
        std::process::abort();
    }
}

/// At start, with `[iceberg] enabled`: every changelog and current table's
/// Iceberg metadata brought up to its Delta log (`format::catch_up`),
/// `in_flight` tables at a time, then, with a `[catalog]`, every table's
/// entry settled (`catalog::Catalog::reconcile`). A table that cannot be
/// read or settled is logged.
pub async fn catch_up_followers(store: &dyn ObjectStore, in_flight: usize) -> Result<()> {
    if let Some(report) = follow_all(store, in_flight).await? {
        for (name, why) in &report.failed {
            tracing::warn!(entry = %name, error = %why, "a catalog entry could not be settled");
        }
        if report.registered + report.moved + report.dropped > 0 {
            tracing::info!(
                registered = report.registered,
                moved = report.moved,
                dropped = report.dropped,
                "catalog entries settled at start"
            );
        }
    }
    Ok(())
}

/// `sluice catalog sync`: every table's Iceberg metadata brought up to its
/// Delta log and its catalog entry settled; what it did. An error when no
/// catalog is on.
pub async fn sync_catalog(store: &dyn ObjectStore, in_flight: usize) -> Result<catalog::Report> {
    follow_all(store, in_flight).await?.ok_or_else(|| {
        crate::error::Error::Catalog(
            "no catalog to sync: set [catalog] type = \"sql\" (and [iceberg] enabled = true)"
                .into(),
        )
    })
}

async fn follow_all(store: &dyn ObjectStore, in_flight: usize) -> Result<Option<catalog::Report>> {
    let Some(settings) = iceberg::settings() else {
        return Ok(None);
    };
    let mut dirs = table_dirs(store, in_flight).await?;
    let current = Path::from(current::CURRENT_DIR);
    dirs.extend(tables_under(store, Some(&current), in_flight).await?);
    let heads: Vec<(Path, iceberg::Head)> = futures::stream::iter(dirs)
        .map(|dir| async move {
            let head = format::catch_up(store, &dir).await;
            head.map(|h| (dir, h))
        })
        .buffer_unordered(in_flight.max(1))
        .filter_map(|h| async move { h })
        .collect()
        .await;
    match catalog::get() {
        Some(c) => c.reconcile(settings, heads, in_flight).await.map(Some),
        None => Ok(None),
    }
}

/// The table folders `<db>/<table>` of the lake (folders starting with `_`
/// belong to sluice or to a table's Delta log).
async fn table_dirs(store: &dyn ObjectStore, in_flight: usize) -> Result<Vec<Path>> {
    tables_under(store, None, in_flight).await
}

/// The table folders `<db>/<table>` under `root` (the lake's root: `None`).
async fn tables_under(
    store: &dyn ObjectStore,
    root: Option<&Path>,
    in_flight: usize,
) -> Result<Vec<Path>> {
    let dbs = store.list_with_delimiter(root).await?;
    let dbs = dbs
        .common_prefixes
        .into_iter()
        .filter(|db| !db.filename().is_some_and(|n| n.starts_with('_')));
    // One listing per database, several at once.
    let listed: Vec<_> = futures::stream::iter(dbs)
        .map(|db| async move { store.list_with_delimiter(Some(&db)).await })
        .buffered(in_flight.max(1))
        .try_collect()
        .await?;
    Ok(listed
        .into_iter()
        .flat_map(|tables| tables.common_prefixes)
        .filter(|t| !t.filename().is_some_and(|n| n.starts_with('_')))
        .collect())
}

/// Every table folder of the lake with its log state (without files),
/// `in_flight` read at a time.
async fn table_logs(
    store: &dyn ObjectStore,
    in_flight: usize,
) -> Result<Vec<(Path, Result<TableState>)>> {
    let dirs = table_dirs(store, in_flight)
        .await?
        .into_iter()
        .filter(|dir| table_names(dir).is_some())
        .collect();
    Ok(load_logs(store, dirs, in_flight).await)
}

/// The log state (without files) of each folder of `dirs`, `in_flight`
/// read at a time, in the order of `dirs`.
async fn load_logs(
    store: &dyn ObjectStore,
    dirs: Vec<Path>,
    in_flight: usize,
) -> Vec<(Path, Result<TableState>)> {
    futures::stream::iter(dirs)
        .map(|dir| async move {
            let state = FORMAT.load(store, &dir, false).await;
            (dir, state)
        })
        .buffered(in_flight.max(1))
        .collect()
        .await
}

async fn has_data_files(store: &dyn ObjectStore, dir: &Path) -> Result<bool> {
    let listed = store.list_with_delimiter(Some(dir)).await?;
    Ok(listed.objects.iter().any(|o| {
        o.location
            .filename()
            .is_some_and(|n| n.ends_with(".parquet"))
    }))
}

/// The latest Delta version of every table folder that has a log, by
/// `db.table` (for `sluice status`).
pub async fn versions(store: &dyn ObjectStore, in_flight: usize) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for (dir, state) in table_logs(store, in_flight).await? {
        // A log that cannot be read has no version to show; `lake_lags`
        // names it with its error.
        let Ok(state) = state else {
            continue;
        };
        if let (Some(v), Some((db, table))) = (state.version, table_names(&dir)) {
            out.insert(format!("{db}.{table}"), v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
