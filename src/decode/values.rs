//! Decoders of single binlog cell values into plain Rust numbers. Pure
//! functions on byte slices; the rows decoder calls them and appends the
//! results to Arrow builders. Formats:
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>
//! and `sql/log_event.cc` / `strings/decimal.c` of MySQL and MariaDB.

const MICROS_PER_SEC: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SEC;

#[inline]
pub fn be_uint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

#[inline]
pub fn le_uint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

/// A MySQL packed integer (`net_field_length`) at the front of `r`, which
/// is advanced past it: one byte below 251, else 252, 253 or 254 followed by
/// 2, 3 or 8 little-endian bytes. `None` when truncated or on the NULL
/// marker 251 (never valid where this is used).
pub fn packed_int(r: &mut &[u8]) -> Option<u64> {
    let (&first, tail) = r.split_first()?;
    let width = match first {
        0..=250 => {
            *r = tail;
            return Some(first as u64);
        }
        252 => 2,
        253 => 3,
        254 => 8,
        _ => return None,
    };
    let v = le_uint(tail.get(..width)?);
    *r = &tail[width..];
    Some(v)
}

/// The ENUM or SET labels of TABLE_MAP's optional metadata (the raw bytes of
/// an ENUM_STR_VALUE or SET_STR_VALUE field): per column a packed count,
/// then that many packed-length strings. Read here rather than through
/// mysql_common, which reserves memory for the count before it checks it
/// against the bytes (a corrupt count panics or aborts).
pub fn enum_set_labels(mut raw: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut columns = Vec::new();
    while !raw.is_empty() {
        let count = packed_int(&mut raw).ok_or("ENUM/SET labels: count cut short")?;
        // Each label takes at least its one length byte.
        if count > raw.len() as u64 {
            return Err(format!(
                "ENUM/SET labels: {count} labels in {} bytes",
                raw.len()
            ));
        }
        let mut labels = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = packed_int(&mut raw).ok_or("ENUM/SET labels: length cut short")?;
            let label = raw
                .get(..usize::try_from(len).map_err(|_| "ENUM/SET labels: label too long")?)
                .ok_or("ENUM/SET labels: label cut short")?;
            labels.push(label.to_vec());
            raw = &raw[label.len()..];
        }
        columns.push(labels);
    }
    Ok(columns)
}

/// MariaDB's fixed-size INET4, INET6 and UUID types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    Inet4,
    Inet6,
    Uuid,
}

/// A value's text, kept on the stack: the rows decoder prints addresses
/// without a heap allocation per cell.
pub struct AddressText {
    buf: [u8; 48],
    len: usize,
}

impl Default for AddressText {
    fn default() -> Self {
        AddressText {
            buf: [0; 48],
            len: 0,
        }
    }
}

impl AddressText {
    fn as_str(&self) -> &str {
        // Only ASCII is ever written.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for AddressText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl Address {
    /// The bytes the server stores: 4 for INET4, 16 for INET6 and UUID.
    pub fn width(self) -> usize {
        match self {
            Address::Inet4 => 4,
            Address::Inet6 | Address::Uuid => 16,
        }
    }

    /// The text SELECT prints for a value whose trailing zero bytes the
    /// binlog stripped (it logs these types as BINARY): dotted quad;
    /// INET6 as MariaDB's `Inet6::to_string` (MySQL's `INET6_NTOA`):
    /// `::a.b.c.d` / `::ffff:a.b.c.d` for IPv4-compatible and -mapped
    /// addresses, else lower-case groups with the longest run of zero
    /// groups (the first of equals, even a single one) as `::`; UUID as
    /// lower-case `8-4-4-4-12` in the order the bytes come (MariaDB 10.11
    /// logs a UUID's bytes in its text order, time-based or not).
    pub fn text<'o>(self, bytes: &[u8], out: &'o mut AddressText) -> Result<&'o str, String> {
        use std::fmt::Write as _;
        let width = self.width();
        if bytes.len() > width {
            return Err(format!(
                "{} bytes for a {self:?} value of {width}",
                bytes.len()
            ));
        }
        let mut v = [0u8; 16];
        v[..bytes.len()].copy_from_slice(bytes);
        out.len = 0;
        let ipv4 =
            |out: &mut AddressText, b: &[u8]| write!(out, "{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        let printed = match self {
            Address::Inet4 => ipv4(out, &v),
            Address::Uuid => v.iter().enumerate().try_for_each(|(i, b)| {
                if matches!(i, 4 | 6 | 8 | 10) {
                    out.write_char('-')?;
                }
                write!(out, "{b:02x}")
            }),
            Address::Inet6 => {
                let w: [u16; 8] =
                    std::array::from_fn(|i| u16::from_be_bytes([v[2 * i], v[2 * i + 1]]));
                if w[..6].iter().all(|x| *x == 0) && w[6] != 0 {
                    out.write_str("::").and_then(|_| ipv4(out, &v[12..]))
                } else if w[..5].iter().all(|x| *x == 0) && w[5] == 0xFFFF {
                    out.write_str("::ffff:").and_then(|_| ipv4(out, &v[12..]))
                } else {
                    let (mut gap, mut gap_len, mut run) = (8, 0, 0);
                    for (i, x) in w.iter().enumerate() {
                        run = if *x == 0 { run + 1 } else { 0 };
                        if run > gap_len {
                            (gap, gap_len) = (i + 1 - run, run);
                        }
                    }
                    let mut i = 0;
                    let mut result = Ok(());
                    while i < 8 && result.is_ok() {
                        if i == gap {
                            result = out.write_str(if i == 0 { "::" } else { ":" });
                            i += gap_len;
                            continue;
                        }
                        result = write!(out, "{:x}", w[i]);
                        if i < 7 && result.is_ok() {
                            result = out.write_char(':');
                        }
                        i += 1;
                    }
                    result
                }
            }
        };
        printed.map_err(|_| format!("{self:?} text too long"))?;
        Ok(out.as_str())
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Bytes that the fractional part of a temporal value with `fsp` digits takes.
#[inline]
pub fn frac_bytes(fsp: u8) -> usize {
    (fsp as usize).div_ceil(2)
}

/// Reads the fractional seconds stored after DATETIME2/TIMESTAMP2 as microseconds.
#[inline]
fn frac_micros(bytes: &[u8], fsp: u8) -> i64 {
    match frac_bytes(fsp) {
        0 => 0,
        1 => bytes[0] as i64 * 10_000,
        2 => be_uint(&bytes[..2]) as i64 * 100,
        _ => be_uint(&bytes[..3]) as i64,
    }
}

/// DATE (3 bytes little-endian: day 5 bits, month 4 bits, year 15 bits).
/// `None` for zero or partly-zero dates.
pub fn date(bytes: &[u8]) -> Option<i32> {
    let v = le_uint(&bytes[..3]) as i64;
    let (day, month, year) = (v & 31, (v >> 5) & 15, v >> 9);
    if day == 0 || month == 0 {
        return None;
    }
    Some(days_from_civil(year, month, day) as i32)
}

/// DATETIME2: 5 bytes big-endian plus fractional bytes. Microseconds since the
/// epoch as wall-clock time, `None` for zero dates.
pub fn datetime2(bytes: &[u8], fsp: u8) -> Option<i64> {
    let v = be_uint(&bytes[..5]) as i64 - 0x80_0000_0000;
    let ym = (v >> 22) & 0x1_FFFF;
    let (year, month) = (ym / 13, ym % 13);
    let day = (v >> 17) & 0x1F;
    let hms = ((v >> 12) & 0x1F) * 3600 + ((v >> 6) & 0x3F) * 60 + (v & 0x3F);
    if month == 0 || day == 0 {
        return None;
    }
    let frac = frac_micros(&bytes[5..], fsp);
    Some(days_from_civil(year, month, day) * MICROS_PER_DAY + hms * MICROS_PER_SEC + frac)
}

/// TIMESTAMP2: 4 bytes big-endian seconds plus fractional bytes. `None` for the
/// zero timestamp.
pub fn timestamp2(bytes: &[u8], fsp: u8) -> Option<i64> {
    let secs = be_uint(&bytes[..4]) as i64;
    let frac = frac_micros(&bytes[4..], fsp);
    if secs == 0 && frac == 0 {
        return None;
    }
    Some(secs * MICROS_PER_SEC + frac)
}

/// TIME2: 3 bytes big-endian offset by 0x800000 plus fractional bytes, whose
/// sign handling follows `TIME_from_longlong_time_packed` of MySQL.
pub fn time2(bytes: &[u8], fsp: u8) -> i64 {
    let packed: i64 = match frac_bytes(fsp) {
        0 => (be_uint(&bytes[..3]) as i64 - 0x80_0000) << 24,
        1 => {
            let mut int = be_uint(&bytes[..3]) as i64 - 0x80_0000;
            // Unsigned, as `my_time_packed_from_binary` reads it: the sign
            // correction below turns a negative value's byte into -1..-99.
            let mut frac = bytes[3] as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x100;
            }
            (int << 24) + frac * 10_000
        }
        2 => {
            let mut int = be_uint(&bytes[..3]) as i64 - 0x80_0000;
            let mut frac = be_uint(&bytes[3..5]) as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x10000;
            }
            (int << 24) + frac * 100
        }
        _ => be_uint(&bytes[..6]) as i64 - 0x8000_0000_0000,
    };
    let negative = packed < 0;
    let abs = packed.abs();
    let hms = abs >> 24;
    let frac = abs % (1 << 24);
    let secs = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 0x3F) * 60 + (hms & 0x3F);
    let micros = secs * MICROS_PER_SEC + frac;
    if negative {
        -micros
    } else {
        micros
    }
}

/// Old-format DATETIME (before MySQL 5.6): 8 bytes little-endian YYYYMMDDhhmmss.
pub fn datetime_v1(bytes: &[u8]) -> Option<i64> {
    let v = le_uint(&bytes[..8]) as i64;
    let (date, time) = (v / 1_000_000, v % 1_000_000);
    let (year, month, day) = (date / 10_000, (date / 100) % 100, date % 100);
    if month == 0 || day == 0 {
        return None;
    }
    let secs = (time / 10_000) * 3600 + ((time / 100) % 100) * 60 + time % 100;
    Some(days_from_civil(year, month, day) * MICROS_PER_DAY + secs * MICROS_PER_SEC)
}

/// Old-format TIME: 3 bytes little-endian signed HHMMSS.
pub fn time_v1(bytes: &[u8]) -> i64 {
    let raw = le_uint(&bytes[..3]) as i64;
    let v = if raw & 0x80_0000 != 0 {
        raw - 0x100_0000
    } else {
        raw
    };
    let a = v.abs();
    let secs = (a / 10_000) * 3600 + ((a / 100) % 100) * 60 + a % 100;
    secs * MICROS_PER_SEC * v.signum()
}

const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The largest precision and scale a DECIMAL may have (`DECIMAL_MAX_PRECISION`,
/// `DECIMAL_MAX_SCALE` of MySQL and MariaDB).
pub const DECIMAL_MAX_PRECISION: u8 = 65;
pub const DECIMAL_MAX_SCALE: u8 = 30;

/// Whether `(precision, scale)` is a DECIMAL the server can define: the
/// binary decoders below rely on it, so metadata read from the binlog is
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

/// Walks the digit groups of a binary DECIMAL, calling `push(group_value,
/// group_digits)` from the most significant group on. Returns whether the
/// value is negative. The format stores the sign in the top bit of the first
/// byte and all bytes inverted for negative numbers (`strings/decimal.c`).
/// `bytes` must hold [`decimal_size`] bytes of a valid shape; a group with
/// more digits than it may have (corrupt bytes) is an error.
#[inline]
fn decimal_groups(
    bytes: &[u8],
    precision: u8,
    scale: u8,
    mut push: impl FnMut(u64, usize),
) -> Result<bool, String> {
    let size = decimal_size(precision, scale);
    if !decimal_shape_is_valid(precision, scale) || bytes.len() < size {
        return Err(format!(
            "DECIMAL({precision},{scale}) needs {size} bytes and a precision of 1 to 65, \
             a scale of at most 30 and the precision; got {} bytes",
            bytes.len()
        ));
    }
    let intg = (precision - scale) as usize;
    let scale = scale as usize;
    let negative = bytes[0] & 0x80 == 0;
    let mask: u8 = if negative { 0xFF } else { 0 };
    let mut pos = 0;
    let mut read = |n: usize| -> u64 {
        let mut v = 0u64;
        for i in 0..n {
            let mut b = bytes[pos + i] ^ mask;
            if pos + i == 0 {
                b ^= 0x80;
            }
            v = (v << 8) | b as u64;
        }
        pos += n;
        v
    };
    let mut groups = [(0u64, 0usize); 9];
    let mut count = 0;
    let lead = intg % 9;
    if lead > 0 {
        groups[count] = (read(DIG2BYTES[lead]), lead);
        count += 1;
    }
    for _ in 0..intg / 9 + scale / 9 {
        groups[count] = (read(4), 9);
        count += 1;
    }
    let trail = scale % 9;
    if trail > 0 {
        groups[count] = (read(DIG2BYTES[trail]), trail);
        count += 1;
    }
    for &(v, digits) in &groups[..count] {
        if v >= POW10[digits] {
            return Err(format!(
                "corrupt DECIMAL({precision},{}): a {digits}-digit group holds {v}",
                scale
            ));
        }
        push(v, digits);
    }
    Ok(negative)
}

/// DECIMAL(p ≤ 38, s) as the unscaled i128 Arrow's Decimal128 holds.
pub fn decimal128(bytes: &[u8], precision: u8, scale: u8) -> Result<i128, String> {
    if precision > 38 {
        return Err(format!(
            "DECIMAL({precision},{scale}) does not fit 128 bits"
        ));
    }
    let mut acc: i128 = 0;
    // Groups are checked to hold their digit count, so 38 digits cannot overflow.
    let negative = decimal_groups(bytes, precision, scale, |v, digits| {
        acc = acc * POW10[digits] as i128 + v as i128;
    })?;
    Ok(if negative { -acc } else { acc })
}

/// `v` (below 10^9) as exactly `width` digits, zero-padded, or with `width`
/// 0 without leading zeros. By hand: `write!` costs more than the decoding
/// of a DECIMAL(65,30) whose lake value is this text.
#[inline]
fn push_digits(out: &mut String, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let from = i.min(buf.len().saturating_sub(width));
    out.extend(buf[from..].iter().map(|&b| b as char));
}

/// DECIMAL as the text MySQL's `decimal2string()` prints: a `-` for
/// negative values, the integer digits without leading zeros (`0` when there
/// are none), and exactly `scale` fraction digits. Any precision up to 65.
/// `bytes` must hold [`decimal_size`] bytes. On error `out` is unchanged.
pub fn decimal_text(
    bytes: &[u8],
    precision: u8,
    scale: u8,
    out: &mut String,
) -> Result<(), String> {
    let intg = precision.saturating_sub(scale) as usize;
    let start = out.len();
    if bytes.first().is_some_and(|b| b & 0x80 == 0) {
        out.push('-');
    }
    let mut seen = 0;
    let mut leading = true;
    let groups = decimal_groups(bytes, precision, scale, |v, digits| {
        if seen == intg {
            if leading {
                out.push('0');
                leading = false;
            }
            out.push('.');
        }
        if seen >= intg || !leading {
            push_digits(out, v, digits);
        } else if v != 0 {
            push_digits(out, v, 0);
            leading = false;
        }
        seen += digits;
    });
    if let Err(e) = groups {
        out.truncate(start);
        return Err(e);
    }
    if leading {
        out.push('0');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1000, 1, 1), -354_285);
        assert_eq!(days_from_civil(9999, 12, 31), 2_932_896);
    }

    #[test]
    fn decimal_positive_and_negative() {
        // DECIMAL(10,2) 1234.56: intg 8 = 0 full groups + 8 lead digits (4 bytes), scale 2 (1 byte).
        let mut b = vec![0x80, 0x00, 0x04, 0xD2, 56];
        assert_eq!(decimal_size(10, 2), 5);
        assert_eq!(decimal128(&b, 10, 2), Ok(123_456));
        for x in b.iter_mut() {
            *x ^= 0xFF;
        }
        assert_eq!(decimal128(&b, 10, 2), Ok(-123_456));
    }

    #[test]
    fn decimal_text_has_the_exact_digits() {
        let text = |bytes: &[u8], p, s| {
            let mut out = String::new();
            decimal_text(bytes, p, s, &mut out).unwrap();
            out
        };
        assert_eq!(text(&[0x80, 0x00, 0x04, 0xD2, 56], 10, 2), "1234.56");
        assert_eq!(text(&[0x7F, 0xFF, 0xFB, 0x2D, !56], 10, 2), "-1234.56");
        assert_eq!(text(&[0x80, 0, 0, 0, 0], 10, 2), "0.00");
        assert_eq!(text(&[0x80, 0, 0, 0], 8, 0), "0");
        // DECIMAL(18,9) 1.000000001: a 9-digit integer group whose leading
        // zeros go, a fraction group whose leading zeros stay.
        let mut b = 1u32.to_be_bytes().to_vec();
        b[0] |= 0x80;
        b.extend(1u32.to_be_bytes());
        assert_eq!(text(&b[..], 18, 9), "1.000000001");
        for (v, width, want) in [
            (0, 9, "000000000"),
            (7, 3, "007"),
            (999_999_999, 9, "999999999"),
            (42, 0, "42"),
            (123, 2, "123"),
        ] {
            let mut out = String::from("x");
            push_digits(&mut out, v, width);
            assert_eq!(out, format!("x{want}"), "{v} in {width}");
        }
    }

    /// TIME2 bytes as the server writes them: `TIME_to_longlong_time_packed`
    /// then `my_time_packed_to_binary` (MySQL `mysys/my_time.cc`), for a
    /// value already cut to `fsp` digits.
    fn time2_bytes(micros: i64, fsp: u8) -> Vec<u8> {
        let a = micros.abs();
        let (secs, frac) = (a / 1_000_000, a % 1_000_000);
        let hms = ((secs / 3600) << 12) | (((secs / 60) % 60) << 6) | (secs % 60);
        let packed = if micros < 0 {
            -((hms << 24) + frac)
        } else {
            (hms << 24) + frac
        };
        let int_part = packed >> 24;
        let frac_part = packed % (1 << 24);
        let mut out = ((0x80_0000 + int_part) as u32).to_be_bytes()[1..].to_vec();
        match frac_bytes(fsp) {
            0 => {}
            1 => out.push((frac_part / 10_000) as i8 as u8),
            2 => out.extend(((frac_part / 100) as i16 as u16).to_be_bytes()),
            _ => {
                out = ((packed + 0x8000_0000_0000) as u64).to_be_bytes()[2..].to_vec();
            }
        }
        out
    }

    #[test]
    fn time2_reads_every_fsp_and_sign_as_the_server_writes_it() {
        let max = (838 * 3600 + 59 * 60 + 59) * 1_000_000;
        for fsp in 0..=6u8 {
            let unit = 10i64.pow(6 - fsp as u32);
            let mut values = vec![0, unit, 999_999 / unit * unit, 1_000_000 - unit, max];
            values.extend([max - unit, 500_000 / unit * unit, 3_600_000_000 + unit]);
            values.extend([(12 * 3600 + 34 * 60 + 56) * 1_000_000 + 123_456 / unit * unit]);
            for v in values.clone() {
                values.push(-v);
            }
            for v in values {
                let bytes = time2_bytes(v, fsp);
                assert_eq!(bytes.len(), 3 + frac_bytes(fsp));
                assert_eq!(
                    time2(&bytes, fsp),
                    v,
                    "fsp {fsp}, {v} µs, bytes {bytes:02X?}"
                );
            }
        }
        // Issue 10: '-00:00:00.50' as TIME(2) was read 2.56 s off.
        assert_eq!(time2(&[0x7F, 0xFF, 0xFF, 0xCE], 2), -500_000);
        assert_eq!(time2(&[0x7F, 0xFF, 0xFF, 0xFB], 2), -50_000);
    }

    #[test]
    fn corrupt_decimals_are_errors_not_panics() {
        // Issue 11: precision 0 from corrupt metadata indexed an empty slice.
        assert!(decimal128(&[], 0, 0).is_err());
        assert!(decimal_text(&[0x80; 4], 66, 0, &mut String::new()).is_err());
        assert!(
            decimal128(&[0x80; 4], 5, 6).is_err(),
            "scale above precision"
        );
        assert!(
            decimal128(&[0x80, 0], 10, 2).is_err(),
            "shorter than its size"
        );
        // A 9-digit group holding 4294967295 (all bits set): not a decimal.
        let bytes = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        let err = decimal128(&bytes, 18, 0).unwrap_err();
        assert!(err.contains("9-digit group"), "{err}");
        let mut out = String::from("kept");
        assert!(decimal_text(&bytes, 18, 0, &mut out).is_err());
        assert_eq!(
            out, "kept",
            "a failed decimal_text leaves the buffer as it was"
        );
        // The largest DECIMAL(38,0) still fits: 38 nines.
        // The lead group of 2 digits (99) in one byte, the sign bit set for positive.
        let mut nines = vec![0x80 | 99];
        for _ in 0..4 {
            nines.extend(999_999_999u32.to_be_bytes());
        }
        assert_eq!(decimal_size(38, 0), nines.len());
        assert_eq!(decimal128(&nines, 38, 0), Ok(10i128.pow(38) - 1));
    }

    #[test]
    fn enum_set_labels_are_read_and_corrupt_counts_refused() {
        let raw = [2, 1, b'a', 2, 0xF0, 0x9F, 1, 0, 0];
        assert_eq!(
            enum_set_labels(&raw).unwrap(),
            vec![vec![b"a".to_vec(), vec![0xF0, 0x9F]], vec![vec![]], vec![]]
        );
        assert!(enum_set_labels(&[254, 255, 255, 255, 255, 255, 255, 255, 127]).is_err());
        assert!(enum_set_labels(&[1, 5, b'a']).is_err());
    }

    #[test]
    fn addresses_print_as_the_server_prints_them() {
        let text =
            |a: Address, b: &[u8]| a.text(b, &mut AddressText::default()).unwrap().to_string();
        let v6 = |s: &[u16; 8]| -> Vec<u8> { s.iter().flat_map(|w| w.to_be_bytes()).collect() };
        // Expected texts from MariaDB 10.11's CAST('…' AS INET6).
        for (words, want) in [
            ([0, 0, 0, 0, 0, 0, 0, 1], "::1"),
            ([0, 0, 0, 0, 0, 0, 0, 2], "::2"),
            ([0, 0, 0, 0, 0, 0, 0, 0x100], "::100"),
            ([0, 0, 0, 0, 0, 0, 1, 0], "::0.1.0.0"),
            ([0, 0, 0, 0, 0, 0xFFFF, 0, 0], "::ffff:0.0.0.0"),
            ([0, 0, 0, 0, 0, 0, 0xFFFF, 1], "::255.255.0.1"),
            ([1, 0, 2, 3, 4, 5, 6, 7], "1::2:3:4:5:6:7"),
            ([1, 0, 0, 2, 0, 0, 3, 4], "1::2:0:0:3:4"),
            ([0xABCD, 0, 0, 0, 0, 0, 0, 0], "abcd::"),
            ([0, 0, 0, 0, 1, 0, 0, 0], "::1:0:0:0"),
            ([0, 0, 0, 0, 0, 1, 0, 0], "::1:0:0"),
            ([0, 0, 0, 0, 0, 0xFFFE, 0x102, 0x304], "::fffe:102:304"),
            ([0, 0, 0, 0, 0, 0, 0, 0], "::"),
        ] {
            assert_eq!(text(Address::Inet6, &v6(&words)), want);
        }
        // Trailing zeros stripped by the binlog are put back.
        assert_eq!(
            text(Address::Inet6, &[0x20, 0x01, 0x0D, 0xB8]),
            "2001:db8::"
        );
        assert_eq!(text(Address::Inet4, &[10]), "10.0.0.0");
        assert_eq!(
            text(
                Address::Uuid,
                &[
                    0x12, 0x3E, 0x45, 0x67, 0xE8, 0x9B, 0x12, 0xD3, 0xA4, 0x56, 0x42, 0x66, 0x14,
                    0x17, 0x40
                ]
            ),
            "123e4567-e89b-12d3-a456-426614174000"
        );
        assert!(Address::Inet4
            .text(&[1; 5], &mut AddressText::default())
            .is_err());
    }

    #[test]
    fn zero_dates_are_none() {
        assert_eq!(date(&[0, 0, 0]), None);
        assert_eq!(timestamp2(&[0, 0, 0, 0], 0), None);
    }
}
