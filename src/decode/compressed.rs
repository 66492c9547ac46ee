//! MariaDB's compressed columns (`VARCHAR(n) COMPRESSED`, `TEXT`/`BLOB
//! COMPRESSED`): the binlog carries their values as the server stores them,
//! under column types of their own in the TABLE_MAP.
//!
//! A stored value (`sql/field_comp.cc`, `Field_longstr::uncompress`) is
//! empty, or a header byte and then the data. The header's high nibble is
//! the method: 0, the original bytes follow as they are (a value too short
//! to gain from compression); 8, zlib: the low three bits say how many
//! bytes of the original length follow (big-endian), bit 3 is set when the
//! deflate stream has no zlib wrapper (`column_compression_zlib_wrap=OFF`,
//! the default), and the deflate stream follows the length.

use std::borrow::Cow;

use mysql_common::binlog::consts::EventType;
use mysql_common::binlog::events::{FormatDescriptionEvent, TableMapEvent};
use mysql_common::binlog::BinlogCtx;
use mysql_common::io::ParseBuf;

/// `MYSQL_TYPE_VARCHAR_COMPRESSED` (`include/mysql_com.h`; a MariaDB 10.11
/// TABLE_MAP of `VARCHAR(200) COMPRESSED` has it): laid out as a VARCHAR,
/// a 1- or 2-byte length, 2 bytes of metadata (the declared length in bytes
/// plus one, for the header).
const VARCHAR_COMPRESSED: u8 = 141;
/// `MYSQL_TYPE_BLOB_COMPRESSED`, for TEXT and BLOB of every size: laid out
/// as a BLOB, a 1- to 4-byte length, 1 byte of metadata.
const BLOB_COMPRESSED: u8 = 140;
const VARCHAR: u8 = 15;
const BLOB: u8 = 252;

/// Deflate cannot expand data more than about 1032 times: an original
/// length beyond that is corrupt, and is refused before any allocation.
const MAX_INFLATE_RATIO: usize = 1032;

/// A TABLE_MAP body whose compressed column types are written as the plain
/// types of the same layout, so that `mysql_common` reads it (it knows no
/// type 140 or 141).
pub struct PlainTableMap {
    pub body: Vec<u8>,
    /// The indexes of the compressed columns.
    pub compressed: Vec<usize>,
}

/// The [`PlainTableMap`] of a TABLE_MAP body; `None` when the table has no
/// compressed column. `table_id_len` is 6, or 4 for servers before 5.1.4.
pub fn plain_table_map(body: &[u8], table_id_len: usize) -> Result<Option<PlainTableMap>, String> {
    let truncated = || "TABLE_MAP truncated before its column types".to_string();
    let mut pos = table_id_len + 2;
    for _ in 0..2 {
        // The database, then the table: a length, the name, a NUL.
        let len = *body.get(pos).ok_or_else(truncated)? as usize;
        pos += 1 + len + 1;
    }
    let first = *body.get(pos).ok_or_else(truncated)?;
    let (count, width) = match first {
        0xFC => (le(body.get(pos + 1..pos + 3)), 3),
        0xFD => (le(body.get(pos + 1..pos + 4)), 4),
        0xFE => (le(body.get(pos + 1..pos + 9)), 9),
        n => (Some(n as u64), 1),
    };
    let count = count.ok_or_else(truncated)? as usize;
    pos += width;
    let types = body
        .get(pos..pos.checked_add(count).ok_or_else(truncated)?)
        .ok_or_else(truncated)?;
    let compressed: Vec<usize> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(**t, VARCHAR_COMPRESSED | BLOB_COMPRESSED))
        .map(|(i, _)| i)
        .collect();
    if compressed.is_empty() {
        return Ok(None);
    }
    let mut plain = body.to_vec();
    for &i in &compressed {
        let t = &mut plain[pos + i];
        *t = if *t == VARCHAR_COMPRESSED {
            VARCHAR
        } else {
            BLOB
        };
    }
    Ok(Some(PlainTableMap {
        body: plain,
        compressed,
    }))
}

fn le(bytes: Option<&[u8]>) -> Option<u64> {
    Some(super::values::le_uint(bytes?))
}

/// Reads a TABLE_MAP body (as [`plain_table_map`] rewrote it) as
/// `mysql_common::binlog::events::Event::read_event` would.
pub fn read_table_map<'a>(
    fde: &'a FormatDescriptionEvent<'a>,
    body: &'a [u8],
) -> std::io::Result<TableMapEvent<'a>> {
    const HEADER_LEN: usize = 19;
    let ctx = BinlogCtx::new(
        HEADER_LEN + body.len(),
        fde,
        EventType::TABLE_MAP_EVENT as u8,
    );
    ParseBuf(body).parse(ctx)
}

/// The original bytes of a stored compressed value; `max_len` is the most
/// the column holds (a longer original length is corrupt).
pub fn original_value(stored: &[u8], max_len: usize) -> Result<Cow<'_, [u8]>, String> {
    let Some((&header, rest)) = stored.split_first() else {
        return Ok(Cow::Borrowed(stored));
    };
    match header >> 4 {
        0 => return Ok(Cow::Borrowed(rest)),
        8 => {}
        method => {
            return Err(format!(
                "compressed value with unknown method {method} (header {header:#04x}); MariaDB writes 0 (stored) or 8 (zlib)"
            ))
        }
    }
    let length_bytes = (header & 0x07) as usize;
    let wrapped = header & 0x08 == 0;
    let (length, deflated) = (
        rest.get(..length_bytes),
        rest.get(length_bytes..).unwrap_or_default(),
    );
    let length = length
        .map(|b| b.iter().fold(0usize, |n, b| n << 8 | *b as usize))
        .ok_or_else(|| {
            format!(
                "compressed value of {} bytes is shorter than its header says",
                stored.len()
            )
        })?;
    if length > max_len || length > deflated.len().saturating_mul(MAX_INFLATE_RATIO) + 64 {
        return Err(format!(
            "compressed value says it inflates to {length} bytes from {}, more than the column holds ({max_len}) or deflate can give: the event is corrupt",
            deflated.len()
        ));
    }
    let mut original = Vec::with_capacity(length);
    let mut inflater = flate2::Decompress::new(wrapped);
    let status = inflater
        .decompress_vec(deflated, &mut original, flate2::FlushDecompress::Finish)
        .map_err(|e| format!("compressed value does not inflate: {e}"))?;
    if status != flate2::Status::StreamEnd || original.len() != length {
        return Err(format!(
            "compressed value inflates to {}{} bytes where its header says {length}: the event is corrupt",
            original.len(),
            if status == flate2::Status::StreamEnd { "" } else { " or more" }
        ));
    }
    Ok(Cow::Owned(original))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A stored value as MariaDB writes it: header, big-endian length, deflate.
    fn stored(original: &[u8], wrap: bool) -> Vec<u8> {
        let length_bytes = (usize::BITS - original.len().leading_zeros()).div_ceil(8) as usize;
        let mut out = vec![0x80 | length_bytes as u8 | if wrap { 0 } else { 0x08 }];
        out.extend(&original.len().to_be_bytes()[8 - length_bytes..]);
        let level = flate2::Compression::new(6);
        let deflated = if wrap {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(original).unwrap();
            e.finish().unwrap()
        } else {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
            e.write_all(original).unwrap();
            e.finish().unwrap()
        };
        out.extend(deflated);
        out
    }

    #[test]
    fn stored_raw_and_zlib_values() {
        assert_eq!(&*original_value(b"", 10).unwrap(), b"");
        assert_eq!(&*original_value(b"\x00abc", 10).unwrap(), b"abc");
        let long = "né ".repeat(5000).into_bytes();
        for wrap in [false, true] {
            let s = stored(&long, wrap);
            assert!(s.len() < long.len() / 10);
            assert_eq!(&*original_value(&s, 65_535).unwrap(), &long[..]);
        }
        let one = stored(b"x", false);
        assert_eq!(one[0], 0x89);
        assert_eq!(&*original_value(&one, 10).unwrap(), b"x");
    }

    #[test]
    fn corrupt_values_are_errors() {
        let long = vec![b'a'; 1000];
        let good = stored(&long, false);
        // Longer than the column.
        assert!(original_value(&good, 999)
            .unwrap_err()
            .contains("more than the column"));
        // A length beyond what the stream gives, or short of it.
        let mut bad = good.clone();
        bad[2] = bad[2].wrapping_add(1);
        assert!(original_value(&bad, 65_535)
            .unwrap_err()
            .contains("corrupt"));
        let mut bad = good.clone();
        bad[2] = bad[2].wrapping_sub(1);
        assert!(original_value(&bad, 65_535)
            .unwrap_err()
            .contains("corrupt"));
        // Truncated stream, unknown method, missing length bytes.
        assert!(original_value(&good[..good.len() - 3], 65_535).is_err());
        assert!(original_value(b"\x40abc", 10)
            .unwrap_err()
            .contains("method 4"));
        assert!(original_value(b"\x84\x01", 10)
            .unwrap_err()
            .contains("shorter"));
        // A huge claimed length is refused before anything is allocated.
        assert!(original_value(b"\x84\xff\xff\xff\xff\x00", usize::MAX)
            .unwrap_err()
            .contains("corrupt"));
    }

    #[test]
    fn table_map_types_are_rewritten() {
        // table id (6), flags (2), "d", "t", 4 columns: INT, VARCHAR
        // COMPRESSED, BLOB, TEXT COMPRESSED.
        let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0, 1, b'd', 0, 1, b't', 0, 4];
        body.extend([3, 141, 252, 140]);
        body.extend([0x20, 0x03, 0x02, 0x04]);
        let plain = plain_table_map(&body, 6).unwrap().unwrap();
        assert_eq!(plain.compressed, [1, 3]);
        assert_eq!(&plain.body[15..19], &[3, 15, 252, 252]);
        assert_eq!(&plain.body[19..], &body[19..]);
        body[16] = 15;
        body[18] = 252;
        assert!(plain_table_map(&body, 6).unwrap().is_none());
        assert!(plain_table_map(&body[..16], 6).is_err());
    }
}
