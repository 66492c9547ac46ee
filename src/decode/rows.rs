//! Rows events (WRITE/UPDATE/DELETE, v1 and v2, and MySQL 8's
//! PARTIAL_UPDATE_ROWS) decoded straight into a table's Arrow builders.
//!
//! This is the hot path: every cell is read from the event bytes and appended
//! to its builder with no heap value in between and no dynamic dispatch (a
//! `match` on the column's [`Codec`], fixed when the TABLE_MAP arrives in
//! the table's [`TablePlan`]). JSON cells are printed into one text buffer
//! reused for the whole event.
//! Layout: <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>

use std::ops::Range;

use super::values::*;
use crate::batch::column::ColumnBuilder;
use crate::batch::{RowOp, RowOrigin, TableBuffer};
use crate::schema::plan::TablePlan;
use crate::types::address::AddressText;
use crate::types::codec::{Bytes, Codec};
use crate::types::Charset;

/// The shape of a rows event, from its type code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsKind {
    Write,
    Update,
    Delete,
    /// MySQL 8's PARTIAL_UPDATE_ROWS (`binlog_row_value_options=PARTIAL_JSON`):
    /// an update whose after image may log JSON columns as diffs against the
    /// before image. Decoded rows are ordinary updates with full values.
    PartialUpdate,
}

impl RowsKind {
    /// The kind of a rows event type code and the post-header length its
    /// version has (8 for v1, 10 for v2 and PARTIAL_UPDATE_ROWS); `None` for
    /// other events.
    pub fn of_event_type(event_type: u8) -> Option<(RowsKind, usize)> {
        use super::event_type as et;
        Some(match event_type {
            et::WRITE_ROWS_V1 => (RowsKind::Write, 8),
            et::UPDATE_ROWS_V1 => (RowsKind::Update, 8),
            et::DELETE_ROWS_V1 => (RowsKind::Delete, 8),
            et::WRITE_ROWS_V2 => (RowsKind::Write, 10),
            et::UPDATE_ROWS_V2 => (RowsKind::Update, 10),
            et::DELETE_ROWS_V2 => (RowsKind::Delete, 10),
            et::PARTIAL_UPDATE_ROWS => (RowsKind::PartialUpdate, 10),
            _ => return None,
        })
    }
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
    let present_after = if matches!(kind, RowsKind::Update | RowsKind::PartialUpdate) {
        r.take(bitmap_len)?
    } else {
        present_before
    };
    match kind {
        RowsKind::Write => require_full_image(plan, "after", present_after)?,
        RowsKind::Delete => require_full_image(plan, "before", present_before)?,
        RowsKind::Update | RowsKind::PartialUpdate => {
            require_full_image(plan, "before", present_before)?;
            require_full_image(plan, "after", present_after)?;
        }
    }
    // JSON cells are printed here, one buffer for the whole event.
    let mut text = String::new();
    // Where each JSON value of the current before image is, for partial updates.
    let mut json_before: Vec<Option<Range<usize>>> = match kind {
        RowsKind::PartialUpdate => vec![None; ncols],
        _ => Vec::new(),
    };
    let mut rows = 0;
    while r.pos < body.len() {
        let start = r.pos;
        let mut rebuilt = 0;
        match kind {
            RowsKind::Write => {
                read_image::<false>(
                    plan,
                    &mut r,
                    present_after,
                    &mut buffer.columns,
                    stats,
                    &mut text,
                    &mut [],
                )?;
            }
            RowsKind::Delete => {
                read_image::<false>(
                    plan,
                    &mut r,
                    present_before,
                    &mut buffer.columns,
                    stats,
                    &mut text,
                    &mut [],
                )?;
            }
            RowsKind::Update => {
                read_image::<false>(
                    plan,
                    &mut r,
                    present_before,
                    &mut buffer.before,
                    stats,
                    &mut text,
                    &mut [],
                )?;
                read_image::<false>(
                    plan,
                    &mut r,
                    present_after,
                    &mut buffer.columns,
                    stats,
                    &mut text,
                    &mut [],
                )?;
            }
            RowsKind::PartialUpdate => {
                read_image::<true>(
                    plan,
                    &mut r,
                    present_before,
                    &mut buffer.before,
                    stats,
                    &mut text,
                    &mut json_before,
                )?;
                let partial = read_shared_image(plan, &mut r)?;
                rebuilt = read_partial_after_image(
                    plan,
                    &mut r,
                    present_after,
                    partial,
                    &json_before,
                    &mut buffer.columns,
                    stats,
                    &mut text,
                )?;
            }
        }
        let op = match kind {
            RowsKind::Write => RowOp::Insert,
            RowsKind::Update | RowsKind::PartialUpdate => RowOp::Update,
            RowsKind::Delete => RowOp::Delete,
        };
        buffer.finish_row(op, *next_seq, origin, r.pos - start + rebuilt);
        *next_seq += 1;
        rows += 1;
    }
    Ok(rows)
}

/// A session with `binlog_row_image = MINIMAL` or `NOBLOB` logs images that
/// leave columns out, whatever the global setting the preflight checked;
/// a left-out column would be written as NULL. The bitmap is compared with
/// all-ones once per event, not per row.
fn require_full_image(plan: &TablePlan, image: &str, present: &[u8]) -> Result<(), String> {
    let ncols = plan.codecs.len();
    let (whole, rest) = (ncols / 8, ncols % 8);
    let tail = (1u8 << rest).wrapping_sub(1);
    if present[..whole].iter().all(|b| *b == 0xFF) && (rest == 0 || present[whole] & tail == tail) {
        return Ok(());
    }
    let missing: Vec<usize> = (0..ncols).filter(|i| !bit(present, *i)).collect();
    let only_blobs = missing.iter().all(|i| {
        matches!(
            plan.codecs[*i],
            Codec::Long { .. } | Codec::Json { .. } | Codec::Compressed { .. }
        )
    });
    let setting = if only_blobs { "NOBLOB" } else { "MINIMAL" };
    let names: Vec<String> = missing
        .iter()
        .map(|i| format!("`{}`", plan.schema.columns[*i].name))
        .collect();
    Err(format!(
        "the {image} image leaves out column(s) {}: the session that wrote it had binlog_row_image = {setting}, not FULL, and sluice cannot know their values; set binlog_row_image = FULL globally and in every session that writes captured tables, then exclude this table or start a new lake after this position",
        names.join(", ")
    ))
}

/// One row image: a null bitmap over the present columns, then their values.
/// With `KEEP_JSON` (the before image of a partial update) it also records in
/// `json_at` where each JSON column's binary value lies in the event body,
/// `None` when the column is absent or NULL; ordinary events pass `false`
/// and pay nothing for it.
#[inline]
fn read_image<const KEEP_JSON: bool>(
    plan: &TablePlan,
    r: &mut Reader<'_>,
    present: &[u8],
    out: &mut [ColumnBuilder],
    stats: &mut DecodeStats,
    text: &mut String,
    json_at: &mut [Option<Range<usize>>],
) -> Result<(), String> {
    let ncols = plan.codecs.len();
    let present_count = (0..ncols).filter(|i| bit(present, *i)).count();
    let nulls = r.take(present_count.div_ceil(8))?;
    let mut k = 0;
    for (i, (codec, builder)) in plan.codecs.iter().zip(out.iter_mut()).enumerate() {
        if KEEP_JSON {
            json_at[i] = None;
        }
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
        let at = r.pos;
        read_value(codec, r, builder, stats, text)
            .map_err(|e| format!("column `{}`: {e}", plan.schema.columns[i].name))?;
        if KEEP_JSON {
            if let Codec::Json { len_bytes } = codec {
                json_at[i] = Some(at + len_bytes..r.pos);
            }
        }
    }
    Ok(())
}

/// The shared image between the before and after image of a partial update
/// row: `value_options` (a packed integer; bit 1 is PARTIAL_JSON_UPDATES)
/// and, when that bit is set, one bit per JSON column of the table, set when
/// the after image logs that column as diffs (`sql/rpl_record.h`). Returns
/// those bits.
fn read_shared_image<'a>(plan: &TablePlan, r: &mut Reader<'a>) -> Result<Option<&'a [u8]>, String> {
    const PARTIAL_JSON_UPDATES: u64 = 1;
    let value_options = r.lenenc()?;
    if value_options & !PARTIAL_JSON_UPDATES != 0 {
        return Err(format!(
            "partial update row with unknown value options {value_options:#x}"
        ));
    }
    if value_options & PARTIAL_JSON_UPDATES == 0 {
        return Ok(None);
    }
    let json_columns = plan
        .codecs
        .iter()
        .filter(|c| matches!(c, Codec::Json { .. }))
        .count();
    Ok(Some(r.take(json_columns.div_ceil(8))?))
}

/// The after image of a partial update row. A JSON column whose partial bit
/// is set holds a `Json_diff_vector` (4-byte length, then the diffs) that is
/// applied to the same column's before image, so the builder receives the
/// same text a full image would have given. A partial column whose before
/// image is NULL or absent has nothing to apply the diffs to: that is an
/// error (MySQL itself only logs diffs against an existing JSON document).
/// Returns the bytes of JSON text rebuilt, for the memory estimate.
#[allow(clippy::too_many_arguments)]
fn read_partial_after_image(
    plan: &TablePlan,
    r: &mut Reader<'_>,
    present: &[u8],
    partial: Option<&[u8]>,
    json_before: &[Option<Range<usize>>],
    out: &mut [ColumnBuilder],
    stats: &mut DecodeStats,
    text: &mut String,
) -> Result<usize, String> {
    let ncols = plan.codecs.len();
    let present_count = (0..ncols).filter(|i| bit(present, *i)).count();
    let nulls = r.take(present_count.div_ceil(8))?;
    let mut k = 0;
    let mut json_index = 0;
    let mut rebuilt = 0;
    for (i, (codec, builder)) in plan.codecs.iter().zip(out.iter_mut()).enumerate() {
        let is_partial = match (codec, partial) {
            (Codec::Json { .. }, Some(bits)) => {
                json_index += 1;
                bit(bits, json_index - 1)
            }
            _ => false,
        };
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
        let name = &plan.schema.columns[i].name;
        if !is_partial {
            read_value(codec, r, builder, stats, text)
                .map_err(|e| format!("column `{name}`: {e}"))?;
            continue;
        }
        let len = le_uint(r.take(4)?) as usize;
        let diffs = r.take(len)?;
        let base = json_before[i].clone().ok_or_else(|| {
            format!(
                "column `{name}`: the after image has JSON diffs but the before image has no value \
                 to apply them to (NULL or not logged)"
            )
        })?;
        text.clear();
        super::json::apply_json_diffs(&r.data[base], diffs, text)
            .map_err(|e| format!("column `{name}`: {e}"))?;
        builder.append_str(text);
        rebuilt += text.len();
    }
    Ok(rebuilt)
}

#[inline]
fn read_value(
    codec: &Codec,
    r: &mut Reader<'_>,
    b: &mut ColumnBuilder,
    stats: &mut DecodeStats,
    text: &mut String,
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
                b.append_i128(decimal128(bytes, *precision, *scale)?);
            } else {
                // Above 38 digits the lake holds the text SELECT prints.
                text.clear();
                decimal_text(bytes, *precision, *scale, text)?;
                b.append_str(text);
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
            append_bytes(b, r.take(len)?, *target, text)?;
        }
        Codec::Long { len_bytes, target } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            append_bytes(b, r.take(len)?, *target, text)?;
        }
        Codec::Json { len_bytes } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            text.clear();
            super::json::write_binary_json(r.take(len)?, text)?;
            b.append_str(text);
        }
        Codec::Compressed {
            len_bytes,
            max_len,
            target,
        } => {
            let len = le_uint(r.take(*len_bytes)?) as usize;
            let original = super::compressed::original_value(r.take(len)?, *max_len)?;
            append_bytes(b, &original, *target, text)?;
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
fn append_bytes(
    b: &mut ColumnBuilder,
    bytes: &[u8],
    target: Bytes,
    text: &mut String,
) -> Result<(), String> {
    match target {
        Bytes::Binary { pad_to: Some(n) } => b.append_padded_bytes(bytes, n),
        Bytes::Binary { pad_to: None } => b.append_bytes(bytes),
        Bytes::Text(Charset::Table(table)) => {
            text.clear();
            match table.decode_with(bytes, text)? {
                Some(ascii) => b.append_str(ascii),
                None => b.append_str(text),
            }
        }
        Bytes::Text(charset) => b.append_str(&charset.decode(bytes)?),
        Bytes::Address(a) => b.append_str(a.text(bytes, &mut AddressText::default())?),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
