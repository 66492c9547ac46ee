//! The character set a text column is in ([`Charset`], from its MySQL name)
//! and how its bytes become text. For the legacy charsets that is the
//! server's own mapping to Unicode, one table per charset
//! (`charsets/<name>.bin`, written by `scripts/charset-tables.py`
//! from MariaDB's `CONVERT(… USING utf8mb4)`). The WHATWG encodings of
//! `encoding_rs` differ from the server in hundreds of places (latin5 is
//! ISO-8859-9 with C1 controls, not windows-1254; tis620 has no Windows-874
//! punctuation; big5, sjis and ujis map dozens of codes elsewhere), and
//! armscii8, cp850, keybcs2, … are not there at all; a value must read as
//! SELECT shows it, so the server's tables are the authority.
//!
//! A table is u16 little-endian: 256 entries for single bytes (the
//! character; [`LEAD2`] or [`LEAD3`] for the first byte of a two- or
//! three-byte character; 0 for a byte that is no character, byte 0 itself
//! being U+0000), then for multibyte charsets 126 × 191 entries for the
//! pairs 0x81–0xFE × 0x40–0xFE (0: not a character), then for ujis and
//! eucjpms 94 × 94 entries for 0x8F 0xA1–0xFE 0xA1–0xFE. A character the
//! server stores but has no Unicode for is what the server shows: `?`.

use std::borrow::Cow;

/// The character set a text column's bytes are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// utf8mb3 / utf8mb4: valid UTF-8 as is.
    Utf8,
    /// A legacy charset, through the server's own table (latin1, cp1251,
    /// sjis, big5, …; see [`CharsetTable`]).
    Table(&'static CharsetTable),
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
            other => return table(other).map(Charset::Table),
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

const LEAD2: u16 = 0xFFFF;
const LEAD3: u16 = 0xFFFE;
const PAIRS: usize = 126 * 191;
const TRIPLES: usize = 94 * 94;

/// One charset's mapping; see the module comment for the layout.
pub struct CharsetTable {
    pub name: &'static str,
    bytes: &'static [u8],
}

impl std::fmt::Debug for CharsetTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for CharsetTable {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CharsetTable {}

macro_rules! tables {
    ($($name:literal),* $(,)?) => {
        static TABLES: &[CharsetTable] = &[$(CharsetTable {
            name: $name,
            bytes: include_bytes!(concat!("charsets/", $name, ".bin")),
        }),*];
    };
}

tables!(
    "armscii8", "ascii", "big5", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852", "cp866",
    "cp932", "dec8", "eucjpms", "euckr", "gb2312", "gbk", "geostd8", "greek", "hebrew", "hp8",
    "keybcs2", "koi8r", "koi8u", "latin1", "latin2", "latin5", "latin7", "macce", "macroman",
    "sjis", "swe7", "tis620", "ujis",
);

/// The table of a MySQL/MariaDB charset name, if sluice has one.
pub fn table(name: &str) -> Option<&'static CharsetTable> {
    TABLES.iter().find(|t| t.name == name)
}

impl CharsetTable {
    #[inline]
    fn entry(&self, index: usize) -> u16 {
        u16::from_le_bytes([self.bytes[2 * index], self.bytes[2 * index + 1]])
    }

    /// Whether bytes 0x00–0x7F are ASCII (all but swe7).
    #[inline]
    fn ascii_compatible(&self) -> bool {
        self.name != "swe7"
    }

    /// The text of `bytes`, as the server converts it; bytes that are no
    /// character in this charset (which the server refuses to store) are
    /// an error naming them.
    pub fn decode<'a>(&self, bytes: &'a [u8]) -> Result<Cow<'a, str>, String> {
        let mut out = String::new();
        match self.decode_with(bytes, &mut out)? {
            Some(ascii) => Ok(Cow::Borrowed(ascii)),
            None => Ok(Cow::Owned(out)),
        }
    }

    /// [`Self::decode`] for the rows decoder: ASCII comes back as it is
    /// (`Some`), other text is appended to `out`, a buffer reused from cell
    /// to cell (`None`), so a value costs no allocation of its own.
    #[inline]
    pub fn decode_with<'a>(
        &self,
        bytes: &'a [u8],
        out: &mut String,
    ) -> Result<Option<&'a str>, String> {
        if self.ascii_compatible() && bytes.is_ascii() {
            // ASCII is valid UTF-8.
            return Ok(Some(std::str::from_utf8(bytes).unwrap_or_default()));
        }
        out.reserve(bytes.len() * 2);
        let ascii = self.ascii_compatible();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if ascii && b < 0x80 {
                // A run of ASCII at a character boundary, copied at once.
                let run = bytes[i..]
                    .iter()
                    .position(|c| *c >= 0x80)
                    .unwrap_or(bytes.len() - i);
                out.push_str(std::str::from_utf8(&bytes[i..i + run]).unwrap_or_default());
                i += run;
                continue;
            }
            let (code, len) = match self.entry(b as usize) {
                LEAD2 => {
                    let code = match bytes.get(i + 1) {
                        Some(&t @ 0x40..=0xFE) if self.bytes.len() >= 2 * (256 + PAIRS) => {
                            self.entry(256 + (b as usize - 0x81) * 191 + (t as usize - 0x40))
                        }
                        _ => 0,
                    };
                    (code, 2)
                }
                LEAD3 => {
                    let code = match bytes.get(i + 1..i + 3) {
                        Some(&[t1 @ 0xA1..=0xFE, t2 @ 0xA1..=0xFE])
                            if self.bytes.len() >= 2 * (256 + PAIRS + TRIPLES) =>
                        {
                            self.entry(
                                256 + PAIRS + (t1 as usize - 0xA1) * 94 + (t2 as usize - 0xA1),
                            )
                        }
                        _ => 0,
                    };
                    (code, 3)
                }
                code => (code, 1),
            };
            match char::from_u32(code as u32) {
                Some(c) if code != 0 || b == 0 => out.push(c),
                _ => {
                    let end = (i + len).min(bytes.len());
                    return Err(format!(
                        "bytes {:02X?} at offset {i} are no {} character (the column's charset)",
                        &bytes[i..end],
                        self.name
                    ));
                }
            }
            i += len;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_its_layout() {
        for t in TABLES {
            let multi = (0..256).any(|b| t.entry(b) == LEAD2);
            let three = (0..256).any(|b| t.entry(b) == LEAD3);
            let want = 256 + if multi { PAIRS } else { 0 } + if three { TRIPLES } else { 0 };
            assert_eq!(t.bytes.len(), 2 * want, "{}", t.name);
            let ascii = (0..0x80).all(|b| t.entry(b) == b as u16);
            assert_eq!(ascii, t.ascii_compatible(), "{}", t.name);
        }
    }

    #[test]
    fn the_servers_mappings() {
        let text = |cs: &str, bytes: &[u8]| table(cs).unwrap().decode(bytes).unwrap().into_owned();
        // latin5 is ISO-8859-9 with C1 controls, as the server maps it, not windows-1254.
        assert_eq!(text("latin5", &[0x80, 0xD0, 0xFD]), "\u{80}Ğı");
        assert_eq!(text("latin1", &[0x80, 0xEF, 0xBB, 0xBF]), "€ï»¿");
        assert_eq!(text("armscii8", &[0xB2, 0xB3]), "Աա");
        // Bytes the server has no character for show as '?'.
        assert_eq!(text("hebrew", &[0xC0, 0xE0]), "?א");
        assert_eq!(
            text("sjis", &[0x93, 0xFA, 0x96, 0x7B, 0x81, 0x5F]),
            "日本\\"
        );
        // ASCII runs between characters; a second byte in ASCII's range (0x40).
        assert_eq!(text("sjis", b"ab\x93\xFAcd\x81\x40e"), "ab日cd\u{3000}e");
        assert_eq!(text("ujis", &[0x8F, 0xB0, 0xA1]), "丂");
        let sjis = table("sjis").unwrap();
        assert!(sjis.decode(&[0x93]).is_err(), "a first byte alone");
        assert!(sjis.decode(&[0x93, 0x20]).is_err(), "a bad second byte");
        assert!(sjis.decode(&[0x80]).is_err());
        assert!(matches!(sjis.decode(b"plain"), Ok(Cow::Borrowed("plain"))));
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
