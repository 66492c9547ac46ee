//! Iceberg position delete files
//! (<https://iceberg.apache.org/spec/#position-delete-files>): the rows a
//! current table's deletion vectors mark, as `(file_path, pos)` rows sorted
//! by file and position, in Parquet with the spec's reserved field ids.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Int64Builder, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::error::{Error, Result};

/// The reserved field ids of `file_path` and `pos`.
const FILE_PATH_ID: &str = "2147483546";
const POS_ID: &str = "2147483545";

fn field(name: &str, t: DataType, id: &str) -> Field {
    Field::new(name, t, false).with_metadata(HashMap::from([(
        "PARQUET:field_id".to_string(),
        id.to_string(),
    )]))
}

/// A position delete file deleting `positions` of each data file location
/// (sorted here), and its row count.
pub fn position_deletes(mut rows: Vec<(String, Vec<u64>)>) -> Result<(Vec<u8>, i64)> {
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let schema = Arc::new(Schema::new(vec![
        field("file_path", DataType::Utf8, FILE_PATH_ID),
        field("pos", DataType::Int64, POS_ID),
    ]));
    let mut paths = StringBuilder::new();
    let mut positions = Int64Builder::new();
    let mut count = 0i64;
    for (path, mut pos) in rows {
        pos.sort_unstable();
        for p in pos {
            paths.append_value(&path);
            positions.append_value(p as i64);
            count += 1;
        }
    }
    let err = |e: String| Error::Lake(format!("Iceberg position delete file: {e}"));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(paths.finish()), Arc::new(positions.finish())],
    )
    .map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, schema, None).map_err(|e| err(e.to_string()))?;
    w.write(&batch).map_err(|e| err(e.to_string()))?;
    w.close().map_err(|e| err(e.to_string()))?;
    Ok((out, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn rows_are_sorted_and_carry_the_reserved_ids() {
        let (bytes, n) = position_deletes(vec![
            ("file:///t/b.parquet".into(), vec![4, 1]),
            ("file:///t/a.parquet".into(), vec![2]),
        ])
        .unwrap();
        assert_eq!(n, 3);
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes)).unwrap();
        let schema = reader.parquet_schema().root_schema().get_fields().to_vec();
        assert_eq!(schema[0].get_basic_info().id(), 2147483546);
        assert_eq!(schema[1].get_basic_info().id(), 2147483545);
        let batch = reader.build().unwrap().next().unwrap().unwrap();
        let paths = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        let pos = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        let got: Vec<(&str, i64)> = (0..3).map(|i| (paths.value(i), pos.value(i))).collect();
        assert_eq!(
            got,
            [
                ("file:///t/a.parquet", 2),
                ("file:///t/b.parquet", 1),
                ("file:///t/b.parquet", 4)
            ]
        );
    }
}
