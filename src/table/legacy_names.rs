//! Changelog files written before lake names (DESIGN.md "Lake column
//! names") hold a table's columns under their source names: a case-only
//! rename put both names into the Delta schema, which readers refuse, and a
//! source column named like a CDC column sat beside it under one name. Such
//! a file has exactly the source names of the version that wrote it, in
//! order, followed by the CDC columns; the Delta table gets copies of it
//! under the lake names of that version (as for a type change, under
//! `_rewritten/`), and its Delta schema loses the duplicates.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::schema::history::TableVersion;
use crate::schema::lake_names::{same_name, CDC_COLUMNS};

/// The source names and lake names of every version of one table.
#[derive(Debug, Clone, Default)]
pub struct LakeNames(Vec<(Vec<String>, Vec<String>)>);

impl LakeNames {
    pub fn of(versions: &[TableVersion]) -> Self {
        LakeNames(
            versions
                .iter()
                .filter(|v| !v.dropped)
                .map(|v| {
                    let cols = &v.schema.columns;
                    (
                        cols.iter().map(|c| c.name.clone()).collect(),
                        cols.iter().map(|c| c.lake().to_string()).collect(),
                    )
                })
                .collect(),
        )
    }

    /// For a file written before lake names whose names differ from them,
    /// the lake names of its table columns; `None` for a file of lake names
    /// (or one no version explains, which is left as it is).
    pub fn renames(&self, file: &Schema) -> Option<Vec<String>> {
        let fields = file.fields();
        let n = fields.len().checked_sub(CDC_COLUMNS.len())?;
        if !fields[n..]
            .iter()
            .zip(CDC_COLUMNS)
            .all(|(f, c)| f.name() == c)
        {
            return None;
        }
        let region: Vec<&str> = fields[..n].iter().map(|f| f.name().as_str()).collect();
        if self.0.iter().any(|(_, lake)| *lake == region) {
            return None;
        }
        self.0
            .iter()
            .rev()
            .find(|(source, lake)| *source == region && source != lake)
            .map(|(_, lake)| lake.clone())
    }
}

fn renamed_before(field: &Field, lake: &[String]) -> Option<Fields> {
    match field.data_type() {
        DataType::Struct(inner) if inner.len() == lake.len() => Some(
            inner
                .iter()
                .zip(lake)
                .map(|(f, name)| Arc::new(f.as_ref().clone().with_name(name)))
                .collect(),
        ),
        _ => None,
    }
}

/// `schema` with its table columns and the fields of `_before` under `lake`.
pub fn renamed_schema(schema: &Schema, lake: &[String]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match lake.get(i) {
            Some(name) => f.as_ref().clone().with_name(name),
            None if f.name() == "_before" => match renamed_before(f, lake) {
                Some(inner) => f.as_ref().clone().with_data_type(DataType::Struct(inner)),
                None => f.as_ref().clone(),
            },
            None => f.as_ref().clone(),
        })
        .collect();
    Schema::new(fields).with_metadata(schema.metadata().clone())
}

/// `batch` under the names of [`renamed_schema`].
pub fn renamed_batch(batch: RecordBatch, lake: &[String]) -> Result<RecordBatch> {
    let schema = renamed_schema(&batch.schema(), lake);
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (i, f) in schema.fields().iter().enumerate().skip(lake.len()) {
        if let (DataType::Struct(inner), Some(s)) = (
            f.data_type(),
            columns[i].as_any().downcast_ref::<StructArray>(),
        ) {
            let renamed =
                StructArray::try_new(inner.clone(), s.columns().to_vec(), s.nulls().cloned())?;
            columns[i] = Arc::new(renamed);
        }
    }
    RecordBatch::try_new(Arc::new(schema), columns).map_err(|e| {
        Error::Lake(format!(
            "renaming a file's columns to their lake names: {e}"
        ))
    })
}

/// Whether a Delta `schemaString` has two fields whose names differ only in
/// case, at the top or inside `_before`: every reader refuses it.
pub fn has_case_duplicates(schema_string: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(schema_string) else {
        return false;
    };
    fn duplicates(fields: &Value) -> bool {
        let names: Vec<&str> = fields
            .as_array()
            .map(|a| a.iter().filter_map(|f| f["name"].as_str()).collect())
            .unwrap_or_default();
        names
            .iter()
            .enumerate()
            .any(|(i, a)| names[i + 1..].iter().any(|b| same_name(a, b)))
    }
    let top = &v["fields"];
    duplicates(top)
        || top.as_array().is_some_and(|fields| {
            fields
                .iter()
                .filter(|f| f["type"]["type"] == "struct")
                .any(|f| duplicates(&f["type"]["fields"]))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::arrow_schema;
    use crate::schema::lake_names::fill_history;
    use crate::schema::{ColumnDef, TableSchema};
    use crate::source::BinlogPosition;

    fn version(n: u32, cols: &[(&str, &str)]) -> TableVersion {
        TableVersion {
            schema: TableSchema {
                database: "d".into(),
                name: "t".into(),
                version: n,
                columns: cols
                    .iter()
                    .map(|(name, ty)| ColumnDef::new(*name, *ty, None, true, false).unwrap())
                    .collect(),
                charset: None,
                unique_keys: Vec::new(),
            },
            order_key: n as i64,
            position: BinlogPosition {
                file: "b.000001".into(),
                pos: 4,
            },
            gtid: None,
            committed_at: String::new(),
            statement: None,
            dropped: false,
            checkpoint: 1,
        }
    }

    /// The file schema a release before lake names wrote for `v`.
    fn old_file(v: &TableVersion) -> Schema {
        let mut unnamed = v.schema.clone();
        for c in &mut unnamed.columns {
            c.lake_name.clear();
        }
        arrow_schema(&unnamed).as_ref().clone()
    }

    #[test]
    fn old_files_get_the_lake_names_of_their_version() {
        let mut versions = vec![
            version(1, &[("id", "int"), ("price", "int")]),
            version(2, &[("id", "int"), ("Price", "int"), ("_ts", "datetime")]),
        ];
        fill_history(&mut versions);
        let names = LakeNames::of(&versions);
        // A file of version 1 has its lake names already.
        assert_eq!(names.renames(&old_file(&versions[0])), None);
        // Version 2's: `Price` and the source's `_ts` beside the CDC `_ts`.
        let old = old_file(&versions[1]);
        let lake = names.renames(&old).unwrap();
        assert_eq!(lake, ["id", "price", "_ts_"]);
        let renamed = renamed_schema(&old, &lake);
        assert_eq!(&renamed, arrow_schema(&versions[1].schema).as_ref());
        // A file written with lake names is left alone.
        assert_eq!(names.renames(&renamed), None);
    }

    #[test]
    fn case_duplicates_in_a_delta_schema() {
        let dup = r#"{"type":"struct","fields":[{"name":"price","type":"long"},{"name":"Price","type":"long"}]}"#;
        assert!(has_case_duplicates(dup));
        let inner = r#"{"type":"struct","fields":[{"name":"_before","type":{"type":"struct","fields":[{"name":"a","type":"long"},{"name":"A","type":"long"}]}}]}"#;
        assert!(has_case_duplicates(inner));
        let fine = r#"{"type":"struct","fields":[{"name":"price","type":"long"},{"name":"_ts_","type":"long"},{"name":"_ts","type":"long"}]}"#;
        assert!(!has_case_duplicates(fine));
    }
}
