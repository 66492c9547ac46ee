//! Decoders of single binlog cell values into plain Rust numbers. Pure
//! functions on byte slices; the rows decoder calls them and appends the
//! results to Arrow builders. Formats:
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>
//! and `sql/log_event.cc` / `strings/decimal.c` of MySQL and MariaDB.

use crate::types::codec::{decimal_shape_is_valid, decimal_size, DIG2BYTES};

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
    fn zero_dates_are_none() {
        assert_eq!(date(&[0, 0, 0]), None);
        assert_eq!(timestamp2(&[0, 0, 0, 0], 0), None);
    }
}
