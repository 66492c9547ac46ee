//! Decoders of single binlog cell values into plain Rust numbers. Pure
//! functions on byte slices; the rows decoder calls them and appends the
//! results to Arrow builders. Formats:
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classmysql_1_1binlog_1_1event_1_1Rows__event.html>
//! and `sql/log_event.cc` / `strings/decimal.c` of MySQL and MariaDB.

use arrow::datatypes::i256;

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

/// Size in bytes of a binary DECIMAL(precision, scale).
pub fn decimal_size(precision: u8, scale: u8) -> usize {
    let intg = (precision - scale) as usize;
    let scale = scale as usize;
    (intg / 9) * 4 + DIG2BYTES[intg % 9] + (scale / 9) * 4 + DIG2BYTES[scale % 9]
}

/// Walks the digit groups of a binary DECIMAL, calling `push(group_value,
/// group_digits)` from the most significant group on. Returns whether the
/// value is negative. The format stores the sign in the top bit of the first
/// byte and all bytes inverted for negative numbers (`strings/decimal.c`).
#[inline]
fn decimal_groups(
    bytes: &[u8],
    precision: u8,
    scale: u8,
    mut push: impl FnMut(u64, usize),
) -> bool {
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
    let lead = intg % 9;
    if lead > 0 {
        push(read(DIG2BYTES[lead]), lead);
    }
    for _ in 0..intg / 9 {
        push(read(4), 9);
    }
    for _ in 0..scale / 9 {
        push(read(4), 9);
    }
    let trail = scale % 9;
    if trail > 0 {
        push(read(DIG2BYTES[trail]), trail);
    }
    negative
}

/// DECIMAL(p ≤ 38, s) as the unscaled i128 Arrow's Decimal128 holds.
pub fn decimal128(bytes: &[u8], precision: u8, scale: u8) -> i128 {
    let mut acc: i128 = 0;
    let negative = decimal_groups(bytes, precision, scale, |v, digits| {
        acc = acc * POW10[digits] as i128 + v as i128;
    });
    if negative {
        -acc
    } else {
        acc
    }
}

/// DECIMAL(p > 38, s) as the unscaled i256 of Decimal256.
pub fn decimal256(bytes: &[u8], precision: u8, scale: u8) -> i256 {
    let mut acc = i256::ZERO;
    let negative = decimal_groups(bytes, precision, scale, |v, digits| {
        acc = acc
            .wrapping_mul(i256::from_i128(POW10[digits] as i128))
            .wrapping_add(i256::from_i128(v as i128));
    });
    if negative {
        acc.wrapping_neg()
    } else {
        acc
    }
}

/// DECIMAL as the text MySQL's `decimal2string()` prints: a `-` for
/// negative values, the integer digits without leading zeros (`0` when there
/// are none), and exactly `scale` fraction digits. Any precision up to 65.
/// `bytes` must hold [`decimal_size`] bytes.
pub fn decimal_text(bytes: &[u8], precision: u8, scale: u8, out: &mut String) {
    use std::fmt::Write as _;
    let intg = (precision - scale) as usize;
    if bytes[0] & 0x80 == 0 {
        out.push('-');
    }
    let mut seen = 0;
    let mut leading = true;
    decimal_groups(bytes, precision, scale, |v, digits| {
        if seen == intg {
            if leading {
                out.push('0');
                leading = false;
            }
            out.push('.');
        }
        if seen >= intg || !leading {
            let _ = write!(out, "{v:0digits$}");
        } else if v != 0 {
            let _ = write!(out, "{v}");
            leading = false;
        }
        seen += digits;
    });
    if leading {
        out.push('0');
    }
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
        assert_eq!(decimal128(&b, 10, 2), 123_456);
        for x in b.iter_mut() {
            *x ^= 0xFF;
        }
        assert_eq!(decimal128(&b, 10, 2), -123_456);
    }

    #[test]
    fn decimal_text_has_the_exact_digits() {
        let text = |bytes: &[u8], p, s| {
            let mut out = String::new();
            decimal_text(bytes, p, s, &mut out);
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
    }

    #[test]
    fn time2_negative_with_fraction() {
        // -00:00:01.5 with fsp 1: packed int = -1 s ... encode via MySQL's rule
        // intpart = hms(0:0:1) = 1 -> negative: -(1) , frac -50 -> stored int -1+... we
        // check the round trip of a known server encoding instead:
        // '-838:59:59' fsp 0: hms = 838<<12 | 59<<6 | 59, stored 0x800000 - hms.
        let hms: i64 = (838 << 12) | (59 << 6) | 59;
        let stored = (0x80_0000 - hms) as u64;
        let bytes = [(stored >> 16) as u8, (stored >> 8) as u8, stored as u8];
        assert_eq!(time2(&bytes, 0), -((838 * 3600 + 59 * 60 + 59) * 1_000_000));
    }

    #[test]
    fn zero_dates_are_none() {
        assert_eq!(date(&[0, 0, 0]), None);
        assert_eq!(timestamp2(&[0, 0, 0, 0], 0), None);
    }
}
