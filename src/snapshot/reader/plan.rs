//! The plan of a snapshot: which captured tables exist, with the server's
//! row estimate, read for all tables at once.

use std::collections::{BTreeSet, HashMap};

use mysql_async::prelude::*;

use super::key::{all_key_columns, key_columns};
use super::{keyless_under_watermark, resolve_method};
use crate::config::{SnapshotMethod, SourceConfig};
use crate::error::{Error, Result};
use crate::source;

/// Engine, row estimate, whether the engine has transactions, table type.
type TableFacts = (Option<String>, Option<u64>, Option<String>, String);

/// The snapshot of a new lake: every captured table that exists, with the
/// server's row estimate. A table a consistent read cannot cover (MyISAM,
/// Aria: no transactions) is a definite error naming it and the ways out.
pub async fn plan(
    cfg: &SourceConfig,
    method: SnapshotMethod,
    tables: &[(String, String)],
) -> Result<super::super::SnapshotProgress> {
    let mut progress = super::super::SnapshotProgress::new();
    if tables.is_empty() {
        return Ok(progress);
    }
    let mut conn = source::connect(cfg).await?;
    let watermark = resolve_method(&mut conn, method).await? == SnapshotMethod::Watermark;
    let q = |e: mysql_async::Error| Error::Preflight(format!("snapshot plan: {e}"));
    // Every table of the databases at once, and (for the watermark method)
    // their keys: a thousand tables asked one by one cost seconds.
    let databases: Vec<&str> = tables
        .iter()
        .map(|(db, _)| db.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let marks = vec!["?"; databases.len()].join(", ");
    let mut facts: HashMap<(String, String), TableFacts> = conn
        .exec::<(String, String, Option<String>, Option<u64>, Option<String>, String), _, _>(
            format!(
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, t.ENGINE, t.TABLE_ROWS, e.TRANSACTIONS, t.TABLE_TYPE FROM information_schema.TABLES t \
                 LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE \
                 WHERE t.TABLE_SCHEMA IN ({marks})"
            ),
            databases.clone(),
        )
        .await
        .map_err(q)?
        .into_iter()
        .map(|(db, name, engine, rows, transactions, kind)| ((db, name), (engine, rows, transactions, kind)))
        .collect();
    let mut keys = match watermark {
        true => all_key_columns(&mut conn, &databases).await?,
        false => HashMap::new(),
    };
    for (db, name) in tables {
        let Some((engine, estimate, transactions, kind)) =
            facts.remove(&(db.clone(), name.clone()))
        else {
            continue;
        };
        if kind != "BASE TABLE" && kind != "SYSTEM VERSIONED" {
            continue;
        }
        if transactions.as_deref() != Some("YES") {
            let engine = engine.unwrap_or_else(|| "unknown".into());
            return Err(Error::Snapshot {
                table: format!("{db}.{name}"),
                message: format!(
                    "engine {engine} has no transactions, so no consistent read can cover it; exclude the table ([filter] exclude), convert it (ALTER TABLE `{db}`.`{name}` ENGINE=InnoDB), or set [snapshot] mode = \"never\""
                ),
            });
        }
        let key = match keys.remove(&(db.clone(), name.clone())) {
            Some(key) => key,
            None if watermark => key_columns(&mut conn, db, name).await?,
            None => None,
        };
        if watermark && key.is_none() {
            return Err(keyless_under_watermark(&format!("{db}.{name}")));
        }
        progress.insert(
            format!("{db}.{name}"),
            super::super::TableSnapshot::new(estimate.unwrap_or(0)),
        );
    }
    let _ = conn.disconnect().await;
    Ok(progress)
}
