//! A changelog table whose column changed to another lake type (DESIGN.md,
//! "Changelog tables": DECIMAL precision or scale, FLOAT to DOUBLE, a
//! number to a string, …). Delta has one type per column, and the readers
//! we support refuse `typeWidening`, so the files that hold the old type are
//! copied in the new one under `<db>/<table>/_rewritten/` and swapped in by
//! one commit of their own. The rewrite never touches the manifests' files:
//! the copies hold the same rows, `_seq` for `_seq`. Being removed from the
//! Delta table, the originals are deleted after its retention (`cleanup`).
//!
//! The new type is the changelog supertype of every type the column had
//! (`supertype`): a change that narrows (DECIMAL(10,2) to DECIMAL(6,2))
//! keeps the wider type, and a copy renders every old value in it, never
//! null and never an error.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Fields, Schema};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};

use super::legacy_names::{renamed_batch, LakeNames};
use super::schema::delta_type;
use super::stats::{self, FileFacts};
use super::supertype;
use crate::error::{Error, Result};
use crate::sink;

/// The folder of a table's copies.
pub const REWRITTEN_DIR: &str = "_rewritten";

/// Whether a file of schema `file` holds a column (or a field of a struct
/// column such as `_before`) in another Delta type than `union` gives it.
pub fn conflicts(file: &Schema, union: &[Field]) -> bool {
    fields_conflict(file.fields(), union.iter())
}

fn fields_conflict<'a>(file: &Fields, union: impl Iterator<Item = &'a Field> + Clone) -> bool {
    file.iter().any(|f| {
        union
            .clone()
            .find(|u| u.name() == f.name())
            .is_some_and(|u| type_conflicts(f.data_type(), u.data_type()))
    })
}

fn type_conflicts(file: &DataType, union: &DataType) -> bool {
    match (file, union) {
        (DataType::Struct(f), DataType::Struct(u)) => {
            fields_conflict(f, u.iter().map(|x| x.as_ref()))
        }
        (f, u) => delta_type(f) != delta_type(u),
    }
}

/// Whether the Delta schema `old` (a `schemaString`) gives some column that
/// `union` also has another type: the table's files of the old type must be
/// rewritten before files of the new type join them.
pub fn schema_changes_types(old: &str, union: &[Field]) -> bool {
    let Ok(old) = serde_json::from_str::<Value>(old) else {
        return true;
    };
    let new: Value = json!({"fields": union
        .iter()
        .map(|f| json!({"name": f.name(), "type": delta_type(f.data_type())}))
        .collect::<Vec<_>>()});
    struct_types_differ(&old, &new)
}

fn struct_types_differ(old: &Value, new: &Value) -> bool {
    let fields = |v: &Value| v["fields"].as_array().cloned().unwrap_or_default();
    let new_fields = fields(new);
    fields(old).iter().any(|o| {
        let Some(n) = new_fields.iter().find(|n| n["name"] == o["name"]) else {
            return false;
        };
        match (&o["type"], &n["type"]) {
            (a, b) if a["type"] == "struct" && b["type"] == "struct" => struct_types_differ(a, b),
            (a, b) => a != b,
        }
    })
}

/// `batch` with every column in the union's type (a supertype of the
/// file's: [`supertype::convert`] keeps every value), and whether any value
/// changed its text (a number that became a string is the same value; a
/// DOUBLE that rounds a BIGINT is not).
pub fn conform(batch: &RecordBatch, union: &[Field]) -> Result<(RecordBatch, bool)> {
    let mut changed = false;
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let (f, c) = match union.iter().find(|u| u.name() == field.name()) {
            Some(u) if type_conflicts(field.data_type(), u.data_type()) => {
                let c = supertype::convert(column, u.data_type())
                    .map_err(|e| Error::Lake(format!("column {}: {e}", field.name())))?;
                // A conversion keeps every value when going back gives the
                // column again (DECIMAL(8,2) to DECIMAL(12,4), 7 to "7").
                changed |= supertype::narrow(&c, field.data_type())
                    .map_or(true, |back| back.to_data() != column.to_data());
                // A struct (`_before`) keeps the file's own fields.
                (Field::new(field.name(), c.data_type().clone(), true), c)
            }
            _ => (field.as_ref().clone(), column.clone()),
        };
        fields.push(f);
        columns.push(c);
    }
    let schema = Schema::new(fields).with_metadata(batch.schema().metadata().clone());
    Ok((RecordBatch::try_new(Arc::new(schema), columns)?, changed))
}

/// One file of the table copied in the union's types: the copy's path
/// relative to the table folder and its facts.
pub struct Copy {
    pub path: String,
    pub facts: FileFacts,
    /// Some value differs from the original's (`lost`, or cast to another
    /// value): the copy's commit is a data change.
    pub changed: bool,
}

/// Copies the table file `rel` (relative to `dir`) to
/// `_rewritten/v<version>-<name>` in the types of `union`. Written with a
/// plain put: a crashed try left at most the same name, which no log lists.
pub async fn copy_conformed(
    store: &dyn ObjectStore,
    dir: &Path,
    rel: &str,
    union: &[Field],
    version: u64,
    names: Option<&LakeNames>,
) -> Result<Copy> {
    let src = rel.split('/').fold(dir.clone(), |p, part| p.join(part));
    let bytes = store.get(&src).await?.bytes().await?;
    let union = union.to_vec();
    let names = names.cloned();
    let (encoded, changed) = tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, bool)> {
        let mut batch = sink::decode_parquet(bytes)?;
        // A file of a release before lake names: its columns renamed first.
        if let Some(lake) = names.as_ref().and_then(|n| n.renames(&batch.schema())) {
            batch = renamed_batch(batch, &lake)?;
        }
        let (batch, changed) = conform(&batch, &union)?;
        Ok((sink::encode_parquet(&batch)?, changed))
    })
    .await
    .map_err(|e| Error::Lake(format!("rewriting {src}: {e}")))??;
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let name = name.strip_prefix('v').map_or(name, |n| {
        // A copy of a copy: drop the earlier version prefix.
        n.split_once('-').map_or(n, |(_, rest)| rest)
    });
    let path = format!("{REWRITTEN_DIR}/v{version}-{name}");
    let dest = dir
        .clone()
        .join(REWRITTEN_DIR)
        .join(format!("v{version}-{name}"));
    sink::put_file(
        store,
        &dest,
        encoded,
        crate::config::DEFAULT_MULTIPART_THRESHOLD,
    )
    .await?;
    let facts = stats::file_facts(store, &dest).await?;
    Ok(Copy {
        path,
        facts,
        changed,
    })
}

/// The `remove` of a file a copy replaces: a data change when the copy's
/// values differ (a stream reading the table must see them change).
pub fn remove_action(path: &str, now_ms: i64, copy: &Copy) -> Value {
    json!({"remove": {
        "path": path,
        "deletionTimestamp": now_ms,
        "dataChange": copy.changed,
    }})
}

/// The `add` of a copy: no data change when it holds the same values in
/// another type.
pub fn add_action(copy: &Copy) -> Value {
    json!({"add": {
        "path": copy.path,
        "partitionValues": {},
        "size": copy.facts.size,
        "modificationTime": copy.facts.modified_ms,
        "dataChange": copy.changed,
        "stats": copy.facts.stats.to_string(),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Array, Decimal128Array, Float32Array, Int64Array, StringArray, StructArray,
    };

    fn union() -> Vec<Field> {
        vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(12, 4), true),
            Field::new("ratio", DataType::Float64, true),
            Field::new("code", DataType::Utf8, true),
            Field::new(
                "_before",
                DataType::Struct(
                    vec![
                        Field::new("id", DataType::Int64, true),
                        Field::new("price", DataType::Decimal128(12, 4), true),
                    ]
                    .into(),
                ),
                true,
            ),
        ]
    }

    fn old_batch() -> RecordBatch {
        let before_fields: Fields = vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ]
        .into();
        let before = StructArray::new(
            before_fields.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(
                    Decimal128Array::from(vec![Some(12345), None])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ],
            None,
        );
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("ratio", DataType::Float32, true),
            Field::new("code", DataType::Int64, true),
            Field::new("_before", DataType::Struct(before_fields), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(
                    Decimal128Array::from(vec![Some(-99999999), Some(1)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(Float32Array::from(vec![Some(0.5), None])),
                Arc::new(Int64Array::from(vec![Some(-7), Some(42)])),
                Arc::new(before),
            ],
        )
        .unwrap()
    }

    #[test]
    fn old_files_conflict_and_are_cast_exactly() {
        let batch = old_batch();
        assert!(conflicts(&batch.schema(), &union()));
        let (copy, changed) = conform(&batch, &union()).unwrap();
        assert!(!changed, "every value is kept");
        assert!(!conflicts(&copy.schema(), &union()));
        let price = copy
            .column(1)
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap();
        assert_eq!(price.data_type(), &DataType::Decimal128(12, 4));
        assert_eq!(price.value_as_string(0), "-999999.9900");
        assert_eq!(price.value_as_string(1), "0.0100");
        let code = copy
            .column(3)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((code.value(0), code.value(1)), ("-7", "42"));
        let before = copy
            .column(4)
            .as_any()
            .downcast_ref::<StructArray>()
            .unwrap();
        let p = before
            .column(1)
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap();
        assert_eq!(p.value_as_string(0), "123.4500");
        assert!(p.is_null(1));
        // Untouched columns keep their arrays.
        assert_eq!(copy.column(0).to_data(), batch.column(0).to_data());
    }

    /// `_before` of an older file lacks columns added since: the copy keeps
    /// the file's own fields, in the union's types.
    #[test]
    fn a_before_image_with_fewer_fields_than_the_union_converts() {
        let mut wider = union();
        let before = Field::new(
            "_before",
            DataType::Struct(
                vec![
                    Field::new("id", DataType::Int64, true),
                    Field::new("price", DataType::Decimal128(12, 4), true),
                    Field::new("added", DataType::Utf8, true),
                ]
                .into(),
            ),
            true,
        );
        *wider.last_mut().unwrap() = before;
        let (copy, changed) = conform(&old_batch(), &wider).unwrap();
        assert!(!changed);
        let DataType::Struct(fields) = copy.schema().field(4).data_type().clone() else {
            panic!("_before is no struct");
        };
        assert_eq!(fields.len(), 2);
        assert_eq!(fields[1].data_type(), &DataType::Decimal128(12, 4));
    }

    #[test]
    fn a_type_that_is_no_supertype_is_an_error_not_a_null() {
        // The union is always a supertype; a narrower one is a defect that
        // names the column, never a silent null.
        let narrow = vec![Field::new("price", DataType::Decimal128(6, 2), true)];
        let err = conform(&old_batch(), &narrow).unwrap_err().to_string();
        assert!(
            err.contains("price") && err.contains("Decimal128(6, 2)"),
            "{err}"
        );
    }

    #[test]
    fn a_double_that_rounds_an_integer_is_a_change() {
        let to_double = vec![Field::new("n", DataType::Float64, true)];
        let schema = Schema::new(vec![Field::new("n", DataType::Int64, true)]);
        let batch = |v: Vec<Option<i64>>| {
            RecordBatch::try_new(
                Arc::new(schema.clone()),
                vec![Arc::new(Int64Array::from(v))],
            )
            .unwrap()
        };
        let (copy, changed) = conform(&batch(vec![Some(i64::MAX - 1), None]), &to_double).unwrap();
        assert!(changed, "2^63-2 rounds in a DOUBLE");
        assert_eq!(copy.schema().field(0).data_type(), &DataType::Float64);
        // Small integers are exact: no change.
        assert!(
            !conform(&batch(vec![Some(-3), Some(1 << 40)]), &to_double)
                .unwrap()
                .1
        );
    }

    #[test]
    fn schema_strings_say_when_types_changed() {
        let old = r#"{"type":"struct","fields":[
            {"name":"id","type":"long","nullable":true,"metadata":{}},
            {"name":"price","type":"decimal(10,2)","nullable":true,"metadata":{}},
            {"name":"_before","type":{"type":"struct","fields":[
                {"name":"price","type":"decimal(10,2)","nullable":true,"metadata":{}}]},
             "nullable":true,"metadata":{}}]}"#;
        assert!(schema_changes_types(old, &union()));
        let same = vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            // A new column is no type change.
            Field::new("added", DataType::Utf8, true),
        ];
        assert!(!schema_changes_types(old, &same));
        let before_only = vec![Field::new(
            "_before",
            DataType::Struct(vec![Field::new("price", DataType::Decimal128(11, 2), true)].into()),
            true,
        )];
        assert!(schema_changes_types(old, &before_only));
    }
}
