//! Rows events (WRITE/UPDATE/DELETE, v1 and v2) decoded straight into a
//! table's Arrow builders.
//!
//! This is the hot path: every cell is read from the event bytes and appended
//! to its builder with no heap value in between and no dynamic dispatch (a
//! `match` on the column's [`Codec`], fixed when the TABLE_MAP arrives).
//! Layout: <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>

use std::sync::Arc;

use mysql_common::binlog::events::TableMapEvent;
use mysql_common::constants::ColumnType;

use super::values::*;
use crate::batch::column::ColumnBuilder;
use crate::batch::{RowOp, RowOrigin, TableBuffer};
use crate::schema::{Charset, ColumnKind, TableSchema};

/// How one column's bytes are laid out in a rows event.
#[derive(Debug, Clone)]
pub enum Codec {
    /// Little-endian integer of `bytes` width; signedness from the schema.
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
        size: usize,
    },
    Date,
    DateTime2 {
        fsp: u8,
    },
    Timestamp2 {
        fsp: u8,
    },
    Time2 {
        fsp: u8,
    },
    DateTimeV1,
    TimestampV1,
    TimeV1,
    Year,
    Bit {
        bytes: usize,
    },
    Enum {
        pack: usize,
        labels: Arc<[String]>,
    },
    Set {
        pack: usize,
        labels: Arc<[String]>,
    },
    /// CHAR/VARCHAR/BINARY/VARBINARY: a 1- or 2-byte length, then the bytes.
    Short {
        len_bytes: usize,
        target: Bytes,
    },
    /// BLOB/TEXT/GEOMETRY: a 1- to 4-byte length, then the bytes.
    Long {
        len_bytes: usize,
        target: Bytes,
    },
    /// MySQL binary JSON after a 1- to 4-byte length.
    Json {
        len_bytes: usize,
    },
}

/// What variable-length bytes become.
#[derive(Debug, Clone, Copy)]
pub enum Bytes {
    Text(Charset),
    Binary { pad_to: Option<usize> },
}

/// A captured table's decode plan for one TABLE_MAP (one table id).
pub struct TablePlan {
    pub schema: Arc<TableSchema>,
    pub codecs: Vec<Codec>,
}

impl TablePlan {
    /// Checks the TABLE_MAP against the schema and fixes a codec per column.
    /// Disagreement is an error with both shapes: never a guess.
    pub fn new(schema: Arc<TableSchema>, tme: &TableMapEvent<'_>) -> Result<Self, String> {
        let count = tme.columns_count() as usize;
        if count != schema.columns.len() {
            return Err(format!(
                "the binlog has {count} columns ({}), the schema has {} ({})",
                binlog_shape(tme),
                schema.columns.len(),
                schema.describe()
            ));
        }
        let mut codecs = Vec::with_capacity(count);
        for (i, col) in schema.columns.iter().enumerate() {
            let ty = tme
                .get_raw_column_type(i)
                .map_err(|e| format!("column {}: {e}", col.name))?
                .ok_or_else(|| format!("column {}: missing type", col.name))?;
            let meta = tme.get_column_metadata(i).unwrap_or(&[]);
            let codec = codec_for(ty, meta, &col.kind).ok_or_else(|| {
                format!(
                    "column `{}` is {} in the schema but {:?} in the binlog; binlog shape: {}; schema: {}",
                    col.name,
                    col.mysql_type,
                    ty,
                    binlog_shape(tme),
                    schema.describe()
                )
            })?;
            codecs.push(codec);
        }
        Ok(TablePlan { schema, codecs })
    }
}

fn binlog_shape(tme: &TableMapEvent<'_>) -> String {
    (0..tme.columns_count() as usize)
        .map(|i| match tme.get_column_type(i) {
            Ok(Some(t)) => format!("{t:?}"),
            _ => "?".to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn meta_u16(meta: &[u8]) -> usize {
    match meta {
        [a, b, ..] => *a as usize | (*b as usize) << 8,
        [a] => *a as usize,
        [] => 0,
    }
}

fn codec_for(ty: ColumnType, meta: &[u8], kind: &ColumnKind) -> Option<Codec> {
    use ColumnType as T;
    let bytes_target = |kind: &ColumnKind| match kind {
        ColumnKind::Text { charset } => Some(Bytes::Text(*charset)),
        ColumnKind::Binary { pad_to } => Some(Bytes::Binary { pad_to: *pad_to }),
        ColumnKind::Geometry => Some(Bytes::Binary { pad_to: None }),
        _ => None,
    };
    Some(match (ty, kind.clone()) {
        (T::MYSQL_TYPE_TINY, ColumnKind::Int { bytes: 1, unsigned }) => {
            Codec::Int { bytes: 1, unsigned }
        }
        (T::MYSQL_TYPE_SHORT, ColumnKind::Int { bytes: 2, unsigned }) => {
            Codec::Int { bytes: 2, unsigned }
        }
        (T::MYSQL_TYPE_INT24, ColumnKind::Int { bytes: 3, unsigned }) => {
            Codec::Int { bytes: 3, unsigned }
        }
        (T::MYSQL_TYPE_LONG, ColumnKind::Int { bytes: 4, unsigned }) => {
            Codec::Int { bytes: 4, unsigned }
        }
        (T::MYSQL_TYPE_LONGLONG, ColumnKind::Int { bytes: 8, unsigned }) => {
            Codec::Int { bytes: 8, unsigned }
        }
        (T::MYSQL_TYPE_FLOAT, ColumnKind::Float) => Codec::Float,
        (T::MYSQL_TYPE_DOUBLE, ColumnKind::Double) => Codec::Double,
        (T::MYSQL_TYPE_NEWDECIMAL, ColumnKind::Decimal { precision, scale }) => {
            // The binlog's own precision/scale decide the byte layout.
            let (p, s) = (*meta.first()?, *meta.get(1)?);
            if p != precision || s != scale {
                return None;
            }
            Codec::Decimal {
                precision: p,
                scale: s,
                size: decimal_size(p, s),
            }
        }
        (T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE, ColumnKind::Date) => Codec::Date,
        (T::MYSQL_TYPE_DATETIME2, ColumnKind::DateTime { .. }) => Codec::DateTime2 {
            fsp: *meta.first()?,
        },
        (T::MYSQL_TYPE_TIMESTAMP2, ColumnKind::Timestamp { .. }) => Codec::Timestamp2 {
            fsp: *meta.first()?,
        },
        (T::MYSQL_TYPE_TIME2, ColumnKind::Time { .. }) => Codec::Time2 {
            fsp: *meta.first()?,
        },
        (T::MYSQL_TYPE_DATETIME, ColumnKind::DateTime { .. }) => Codec::DateTimeV1,
        (T::MYSQL_TYPE_TIMESTAMP, ColumnKind::Timestamp { .. }) => Codec::TimestampV1,
        (T::MYSQL_TYPE_TIME, ColumnKind::Time { .. }) => Codec::TimeV1,
        (T::MYSQL_TYPE_YEAR, ColumnKind::Year) => Codec::Year,
        (T::MYSQL_TYPE_BIT, ColumnKind::Bit { .. }) => {
            let (bits, bytes) = (*meta.first()? as usize, *meta.get(1)? as usize);
            Codec::Bit {
                bytes: bytes + usize::from(bits > 0),
            }
        }
        (T::MYSQL_TYPE_STRING, _) => {
            // Real type and length share two bytes; CHAR longer than 255
            // borrows bits of the type byte (`Field_string::do_save_field_metadata`).
            let (b0, b1) = (*meta.first()? as usize, *meta.get(1)? as usize);
            let (real, max_len) = if b0 & 0x30 != 0x30 {
                (b0 | 0x30, b1 | (((b0 & 0x30) ^ 0x30) << 4))
            } else {
                (b0, b1)
            };
            match (real as u8, kind.clone()) {
                (247, ColumnKind::Enum { labels }) => Codec::Enum {
                    pack: max_len,
                    labels,
                },
                (248, ColumnKind::Set { labels }) => Codec::Set {
                    pack: max_len,
                    labels,
                },
                (254, k) => Codec::Short {
                    len_bytes: if max_len > 255 { 2 } else { 1 },
                    target: bytes_target(&k)?,
                },
                _ => return None,
            }
        }
        (T::MYSQL_TYPE_ENUM, ColumnKind::Enum { labels }) => Codec::Enum {
            pack: meta_u16(meta).max(1) & 0xFF,
            labels,
        },
        (T::MYSQL_TYPE_SET, ColumnKind::Set { labels }) => Codec::Set {
            pack: meta_u16(meta).max(1) & 0xFF,
            labels,
        },
        (T::MYSQL_TYPE_VARCHAR | T::MYSQL_TYPE_VAR_STRING, k) => Codec::Short {
            len_bytes: if meta_u16(meta) > 255 { 2 } else { 1 },
            target: bytes_target(&k)?,
        },
        (
            T::MYSQL_TYPE_BLOB
            | T::MYSQL_TYPE_TINY_BLOB
            | T::MYSQL_TYPE_MEDIUM_BLOB
            | T::MYSQL_TYPE_LONG_BLOB
            | T::MYSQL_TYPE_GEOMETRY,
            k,
        ) => Codec::Long {
            len_bytes: *meta.first()? as usize,
            target: bytes_target(&k)?,
        },
        // MySQL's JSON is binary in the binlog whatever the history calls it
        // (a DDL-derived `json` column resolves to text, as MariaDB's is).
        (T::MYSQL_TYPE_JSON, ColumnKind::Json | ColumnKind::Text { .. }) => Codec::Json {
            len_bytes: *meta.first()? as usize,
        },
        _ => return None,
    })
}

/// The shape of a rows event, from its type code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsKind {
    Write,
    Update,
    Delete,
}

/// Counters the decoder keeps for the operator.
#[derive(Debug, Default, Clone, Copy)]
pub struct DecodeStats {
    /// Zero or partly-zero dates written as null.
    pub zero_dates: u64,
}

/// A cursor over an event body; every read is bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or_else(|| {
                format!(
                    "event truncated: wanted {n} bytes at offset {} of {}",
                    self.pos,
                    self.data.len()
                )
            })?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn lenenc(&mut self) -> Result<u64, String> {
        let first = self.take(1)?[0];
        Ok(match first {
            0xFC => le_uint(self.take(2)?),
            0xFD => le_uint(self.take(3)?),
            0xFE => le_uint(self.take(8)?),
            n => n as u64,
        })
    }
}

#[inline]
fn bit(bitmap: &[u8], i: usize) -> bool {
    bitmap[i / 8] & (1 << (i % 8)) != 0
}

/// Decodes every row of one rows event into `buffer`. `post_header_len` is
/// the FDE's post-header length of this event type (8 for v1, 10 for v2).
/// Returns the number of rows appended. On error nothing is guaranteed about
/// the buffer: the caller stops the pipeline.
#[allow(clippy::too_many_arguments)]
pub fn decode_rows(
    plan: &TablePlan,
    kind: RowsKind,
    body: &[u8],
    post_header_len: usize,
    buffer: &mut TableBuffer,
    origin: &RowOrigin<'_>,
    next_seq: &mut i64,
    stats: &mut DecodeStats,
) -> Result<usize, String> {
    let mut r = Reader { data: body, pos: 0 };
    r.take(8)?; // table id (6) and flags (2)
    if post_header_len >= 10 {
        // v2: extra data, its length counts its own two bytes.
        let extra = le_uint(r.take(2)?) as usize;
        r.take(extra.saturating_sub(2))?;
    }
    let ncols = r.lenenc()? as usize;
    if ncols != plan.codecs.len() {
        return Err(format!(
            "rows event has {ncols} columns, the table map {}",
            plan.codecs.len()
        ));
    }
    let bitmap_len = ncols.div_ceil(8);
    let present_before = r.take(bitmap_len)?;
    let present_after = if kind == RowsKind::Update {
        r.take(bitmap_len)?
    } else {
        present_before
    };
    let mut rows = 0;
    while r.pos < body.len() {
        let start = r.pos;
        match kind {
            RowsKind::Write => {
                read_image(plan, &mut r, present_after, &mut buffer.columns, stats)?;
            }
            RowsKind::Delete => {
                read_image(plan, &mut r, present_before, &mut buffer.columns, stats)?;
            }
            RowsKind::Update => {
                read_image(plan, &mut r, present_before, &mut buffer.before, stats)?;
                read_image(plan, &mut r, present_after, &mut buffer.columns, stats)?;
            }
        }
        let op = match kind {
            RowsKind::Write => RowOp::Insert,
            RowsKind::Update => RowOp::Update,
            RowsKind::Delete => RowOp::Delete,
        };
        buffer.finish_row(op, *next_seq, origin, r.pos - start);
        *next_seq += 1;
        rows += 1;
    }
    Ok(rows)
}

/// One row image: a null bitmap over the present columns, then their values.
fn read_image(
    plan: &TablePlan,
    r: &mut Reader<'_>,
    present: &[u8],
    out: &mut [ColumnBuilder],
    stats: &mut DecodeStats,
) -> Result<(), String> {
    let ncols = plan.codecs.len();
    let present_count = (0..ncols).filter(|i| bit(present, *i)).count();
    let nulls = r.take(present_count.div_ceil(8))?;
    let mut k = 0;
    for (i, (codec, builder)) in plan.codecs.iter().zip(out.iter_mut()).enumerate() {
        if !bit(present, i) {
            builder.append_null();
            continue;
        }
        let is_null = bit(nulls, k);
        k += 1;
        if is_null {
            builder.append_null();
            continue;
        }
        read_value(codec, r, builder, stats)
            .map_err(|e| format!("column `{}`: {e}", plan.schema.columns[i].name))?;
    }
    Ok(())
}

#[inline]
fn read_value(
    codec: &Codec,
    r: &mut Reader<'_>,
    b: &mut ColumnBuilder,
    stats: &mut DecodeStats,
) -> Result<(), String> {
    match codec {
        Codec::Int { bytes, unsigned } => {
            let n = *bytes as usize;
            let raw = le_uint(r.take(n)?);
            if *unsigned {
                b.append_u64(raw);
            } else {
                let shift = 64 - 8 * n as u32;
                b.append_i64(((raw << shift) as i64) >> shift);
            }
        }
        Codec::Float => b.append_f32(f32::from_le_bytes(
            r.take(4)?.try_into().unwrap_or_default(),
        )),
        Codec::Double => b.append_f64(f64::from_le_bytes(
            r.take(8)?.try_into().unwrap_or_default(),
        )),
        Codec::Decimal {
            precision,
            scale,
            size,
        } => {
            let bytes = r.take(*size)?;
            if *precision <= 38 {
                b.append_i128(decimal128(bytes, *precision, *scale));
            } else {
                b.append_i256(decimal256(bytes, *precision, *scale));
            }
        }
        Codec::Date => match date(r.take(3)?) {
            Some(d) => b.append_date(d),
            None => zero_date(b, stats),
        },
        Codec::DateTime2 { fsp } => match datetime2(r.take(5 + frac_bytes(*fsp))?, *fsp) {
            Some(v) => b.append_i64(v),
            None => zero_date(b, stats),
        },
        Codec::Timestamp2 { fsp } => match timestamp2(r.take(4 + frac_bytes(*fsp))?, *fsp) {
            Some(v) => b.append_i64(v),
            None => zero_date(b, stats),
        },
        Codec::Time2 { fsp } => b.append_i64(time2(r.take(3 + frac_bytes(*fsp))?, *fsp)),
        Codec::DateTimeV1 => match datetime_v1(r.take(8)?) {
            Some(v) => b.append_i64(v),
            None => zero_date(b, stats),
        },
        Codec::TimestampV1 => match le_uint(r.take(4)?) {
            0 => zero_date(b, stats),
            secs => b.append_i64(secs as i64 * 1_000_000),
        },
        Codec::TimeV1 => b.append_i64(time_v1(r.take(3)?)),
        Codec::Year => {
            let y = r.take(1)?[0] as i64;
            b.append_i64(if y == 0 { 0 } else { 1900 + y });
        }
        Codec::Bit { bytes } => b.append_u64(be_uint(r.take(*bytes)?)),
        Codec::Enum { pack, labels } => {
            let idx = le_uint(r.take(*pack)?) as usize;
            match idx {
                // Index 0 is the error value '' MySQL stores for invalid input.
                0 => b.append_str(""),
                i => b.append_str(labels.get(i - 1).ok_or_else(|| {
                    format!("ENUM index {i} but the schema has {} labels", labels.len())
                })?),
            }
        }
        Codec::Set { pack, labels } => b.append_set(le_uint(r.take(*pack)?), labels),
        Codec::Short { len_bytes, target } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            append_bytes(b, r.take(len)?, *target)?;
        }
        Codec::Long { len_bytes, target } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            append_bytes(b, r.take(len)?, *target)?;
        }
        Codec::Json { len_bytes } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            let text = super::json::binary_json_to_text(r.take(len)?)?;
            b.append_str(&text);
        }
    }
    Ok(())
}

#[cold]
fn zero_date(b: &mut ColumnBuilder, stats: &mut DecodeStats) {
    stats.zero_dates += 1;
    b.append_null();
}

#[inline]
fn append_bytes(b: &mut ColumnBuilder, bytes: &[u8], target: Bytes) -> Result<(), String> {
    match target {
        Bytes::Binary { pad_to: Some(n) } => b.append_padded_bytes(bytes, n),
        Bytes::Binary { pad_to: None } => b.append_bytes(bytes),
        Bytes::Text(Charset::Utf8) => {
            b.append_str(std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?)
        }
        Bytes::Text(Charset::Legacy(enc)) => {
            let (text, _, _) = enc.decode(bytes);
            b.append_str(&text);
        }
    }
    Ok(())
}
