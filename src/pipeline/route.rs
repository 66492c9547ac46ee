//! Shard routing (DESIGN.md "Shard routing"): the rows of every source
//! table a `[[routes]]` entry matches go into one lake table, each with the
//! shard it came from in `_source_db` and `_source_table`.
//!
//! The routed table is a table of the schema history like any other (its
//! versions' statements say which shard's shape made them), so its files,
//! Delta log, current table and readers need nothing of their own. Each
//! shard keeps its own shape in the history and its batches are built in
//! it; on their way to the store they are taken into the routed table's
//! newest version ([`route_batch`]). That version is the union of the
//! shards' columns, matched by name without case, a column's type the
//! changelog supertype of its types in the shards ([`merged_columns`]):
//! columns are only ever added or widened, so one version holds every
//! shard's rows and a new one is recorded only when a shard brings a column
//! or a type the table does not have.
//!
//! `_source_db` and `_source_table` are the table's last two columns (not
//! CDC columns after `_sql`): they are part of the current table's key
//! (unless `unique_key`), and the key is made of table columns.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int64Type, SchemaRef};
use tracing::info;

use super::Pipeline;

use crate::batch::arrow_schema;
use crate::config::{RouteTarget, Routes};
use crate::error::{Error, Result};
use crate::schema::lake_names::{same_name, CDC_COLUMNS, SOURCE_DB, SOURCE_TABLE};
use crate::schema::tracker::StreamPoint;
use crate::schema::{ColumnDef, TableSchema};
use crate::table::supertype::{convert, supertype};
use crate::types::binlog::BinlogPosition;

/// Their type in the history: names of up to 64 characters.
const SOURCE_TYPE: &str = "varchar(64)";

fn route_err(shard: &TableSchema, target: &str, why: String) -> Error {
    Error::Schema {
        table: shard.qualified_name(),
        message: format!("routed into {target}: {why}"),
    }
}

/// A MySQL type whose lake type is `t`, for a column widened to the
/// supertype of its shards' types; `None` where no such type is plain
/// (the column then becomes text).
fn type_for(t: &DataType) -> Option<&'static str> {
    Some(match t {
        DataType::Int64 => "bigint",
        DataType::Float32 => "float",
        DataType::Float64 => "double",
        DataType::Utf8 => "longtext",
        DataType::Binary => "longblob",
        _ => return None,
    })
}

/// A column of type `t` (the supertype of `c`'s and another shard's) in
/// place of `c`.
fn widened(c: &ColumnDef, t: &DataType) -> std::result::Result<ColumnDef, String> {
    let text = match t {
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        t => type_for(t).unwrap_or("longtext").to_string(),
    };
    let charset = (text == "longtext").then(|| "utf8mb4".to_string());
    let mut w = ColumnDef::new(&c.name, text, charset, true, c.primary_key)?;
    if w.lake_type() != *t {
        w = ColumnDef::new(
            &c.name,
            "longtext",
            Some("utf8mb4".into()),
            true,
            c.primary_key,
        )?;
    }
    w.key_position = c.key_position;
    w.policy = c.policy;
    Ok(w)
}

fn source_column(name: &str) -> ColumnDef {
    ColumnDef::new(name, SOURCE_TYPE, Some("utf8mb4".into()), false, false)
        .expect("varchar(64) is a column type")
}

/// The routed table's columns once `shard`'s are in, or `None` when its
/// current version `routed` already holds them (every column, in a type
/// that holds the shard's, and the shard's key). Columns keep their places
/// and are never dropped; the key is the shard's key, plus `_source_db` and
/// `_source_table` unless the route's `unique_key`.
pub fn merged_columns(
    routed: Option<&TableSchema>,
    shard: &TableSchema,
    target: &RouteTarget,
) -> Result<Option<Vec<ColumnDef>>> {
    let err = |why: String| route_err(shard, &target.qualified_name(), why);
    let is_source = |c: &ColumnDef| c.name == SOURCE_DB || c.name == SOURCE_TABLE;
    let mut columns: Vec<ColumnDef> = routed
        .map(|r| {
            r.columns
                .iter()
                .filter(|c| !is_source(c))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let first = routed.is_none();
    let key = shard.fold_key();
    let mut seen = vec![false; columns.len()];
    for c in shard.columns.iter().filter(|c| c.in_lake()) {
        let name = c.lake();
        if same_name(name, SOURCE_DB) || same_name(name, SOURCE_TABLE) {
            return Err(err(format!(
                "its column `{name}` has the name of a column routing adds; rename it or route \
                 the table elsewhere"
            )));
        }
        match columns.iter().position(|u| same_name(&u.name, name)) {
            Some(i) => {
                seen[i] = true;
                columns[i].nullable |= c.nullable;
                let u = &columns[i];
                if u.policy != c.policy {
                    return Err(err(format!(
                        "column `{name}` has another [[columns]] policy than in the shards routed \
                         before it; give the shards' column one policy"
                    )));
                }
                let (have, theirs) = (u.lake_type(), c.lake_type());
                let joined = supertype(&have, &theirs);
                if joined != have {
                    columns[i] = widened(u, &joined).map_err(err)?;
                }
            }
            None => {
                let mut n = c.clone();
                n.name = name.to_string();
                n.lake_name.clear();
                // A column some shard lacks is null in its rows.
                n.nullable = c.nullable || !first;
                columns.push(n);
                seen.push(true);
            }
        }
    }
    for (c, seen) in columns.iter_mut().zip(&seen) {
        if !seen {
            c.nullable = true;
        }
        c.primary_key = false;
        c.key_position = None;
    }
    for (place, k) in key.iter().enumerate() {
        let lake = shard
            .columns
            .iter()
            .find(|c| c.name == *k)
            .map_or(k.as_str(), |c| c.lake());
        if let Some(c) = columns.iter_mut().find(|c| same_name(&c.name, lake)) {
            c.primary_key = true;
            c.key_position = Some(place as u32 + 1);
        }
    }
    let sourced = !target.unique_key && !key.is_empty();
    for (i, name) in [SOURCE_DB, SOURCE_TABLE].into_iter().enumerate() {
        let mut c = source_column(name);
        if sourced {
            c.primary_key = true;
            c.key_position = Some((key.len() + i + 1) as u32);
        }
        columns.push(c);
    }
    let unchanged = routed.is_some_and(|r| {
        r.columns.len() == columns.len()
            && r.columns.iter().zip(&columns).all(|(a, b)| {
                a.name == b.name
                    && a.mysql_type == b.mysql_type
                    && a.nullable == b.nullable
                    && a.primary_key == b.primary_key
                    && a.key_position == b.key_position
                    && a.policy == b.policy
            })
    });
    Ok((!unchanged).then_some(columns))
}

/// `batch`, rows of `shard` in its file schema, as rows of the routed
/// table's version `routed`: each column by name (null where the shard has
/// none) in the routed type, the shard's name in `_source_db` and
/// `_source_table`, the CDC columns as they are.
pub fn route_batch(
    batch: &RecordBatch,
    shard: &TableSchema,
    routed: &TableSchema,
) -> Result<RecordBatch> {
    let schema: SchemaRef = arrow_schema(routed);
    let n = batch.num_rows();
    let sources = batch.schema();
    let table_columns = sources.fields().len().saturating_sub(CDC_COLUMNS.len());
    let err = |e: String| route_err(shard, &routed.qualified_name(), e);
    // The shard's column under the lake name `lake` of the routed table.
    let of_shard = |fields: &Fields, columns: &[ArrayRef], lake: &str, upto: usize| {
        let name = routed
            .columns
            .iter()
            .find(|c| c.lake() == lake)
            .map_or(lake, |c| c.name.as_str());
        fields
            .iter()
            .take(upto)
            .position(|f| same_name(f.name(), name))
            .map(|i| Arc::clone(&columns[i]))
    };
    let fill =
        |field: &Field, fields: &Fields, columns: &[ArrayRef], upto: usize| -> Result<ArrayRef> {
            let name = field.name().as_str();
            if name == SOURCE_DB || name == SOURCE_TABLE {
                let value = match name == SOURCE_DB {
                    true => &shard.database,
                    false => &shard.name,
                };
                return Ok(Arc::new(StringArray::from_iter_values(
                    std::iter::repeat_n(value, n),
                )));
            }
            match of_shard(fields, columns, name, upto) {
                Some(c) if c.data_type() == field.data_type() => Ok(c),
                Some(c) => convert(&c, field.data_type()).map_err(err),
                None => Ok(new_null_array(field.data_type(), n)),
            }
        };
    let mut out: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let name = field.name().as_str();
        let column = if name == "_before" {
            let Some(before) = batch
                .column_by_name("_before")
                .and_then(|b| b.as_any().downcast_ref::<StructArray>())
            else {
                return Err(err("the batch has no `_before`".into()));
            };
            let DataType::Struct(wanted) = field.data_type() else {
                return Err(err("`_before` is not a struct".into()));
            };
            let children = wanted
                .iter()
                .map(|f| fill(f, before.fields(), before.columns(), usize::MAX))
                .collect::<Result<Vec<_>>>()?;
            Arc::new(
                StructArray::try_new(wanted.clone(), children, before.nulls().cloned())
                    .map_err(|e| err(e.to_string()))?,
            ) as ArrayRef
        } else if CDC_COLUMNS.contains(&name) {
            match batch.column_by_name(name) {
                Some(c) => Arc::clone(c),
                None => return Err(err(format!("the batch has no `{name}`"))),
            }
        } else {
            fill(field, sources.fields(), batch.columns(), table_columns)?
        };
        out.push(column);
    }
    RecordBatch::try_new(schema, out).map_err(|e| err(e.to_string()))
}

/// Checks `[[routes]]` against the captured tables at start, before
/// anything is written: no table matched by two routes, and no captured
/// table that is also a route's target.
pub(super) fn check_routes<'a>(
    routes: &Routes,
    tables: impl Iterator<Item = &'a (String, String)>,
) -> Result<()> {
    if routes.is_empty() {
        return Ok(());
    }
    let mut plain = std::collections::BTreeSet::new();
    let mut targets = std::collections::BTreeMap::new();
    for (db, table) in tables {
        let name = format!("{db}.{table}");
        match routes.target(db, table) {
            Err(e) => {
                return Err(Error::Schema {
                    table: name,
                    message: e,
                })
            }
            Ok(Some(t)) => {
                targets.entry(t.qualified_name()).or_insert(name);
            }
            Ok(None) => {
                plain.insert(name);
            }
        }
    }
    match targets.iter().find(|(t, _)| plain.contains(*t)) {
        Some((target, shard)) => Err(Error::Schema {
            table: target.clone(),
            message: format!(
                "it is captured and also the lake table that [[routes]] write {shard} into; \
                 route into another name or leave the table out of [filter]"
            ),
        }),
        None => Ok(()),
    }
}

impl Pipeline<'_> {
    /// A batch of `table` as the lake table it goes into: itself, or the
    /// routed table that `[[routes]]` send it to (whose new version, when
    /// the shard brings columns it lacks, is recorded here, in force from
    /// the batch's first transaction).
    pub(super) fn route(
        &mut self,
        table: Arc<TableSchema>,
        batch: RecordBatch,
    ) -> Result<(Arc<TableSchema>, RecordBatch)> {
        if self.settings.routes.is_empty() {
            return Ok((table, batch));
        }
        let Some(target) = self.route_target(&table)? else {
            return Ok((table, batch));
        };
        let lake = (target.db.clone(), target.table.clone());
        let current = self.tracker.routed_shape(&lake).cloned();
        let routed = match (
            merged_columns(current.as_deref(), &table, &target)?,
            current,
        ) {
            (None, Some(current)) => current,
            // `merged_columns` gives columns for a table without a version.
            (None, None) => {
                return Err(Error::Schema {
                    table: target.qualified_name(),
                    message: "a routed table without a version has no columns (a bug)".into(),
                })
            }
            (Some(columns), _) => {
                let first_tx = batch
                    .column_by_name("_tx_seq")
                    .and_then(|c| arrow::compute::min(c.as_primitive::<Int64Type>()))
                    .unwrap_or(self.next_tx_seq);
                let at = StreamPoint {
                    position: BinlogPosition {
                        file: self.cursor.file.clone(),
                        pos: self.cursor.pos,
                    },
                    gtid: None,
                    timestamp: 0,
                    tx_seq: first_tx,
                    checkpoint: self.next_manifest_seq(),
                };
                let v = self
                    .tracker
                    .record_routed(&lake, columns, &at, &table.qualified_name())?;
                info!(table = %table.qualified_name(), routed = %target.qualified_name(), version = v.version, "a new version of the routed table holds the shard's columns");
                v
            }
        };
        let batch = route_batch(&batch, &table, &routed)?;
        Ok((routed, batch))
    }

    /// The route of a source table; an error when two routes match it, or
    /// when it is itself the target of a route (a lake table cannot be
    /// both).
    fn route_target(&mut self, table: &TableSchema) -> Result<Option<RouteTarget>> {
        let name = table.qualified_name();
        if let Some(known) = self.routed.get(&name) {
            return Ok(known.clone());
        }
        let target = self
            .settings
            .routes
            .target(&table.database, &table.name)
            .map_err(|e| Error::Schema {
                table: name.clone(),
                message: e,
            })?;
        let clash = |shard: &str, other: &str| Error::Schema {
            table: other.to_string(),
            message: format!(
                "it is captured and also the lake table that [[routes]] write {shard} into; \
                 route into another name or leave the table out of [filter]"
            ),
        };
        match &target {
            Some(t) => {
                if let Some((captured, _)) = self
                    .routed
                    .iter()
                    .find(|(n, r)| r.is_none() && **n == t.qualified_name())
                {
                    return Err(clash(&name, captured));
                }
            }
            None => {
                if let Some((shard, _)) = self
                    .routed
                    .iter()
                    .find(|(_, r)| r.as_ref().is_some_and(|r| r.qualified_name() == name))
                {
                    return Err(clash(shard, &name));
                }
            }
        }
        self.routed.insert(name, target.clone());
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(db: &str, name: &str, columns: &[(&str, &str, bool)]) -> TableSchema {
        let mut place = 0;
        TableSchema {
            database: db.into(),
            name: name.into(),
            version: 1,
            columns: columns
                .iter()
                .map(|(n, t, pk)| {
                    let charset = t.contains("char").then(|| "utf8mb4".to_string());
                    let mut c = ColumnDef::new(*n, *t, charset, !pk, *pk).unwrap();
                    if *pk {
                        place += 1;
                        c.key_position = Some(place);
                    }
                    c
                })
                .collect(),
            charset: None,
            unique_keys: Vec::new(),
        }
    }

    fn target(unique_key: bool) -> RouteTarget {
        RouteTarget {
            db: "shop".into(),
            table: "orders".into(),
            unique_key,
        }
    }

    fn routed(columns: Vec<ColumnDef>) -> TableSchema {
        TableSchema {
            database: "shop".into(),
            name: "orders".into(),
            version: 1,
            columns,
            charset: None,
            unique_keys: Vec::new(),
        }
    }

    #[test]
    fn the_routed_table_is_the_union_of_its_shards_in_their_supertypes() {
        let a = table(
            "shop_1",
            "orders",
            &[("id", "int", true), ("qty", "int", false)],
        );
        let b = table(
            "shop_2",
            "orders",
            &[
                ("ID", "bigint", true),
                ("qty", "decimal(10,2)", false),
                ("note", "varchar(10)", false),
            ],
        );
        let first = routed(merged_columns(None, &a, &target(false)).unwrap().unwrap());
        let names: Vec<&str> = first.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "qty", SOURCE_DB, SOURCE_TABLE]);
        assert_eq!(first.fold_key(), ["id", SOURCE_DB, SOURCE_TABLE]);
        // The same shard again: no new version.
        assert!(merged_columns(Some(&first), &a, &target(false))
            .unwrap()
            .is_none());
        let second = routed(
            merged_columns(Some(&first), &b, &target(false))
                .unwrap()
                .unwrap(),
        );
        let got: Vec<(&str, DataType, bool)> = second
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.lake_type(), c.nullable))
            .collect();
        assert_eq!(
            got,
            [
                ("id", DataType::Int64, false),
                ("qty", DataType::Decimal128(21, 2), true),
                ("note", DataType::Utf8, true),
                (SOURCE_DB, DataType::Utf8, false),
                (SOURCE_TABLE, DataType::Utf8, false),
            ]
        );
        // Shard 1 fits the widened table as it is.
        assert!(merged_columns(Some(&second), &a, &target(false))
            .unwrap()
            .is_none());
        let unique = routed(merged_columns(None, &a, &target(true)).unwrap().unwrap());
        assert_eq!(unique.fold_key(), ["id"]);
    }

    #[test]
    fn a_shard_column_named_like_a_routing_column_is_an_error() {
        let a = table(
            "s",
            "t",
            &[("id", "int", true), ("_Source_DB", "int", false)],
        );
        let e = merged_columns(None, &a, &target(false)).unwrap_err();
        assert!(e.to_string().contains("`_Source_DB`"), "{e}");
    }

    #[test]
    fn a_shard_batch_becomes_a_routed_batch_by_name() {
        let a = table(
            "shop_1",
            "orders",
            &[("id", "int", true), ("qty", "int", false)],
        );
        let b = table(
            "shop_2",
            "orders",
            &[("id", "int", true), ("note", "varchar(10)", false)],
        );
        let mut union = routed(merged_columns(None, &a, &target(false)).unwrap().unwrap());
        union = routed(
            merged_columns(Some(&union), &b, &target(false))
                .unwrap()
                .unwrap(),
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(arrow::array::Int64Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec![Some("x"), None])),
        ];
        let batch = crate::batch::snapshot_batch(&b, columns, 7, 3, ("f.1", 4), 0, None).unwrap();
        let out = route_batch(&batch, &b, &union).unwrap();
        assert_eq!(out.schema(), arrow_schema(&union));
        assert_eq!(out.column_by_name("qty").unwrap().null_count(), 2);
        let note = out.column_by_name("note").unwrap().as_string::<i32>();
        assert_eq!((note.value(0), note.is_null(1)), ("x", true));
        let id = out.column_by_name("id").unwrap();
        assert_eq!(
            id.as_primitive::<arrow::datatypes::Int64Type>().values(),
            &[1, 2]
        );
        let db = out.column_by_name(SOURCE_DB).unwrap().as_string::<i32>();
        assert_eq!((db.value(0), db.value(1)), ("shop_2", "shop_2"));
        let t = out.column_by_name(SOURCE_TABLE).unwrap().as_string::<i32>();
        assert_eq!(t.value(1), "orders");
        let seq = out.column_by_name("_seq").unwrap();
        assert_eq!(
            seq.as_primitive::<arrow::datatypes::Int64Type>().values(),
            &[7, 8]
        );
    }
}
