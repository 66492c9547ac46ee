//! The shape of a table as a TABLE_MAP event shows it, checked against the
//! schema history; a FULL-metadata TABLE_MAP defines a derived version
//! where the two disagree or the history has none.

use std::sync::Arc;

use mysql_common::binlog::events::TableMapEvent;
use tracing::warn;

use super::super::apply::derive_from_table_map;
use super::super::plan::TablePlan;
use super::super::{ColumnDef, TableSchema, UniqueKey};
use super::{SchemaTracker, Shape, StreamPoint};
use crate::error::{Error, Result};

impl SchemaTracker {
    /// The decode plan for a TABLE_MAP of a captured table: the version in
    /// force, checked against the binlog. When they disagree, or the shape
    /// is unknown, a FULL-metadata TABLE_MAP defines a derived version;
    /// without that metadata it is an error with both shapes. The columns
    /// at `compressed` hold MariaDB's compressed values
    /// ([`crate::decode::compressed::plain_table_map`]).
    pub fn plan_for(
        &mut self,
        tme: &TableMapEvent<'_>,
        compressed: &[usize],
        at: &StreamPoint,
    ) -> Result<Option<Arc<TablePlan>>> {
        let key = (
            tme.database_name().into_owned(),
            tme.table_name().into_owned(),
        );
        if !self.captures(&key) {
            return Ok(None);
        }
        let table = format!("{}.{}", key.0, key.1);
        let schema_err = |message: String| Error::Schema {
            table: table.clone(),
            message,
        };
        let derived = || {
            derive_from_table_map(tme, compressed)
                .map_err(|m| schema_err(format!("at {}: {m}", at.position)))
        };
        let problem = match self.shape(&key)? {
            Some(schema) => match TablePlan::with_compressed(Arc::clone(&schema), tme, compressed) {
                Ok(plan) => match names_disagree(&schema, tme) {
                    None => return Ok(Some(Arc::new(plan))),
                    Some(p) => p,
                },
                Err(p) => p,
            },
            None => format!(
                "the table's shape at {} is not in the schema history (created before the start position, or by a statement that does not state its columns)",
                at.position
            ),
        };
        match derived()? {
            Some(mut columns) => {
                if let Some(known) = self.current.get(&key) {
                    keep_known_fixed_binary_types(&mut columns, known);
                }
                warn!(%table, at = %at.position, %problem, "taking the table's shape from the binlog's FULL metadata");
                let charset = self.current.get(&key).and_then(|s| s.charset.clone());
                // The TABLE_MAP tells no unique keys: those known that still fit.
                let unique_keys = self
                    .current
                    .get(&key)
                    .map(|s| kept_unique_keys(&s.unique_keys, &columns))
                    .unwrap_or_default();
                let schema = self.record(&key, Shape { columns, charset, unique_keys }, at, Some("-- derived from TABLE_MAP (binlog_row_metadata=FULL)"), false)?;
                let plan = TablePlan::with_compressed(schema, tme, compressed).map_err(|m| schema_err(format!("at {}: {m}", at.position)))?;
                self.log_ddl("-- derived from TABLE_MAP (binlog_row_metadata=FULL)", &key.0, at, std::slice::from_ref(&key), &[]);
                Ok(Some(Arc::new(plan)))
            }
            None => Err(schema_err(format!(
                "at {}: {problem}; the shape cannot be established without binlog_row_metadata=FULL: start from a position before the table's CREATE TABLE, or record its shape with `sluice schema resync`",
                at.position
            ))),
        }
    }
}

/// The unique keys of `keys` whose columns all exist in `columns`.
pub(super) fn kept_unique_keys(keys: &[UniqueKey], columns: &[ColumnDef]) -> Vec<UniqueKey> {
    let mut kept: Vec<UniqueKey> = keys
        .iter()
        .filter(|k| {
            k.columns
                .iter()
                .all(|n| columns.iter().any(|c| c.name.eq_ignore_ascii_case(n)))
        })
        .cloned()
        .collect();
    super::super::sort_unique_keys(columns, &mut kept);
    kept
}

/// The TABLE_MAP shows MariaDB's INET4, INET6 and UUID as BINARY(4) and
/// BINARY(16), charset binary, and nothing else: a column the history knew
/// by that name as one of those types, with that width, stays one.
pub(super) fn keep_known_fixed_binary_types(derived: &mut [ColumnDef], known: &TableSchema) {
    for column in derived.iter_mut() {
        let width = match column.mysql_type.as_str() {
            "binary(4)" => 4,
            "binary(16)" => 16,
            _ => continue,
        };
        let same = known.columns.iter().find(|k| k.name == column.name);
        if let Some(k) = same.filter(|k| match k.kind {
            crate::types::ColumnKind::Inet4 => width == 4,
            crate::types::ColumnKind::Inet6 | crate::types::ColumnKind::Uuid => width == 16,
            _ => false,
        }) {
            column.mysql_type = k.mysql_type.clone();
            column.kind = k.kind.clone();
        }
    }
}

/// With FULL metadata, the TABLE_MAP names the columns: they must match.
fn names_disagree(schema: &TableSchema, tme: &TableMapEvent<'_>) -> Option<String> {
    use mysql_common::binlog::events::OptionalMetadataField;
    for field in tme.iter_optional_meta().flatten() {
        if let OptionalMetadataField::ColumnName(cn) = field {
            let names: Vec<String> = cn
                .iter_names()
                .filter_map(|r| r.ok())
                .map(|c| c.name().into_owned())
                .collect();
            let ours: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
            if !names.iter().map(String::as_str).eq(ours.iter().copied()) {
                return Some(format!(
                    "the binlog names the columns ({}), the schema history has ({})",
                    names.join(", "),
                    ours.join(", ")
                ));
            }
        }
    }
    None
}
