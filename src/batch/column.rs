//! One Arrow builder per table column. The decoder appends plain numbers,
//! strings and byte slices; each builder knows its own Arrow type.

use std::sync::Arc;

use arrow::array::*;
use arrow::datatypes::{i256, DataType};

use crate::schema::ColumnKind;

pub enum ColumnBuilder {
    I8(Int8Builder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    U8(UInt8Builder),
    U16(UInt16Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    D128(Decimal128Builder),
    D256(Decimal256Builder),
    Date(Date32Builder),
    DateTime(TimestampMicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Duration(DurationMicrosecondBuilder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    List(ListBuilder<StringBuilder>),
}

impl ColumnBuilder {
    pub fn new(kind: &ColumnKind) -> Self {
        match kind.arrow_type() {
            DataType::Int8 => ColumnBuilder::I8(Int8Builder::new()),
            DataType::Int16 => ColumnBuilder::I16(Int16Builder::new()),
            DataType::Int32 => ColumnBuilder::I32(Int32Builder::new()),
            DataType::Int64 => ColumnBuilder::I64(Int64Builder::new()),
            DataType::UInt8 => ColumnBuilder::U8(UInt8Builder::new()),
            DataType::UInt16 => ColumnBuilder::U16(UInt16Builder::new()),
            DataType::UInt32 => ColumnBuilder::U32(UInt32Builder::new()),
            DataType::UInt64 => ColumnBuilder::U64(UInt64Builder::new()),
            DataType::Float32 => ColumnBuilder::F32(Float32Builder::new()),
            DataType::Float64 => ColumnBuilder::F64(Float64Builder::new()),
            DataType::Decimal128(p, s) => ColumnBuilder::D128(
                Decimal128Builder::new().with_data_type(DataType::Decimal128(p, s)),
            ),
            DataType::Decimal256(p, s) => ColumnBuilder::D256(
                Decimal256Builder::new().with_data_type(DataType::Decimal256(p, s)),
            ),
            DataType::Date32 => ColumnBuilder::Date(Date32Builder::new()),
            DataType::Timestamp(_, None) => {
                ColumnBuilder::DateTime(TimestampMicrosecondBuilder::new())
            }
            DataType::Timestamp(_, Some(_)) => {
                ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
            }
            DataType::Duration(_) => ColumnBuilder::Duration(DurationMicrosecondBuilder::new()),
            DataType::Utf8 => ColumnBuilder::Utf8(StringBuilder::new()),
            DataType::Binary => ColumnBuilder::Binary(BinaryBuilder::new()),
            DataType::List(field) => ColumnBuilder::List(
                ListBuilder::new(StringBuilder::new()).with_field(Arc::clone(&field)),
            ),
            other => unreachable!("ColumnKind::arrow_type never yields {other}"),
        }
    }

    pub fn append_null(&mut self) {
        match self {
            ColumnBuilder::I8(b) => b.append_null(),
            ColumnBuilder::I16(b) => b.append_null(),
            ColumnBuilder::I32(b) => b.append_null(),
            ColumnBuilder::I64(b) => b.append_null(),
            ColumnBuilder::U8(b) => b.append_null(),
            ColumnBuilder::U16(b) => b.append_null(),
            ColumnBuilder::U32(b) => b.append_null(),
            ColumnBuilder::U64(b) => b.append_null(),
            ColumnBuilder::F32(b) => b.append_null(),
            ColumnBuilder::F64(b) => b.append_null(),
            ColumnBuilder::D128(b) => b.append_null(),
            ColumnBuilder::D256(b) => b.append_null(),
            ColumnBuilder::Date(b) => b.append_null(),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.append_null(),
            ColumnBuilder::Duration(b) => b.append_null(),
            ColumnBuilder::Utf8(b) => b.append_null(),
            ColumnBuilder::Binary(b) => b.append_null(),
            ColumnBuilder::List(b) => b.append_null(),
        }
    }

    /// A signed integer of any width; the builder narrows it to its own width.
    #[inline]
    pub fn append_i64(&mut self, v: i64) {
        match self {
            ColumnBuilder::I8(b) => b.append_value(v as i8),
            ColumnBuilder::I16(b) => b.append_value(v as i16),
            ColumnBuilder::I32(b) => b.append_value(v as i32),
            ColumnBuilder::I64(b) => b.append_value(v),
            ColumnBuilder::Duration(b) => b.append_value(v),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.append_value(v),
            other => other.append_u64(v as u64),
        }
    }

    /// An unsigned integer of any width.
    #[inline]
    pub fn append_u64(&mut self, v: u64) {
        match self {
            ColumnBuilder::U8(b) => b.append_value(v as u8),
            ColumnBuilder::U16(b) => b.append_value(v as u16),
            ColumnBuilder::U32(b) => b.append_value(v as u32),
            ColumnBuilder::U64(b) => b.append_value(v),
            ColumnBuilder::I8(b) => b.append_value(v as i8),
            ColumnBuilder::I16(b) => b.append_value(v as i16),
            ColumnBuilder::I32(b) => b.append_value(v as i32),
            ColumnBuilder::I64(b) => b.append_value(v as i64),
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
    pub fn append_i256(&mut self, v: i256) {
        if let ColumnBuilder::D256(b) = self {
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
            ColumnBuilder::I8(b) => b.len(),
            ColumnBuilder::I16(b) => b.len(),
            ColumnBuilder::I32(b) => b.len(),
            ColumnBuilder::I64(b) => b.len(),
            ColumnBuilder::U8(b) => b.len(),
            ColumnBuilder::U16(b) => b.len(),
            ColumnBuilder::U32(b) => b.len(),
            ColumnBuilder::U64(b) => b.len(),
            ColumnBuilder::F32(b) => b.len(),
            ColumnBuilder::F64(b) => b.len(),
            ColumnBuilder::D128(b) => b.len(),
            ColumnBuilder::D256(b) => b.len(),
            ColumnBuilder::Date(b) => b.len(),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => b.len(),
            ColumnBuilder::Duration(b) => b.len(),
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
            ColumnBuilder::I8(b) => Arc::new(b.finish()),
            ColumnBuilder::I16(b) => Arc::new(b.finish()),
            ColumnBuilder::I32(b) => Arc::new(b.finish()),
            ColumnBuilder::I64(b) => Arc::new(b.finish()),
            ColumnBuilder::U8(b) => Arc::new(b.finish()),
            ColumnBuilder::U16(b) => Arc::new(b.finish()),
            ColumnBuilder::U32(b) => Arc::new(b.finish()),
            ColumnBuilder::U64(b) => Arc::new(b.finish()),
            ColumnBuilder::F32(b) => Arc::new(b.finish()),
            ColumnBuilder::F64(b) => Arc::new(b.finish()),
            ColumnBuilder::D128(b) => Arc::new(b.finish()),
            ColumnBuilder::D256(b) => Arc::new(b.finish()),
            ColumnBuilder::Date(b) => Arc::new(b.finish()),
            ColumnBuilder::DateTime(b) | ColumnBuilder::Timestamp(b) => Arc::new(b.finish()),
            ColumnBuilder::Duration(b) => Arc::new(b.finish()),
            ColumnBuilder::Utf8(b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(b) => Arc::new(b.finish()),
            ColumnBuilder::List(b) => Arc::new(b.finish()),
        }
    }
}
