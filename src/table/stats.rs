//! File statistics of an `add` action
//! (<https://github.com/delta-io/delta/blob/master/PROTOCOL.md#per-file-statistics>),
//! from the Parquet footer of the data file: `numRecords`, and `nullCount`,
//! `minValues`, `maxValues` of the top-level columns whose Parquet
//! statistics are exact and whose JSON form is plain (integers, dates,
//! strings, `_ts`). Other columns get none: a reader then reads the file.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::basic::{LogicalType, TimeUnit};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// What an `add` action says about a data file.
pub struct FileFacts {
    pub size: u64,
    /// Milliseconds since the epoch, from the store.
    pub modified_ms: i64,
    pub stats: Value,
    /// The Arrow schema the file was written with (`None` if unreadable).
    pub schema: Option<arrow::datatypes::Schema>,
}

/// Bytes read from the end of a file in one request: the footers sluice
/// writes are a few KiB; a larger one costs a second request.
const TAIL: u64 = 64 * 1024;

/// Reads the footer of the Parquet file at `path` and derives its statistics.
pub async fn file_facts(store: &dyn ObjectStore, path: &Path) -> Result<FileFacts> {
    let opts = GetOptions {
        range: Some(GetRange::Suffix(TAIL)),
        ..Default::default()
    };
    let got = store.get_opts(path, opts).await?;
    let size = got.meta.size;
    let modified_ms = got.meta.last_modified.timestamp_millis();
    let tail = got.bytes().await?;
    let unreadable = |why: String| Error::Lake(format!("data file {path}: {why}"));
    if tail.len() < 8 || &tail[tail.len() - 4..] != b"PAR1" {
        return Err(unreadable("not a Parquet file (no footer)".into()));
    }
    let footer_len =
        u32::from_le_bytes(tail[tail.len() - 8..tail.len() - 4].try_into().unwrap()) as usize;
    let footer: Bytes = if footer_len + 8 <= tail.len() {
        tail.slice(tail.len() - 8 - footer_len..tail.len() - 8)
    } else {
        let start = size.checked_sub(8 + footer_len as u64).ok_or_else(|| {
            unreadable(format!(
                "footer of {footer_len} bytes is longer than the file"
            ))
        })?;
        store.get_range(path, start..size - 8).await?
    };
    let meta = ParquetMetaDataReader::decode_metadata(&footer)
        .map_err(|e| unreadable(format!("unreadable footer: {e}")))?;
    let file = meta.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())
            .ok();
    Ok(FileFacts {
        size,
        modified_ms,
        stats: stats(&meta),
        schema,
    })
}

/// One column's bounds, as Delta writes them in JSON.
#[derive(Clone, PartialEq, PartialOrd)]
enum Bound {
    Int(i64),
    Text(String),
}

impl Bound {
    fn json(&self, logical: Option<&LogicalType>) -> Option<Value> {
        Some(match (self, logical) {
            (Bound::Int(days), Some(LogicalType::Date)) => {
                let d = chrono::NaiveDate::from_num_days_from_ce_opt(
                    i32::try_from(*days).ok()?.checked_add(719_163)?,
                )?;
                json!(d.format("%Y-%m-%d").to_string())
            }
            (Bound::Int(ms), Some(LogicalType::Timestamp(t)))
                if t.is_adjusted_to_u_t_c && matches!(t.unit, TimeUnit::MILLIS) =>
            {
                let t = chrono::DateTime::from_timestamp_millis(*ms)?;
                json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
            }
            (Bound::Int(_), Some(LogicalType::Timestamp(_))) => return None,
            (Bound::Int(i), None | Some(LogicalType::Integer { .. })) => json!(i),
            (Bound::Text(s), _) => json!(s),
            _ => return None,
        })
    }
}

fn bounds(s: &Statistics) -> Option<(Bound, Bound)> {
    if !s.min_is_exact() || !s.max_is_exact() {
        return None;
    }
    Some(match s {
        Statistics::Int32(v) => (
            Bound::Int((*v.min_opt()?).into()),
            Bound::Int((*v.max_opt()?).into()),
        ),
        Statistics::Int64(v) => (Bound::Int(*v.min_opt()?), Bound::Int(*v.max_opt()?)),
        Statistics::ByteArray(v) => (
            Bound::Text(String::from_utf8(v.min_opt()?.data().to_vec()).ok()?),
            Bound::Text(String::from_utf8(v.max_opt()?.data().to_vec()).ok()?),
        ),
        _ => return None,
    })
}

/// The `stats` of an `add` action for a file with this footer.
pub fn stats(meta: &ParquetMetaData) -> Value {
    let rows: i64 = meta.row_groups().iter().map(|g| g.num_rows()).sum();
    let mut mins = Map::new();
    let mut maxs = Map::new();
    let mut nulls = Map::new();
    let schema = meta.file_metadata().schema_descr();
    for (i, col) in schema.columns().iter().enumerate() {
        // Top-level primitive columns only (not `_before`'s fields, not lists).
        let path = col.path().parts();
        if path.len() != 1 || col.max_rep_level() > 0 {
            continue;
        }
        let name = &path[0];
        let chunk_stats: Option<Vec<&Statistics>> = meta
            .row_groups()
            .iter()
            .map(|g| g.column(i).statistics())
            .collect();
        let Some(chunk_stats) = chunk_stats else {
            continue;
        };
        let null_count: Option<u64> = chunk_stats.iter().map(|s| s.null_count_opt()).sum();
        if let Some(n) = null_count {
            nulls.insert(name.clone(), json!(n));
        }
        let logical = col.logical_type_ref();
        let is_text = matches!(logical, Some(LogicalType::String));
        if matches!(col.physical_type(), parquet::basic::Type::BYTE_ARRAY) && !is_text {
            continue; // binary, or a decimal: no plain JSON bound
        }
        if matches!(logical, Some(LogicalType::Decimal { .. })) {
            continue;
        }
        let mut lo: Option<Bound> = None;
        let mut hi: Option<Bound> = None;
        let mut complete = true;
        for s in &chunk_stats {
            match bounds(s) {
                Some((a, b)) => {
                    if lo.as_ref().is_none_or(|l| a < *l) {
                        lo = Some(a);
                    }
                    if hi.as_ref().is_none_or(|h| b > *h) {
                        hi = Some(b);
                    }
                }
                // A row group of nulls only has no bounds; others must.
                None if s.null_count_opt().is_some() => {
                    let all_null = s.min_bytes_opt().is_none() && s.max_bytes_opt().is_none();
                    complete &= all_null;
                }
                None => complete = false,
            }
        }
        if !complete {
            continue;
        }
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if let (Some(a), Some(b)) = (lo.json(logical), hi.json(logical)) {
                mins.insert(name.clone(), a);
                maxs.insert(name.clone(), b);
            }
        }
    }
    json!({
        "numRecords": rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": nulls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Date32Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    #[tokio::test]
    async fn stats_come_from_the_footer() {
        let ts = TimestampMillisecondArray::from(vec![1_700_000_000_123, 1_700_000_001_000, 5])
            .with_timezone("UTC");
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(vec![Some(7), None, Some(-3)])) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from(vec![Some("b"), Some("a"), None])) as ArrayRef,
            ),
            (
                "d",
                Arc::new(Date32Array::from(vec![Some(0), Some(19_000), None])) as ArrayRef,
            ),
            ("_ts", Arc::new(ts) as ArrayRef),
        ])
        .unwrap();
        let bytes = crate::sink::encode_parquet(&batch).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let path = Path::from("db/t/part-1.parquet");
        store.put(&path, bytes.clone().into()).await.unwrap();
        let facts = file_facts(store.as_ref(), &path).await.unwrap();
        assert_eq!(facts.size, bytes.len() as u64);
        assert!(facts.modified_ms > 1_600_000_000_000);
        let s = facts.stats;
        assert_eq!(s["numRecords"], 3);
        assert_eq!(
            s["nullCount"],
            json!({"id": 1, "name": 1, "d": 1, "_ts": 0})
        );
        assert_eq!(
            s["minValues"],
            json!({"id": -3, "name": "a", "d": "1970-01-01", "_ts": "1970-01-01T00:00:00.005Z"})
        );
        assert_eq!(
            s["maxValues"],
            json!({"id": 7, "name": "b", "d": "2022-01-08", "_ts": "2023-11-14T22:13:21.000Z"})
        );

        let err = match file_facts(store.as_ref(), &Path::from("db/t/none.parquet")).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a missing file has no facts"),
        };
        assert!(
            err.contains("not found") || err.contains("No such file"),
            "{err}"
        );
        store
            .put(
                &Path::from("db/t/x.parquet"),
                b"not parquet".to_vec().into(),
            )
            .await
            .unwrap();
        let err = file_facts(store.as_ref(), &Path::from("db/t/x.parquet"))
            .await
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "lake: data file db/t/x.parquet: not a Parquet file (no footer)"
        );
    }
}
