//! The row plan of one column: how its bytes are laid out in a rows event,
//! fixed from the TABLE_MAP's type code and metadata and the column's
//! [`ColumnKind`] when the TABLE_MAP arrives. The rows decoder (`decode::rows`)
//! dispatches on a [`Codec`] per cell; `schema::plan` makes a table's.
//! Layout: <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>

use std::sync::Arc;

use mysql_common::constants::ColumnType;

use super::address::Address;
use super::{Charset, ColumnKind};

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
    /// MariaDB's `COMPRESSED` VARCHAR, TEXT and BLOB: a 1- to 4-byte length,
    /// then the value as the server stores it (see [`crate::decode::compressed`]),
    /// whose original is at most `max_len` bytes.
    Compressed {
        len_bytes: usize,
        max_len: usize,
        target: Bytes,
    },
}

/// What variable-length bytes become.
#[derive(Debug, Clone, Copy)]
pub enum Bytes {
    Text(Charset),
    Binary {
        pad_to: Option<usize>,
    },
    /// MariaDB's INET4, INET6 and UUID, printed as SELECT prints them.
    Address(Address),
}

/// Bytes per group of 0 to 9 decimal digits in a binary DECIMAL
/// (`dig2bytes` of `strings/decimal.c`).
pub const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// The largest precision and scale a DECIMAL may have (`DECIMAL_MAX_PRECISION`,
/// `DECIMAL_MAX_SCALE` of MySQL and MariaDB).
pub const DECIMAL_MAX_PRECISION: u8 = 65;
pub const DECIMAL_MAX_SCALE: u8 = 30;

/// Whether `(precision, scale)` is a DECIMAL the server can define: the
/// binary decoders (`decode::values`) rely on it, so metadata read from the binlog is
/// checked with this before a codec is made of it.
pub fn decimal_shape_is_valid(precision: u8, scale: u8) -> bool {
    (1..=DECIMAL_MAX_PRECISION).contains(&precision)
        && scale <= DECIMAL_MAX_SCALE
        && scale <= precision
}

/// Size in bytes of a binary DECIMAL(precision, scale).
pub fn decimal_size(precision: u8, scale: u8) -> usize {
    let intg = precision.saturating_sub(scale) as usize;
    let scale = scale as usize;
    (intg / 9) * 4 + DIG2BYTES[intg % 9] + (scale / 9) * 4 + DIG2BYTES[scale % 9]
}

fn meta_u16(meta: &[u8]) -> usize {
    match meta {
        [a, b, ..] => *a as usize | (*b as usize) << 8,
        [a] => *a as usize,
        [] => 0,
    }
}

/// The fractional digits of a temporal column's metadata; more than 6 is corrupt.
fn fsp_of(meta: &[u8]) -> Option<u8> {
    meta.first().copied().filter(|fsp| *fsp <= 6)
}

/// The width of a BLOB/TEXT/JSON/GEOMETRY length prefix: 1 to 4 bytes.
fn length_bytes_of(meta: &[u8]) -> Option<usize> {
    meta.first()
        .map(|n| *n as usize)
        .filter(|n| (1..=4).contains(n))
}

/// The codec of a column of `kind` whose TABLE_MAP entry has type code `ty`
/// and metadata `meta`; `None` when they disagree or the metadata is corrupt.
pub fn codec_for(ty: ColumnType, meta: &[u8], kind: &ColumnKind) -> Option<Codec> {
    use ColumnType as T;
    let bytes_target = |kind: &ColumnKind| match kind {
        ColumnKind::Text { charset } => Some(Bytes::Text(*charset)),
        ColumnKind::Binary { pad_to } => Some(Bytes::Binary { pad_to: *pad_to }),
        ColumnKind::Geometry => Some(Bytes::Binary { pad_to: None }),
        _ => None,
    };
    let address = |kind: &ColumnKind| match kind {
        ColumnKind::Inet4 => Some(Address::Inet4),
        ColumnKind::Inet6 => Some(Address::Inet6),
        ColumnKind::Uuid => Some(Address::Uuid),
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
            if p != precision || s != scale || !decimal_shape_is_valid(p, s) {
                return None;
            }
            Codec::Decimal {
                precision: p,
                scale: s,
                size: decimal_size(p, s),
            }
        }
        (T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE, ColumnKind::Date) => Codec::Date,
        (T::MYSQL_TYPE_DATETIME2, ColumnKind::DateTime { .. }) => {
            Codec::DateTime2 { fsp: fsp_of(meta)? }
        }
        (T::MYSQL_TYPE_TIMESTAMP2, ColumnKind::Timestamp { .. }) => {
            Codec::Timestamp2 { fsp: fsp_of(meta)? }
        }
        (T::MYSQL_TYPE_TIME2, ColumnKind::Time { .. }) => Codec::Time2 { fsp: fsp_of(meta)? },
        (T::MYSQL_TYPE_DATETIME, ColumnKind::DateTime { .. }) => Codec::DateTimeV1,
        (T::MYSQL_TYPE_TIMESTAMP, ColumnKind::Timestamp { .. }) => Codec::TimestampV1,
        (T::MYSQL_TYPE_TIME, ColumnKind::Time { .. }) => Codec::TimeV1,
        (T::MYSQL_TYPE_YEAR, ColumnKind::Year) => Codec::Year,
        (T::MYSQL_TYPE_BIT, ColumnKind::Bit { bits: width }) => {
            // Metadata: the bits beyond whole bytes, then the whole bytes.
            let (bits, bytes) = (*meta.first()? as usize, *meta.get(1)? as usize);
            if bits > 7 || bytes * 8 + bits != width as usize {
                return None;
            }
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
                // INET4/INET6/UUID are BINARY(4)/BINARY(16) in the binlog.
                (254, k) if address(&k).is_some() => {
                    let a = address(&k)?;
                    if max_len != a.width() {
                        return None;
                    }
                    Codec::Short {
                        len_bytes: 1,
                        target: Bytes::Address(a),
                    }
                }
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
            len_bytes: length_bytes_of(meta)?,
            target: bytes_target(&k)?,
        },
        // MySQL's JSON is binary in the binlog whatever the history calls it
        // (a DDL-derived `json` column resolves to text, as MariaDB's is).
        (T::MYSQL_TYPE_JSON, ColumnKind::Json | ColumnKind::Text { .. }) => Codec::Json {
            len_bytes: length_bytes_of(meta)?,
        },
        _ => return None,
    })
}
