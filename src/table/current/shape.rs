//! The shape of a current table: the table's columns at the folded manifest,
//! under their current names and types, plus `_seq` and `_ts`. Rows written
//! in an earlier shape (changelog files, or the current table's own files
//! before a DDL) are carried over column by column: a renamed column keeps
//! its values under the new name (the ALTER statement in the schema history
//! says which column became which), a dropped column goes, an added one is
//! null, and a changed type is cast (values that do not convert become null,
//! as Arrow's safe cast does).

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};
use crate::schema::apply::apply_alter;
use crate::schema::ddl::{parse_ddl, AlterOp, Change};
use crate::schema::history::TableVersion;
use crate::schema::lake_names::{current_names, is_cdc, same_name};
use crate::schema::TableSchema;

/// The Arrow schema of a current table of `table`'s shape.
pub fn current_schema(table: &TableSchema) -> SchemaRef {
    let mut fields: Vec<Field> = table
        .columns
        .iter()
        .zip(current_names(&table.columns))
        .map(|(c, name)| Field::new(name, c.lake_type(), true))
        .collect();
    fields.push(Field::new("_seq", DataType::Int64, true));
    fields.push(Field::new(
        "_ts",
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        true,
    ));
    Arc::new(Schema::new(fields))
}

/// The names of the key columns, in the order rows are sorted by: the
/// primary key's in key order (`PRIMARY KEY (b, a)` sorts by b), else
/// those of the NOT NULL unique key the server keys the table by, in index
/// order ([`TableSchema::fold_key`]); empty for a table without either.
pub fn key_columns(table: &TableSchema) -> Vec<String> {
    table.fold_key()
}

/// For every column of version `to`, its name in version `from` of the same
/// table (`None`: added since). `versions` is the table's history in order.
pub fn origins(versions: &[TableVersion], from: u32, to: u32) -> Vec<Option<String>> {
    let pos = |v: u32| versions.iter().position(|x| x.schema.version == v);
    let Some(target) = pos(to).map(|i| &versions[i]) else {
        return Vec::new();
    };
    let mut names: Vec<Option<String>> = target
        .schema
        .columns
        .iter()
        .map(|c| Some(c.name.clone()))
        .collect();
    let (Some(lo), Some(hi)) = (pos(from), pos(to)) else {
        // An unknown version: match by name.
        return names;
    };
    // Walk back one statement at a time.
    for i in (lo + 1..=hi).rev() {
        let step = step_origins(&versions[i - 1].schema, &versions[i]);
        for n in names.iter_mut() {
            *n = n.take().and_then(|name| {
                step.iter()
                    .find(|(now, _)| now.eq_ignore_ascii_case(&name))
                    .and_then(|(_, before)| before.clone())
            });
        }
    }
    names
}

/// The names that the columns `sources` names (their source names in
/// version `from`, as [`origins`] gives them) have in files written under
/// `from`: lake names in changelog files, the current-table names in a
/// current table's own files (`current`).
pub fn stored_names(
    versions: &[TableVersion],
    from: u32,
    sources: Vec<Option<String>>,
    current: bool,
) -> Vec<Option<String>> {
    let Some(v) = versions.iter().find(|v| v.schema.version == from) else {
        return sources;
    };
    let columns = &v.schema.columns;
    let names: Vec<String> = if current {
        current_names(columns)
    } else {
        columns.iter().map(|c| c.lake().to_string()).collect()
    };
    sources
        .into_iter()
        .map(|s| {
            s.map(
                |name| match columns.iter().position(|c| same_name(&c.name, &name)) {
                    Some(i) => names[i].clone(),
                    None => name,
                },
            )
        })
        .collect()
}

/// `(name after, name before)` of every column of `next`, from its ALTER
/// statement when it has one that names columns, else by name.
fn step_origins(before: &TableSchema, next: &TableVersion) -> Vec<(String, Option<String>)> {
    let by_name = || {
        next.schema
            .columns
            .iter()
            .map(|c| {
                let old = before
                    .columns
                    .iter()
                    .find(|o| o.name.eq_ignore_ascii_case(&c.name))
                    .map(|o| o.name.clone());
                (c.name.clone(), old)
            })
            .collect()
    };
    let Some(statement) = &next.statement else {
        return by_name();
    };
    let Ok(changes) = parse_ddl(statement, &before.database) else {
        return by_name();
    };
    for change in changes {
        let Change::Alter { table, ops } = change else {
            continue;
        };
        if !table.1.eq_ignore_ascii_case(&before.name)
            && !table.1.eq_ignore_ascii_case(&next.schema.name)
        {
            continue;
        }
        let renames = ops.iter().any(|op| {
            matches!(
                op,
                AlterOp::RenameColumn { .. } | AlterOp::Change { .. } | AlterOp::IfColumn { .. }
            )
        });
        if !renames {
            return by_name();
        }
        let Ok(altered) = apply_alter(before, &ops) else {
            return by_name();
        };
        let same = altered.columns.len() == next.schema.columns.len()
            && altered
                .columns
                .iter()
                .zip(&next.schema.columns)
                .all(|(a, b)| a.name.eq_ignore_ascii_case(&b.name));
        if !same {
            return by_name();
        }
        return next
            .schema
            .columns
            .iter()
            .zip(altered.origins())
            .map(|(c, o)| (c.name.clone(), o.clone()))
            .collect();
    }
    by_name()
}

/// The column `name` among `fields`: by its exact name, else matched
/// without case as MySQL does. A file written before lake names has a
/// column under its source name, which may differ from its lake name in
/// case, or lack the `_` a CDC-named column takes (`_op_` is `_op` there,
/// the first of that name: the table's columns come first).
fn column<'a>(fields: &Fields, columns: &'a [ArrayRef], name: &str) -> Option<&'a ArrayRef> {
    let source = name.trim_end_matches('_');
    let i = fields
        .iter()
        .position(|f| f.name() == name)
        .or_else(|| fields.iter().position(|f| same_name(f.name(), name)))
        .or_else(|| {
            (source.len() < name.len() && is_cdc(source))
                .then(|| fields.iter().position(|f| same_name(f.name(), source)))
                .flatten()
        })?;
    columns.get(i)
}

/// The CDC column `name` among `fields`: the last of that name, as the CDC
/// columns follow the table's columns (a file written before lake names
/// may have a table column of the same name).
pub fn cdc_column<'a>(
    fields: &Fields,
    columns: &'a [ArrayRef],
    name: &str,
) -> Option<&'a ArrayRef> {
    let i = fields.iter().rposition(|f| f.name() == name)?;
    columns.get(i)
}

fn carry(array: Option<&ArrayRef>, to: &DataType, len: usize) -> Result<ArrayRef> {
    let Some(a) = array else {
        return Ok(new_null_array(to, len));
    };
    if a.data_type() == to {
        return Ok(a.clone());
    }
    // A changelog file's column may hold the changelog supertype (bytes,
    // text) of the source's current type, which a current table keeps.
    crate::table::supertype::narrow(a, to)
        .map_err(|e| Error::Lake(format!("current table: a column cannot become {to}: {e}")))
}

/// The table columns (`fields`, `columns`, written in a shape whose names
/// `sources` gives per target column) in the shape of `target`.
fn project_columns(
    fields: &Fields,
    columns: &[ArrayRef],
    len: usize,
    sources: &[Option<String>],
    target: &Schema,
    table_columns: usize,
) -> Result<Vec<ArrayRef>> {
    (0..table_columns)
        .map(|i| project_column(fields, columns, len, sources, target, i))
        .collect()
}

/// Table column `i` of those [`project_columns`] gives.
fn project_column(
    fields: &Fields,
    columns: &[ArrayRef],
    len: usize,
    sources: &[Option<String>],
    target: &Schema,
    i: usize,
) -> Result<ArrayRef> {
    let src = sources
        .get(i)
        .and_then(|s| s.as_deref())
        .and_then(|n| column(fields, columns, n));
    carry(src, target.field(i).data_type(), len)
}

/// The table columns of a batch in the shape of `target`.
pub fn project(
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Schema,
    table_columns: usize,
) -> Result<Vec<ArrayRef>> {
    let schema = batch.schema();
    project_columns(
        schema.fields(),
        batch.columns(),
        batch.num_rows(),
        sources,
        target,
        table_columns,
    )
}

/// Table column `i` of a batch alone, as [`project`] gives it.
pub fn project_one(
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Schema,
    i: usize,
) -> Result<ArrayRef> {
    let schema = batch.schema();
    project_column(
        schema.fields(),
        batch.columns(),
        batch.num_rows(),
        sources,
        target,
        i,
    )
}

/// The `_before` struct of a changelog batch, if it has one.
fn before_struct(batch: &RecordBatch) -> Option<&StructArray> {
    cdc_column(batch.schema_ref().fields(), batch.columns(), "_before")?
        .as_any()
        .downcast_ref::<StructArray>()
}

/// The same for the fields of the `_before` struct of a changelog batch
/// (null where a row has no before image).
pub fn project_before(
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Schema,
    table_columns: usize,
) -> Result<Option<Vec<ArrayRef>>> {
    let Some(before) = before_struct(batch) else {
        return Ok(None);
    };
    project_columns(
        before.fields(),
        before.columns(),
        before.len(),
        sources,
        target,
        table_columns,
    )
    .map(Some)
}

/// Table column `i` of the `_before` struct alone, as [`project_before`]
/// gives it.
pub fn project_before_one(
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Schema,
    i: usize,
) -> Result<Option<ArrayRef>> {
    let Some(before) = before_struct(batch) else {
        return Ok(None);
    };
    project_column(
        before.fields(),
        before.columns(),
        before.len(),
        sources,
        target,
        i,
    )
    .map(Some)
}

/// A batch of a current table's own files in the shape of `target`.
pub fn reshape(
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &SchemaRef,
) -> Result<RecordBatch> {
    let n = target.fields().len() - 2;
    let mut cols = project(batch, sources, target, n)?;
    let own = batch.schema();
    for (i, name) in ["_seq", "_ts"].iter().enumerate() {
        cols.push(carry(
            cdc_column(own.fields(), batch.columns(), name),
            target.field(n + i).data_type(),
            batch.num_rows(),
        )?);
    }
    RecordBatch::try_new(target.clone(), cols)
        .map_err(|e| Error::Lake(format!("current table: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ColumnDef;

    fn version(v: u32, cols: &[(&str, &str, bool)], statement: Option<&str>) -> TableVersion {
        TableVersion {
            schema: TableSchema {
                database: "d".into(),
                name: "t".into(),
                version: v,
                columns: cols
                    .iter()
                    .map(|(n, ty, pk)| ColumnDef::new(*n, *ty, None, !pk, *pk).unwrap())
                    .collect(),
                charset: None,
                unique_keys: Vec::new(),
            },
            order_key: v as i64,
            position: crate::source::BinlogPosition {
                file: "b.1".into(),
                pos: v as u64,
            },
            gtid: None,
            committed_at: String::new(),
            statement: statement.map(str::to_string),
            dropped: false,
            checkpoint: v as u64,
        }
    }

    #[test]
    fn renamed_columns_keep_their_values_across_versions() {
        let versions = vec![
            version(1, &[("id", "int", true), ("a", "int", false)], None),
            version(
                2,
                &[("id", "int", true), ("b", "int", false)],
                Some("ALTER TABLE t RENAME COLUMN a TO b"),
            ),
            version(
                3,
                &[
                    ("id", "int", true),
                    ("b", "int", false),
                    ("a", "int", false),
                ],
                Some("ALTER TABLE t ADD COLUMN a INT"),
            ),
            version(
                4,
                &[
                    ("id", "int", true),
                    ("c", "bigint", false),
                    ("a", "int", false),
                ],
                Some("ALTER TABLE t CHANGE b c BIGINT"),
            ),
        ];
        let o = |from, to| origins(&versions, from, to);
        assert_eq!(
            o(1, 4),
            vec![Some("id".to_string()), Some("a".to_string()), None]
        );
        assert_eq!(
            o(3, 4),
            vec![
                Some("id".to_string()),
                Some("b".to_string()),
                Some("a".to_string())
            ]
        );
        assert_eq!(o(4, 4)[1], Some("c".to_string()));
    }
}
