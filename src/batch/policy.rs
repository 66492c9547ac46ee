//! Column policies applied to a table's columns when its batch is written
//! (stream buffers, snapshot and re-read chunks alike), one array at a time:
//! the decode hot path never sees them. What a policy does to the shape is
//! `crate::schema::policy`.
//!
//! `hash` hashes each value's canonical bytes, which a user can compute
//! from the source to join or look up (README "Column policies"):
//! - text (CHAR, VARCHAR, TEXT, ENUM, JSON, INET4/6, UUID): its UTF-8 bytes;
//! - binary (BINARY, VARBINARY, BLOB, GEOMETRY): the raw bytes;
//! - integers, YEAR, BIT: the decimal number; DECIMAL: the number with
//!   exactly its scale's digits after the point (`12.50`); FLOAT, DOUBLE:
//!   the shortest decimal that reads back as the same value (`0.1`);
//! - DATE `2024-01-31`; DATETIME and TIMESTAMP (in UTC)
//!   `2024-01-31 13:45:00` with as many fraction digits as the column's
//!   precision; TIME `-838:59:59.000` likewise;
//! - SET: its members joined by `,`.
//!
//! That is the text `SELECT` prints (with `time_zone = '+00:00'`), so an
//! HMAC-SHA256 of `CAST(col AS CHAR)` with the same key, computed in any
//! tool, gives the same digest.

use std::io::Write;
use std::sync::Arc;

use arrow::array::*;
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Datelike, Timelike};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::schema::policy::{ColumnKey, PolicyAction};
use crate::schema::{ColumnDef, TableSchema};
use crate::types::ColumnKind;

/// `arrays` (one per column of `table`, as the builders made them) as the
/// table's lake columns: excluded ones left out, the others policed.
pub fn police_columns(
    table: &TableSchema,
    arrays: Vec<ArrayRef>,
    key: Option<&ColumnKey>,
) -> Result<Vec<ArrayRef>> {
    if !table.has_policy() {
        return Ok(arrays);
    }
    table
        .columns
        .iter()
        .zip(arrays)
        .filter(|(c, _)| c.in_lake())
        .map(|(c, a)| police(table, c, &a, key))
        .collect()
}

/// One column's values under its policy.
pub fn police(
    table: &TableSchema,
    column: &ColumnDef,
    array: &ArrayRef,
    key: Option<&ColumnKey>,
) -> Result<ArrayRef> {
    Ok(match column.policy {
        None | Some(PolicyAction::Exclude) => Arc::clone(array),
        Some(PolicyAction::Mask) => new_null_array(array.data_type(), array.len()),
        Some(PolicyAction::Truncate(n)) => {
            truncate(array, n as usize).ok_or_else(|| Error::Schema {
                table: table.qualified_name(),
                message: format!(
                    "column {} is {}: truncate applies to text and binary columns only",
                    column.name,
                    array.data_type()
                ),
            })?
        }
        Some(PolicyAction::Hash) => {
            let key = key.ok_or_else(|| Error::NoColumnKey {
                table: table.qualified_name(),
                column: column.name.clone(),
            })?;
            Arc::new(
                hash(&column.kind, array, key).map_err(|message| Error::Schema {
                    table: table.qualified_name(),
                    message: format!("column {}: {message}", column.name),
                })?,
            )
        }
    })
}

/// The first `n` characters of text, the first `n` bytes of binary values;
/// `None` for other types.
pub fn truncate(array: &ArrayRef, n: usize) -> Option<ArrayRef> {
    match array.data_type() {
        DataType::Utf8 => {
            let strings = array.as_string::<i32>();
            let out: StringArray = strings
                .iter()
                .map(|v| v.map(|s| &s[..s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)]))
                .collect();
            Some(Arc::new(out))
        }
        DataType::Binary => {
            let bytes = array.as_binary::<i32>();
            let out: BinaryArray = bytes
                .iter()
                .map(|v| v.map(|b| &b[..b.len().min(n)]))
                .collect();
            Some(Arc::new(out))
        }
        _ => None,
    }
}

/// HMAC-SHA256 of each value's canonical bytes (module comment), as 64
/// lowercase hex digits; null stays null.
pub fn hash(
    kind: &ColumnKind,
    array: &ArrayRef,
    key: &ColumnKey,
) -> std::result::Result<StringArray, String> {
    let keyed = Hmac::<Sha256>::new_from_slice(key.bytes()).expect("HMAC takes keys of any length");
    let mut out = StringBuilder::with_capacity(array.len(), array.len() * 64);
    // One buffer for every value's text: no allocation per value.
    let mut text = Vec::with_capacity(64);
    for i in 0..array.len() {
        if array.is_null(i) {
            out.append_null();
            continue;
        }
        let bytes: &[u8] = match array.data_type() {
            DataType::Utf8 => array.as_string::<i32>().value(i).as_bytes(),
            DataType::Binary => array.as_binary::<i32>().value(i),
            _ => {
                text.clear();
                canonical_text(kind, array, i, &mut text)?;
                &text
            }
        };
        let mut mac = keyed.clone();
        mac.update(bytes);
        let digest = mac.finalize().into_bytes();
        let mut hex = [0u8; 64];
        for (j, b) in digest.iter().enumerate() {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            hex[2 * j] = DIGITS[(b >> 4) as usize];
            hex[2 * j + 1] = DIGITS[(b & 15) as usize];
        }
        out.append_value(std::str::from_utf8(&hex).expect("hex digits are ASCII"));
    }
    Ok(out.finish())
}

/// The text `SELECT` prints for value `i` of a non-text array.
fn canonical_text(
    kind: &ColumnKind,
    array: &ArrayRef,
    i: usize,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    match (array.data_type(), kind) {
        (DataType::Int64, ColumnKind::Time { fsp }) => {
            let us = array.as_primitive::<arrow::datatypes::Int64Type>().value(i);
            let sign = if us < 0 { "-" } else { "" };
            let us = us.unsigned_abs();
            let secs = us / 1_000_000;
            write!(
                out,
                "{sign}{:02}:{:02}:{:02}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            )
            .map_err(io)?;
            fraction(out, (us % 1_000_000) as u32, *fsp);
        }
        (DataType::Int64, _) => {
            let v = array.as_primitive::<arrow::datatypes::Int64Type>().value(i);
            write!(out, "{v}").map_err(io)?;
        }
        (DataType::Int16, _) => {
            let v = array.as_primitive::<arrow::datatypes::Int16Type>().value(i);
            write!(out, "{v}").map_err(io)?;
        }
        (DataType::Float32, _) => {
            let v = array
                .as_primitive::<arrow::datatypes::Float32Type>()
                .value(i);
            write!(out, "{v}").map_err(io)?;
        }
        (DataType::Float64, _) => {
            let v = array
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(i);
            write!(out, "{v}").map_err(io)?;
        }
        (DataType::Decimal128(_, scale), _) => {
            let v = array
                .as_primitive::<arrow::datatypes::Decimal128Type>()
                .value(i);
            decimal(out, v, (*scale).max(0) as u32);
        }
        (DataType::Date32, _) => {
            let days = array
                .as_primitive::<arrow::datatypes::Date32Type>()
                .value(i);
            let d = chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163)
                .ok_or_else(|| format!("date {days} days from 1970 is out of range"))?;
            write!(out, "{:04}-{:02}-{:02}", d.year(), d.month(), d.day()).map_err(io)?;
        }
        (DataType::Timestamp(TimeUnit::Microsecond, _), _) => {
            let us = array
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .value(i);
            let t = chrono::DateTime::from_timestamp_micros(us)
                .ok_or_else(|| format!("time {us} us from 1970 is out of range"))?
                .naive_utc();
            write!(
                out,
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
            .map_err(io)?;
            let fsp = match kind {
                ColumnKind::DateTime { fsp } | ColumnKind::Timestamp { fsp } => *fsp,
                _ => 6,
            };
            fraction(out, t.nanosecond() / 1000, fsp);
        }
        (DataType::List(_), _) => {
            let list = array.as_list::<i32>();
            let members = list.value(i);
            let members = members.as_string::<i32>();
            for (j, m) in members.iter().flatten().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(m.as_bytes());
            }
        }
        (t, _) => return Err(format!("a {t} value cannot be hashed")),
    }
    Ok(())
}

/// `.` and the first `fsp` of six microsecond digits; nothing for `fsp` 0.
fn fraction(out: &mut Vec<u8>, micros: u32, fsp: u8) {
    if fsp == 0 {
        return;
    }
    let start = out.len();
    let _ = write!(out, ".{micros:06}");
    out.truncate(start + 1 + fsp.min(6) as usize);
}

/// A decimal's unscaled value `v` with `scale` digits after the point.
fn decimal(out: &mut Vec<u8>, v: i128, scale: u32) {
    if v < 0 {
        out.push(b'-');
    }
    let digits_at = out.len();
    let _ = write!(out, "{}", v.unsigned_abs());
    let scale = scale as usize;
    if scale == 0 {
        return;
    }
    // Leading zeros so that at least one digit precedes the point.
    let have = out.len() - digits_at;
    if have <= scale {
        let zeros = scale + 1 - have;
        out.splice(digits_at..digits_at, std::iter::repeat_n(b'0', zeros));
    }
    let point = out.len() - scale;
    out.insert(point, b'.');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::column::kind_from_type;

    fn key() -> ColumnKey {
        ColumnKey::new(b"secret")
    }

    /// HMAC-SHA256 by its definition (RFC 2104) over sha2 alone, so the
    /// test does not check the `hmac` crate against itself.
    fn hmac_by_hand(key: &[u8], message: &[u8]) -> String {
        use sha2::Digest;
        let mut k = [0u8; 64];
        k[..key.len()].copy_from_slice(key);
        let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
        let inner = Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(message)
            .finalize();
        let outer = Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize();
        outer.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn hashed(mysql_type: &str, array: ArrayRef) -> Vec<Option<String>> {
        let kind = kind_from_type(mysql_type, Some("utf8mb4")).unwrap();
        hash(&kind, &array, &key())
            .unwrap()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn hash_is_hmac_sha256_of_the_text_select_prints() {
        let cases: Vec<(&str, ArrayRef, &str)> = vec![
            (
                "varchar(10)",
                Arc::new(StringArray::from(vec!["zoë"])),
                "zoë",
            ),
            ("int", Arc::new(Int64Array::from(vec![-42])), "-42"),
            (
                "decimal(10,2)",
                Arc::new(
                    Decimal128Array::from(vec![-5])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                "-0.05",
            ),
            (
                "decimal(10,2)",
                Arc::new(
                    Decimal128Array::from(vec![123450])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                "1234.50",
            ),
            ("double", Arc::new(Float64Array::from(vec![0.1])), "0.1"),
            (
                "date",
                Arc::new(Date32Array::from(vec![19753])),
                "2024-01-31",
            ),
            (
                "datetime(3)",
                Arc::new(TimestampMicrosecondArray::from(vec![1_706_708_700_123_000])),
                "2024-01-31 13:45:00.123",
            ),
            (
                "datetime",
                Arc::new(TimestampMicrosecondArray::from(vec![1_706_708_700_000_000])),
                "2024-01-31 13:45:00",
            ),
            (
                "time(2)",
                Arc::new(Int64Array::from(vec![
                    -(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 500_000,
                ])),
                "-838:59:59.50",
            ),
        ];
        for (ty, array, text) in cases {
            assert_eq!(
                hashed(ty, array),
                vec![Some(hmac_by_hand(b"secret", text.as_bytes()))],
                "{ty} {text}"
            );
        }
        let blob: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&[0u8, 255, 7][..]), None]));
        assert_eq!(
            hashed("blob", blob),
            vec![Some(hmac_by_hand(b"secret", &[0, 255, 7])), None]
        );
    }

    #[test]
    fn truncate_counts_characters_of_text_and_bytes_of_binary() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            Some("Ærøskøbing"),
            Some("ab"),
            None,
        ]));
        let t = truncate(&text, 3).unwrap();
        assert_eq!(
            t.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("Ærø"), Some("ab"), None]
        );
        let bin: ArrayRef = Arc::new(BinaryArray::from(vec![Some("Ærø".as_bytes())]));
        let b = truncate(&bin, 3).unwrap();
        assert_eq!(b.as_binary::<i32>().value(0), &"Ærø".as_bytes()[..3]);
        assert!(truncate(&(Arc::new(Int64Array::from(vec![1])) as ArrayRef), 1).is_none());
    }

    #[test]
    fn policed_columns_follow_the_lake_shape() {
        use crate::schema::policy::{ColumnPolicies, ColumnRule};
        let mut t = TableSchema {
            database: "shop".into(),
            name: "users".into(),
            version: 1,
            columns: vec![
                ColumnDef::new("id", "int", None, false, true).unwrap(),
                ColumnDef::new("email", "text", Some("utf8mb4".into()), false, false).unwrap(),
                ColumnDef::new("ssn", "text", Some("utf8mb4".into()), false, false).unwrap(),
                ColumnDef::new("age", "int", None, false, false).unwrap(),
            ],
            charset: None,
            unique_keys: Vec::new(),
        };
        let rule = |entry, p: &str, action| ColumnRule {
            entry,
            pattern: p.into(),
            regex: regex::Regex::new(&format!("^(?:{p})$")).unwrap(),
            action,
        };
        ColumnPolicies {
            rules: vec![
                rule(1, r"shop\.users\.id", PolicyAction::Hash),
                rule(2, r"shop\.users\.email", PolicyAction::Truncate(1)),
                rule(3, r"shop\.users\.ssn", PolicyAction::Exclude),
                rule(4, r"shop\.users\.age", PolicyAction::Mask),
            ],
            key: None,
        }
        .assign(&mut t)
        .unwrap();
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![7])),
            Arc::new(StringArray::from(vec!["ann@x"])),
            Arc::new(StringArray::from(vec!["123-45"])),
            Arc::new(Int64Array::from(vec![33])),
        ];
        let e = police_columns(&t, arrays.clone(), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shop.users.id is hashed and no column key is set: set SLUICE_COLUMN_KEY or [column_key] file"
        );
        let out = police_columns(&t, arrays, Some(&key())).unwrap();
        let batch = arrow::record_batch::RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(t.column_fields(false))),
            out,
        )
        .unwrap();
        assert_eq!(batch.num_columns(), 3);
        assert_eq!(
            batch.column(0).as_string::<i32>().value(0),
            hmac_by_hand(b"secret", b"7")
        );
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "a");
        assert!(batch.column(2).is_null(0));
    }
}
