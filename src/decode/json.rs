//! MySQL's binary JSON (`MYSQL_TYPE_JSON` cells, and the values inside
//! partial JSON updates) to the JSON text MySQL itself prints for the value
//! (`SELECT col`, `JSON_EXTRACT`). MariaDB stores JSON as LONGTEXT and never
//! sends this format.
//!
//! The binary layout is MySQL's `sql-common/json_binary.h`
//! (<https://dev.mysql.com/doc/dev/mysql-server/latest/json__binary_8h.html>);
//! mysql_common's [`jsonb::Value`] reads it. The text follows
//! `wrapper_to_string` in MySQL's `sql-common/json_dom.cc`. We walk the value
//! ourselves instead of using mysql_common's `Value::parse` → serde_json,
//! which differs from MySQL in ways a reader would see: it orders object keys
//! alphabetically (MySQL: shorter keys first, then bytewise), quotes
//! DECIMALs, formats doubles its own way (`1e-7` where MySQL prints
//! `0.0000001`), turns NaN into 0, drops the line breaks MySQL puts into
//! base64 opaque values, prints opaque strings as base64 and uses no spaces
//! after `,` and `:`.
//!
//! Partial updates (`binlog_row_value_options=PARTIAL_JSON`) carry a list of
//! diffs instead of the new document; [`apply_json_diffs`] applies them to the
//! before image the way the replica applier does (`apply_json_diff` in
//! `sql-common/json_diff.cc`) and prints the result.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::io;

use mysql_common::binlog::jsonb::{self, ObjectKey};
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;

use super::values::decimal_text;
use crate::types::codec::decimal_size;
use crate::types::metadata::packed_int;

/// MySQL refuses documents nested deeper than this (`JSON_DOCUMENT_MAX_DEPTH`);
/// the limit also keeps a corrupt value from recursing without bound.
const MAX_DEPTH: usize = 100;

/// The JSON text of one binary JSON document.
pub fn binary_json_to_text(bytes: &[u8]) -> Result<String, String> {
    let mut out = String::new();
    write_binary_json(bytes, &mut out)?;
    Ok(out)
}

/// Appends the JSON text of one binary JSON document to `out` (the rows
/// decoder reuses one buffer for every cell of an event).
pub fn write_binary_json(bytes: &[u8], out: &mut String) -> Result<(), String> {
    write_value(&parse_binary(bytes)?, out, 0)
}

fn parse_binary(bytes: &[u8]) -> Result<jsonb::Value<'_>, String> {
    if bytes.is_empty() {
        // An empty payload is how MySQL logs a JSON null literal in some versions.
        return Ok(jsonb::Value::Null);
    }
    ParseBuf(bytes)
        .parse(())
        .map_err(|e| format!("bad binary JSON: {e}"))
}

fn bad(e: io::Error) -> String {
    format!("bad binary JSON: {e}")
}

fn nest(depth: usize) -> Result<usize, String> {
    if depth >= MAX_DEPTH {
        return Err(format!("binary JSON nested deeper than {MAX_DEPTH} levels"));
    }
    Ok(depth + 1)
}

fn write_value(value: &jsonb::Value<'_>, out: &mut String, depth: usize) -> Result<(), String> {
    use jsonb::Value as V;
    match value {
        V::SmallArray(a) => write_array(a.iter(), out, depth),
        V::LargeArray(a) => write_array(a.iter(), out, depth),
        V::SmallObject(o) => write_object(o.iter(), out, depth),
        V::LargeObject(o) => write_object(o.iter(), out, depth),
        scalar => write_scalar(scalar, out),
    }
}

fn write_array<'a>(
    items: impl Iterator<Item = io::Result<jsonb::Value<'a>>>,
    out: &mut String,
    depth: usize,
) -> Result<(), String> {
    let depth = nest(depth)?;
    out.push('[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(&item.map_err(bad)?, out, depth)?;
    }
    out.push(']');
    Ok(())
}

fn write_object<'a>(
    members: impl Iterator<Item = io::Result<(ObjectKey<'a>, jsonb::Value<'a>)>>,
    out: &mut String,
    depth: usize,
) -> Result<(), String> {
    let depth = nest(depth)?;
    out.push('{');
    for (i, member) in members.enumerate() {
        let (key, value) = member.map_err(bad)?;
        if i > 0 {
            out.push_str(", ");
        }
        write_quoted(utf8(key.value_raw(), "object key")?, out);
        out.push_str(": ");
        write_value(&value, out, depth)?;
    }
    out.push('}');
    Ok(())
}

fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("binary JSON {what} is not UTF-8: {e}"))
}

fn write_scalar(value: &jsonb::Value<'_>, out: &mut String) -> Result<(), String> {
    use jsonb::Value as V;
    // Writing into a String cannot fail.
    let _ = match value {
        V::Null => write!(out, "null"),
        V::Bool(b) => write!(out, "{b}"),
        V::I16(x) => write!(out, "{x}"),
        V::U16(x) => write!(out, "{x}"),
        V::I32(x) => write!(out, "{x}"),
        V::U32(x) => write!(out, "{x}"),
        V::I64(x) => write!(out, "{x}"),
        V::U64(x) => write!(out, "{x}"),
        V::F64(x) => {
            write_double(*x, out);
            Ok(())
        }
        V::String(s) => {
            write_quoted(utf8(s.str_raw(), "string")?, out);
            Ok(())
        }
        V::Opaque(o) => return write_opaque(o.value_type(), o.data_raw(), out),
        V::SmallArray(_) | V::LargeArray(_) | V::SmallObject(_) | V::LargeObject(_) => {
            return Err("binary JSON container where a scalar was expected".into())
        }
    };
    Ok(())
}

/// A JSON string as MySQL's `double_quote()` writes it: `"` and `\` and the
/// control characters escaped, everything else (multi-byte UTF-8, `/`, DEL)
/// as is.
fn write_quoted(s: &str, out: &mut String) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0A => "\\n",
            0x0C => "\\f",
            0x0D => "\\r",
            0x00..=0x1F => "",
            _ => continue,
        };
        // Only ASCII bytes are escaped, so `i` is a character boundary.
        out.push_str(&s[plain..i]);
        if short.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(short);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// A double as MySQL prints it in JSON: `my_gcvt(d, MY_GCVT_ARG_DOUBLE, 34)`
/// (the shortest digits that read back as the same double, in `%g`-like
/// fixed or exponent form), plus `.0` when that shows neither a point nor an
/// exponent, so that `1.0` stays distinguishable from the integer `1`.
///
/// With MySQL's field width of 34 characters no digit is ever cut, and the
/// fixed form is chosen exactly when the decimal exponent `decpt` (the value
/// is `0.DIGITS × 10^decpt`) satisfies `decpt >= -14` and either
/// `decpt <= 15` or the digits reach past the point (`MAX_DECPT_FOR_F_FORMAT`
/// in `m_string.h`): `1e15` and `1e-16` are printed in exponent form,
/// `100000000000000.0` and `0.000000000000001` in fixed form. Exponents have
/// no `+` and no zero padding (`1e300`, `1.5e-20`).
fn write_double(x: f64, out: &mut String) {
    if !x.is_finite() {
        // Binary JSON cannot hold these (MySQL rejects them); print what
        // my_gcvt() prints on overflow rather than invalid JSON.
        out.push_str("0.0");
        return;
    }
    // Rust's `{:e}` is the shortest representation that round-trips, as
    // dtoa's mode 0 (which my_gcvt uses via mode 4 with 34 digits) is.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let len = digits.len() as i32;
    let decpt = exp + 1;
    let start = out.len();
    if x.is_sign_negative() {
        out.push('-');
    }
    if decpt >= -14 && (decpt <= 15 || len > decpt) {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in decpt..0 {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt < len {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        } else {
            out.push_str(&digits);
            for _ in len..decpt {
                out.push('0');
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if len > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}", decpt - 1);
    }
    if !out[start..].contains(['.', 'e']) {
        out.push_str(".0");
    }
}

/// Opaque values: a MySQL field type and its bytes. Temporal values are
/// 8-byte packed integers (`TIME_to_longlong_*_packed`), DECIMAL is
/// precision, scale and the binary decimal (`Json_decimal::get_binary`).
fn write_opaque(field_type: ColumnType, data: &[u8], out: &mut String) -> Result<(), String> {
    use ColumnType as T;
    match field_type {
        T::MYSQL_TYPE_NEWDECIMAL => {
            let (precision, scale) = match data {
                [p, s, ..] => (*p, *s),
                _ => return Err("binary JSON DECIMAL without precision and scale".into()),
            };
            if precision == 0 || precision > 65 || scale > 30 || scale > precision {
                return Err(format!(
                    "binary JSON DECIMAL with precision {precision} and scale {scale}"
                ));
            }
            let size = decimal_size(precision, scale);
            let bin = data.get(2..2 + size).ok_or_else(|| {
                format!("binary JSON DECIMAL({precision},{scale}) shorter than {size} bytes")
            })?;
            decimal_text(bin, precision, scale, out).map_err(|e| format!("binary JSON {e}"))?;
        }
        T::MYSQL_TYPE_DATETIME | T::MYSQL_TYPE_TIMESTAMP | T::MYSQL_TYPE_DATE => {
            let t = PackedTime::datetime(packed_temporal(data)?);
            let _ = write!(
                out,
                "\"{}{:04}-{:02}-{:02}",
                t.sign(),
                t.year,
                t.month,
                t.day
            );
            if field_type != T::MYSQL_TYPE_DATE {
                let _ = write!(
                    out,
                    " {:02}:{:02}:{:02}.{:06}",
                    t.hour, t.minute, t.second, t.micros
                );
            }
            out.push('"');
        }
        T::MYSQL_TYPE_TIME => {
            let t = PackedTime::time(packed_temporal(data)?);
            let _ = write!(
                out,
                "\"{}{:02}:{:02}:{:02}.{:06}\"",
                t.sign(),
                t.hour,
                t.minute,
                t.second,
                t.micros
            );
        }
        // Strings MySQL stored as opaque (from sub-selects) print as strings.
        T::MYSQL_TYPE_VAR_STRING => write_quoted(utf8(data, "opaque string")?, out),
        other => {
            let mut text = format!("base64:type{}:", other as u8);
            push_base64(data, &mut text);
            write_quoted(&text, out);
        }
    }
    Ok(())
}

fn packed_temporal(data: &[u8]) -> Result<i64, String> {
    let bytes: [u8; 8] = data
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("binary JSON temporal value of {} bytes", data.len()))?;
    Ok(i64::from_le_bytes(bytes))
}

/// A temporal value unpacked from MySQL's packed 64-bit form: the integer
/// part above bit 24, microseconds below, negated for negative values.
struct PackedTime {
    negative: bool,
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    micros: i64,
}

impl PackedTime {
    /// `TIME_from_longlong_datetime_packed`: ((year·13+month)<<5 | day) << 17 | hh<<12 | mm<<6 | ss.
    fn datetime(packed: i64) -> Self {
        let negative = packed < 0;
        let v = packed.unsigned_abs() as i64;
        let ymdhms = v >> 24;
        let ymd = ymdhms >> 17;
        let ym = ymd >> 5;
        let hms = ymdhms % (1 << 17);
        PackedTime {
            negative,
            year: ym / 13,
            month: ym % 13,
            day: ymd % (1 << 5),
            hour: hms >> 12,
            minute: (hms >> 6) % (1 << 6),
            second: hms % (1 << 6),
            micros: v % (1 << 24),
        }
    }

    /// `TIME_from_longlong_time_packed`: hours (10 bits) << 12 | mm<<6 | ss.
    fn time(packed: i64) -> Self {
        let negative = packed < 0;
        let v = packed.unsigned_abs() as i64;
        let hms = v >> 24;
        PackedTime {
            negative,
            year: 0,
            month: 0,
            day: 0,
            hour: (hms >> 12) % (1 << 10),
            minute: (hms >> 6) % (1 << 6),
            second: hms % (1 << 6),
            micros: v % (1 << 24),
        }
    }

    fn sign(&self) -> &'static str {
        if self.negative {
            "-"
        } else {
            ""
        }
    }
}

/// Standard base64 with `=` padding and a line break after every 76
/// characters, as MySQL's `base64_encode()` writes it.
fn push_base64(data: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (n, chunk) in data.chunks(3).enumerate() {
        // 19 groups of 4 characters make a 76-character line.
        if n > 0 && n % 19 == 0 {
            out.push('\n');
        }
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let v = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
        out.push(ALPHABET[v >> 18] as char);
        out.push(ALPHABET[(v >> 12) & 63] as char);
        out.push(if chunk.len() > 1 {
            ALPHABET[(v >> 6) & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            ALPHABET[v & 63] as char
        } else {
            '='
        });
    }
}

/// A JSON document in memory, only for applying partial updates. Scalars
/// hold the text MySQL prints for them; objects keep MySQL's key order.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Scalar(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

fn to_node(value: &jsonb::Value<'_>, depth: usize) -> Result<Node, String> {
    use jsonb::Value as V;
    fn array<'a>(
        items: impl Iterator<Item = io::Result<jsonb::Value<'a>>>,
        depth: usize,
    ) -> Result<Node, String> {
        let depth = nest(depth)?;
        let nodes = items
            .map(|item| to_node(&item.map_err(bad)?, depth))
            .collect::<Result<_, _>>()?;
        Ok(Node::Array(nodes))
    }
    fn object<'a>(
        members: impl Iterator<Item = io::Result<(ObjectKey<'a>, jsonb::Value<'a>)>>,
        depth: usize,
    ) -> Result<Node, String> {
        let depth = nest(depth)?;
        let mut nodes = Vec::new();
        for member in members {
            let (key, value) = member.map_err(bad)?;
            let key = utf8(key.value_raw(), "object key")?.to_string();
            nodes.push((key, to_node(&value, depth)?));
        }
        Ok(Node::Object(nodes))
    }
    match value {
        V::SmallArray(a) => array(a.iter(), depth),
        V::LargeArray(a) => array(a.iter(), depth),
        V::SmallObject(o) => object(o.iter(), depth),
        V::LargeObject(o) => object(o.iter(), depth),
        scalar => {
            let mut text = String::new();
            write_scalar(scalar, &mut text)?;
            Ok(Node::Scalar(text))
        }
    }
}

fn write_node(node: &Node, out: &mut String) {
    match node {
        Node::Scalar(text) => out.push_str(text),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_node(item, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            out.push('{');
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_quoted(key, out);
                out.push_str(": ");
                write_node(value, out);
            }
            out.push('}');
        }
    }
}

/// MySQL orders object members by key length, then bytewise
/// (`Json_key_comparator`); binary objects are stored in that order and
/// printed in it.
fn key_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// One leg of a JSON diff path (`$.a."b c"[3][last-1]`).
#[derive(Debug, Clone, PartialEq)]
enum Leg {
    Member(String),
    /// `[n]`, or `[last-n]` when `from_end`.
    Cell {
        index: u64,
        from_end: bool,
    },
}

impl Leg {
    /// Where the leg points in an array of `len` elements, and whether that
    /// is an existing element (`Json_array_index`): positions past the end
    /// clamp to the end, `last-n` before the start clamps to 0.
    fn position(index: u64, from_end: bool, len: usize) -> (usize, bool) {
        let within = index < len as u64;
        let pos = match (from_end, within) {
            (true, true) => len - 1 - index as usize,
            (true, false) => 0,
            (false, true) => index as usize,
            (false, false) => len,
        };
        (pos, within)
    }
}

/// Parses the path of a JSON diff as `Json_path::to_string()` writes it:
/// `$`, then `.name` (bare when an ECMAScript identifier, otherwise a quoted
/// JSON string) or `[n]` / `[last]` / `[last-n]`. Wildcards and ranges never
/// occur in diffs and are refused.
fn parse_path(path: &str) -> Result<Vec<Leg>, String> {
    let bad_path = |why: &str| format!("JSON diff path `{path}`: {why}");
    let s = path.trim_start();
    let mut rest = s
        .strip_prefix('$')
        .ok_or_else(|| bad_path("does not start with $"))?;
    let mut legs = Vec::new();
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return Ok(legs);
        };
        match c {
            '.' => {
                rest = rest[1..].trim_start();
                if rest.starts_with('"') {
                    // Find the closing quote, skipping escaped characters.
                    let bytes = rest.as_bytes();
                    let mut i = 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    if i >= bytes.len() {
                        return Err(bad_path("unterminated quoted member name"));
                    }
                    let name: String = serde_json::from_str(&rest[..=i])
                        .map_err(|e| bad_path(&format!("bad quoted member name: {e}")))?;
                    legs.push(Leg::Member(name));
                    rest = &rest[i + 1..];
                } else {
                    let end = rest
                        .find(|c: char| c == '.' || c == '[' || c.is_whitespace())
                        .unwrap_or(rest.len());
                    let name = &rest[..end];
                    if name.is_empty() || name.contains(['*', '"']) {
                        return Err(bad_path("not a plain member name"));
                    }
                    legs.push(Leg::Member(name.to_string()));
                    rest = &rest[end..];
                }
            }
            '[' => {
                let close = rest
                    .find(']')
                    .ok_or_else(|| bad_path("unterminated array cell"))?;
                let inner = rest[1..close].trim();
                let (from_end, number) = match inner.strip_prefix("last") {
                    Some(tail) => {
                        let tail = tail.trim_start();
                        match tail.strip_prefix('-') {
                            Some(n) => (true, n.trim_start()),
                            None if tail.is_empty() => (true, "0"),
                            None => return Err(bad_path("bad `last` index")),
                        }
                    }
                    None => (false, inner),
                };
                let index = number
                    .parse::<u64>()
                    .map_err(|_| bad_path("not a single array cell"))?;
                legs.push(Leg::Cell { index, from_end });
                rest = &rest[close + 1..];
            }
            _ => return Err(bad_path("unexpected character")),
        }
    }
}

/// The node a path leads to, without auto-wrapping scalars
/// (`seek_exact_path`).
fn seek_mut<'a>(mut node: &'a mut Node, path: &[Leg]) -> Option<&'a mut Node> {
    for leg in path {
        node = match (node, leg) {
            (Node::Array(items), Leg::Cell { index, from_end }) => {
                let (pos, within) = Leg::position(*index, *from_end, items.len());
                if !within {
                    return None;
                }
                &mut items[pos]
            }
            (Node::Object(members), Leg::Member(key)) => {
                &mut members.iter_mut().find(|(k, _)| k == key)?.1
            }
            _ => return None,
        };
    }
    Some(node)
}

/// JSON diff operations (`enum_json_diff_operation`).
const REPLACE: u8 = 0;
const INSERT: u8 = 1;
const REMOVE: u8 = 2;

/// Applies one diff the way MySQL's replica applies it; a diff MySQL would
/// reject (missing target, existing key on insert) is an error, as it stops
/// a MySQL replica.
fn apply(doc: &mut Node, op: u8, path: &[Leg], value: Option<Node>) -> Result<(), String> {
    let value = || value.ok_or_else(|| "no value".to_string());
    match op {
        REPLACE => {
            let target = seek_mut(doc, path).ok_or("the path does not exist")?;
            *target = value()?;
        }
        INSERT | REMOVE => {
            let (last, parent_path) = path.split_last().ok_or("the path is `$`")?;
            let parent = seek_mut(doc, parent_path).ok_or("the parent does not exist")?;
            match (parent, last, op) {
                (Node::Object(members), Leg::Member(key), INSERT) => {
                    if members.iter().any(|(k, _)| k == key) {
                        return Err("the member exists already".into());
                    }
                    let at = members.partition_point(|(k, _)| key_order(k, key) == Ordering::Less);
                    members.insert(at, (key.clone(), value()?));
                }
                (Node::Array(items), Leg::Cell { index, from_end }, INSERT) => {
                    let (pos, _) = Leg::position(*index, *from_end, items.len());
                    items.insert(pos, value()?);
                }
                (Node::Object(members), Leg::Member(key), REMOVE) => {
                    let at = members
                        .iter()
                        .position(|(k, _)| k == key)
                        .ok_or("the member does not exist")?;
                    members.remove(at);
                }
                (Node::Array(items), Leg::Cell { index, from_end }, REMOVE) => {
                    let (pos, within) = Leg::position(*index, *from_end, items.len());
                    if !within {
                        return Err("the array cell does not exist".into());
                    }
                    items.remove(pos);
                }
                _ => return Err("the leg does not fit the value it points into".into()),
            }
        }
        _ => return Err(format!("unknown operation {op}")),
    }
    Ok(())
}

fn packed_length(r: &mut &[u8]) -> Result<usize, String> {
    packed_int(r)
        .map(|n| n as usize)
        .ok_or_else(|| "JSON diff truncated or with a bad length".to_string())
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if r.len() < n {
        return Err("JSON diff truncated".into());
    }
    let (head, tail) = r.split_at(n);
    *r = tail;
    Ok(head)
}

/// Applies the diffs of a partial JSON update to the before image and
/// appends the resulting document's text to `out`: exactly the text the full
/// after image would have produced.
///
/// `diffs` is a `Json_diff_vector` without its 4-byte length: a sequence of
/// operation (1 byte: 0 replace, 1 insert, 2 remove), path (packed length
/// and text), and for replace and insert the new value (packed length and
/// binary JSON) (`Json_diff::write_binary` in `sql-common/json_diff.cc`).
pub fn apply_json_diffs(before: &[u8], diffs: &[u8], out: &mut String) -> Result<(), String> {
    let mut doc = to_node(&parse_binary(before)?, 0)?;
    let mut r = diffs;
    while !r.is_empty() {
        let op = take(&mut r, 1)?[0];
        if op > REMOVE {
            // The rest of the vector cannot be read without knowing the operation.
            return Err(format!("JSON diff with unknown operation {op}"));
        }
        let len = packed_length(&mut r)?;
        let path = utf8(take(&mut r, len)?, "diff path")?;
        let legs = parse_path(path)?;
        let value = if op == REMOVE {
            None
        } else {
            let len = packed_length(&mut r)?;
            Some(to_node(&parse_binary(take(&mut r, len)?)?, 0)?)
        };
        let name = ["REPLACE", "INSERT", "REMOVE"][op as usize];
        apply(&mut doc, op, &legs, value)
            .map_err(|e| format!("JSON diff {name} at `{path}` cannot be applied: {e}"))?;
    }
    write_node(&doc, out);
    Ok(())
}

#[cfg(test)]
mod tests;
