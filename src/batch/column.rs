//! One Arrow builder per table column. The decoder appends plain numbers,
//! strings and byte slices; each builder knows its own Arrow type.

use std::sync::Arc;

use arrow::array::*;
use arrow::datatypes::DataType;

use crate::types::ColumnKind;

/// The rows a new builder has room for. Arrow's default (1,024) costs
/// about 100 KiB a table before its first row: 1 GiB of buffers holding a
/// few rows each with 10,000 tables. A builder doubles as it fills, and
/// starts from nothing again once a buffer is written out, so a large
/// table pays a few more doublings, once.
pub const INITIAL_ROWS: usize = 8;

pub enum ColumnBuilder {
    I16(Int16Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    D128(Decimal128Builder),
    Date(Date32Builder),
    DateTime(TimestampMicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    List(ListBuilder<StringBuilder>),
}

impl ColumnBuilder {
    pub fn new(kind: &ColumnKind) -> Self {
        let n = INITIAL_ROWS;
        match kind.arrow_type() {
            DataType::Int16 => ColumnBuilder::I16(Int16Builder::with_capacity(n)),
            DataType::Int64 => ColumnBuilder::I64(Int64Builder::with_capacity(n)),
            DataType::Float32 => ColumnBuilder::F32(Float32Builder::with_capacity(n)),
            DataType::Float64 => ColumnBuilder::F64(Float64Builder::with_capacity(n)),
            DataType::Decimal128(p, s) => ColumnBuilder::D128(
                Decimal128Builder::with_capacity(n).with_data_type(DataType::Decimal128(p, s)),
            ),
            DataType::Date32 => ColumnBuilder::Date(Date32Builder::with_capacity(n)),
            DataType::Timestamp(_, None) => {
                ColumnBuilder::DateTime(TimestampMicrosecondBuilder::with_capacity(n))
            }
            DataType::Timestamp(_, Some(_)) => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC"),
            ),
            DataType::Utf8 => ColumnBuilder::Utf8(StringBuilder::with_capacity(n, n * 8)),
            DataType::Binary => ColumnBuilder::Binary(BinaryBuilder::with_capacity(n, n * 8)),
            DataType::List(field) => ColumnBuilder::List(
                ListBuilder::with_capacity(StringBuilder::with_capacity(n, n * 8), n)
                    .with_field(Arc::clone(&field)),
            ),
            other => unreachable!("ColumnKind::arrow_type never yields {other}"),
        }
    }

    pub fn append_null(&mut self) {
        match self {
            ColumnBuilder::I16(b) => b.append_null(),
            ColumnBuilder::I64(b) => b.append_null(),
            ColumnBuilder::F32(b) => b.append_null(),
            ColumnBuilder::F64(b) => b.append_null(),
            ColumnBuilder::D128(b) => b.append_null(),
            ColumnBuilder::Date(b) => b.append_null(),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.append_null(),
            ColumnBuilder::Utf8(b) => b.append_null(),
            ColumnBuilder::Binary(b) => b.append_null(),
            ColumnBuilder::List(b) => b.append_null(),
        }
    }

    /// A signed integer (an integer column, microseconds of a TIME or a
    /// timestamp, a YEAR); YEAR's builder narrows it to 16 bits.
    #[inline]
    pub fn append_i64(&mut self, v: i64) {
        match self {
            ColumnBuilder::I64(b) => b.append_value(v),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.append_value(v),
            ColumnBuilder::I16(b) => b.append_value(v as i16),
            ColumnBuilder::D128(b) => b.append_value(v as i128),
            _ => self.append_null(),
        }
    }

    /// An unsigned integer: BIGINT UNSIGNED and BIT(64) go to
    /// Decimal128(20,0); narrower ones fit Int64.
    #[inline]
    pub fn append_u64(&mut self, v: u64) {
        match self {
            ColumnBuilder::I64(b) => b.append_value(v as i64),
            ColumnBuilder::D128(b) => b.append_value(v as i128),
            ColumnBuilder::I16(b) => b.append_value(v as i16),
            _ => self.append_null(),
        }
    }

    #[inline]
    pub fn append_f32(&mut self, v: f32) {
        if let ColumnBuilder::F32(b) = self {
            b.append_value(v)
        }
    }

    #[inline]
    pub fn append_f64(&mut self, v: f64) {
        if let ColumnBuilder::F64(b) = self {
            b.append_value(v)
        }
    }

    #[inline]
    pub fn append_i128(&mut self, v: i128) {
        if let ColumnBuilder::D128(b) = self {
            b.append_value(v)
        }
    }

    #[inline]
    pub fn append_date(&mut self, days: i32) {
        if let ColumnBuilder::Date(b) = self {
            b.append_value(days)
        }
    }

    #[inline]
    pub fn append_str(&mut self, s: &str) {
        if let ColumnBuilder::Utf8(b) = self {
            b.append_value(s)
        }
    }

    #[inline]
    pub fn append_bytes(&mut self, v: &[u8]) {
        if let ColumnBuilder::Binary(b) = self {
            b.append_value(v)
        }
    }

    /// BINARY(n): the binlog strips trailing 0x00; SELECT returns them.
    pub fn append_padded_bytes(&mut self, v: &[u8], pad_to: usize) {
        if let ColumnBuilder::Binary(b) = self {
            if v.len() >= pad_to {
                b.append_value(v);
            } else {
                let mut padded = v.to_vec();
                padded.resize(pad_to, 0);
                b.append_value(&padded);
            }
        }
    }

    /// A SET value: the labels whose bits are set, in definition order.
    pub fn append_set(&mut self, bits: u64, labels: &[String]) {
        if let ColumnBuilder::List(b) = self {
            for (i, label) in labels.iter().enumerate().take(64) {
                if bits & (1 << i) != 0 {
                    b.values().append_value(label);
                }
            }
            b.append(true);
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ColumnBuilder::I16(b) => b.len(),
            ColumnBuilder::I64(b) => b.len(),
            ColumnBuilder::F32(b) => b.len(),
            ColumnBuilder::F64(b) => b.len(),
            ColumnBuilder::D128(b) => b.len(),
            ColumnBuilder::Date(b) => b.len(),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.len(),
            ColumnBuilder::Utf8(b) => b.len(),
            ColumnBuilder::Binary(b) => b.len(),
            ColumnBuilder::List(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::I16(b) => Arc::new(b.finish()),
            ColumnBuilder::I64(b) => Arc::new(b.finish()),
            ColumnBuilder::F32(b) => Arc::new(b.finish()),
            ColumnBuilder::F64(b) => Arc::new(b.finish()),
            ColumnBuilder::D128(b) => Arc::new(b.finish()),
            ColumnBuilder::Date(b) => Arc::new(b.finish()),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => Arc::new(b.finish()),
            ColumnBuilder::Utf8(b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(b) => Arc::new(b.finish()),
            ColumnBuilder::List(b) => Arc::new(b.finish()),
        }
    }
}
