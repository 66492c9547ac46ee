//! The Delta schema of a changelog table: the union of the Arrow schemas of
//! every version of the table's files, in Delta's JSON form
//! (<https://github.com/delta-io/delta/blob/master/PROTOCOL.md#schema-serialization-format>),
//! and the lowest protocol that its types allow.

use arrow::datatypes::{DataType, Field, Fields, Schema};
use serde_json::{json, Value};

/// Adds the fields of `next` that `union` lacks, in their order; a field of
/// both keeps its place and takes the changelog supertype of both types
/// (`supertype`; structs merge field by field, so `_before` grows like the
/// table). Every field is nullable: a column dropped later is null in later
/// files.
pub fn widen(union: &mut Vec<Field>, next: &Schema) {
    super::supertype::merge_fields(union, next.fields());
}

/// The Delta type of an Arrow type of the lake (DESIGN.md "Types"); `None`
/// for a type Delta cannot hold (the first release's unsigned integers,
/// durations and Decimal256, refused before any log is written).
pub(super) fn delta_type(t: &DataType) -> Option<Value> {
    Some(match t {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 => json!("byte"),
        DataType::Int16 => json!("short"),
        DataType::Int32 => json!("integer"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 => json!("string"),
        DataType::Dictionary(_, v) if matches!(v.as_ref(), DataType::Utf8) => json!("string"),
        DataType::Binary | DataType::LargeBinary => json!("binary"),
        DataType::Date32 => json!("date"),
        // Delta timestamps are microseconds; `_ts` is milliseconds in the
        // files, which readers widen like any Parquet TIMESTAMP(MILLIS).
        DataType::Timestamp(_, Some(_)) => json!("timestamp"),
        DataType::Timestamp(_, None) => json!("timestamp_ntz"),
        DataType::Decimal128(p, s) if *s >= 0 && *p <= 38 => json!(format!("decimal({p},{s})")),
        DataType::List(item) | DataType::LargeList(item) => json!({
            "type": "array",
            "elementType": delta_type(item.data_type())?,
            "containsNull": true,
        }),
        DataType::Struct(fields) => struct_type(fields)?,
        _ => return None,
    })
}

fn struct_type(fields: &Fields) -> Option<Value> {
    let fields: Option<Vec<Value>> = fields
        .iter()
        .map(|f| {
            Some(json!({
                "name": f.name(),
                "type": delta_type(f.data_type())?,
                "nullable": true,
                "metadata": {},
            }))
        })
        .collect();
    Some(json!({"type": "struct", "fields": fields?}))
}

/// The `schemaString` of a metaData action, or the name and type of the
/// first column Delta cannot hold.
pub fn schema_string(fields: &[Field]) -> Result<String, String> {
    for f in fields {
        if delta_type(f.data_type()).is_none() {
            return Err(format!("column {} is {}", f.name(), f.data_type()));
        }
    }
    struct_type(&fields.to_vec().into())
        .map(|v| v.to_string())
        .ok_or_else(|| "a nested column has no Delta type".to_string())
}

fn has_timestamp_ntz(t: &DataType) -> bool {
    match t {
        DataType::Timestamp(_, None) => true,
        DataType::List(f) | DataType::LargeList(f) => has_timestamp_ntz(f.data_type()),
        DataType::Struct(fs) => fs.iter().any(|f| has_timestamp_ntz(f.data_type())),
        _ => false,
    }
}

/// The lowest protocol the types allow: reader 1 / writer 2, or, with a
/// DATETIME column (`timestamp_ntz`), reader 3 / writer 7 with that one
/// table feature. No column mapping, deletion vectors or type widening:
/// Polars and the `deltalake` package refuse tables with them.
pub fn protocol(fields: &[Field]) -> Value {
    protocol_with(fields, false)
}

/// [`protocol`], with the `deletionVectors` feature when `vectors`.
pub fn protocol_with(fields: &[Field], vectors: bool) -> Value {
    let mut features = Vec::new();
    if fields.iter().any(|f| has_timestamp_ntz(f.data_type())) {
        features.push("timestampNtz");
    }
    if vectors {
        features.push("deletionVectors");
    }
    if features.is_empty() {
        json!({"minReaderVersion": 1, "minWriterVersion": 2})
    } else {
        json!({
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": features,
            "writerFeatures": features,
        })
    }
}

fn features(p: &Value, key: &str) -> std::collections::BTreeSet<String> {
    p[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// The protocol a table at `old` must move to so that it has what `needed`
/// has; `None` when it has it already (a protocol is never lowered, and
/// features another writer added stay).
pub fn raised(old: Option<&Value>, needed: &Value) -> Option<Value> {
    let Some(old) = old else {
        return Some(needed.clone());
    };
    let version = |p: &Value, k: &str| p[k].as_u64().unwrap_or(0);
    let (old_r, old_w) = (
        version(old, "minReaderVersion"),
        version(old, "minWriterVersion"),
    );
    let (new_r, new_w) = (
        version(needed, "minReaderVersion"),
        version(needed, "minWriterVersion"),
    );
    let (want_r, want_w) = (
        features(needed, "readerFeatures"),
        features(needed, "writerFeatures"),
    );
    if want_r.is_empty() && want_w.is_empty() {
        return (new_r > old_r || new_w > old_w).then(|| needed.clone());
    }
    let (has_r, has_w) = (
        features(old, "readerFeatures"),
        features(old, "writerFeatures"),
    );
    if old_r >= 3 && old_w >= 7 && want_r.is_subset(&has_r) && want_w.is_subset(&has_w) {
        return None;
    }
    let reader: std::collections::BTreeSet<String> = has_r.union(&want_r).cloned().collect();
    let writer: std::collections::BTreeSet<String> = has_w.union(&want_w).cloned().collect();
    Some(json!({
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": reader,
        "writerFeatures": writer,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_is_raised_to_what_is_needed_and_never_lowered() {
        let ntz = vec![Field::new(
            "t",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            true,
        )];
        let plain = protocol(&[]);
        assert_eq!(raised(None, &plain), Some(plain.clone()));
        assert_eq!(raised(Some(&plain), &plain), None);
        let dv = protocol_with(&[], true);
        assert_eq!(dv["readerFeatures"], json!(["deletionVectors"]));
        assert_eq!(raised(Some(&plain), &dv), Some(dv.clone()));
        // A DATETIME column later: both features.
        let both = raised(Some(&dv), &protocol_with(&ntz, true)).unwrap();
        assert_eq!(
            both["readerFeatures"],
            json!(["deletionVectors", "timestampNtz"])
        );
        // Vectors off again: nothing is taken away.
        assert_eq!(raised(Some(&both), &protocol(&ntz)), None);
        assert_eq!(raised(Some(&both), &plain), None);
    }
    use arrow::datatypes::TimeUnit;
    use std::sync::Arc;

    #[test]
    fn union_keeps_dropped_and_renamed_columns_and_grows_before() {
        let v1 = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Utf8, true),
            Field::new(
                "_before",
                DataType::Struct(
                    vec![
                        Field::new("id", DataType::Int64, true),
                        Field::new("a", DataType::Utf8, true),
                    ]
                    .into(),
                ),
                true,
            ),
        ]);
        let v2 = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("b", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new(
                "_before",
                DataType::Struct(
                    vec![
                        Field::new("id", DataType::Int64, true),
                        Field::new("b", DataType::Timestamp(TimeUnit::Microsecond, None), true),
                    ]
                    .into(),
                ),
                true,
            ),
        ]);
        let mut union = Vec::new();
        widen(&mut union, &v1);
        assert_eq!(protocol(&union)["minReaderVersion"], 1);
        widen(&mut union, &v2);
        let names: Vec<&str> = union.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "a", "_before", "b"]);
        assert!(union.iter().all(|f| f.is_nullable()));
        let s: Value = serde_json::from_str(&schema_string(&union).unwrap()).unwrap();
        assert_eq!(s["fields"][0]["type"], "long");
        assert_eq!(s["fields"][3]["type"], "timestamp_ntz");
        let before: Vec<&str> = s["fields"][2]["type"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(before, ["id", "a", "b"]);
        assert_eq!(protocol(&union)["minReaderVersion"], 3);
        assert_eq!(protocol(&union)["readerFeatures"], json!(["timestampNtz"]));
    }

    #[test]
    fn lake_types_map_to_delta_types() {
        let dict = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        let cases = [
            (DataType::Decimal128(20, 0), json!("decimal(20,0)")),
            (dict, json!("string")),
            (
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                json!("timestamp"),
            ),
            (DataType::Date32, json!("date")),
            (DataType::Int16, json!("short")),
            (
                list,
                json!({"type": "array", "elementType": "string", "containsNull": true}),
            ),
        ];
        for (t, want) in cases {
            assert_eq!(delta_type(&t), Some(want), "{t}");
        }
        let err = schema_string(&[Field::new("n", DataType::UInt64, true)]).unwrap_err();
        assert_eq!(err, "column n is UInt64");
    }
}
