//! Table shapes: what each captured table's columns are at each point of the
//! stream, and how each column maps to an Arrow type. `bootstrap` reads
//! `information_schema`, `ddl` parses statements, `apply` changes shapes,
//! `history` keeps every version (SQLite + the lake), `tracker` follows the
//! stream.

pub mod apply;
pub mod bootstrap;
pub mod commands;
pub mod ddl;
pub mod history;
pub mod lake_names;
pub mod reread;
pub mod tracker;
pub mod types;

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

/// The character set a text column's bytes are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// utf8mb3 / utf8mb4: valid UTF-8 as is.
    Utf8,
    /// A legacy charset, through the server's own table (latin1, cp1251,
    /// sjis, big5, …; see `decode::charsets`).
    Table(&'static crate::decode::charsets::CharsetTable),
    /// A charset the server does not have and `encoding_rs` decodes as
    /// MySQL does (MySQL's gb18030), or UTF-16 (ucs2 and utf16 are
    /// UTF-16BE, utf16le UTF-16LE).
    Legacy(&'static encoding_rs::Encoding),
    /// utf32: four bytes big-endian per character (not in `encoding_rs`).
    Utf32,
}

impl Charset {
    /// Maps a MySQL charset name; `None` for charsets we cannot decode.
    pub fn from_mysql(name: &str) -> Option<Charset> {
        let label = match name {
            "utf8" | "utf8mb3" | "utf8mb4" => return Some(Charset::Utf8),
            "utf32" => return Some(Charset::Utf32),
            "ucs2" | "utf16" => "utf-16be",
            "utf16le" => "utf-16le",
            "gb18030" => "gb18030",
            other => return crate::decode::charsets::table(other).map(Charset::Table),
        };
        encoding_rs::Encoding::for_label(label.as_bytes()).map(Charset::Legacy)
    }
}

impl Charset {
    /// The text of `bytes` in this charset, as the server converts it, without
    /// byte-order-mark sniffing (a latin1 value may begin with the bytes of a
    /// UTF-8 mark). Bytes that are no character in the charset are an error,
    /// never replaced (a `?` or U+FFFD comes only from the server's own table).
    #[inline]
    pub fn decode<'a>(&self, bytes: &'a [u8]) -> Result<std::borrow::Cow<'a, str>, String> {
        match self {
            Charset::Utf8 => std::str::from_utf8(bytes)
                .map(std::borrow::Cow::Borrowed)
                .map_err(|e| format!("invalid UTF-8: {e}")),
            Charset::Table(table) => table.decode(bytes),
            Charset::Legacy(enc) => match enc.decode_without_bom_handling(bytes) {
                (_, true) => Err(format!(
                    "bytes that are not valid {} (the column's charset)",
                    enc.name()
                )),
                (text, false) => Ok(text),
            },
            Charset::Utf32 => {
                if bytes.len() % 4 != 0 {
                    return Err(format!(
                        "{} bytes are not whole utf32 characters",
                        bytes.len()
                    ));
                }
                bytes
                    .chunks_exact(4)
                    .map(|c| {
                        let code = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                        char::from_u32(code)
                            .ok_or_else(|| format!("U+{code:X} is not a character (utf32)"))
                    })
                    .collect::<Result<String, String>>()
                    .map(std::borrow::Cow::Owned)
            }
        }
    }
}

/// What a column holds, as far as decoding and the Arrow type are concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnKind {
    /// TINYINT (1), SMALLINT (2), MEDIUMINT (3), INT (4), BIGINT (8).
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    Date,
    DateTime {
        fsp: u8,
    },
    Timestamp {
        fsp: u8,
    },
    Time {
        fsp: u8,
    },
    Year,
    Bit {
        bits: u16,
    },
    Enum {
        labels: Arc<[String]>,
    },
    Set {
        labels: Arc<[String]>,
    },
    Text {
        charset: Charset,
    },
    /// BINARY(n) is padded to `pad_to` bytes (the binlog strips trailing zeros).
    Binary {
        pad_to: Option<usize>,
    },
    /// MySQL's binary JSON (MariaDB's JSON is LONGTEXT and arrives as Text).
    Json,
    Geometry,
    /// MariaDB's INET4, INET6 and UUID: in the binlog the fixed-size bytes of
    /// a BINARY(4) / BINARY(16) (its trailing zeros stripped), which only the
    /// schema history tells apart; in the lake the text SELECT prints.
    Inet4,
    Inet6,
    Uuid,
}

/// BIGINT UNSIGNED and BIT(64): Delta Lake has no unsigned integers, and 20
/// digits hold every u64.
pub const U64_TYPE: DataType = DataType::Decimal128(20, 0);

impl ColumnKind {
    /// The lake's type of the column: a type Delta Lake and its readers
    /// accept (no unsigned integers, no durations, no decimals above 38
    /// digits), holding every value exactly (DESIGN.md, "Types").
    pub fn arrow_type(&self) -> DataType {
        match self {
            ColumnKind::Int {
                bytes: 8,
                unsigned: true,
            } => U64_TYPE,
            // Every narrower integer, so that INT to BIGINT changes no type.
            ColumnKind::Int { .. } => DataType::Int64,
            ColumnKind::Float => DataType::Float32,
            ColumnKind::Double => DataType::Float64,
            ColumnKind::Decimal { precision, scale } if *precision <= 38 => {
                DataType::Decimal128(*precision, *scale as i8)
            }
            // The exact text SELECT prints: no reader takes DECIMAL(39..65).
            ColumnKind::Decimal { .. } => DataType::Utf8,
            ColumnKind::Date => DataType::Date32,
            ColumnKind::DateTime { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
            ColumnKind::Timestamp { .. } => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            // Signed microseconds: TIME spans -838:59:59 to 838:59:59.
            ColumnKind::Time { .. } => DataType::Int64,
            ColumnKind::Year => DataType::Int16,
            ColumnKind::Bit { bits } if *bits >= 64 => U64_TYPE,
            ColumnKind::Bit { .. } => DataType::Int64,
            ColumnKind::Enum { .. }
            | ColumnKind::Text { .. }
            | ColumnKind::Json
            | ColumnKind::Inet4
            | ColumnKind::Inet6
            | ColumnKind::Uuid => DataType::Utf8,
            ColumnKind::Set { .. } => {
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
            }
            ColumnKind::Binary { .. } | ColumnKind::Geometry => DataType::Binary,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    /// The MySQL column type, e.g. `decimal(10,2) unsigned` or `enum('a','b')`.
    pub mysql_type: String,
    /// The character set of a textual column (`None` for other types).
    pub charset: Option<String>,
    pub kind: ColumnKind,
    pub nullable: bool,
    pub primary_key: bool,
    /// The column's name in the changelog's Parquet files and Delta schema
    /// ([`lake_names`]); empty until the schema history assigns it.
    pub lake_name: String,
}

impl ColumnDef {
    /// Derives the [`ColumnKind`] from the type text and the charset.
    pub fn new(
        name: impl Into<String>,
        mysql_type: impl Into<String>,
        charset: Option<String>,
        nullable: bool,
        primary_key: bool,
    ) -> Result<Self, String> {
        let name = name.into();
        let mysql_type = mysql_type.into();
        let kind = types::kind_from_type(&mysql_type, charset.as_deref())
            .map_err(|e| format!("column `{name}` {mysql_type}: {e}"))?;
        Ok(ColumnDef {
            name,
            mysql_type,
            charset,
            kind,
            nullable,
            primary_key,
            lake_name: String::new(),
        })
    }

    /// The lake name, or the source name for a shape the history has not
    /// named (a shape of a unit test, a `schema resync` statement).
    pub fn lake(&self) -> &str {
        if self.lake_name.is_empty() {
            &self.name
        } else {
            &self.lake_name
        }
    }
}

/// One captured table's shape at one point of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    pub database: String,
    pub name: String,
    pub version: u32,
    pub columns: Vec<ColumnDef>,
    /// The table's default character set (for columns added later).
    pub charset: Option<String>,
    /// The table's UNIQUE indexes (the primary key aside), in the server's
    /// key order ([`sort_unique_keys`]).
    pub unique_keys: Vec<UniqueKey>,
}

/// A UNIQUE index of a table, other than the primary key. `primary_key` on
/// [`ColumnDef`] marks a real `PRIMARY KEY` only; a unique key that the
/// server uses in place of a missing one is found by
/// [`TableSchema::clustering_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// The index name, as `DROP INDEX` names it.
    pub name: String,
    /// Its columns, in index order.
    pub columns: Vec<String>,
    /// Some column is indexed by a prefix only (`UNIQUE (name(10))`).
    pub prefix: bool,
    /// MariaDB's long unique key (`USING HASH`): a BLOB/TEXT column without
    /// a prefix, a key longer than InnoDB's 3072 bytes, or `USING HASH`.
    pub hash: bool,
}

/// Puts unique keys in the order the server keeps them (MariaDB's
/// `sort_keys` in sql_table.cc): long hash keys last, before them the keys
/// with a nullable column, before those the prefix keys; otherwise in the
/// order they were made. The order decides which key
/// [`TableSchema::clustering_key`] picks, and it is the order
/// `information_schema.STATISTICS` lists them in.
pub fn sort_unique_keys(columns: &[ColumnDef], keys: &mut [UniqueKey]) {
    keys.sort_by_key(|k| (k.hash, has_nullable_column(columns, k), k.prefix));
}

fn has_nullable_column(columns: &[ColumnDef], key: &UniqueKey) -> bool {
    key.columns.iter().any(|name| {
        columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .is_none_or(|c| c.nullable)
    })
}

impl TableSchema {
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    /// The table's columns as Arrow fields of the changelog's files, under
    /// their lake names (used both top-level and inside `_before`).
    pub fn column_fields(&self, force_nullable: bool) -> Fields {
        self.columns
            .iter()
            .map(|c| Field::new(c.lake(), c.kind.arrow_type(), force_nullable || c.nullable))
            .collect()
    }

    /// The unique key InnoDB clusters a table without a primary key by, and
    /// that MariaDB then shows as the primary key (`COLUMN_KEY = 'PRI'`, the
    /// TABLE_MAP's primary key): the first in key order whose columns are
    /// all NOT NULL, none indexed by a prefix, and that is no long hash key.
    /// A nullable unique key allows any number of rows whose key is NULL, so
    /// it does not identify a row. `None` when the table has a primary key.
    pub fn clustering_key(&self) -> Option<&UniqueKey> {
        if self.columns.iter().any(|c| c.primary_key) {
            return None;
        }
        self.unique_keys
            .iter()
            .find(|k| !k.hash && !k.prefix && !has_nullable_column(&self.columns, k))
    }

    /// The columns that identify a row, as the current-state tables fold
    /// by them: the primary key's in table order, else those of the
    /// [`clustering_key`](Self::clustering_key) in index order, else none.
    pub fn fold_key(&self) -> Vec<String> {
        let pk: Vec<String> = self
            .columns
            .iter()
            .filter(|c| c.primary_key)
            .map(|c| c.name.clone())
            .collect();
        if !pk.is_empty() {
            return pk;
        }
        let Some(key) = self.clustering_key() else {
            return Vec::new();
        };
        key.columns
            .iter()
            .filter_map(|name| {
                self.columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name))
                    .map(|c| c.name.clone())
            })
            .collect()
    }

    /// A one-line description for error messages: `id int, name varchar(10)`.
    pub fn describe(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.mysql_type))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::{types::kind_from_type, Charset};
    use arrow::datatypes::{DataType, TimeUnit};

    /// DESIGN.md "Types": every type a Delta Lake type, every value exact.
    #[test]
    fn lake_types_are_delta_types() {
        let us = TimeUnit::Microsecond;
        for (mysql, want) in [
            ("tinyint(4)", DataType::Int64),
            ("tinyint(3) unsigned", DataType::Int64),
            ("smallint unsigned", DataType::Int64),
            ("mediumint(8) unsigned", DataType::Int64),
            ("int(11)", DataType::Int64),
            ("int(10) unsigned", DataType::Int64),
            ("bigint(20)", DataType::Int64),
            ("bigint(20) unsigned", DataType::Decimal128(20, 0)),
            ("serial", DataType::Decimal128(20, 0)),
            ("bit(1)", DataType::Int64),
            ("bit(63)", DataType::Int64),
            ("bit(64)", DataType::Decimal128(20, 0)),
            ("decimal(38,10)", DataType::Decimal128(38, 10)),
            ("decimal(39,0)", DataType::Utf8),
            ("decimal(65,30) unsigned", DataType::Utf8),
            ("time(6)", DataType::Int64),
            ("time", DataType::Int64),
            ("datetime(3)", DataType::Timestamp(us, None)),
            ("timestamp(6)", DataType::Timestamp(us, Some("UTC".into()))),
            ("year(4)", DataType::Int16),
            ("float", DataType::Float32),
            ("double", DataType::Float64),
        ] {
            assert_eq!(
                kind_from_type(mysql, None).unwrap().arrow_type(),
                want,
                "{mysql}"
            );
        }
        // The widenings migrations do change no lake type.
        for (from, to) in [
            ("tinyint", "int"),
            ("int", "bigint"),
            ("int unsigned", "bigint"),
            ("smallint unsigned", "mediumint"),
        ] {
            assert_eq!(
                kind_from_type(from, None).unwrap().arrow_type(),
                kind_from_type(to, None).unwrap().arrow_type(),
                "{from} to {to}"
            );
        }
    }

    #[test]
    fn wide_charsets_decode_and_bad_bytes_are_errors() {
        let ucs2 = Charset::from_mysql("ucs2").unwrap();
        assert_eq!(ucs2.decode(&[0x00, 0x41, 0x04, 0x16]).unwrap(), "AЖ");
        let le = Charset::from_mysql("utf16le").unwrap();
        assert_eq!(le.decode(&[0x3D, 0xD8, 0x09, 0xDE]).unwrap(), "😉");
        let utf32 = Charset::from_mysql("utf32").unwrap();
        assert_eq!(
            utf32.decode(&[0, 1, 0xF6, 0x09, 0, 0, 0, 0x61]).unwrap(),
            "😉a"
        );
        assert!(
            utf32.decode(&[0, 0, 0xD8, 0]).is_err(),
            "a surrogate is no character"
        );
        assert!(utf32.decode(&[0, 0, 0]).is_err());
        assert!(ucs2.decode(&[0xD8, 0x00]).is_err(), "a lone surrogate");
        // No byte-order-mark sniffing: latin1 bytes EF BB BF stay three characters.
        let latin1 = Charset::from_mysql("latin1").unwrap();
        assert_eq!(latin1.decode(&[0xEF, 0xBB, 0xBF, 0x80]).unwrap(), "ï»¿€");
        assert!(Charset::from_mysql("armscii8").is_some());
        assert!(Charset::from_mysql("klingon").is_none());
    }
}
