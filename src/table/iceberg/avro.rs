//! Manifests and manifest lists: Avro object container files with the
//! schemas (and field ids) of the Iceberg spec, format version 2
//! (<https://iceberg.apache.org/spec/#manifests>). Unpartitioned tables
//! only, so the partition tuple is empty.

use std::sync::LazyLock;

use apache_avro::types::Value as Avro;
use apache_avro::{Schema, Writer};

use crate::error::{Error, Result};

/// What a file of a manifest holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    Data,
    PositionDeletes,
}

impl Content {
    fn code(self) -> i32 {
        match self {
            Content::Data => 0,
            Content::PositionDeletes => 1,
        }
    }
}

/// A manifest entry's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Existing = 0,
    Added = 1,
}

/// A data or delete file as a manifest lists it.
#[derive(Debug, Clone)]
pub struct DataFile {
    /// Its full location (a URI under the table's location).
    pub location: String,
    pub records: i64,
    pub size: i64,
    /// The snapshot that added it, and the sequence number it was added at
    /// (its data and file sequence number).
    pub snapshot_id: i64,
    pub seq: i64,
}

/// A manifest as the manifest list names it.
#[derive(Debug, Clone)]
pub struct ManifestFile {
    pub location: String,
    pub length: i64,
    pub content: Content,
    /// The sequence number of the snapshot that wrote it.
    pub seq: i64,
    pub min_seq: i64,
    pub added_snapshot_id: i64,
    pub added_files: i32,
    pub existing_files: i32,
    pub added_rows: i64,
    pub existing_rows: i64,
}

/// Optional map fields of `data_file` (ids of the spec), written null.
fn map_field(name: &str, id: u32, key_id: u32, value_id: u32, value: &str) -> String {
    format!(
        r#"{{"name":"{name}","type":["null",{{"type":"array","logicalType":"map","items":{{"type":"record","name":"k{key_id}_v{value_id}","fields":[{{"name":"key","type":"int","field-id":{key_id}}},{{"name":"value","type":"{value}","field-id":{value_id}}}]}}}}],"default":null,"field-id":{id}}}"#
    )
}

static ENTRY_SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let maps = [
        map_field("column_sizes", 108, 117, 118, "long"),
        map_field("value_counts", 109, 119, 120, "long"),
        map_field("null_value_counts", 110, 121, 122, "long"),
        map_field("nan_value_counts", 137, 138, 139, "long"),
        map_field("lower_bounds", 125, 126, 127, "bytes"),
        map_field("upper_bounds", 128, 129, 130, "bytes"),
    ]
    .join(",");
    let raw = format!(
        r#"{{"type":"record","name":"manifest_entry","fields":[
        {{"name":"status","type":"int","field-id":0}},
        {{"name":"snapshot_id","type":["null","long"],"default":null,"field-id":1}},
        {{"name":"sequence_number","type":["null","long"],"default":null,"field-id":3}},
        {{"name":"file_sequence_number","type":["null","long"],"default":null,"field-id":4}},
        {{"name":"data_file","field-id":2,"type":{{"type":"record","name":"r2","fields":[
            {{"name":"content","type":"int","field-id":134}},
            {{"name":"file_path","type":"string","field-id":100}},
            {{"name":"file_format","type":"string","field-id":101}},
            {{"name":"partition","type":{{"type":"record","name":"r102","fields":[]}},"field-id":102}},
            {{"name":"record_count","type":"long","field-id":103}},
            {{"name":"file_size_in_bytes","type":"long","field-id":104}},
            {maps},
            {{"name":"key_metadata","type":["null","bytes"],"default":null,"field-id":131}},
            {{"name":"split_offsets","type":["null",{{"type":"array","items":"long","element-id":133}}],"default":null,"field-id":132}},
            {{"name":"equality_ids","type":["null",{{"type":"array","items":"int","element-id":136}}],"default":null,"field-id":135}},
            {{"name":"sort_order_id","type":["null","int"],"default":null,"field-id":140}}
        ]}}}}
    ]}}"#
    );
    // The schema is a constant of this file; the unit tests parse it.
    Schema::parse_str(&raw).expect("the manifest entry schema parses")
});

static LIST_SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let raw = r#"{"type":"record","name":"manifest_file","fields":[
        {"name":"manifest_path","type":"string","field-id":500},
        {"name":"manifest_length","type":"long","field-id":501},
        {"name":"partition_spec_id","type":"int","field-id":502},
        {"name":"content","type":"int","field-id":517},
        {"name":"sequence_number","type":"long","field-id":515},
        {"name":"min_sequence_number","type":"long","field-id":516},
        {"name":"added_snapshot_id","type":"long","field-id":503},
        {"name":"added_files_count","type":"int","field-id":504},
        {"name":"existing_files_count","type":"int","field-id":505},
        {"name":"deleted_files_count","type":"int","field-id":506},
        {"name":"added_rows_count","type":"long","field-id":512},
        {"name":"existing_rows_count","type":"long","field-id":513},
        {"name":"deleted_rows_count","type":"long","field-id":514},
        {"name":"partitions","type":["null",{"type":"array","items":{"type":"record","name":"r508","fields":[
            {"name":"contains_null","type":"boolean","field-id":509},
            {"name":"contains_nan","type":["null","boolean"],"default":null,"field-id":518},
            {"name":"lower_bound","type":["null","bytes"],"default":null,"field-id":510},
            {"name":"upper_bound","type":["null","bytes"],"default":null,"field-id":511}
        ]},"element-id":508}],"default":null,"field-id":507},
        {"name":"key_metadata","type":["null","bytes"],"default":null,"field-id":519}
    ]}"#;
    Schema::parse_str(raw).expect("the manifest list schema parses")
});

fn null() -> Avro {
    Avro::Union(0, Box::new(Avro::Null))
}

fn some(v: Avro) -> Avro {
    Avro::Union(1, Box::new(v))
}

fn record(fields: Vec<(&str, Avro)>) -> Avro {
    Avro::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn avro_error(what: &str) -> impl Fn(apache_avro::Error) -> Error + '_ {
    move |e| Error::Lake(format!("Iceberg {what}: {e}"))
}

/// A manifest of `content` holding `entries`, for a table whose schema
/// (JSON) is `schema` with id `schema_id`.
pub fn manifest(
    content: Content,
    entries: &[(Status, &DataFile)],
    schema: &str,
    schema_id: i64,
) -> Result<Vec<u8>> {
    let err = avro_error("manifest");
    let mut w = Writer::new(&ENTRY_SCHEMA, Vec::new());
    let kind = match content {
        Content::Data => "data",
        Content::PositionDeletes => "deletes",
    };
    for (k, v) in [
        ("schema", schema.to_string()),
        ("schema-id", schema_id.to_string()),
        ("partition-spec", "[]".to_string()),
        ("partition-spec-id", "0".to_string()),
        ("format-version", "2".to_string()),
        ("content", kind.to_string()),
    ] {
        w.add_user_metadata(k.to_string(), v).map_err(&err)?;
    }
    for (status, f) in entries {
        let data_file = record(vec![
            ("content", Avro::Int(content.code())),
            ("file_path", Avro::String(f.location.clone())),
            ("file_format", Avro::String("PARQUET".into())),
            ("partition", Avro::Record(vec![])),
            ("record_count", Avro::Long(f.records)),
            ("file_size_in_bytes", Avro::Long(f.size)),
            ("column_sizes", null()),
            ("value_counts", null()),
            ("null_value_counts", null()),
            ("nan_value_counts", null()),
            ("lower_bounds", null()),
            ("upper_bounds", null()),
            ("key_metadata", null()),
            ("split_offsets", null()),
            ("equality_ids", null()),
            ("sort_order_id", null()),
        ]);
        w.append(record(vec![
            ("status", Avro::Int(*status as i32)),
            ("snapshot_id", some(Avro::Long(f.snapshot_id))),
            ("sequence_number", some(Avro::Long(f.seq))),
            ("file_sequence_number", some(Avro::Long(f.seq))),
            ("data_file", data_file),
        ]))
        .map_err(&err)?;
    }
    w.into_inner().map_err(&err)
}

/// The manifest list of snapshot `snapshot_id` (sequence number `seq`).
pub fn manifest_list(
    manifests: &[&ManifestFile],
    snapshot_id: i64,
    parent: Option<i64>,
    seq: i64,
) -> Result<Vec<u8>> {
    let err = avro_error("manifest list");
    let mut w = Writer::new(&LIST_SCHEMA, Vec::new());
    for (k, v) in [
        ("snapshot-id", snapshot_id.to_string()),
        (
            "parent-snapshot-id",
            parent.map_or("null".to_string(), |p| p.to_string()),
        ),
        ("sequence-number", seq.to_string()),
        ("format-version", "2".to_string()),
    ] {
        w.add_user_metadata(k.to_string(), v).map_err(&err)?;
    }
    for m in manifests {
        w.append(record(vec![
            ("manifest_path", Avro::String(m.location.clone())),
            ("manifest_length", Avro::Long(m.length)),
            ("partition_spec_id", Avro::Int(0)),
            ("content", Avro::Int(m.content.code())),
            ("sequence_number", Avro::Long(m.seq)),
            ("min_sequence_number", Avro::Long(m.min_seq)),
            ("added_snapshot_id", Avro::Long(m.added_snapshot_id)),
            ("added_files_count", Avro::Int(m.added_files)),
            ("existing_files_count", Avro::Int(m.existing_files)),
            ("deleted_files_count", Avro::Int(0)),
            ("added_rows_count", Avro::Long(m.added_rows)),
            ("existing_rows_count", Avro::Long(m.existing_rows)),
            ("deleted_rows_count", Avro::Long(0)),
            ("partitions", some(Avro::Array(vec![]))),
            ("key_metadata", null()),
        ]))
        .map_err(&err)?;
    }
    w.into_inner().map_err(&err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::Reader;

    fn field<'a>(r: &'a Avro, name: &str) -> &'a Avro {
        match r {
            Avro::Record(fields) => &fields.iter().find(|(k, _)| k == name).unwrap().1,
            other => panic!("not a record: {other:?}"),
        }
    }

    #[test]
    fn a_manifest_reads_back_with_its_ids_and_header() {
        let f = DataFile {
            location: "file:///lake/db/t/a.parquet".into(),
            records: 7,
            size: 1234,
            snapshot_id: 3,
            seq: 2,
        };
        let bytes = manifest(Content::Data, &[(Status::Existing, &f)], "{}", 4).unwrap();
        let reader = Reader::new(&bytes[..]).unwrap();
        let meta = reader.user_metadata().clone();
        assert_eq!(meta["content"], b"data");
        assert_eq!(meta["schema-id"], b"4");
        let written = serde_json::to_value(reader.writer_schema()).unwrap();
        assert_eq!(written["fields"][4]["field-id"], 2);
        assert_eq!(written["fields"][4]["type"]["fields"][1]["field-id"], 100);
        let rows: Vec<Avro> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(field(&rows[0], "status"), &Avro::Int(0));
        let df = field(&rows[0], "data_file");
        assert_eq!(
            field(df, "file_path"),
            &Avro::String("file:///lake/db/t/a.parquet".into())
        );
        assert_eq!(field(df, "record_count"), &Avro::Long(7));
        assert_eq!(
            field(&rows[0], "sequence_number"),
            &Avro::Union(1, Box::new(Avro::Long(2)))
        );

        let m = ManifestFile {
            location: "file:///lake/db/t/metadata/m.avro".into(),
            length: bytes.len() as i64,
            content: Content::PositionDeletes,
            seq: 2,
            min_seq: 1,
            added_snapshot_id: 3,
            added_files: 1,
            existing_files: 0,
            added_rows: 7,
            existing_rows: 0,
        };
        let list = manifest_list(&[&m], 3, Some(2), 2).unwrap();
        let reader = Reader::new(&list[..]).unwrap();
        assert_eq!(reader.user_metadata()["parent-snapshot-id"], b"2");
        let rows: Vec<Avro> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(field(&rows[0], "content"), &Avro::Int(1));
        assert_eq!(
            field(&rows[0], "manifest_length"),
            &Avro::Long(bytes.len() as i64)
        );
    }
}
