//! What a column holds ([`ColumnKind`]) and its type in the lake
//! ([`ColumnKind::arrow_type`]); MySQL column type text
//! (`decimal(10,2) unsigned`, `enum('a','b')`, `VARCHAR(20)`) to a
//! [`ColumnKind`]. The same text comes from
//! `information_schema.COLUMNS.COLUMN_TYPE` and from DDL statements, so one
//! parser serves the bootstrap, the DDL history and the durable copy.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};

use super::Charset;

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

/// The base type name and its parenthesised arguments, lower-cased.
struct TypeText<'a> {
    base: String,
    args: &'a str,
    unsigned: bool,
}

fn split(text: &str) -> Result<TypeText<'_>, String> {
    let t = text.trim();
    let base_end = t
        .find(|c: char| c == '(' || c.is_whitespace())
        .unwrap_or(t.len());
    let base = t[..base_end].to_ascii_lowercase();
    let mut rest = t[base_end..].trim_start();
    let mut args = "";
    if rest.starts_with('(') {
        let end = closing_paren(rest)
            .ok_or_else(|| format!("unbalanced parentheses in type `{text}`"))?;
        args = &rest[1..end];
        rest = &rest[end + 1..];
    }
    let unsigned = rest
        .to_ascii_lowercase()
        .split_whitespace()
        .any(|w| w == "unsigned");
    Ok(TypeText {
        base,
        args,
        unsigned,
    })
}

/// The byte offset of the parenthesis that closes the one `rest` starts
/// with, skipping quoted labels (`''` and backslash escapes inside them).
fn closing_paren(rest: &str) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                if chars.peek().map(|(_, n)| *n) == Some(q) {
                    chars.next();
                } else {
                    quote = None;
                }
            }
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn numbers(args: &str) -> Vec<u64> {
    args.split(',')
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

/// Maps a type text and the column's charset name to a [`ColumnKind`].
pub fn kind_from_type(text: &str, charset: Option<&str>) -> Result<ColumnKind, String> {
    let t = split(text)?;
    let n = numbers(t.args);
    let unsigned = t.unsigned;
    let fsp = || n.first().copied().unwrap_or(0).min(6) as u8;
    let text_kind = |charset: Option<&str>| -> Result<ColumnKind, String> {
        match charset {
            None | Some("binary") => Ok(ColumnKind::Binary { pad_to: None }),
            Some(cs) => Charset::from_mysql(cs)
                .map(|charset| ColumnKind::Text { charset })
                .ok_or_else(|| format!("character set {cs} is not supported")),
        }
    };
    Ok(match t.base.as_str() {
        "tinyint" | "bool" | "boolean" => ColumnKind::Int { bytes: 1, unsigned },
        "smallint" => ColumnKind::Int { bytes: 2, unsigned },
        "mediumint" => ColumnKind::Int { bytes: 3, unsigned },
        "int" | "integer" => ColumnKind::Int { bytes: 4, unsigned },
        "bigint" => ColumnKind::Int { bytes: 8, unsigned },
        "serial" => ColumnKind::Int {
            bytes: 8,
            unsigned: true,
        },
        // FLOAT(p) with a precision above 24 is a DOUBLE.
        "float" if n.len() == 1 && n[0] > 24 => ColumnKind::Double,
        "float" => ColumnKind::Float,
        "double" | "real" => ColumnKind::Double,
        "decimal" | "numeric" | "dec" | "fixed" => {
            let (precision, scale) = (
                n.first().copied().unwrap_or(10),
                n.get(1).copied().unwrap_or(0),
            );
            // DECIMAL(0) is the default precision, as the server makes it.
            let precision = if precision == 0 { 10 } else { precision };
            if precision > 65 || scale > 30 || scale > precision {
                return Err(format!(
                    "DECIMAL({precision},{scale}) is out of range (precision up to 65, scale up to 30 \
                     and at most the precision)"
                ));
            }
            ColumnKind::Decimal {
                precision: precision as u8,
                scale: scale as u8,
            }
        }
        "date" => ColumnKind::Date,
        "datetime" => ColumnKind::DateTime { fsp: fsp() },
        "timestamp" => ColumnKind::Timestamp { fsp: fsp() },
        "time" => ColumnKind::Time { fsp: fsp() },
        "year" => ColumnKind::Year,
        "bit" => ColumnKind::Bit {
            bits: n.first().copied().unwrap_or(1) as u16,
        },
        "enum" => ColumnKind::Enum {
            labels: Arc::from(parse_labels(t.args)?),
        },
        "set" => ColumnKind::Set {
            labels: Arc::from(parse_labels(t.args)?),
        },
        "char" | "character" | "nchar" | "varchar" | "nvarchar" | "tinytext" | "text"
        | "mediumtext" | "longtext" => text_kind(charset)?,
        "binary" => ColumnKind::Binary {
            pad_to: Some(n.first().copied().unwrap_or(1) as usize),
        },
        "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            ColumnKind::Binary { pad_to: None }
        }
        // MariaDB's JSON is an alias of LONGTEXT with a charset; MySQL's is binary JSON.
        "json" if charset.is_some_and(|c| c != "binary") => text_kind(charset)?,
        "json" => ColumnKind::Json,
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" | "geomcollection" => ColumnKind::Geometry,
        "inet4" => ColumnKind::Inet4,
        "inet6" => ColumnKind::Inet6,
        "uuid" => ColumnKind::Uuid,
        other => return Err(format!("type {other} is not supported")),
    })
}

/// A type text as the server words it: lower case outside ENUM/SET labels
/// (whose case is kept), and `TEXT(n)`/`BLOB(n)` as the smallest text or
/// blob type holding `n` characters of `charset` (bytes for BLOB).
pub fn server_type(text: &str, charset: Option<&str>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == '\\' {
                    out.extend(chars.next());
                } else if c == q {
                    quote = None;
                }
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c.to_ascii_lowercase());
            }
        }
    }
    let Ok(t) = split(&out) else {
        return out;
    };
    let size = |bytes: u64, kinds: [&str; 4]| {
        let kind = match bytes {
            0..=255 => kinds[0],
            256..=65_535 => kinds[1],
            65_536..=16_777_215 => kinds[2],
            _ => kinds[3],
        };
        kind.to_string()
    };
    match (t.base.as_str(), numbers(t.args).first()) {
        ("text", Some(&n)) => size(
            n.saturating_mul(charset.map_or(1, max_bytes_per_char)),
            ["tinytext", "text", "mediumtext", "longtext"],
        ),
        ("blob", Some(&n)) => size(n, ["tinyblob", "blob", "mediumblob", "longblob"]),
        _ => out,
    }
}

/// The most bytes one character takes in a charset.
pub fn max_bytes_per_char(charset: &str) -> u64 {
    match charset {
        "utf8mb4" | "utf16" | "utf16le" | "utf32" | "gb18030" => 4,
        "utf8mb3" | "utf8" | "ujis" | "eucjpms" => 3,
        "ucs2" | "gbk" | "gb2312" | "big5" | "sjis" | "cp932" | "euckr" => 2,
        _ => 1,
    }
}

/// Whether values of this type carry a character set.
pub fn is_textual(text: &str) -> bool {
    matches!(
        split(text).map(|t| t.base).as_deref(),
        Ok("char"
            | "character"
            | "nchar"
            | "varchar"
            | "nvarchar"
            | "tinytext"
            | "text"
            | "mediumtext"
            | "longtext"
            | "enum"
            | "set")
    )
}

/// The labels of an ENUM/SET argument list `'a','b''c'`, unquoted.
pub fn parse_labels(args: &str) -> Result<Vec<String>, String> {
    let mut labels = Vec::new();
    let mut chars = args.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let q = c;
                let mut label = String::new();
                loop {
                    match chars.next() {
                        Some(ch) if ch == q && chars.peek() == Some(&q) => {
                            chars.next();
                            label.push(q);
                        }
                        Some(ch) if ch == q => break,
                        // The escapes the server prints labels with
                        // (`append_unescaped`) and SQL string literals use.
                        Some('\\') => match chars.next() {
                            Some('0') => label.push('\0'),
                            Some('n') => label.push('\n'),
                            Some('r') => label.push('\r'),
                            Some('t') => label.push('\t'),
                            Some('b') => label.push('\u{8}'),
                            Some('Z') => label.push('\u{1A}'),
                            Some(e) => label.push(e),
                            None => return Err("unterminated label".into()),
                        },
                        Some(ch) => label.push(ch),
                        None => return Err("unterminated label".into()),
                    }
                }
                labels.push(label);
            }
            ',' => {}
            c if c.is_whitespace() => {}
            other => return Err(format!("unexpected `{other}` in label list")),
        }
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_schema_and_ddl_spellings_agree() {
        for (a, b) in [
            ("int(11) unsigned", "INT UNSIGNED"),
            ("decimal(10,2)", "DECIMAL(10,2)"),
            ("enum('a','b''c')", "ENUM('a', 'b''c')"),
            ("datetime(6)", "DATETIME(6)"),
            ("tinyint(1)", "BOOLEAN"),
        ] {
            assert_eq!(
                kind_from_type(a, None),
                kind_from_type(b, None),
                "{a} vs {b}"
            );
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(
            kind_from_type("bigint(20) unsigned", None),
            Ok(ColumnKind::Int {
                bytes: 8,
                unsigned: true
            })
        );
        assert_eq!(
            kind_from_type("binary(8)", None),
            Ok(ColumnKind::Binary { pad_to: Some(8) })
        );
        assert_eq!(
            kind_from_type("varchar(10)", Some("latin1")),
            Ok(ColumnKind::Text {
                charset: Charset::from_mysql("latin1").unwrap()
            })
        );
        assert_eq!(
            kind_from_type("DECIMAL(5)", None),
            Ok(ColumnKind::Decimal {
                precision: 5,
                scale: 0
            })
        );
        assert_eq!(
            kind_from_type("longtext", Some("utf8mb4")),
            Ok(ColumnKind::Text {
                charset: Charset::Utf8
            })
        );
        assert_eq!(kind_from_type("json", None), Ok(ColumnKind::Json));
        assert_eq!(
            kind_from_type("DECIMAL(0)", None),
            Ok(ColumnKind::Decimal {
                precision: 10,
                scale: 0
            }),
            "the server makes DECIMAL(0) decimal(10,0)"
        );
        assert!(kind_from_type("decimal(66,2)", None).is_err());
        assert!(
            kind_from_type("decimal(300,2)", None).is_err(),
            "not cut to u8"
        );
        assert!(kind_from_type("decimal(40,31)", None).is_err());
        assert_eq!(
            parse_labels(r"'a\\b','n\nl','q''r'").unwrap(),
            vec!["a\\b", "n\nl", "q'r"],
            "labels as information_schema prints them"
        );
        assert!(kind_from_type("vector(3)", None).is_err());
        // MariaDB's own types, as information_schema and DDL spell them.
        assert_eq!(kind_from_type("inet6", None), Ok(ColumnKind::Inet6));
        assert_eq!(kind_from_type("INET4", None), Ok(ColumnKind::Inet4));
        assert_eq!(kind_from_type("UUID", None), Ok(ColumnKind::Uuid));
        assert_eq!(
            parse_labels("'a','b''c','d,e'").unwrap(),
            vec!["a", "b'c", "d,e"]
        );
        assert!(is_textual("ENUM('x')") && !is_textual("int"));
        assert_eq!(kind_from_type("float(30)", None), Ok(ColumnKind::Double));
        assert_eq!(kind_from_type("FLOAT(24)", None), Ok(ColumnKind::Float));
        assert_eq!(kind_from_type("float(7,3)", None), Ok(ColumnKind::Float));
    }

    #[test]
    fn server_type_keeps_label_case_and_sizes_text_and_blob() {
        // As SHOW CREATE TABLE words them on MariaDB 10.11.
        for (t, cs, server) in [
            (
                "ENUM('PENDING', 'Ok')",
                Some("utf8mb4"),
                "enum('PENDING', 'Ok')",
            ),
            ("SET('A''B')", Some("latin1"), "set('A''B')"),
            ("VARCHAR(10)", Some("utf8mb4"), "varchar(10)"),
            ("TEXT(150)", Some("ascii"), "tinytext"),
            ("TEXT(63)", Some("utf8mb4"), "tinytext"),
            ("TEXT(64)", Some("utf8mb4"), "text"),
            ("text(1)", Some("utf8mb3"), "tinytext"),
            ("TEXT(70000)", Some("latin1"), "mediumtext"),
            ("BLOB(255)", None, "tinyblob"),
            ("BLOB(300)", None, "blob"),
            ("TEXT", Some("utf8mb4"), "text"),
        ] {
            assert_eq!(server_type(t, cs), server, "{t} {cs:?}");
        }
    }

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
}
