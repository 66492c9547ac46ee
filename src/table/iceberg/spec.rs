//! The table metadata of the Iceberg spec
//! (<https://iceberg.apache.org/spec/#table-metadata>), format version 2,
//! built from the Delta schema: field ids kept per lake column across
//! versions, the name mapping for files written without ids, and the
//! snapshot history.

use serde_json::{json, Map, Value};

/// The most snapshots a table's metadata keeps (and metadata files the
/// folder keeps); older ones expire even inside the Delta log retention,
/// since every commit rewrites the metadata file whole.
pub const MAX_SNAPSHOTS: usize = 256;

/// The summary keys that tie a snapshot to its Delta version.
pub const MANIFEST_SEQ_KEY: &str = "sluice.manifest-seq";
pub const DELTA_VERSION_KEY: &str = "sluice.delta-version";
/// In the summary of a snapshot that ends its table.
pub const ENDED_KEY: &str = "sluice.ended";

/// The Iceberg type of a Delta type (`None` for one it cannot hold), with
/// fresh ids for nested fields taken from `next_id`. `old` is the Iceberg
/// type the same column had (ids of nested fields are kept by name).
fn iceberg_type(delta: &Value, old: Option<&Value>, next_id: &mut i64) -> Option<Value> {
    if let Some(name) = delta.as_str() {
        let t = match name {
            "boolean" => "boolean".to_string(),
            "byte" | "short" | "integer" => "int".to_string(),
            "long" => "long".to_string(),
            "float" => "float".to_string(),
            "double" => "double".to_string(),
            "string" => "string".to_string(),
            "binary" => "binary".to_string(),
            "date" => "date".to_string(),
            "timestamp" => "timestamptz".to_string(),
            "timestamp_ntz" => "timestamp".to_string(),
            d if d.starts_with("decimal(") => d.replace(' ', ""),
            _ => return None,
        };
        return Some(json!(t));
    }
    match delta["type"].as_str()? {
        "struct" => Some(json!({
            "type": "struct",
            "fields": struct_fields(delta, old.filter(|o| o["type"] == "struct"), next_id)?,
        })),
        "array" => {
            let old = old.filter(|o| o["type"] == "list");
            let old_element = old.map(|o| &o["element"]);
            let element = iceberg_type(&delta["elementType"], old_element, next_id)?;
            let id = match old {
                Some(o) if promotable(&o["element"], &element) => o["element-id"].as_i64()?,
                _ => take(next_id),
            };
            Some(json!({
                "type": "list",
                "element-id": id,
                "element": element,
                "element-required": false,
            }))
        }
        _ => None,
    }
}

fn take(next_id: &mut i64) -> i64 {
    *next_id += 1;
    *next_id
}

/// The fields of a Delta struct as Iceberg fields: a field keeps the id it
/// had in `old` (same name) when its type is the same or one Iceberg
/// promotes it to; any other gets a new id (a type change Iceberg cannot
/// promote is a new column to it).
fn struct_fields(delta: &Value, old: Option<&Value>, next_id: &mut i64) -> Option<Vec<Value>> {
    let old_fields: Vec<&Value> = old
        .and_then(|o| o["fields"].as_array())
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    delta["fields"]
        .as_array()?
        .iter()
        .map(|f| {
            let name = f["name"].as_str()?;
            let before = old_fields.iter().find(|o| o["name"] == name);
            let t = iceberg_type(&f["type"], before.map(|o| &o["type"]), next_id)?;
            let id = match before {
                Some(o) if promotable(&o["type"], &t) => o["id"].as_i64()?,
                _ => take(next_id),
            };
            Some(json!({"id": id, "name": name, "required": false, "type": t}))
        })
        .collect()
}

/// Whether a column of type `old` may read as `new` under the same id:
/// the same type, int to long, float to double, a decimal of the same
/// scale and a larger precision, or nested types whose shape is the same.
fn promotable(old: &Value, new: &Value) -> bool {
    match (old.as_str(), new.as_str()) {
        (Some(o), Some(n)) => {
            o == n
                || (o == "int" && n == "long")
                || (o == "float" && n == "double")
                || match (decimal(o), decimal(n)) {
                    (Some((p1, s1)), Some((p2, s2))) => s1 == s2 && p2 >= p1,
                    _ => false,
                }
        }
        (None, None) => old["type"] == new["type"],
        _ => false,
    }
}

fn decimal(t: &str) -> Option<(u32, u32)> {
    let inner = t.strip_prefix("decimal(")?.strip_suffix(')')?;
    let (p, s) = inner.split_once(',')?;
    Some((p.trim().parse().ok()?, s.trim().parse().ok()?))
}

/// The highest field id in an Iceberg type or field list.
fn max_id(v: &Value) -> i64 {
    let own = ["id", "element-id"]
        .iter()
        .filter_map(|k| v.get(k).and_then(Value::as_i64))
        .max()
        .unwrap_or(0);
    let nested = match v {
        Value::Array(items) => items.iter().map(max_id).max().unwrap_or(0),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| *k == "fields" || *k == "type" || *k == "element")
            .map(|(_, x)| max_id(x))
            .max()
            .unwrap_or(0),
        _ => 0,
    };
    own.max(nested)
}

/// The Iceberg schema (without its id) of a Delta `schemaString`, ids kept
/// from `old` (the current schema) and new ones above `last_column_id`.
/// `None` when a type has no Iceberg form.
pub fn schema(schema_string: &str, old: Option<&Value>, last_column_id: i64) -> Option<Value> {
    let delta: Value = serde_json::from_str(schema_string).ok()?;
    let mut next_id = last_column_id;
    let fields = struct_fields(&delta, old, &mut next_id)?;
    Some(json!({"type": "struct", "fields": fields}))
}

/// The name mapping (`schema.name-mapping.default`) of a schema: how a
/// reader finds the columns of files written without field ids. A list's
/// element answers to `element` and to `item`, the name sluice writes.
pub fn name_mapping(schema: &Value) -> Value {
    fn fields(struct_type: &Value) -> Vec<Value> {
        struct_type["fields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| field(f["id"].as_i64(), &[&f["name"]], &f["type"]))
                    .collect()
            })
            .unwrap_or_default()
    }
    fn field(id: Option<i64>, names: &[&Value], t: &Value) -> Value {
        let mut m = json!({"field-id": id, "names": names});
        let nested = match t["type"].as_str() {
            Some("struct") => fields(t),
            Some("list") => vec![field(
                t["element-id"].as_i64(),
                &[&json!("element"), &json!("item")],
                &t["element"],
            )],
            _ => vec![],
        };
        if !nested.is_empty() {
            m["fields"] = json!(nested);
        }
        m
    }
    json!(fields(schema))
}

/// What a new version of the metadata records: its snapshot and schema.
pub struct Next<'a> {
    pub table_uuid: &'a str,
    pub location: &'a str,
    /// The Delta `schemaString` the snapshot is read with.
    pub schema_string: &'a str,
    pub snapshot: Value,
    pub now_ms: i64,
    /// The metadata file the new one follows, for the metadata log.
    pub previous_file: Option<String>,
}

/// The metadata after `prev` (none for a table's first) with `next`'s
/// snapshot current; `None` when the schema has a type Iceberg lacks.
pub fn next_metadata(prev: Option<&Value>, next: Next<'_>) -> Option<Value> {
    let prev = prev.filter(|p| p["table-uuid"] == next.table_uuid);
    let mut md = match prev {
        Some(p) => p.clone(),
        None => json!({
            "format-version": 2,
            "table-uuid": next.table_uuid,
            "location": next.location,
            "last-sequence-number": 0,
            "last-updated-ms": next.now_ms,
            "last-column-id": 0,
            "current-schema-id": 0,
            "schemas": [],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {},
            "snapshots": [],
            "snapshot-log": [],
            "metadata-log": [],
            "refs": {},
        }),
    };
    let schemas = md["schemas"].as_array().cloned().unwrap_or_default();
    let current_id = md["current-schema-id"].as_i64().unwrap_or(0);
    let current = schemas.iter().find(|s| s["schema-id"] == current_id);
    let last_column_id = md["last-column-id"].as_i64().unwrap_or(0);
    let new = schema(next.schema_string, current, last_column_id)?;
    let same = |s: &Value| s["fields"] == new["fields"];
    let schema_id = match schemas.iter().find(|s| same(s)) {
        Some(s) => s["schema-id"].as_i64().unwrap_or(0),
        None => {
            let id = schemas
                .iter()
                .filter_map(|s| s["schema-id"].as_i64())
                .max()
                .map_or(0, |m| m + 1);
            let mut s = new.clone();
            s["schema-id"] = json!(id);
            md["schemas"].as_array_mut()?.push(s);
            id
        }
    };
    md["current-schema-id"] = json!(schema_id);
    md["last-column-id"] = json!(last_column_id.max(max_id(&new["fields"])));
    md["properties"]["schema.name-mapping.default"] = json!(name_mapping(&new).to_string());
    md["last-updated-ms"] = json!(next.now_ms);

    let mut snapshot = next.snapshot;
    snapshot["schema-id"] = json!(schema_id);
    let id = snapshot["snapshot-id"].clone();
    md["last-sequence-number"] = snapshot["sequence-number"].clone();
    md["current-snapshot-id"] = id.clone();
    md["refs"] = json!({"main": {"snapshot-id": id, "type": "branch"}});
    let log_entry = json!({"timestamp-ms": snapshot["timestamp-ms"], "snapshot-id": id});
    push_bounded(&mut md, "snapshots", snapshot);
    push_bounded(&mut md, "snapshot-log", log_entry);
    if let Some(file) = next.previous_file {
        let entry = json!({"timestamp-ms": prev.map_or(next.now_ms, |p| p["last-updated-ms"].as_i64().unwrap_or(0)), "metadata-file": file});
        push_bounded(&mut md, "metadata-log", entry);
    }
    Some(md)
}

/// Appends `item` to the array `key` of `md`, dropping the oldest beyond
/// [`MAX_SNAPSHOTS`].
fn push_bounded(md: &mut Value, key: &str, item: Value) {
    if !md[key].is_array() {
        md[key] = json!([]);
    }
    if let Some(a) = md[key].as_array_mut() {
        a.push(item);
        let over = a.len().saturating_sub(MAX_SNAPSHOTS);
        a.drain(..over);
    }
}

/// The snapshot ids `md` no longer lists that `prev` did (expired by
/// [`MAX_SNAPSHOTS`]), with their manifest lists.
pub fn expired(prev: &Value, md: &Value) -> Vec<String> {
    let kept: Vec<&Value> = md["snapshots"]
        .as_array()
        .map(|a| a.iter().map(|s| &s["snapshot-id"]).collect())
        .unwrap_or_default();
    prev["snapshots"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| !kept.contains(&&s["snapshot-id"]))
                .filter_map(|s| s["manifest-list"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A snapshot's entry in the metadata.
pub struct Snapshot<'a> {
    pub id: i64,
    pub parent: Option<i64>,
    pub sequence_number: i64,
    pub now_ms: i64,
    pub manifest_list: &'a str,
    pub operation: &'a str,
    pub delta_version: u64,
    pub manifest_seq: Option<u64>,
    /// The Delta version ends the table (a current table whose source was
    /// dropped or renamed away): `sluice.ended` in the summary.
    pub ended: bool,
}

impl Snapshot<'_> {
    pub fn to_json(&self) -> Value {
        let mut summary = Map::new();
        summary.insert("operation".into(), json!(self.operation));
        summary.insert(
            DELTA_VERSION_KEY.into(),
            json!(self.delta_version.to_string()),
        );
        if let Some(seq) = self.manifest_seq {
            summary.insert(MANIFEST_SEQ_KEY.into(), json!(seq.to_string()));
        }
        if self.ended {
            summary.insert(ENDED_KEY.into(), json!("true"));
        }
        let mut s = json!({
            "snapshot-id": self.id,
            "sequence-number": self.sequence_number,
            "timestamp-ms": self.now_ms,
            "manifest-list": self.manifest_list,
            "summary": summary,
        });
        if let Some(p) = self.parent {
            s["parent-snapshot-id"] = json!(p);
        }
        s
    }
}

/// The summary of the current snapshot of `md`.
fn current_summary(md: &Value) -> Option<&Value> {
    let id = &md["current-snapshot-id"];
    Some(
        &md["snapshots"]
            .as_array()?
            .iter()
            .find(|s| &s["snapshot-id"] == id)?["summary"],
    )
}

/// The Delta version the current snapshot of `md` equals.
pub fn delta_version(md: &Value) -> Option<u64> {
    current_summary(md)?[DELTA_VERSION_KEY]
        .as_str()?
        .parse()
        .ok()
}

/// Whether the current snapshot of `md` ends its table.
pub fn ended(md: &Value) -> bool {
    current_summary(md).is_some_and(|s| s[ENDED_KEY] == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(fields: &[(&str, Value)]) -> String {
        json!({"type": "struct", "fields": fields.iter().map(|(n, t)| json!({"name": n, "type": t, "nullable": true, "metadata": {}})).collect::<Vec<_>>()}).to_string()
    }

    #[test]
    fn ids_stay_with_their_column_through_added_columns_promotions_and_type_changes() {
        let v1 = delta(&[
            ("id", json!("integer")),
            ("qty", json!("decimal(10,2)")),
            (
                "tags",
                json!({"type": "array", "elementType": "string", "containsNull": true}),
            ),
            (
                "_before",
                json!({"type": "struct", "fields": [{"name": "id", "type": "integer", "nullable": true, "metadata": {}}]}),
            ),
        ]);
        let s1 = schema(&v1, None, 0).unwrap();
        let ids: Vec<i64> = s1["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_i64().unwrap())
            .collect();
        // Nested ids come before their parent's, all distinct.
        assert_eq!(s1["fields"][2]["type"]["element-id"], 3);
        assert_eq!(ids, [1, 2, 4, 6]);
        assert_eq!(s1["fields"][3]["type"]["fields"][0]["id"], 5);
        assert_eq!(max_id(&s1["fields"]), 6);

        let v2 = delta(&[
            ("id", json!("long")),
            ("qty", json!("decimal(21,2)")),
            (
                "tags",
                json!({"type": "array", "elementType": "string", "containsNull": true}),
            ),
            (
                "_before",
                json!({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": true, "metadata": {}}, {"name": "note", "type": "string", "nullable": true, "metadata": {}}]}),
            ),
            ("note", json!("string")),
        ]);
        let s2 = schema(&v2, Some(&s1), 6).unwrap();
        assert_eq!(
            s2["fields"][0],
            json!({"id": 1, "name": "id", "required": false, "type": "long"})
        );
        assert_eq!(s2["fields"][1]["id"], 2, "a wider decimal keeps its id");
        assert_eq!(s2["fields"][2]["type"]["element-id"], 3);
        assert_eq!(s2["fields"][3]["id"], 6);
        assert_eq!(s2["fields"][3]["type"]["fields"][0]["id"], 5);
        assert_eq!(s2["fields"][3]["type"]["fields"][1]["id"], 7);
        assert_eq!(s2["fields"][4]["id"], 8);

        // A number to a string is no promotion: a new id.
        let v3 = delta(&[("id", json!("string"))]);
        let s3 = schema(&v3, Some(&s2), 8).unwrap();
        assert_eq!(s3["fields"][0]["id"], 9);
        assert!(schema(&delta(&[("x", json!("interval"))]), None, 0).is_none());
    }

    #[test]
    fn the_name_mapping_names_every_id_and_a_list_element_by_both_names() {
        let s = schema(
            &delta(&[
                ("id", json!("integer")),
                (
                    "tags",
                    json!({"type": "array", "elementType": "long", "containsNull": true}),
                ),
            ]),
            None,
            0,
        )
        .unwrap();
        assert_eq!(
            name_mapping(&s),
            json!([
                {"field-id": 1, "names": ["id"]},
                {"field-id": 3, "names": ["tags"], "fields": [{"field-id": 2, "names": ["element", "item"]}]},
            ])
        );
    }

    #[test]
    fn metadata_follows_the_schema_and_keeps_a_bounded_history() {
        let s1 = delta(&[("id", json!("integer"))]);
        let s2 = delta(&[("id", json!("integer")), ("n", json!("string"))]);
        let mut md: Option<Value> = None;
        for i in 0..(MAX_SNAPSHOTS as i64 + 3) {
            let snapshot = Snapshot {
                id: i + 1,
                parent: (i > 0).then_some(i),
                sequence_number: i + 1,
                now_ms: 1000 + i,
                manifest_list: &format!("l{i}"),
                operation: "append",
                delta_version: i as u64,
                manifest_seq: Some(i as u64 + 10),
                ended: false,
            }
            .to_json();
            let next = Next {
                table_uuid: "u",
                location: "file:///lake/db/t",
                schema_string: if i < 2 { &s1 } else { &s2 },
                snapshot,
                now_ms: 1000 + i,
                previous_file: (i > 0).then(|| format!("v{i}.metadata.json")),
            };
            let new = next_metadata(md.as_ref(), next).unwrap();
            if i == 2 {
                assert_eq!(new["current-schema-id"], 1);
                assert_eq!(new["schemas"].as_array().unwrap().len(), 2);
                assert_eq!(new["last-column-id"], 2);
            }
            if let Some(old) = &md {
                let gone = expired(old, &new);
                if i >= MAX_SNAPSHOTS as i64 {
                    assert_eq!(gone, [format!("l{}", i - MAX_SNAPSHOTS as i64)]);
                } else {
                    assert!(gone.is_empty());
                }
            }
            md = Some(new);
        }
        let md = md.unwrap();
        assert_eq!(md["snapshots"].as_array().unwrap().len(), MAX_SNAPSHOTS);
        assert_eq!(md["current-snapshot-id"], MAX_SNAPSHOTS as i64 + 3);
        assert_eq!(delta_version(&md), Some(MAX_SNAPSHOTS as u64 + 2));
        assert_eq!(md["refs"]["main"]["snapshot-id"], md["current-snapshot-id"]);
        assert_eq!(md["last-sequence-number"], MAX_SNAPSHOTS as i64 + 3);
        // Another table in the same folder (a new Delta table id) starts over.
        let next = Next {
            table_uuid: "other",
            location: "file:///lake/db/t",
            schema_string: &s1,
            snapshot: json!({"snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 1}),
            now_ms: 5,
            previous_file: None,
        };
        let fresh = next_metadata(Some(&md), next).unwrap();
        assert_eq!(fresh["snapshots"].as_array().unwrap().len(), 1);
        assert_eq!(fresh["table-uuid"], "other");
    }
}
