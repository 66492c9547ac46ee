//! MariaDB's INET4, INET6 and UUID: the fixed width the binlog logs them
//! at (as BINARY) and the text SELECT prints for them.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
