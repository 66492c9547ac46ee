//! Rows a snapshot reads (the binary protocol, strings as raw bytes in their
//! column's charset) into the Arrow builders the binlog decoder fills, with
//! the decoder's own rules: a snapshot row equals the binlog row of the same
//! value.

use arrow::array::{ArrayRef, StringBuilder};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use mysql_async::Value;

use crate::batch::column::ColumnBuilder;
use crate::decode::values::days_from_civil;
use crate::schema::{ColumnDef, TableSchema};
use crate::types::{Charset, ColumnKind};

const MICROS_PER_SEC: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SEC;

/// One column being filled.
enum Slot {
    Builder(ColumnBuilder),
    /// DECIMAL up to 38 digits arrives as its text; cast exactly at the end.
    Decimal(StringBuilder, DataType),
}

/// Builders for one chunk of one table.
pub struct ChunkBuilder {
    columns: Vec<(ColumnDef, Option<Charset>, Slot)>,
    pub rows: usize,
    pub zero_dates: u64,
    pub bytes: usize,
}

impl ChunkBuilder {
    pub fn new(shape: &TableSchema) -> Self {
        let columns = shape
            .columns
            .iter()
            .map(|c| {
                let slot = match c.kind.arrow_type() {
                    ty @ DataType::Decimal128(..)
                        if matches!(c.kind, ColumnKind::Decimal { .. }) =>
                    {
                        Slot::Decimal(StringBuilder::new(), ty)
                    }
                    // A DECIMAL above 38 digits keeps the text as it is.
                    _ => Slot::Builder(ColumnBuilder::new(&c.kind)),
                };
                let charset = c.charset.as_deref().and_then(Charset::from_mysql);
                (c.clone(), charset, slot)
            })
            .collect();
        ChunkBuilder {
            columns,
            rows: 0,
            zero_dates: 0,
            bytes: 0,
        }
    }

    /// Appends one row: `values` holds the table's columns in shape order.
    pub fn push(&mut self, values: &[Value]) -> Result<(), String> {
        if values.len() < self.columns.len() {
            return Err(format!(
                "{} values for {} columns",
                values.len(),
                self.columns.len()
            ));
        }
        for ((col, charset, slot), v) in self.columns.iter_mut().zip(values) {
            self.bytes += value_bytes(v);
            append(col, *charset, slot, v, &mut self.zero_dates)
                .map_err(|e| format!("column `{}` ({}): {e}", col.name, col.mysql_type))?;
        }
        self.rows += 1;
        Ok(())
    }

    pub fn finish(self) -> Result<Vec<ArrayRef>, String> {
        self.columns
            .into_iter()
            .map(|(col, _, slot)| match slot {
                Slot::Builder(mut b) => Ok(b.finish()),
                Slot::Decimal(mut texts, ty) => {
                    let texts: ArrayRef = std::sync::Arc::new(texts.finish());
                    let opts = CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    cast_with_options(&texts, &ty, &opts)
                        .map_err(|e| format!("column `{}` ({}): {e}", col.name, col.mysql_type))
                }
            })
            .collect()
    }
}

fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Bytes(b) => b.len() + 4,
        _ => 8,
    }
}

fn append(
    col: &ColumnDef,
    charset: Option<Charset>,
    slot: &mut Slot,
    v: &Value,
    zero_dates: &mut u64,
) -> Result<(), String> {
    let b = match slot {
        Slot::Decimal(texts, _) => {
            match v {
                Value::NULL => texts.append_null(),
                Value::Bytes(t) => texts.append_value(
                    std::str::from_utf8(t).map_err(|_| "DECIMAL text is not ASCII".to_string())?,
                ),
                other => return Err(format!("unexpected value {other:?}")),
            }
            return Ok(());
        }
        Slot::Builder(b) => b,
    };
    if matches!(v, Value::NULL) {
        b.append_null();
        return Ok(());
    }
    let unexpected = || format!("unexpected value {v:?}");
    match (&col.kind, v) {
        (ColumnKind::Int { .. } | ColumnKind::Year, Value::Int(i)) => b.append_i64(*i),
        (ColumnKind::Int { .. } | ColumnKind::Year, Value::UInt(u)) => b.append_u64(*u),
        (ColumnKind::Float, Value::Float(f)) => b.append_f32(*f),
        (ColumnKind::Float, Value::Double(d)) => b.append_f32(*d as f32),
        (ColumnKind::Double, Value::Double(d)) => b.append_f64(*d),
        (ColumnKind::Double, Value::Float(f)) => b.append_f64(*f as f64),
        (ColumnKind::Date, Value::Date(y, m, d, ..)) => match civil_days(*y, *m, *d) {
            Some(days) => b.append_date(days as i32),
            None => zero(b, zero_dates),
        },
        (
            ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. },
            Value::Date(y, mo, d, h, mi, s, us),
        ) => match civil_days(*y, *mo, *d) {
            Some(days) => b.append_i64(
                days * MICROS_PER_DAY
                    + (*h as i64 * 3600 + *mi as i64 * 60 + *s as i64) * MICROS_PER_SEC
                    + *us as i64,
            ),
            None => zero(b, zero_dates),
        },
        (ColumnKind::Time { .. }, Value::Time(neg, d, h, mi, s, us)) => {
            let micros = ((*d as i64 * 24 + *h as i64) * 3600 + *mi as i64 * 60 + *s as i64)
                * MICROS_PER_SEC
                + *us as i64;
            b.append_i64(if *neg { -micros } else { micros });
        }
        (ColumnKind::Decimal { .. }, Value::Bytes(t)) => b.append_str(
            std::str::from_utf8(t).map_err(|_| "DECIMAL text is not ASCII".to_string())?,
        ),
        (ColumnKind::Bit { .. }, Value::Bytes(bytes)) => {
            b.append_u64(crate::decode::values::be_uint(bytes))
        }
        (ColumnKind::Bit { .. }, Value::UInt(u)) => b.append_u64(*u),
        (ColumnKind::Bit { .. }, Value::Int(i)) => b.append_u64(*i as u64),
        (ColumnKind::Enum { .. } | ColumnKind::Text { .. }, Value::Bytes(bytes)) => {
            b.append_str(&text(charset, bytes)?)
        }
        (ColumnKind::Set { labels }, Value::Bytes(bytes)) => {
            let text = text(charset, bytes)?;
            let mut bits = 0u64;
            for label in text.split(',').filter(|l| !l.is_empty()) {
                let i = labels
                    .iter()
                    .position(|l| l == label)
                    .ok_or_else(|| format!("SET label `{label}` is not in the schema"))?;
                bits |= 1 << i;
            }
            b.append_set(bits, labels);
        }
        // SELECT sends MariaDB's address and UUID types as their text.
        (ColumnKind::Inet4 | ColumnKind::Inet6 | ColumnKind::Uuid, Value::Bytes(bytes)) => {
            b.append_str(std::str::from_utf8(bytes).map_err(|e| format!("text is not UTF-8: {e}"))?)
        }
        (ColumnKind::Json, Value::Bytes(bytes)) => b.append_str(
            std::str::from_utf8(bytes).map_err(|e| format!("JSON text is not UTF-8: {e}"))?,
        ),
        (ColumnKind::Binary { pad_to: Some(n) }, Value::Bytes(bytes)) => {
            b.append_padded_bytes(bytes, *n)
        }
        (ColumnKind::Binary { pad_to: None } | ColumnKind::Geometry, Value::Bytes(bytes)) => {
            b.append_bytes(bytes)
        }
        _ => return Err(unexpected()),
    }
    Ok(())
}

/// Days since the epoch; `None` for zero or partly-zero dates (month or day
/// 0), as the decoder does. Year 0 with a month and day is a date.
fn civil_days(y: u16, m: u8, d: u8) -> Option<i64> {
    if m == 0 || d == 0 {
        return None;
    }
    Some(days_from_civil(y as i64, m as i64, d as i64))
}

#[cold]
fn zero(b: &mut ColumnBuilder, zero_dates: &mut u64) {
    *zero_dates += 1;
    b.append_null();
}

fn text(charset: Option<Charset>, bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, String> {
    match charset {
        Some(cs) => cs.decode(bytes),
        None => std::str::from_utf8(bytes)
            .map(std::borrow::Cow::Borrowed)
            .map_err(|e| format!("invalid UTF-8: {e}")),
    }
}
