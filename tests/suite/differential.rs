//! The randomized differential test: random tables over every type family
//! and its edges, random DML (multi-row statements, INSERT … SELECT,
//! REPLACE, ON DUPLICATE KEY UPDATE, primary keys that move, savepoints,
//! rolled-back and multi-table transactions), then the lake replayed by
//! `_seq` must equal `SELECT *`, value by value.
//!
//! Seeded and reproducible: the seed is printed; `SLUICE_FUZZ_SEED=N`
//! repeats a run, `SLUICE_FUZZ_ROWS=N` scales it up (default 300 rows).
//! Every mismatch names the seed, table, key, column and both values.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::common::*;
use arrow::datatypes::{DataType, Field, TimeUnit};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const DEFAULT_ROWS: usize = 300;

fn seed() -> u64 {
    match std::env::var("SLUICE_FUZZ_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SLUICE_FUZZ_SEED={s:?} is not an unsigned integer")),
        Err(_) => rand::random::<u32>() as u64,
    }
}

fn rows_wanted() -> usize {
    match std::env::var("SLUICE_FUZZ_ROWS") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SLUICE_FUZZ_ROWS={s:?} is not an unsigned integer")),
        Err(_) => DEFAULT_ROWS,
    }
}

// ---------------------------------------------------------------------------
// Column types and their values
// ---------------------------------------------------------------------------

/// What a column holds and how its values are made.
#[derive(Clone, Debug)]
enum Family {
    Int {
        ty: &'static str,
        bits: u32,
        unsigned: bool,
    },
    Decimal {
        precision: u32,
        scale: u32,
        unsigned: bool,
    },
    Float,
    Double,
    Date,
    DateTime {
        fsp: u32,
    },
    Timestamp {
        fsp: u32,
    },
    Time {
        fsp: u32,
    },
    Year,
    Bit {
        n: u32,
    },
    Enum {
        labels: Vec<String>,
    },
    Set {
        labels: Vec<String>,
    },
    /// CHAR/VARCHAR/TEXT in a character set; `max` characters.
    Text {
        charset: &'static str,
        max: usize,
        fixed: bool,
    },
    Binary {
        n: usize,
    },
    VarBinary {
        max: usize,
    },
    Json,
    Geometry {
        ty: &'static str,
    },
    /// MariaDB's INET4, INET6 and UUID (10.10+).
    Inet4,
    Inet6,
    Uuid,
}

#[derive(Clone, Debug)]
struct Column {
    name: String,
    ddl: String,
    /// The SELECT expression that prints the value as the lake's `mysql_text` does.
    select: String,
    family: Family,
}

/// Characters each claimed charset can hold, for text values (inserted as
/// utf8mb4 literals that the server converts).
fn repertoire(charset: &str) -> &'static str {
    match charset {
        "utf8mb4" | "utf16" | "utf16le" | "utf32" => {
            "aZ09 _-'\"\\\t\nàéîõüßÿ€Œ漢字中文テスト한국😀🎉🇩🇪𝄞🙂"
        }
        "utf8mb3" | "ucs2" => "aZ09 _-'\"\\\t\nàéîõüßÿ€Œ漢字中文テスト한국ąłж",
        "ascii" => "aZ09 _-'\"\\\t\n~{}",
        "latin1" => "aZ09 _-'\"\\\t\nàéîõüßÿ€ŒšžŸ‰†‡•–—™ï»¿þ",
        "latin2" => "aZ09 _-ąćęłńóśźżĄĆĘŁŃÓŚŹŻ",
        "latin5" => "aZ09 _-ğĞıİşŞçÇöÖüÜ",
        "latin7" => "aZ09 _-ąčęėįšųūžĄČ",
        "cp1250" => "aZ09 _-ąćęłńóśźżšťž€",
        "cp1251" => "aZ09 _-абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВЁ€",
        "cp1256" => "aZ09 _-ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "cp1257" => "aZ09 _-ąčęėįšųūžĄČ€",
        "cp866" => "aZ09 _-абвгдежзийклмнопрстуфхцчшщъыьэюяАБВ",
        "koi8r" => "aZ09 _-абвгдежзийклмнопрстуфхцчшщъыьэюяАБВ",
        "koi8u" => "aZ09 _-абвгдежзийклмнопрстуфхцчшщьюяїєіґЇЄІҐ",
        "greek" => "aZ09 _-αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔ",
        "hebrew" => "aZ09 _-אבגדהוזחטיכלמנסעפצקרשת",
        "gbk" | "gb2312" => "aZ09 _-中文汉字测试数据库",
        "big5" => "aZ09 _-中文漢字測試資料庫",
        "sjis" | "cp932" | "ujis" | "eucjpms" => "aZ09 _-日本語テキストひらがなカタカナ",
        "euckr" => "aZ09 _-한국어텍스트",
        "tis620" => "aZ09 _-ภาษาไทย",
        // The other single-byte charsets get raw bytes too (`SINGLE_BYTE`).
        "armscii8" | "cp850" | "cp852" | "dec8" | "geostd8" | "hp8" | "keybcs2" | "macce"
        | "macroman" | "swe7" => "aZ09 _-",
        other => panic!("no repertoire for {other}"),
    }
}

/// Every character set the README claims (CHAR/VARCHAR/TEXT "decoded from
/// the column's charset", latin1 as Windows-1252) and `Charset::from_mysql`
/// maps; those the server lacks are left out at run time.
const CHARSETS: [&str; 39] = [
    "utf8mb4", "utf8mb3", "ascii", "latin1", "latin2", "latin5", "latin7", "cp1250", "cp1251",
    "cp1256", "cp1257", "cp866", "koi8r", "koi8u", "greek", "hebrew", "gbk", "gb2312", "big5",
    "sjis", "cp932", "ujis", "eucjpms", "euckr", "tis620", "armscii8", "cp850", "cp852", "dec8",
    "geostd8", "hp8", "keybcs2", "macce", "macroman", "swe7", "ucs2", "utf16", "utf16le", "utf32",
];

/// The charsets of `CHARSETS` in which every byte is a character.
const SINGLE_BYTE: [&str; 25] = [
    "ascii", "latin1", "latin2", "latin5", "latin7", "cp1250", "cp1251", "cp1256", "cp1257",
    "cp866", "koi8r", "koi8u", "greek", "hebrew", "tis620", "armscii8", "cp850", "cp852", "dec8",
    "geostd8", "hp8", "keybcs2", "macce", "macroman", "swe7",
];

const LABELS_PLAIN: [&str; 8] = ["a", "b", "small", "medium", "Ça", "naïve", "it's", "x y"];
const LABELS_WIDE: [&str; 4] = ["🎉", "😀 ok", "𝄞", "🇩🇪"];

fn labels(rng: &mut StdRng, wide: bool) -> Vec<String> {
    let mut pool: Vec<&str> = LABELS_PLAIN.to_vec();
    if wide {
        pool.extend(LABELS_WIDE);
    }
    pool.shuffle(rng);
    let n = rng.gen_range(1..=pool.len());
    pool[..n].iter().map(|s| s.to_string()).collect()
}

fn quote_label(l: &str) -> String {
    format!("'{}'", l.replace('\'', "''"))
}

fn random_family(
    rng: &mut StdRng,
    kind: usize,
    wide_labels: bool,
    charsets: &[&'static str],
) -> Family {
    const INTS: [(&str, u32); 5] = [
        ("TINYINT", 8),
        ("SMALLINT", 16),
        ("MEDIUMINT", 24),
        ("INT", 32),
        ("BIGINT", 64),
    ];
    match kind {
        0 => {
            let (ty, bits) = *INTS.choose(rng).unwrap();
            Family::Int {
                ty,
                bits,
                unsigned: rng.gen(),
            }
        }
        1 => {
            let precision = rng.gen_range(1..=65);
            let scale = rng.gen_range(0..=precision.min(30));
            Family::Decimal {
                precision,
                scale,
                unsigned: rng.gen_bool(0.2),
            }
        }
        2 => Family::Float,
        3 => Family::Double,
        4 => Family::Date,
        5 => Family::DateTime {
            fsp: rng.gen_range(0..=6),
        },
        6 => Family::Timestamp {
            fsp: rng.gen_range(0..=6),
        },
        7 => Family::Time {
            fsp: rng.gen_range(0..=6),
        },
        8 => Family::Year,
        9 => Family::Bit {
            n: *[1, 2, 7, 8, 9, 31, 32, 33, 63, 64].choose(rng).unwrap(),
        },
        10 => Family::Enum {
            labels: labels(rng, wide_labels),
        },
        11 => Family::Set {
            labels: labels(rng, wide_labels),
        },
        12 => Family::Text {
            charset: charsets.choose(rng).unwrap(),
            max: rng.gen_range(1..=40),
            fixed: rng.gen_bool(0.3),
        },
        13 => Family::Binary {
            n: rng.gen_range(1..=16),
        },
        14 => Family::VarBinary {
            max: rng.gen_range(1..=64),
        },
        15 => Family::Json,
        16 => Family::Geometry {
            ty: ["GEOMETRY", "POINT", "LINESTRING", "POLYGON"]
                .choose(rng)
                .unwrap(),
        },
        17 => Family::Inet4,
        18 => Family::Inet6,
        _ => Family::Uuid,
    }
}
const FAMILY_KINDS: usize = 17;
/// With MariaDB's INET4, INET6 and UUID.
const FAMILY_KINDS_WITH_ADDRESSES: usize = 20;

fn column(name: String, family: Family, rng: &mut StdRng) -> Column {
    let n = &name;
    let (ddl, select) = match &family {
        Family::Int { ty, unsigned, .. } => (
            format!("{ty}{}", if *unsigned { " UNSIGNED" } else { "" }),
            n.clone(),
        ),
        Family::Decimal {
            precision,
            scale,
            unsigned,
        } => (
            format!(
                "DECIMAL({precision},{scale}){}",
                if *unsigned { " UNSIGNED" } else { "" }
            ),
            n.clone(),
        ),
        Family::Float => ("FLOAT".into(), n.clone()),
        Family::Double => ("DOUBLE".into(), n.clone()),
        Family::Date => ("DATE".into(), n.clone()),
        Family::DateTime { fsp } => (
            format!("DATETIME({fsp})"),
            format!("DATE_FORMAT({n}, '%Y-%m-%d %H:%i:%s.%f')"),
        ),
        Family::Timestamp { fsp } => (
            format!("TIMESTAMP({fsp}) NULL DEFAULT NULL"),
            format!("DATE_FORMAT({n}, '%Y-%m-%d %H:%i:%s.%f')"),
        ),
        // The lake holds signed microseconds.
        Family::Time { fsp } => (
            format!("TIME({fsp})"),
            format!("CAST(TIME_TO_SEC({n}) * 1000000 AS SIGNED)"),
        ),
        Family::Year => ("YEAR".into(), format!("{n}+0")),
        Family::Bit { n: bits } => (format!("BIT({bits})"), format!("{n}+0")),
        Family::Enum { labels } => (
            format!(
                "ENUM({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                labels
                    .iter()
                    .map(|l| quote_label(l))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            n.clone(),
        ),
        Family::Set { labels } => (
            format!(
                "SET({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                labels
                    .iter()
                    .map(|l| quote_label(l))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            n.clone(),
        ),
        Family::Text {
            charset,
            max,
            fixed,
        } => {
            let ty = if *fixed {
                format!("CHAR({max})")
            } else {
                match rng.gen_range(0..4) {
                    0 => "TINYTEXT".to_string(),
                    1 => "TEXT".to_string(),
                    2 => "MEDIUMTEXT".to_string(),
                    _ => format!("VARCHAR({max})"),
                }
            };
            (format!("{ty} CHARACTER SET {charset}"), n.clone())
        }
        Family::Binary { n: len } => (format!("BINARY({len})"), format!("HEX({n})")),
        Family::VarBinary { max } => {
            let ty = match rng.gen_range(0..5) {
                0 => "BLOB".to_string(),
                1 => "TINYBLOB".to_string(),
                2 => "MEDIUMBLOB".to_string(),
                3 => format!("VARCHAR({max}) CHARACTER SET binary"),
                _ => format!("VARBINARY({max})"),
            };
            (ty, format!("HEX({n})"))
        }
        Family::Json => ("JSON".into(), n.clone()),
        Family::Geometry { ty } => (ty.to_string(), format!("HEX({n})")),
        Family::Inet4 => ("INET4".into(), n.clone()),
        Family::Inet6 => ("INET6".into(), n.clone()),
        Family::Uuid => ("UUID".into(), n.clone()),
    };
    Column {
        name,
        ddl,
        select,
        family,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn fraction(rng: &mut StdRng, fsp: u32, max: bool) -> String {
    if fsp == 0 {
        return String::new();
    }
    let v: u64 = if max {
        10u64.pow(fsp) - 1
    } else {
        rng.gen_range(0..10u64.pow(fsp))
    };
    format!(".{v:0width$}", width = fsp as usize)
}

/// Digits `0-9`, `n` of them, the first nonzero when `lead` is set.
fn digits(rng: &mut StdRng, n: u32, lead: bool) -> String {
    (0..n)
        .map(|i| {
            let d = if i == 0 && lead {
                rng.gen_range(1..10)
            } else {
                rng.gen_range(0..10)
            };
            char::from(b'0' + d as u8)
        })
        .collect()
}

/// A SQL literal of a value the column accepts.
fn value(rng: &mut StdRng, family: &Family) -> String {
    if rng.gen_bool(0.12) {
        return "NULL".into();
    }
    match family {
        Family::Int { bits, unsigned, .. } => {
            let (min, max): (i128, i128) = if *unsigned {
                (0, (1i128 << bits) - 1)
            } else {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            };
            let v = match rng.gen_range(0..6) {
                0 => min,
                1 => max,
                2 => rng.gen_range(-100i128..=100).clamp(min, max),
                _ => rng.gen_range(min..=max),
            };
            v.to_string()
        }
        Family::Decimal {
            precision,
            scale,
            unsigned,
        } => {
            let int_max = precision - scale;
            let at_limit = rng.gen_bool(0.25);
            let int_digits = if at_limit {
                int_max
            } else {
                rng.gen_range(0..=int_max)
            };
            let frac_digits = if at_limit {
                *scale
            } else {
                rng.gen_range(0..=*scale)
            };
            let int = if int_digits == 0 {
                "0".to_string()
            } else {
                digits(rng, int_digits, true)
            };
            let sign = if !unsigned && rng.gen() { "-" } else { "" };
            if frac_digits == 0 {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{}", digits(rng, frac_digits, false))
            }
        }
        Family::Float => {
            let mantissa: i32 = rng.gen_range(-99_999..=99_999);
            let exp: i32 = rng.gen_range(-30..=30);
            format!("{mantissa}e{exp}")
        }
        Family::Double => match rng.gen_range(0..8) {
            0 => "1.7976931348623157e308".into(),
            1 => "-2.2250738585072014e-308".into(),
            _ => {
                let mantissa: i64 = rng.gen_range(-999_999_999_999_999..=999_999_999_999_999);
                let exp: i32 = rng.gen_range(-300..=290);
                format!("{mantissa}e{exp}")
            }
        },
        Family::Date => match rng.gen_range(0..6) {
            0 => "'1000-01-01'".into(),
            1 => "'9999-12-31'".into(),
            _ => {
                let y = rng.gen_range(1000..=9999);
                let m = rng.gen_range(1..=12);
                let d = rng.gen_range(1..=days_in_month(y, m));
                format!("'{y:04}-{m:02}-{d:02}'")
            }
        },
        Family::DateTime { fsp } => match rng.gen_range(0..6) {
            0 => "'1000-01-01 00:00:00'".into(),
            1 => format!("'9999-12-31 23:59:59{}'", fraction(rng, *fsp, true)),
            _ => {
                let y = rng.gen_range(1000..=9999);
                let m = rng.gen_range(1..=12);
                let d = rng.gen_range(1..=days_in_month(y, m));
                let (h, mi, s) = (
                    rng.gen_range(0..24),
                    rng.gen_range(0..60),
                    rng.gen_range(0..60),
                );
                format!(
                    "'{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}{}'",
                    fraction(rng, *fsp, false)
                )
            }
        },
        Family::Timestamp { fsp } => {
            // The server runs in UTC (the harness starts it with +00:00).
            let (secs, max) = match rng.gen_range(0..6) {
                0 => (1i64, false),
                1 => (2_147_483_647, true),
                _ => (rng.gen_range(1..2_147_483_647), false),
            };
            let t = chrono::DateTime::from_timestamp(secs, 0)
                .unwrap()
                .naive_utc();
            format!(
                "'{}{}'",
                t.format("%Y-%m-%d %H:%M:%S"),
                fraction(rng, *fsp, max)
            )
        }
        Family::Time { fsp } => {
            let sign = if rng.gen() { "-" } else { "" };
            match rng.gen_range(0..6) {
                0 => format!("'{sign}838:59:59{}'", fraction(rng, *fsp, true)),
                1 => format!("'{sign}00:00:00{}'", fraction(rng, *fsp, false)),
                _ => format!(
                    "'{sign}{}:{:02}:{:02}{}'",
                    rng.gen_range(0..=838),
                    rng.gen_range(0..60),
                    rng.gen_range(0..60),
                    fraction(rng, *fsp, false)
                ),
            }
        }
        Family::Year => match rng.gen_range(0..5) {
            0 => "1901".into(),
            1 => "2155".into(),
            2 => "0".into(),
            _ => rng.gen_range(1901..=2155).to_string(),
        },
        Family::Bit { n } => {
            let mask = if *n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            let v = match rng.gen_range(0..4) {
                0 => mask,
                1 => 0,
                _ => rng.gen::<u64>() & mask,
            };
            format!("b'{v:b}'")
        }
        Family::Enum { labels } => {
            let l = labels.choose(rng).unwrap();
            format!("_utf8mb4 x'{}'", hex(l.as_bytes()))
        }
        Family::Set { labels } => {
            let chosen: Vec<&str> = labels
                .iter()
                .filter(|_| rng.gen_bool(0.4))
                .map(String::as_str)
                .collect();
            format!("_utf8mb4 x'{}'", hex(chosen.join(",").as_bytes()))
        }
        Family::Text {
            charset,
            max,
            fixed,
        } => {
            if SINGLE_BYTE.contains(charset) && rng.gen_bool(0.4) {
                // Raw bytes: in a single-byte charset every byte is a
                // character (latin1's range where Windows-1252 differs from
                // ISO-8859-1 included; bytes the server has no Unicode for
                // are '?' in SELECT and in the lake).
                let len = rng.gen_range(0..=*max);
                let bytes: Vec<u8> = (0..len)
                    .map(|_| match rng.gen_range(0..3) {
                        0 => rng.gen_range(0x80..=0x9F),
                        1 => rng.gen_range(0xA0..=0xFF),
                        _ => rng.gen_range(0x20..0x7F),
                    })
                    .collect();
                let bytes = if *fixed {
                    trim_trailing_spaces(bytes)
                } else {
                    bytes
                };
                return format!("_{charset} x'{}'", hex(&bytes));
            }
            let chars: Vec<char> = repertoire(charset).chars().collect();
            let len = rng.gen_range(0..=*max);
            let mut s: String = (0..len).map(|_| *chars.choose(rng).unwrap()).collect();
            // Text whose bytes begin like a byte-order mark (EF BB BF, FE FF,
            // FF FE) in the column's charset: it is text all the same.
            let bom_like = match *charset {
                "latin1" => ["ï»¿", "þÿ", "ÿþ"].choose(rng).copied(),
                "cp1251" => Some("п»ї"),
                _ => None,
            };
            if let Some(prefix) = bom_like.filter(|_| rng.gen_bool(0.15)) {
                let keep: String = s.chars().take(max.saturating_sub(3)).collect();
                s = format!("{prefix}{keep}");
                if s.chars().count() > *max {
                    s = s.chars().take(*max).collect();
                }
            }
            if *fixed {
                // SELECT strips a CHAR's trailing spaces.
                s = s.trim_end_matches(' ').to_string();
            }
            format!("_utf8mb4 x'{}'", hex(s.as_bytes()))
        }
        Family::Binary { n } => {
            let len = rng.gen_range(0..=*n);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if rng.gen_bool(0.3) && !bytes.is_empty() {
                *bytes.last_mut().unwrap() = 0;
            }
            format!("x'{}'", hex(&bytes))
        }
        Family::VarBinary { max } => {
            let len = rng.gen_range(0..=*max);
            let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            format!("x'{}'", hex(&bytes))
        }
        Family::Json => {
            let doc = json_value(rng, 0).to_string();
            format!("_utf8mb4 x'{}'", hex(doc.as_bytes()))
        }
        Family::Geometry { ty } => {
            let pick = rng.gen_range(0..3);
            let mut p = || {
                format!(
                    "{} {}",
                    rng.gen_range(-1000..1000) as f64 / 8.0,
                    rng.gen_range(-1000..1000) as f64 / 4.0
                )
            };
            let wkt = match *ty {
                "POINT" => format!("POINT({})", p()),
                "LINESTRING" => format!("LINESTRING({}, {}, {})", p(), p(), p()),
                "POLYGON" => "POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))".to_string(),
                _ => match pick {
                    0 => format!("POINT({})", p()),
                    1 => format!("LINESTRING({}, {})", p(), p()),
                    _ => format!("MULTIPOINT({}, {})", p(), p()),
                },
            };
            format!("ST_GeomFromText('{wkt}')")
        }
        Family::Inet4 => {
            let b: [u8; 4] = match rng.gen_range(0..4) {
                0 => [0; 4],
                1 => [255; 4],
                _ => rng.gen(),
            };
            format!("'{}.{}.{}.{}'", b[0], b[1], b[2], b[3])
        }
        Family::Inet6 => {
            // Runs of zero groups, IPv4-mapped and -compatible addresses,
            // trailing zero bytes (which the binlog strips).
            let mut w: [u16; 8] = rng.gen();
            match rng.gen_range(0..6) {
                0 => {
                    w[..5].fill(0);
                    w[5] = 0xFFFF;
                }
                1 => w[..6].fill(0),
                2 => w[rng.gen_range(4..8)..].fill(0),
                3 => {
                    let start = rng.gen_range(0..8);
                    let end = rng.gen_range(start..=8);
                    w[start..end].fill(0);
                    let other = rng.gen_range(0..8);
                    w[other] = 0;
                }
                4 => w = [0; 8],
                _ => {}
            }
            let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
            format!("CAST(x'{}' AS INET6)", hex(&bytes))
        }
        Family::Uuid => match rng.gen_range(0..4) {
            // Time-based (version 1) from the server itself.
            0 => "UUID()".into(),
            1 => "'00000000-0000-0000-0000-000000000000'".into(),
            _ => {
                let mut b: [u8; 16] = rng.gen();
                if b[6] >> 4 >= 8 && b[8] <= 0x80 {
                    // MariaDB 10.11 refuses versions 8 to 15 with these
                    // variant bytes (checked by hand; lower versions take any).
                    b[8] = rng.gen_range(0x81..=0xFF);
                }
                if rng.gen() {
                    b[12..].fill(0);
                }
                let h = hex(&b).to_ascii_lowercase();
                format!(
                    "'{}-{}-{}-{}-{}'",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                )
            }
        },
    }
}

fn trim_trailing_spaces(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last() == Some(&b' ') {
        bytes.pop();
    }
    bytes
}

fn json_value(rng: &mut StdRng, depth: usize) -> serde_json::Value {
    use serde_json::Value as J;
    let leaf = depth >= 3 || rng.gen_bool(0.4);
    if leaf {
        return match rng.gen_range(0..6) {
            0 => J::Null,
            1 => J::Bool(rng.gen()),
            2 => J::from(rng.gen_range(-1_000_000i64..1_000_000)),
            3 => J::from(rng.gen_range(-1000..1000) as f64 / 8.0),
            4 => J::from(
                ["x", "é ü", "😀", "a\"b\\c", "line\nbreak"]
                    .choose(rng)
                    .unwrap()
                    .to_string(),
            ),
            _ => J::from(u64::MAX - rng.gen_range(0..10)),
        };
    }
    if rng.gen() {
        J::Array(
            (0..rng.gen_range(0..4))
                .map(|_| json_value(rng, depth + 1))
                .collect(),
        )
    } else {
        J::Object(
            (0..rng.gen_range(0..4))
                .map(|i| {
                    (
                        format!("k{i}{}", ["", "é", "🎉"].choose(rng).unwrap()),
                        json_value(rng, depth + 1),
                    )
                })
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------
// Tables and the workload
// ---------------------------------------------------------------------------

struct Table {
    name: String,
    columns: Vec<Column>,
    /// Ids that were inserted at some point (they may be gone): targets of
    /// updates, deletes, REPLACE and ON DUPLICATE KEY UPDATE.
    ids: Vec<i64>,
}

/// `n_tables` tables; together they hold every family, each table a random mix.
fn random_tables(
    rng: &mut StdRng,
    n_tables: usize,
    wide_labels: bool,
    charsets: &[&'static str],
    families: usize,
) -> Vec<Table> {
    let mut tables: Vec<Table> = (0..n_tables)
        .map(|i| Table {
            name: format!("t{i}"),
            columns: Vec::new(),
            ids: Vec::new(),
        })
        .collect();
    let mut kinds: Vec<usize> = (0..families).collect();
    // Every charset once more, so each run covers all of them.
    kinds.extend(std::iter::repeat_n(12, charsets.len()));
    // And every temporal fsp.
    kinds.extend([5, 6, 7].iter().flat_map(|k| std::iter::repeat_n(*k, 3)));
    for _ in 0..families {
        kinds.push(rng.gen_range(0..families));
    }
    let mut text_i = 0;
    for (i, kind) in kinds.into_iter().enumerate() {
        let t = &mut tables[rng.gen_range(0..n_tables)];
        let mut family = random_family(rng, kind, wide_labels, charsets);
        if let (12, Family::Text { charset, .. }) = (kind, &mut family) {
            // The extra text columns go through the charsets in turn.
            if i >= families {
                *charset = charsets[text_i % charsets.len()];
                text_i += 1;
            }
        }
        let name = format!("c{}", t.columns.len() + 1);
        t.columns.push(column(name, family, rng));
    }
    tables
}

fn create_sql(t: &Table) -> String {
    let cols: Vec<String> = t
        .columns
        .iter()
        .map(|c| format!("  {} {}", c.name, c.ddl))
        .collect();
    format!(
        "CREATE TABLE shop.{} (\n  id INT NOT NULL PRIMARY KEY,\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;\n",
        t.name,
        cols.join(",\n")
    )
}

struct Workload {
    rng: StdRng,
    tables: Vec<Table>,
    next_id: i64,
    /// INSERT … SELECT copies rows to `id + k * COPY_OFFSET`.
    copies: i64,
    rows: usize,
    sql: String,
}

/// Fresh ids stay below this; INSERT … SELECT copies live at multiples of it.
const COPY_OFFSET: i64 = 1_000_000;

impl Workload {
    fn row_values(&mut self, t: usize) -> String {
        let families: Vec<Family> = self.tables[t]
            .columns
            .iter()
            .map(|c| c.family.clone())
            .collect();
        families
            .iter()
            .map(|f| value(&mut self.rng, f))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn fresh_id(&mut self, t: usize) -> i64 {
        self.next_id += 1;
        self.tables[t].ids.push(self.next_id);
        self.next_id
    }

    fn known_id(&mut self, t: usize) -> i64 {
        match self.tables[t].ids.choose(&mut self.rng) {
            Some(id) => *id,
            None => self.fresh_id(t),
        }
    }

    fn column_list(&self, t: usize) -> String {
        let mut names = vec!["id".to_string()];
        names.extend(self.tables[t].columns.iter().map(|c| c.name.clone()));
        names.join(", ")
    }

    /// `c3 = <value>, c7 = <value>` over a random non-empty set of columns.
    fn assignments(&mut self, t: usize) -> String {
        let n = self.tables[t].columns.len();
        let k = self.rng.gen_range(1..=n.min(4));
        let mut idx: Vec<usize> = (0..n).collect();
        idx.shuffle(&mut self.rng);
        idx.truncate(k);
        idx.iter()
            .map(|&i| {
                let family = self.tables[t].columns[i].family.clone();
                format!(
                    "{} = {}",
                    self.tables[t].columns[i].name,
                    value(&mut self.rng, &family)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn statement(&mut self) {
        let t = self.rng.gen_range(0..self.tables.len());
        let name = self.tables[t].name.clone();
        let cols = self.column_list(t);
        let stmt = match self.rng.gen_range(0..100) {
            0..=34 => {
                let n = self.rng.gen_range(1..=4);
                let rows: Vec<String> = (0..n)
                    .map(|_| {
                        let id = self.fresh_id(t);
                        format!("({id}, {})", self.row_values(t))
                    })
                    .collect();
                self.rows += n;
                format!(
                    "INSERT INTO shop.{name} ({cols}) VALUES {}",
                    rows.join(", ")
                )
            }
            35..=39 => {
                self.copies += 1;
                let limit = self.rng.gen_range(1..=3);
                let from = self.known_id(t);
                self.rows += limit;
                let rest: Vec<String> = self.tables[t]
                    .columns
                    .iter()
                    .map(|c| c.name.clone())
                    .collect();
                format!(
                    "INSERT INTO shop.{name} ({cols}) SELECT id + {}, {} FROM shop.{name} \
                     WHERE id >= {from} AND id < {COPY_OFFSET} ORDER BY id LIMIT {limit}",
                    self.copies * COPY_OFFSET,
                    rest.join(", ")
                )
            }
            40..=46 => {
                let id = if self.rng.gen() {
                    self.known_id(t)
                } else {
                    self.fresh_id(t)
                };
                self.rows += 1;
                format!(
                    "REPLACE INTO shop.{name} ({cols}) VALUES ({id}, {})",
                    self.row_values(t)
                )
            }
            47..=53 => {
                let id = self.known_id(t);
                self.rows += 1;
                let set = self.assignments(t);
                format!(
                    "INSERT INTO shop.{name} ({cols}) VALUES ({id}, {}) ON DUPLICATE KEY UPDATE {set}",
                    self.row_values(t)
                )
            }
            54..=72 => {
                let set = self.assignments(t);
                if self.rng.gen_bool(0.3) {
                    let a = self.known_id(t);
                    format!(
                        "UPDATE shop.{name} SET {set} WHERE id BETWEEN {a} AND {}",
                        a + 5
                    )
                } else {
                    let id = self.known_id(t);
                    format!("UPDATE shop.{name} SET {set} WHERE id = {id}")
                }
            }
            73..=82 => {
                // The primary key moves (with other columns, or alone).
                let from = self.known_id(t);
                let to = self.fresh_id(t);
                if self.rng.gen() {
                    let set = self.assignments(t);
                    format!("UPDATE shop.{name} SET id = {to}, {set} WHERE id = {from}")
                } else {
                    format!("UPDATE shop.{name} SET id = {to} WHERE id = {from}")
                }
            }
            _ => {
                if self.rng.gen_bool(0.3) {
                    let a = self.known_id(t);
                    format!("DELETE FROM shop.{name} WHERE id BETWEEN {a} AND {}", a + 2)
                } else {
                    let id = self.known_id(t);
                    format!("DELETE FROM shop.{name} WHERE id = {id}")
                }
            }
        };
        let _ = writeln!(self.sql, "{stmt};");
    }

    /// One unit: a single autocommitted statement, or a transaction over
    /// random tables, maybe with a savepoint rolled back to or released,
    /// committed or rolled back.
    fn unit(&mut self) {
        match self.rng.gen_range(0..10) {
            0..=3 => self.statement(),
            _ => {
                self.sql.push_str("BEGIN;\n");
                for _ in 0..self.rng.gen_range(1..=4) {
                    self.statement();
                }
                if self.rng.gen_bool(0.4) {
                    self.sql.push_str("SAVEPOINT sp1;\n");
                    for _ in 0..self.rng.gen_range(1..=3) {
                        self.statement();
                    }
                    if self.rng.gen() {
                        self.sql.push_str("ROLLBACK TO SAVEPOINT sp1;\n");
                    } else {
                        self.sql.push_str("RELEASE SAVEPOINT sp1;\n");
                    }
                    for _ in 0..self.rng.gen_range(0..=2) {
                        self.statement();
                    }
                }
                if self.rng.gen_bool(0.15) {
                    self.sql.push_str("ROLLBACK;\n");
                } else {
                    self.sql.push_str("COMMIT;\n");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

/// FLOAT and DOUBLE compared at the precision the client prints them with.
fn normalize(values: &mut [Option<String>], columns: &[Column]) {
    for (i, c) in columns.iter().enumerate() {
        let digits = match c.family {
            Family::Float => 6,
            Family::Double => 17,
            _ => continue,
        };
        if let Some(v) = &values[i + 1] {
            let x: f64 = v
                .parse()
                .unwrap_or_else(|_| panic!("{} = {v:?} is not a number", c.name));
            values[i + 1] = Some(format!("{:.*e}", digits - 1, x));
        }
    }
}

fn show(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "NULL".into(),
    }
}

/// Replays the lake's rows by `_seq` and checks on the way that every
/// update's `_before` and every delete's row equal the row the replay holds
/// for that key: before images are decoded as exactly as after images.
fn replay_checked(
    rows: &[Row],
    columns: &[Column],
    seed: u64,
    table: &str,
    problems: &mut Vec<String>,
) -> BTreeMap<String, Vec<Option<String>>> {
    let mut state: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let key = |v: &[Option<String>]| v[0].clone().unwrap_or_default();
    let mut compare = |what: &str,
                       seq: i64,
                       held: Option<&Vec<Option<String>>>,
                       logged: &[Option<String>]| {
        match held {
            None => problems.push(format!(
                "seed {seed} table {table} key {}: {what} at _seq {seq} of a key the replay does not hold",
                key(logged)
            )),
            Some(held) => {
                for (i, (h, l)) in held.iter().zip(logged).enumerate() {
                    if h != l {
                        let col = if i == 0 { "id" } else { &columns[i - 1].name };
                        problems.push(format!(
                            "seed {seed} table {table} key {} column {col}: {what} at _seq {seq} \
                             has {} where the replay holds {}",
                            key(logged),
                            show(l),
                            show(h)
                        ));
                    }
                }
            }
        }
    };
    for r in rows {
        let mut values = r.values.clone();
        normalize(&mut values, columns);
        match r.op.as_str() {
            "insert" | "snapshot" => {
                state.insert(key(&values), values);
            }
            "update" => {
                let mut before = r.before.clone().expect("an update has a _before");
                normalize(&mut before, columns);
                compare(
                    "_before of an update",
                    r.seq,
                    state.get(&key(&before)),
                    &before,
                );
                state.remove(&key(&before));
                state.insert(key(&values), values);
            }
            "delete" => {
                compare("a delete", r.seq, state.get(&key(&values)), &values);
                state.remove(&key(&values));
            }
            "truncate" => state.clear(),
            other => panic!("unknown _op {other:?}"),
        }
    }
    state
}

/// The lake's type of a family (DESIGN.md "Types": Delta Lake types).
fn lake_type(family: &Family) -> DataType {
    match family {
        Family::Int {
            bits: 64,
            unsigned: true,
            ..
        }
        | Family::Bit { n: 64 } => DataType::Decimal128(20, 0),
        Family::Int { .. } | Family::Bit { .. } | Family::Time { .. } => DataType::Int64,
        Family::Decimal {
            precision, scale, ..
        } if *precision <= 38 => DataType::Decimal128(*precision as u8, *scale as i8),
        Family::Decimal { .. }
        | Family::Enum { .. }
        | Family::Text { .. }
        | Family::Json
        | Family::Inet4
        | Family::Inet6
        | Family::Uuid => DataType::Utf8,
        Family::Float => DataType::Float32,
        Family::Double => DataType::Float64,
        Family::Date => DataType::Date32,
        Family::DateTime { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
        Family::Timestamp { .. } => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Family::Year => DataType::Int16,
        Family::Set { .. } => DataType::List(std::sync::Arc::new(Field::new(
            "item",
            DataType::Utf8,
            true,
        ))),
        Family::Binary { .. } | Family::VarBinary { .. } | Family::Geometry { .. } => {
            DataType::Binary
        }
    }
}

fn compare_table(
    db: &MariaDb,
    lake: &Lake,
    t: &Table,
    seed: u64,
    problems: &mut Vec<String>,
) -> usize {
    let mut select = vec!["id".to_string()];
    select.extend(t.columns.iter().map(|c| c.select.clone()));
    let mut source: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for mut row in db.query_rows(&format!(
        "SELECT {} FROM shop.{} ORDER BY id",
        select.join(", "),
        t.name
    )) {
        normalize(&mut row, &t.columns);
        source.insert(row[0].clone().unwrap_or_default(), row);
    }
    let table = format!("shop.{}", t.name);
    let rows = if lake.tables().contains(&table) {
        lake.rows(&table)
    } else {
        Vec::new()
    };
    if !rows.is_empty() {
        let schema = lake.schema(&table);
        for c in &t.columns {
            let got = logical_type(schema.field_with_name(&c.name).unwrap().data_type());
            let want = lake_type(&c.family);
            if got != want {
                problems.push(format!(
                    "seed {seed} table {table} column {} ({}): lake type {got}, want {want}",
                    c.name, c.ddl
                ));
            }
        }
    }
    let replayed = replay_checked(&rows, &t.columns, seed, &table, problems);
    for (key, want) in &source {
        let Some(got) = replayed.get(key) else {
            problems.push(format!(
                "seed {seed} table {table} key {key}: missing in the lake"
            ));
            continue;
        };
        for (i, (w, g)) in want.iter().zip(got).enumerate() {
            if w != g {
                let (col, ddl) = if i == 0 {
                    ("id", "INT")
                } else {
                    (
                        t.columns[i - 1].name.as_str(),
                        t.columns[i - 1].ddl.as_str(),
                    )
                };
                problems.push(format!(
                    "seed {seed} table {table} key {key} column {col} ({ddl}): source {} lake {}",
                    show(w),
                    show(g)
                ));
            }
        }
    }
    for key in replayed.keys().filter(|k| !source.contains_key(*k)) {
        problems.push(format!(
            "seed {seed} table {table} key {key}: in the lake, not in the source"
        ));
    }
    source.len()
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

#[test]
fn random_workload_replays_to_what_select_returns() {
    let seed = seed();
    let wanted = rows_wanted();
    eprintln!("differential: seed {seed} (SLUICE_FUZZ_SEED={seed} repeats it), {wanted} rows (SLUICE_FUZZ_ROWS)");
    let mut rng = StdRng::seed_from_u64(seed);
    // FULL row metadata carries ENUM/SET labels that information_schema
    // cannot show (emoji); half the runs use it, the other half the default.
    let full_metadata = external_server().is_none() && rng.gen_bool(0.5);
    let db = if full_metadata {
        MariaDb::start_with(&["--binlog-row-metadata=FULL"])
    } else {
        MariaDb::start()
    };
    let available: Vec<String> = db
        .query_rows("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS")
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
    let charsets: Vec<&'static str> = CHARSETS
        .iter()
        .copied()
        .filter(|c| available.iter().any(|a| a == c))
        .collect();
    // MariaDB's INET4, INET6 and UUID where the server has them.
    let families = match db.query_value(
        "SELECT COUNT(*) FROM information_schema.PLUGINS \
         WHERE PLUGIN_TYPE = 'DATA TYPE' AND PLUGIN_NAME IN ('inet4', 'inet6', 'uuid')",
    ) {
        Some(n) if n == "3" => FAMILY_KINDS_WITH_ADDRESSES,
        _ => FAMILY_KINDS,
    };
    let tables = random_tables(&mut rng, 3, full_metadata, &charsets, families);
    let mut ddl = String::from("CREATE DATABASE shop;\n");
    for t in &tables {
        ddl.push_str(&create_sql(t));
    }
    db.sql(&ddl);
    eprintln!("differential: FULL metadata {full_metadata}; tables:\n{ddl}");

    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());

    let mut w = Workload {
        rng,
        tables,
        next_id: 0,
        copies: 0,
        rows: 0,
        sql: String::new(),
    };
    let mut statements = 0;
    while w.rows < wanted {
        w.sql.clear();
        w.sql
            .push_str("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION';\n");
        for _ in 0..20 {
            w.unit();
        }
        statements += w.sql.lines().count() - 1;
        db.sql(&w.sql);
    }
    eprintln!(
        "differential: {statements} statements, about {} rows written",
        w.rows
    );

    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let mut problems = Vec::new();
    let mut source_rows = 0;
    for t in &w.tables {
        source_rows += compare_table(&db, &lake, t, seed, &mut problems);
    }
    let lake_rows: u64 = w
        .tables
        .iter()
        .map(|t| lake.row_count(&format!("shop.{}", t.name)))
        .sum();
    eprintln!(
        "differential: {source_rows} rows in the source, {lake_rows} change rows in the lake"
    );
    assert!(
        source_rows > 0,
        "seed {seed}: the workload left no rows to compare"
    );
    if !problems.is_empty() {
        let n = problems.len();
        problems.truncate(60);
        panic!(
            "seed {seed}: the lake differs from the source in {n} values (SLUICE_FUZZ_SEED={seed} repeats it):\n{}",
            problems.join("\n")
        );
    }
}

/// Issue 10: ENUM/SET labels outside the Basic Multilingual Plane came out
/// as `?`, because MariaDB's information_schema (and SHOW CREATE TABLE)
/// cannot show them. With FULL row metadata the TABLE_MAP's labels are used;
/// without it sluice warns, naming the columns and the fix.
#[test]
fn enum_and_set_labels_outside_the_bmp_reach_the_lake() {
    const CREATE: &str = "CREATE DATABASE shop;
        CREATE TABLE shop.party (id INT PRIMARY KEY,
          e ENUM('a','🎉','ü','😀 ok') CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
          s SET('x','🇩🇪','é') CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
          l ENUM('plain','ça') CHARACTER SET latin1);";
    const ROWS: &str = "INSERT INTO shop.party VALUES
          (1, '🎉', '🇩🇪,é', 'ça'), (2, '😀 ok', 'x,🇩🇪', 'plain'), (3, 'a', '', NULL), (4, 'ü', 'é', 'ça');
        UPDATE shop.party SET e = '🎉', s = 'x,🇩🇪,é' WHERE id = 4;
        DELETE FROM shop.party WHERE id = 3;";
    let Some(db) = MariaDb::start_private(&["--binlog-row-metadata=FULL"]) else {
        return;
    };
    db.sql(CREATE);
    // The table exists before sluice starts: its shape comes from information_schema.
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    db.sql(ROWS);
    let expected = db.table_map("SELECT id, e, s, l FROM shop.party", &[0]);
    assert_eq!(expected[&vec!["4".to_string()]][1].as_deref(), Some("🎉"));
    sluice.run_until_caught_up_ok();
    let lake = Lake::read(lake_dir.path());
    let rows = lake.rows("shop.party");
    assert_same_table("shop.party", &expected, &replay(&rows, &[0]));
    let update = rows
        .iter()
        .find(|r| r.op == "update")
        .expect("an update row");
    assert_eq!(
        update.before.as_ref().unwrap()[1..3].to_vec(),
        vec![Some("ü".to_string()), Some("é".to_string())]
    );
    let deleted = rows
        .iter()
        .find(|r| r.op == "delete")
        .expect("a delete row");
    assert_eq!(deleted.values[1].as_deref(), Some("a"));
}

#[test]
fn labels_information_schema_cannot_show_are_reported_without_full_metadata() {
    // A server of our own: an external one may log FULL metadata.
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql("CREATE DATABASE shop; CREATE TABLE shop.party (id INT PRIMARY KEY, e ENUM('a','🎉') CHARACTER SET utf8mb4);");
    let lake_dir = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let sluice = Sluice::new(&db, lake_dir.path(), state_dir.path());
    db.sql("INSERT INTO shop.party VALUES (1, 'a');");
    let out = sluice.run_until_caught_up_ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warning = stderr
        .lines()
        .find(|l| l.contains("ENUM/SET labels with `?`"))
        .unwrap_or_else(|| {
            panic!(
                "no warning about lost labels; stderr:\n{}",
                tail(&stderr, 20)
            )
        });
    assert!(
        warning.contains("shop.party.e") && warning.contains("binlog_row_metadata=FULL"),
        "{warning}"
    );
}
