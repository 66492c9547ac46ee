//! The schema in force while streaming: which shape each captured table has
//! at the current stream position, how DDL changes it, and which versions
//! the next checkpoint must make durable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::json;
use tracing::{info, warn};

use super::apply::{apply_alter, columns_from_specs, unique_keys_from_specs};
use super::ddl::{ddl_effect, parse_ddl_on, AlterOp, Change, DdlEffect, ServerVersion, TableName};
use super::history::{SchemaHistory, TableVersion};
use super::policy::{describe, ColumnPolicies};
use super::reread::{needs_reread, ColumnStep, RereadReason};
use super::{ColumnDef, TableSchema, UniqueKey};
use crate::config::TableFilter;
use crate::error::{Error, Result};
use crate::types::binlog::BinlogPosition;

mod table_map;
#[cfg(test)]
use table_map::keep_known_fixed_binary_types;

/// A table's shape apart from its name and version: what a new version records.
struct Shape {
    columns: Vec<ColumnDef>,
    charset: Option<String>,
    unique_keys: Vec<UniqueKey>,
}

impl Shape {
    fn of(t: &TableSchema) -> Shape {
        Shape {
            columns: t.columns.clone(),
            charset: t.charset.clone(),
            unique_keys: t.unique_keys.clone(),
        }
    }
}

/// Where and when a DDL statement (or a derived shape) takes effect.
#[derive(Debug, Clone)]
pub struct StreamPoint {
    pub position: BinlogPosition,
    pub gtid: Option<String>,
    /// Event header time, seconds since the epoch.
    pub timestamp: u32,
    /// The `_tx_seq` the statement consumes; versions are in force from it on.
    pub tx_seq: i64,
    /// The manifest seq of the checkpoint that will commit what happens here.
    pub checkpoint: u64,
}

impl StreamPoint {
    fn committed_at(&self) -> String {
        chrono::DateTime::from_timestamp(self.timestamp as i64, 0)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
}

/// What the pipeline must do to its buffers because of a DDL statement.
#[derive(Debug, Default)]
pub struct DdlEffects {
    /// Tables that get a `truncate` marker row, with the shape before the DDL.
    pub markers: Vec<Arc<TableSchema>>,
    /// Tables whose open buffer must be written out (their shape changed).
    pub closed: Vec<String>,
    /// Whether the statement touched a captured table at all.
    pub captured: bool,
    /// Tables (`db.table`, under their names after the statement) whose
    /// existing rows the statement changed in a way the binlog does not
    /// carry, and why.
    pub rereads: Vec<(String, RereadReason)>,
    /// Captured tables that a RENAME TABLE moved in from a name sluice does
    /// not capture (an online schema change's helper table left out by the
    /// filter): their shape is unknown here, and their rows must be read
    /// ([`SchemaTracker::entered_capture`]).
    pub entered: Vec<TableName>,
    /// The statement's renames of captured tables (`db.table`, in order).
    pub renamed: Vec<(String, String)>,
}

pub struct SchemaTracker {
    history: SchemaHistory,
    filter: TableFilter,
    current: HashMap<TableName, Arc<TableSchema>>,
    db_charsets: BTreeMap<String, String>,
    server_charset: String,
    /// Versions created since the last checkpoint.
    uncommitted: Vec<TableVersion>,
    /// Manifest `ddl` entries since the last checkpoint.
    ddl_log: Vec<serde_json::Value>,
    /// Shapes read from information_schema when starting behind the head:
    /// recorded as versions only when the stream uses them before any DDL
    /// defines the table (see [`SchemaTracker::bootstrap`]).
    provisional: HashMap<TableName, (TableSchema, StreamPoint)>,
    /// `schema resync` shapes applied since the last checkpoint: forgotten
    /// only when it commits, so a retry from the checkpoint before them
    /// (which re-reads the statements they replace) finds them again.
    applied_resyncs: Vec<(TableName, BinlogPosition)>,
    /// The server that wrote the binlog being read: it decides which
    /// executable comments of a statement were executed.
    server: Option<ServerVersion>,
    /// `[[columns]]`: every version recorded takes its columns' policies
    /// from them.
    policies: ColumnPolicies,
    /// Manifest `column_policies` entries since the last checkpoint: the
    /// policies that changed at this run's start.
    policy_log: Vec<serde_json::Value>,
    /// The current shape of each lake table that `[[routes]]` write shards
    /// into: versions of the history that no source table has.
    routed: HashMap<TableName, Arc<TableSchema>>,
}

/// The statement of a version recorded because the `[[columns]]` policies
/// of a table changed between two runs (no DDL): the version starts at the
/// run's first position, a checkpoint boundary.
pub const POLICY_STATEMENT: &str = "-- sluice: column policies changed";

/// How the statement of a routed table's version begins (DESIGN.md "Shard
/// routing"): `-- sluice: routed from <shard db.table>`.
pub const ROUTED_STATEMENT: &str = "-- sluice: routed from ";

/// Whether a version is one of a routed table.
pub fn is_routed(v: &TableVersion) -> bool {
    v.statement
        .as_deref()
        .is_some_and(|s| s.starts_with(ROUTED_STATEMENT))
}

impl SchemaTracker {
    pub fn new(
        history: SchemaHistory,
        filter: TableFilter,
        db_charsets: BTreeMap<String, String>,
        server_charset: String,
    ) -> Result<Self> {
        let mut t = SchemaTracker {
            history,
            filter,
            current: HashMap::new(),
            db_charsets,
            server_charset,
            uncommitted: Vec::new(),
            ddl_log: Vec::new(),
            provisional: HashMap::new(),
            applied_resyncs: Vec::new(),
            server: None,
            policies: ColumnPolicies::default(),
            policy_log: Vec::new(),
            routed: HashMap::new(),
        };
        t.reload()?;
        Ok(t)
    }

    /// The version of the server whose statements follow (`@@version`, or
    /// the format description event of the binlog file being read).
    pub fn set_server_version(&mut self, version: &str) {
        if let Some(v) = ServerVersion::parse(version) {
            self.server = Some(v);
        }
    }

    pub fn history(&self) -> &SchemaHistory {
        &self.history
    }

    /// The newest non-dropped version of every table, from the store: the
    /// source tables', and apart from them the routed tables'.
    fn reload(&mut self) -> Result<()> {
        self.current.clear();
        self.routed.clear();
        for v in self.history.latest_all()? {
            if v.dropped {
                continue;
            }
            let name = (v.schema.database.clone(), v.schema.name.clone());
            match is_routed(&v) {
                true => self.routed.insert(name, Arc::new(v.schema)),
                false => self.current.insert(name, Arc::new(v.schema)),
            };
        }
        Ok(())
    }

    /// The current shape of a routed lake table, `None` before its first
    /// version.
    pub fn routed_shape(&self, t: &TableName) -> Option<&Arc<TableSchema>> {
        self.routed.get(t)
    }

    /// Records a new version of the routed lake table `t` (columns the
    /// shards' union, policies as the shards' versions carry them), in force
    /// from `at`, because of `shard`'s shape.
    pub fn record_routed(
        &mut self,
        t: &TableName,
        columns: Vec<ColumnDef>,
        at: &StreamPoint,
        shard: &str,
    ) -> Result<Arc<TableSchema>> {
        let shape = Shape {
            columns,
            charset: None,
            unique_keys: Vec::new(),
        };
        let statement = format!("{ROUTED_STATEMENT}{shard}");
        self.record_as(t, shape, at, Some(&statement), false, false)
    }

    pub fn captures(&self, t: &TableName) -> bool {
        self.filter.captures(&t.0, &t.1)
    }

    /// Lets go of what the tracker holds of `t`, so that the next
    /// [`SchemaTracker::bootstrap`] reads its shape again: a table that
    /// enters capture again, whose DDL while it was not captured is not in
    /// the history.
    pub fn forget(&mut self, t: &TableName) {
        self.current.remove(t);
        self.provisional.remove(t);
    }

    /// The shape of `t` as of the statements read so far.
    pub fn current_shape(&self, t: &TableName) -> Option<&Arc<TableSchema>> {
        self.current.get(t)
    }

    pub fn known(&self, t: &TableName) -> bool {
        self.current.contains_key(t) || self.provisional.contains_key(t)
    }

    /// Versions the next checkpoint writes to the lake, and its `ddl` entries.
    pub fn uncommitted(&self) -> (&[TableVersion], &[serde_json::Value]) {
        (&self.uncommitted, &self.ddl_log)
    }

    /// The next checkpoint's `column_policies` entries.
    pub fn policy_changes(&self) -> &[serde_json::Value] {
        &self.policy_log
    }

    /// The `[[columns]]` policies every version recorded from now on takes.
    pub fn set_policies(&mut self, policies: ColumnPolicies) {
        self.policies = policies;
    }

    /// Checks the policies against every table known at start, warns of
    /// entries that match no column, and records a new version of each
    /// table whose columns' policies differ from its recorded ones, in force
    /// from `at` (the run's first position: a checkpoint boundary). A policy
    /// that cannot apply is a definite error before anything is written.
    pub fn apply_policies(&mut self, at: &StreamPoint) -> Result<()> {
        let mut provisional: Vec<TableSchema> =
            self.provisional.values().map(|(t, _)| t.clone()).collect();
        for t in &mut provisional {
            self.policies.assign(t)?;
        }
        let mut names: Vec<TableName> = self.current.keys().cloned().collect();
        names.sort();
        let mut current = Vec::new();
        for name in names {
            let known = Arc::clone(&self.current[&name]);
            let mut policed = (*known).clone();
            self.policies.assign(&mut policed)?;
            let changed: Vec<serde_json::Value> = known
                .columns
                .iter()
                .zip(&policed.columns)
                .filter(|(a, b)| a.policy != b.policy)
                .map(|(a, b)| {
                    json!({
                        "table": known.qualified_name(),
                        "column": a.name,
                        "from": describe(a.policy),
                        "to": describe(b.policy),
                    })
                })
                .collect();
            if !changed.is_empty() {
                info!(table = %known.qualified_name(), columns = changed.len(), at = %at.position, "column policies changed: a new schema version takes them from here; files written before keep what they hold");
                self.record(
                    &name,
                    Shape::of(&policed),
                    at,
                    Some(POLICY_STATEMENT),
                    false,
                )?;
                self.policy_log.extend(changed);
            }
            current.push(policed);
        }
        let tables: Vec<&TableSchema> = current.iter().chain(&provisional).collect();
        for rule in self.policies.unmatched(&tables) {
            warn!(entry = rule.entry, pattern = %rule.pattern, "[[columns]] entry {} matches no column of a captured table", rule.entry);
        }
        Ok(())
    }

    pub fn is_dirty(&self) -> bool {
        !self.uncommitted.is_empty() || !self.ddl_log.is_empty()
    }

    /// The checkpoint committed: its versions are durable, and the resync
    /// shapes it applied are done with.
    pub fn committed(&mut self) -> Result<()> {
        self.uncommitted.clear();
        self.ddl_log.clear();
        self.policy_log.clear();
        for (t, at) in std::mem::take(&mut self.applied_resyncs) {
            self.history.clear_pending_resync(&t.0, &t.1, &at)?;
        }
        Ok(())
    }

    /// Forgets versions of checkpoints after `committed` (a retry from the
    /// last checkpoint). Bootstrap and policy versions not yet committed are
    /// kept: the re-read starts from the same position they describe (and
    /// the policies of the run's start still hold).
    pub fn rollback(&mut self, committed: u64) -> Result<()> {
        self.history.remove_after(committed)?;
        let bootstrap: Vec<TableVersion> = self
            .uncommitted
            .drain(..)
            .filter(|v| v.statement.as_deref().is_none_or(|s| s == POLICY_STATEMENT))
            .collect();
        for v in &bootstrap {
            self.history.insert(v)?;
        }
        self.uncommitted = bootstrap;
        self.ddl_log.clear();
        self.applied_resyncs.clear();
        self.reload()
    }

    /// Records a new version of `t` in force from `at`.
    fn record(
        &mut self,
        t: &TableName,
        shape: Shape,
        at: &StreamPoint,
        statement: Option<&str>,
        dropped: bool,
    ) -> Result<Arc<TableSchema>> {
        self.record_as(t, shape, at, statement, dropped, true)
    }

    /// [`Self::record`], with the `[[columns]]` policies assigned by the
    /// table's name or (a routed table's) kept as the shape has them.
    fn record_as(
        &mut self,
        t: &TableName,
        shape: Shape,
        at: &StreamPoint,
        statement: Option<&str>,
        dropped: bool,
        police: bool,
    ) -> Result<Arc<TableSchema>> {
        // Lake names come from this table's history, never from the shape
        // a DDL derived (a renamed column is a new lake column).
        let earlier = self.history.versions(&t.0, &t.1)?;
        let mut columns = shape.columns;
        for c in &mut columns {
            c.lake_name.clear();
        }
        super::lake_names::assign(&earlier, &mut columns);
        let mut schema = TableSchema {
            database: t.0.clone(),
            name: t.1.clone(),
            version: earlier.last().map_or(0, |v| v.schema.version) + 1,
            columns,
            charset: shape.charset,
            unique_keys: shape.unique_keys,
        };
        // Before the version exists: a DDL that makes an excluded column
        // part of the key stops here, before any row of it is written.
        if police {
            self.policies.assign(&mut schema)?;
        }
        let v = TableVersion {
            schema: schema.clone(),
            order_key: at.tx_seq,
            position: at.position.clone(),
            gtid: at.gtid.clone(),
            committed_at: at.committed_at(),
            statement: statement.map(str::to_string),
            dropped,
            checkpoint: at.checkpoint,
        };
        self.history.insert(&v)?;
        self.uncommitted.push(v);
        let schema = Arc::new(schema);
        let map = match police {
            true => &mut self.current,
            false => &mut self.routed,
        };
        if dropped {
            map.remove(t);
        } else {
            map.insert(t.clone(), Arc::clone(&schema));
        }
        Ok(schema)
    }

    /// The shapes read from information_schema for tables the history does
    /// not know, in force from `at`. At the binlog head they are recorded at
    /// once; behind it (`earliest`, an old `{ file, pos }`) they are only
    /// provisional: a `CREATE TABLE` in the stream replaces them, and they
    /// become versions when the stream first needs them, so the history never
    /// claims a table had a shape at a time it did not exist.
    pub fn bootstrap(
        &mut self,
        tables: Vec<TableSchema>,
        at: &StreamPoint,
        at_head: bool,
    ) -> Result<()> {
        for t in tables {
            let key = (t.database.clone(), t.name.clone());
            if self.known(&key) {
                continue;
            }
            if at_head {
                self.record(&key, Shape::of(&t), at, None, false)?;
            } else {
                self.provisional.insert(key, (t, at.clone()));
            }
        }
        Ok(())
    }

    /// Every table of `db` the tracker knows, provisional ones included.
    fn tables_in(&self, db: &str) -> Vec<TableName> {
        self.current
            .keys()
            .chain(self.provisional.keys())
            .filter(|k| k.0 == db)
            .cloned()
            .collect()
    }

    /// The shape in force for `t`, turning a provisional bootstrap into a version.
    pub fn shape(&mut self, t: &TableName) -> Result<Option<Arc<TableSchema>>> {
        if let Some(s) = self.current.get(t) {
            return Ok(Some(Arc::clone(s)));
        }
        match self.provisional.remove(t) {
            Some((schema, at)) => Ok(Some(self.record(
                t,
                Shape::of(&schema),
                &at,
                None,
                false,
            )?)),
            None => Ok(None),
        }
    }

    /// A table that entered capture at `at` under a captured name (a RENAME
    /// from a name not captured), with the shape the server gives it now:
    /// a version of its own, which follows no earlier table of that name.
    pub fn entered_capture(
        &mut self,
        table: &TableSchema,
        at: &StreamPoint,
        statement: &str,
    ) -> Result<Arc<TableSchema>> {
        let key = (table.database.clone(), table.name.clone());
        self.provisional.remove(&key);
        self.record(&key, Shape::of(table), at, Some(statement), false)
    }

    /// Applies `schema resync` shapes recorded for this position.
    pub fn apply_pending_resyncs(
        &mut self,
        tables: &[TableName],
        at: &StreamPoint,
        statement: &str,
    ) -> Result<Vec<TableName>> {
        let mut applied = Vec::new();
        for t in tables {
            if let Some(resync) = self.history.pending_resync(&t.0, &t.1, &at.position)? {
                let charset = match resync.charset {
                    Some(c) => Some(c),
                    None => self.shape(t)?.and_then(|s| s.charset.clone()),
                };
                self.record(
                    t,
                    Shape {
                        columns: resync.columns,
                        charset,
                        unique_keys: resync.unique_keys,
                    },
                    at,
                    Some(statement),
                    false,
                )?;
                self.applied_resyncs.push((t.clone(), at.position.clone()));
                info!(table = %format!("{}.{}", t.0, t.1), at = %at.position, "applied the shape recorded by `schema resync`");
                applied.push(t.clone());
            }
        }
        Ok(applied)
    }

    fn table_charset(&self, db: &str, explicit: Option<String>) -> String {
        explicit
            .or_else(|| self.db_charsets.get(db).cloned())
            .unwrap_or_else(|| self.server_charset.clone())
    }

    /// Applies one DDL statement (`ansi_quotes`: the session's `sql_mode` made
    /// double quotes name quotes, as the Query event says). Statements that touch no captured table
    /// change nothing; one that touches a captured table and cannot be read
    /// is a definite error naming `sluice schema resync`.
    pub fn apply_ddl(
        &mut self,
        statement: &str,
        default_db: &str,
        ansi_quotes: bool,
        at: &StreamPoint,
    ) -> Result<DdlEffects> {
        let mut fx = DdlEffects::default();
        let changes = match parse_ddl_on(statement, default_db, self.server, ansi_quotes) {
            Ok(c) => c,
            Err(why) => {
                let named: Vec<TableName> = match ddl_effect(statement, default_db) {
                    DdlEffect::Tables(t) => t,
                    DdlEffect::DropDatabase(db) => self.tables_in(&db),
                    DdlEffect::None => vec![],
                };
                let captured: Vec<TableName> =
                    named.into_iter().filter(|t| self.captures(t)).collect();
                if captured.is_empty() {
                    return Ok(fx);
                }
                let resolved = self.apply_pending_resyncs(&captured, at, statement)?;
                if let Some(t) = captured.iter().find(|t| !resolved.contains(t)) {
                    let table = format!("{}.{}", t.0, t.1);
                    self.history.set_meta(
                        "blocked_ddl",
                        &json!({"table": table, "file": at.position.file, "pos": at.position.pos, "statement": statement})
                            .to_string(),
                    )?;
                    return Err(Error::UnparseableDdl {
                        table,
                        file: at.position.file.clone(),
                        pos: at.position.pos,
                        statement: one_line(statement),
                        why,
                    });
                }
                fx.captured = true;
                fx.closed = resolved
                    .iter()
                    .map(|t| format!("{}.{}", t.0, t.1))
                    .collect();
                self.log_ddl(statement, default_db, at, &resolved, &[]);
                return Ok(fx);
            }
        };
        let mut touched: Vec<TableName> = Vec::new();
        let mut renamed: Vec<(TableName, TableName)> = Vec::new();
        for change in changes {
            self.apply_change(change, statement, at, &mut fx, &mut touched, &mut renamed)
                .map_err(|message| Error::UnparseableDdl {
                    table: touched
                        .last()
                        .map(|t| format!("{}.{}", t.0, t.1))
                        .unwrap_or_default(),
                    file: at.position.file.clone(),
                    pos: at.position.pos,
                    statement: one_line(statement),
                    why: message,
                })?;
        }
        if fx.captured {
            self.log_ddl(statement, default_db, at, &touched, &renamed);
        }
        fx.renamed = renamed
            .iter()
            .map(|(f, t)| (format!("{}.{}", f.0, f.1), format!("{}.{}", t.0, t.1)))
            .collect();
        Ok(fx)
    }

    /// The last DDL statement applied is followed by a re-read of its
    /// table(s): its manifest entry says so.
    pub fn mark_reread(&mut self) {
        if let Some(entry) = self.ddl_log.last_mut() {
            entry["reread"] = json!(true);
        }
    }

    fn log_ddl(
        &mut self,
        statement: &str,
        db: &str,
        at: &StreamPoint,
        tables: &[TableName],
        renamed: &[(TableName, TableName)],
    ) {
        let name = |t: &TableName| format!("{}.{}", t.0, t.1);
        let versions: BTreeMap<String, u32> = tables
            .iter()
            .filter_map(|t| {
                self.uncommitted
                    .iter()
                    .rev()
                    .find(|v| v.schema.database == t.0 && v.schema.name == t.1)
                    .map(|v| (name(t), v.schema.version))
            })
            .collect();
        let mut entry = json!({
            "position": {"file": at.position.file, "pos": at.position.pos, "gtid": at.gtid},
            "database": if db.is_empty() { None } else { Some(db) },
            "statement": statement,
            "tables": tables.iter().map(name).collect::<Vec<_>>(),
            "schema_versions": versions,
        });
        if !renamed.is_empty() {
            entry["renamed"] = renamed
                .iter()
                .map(|(f, t)| json!({"from": name(f), "to": name(t)}))
                .collect();
        }
        self.ddl_log.push(entry);
    }

    fn apply_change(
        &mut self,
        change: Change,
        statement: &str,
        at: &StreamPoint,
        fx: &mut DdlEffects,
        touched: &mut Vec<TableName>,
        renamed: &mut Vec<(TableName, TableName)>,
    ) -> std::result::Result<(), String> {
        let name = |t: &TableName| format!("{}.{}", t.0, t.1);
        let err = |e: Error| e.to_string();
        match change {
            Change::Create {
                table,
                columns: specs,
                unique_keys,
                charset,
                if_not_exists,
                ..
            } => {
                if !self.captures(&table) || (if_not_exists && self.current.contains_key(&table)) {
                    return Ok(());
                }
                self.provisional.remove(&table);
                touched.push(table.clone());
                let charset = self.table_charset(&table.0, charset);
                let columns = columns_from_specs(&specs, &charset)?;
                let unique_keys = unique_keys_from_specs(&specs, &unique_keys, &columns)?;
                fx.closed.push(name(&table));
                self.record(
                    &table,
                    Shape {
                        columns,
                        charset: Some(charset),
                        unique_keys,
                    },
                    at,
                    Some(statement),
                    false,
                )
                .map_err(err)?;
                fx.captured = true;
            }
            Change::CreateLike {
                table,
                like,
                if_not_exists,
            } => {
                if !self.captures(&table) || (if_not_exists && self.current.contains_key(&table)) {
                    return Ok(());
                }
                self.provisional.remove(&table);
                touched.push(table.clone());
                let source = self.shape(&like).map_err(err)?.ok_or_else(|| {
                    format!(
                        "the shape of {} (the LIKE source) is not in the schema history",
                        name(&like)
                    )
                })?;
                fx.closed.push(name(&table));
                self.record(&table, Shape::of(&source), at, Some(statement), false)
                    .map_err(err)?;
                fx.captured = true;
            }
            Change::CreateAsSelect { table } => {
                if self.captures(&table) {
                    // The shape comes from the first TABLE_MAP (FULL metadata) or is an error there.
                    touched.push(table.clone());
                    fx.closed.push(name(&table));
                    self.current.remove(&table);
                    fx.captured = true;
                }
            }
            Change::Alter { table, ops } => {
                let Some(base) = self.shape(&table).map_err(err)? else {
                    if self.captures(&table) {
                        touched.push(table.clone());
                        return Err(format!(
                            "ALTER TABLE of {} whose shape is not in the schema history",
                            name(&table)
                        ));
                    }
                    // `ALTER TABLE uncaptured … RENAME TO captured` brings a
                    // table into capture, as RENAME TABLE does.
                    let renamed_to = ops.iter().rev().find_map(|op| match op {
                        AlterOp::RenameTo(to) => Some(to.clone()),
                        _ => None,
                    });
                    if let Some(to) = renamed_to.filter(|to| self.captures(to)) {
                        fx.captured = true;
                        renamed.push((table.clone(), to.clone()));
                        touched.push(to.clone());
                        fx.closed.push(name(&to));
                        self.current.remove(&to);
                        fx.entered.push(to);
                    }
                    return Ok(());
                };
                touched.push(table.clone());
                let altered = apply_alter(&base, &ops)?;
                fx.captured = true;
                fx.closed.push(name(&table));
                // Only a captured table's rows are re-read (a table left
                // out by the filter may still have a shape in the history).
                let lands = match &altered.renamed_to {
                    Some(to) if *to != table => to.clone(),
                    _ => table.clone(),
                };
                let lands = self.captures(&lands).then_some(lands);
                if let Some(lands) = lands {
                    let after = TableSchema {
                        database: lands.0.clone(),
                        name: lands.1.clone(),
                        version: base.version + 1,
                        columns: altered.columns.clone(),
                        charset: Some(altered.charset.clone()),
                        unique_keys: altered.unique_keys.clone(),
                    };
                    let step = ColumnStep::of_alter(&altered.columns, &altered.origins, &ops);
                    if let Some(why) = needs_reread(&base, &after, &step) {
                        fx.rereads.push((name(&lands), why));
                    }
                }
                match altered.renamed_to {
                    Some(to) if to != table => {
                        self.record(&table, Shape::of(&base), at, Some(statement), true)
                            .map_err(err)?;
                        renamed.push((table.clone(), to.clone()));
                        if self.captures(&to) {
                            touched.push(to.clone());
                            fx.closed.push(name(&to));
                            self.record(
                                &to,
                                Shape {
                                    columns: altered.columns,
                                    charset: Some(altered.charset),
                                    unique_keys: altered.unique_keys,
                                },
                                at,
                                Some(statement),
                                false,
                            )
                            .map_err(err)?;
                        }
                    }
                    _ => {
                        self.record(
                            &table,
                            Shape {
                                columns: altered.columns,
                                charset: Some(altered.charset),
                                unique_keys: altered.unique_keys,
                            },
                            at,
                            Some(statement),
                            false,
                        )
                        .map_err(err)?;
                    }
                }
            }
            Change::Rename(pairs) => {
                for (from, to) in pairs {
                    let shape = self.shape(&from).map_err(err)?;
                    if !self.captures(&from) && !self.captures(&to) {
                        continue;
                    }
                    fx.captured = true;
                    renamed.push((from.clone(), to.clone()));
                    if let Some(shape) = &shape {
                        touched.push(from.clone());
                        fx.closed.push(name(&from));
                        self.record(&from, Shape::of(shape), at, Some(statement), true)
                            .map_err(err)?;
                    }
                    if self.captures(&to) {
                        touched.push(to.clone());
                        fx.closed.push(name(&to));
                        match shape {
                            Some(shape) => {
                                self.record(&to, Shape::of(&shape), at, Some(statement), false)
                                    .map_err(err)?;
                            }
                            None => {
                                // Renamed from a table we do not track: its shape comes from
                                // the server ([`Self::entered_capture`]), else from FULL
                                // metadata at the first TABLE_MAP, or is an error there.
                                self.current.remove(&to);
                                fx.entered.push(to.clone());
                            }
                        }
                    }
                }
            }
            Change::Drop(tables) => {
                for t in tables {
                    if let Some(shape) = self.shape(&t).map_err(err)? {
                        touched.push(t.clone());
                        fx.captured = true;
                        fx.markers.push(Arc::clone(&shape));
                        fx.closed.push(name(&t));
                        self.record(&t, Shape::of(&shape), at, Some(statement), true)
                            .map_err(err)?;
                    }
                }
            }
            Change::Truncate(t) => {
                if let Some(shape) = self.shape(&t).map_err(err)? {
                    touched.push(t.clone());
                    fx.captured = true;
                    fx.markers.push(shape);
                    fx.closed.push(name(&t));
                }
            }
            Change::CreateDatabase { db, charset } => {
                let cs = charset.unwrap_or_else(|| self.server_charset.clone());
                self.db_charsets.insert(db, cs);
            }
            Change::AlterDatabase { db, charset } => {
                self.db_charsets.insert(db, charset);
            }
            Change::DropDatabase(db) => {
                let tables: Vec<TableName> = self.tables_in(&db);
                self.apply_change(Change::Drop(tables), statement, at, fx, touched, renamed)?;
                self.db_charsets.remove(&db);
            }
        }
        Ok(())
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::testing::table_schema;
    use crate::types::ColumnKind;

    #[test]
    fn a_derived_shape_keeps_the_address_types_the_history_knew() {
        let known = table_schema(&[("id", "int"), ("a", "inet4"), ("b", "inet6"), ("u", "uuid")]);
        // What FULL metadata shows: BINARY of the same widths; `u` now 4 wide
        // and a new BINARY(16) column the history never saw.
        let derived = table_schema(&[
            ("id", "int"),
            ("a", "binary(4)"),
            ("b", "binary(16)"),
            ("u", "binary(4)"),
            ("n", "binary(16)"),
        ]);
        let mut columns = derived.columns.clone();
        keep_known_fixed_binary_types(&mut columns, &known);
        let kinds: Vec<ColumnKind> = columns.iter().map(|c| c.kind.clone()).collect();
        assert_eq!(
            kinds[1..],
            [
                ColumnKind::Inet4,
                ColumnKind::Inet6,
                ColumnKind::Binary { pad_to: Some(4) },
                ColumnKind::Binary { pad_to: Some(16) },
            ]
        );
        assert_eq!(columns[2].mysql_type, "inet6");
    }
}
