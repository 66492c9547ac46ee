//! The table-meta time series: every version of every captured table's
//! shape, keyed by the stream position it takes effect at. SQLite in the
//! state dir is the working copy; the lake holds the durable copy, written
//! with the checkpoint that contains the DDL (see [`lake_path`]).

use std::path::Path as FsPath;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use super::{ColumnDef, TableSchema, UniqueKey};
use crate::error::{Error, Result};
use crate::lake::manifest::Manifest;
use crate::types::binlog::BinlogPosition;

const MIGRATIONS: &str = include_str!("../../schemas/table_meta.sql");
pub const LAKE_DIR: &str = "_sluice/schema";

/// A shape `schema resync` recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct ResyncShape {
    pub columns: Vec<ColumnDef>,
    pub unique_keys: Vec<UniqueKey>,
    /// The table's default charset, when recorded.
    pub charset: Option<String>,
}

/// One version of one table's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TableVersion {
    pub schema: TableSchema,
    /// The `_tx_seq` from which this version is in force.
    pub order_key: i64,
    pub position: BinlogPosition,
    pub gtid: Option<String>,
    pub committed_at: String,
    /// The DDL statement; `None` for a bootstrap from information_schema.
    pub statement: Option<String>,
    pub dropped: bool,
    /// The manifest seq of the checkpoint that commits this version.
    pub checkpoint: u64,
}

fn columns_json(columns: &[ColumnDef]) -> serde_json::Value {
    columns
        .iter()
        .map(|c| {
            let labels = match &c.kind {
                crate::types::ColumnKind::Enum { labels }
                | crate::types::ColumnKind::Set { labels } => {
                    json!(labels.iter().collect::<Vec<_>>())
                }
                _ => serde_json::Value::Null,
            };
            json!({
                "name": c.name,
                "lake_name": (!c.lake_name.is_empty()).then_some(&c.lake_name),
                "mysql_type": c.mysql_type,
                "arrow_type": c.lake_type().to_string(),
                "policy": c.policy.map(|p| p.name()),
                "nullable": c.nullable,
                "primary_key": c.primary_key,
                "key_position": c.key_position,
                "charset": c.charset,
                "labels": labels,
            })
        })
        .collect()
}

fn unique_keys_json(keys: &[UniqueKey]) -> serde_json::Value {
    keys.iter()
        .map(|k| {
            json!({
                "name": k.name,
                "columns": k.columns,
                "prefix": k.prefix,
                "hash": k.hash,
            })
        })
        .collect()
}

/// Absent or null (a history written before unique keys were recorded): none.
fn unique_keys_from_json(
    v: Option<&serde_json::Value>,
) -> std::result::Result<Vec<UniqueKey>, String> {
    let Some(list) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list.as_array().ok_or("unique_keys is not a list")?;
    list.iter()
        .map(|k| {
            let b = |f: &str| k.get(f).and_then(|v| v.as_bool()).unwrap_or(false);
            Ok(UniqueKey {
                name: k
                    .get("name")
                    .and_then(|n| n.as_str())
                    .ok_or("a unique key without a name")?
                    .to_string(),
                columns: k
                    .get("columns")
                    .and_then(|c| c.as_array())
                    .ok_or("a unique key without columns")?
                    .iter()
                    .map(|c| {
                        c.as_str()
                            .map(str::to_string)
                            .ok_or("a column name that is no string")
                    })
                    .collect::<std::result::Result<_, _>>()?,
                prefix: b("prefix"),
                hash: b("hash"),
            })
        })
        .collect()
}

/// The stored text of a unique-keys column (NULL when empty, as rows from
/// before the column read).
fn unique_keys_text(keys: &[UniqueKey]) -> Option<String> {
    (!keys.is_empty()).then(|| unique_keys_json(keys).to_string())
}

fn unique_keys_from_text(text: Option<&str>) -> std::result::Result<Vec<UniqueKey>, String> {
    match text {
        None => Ok(Vec::new()),
        Some(t) => {
            let v: serde_json::Value = serde_json::from_str(t).map_err(|e| e.to_string())?;
            unique_keys_from_json(Some(&v))
        }
    }
}

fn columns_from_json(v: &serde_json::Value) -> std::result::Result<Vec<ColumnDef>, String> {
    let list = v.as_array().ok_or("columns is not a list")?;
    list.iter()
        .map(|c| {
            let s = |k: &str| c.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let b = |k: &str| c.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
            let mut column = ColumnDef::new(
                s("name").ok_or("column without a name")?,
                s("mysql_type").ok_or("column without a mysql_type")?,
                s("charset"),
                b("nullable"),
                b("primary_key"),
            )?;
            // Absent in versions stored before lake names: named on load.
            column.lake_name = s("lake_name").unwrap_or_default();
            // Absent in versions stored before key order: the key folds in
            // table order (`TableSchema::primary_key`).
            column.key_position = match c.get("key_position") {
                None | Some(serde_json::Value::Null) => None,
                Some(v) => Some(
                    v.as_u64()
                        .and_then(|p| u32::try_from(p).ok())
                        .filter(|p| *p > 0)
                        .ok_or_else(|| {
                            format!(
                                "column `{}`: key_position {v} is no place in a key",
                                column.name
                            )
                        })?,
                ),
            }
            .filter(|_| column.primary_key);
            // Absent (or null) in versions without a column policy.
            column.policy = match s("policy") {
                Some(p) => Some(
                    super::policy::PolicyAction::parse(&p)
                        .ok_or_else(|| format!("column policy `{p}` is not one sluice writes"))?,
                ),
                None => None,
            };
            Ok(column)
        })
        .collect()
}

impl TableVersion {
    pub fn qualified_name(&self) -> String {
        self.schema.qualified_name()
    }

    /// The JSON form used in the lake and by `schema show --json`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "table": self.qualified_name(),
            "version": self.schema.version,
            "order_key": self.order_key,
            "position": {"file": self.position.file, "pos": self.position.pos, "gtid": self.gtid},
            "committed_at": self.committed_at,
            "statement": self.statement,
            "dropped": self.dropped,
            "checkpoint": self.checkpoint,
            "charset": self.schema.charset,
            "columns": columns_json(&self.schema.columns),
            "unique_keys": unique_keys_json(&self.schema.unique_keys),
        })
    }

    pub fn from_json(v: &serde_json::Value) -> std::result::Result<Self, String> {
        let table = v.get("table").and_then(|t| t.as_str()).ok_or("no table")?;
        let (db, name) = table.split_once('.').ok_or("table is not db.table")?;
        let pos = v.get("position").ok_or("no position")?;
        let int = |x: Option<&serde_json::Value>, what: &str| {
            x.and_then(|x| x.as_i64())
                .ok_or_else(|| format!("no {what}"))
        };
        Ok(TableVersion {
            schema: TableSchema {
                database: db.to_string(),
                name: name.to_string(),
                version: int(v.get("version"), "version")? as u32,
                columns: columns_from_json(v.get("columns").unwrap_or(&serde_json::Value::Null))?,
                charset: v
                    .get("charset")
                    .and_then(|c| c.as_str())
                    .map(str::to_string),
                unique_keys: unique_keys_from_json(v.get("unique_keys"))?,
            },
            order_key: int(v.get("order_key"), "order_key")?,
            position: BinlogPosition {
                file: pos
                    .get("file")
                    .and_then(|f| f.as_str())
                    .ok_or("no position.file")?
                    .to_string(),
                pos: int(pos.get("pos"), "position.pos")? as u64,
            },
            gtid: pos.get("gtid").and_then(|g| g.as_str()).map(str::to_string),
            committed_at: v
                .get("committed_at")
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_string(),
            statement: v
                .get("statement")
                .and_then(|s| s.as_str())
                .map(str::to_string),
            dropped: v.get("dropped").and_then(|d| d.as_bool()).unwrap_or(false),
            checkpoint: int(v.get("checkpoint"), "checkpoint")? as u64,
        })
    }
}

/// Where a version lives in the lake. The checkpoint seq in the name lets
/// start-up drop versions of checkpoints that never committed; the writer id
/// keeps a fenced writer from overwriting the owner's objects.
pub fn lake_path(v: &TableVersion, writer: &str) -> Path {
    Path::from_iter([
        "_sluice".to_string(),
        "schema".to_string(),
        v.schema.database.clone(),
        v.schema.name.clone(),
        format!(
            "v{:010}-{:020}-{writer}.json",
            v.schema.version, v.checkpoint
        ),
    ])
}

/// `(checkpoint seq, writer id)` from a version object's name.
pub(crate) fn checkpoint_of(name: &str) -> Option<(u64, String)> {
    let mut parts = name.strip_suffix(".json")?.split('-');
    let _version = parts.next()?;
    let ckpt = parts.next()?.parse().ok()?;
    Some((ckpt, parts.next()?.to_string()))
}

/// A point of the stream to ask "what did the table look like then".
#[derive(Debug, Clone, PartialEq)]
pub enum PointInTime {
    Position(BinlogPosition),
    /// A GTID `domain-server-seq` (MariaDB) or `uuid:n` (MySQL).
    Gtid(String),
    Time(chrono::DateTime<chrono::Utc>),
}

impl PointInTime {
    /// `FILE:POS`, a GTID, or an RFC 3339 time.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
            return Ok(PointInTime::Time(t.with_timezone(&chrono::Utc)));
        }
        if let Some((file, pos)) = s.rsplit_once(':') {
            if let Ok(pos) = pos.parse::<u64>() {
                if file.contains('.') && !file.contains('-') {
                    return Ok(PointInTime::Position(BinlogPosition {
                        file: file.to_string(),
                        pos,
                    }));
                }
                // uuid:n
                return Ok(PointInTime::Gtid(s.to_string()));
            }
        }
        let parts: Vec<&str> = s.split('-').collect();
        if parts.len() == 3 && parts.iter().all(|p| p.parse::<u64>().is_ok()) {
            return Ok(PointInTime::Gtid(s.to_string()));
        }
        Err(format!(
            "`{s}` is not a point in the stream: use FILE:POS (binlog.000003:1234), a GTID (0-1-42 or uuid:42) or an RFC 3339 time"
        ))
    }

    /// Whether a version recorded at (position, gtid, time) is at or before this point.
    fn covers(&self, v: &TableVersion) -> bool {
        match self {
            PointInTime::Position(p) => v.position <= *p,
            PointInTime::Time(t) => chrono::DateTime::parse_from_rfc3339(&v.committed_at)
                .map(|c| c.with_timezone(&chrono::Utc) <= *t)
                .unwrap_or(false),
            PointInTime::Gtid(g) => match (gtid_seq(g), &v.gtid) {
                (Some((domain, seq)), Some(state)) => state
                    .split(',')
                    .filter_map(|x| gtid_seq(x.trim()))
                    .any(|(d, s)| d == domain && s <= seq),
                _ => false,
            },
        }
    }
}

/// `(domain or uuid, sequence)` of a MariaDB or MySQL GTID.
fn gtid_seq(g: &str) -> Option<(String, u64)> {
    if let Some((uuid, n)) = g.rsplit_once(':') {
        let last = n.rsplit('-').next()?;
        return Some((uuid.to_string(), last.parse().ok()?));
    }
    let mut parts = g.split('-');
    let domain = parts.next()?.to_string();
    let _server = parts.next()?;
    Some((domain, parts.next()?.parse().ok()?))
}

pub struct SchemaHistory {
    db: Connection,
}

fn sql_err(e: rusqlite::Error) -> Error {
    Error::State(format!("schema history: {e}"))
}

impl SchemaHistory {
    pub const FILE: &'static str = "schema_history.sqlite";

    /// Opens (creating and migrating) the store in the state dir.
    pub fn open(state_dir: &FsPath) -> Result<Self> {
        std::fs::create_dir_all(state_dir).map_err(|e| {
            Error::State(format!(
                "cannot create state dir {}: {e}",
                state_dir.display()
            ))
        })?;
        let db = Connection::open(state_dir.join(Self::FILE)).map_err(sql_err)?;
        db.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql_err)?;
        db.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql_err)?;
        let history = SchemaHistory { db };
        history.migrate()?;
        Ok(history)
    }

    /// An in-memory store, for tests and for one-shot commands.
    pub fn in_memory() -> Result<Self> {
        let history = SchemaHistory {
            db: Connection::open_in_memory().map_err(sql_err)?,
        };
        history.migrate()?;
        Ok(history)
    }

    fn migrate(&self) -> Result<()> {
        let current: i64 = self
            .db
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql_err)?;
        for (n, block) in MIGRATIONS.split("-- migration ").skip(1).enumerate() {
            let n = n as i64 + 1;
            if n <= current {
                continue;
            }
            let body = block.split_once('\n').map(|(_, b)| b).unwrap_or("");
            let tx = self.db.unchecked_transaction().map_err(sql_err)?;
            tx.execute_batch(body).map_err(sql_err)?;
            tx.pragma_update(None, "user_version", n).map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
        }
        Ok(())
    }

    pub fn insert(&self, v: &TableVersion) -> Result<()> {
        self.db
            .execute(
                "INSERT OR REPLACE INTO table_versions (database, table_name, version, order_key, binlog_file, \
                 binlog_pos, gtid, committed_at, statement, dropped, columns, checkpoint_seq, table_charset, \
                 unique_keys) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    v.schema.database,
                    v.schema.name,
                    v.schema.version,
                    v.order_key,
                    v.position.file,
                    v.position.pos as i64,
                    v.gtid,
                    v.committed_at,
                    v.statement,
                    v.dropped,
                    columns_json(&v.schema.columns).to_string(),
                    v.checkpoint as i64,
                    v.schema.charset,
                    unique_keys_text(&v.schema.unique_keys),
                ],
            )
            .map_err(sql_err)?;
        Ok(())
    }

    /// Rollback: forgets versions of checkpoints after `committed`.
    pub fn remove_after(&self, committed: u64) -> Result<usize> {
        self.db
            .execute(
                "DELETE FROM table_versions WHERE checkpoint_seq > ?1",
                [committed as i64],
            )
            .map_err(sql_err)
    }

    /// Versions as stored, then those stored before lake names were
    /// recorded named by the same rule, from their table's whole history.
    fn query(&self, where_sql: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<TableVersion>> {
        let mut out = self.query_stored(where_sql, args)?;
        let unnamed: std::collections::BTreeSet<(String, String)> = out
            .iter()
            .filter(|v| v.schema.columns.iter().any(|c| c.lake_name.is_empty()))
            .map(|v| (v.schema.database.clone(), v.schema.name.clone()))
            .collect();
        for (db, table) in unnamed {
            let mut all =
                self.query_stored("WHERE database = ?1 AND table_name = ?2", &[&db, &table])?;
            super::lake_names::fill_history(&mut all);
            for v in out
                .iter_mut()
                .filter(|v| v.schema.database == db && v.schema.name == table)
            {
                if let Some(named) = all.iter().find(|a| a.schema.version == v.schema.version) {
                    v.schema.columns.clone_from(&named.schema.columns);
                }
            }
        }
        Ok(out)
    }

    fn query_stored(
        &self,
        where_sql: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<TableVersion>> {
        let sql = format!(
            "SELECT database, table_name, version, order_key, binlog_file, binlog_pos, gtid, committed_at, \
             statement, dropped, columns, checkpoint_seq, table_charset, unique_keys FROM table_versions {where_sql} \
             ORDER BY database, table_name, version"
        );
        let mut stmt = self.db.prepare(&sql).map_err(sql_err)?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, u32>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, Option<String>>(8)?,
                    r.get::<_, bool>(9)?,
                    r.get::<_, String>(10)?,
                    r.get::<_, i64>(11)?,
                    r.get::<_, Option<String>>(12)?,
                    r.get::<_, Option<String>>(13)?,
                ))
            })
            .map_err(sql_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (
                db,
                table,
                version,
                order_key,
                file,
                pos,
                gtid,
                committed_at,
                statement,
                dropped,
                columns,
                ckpt,
                charset,
                unique_keys,
            ) = row.map_err(sql_err)?;
            let columns: serde_json::Value = serde_json::from_str(&columns)
                .map_err(|e| Error::State(format!("schema history of {db}.{table}: {e}")))?;
            let columns = columns_from_json(&columns)
                .map_err(|e| Error::State(format!("schema history of {db}.{table}: {e}")))?;
            let unique_keys = unique_keys_from_text(unique_keys.as_deref())
                .map_err(|e| Error::State(format!("schema history of {db}.{table}: {e}")))?;
            out.push(TableVersion {
                schema: TableSchema {
                    database: db,
                    name: table,
                    version,
                    columns,
                    charset,
                    unique_keys,
                },
                order_key,
                position: BinlogPosition {
                    file,
                    pos: pos as u64,
                },
                gtid,
                committed_at,
                statement,
                dropped,
                checkpoint: ckpt as u64,
            });
        }
        Ok(out)
    }

    /// Every version of one table, oldest first.
    pub fn versions(&self, db: &str, table: &str) -> Result<Vec<TableVersion>> {
        self.query("WHERE database = ?1 AND table_name = ?2", &[&db, &table])
    }

    /// The newest version of every table.
    pub fn latest_all(&self) -> Result<Vec<TableVersion>> {
        self.query(
            "WHERE version = (SELECT MAX(version) FROM table_versions v \
             WHERE v.database = table_versions.database AND v.table_name = table_versions.table_name)",
            &[],
        )
    }

    /// The newest version whose position is at or before `at`.
    pub fn at(&self, db: &str, table: &str, at: &PointInTime) -> Result<Option<TableVersion>> {
        Ok(self
            .versions(db, table)?
            .into_iter()
            .rfind(|v| at.covers(v)))
    }

    pub fn contains(&self, db: &str, table: &str, version: u32) -> Result<bool> {
        self.db
            .query_row(
                "SELECT 1 FROM table_versions WHERE database = ?1 AND table_name = ?2 AND version = ?3",
                params![db, table, version],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(sql_err)
    }

    /// Records a shape to apply when the stream reaches `at` (`schema resync`).
    /// Shapes are kept per position: a table may have any number pending.
    pub fn add_pending_resync(&self, schema: &TableSchema, at: &BinlogPosition) -> Result<()> {
        self.db
            .execute(
                "INSERT OR REPLACE INTO pending_resync (database, table_name, binlog_file, binlog_pos, columns, table_charset, \
                 unique_keys) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    schema.database,
                    schema.name,
                    at.file,
                    at.pos as i64,
                    columns_json(&schema.columns).to_string(),
                    schema.charset,
                    unique_keys_text(&schema.unique_keys),
                ],
            )
            .map_err(sql_err)?;
        Ok(())
    }

    /// The resync shape recorded for this table at position `at`: its columns,
    /// its unique keys and, when recorded, the table's default charset.
    pub fn pending_resync(
        &self,
        db: &str,
        table: &str,
        at: &BinlogPosition,
    ) -> Result<Option<ResyncShape>> {
        let row: Option<(String, Option<String>, Option<String>)> = self
            .db
            .query_row(
                "SELECT columns, table_charset, unique_keys FROM pending_resync WHERE database = ?1 \
                 AND table_name = ?2 AND binlog_file = ?3 AND binlog_pos = ?4",
                params![db, table, at.file, at.pos as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(sql_err)?;
        match row {
            None => Ok(None),
            Some((text, charset, keys)) => {
                let bad = |e: String| Error::State(format!("pending resync: {e}"));
                let v: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
                Ok(Some(ResyncShape {
                    columns: columns_from_json(&v).map_err(bad)?,
                    unique_keys: unique_keys_from_text(keys.as_deref()).map_err(bad)?,
                    charset,
                }))
            }
        }
    }

    /// Every pending resync, as (table, position), oldest position first.
    pub fn pending_resyncs(&self) -> Result<Vec<(String, String, BinlogPosition)>> {
        let mut stmt = self
            .db
            .prepare(
                "SELECT database, table_name, binlog_file, binlog_pos FROM pending_resync \
                 ORDER BY binlog_file, binlog_pos",
            )
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    BinlogPosition {
                        file: r.get(2)?,
                        pos: r.get::<_, i64>(3)? as u64,
                    },
                ))
            })
            .map_err(sql_err)?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .map_err(sql_err)
    }

    /// Forgets one resync shape: the checkpoint that applied it committed.
    pub fn clear_pending_resync(&self, db: &str, table: &str, at: &BinlogPosition) -> Result<()> {
        self.db
            .execute(
                "DELETE FROM pending_resync WHERE database = ?1 AND table_name = ?2 \
                 AND binlog_file = ?3 AND binlog_pos = ?4",
                params![db, table, at.file, at.pos as i64],
            )
            .map_err(sql_err)?;
        Ok(())
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.db
            .execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                params![key, value],
            )
            .map_err(sql_err)?;
        Ok(())
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.db
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(sql_err)
    }

    /// Makes the store agree with the lake at checkpoint `committed`: drops
    /// versions of later (uncommitted) checkpoints here and in the lake, and
    /// loads committed versions the store lacks (a lost state dir). With
    /// `prune` false nothing is deleted: the schema commands may run beside a
    /// live pipeline whose next checkpoint is being written.
    pub async fn sync_with_lake(
        &self,
        store: &dyn ObjectStore,
        committed: u64,
        prune: bool,
    ) -> Result<SyncReport> {
        let mut report = SyncReport {
            rolled_back: if prune {
                self.remove_after(committed)?
            } else {
                0
            },
            ..Default::default()
        };
        // Objects of checkpoints up to the one the last sync reached were
        // loaded or removed then: only later ones cost a read (a start reads
        // the DDL since the last start, not the history since the lake began).
        let synced = self
            .meta("committed_seq")?
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|s| *s <= committed)
            .unwrap_or(0);
        // Below the retention floor the manifests are gone, and retention
        // deleted the objects of other writers than theirs first: the
        // objects there are the committed ones.
        let floor = crate::lake::floor::floor_seq(store).await?;
        let prefix = Path::from(LAKE_DIR);
        let objects: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
        let mut writers: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
        let mut to_load = Vec::new();
        for meta in objects {
            let Some((ckpt, writer)) = meta.location.filename().and_then(checkpoint_of) else {
                continue;
            };
            if ckpt <= synced {
                continue;
            }
            let committed_by = match writers.get(&ckpt) {
                Some(w) => Some(w.clone()),
                None if ckpt < floor => Some(writer.clone()),
                None if ckpt <= committed => {
                    let w = manifest_writer(store, ckpt).await?;
                    writers.insert(ckpt, w.clone());
                    Some(w)
                }
                None => None,
            };
            if ckpt > committed {
                // Not committed yet: a sidecar still running on this lake may
                // commit it. It goes after this run's first commit
                // (`remove_orphan_objects`), if it is not committed by then.
                continue;
            }
            if committed_by.as_deref() != Some(writer.as_str()) {
                // Its checkpoint was committed by another writer: never ours.
                if prune {
                    store.delete(&meta.location).await?;
                    report.orphans_removed += 1;
                }
                continue;
            }
            to_load.push(meta.location);
        }
        // The committed versions, read several at once, loaded in order.
        let read: Vec<(Path, bytes::Bytes)> = futures::stream::iter(to_load)
            .map(|location| async move {
                let bytes = store.get(&location).await?.bytes().await?;
                Ok::<_, Error>((location, bytes))
            })
            .buffered(crate::config::DEFAULT_REQUESTS_IN_FLIGHT)
            .try_collect()
            .await?;
        for (location, bytes) in read {
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| Error::Lake(format!("schema version {location}: {e}")))?;
            let version = TableVersion::from_json(&v)
                .map_err(|e| Error::Lake(format!("schema version {location}: {e}")))?;
            if !self.contains(
                &version.schema.database,
                &version.schema.name,
                version.schema.version,
            )? {
                self.insert(&version)?;
                report.loaded += 1;
            }
        }
        if prune {
            self.set_meta("committed_seq", &committed.to_string())?;
        }
        Ok(report)
    }
}

impl SchemaHistory {
    /// Deletes the schema objects written for checkpoint `seq` by a writer
    /// other than the one that committed it: once `seq` is committed they can
    /// never be.
    pub async fn remove_orphan_objects(&self, store: &dyn ObjectStore, seq: u64) -> Result<usize> {
        let objects: Vec<_> = store
            .list(Some(&Path::from(LAKE_DIR)))
            .try_collect()
            .await?;
        let mut committed_by: Option<String> = None;
        let mut removed = 0;
        for meta in objects {
            let Some((ckpt, writer)) = meta.location.filename().and_then(checkpoint_of) else {
                continue;
            };
            if ckpt != seq {
                continue;
            }
            if committed_by.is_none() {
                committed_by = Some(manifest_writer(store, seq).await?);
            }
            if committed_by.as_deref() != Some(writer.as_str()) {
                store.delete(&meta.location).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub rolled_back: usize,
    pub loaded: usize,
    pub orphans_removed: usize,
}

/// The writer id of the manifest `seq`.
async fn manifest_writer(store: &dyn ObjectStore, seq: u64) -> Result<String> {
    let path = crate::lake::manifest::manifest_path(seq);
    let bytes = store.get(&path).await?.bytes().await?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::Lake(format!("manifest {path}: {e}")))?;
    Ok(v.pointer("/writer/id")
        .and_then(|w| w.as_str())
        .unwrap_or_default()
        .to_string())
}

/// The first column of a stored version (its JSON `columns`) whose stored
/// Arrow type, the type its files hold, is not the one this release maps
/// its MySQL type to: `(column, stored, now)`.
pub fn changed_column_type(
    table: &str,
    columns: &serde_json::Value,
) -> Option<(String, String, String)> {
    let stored = columns.as_array()?;
    let current = columns_from_json(columns).ok()?;
    stored.iter().zip(current).find_map(|(c, def)| {
        let found = c.get("arrow_type")?.as_str()?;
        // The stored type is the column's lake type, its policy applied.
        let now = def.lake_type();
        // Parsed, so that a later arrow printing a type differently is no change.
        let changed = match found.parse::<arrow::datatypes::DataType>() {
            Ok(t) => t != now,
            Err(_) => found != now.to_string(),
        };
        changed.then(|| {
            (
                format!("{table}.{} {}", def.name, def.mysql_type),
                found.to_string(),
                now.to_string(),
            )
        })
    })
}

/// Refuses a lake whose committed files hold types this release no longer
/// writes (the first release's UInt, Duration, Decimal256 and narrow
/// integers): new files would give those columns a second type, which no
/// Delta log can describe. The newest manifest's `types` proves a lake
/// written by this release clean without a read; an older lake has every
/// committed schema version compared with today's mapping (a version's
/// `arrow_type` is what the files written under it hold), once: its next
/// manifest carries `types`.
pub async fn check_lake_types(store: &dyn ObjectStore, newest: &Manifest) -> Result<()> {
    if newest.types >= crate::lake::manifest::TYPES {
        return Ok(());
    }
    let prefix = Path::from(LAKE_DIR);
    let objects: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
    for meta in objects {
        match meta.location.filename().and_then(checkpoint_of) {
            Some((ckpt, _)) if ckpt <= newest.seq => {}
            _ => continue,
        }
        let bytes = store.get(&meta.location).await?.bytes().await?;
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Lake(format!("schema version {}: {e}", meta.location)))?;
        let table = v.get("table").and_then(|t| t.as_str()).unwrap_or_default();
        let columns = v.get("columns").unwrap_or(&serde_json::Value::Null);
        if let Some((column, found, now)) = changed_column_type(table, columns) {
            return Err(Error::OldLakeTypes { column, found, now });
        }
    }
    Ok(())
}

/// Writes a version's durable copy into the lake (before its manifest).
pub async fn put_version(store: &dyn ObjectStore, v: &TableVersion, writer: &str) -> Result<Path> {
    let body = serde_json::to_vec_pretty(&v.to_json()).map_err(|e| Error::Lake(e.to_string()))?;
    let path = lake_path(v, writer);
    store.put(&path, PutPayload::from(body)).await?;
    Ok(path)
}

#[cfg(test)]
mod tests;
