//! MySQL 8 binlog files built by hand, byte by byte, from the formats MySQL
//! documents: no MySQL 8 server runs here, so these files stand in for the
//! ones it writes. The event bodies come from `src/decode/binlog_bytes.rs`
//! (shared with the unit tests); this module lays them out as a file: the
//! magic, a format description, CRC32 checksums, `log_pos`, GTID events
//! with their transaction length, TABLE_MAPs with FULL optional metadata,
//! row images and their cells.
#![allow(dead_code)]

#[path = "../../src/decode/binlog_bytes.rs"]
mod bytes;
pub use bytes::*;

use sluice::decode::event_type as et;

pub const MAGIC: &[u8; 4] = b"\xfebin";
const HEADER_LEN: usize = 19;
const CHECKSUM_LEN: usize = 4;
/// LOG_EVENT_BINLOG_IN_USE_F: set in a file's format description while the
/// server writes the file.
const BINLOG_IN_USE: u16 = 0x01;
/// utf8mb4_0900_ai_ci, MySQL 8's default collation.
pub const UTF8MB4_0900_AI_CI: u64 = 255;

/// A GTID event's fields but the transaction length, which
/// [`BinlogFile::transaction`] computes.
pub struct Gtid {
    pub uuid: [u8; 16],
    pub gno: u64,
    /// A statement-logged transaction (DDL): FLAG_MAY_HAVE_SBR.
    pub ddl: bool,
}

/// One binlog file being written: every event gets the common header with
/// its end as `log_pos`, and a CRC32.
pub struct BinlogFile {
    pub name: String,
    bytes: Vec<u8>,
    pub server_id: u32,
    pub timestamp: u32,
    sequence_number: u64,
}

impl BinlogFile {
    /// The magic and a format description of MySQL `8.0.36`, CRC32 on.
    pub fn mysql8(name: &str, server_id: u32, timestamp: u32) -> BinlogFile {
        let mut file = BinlogFile {
            name: name.to_owned(),
            bytes: MAGIC.to_vec(),
            server_id,
            timestamp,
            sequence_number: 0,
        };
        let body = format_description_body("8.0.36", timestamp, true);
        file.event(et::FORMAT_DESCRIPTION, &body);
        file
    }

    /// Where the next event starts.
    pub fn pos(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends one event; returns where it starts.
    pub fn event(&mut self, event_type: u8, body: &[u8]) -> u64 {
        let start = self.pos();
        let end = start as usize + HEADER_LEN + body.len() + CHECKSUM_LEN;
        self.bytes.extend(event_bytes_with(
            self.timestamp,
            self.server_id,
            0,
            event_type,
            end as u32,
            body,
            true,
        ));
        start
    }

    /// A GTID event, then `events`; the GTID's transaction length counts
    /// them all, itself included. Returns the start of every event after
    /// the GTID event.
    pub fn transaction(&mut self, gtid: &Gtid, events: &[(u8, Vec<u8>)]) -> Vec<u64> {
        let rest: usize = events
            .iter()
            .map(|(_, b)| HEADER_LEN + b.len() + CHECKSUM_LEN)
            .sum();
        self.sequence_number += 1;
        let mut fields = GtidFields {
            flags: u8::from(gtid.ddl),
            uuid: gtid.uuid,
            gno: gtid.gno,
            last_committed: self.sequence_number - 1,
            sequence_number: self.sequence_number,
            commit_micros: self.timestamp as u64 * 1_000_000 + 250_000,
            transaction_length: 0,
            server_version: 80036,
        };
        // The length field is a packed integer: its own size counts too.
        let mut length = 0;
        loop {
            fields.transaction_length = length;
            let total = (HEADER_LEN + gtid_body(&fields).len() + CHECKSUM_LEN + rest) as u64;
            if total == length {
                break;
            }
            length = total;
        }
        self.event(et::MYSQL_GTID, &gtid_body(&fields));
        events.iter().map(|(t, b)| self.event(*t, b)).collect()
    }

    /// The ROTATE that closes a file, naming the next one.
    pub fn rotate(&mut self, next: &str) -> u64 {
        let mut body = 4u64.to_le_bytes().to_vec();
        body.extend(next.as_bytes());
        self.event(et::ROTATE, &body)
    }

    /// The file's bytes. `in_use` marks it as the file the server still
    /// writes: MySQL sets the flag in the format description's header but
    /// computes the checksum without it (it clears the flag on close
    /// without rewriting the checksum).
    pub fn finish(mut self, in_use: bool) -> Vec<u8> {
        if in_use {
            let flags_at = MAGIC.len() + 17;
            let flags = u16::from_le_bytes([self.bytes[flags_at], self.bytes[flags_at + 1]]);
            self.bytes[flags_at..flags_at + 2]
                .copy_from_slice(&(flags | BINLOG_IN_USE).to_le_bytes());
        }
        self.bytes
    }
}

/// A column of a TABLE_MAP with FULL optional metadata.
pub struct Column {
    pub name: &'static str,
    pub ty: u8,
    pub meta: Vec<u8>,
    pub nullable: bool,
    pub unsigned: bool,
    pub primary_key: bool,
}

impl Column {
    pub fn new(name: &'static str, ty: u8, meta: &[u8]) -> Column {
        Column {
            name,
            ty,
            meta: meta.to_vec(),
            nullable: true,
            unsigned: false,
            primary_key: false,
        }
    }

    pub fn unsigned(mut self) -> Column {
        self.unsigned = true;
        self
    }

    /// Part of the primary key, NOT NULL.
    pub fn key(mut self) -> Column {
        self.primary_key = true;
        self.nullable = false;
        self
    }
}

/// Column types (`enum_field_types`).
pub mod ty {
    pub const LONG: u8 = 3;
    pub const LONGLONG: u8 = 8;
    pub const VARCHAR: u8 = 15;
    pub const DATETIME2: u8 = 18;
    pub const JSON: u8 = 245;
    pub const NEWDECIMAL: u8 = 246;
    pub const BLOB: u8 = 252;
}

fn is_numeric(t: u8) -> bool {
    // `is_numeric_type`: the columns SIGNEDNESS has a bit for.
    matches!(t, 1 | 2 | 3 | 4 | 5 | 8 | 9 | ty::NEWDECIMAL)
}

fn is_character(t: u8) -> bool {
    // `is_character_type`: the columns the charset metadata covers.
    matches!(t, ty::VARCHAR | ty::BLOB | 253 | 254)
}

/// Bits in MySQL's optional-metadata order: most significant bit first.
fn msb_bitmap(bits: impl Iterator<Item = bool>) -> Vec<u8> {
    let bits: Vec<bool> = bits.collect();
    let mut out = vec![0u8; bits.len().div_ceil(8)];
    for (i, b) in bits.iter().enumerate() {
        if *b {
            out[i / 8] |= 0x80 >> (i % 8);
        }
    }
    out
}

fn optional_field(kind: u8, value: &[u8], out: &mut Vec<u8>) {
    out.push(kind);
    lenenc(value.len() as u64, out);
    out.extend(value);
}

/// TABLE_MAP with the optional metadata `binlog_row_metadata=FULL` writes
/// (`Table_map_log_event::init_*_field`, in this order): SIGNEDNESS (1),
/// DEFAULT_CHARSET (2), COLUMN_NAME (4), SIMPLE_PRIMARY_KEY (8) and
/// COLUMN_VISIBILITY (12).
pub fn table_map_full(table_id: u64, db: &str, table: &str, columns: &[Column]) -> Vec<u8> {
    let types: Vec<(u8, &[u8])> = columns.iter().map(|c| (c.ty, c.meta.as_slice())).collect();
    let nullable: Vec<bool> = columns.iter().map(|c| c.nullable).collect();
    let mut b = table_map_body(table_id, db, table, &types, &nullable);
    let numeric = columns.iter().filter(|c| is_numeric(c.ty));
    optional_field(1, &msb_bitmap(numeric.map(|c| c.unsigned)), &mut b);
    if columns.iter().any(|c| is_character(c.ty)) {
        let mut charset = Vec::new();
        lenenc(UTF8MB4_0900_AI_CI, &mut charset);
        optional_field(2, &charset, &mut b);
    }
    let mut names = Vec::new();
    for c in columns {
        lenenc(c.name.len() as u64, &mut names);
        names.extend(c.name.as_bytes());
    }
    optional_field(4, &names, &mut b);
    let mut pk = Vec::new();
    for (i, _) in columns.iter().enumerate().filter(|(_, c)| c.primary_key) {
        lenenc(i as u64, &mut pk);
    }
    optional_field(8, &pk, &mut b);
    optional_field(12, &msb_bitmap(columns.iter().map(|_| true)), &mut b);
    b
}

/// A row's cells, `None` for NULL; each cell is its value's binlog bytes.
pub type Cells = Vec<Option<Vec<u8>>>;

/// One row image with every column present: the NULL bitmap, the values.
pub fn row_image(row: &Cells) -> Vec<u8> {
    let mut nulls = vec![0u8; row.len().div_ceil(8)];
    let mut values: Vec<u8> = Vec::new();
    for (i, cell) in row.iter().enumerate() {
        match cell {
            Some(v) => values.extend(v),
            None => nulls[i / 8] |= 1 << (i % 8),
        }
    }
    nulls.extend(values);
    nulls
}

fn all_present(ncols: usize) -> Vec<u8> {
    let mut bits = vec![0xFFu8; ncols.div_ceil(8)];
    if ncols % 8 != 0 {
        *bits.last_mut().unwrap() = (1u8 << (ncols % 8)) - 1;
    }
    bits
}

/// WRITE_ROWS_V2 or DELETE_ROWS_V2 body: one image a row.
pub fn rows_body(table_id: u64, rows: &[Cells]) -> Vec<u8> {
    let ncols = rows[0].len();
    let mut b = rows_v2_header(table_id, ncols as u64, &all_present(ncols), None);
    for r in rows {
        b.extend(row_image(r));
    }
    b
}

/// UPDATE_ROWS_V2 body: before and after image a row.
pub fn update_body(table_id: u64, rows: &[(Cells, Cells)]) -> Vec<u8> {
    let ncols = rows[0].0.len();
    let present = all_present(ncols);
    let mut b = rows_v2_header(table_id, ncols as u64, &present, Some(&present));
    for (before, after) in rows {
        b.extend(row_image(before));
        b.extend(row_image(after));
    }
    b
}

/// PARTIAL_UPDATE_ROWS body: before image, the shared image
/// (`value_options` 1 = PARTIAL_JSON_UPDATES, then one bit per JSON column
/// of the table, set when that column is logged as diffs), after image.
pub fn partial_update_body(table_id: u64, rows: &[(Cells, u8, Cells)]) -> Vec<u8> {
    let ncols = rows[0].0.len();
    let present = all_present(ncols);
    let mut b = rows_v2_header(table_id, ncols as u64, &present, Some(&present));
    for (before, partial_bits, after) in rows {
        b.extend(row_image(before));
        b.extend([1, *partial_bits]);
        b.extend(row_image(after));
    }
    b
}

/// Cell values as a rows event holds them.
pub mod cell {
    use super::jsonb::V;

    pub fn int(x: i32) -> Option<Vec<u8>> {
        Some(x.to_le_bytes().to_vec())
    }

    pub fn uint(x: u32) -> Option<Vec<u8>> {
        Some(x.to_le_bytes().to_vec())
    }

    pub fn ubigint(x: u64) -> Option<Vec<u8>> {
        Some(x.to_le_bytes().to_vec())
    }

    /// VARCHAR of at most 255 bytes: a length byte, the bytes.
    pub fn varchar(s: &str) -> Option<Vec<u8>> {
        assert!(s.len() < 256);
        let mut b = vec![s.len() as u8];
        b.extend(s.as_bytes());
        Some(b)
    }

    pub fn decimal(text: &str, precision: u8, scale: u8) -> Option<Vec<u8>> {
        Some(super::decimal_bin(text, precision, scale))
    }

    /// DATETIME2(6): 5 bytes big-endian of the packed date and time plus
    /// 2^39, then 3 bytes of microseconds.
    pub fn datetime6(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> Option<Vec<u8>> {
        let ymd = ((y * 13 + mo) << 5) | d;
        let hms = (h << 12) | (mi << 6) | s;
        let int_part = ((ymd << 17) | hms) + 0x80_0000_0000;
        let mut b = int_part.to_be_bytes()[3..].to_vec();
        b.extend(&(us as u32).to_be_bytes()[1..]);
        Some(b)
    }

    /// A JSON cell (4-byte length) holding a binary document.
    pub fn json(v: &V) -> Option<Vec<u8>> {
        json_bytes(&v.doc())
    }

    /// A JSON cell holding raw bytes (a diff vector in a partial update).
    pub fn json_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
        let mut b = (bytes.len() as u32).to_le_bytes().to_vec();
        b.extend(bytes);
        Some(b)
    }
}

/// MySQL's binary DECIMAL (`decimal2bin`): integer digits then fraction
/// digits in groups of nine (4 bytes each, big-endian), the integer's
/// leading and the fraction's trailing partial groups in 1–4 bytes; the
/// top bit flipped, every byte inverted for a negative number.
pub fn decimal_bin(text: &str, precision: u8, scale: u8) -> Vec<u8> {
    const BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let int_digits = (precision - scale) as usize;
    let int = format!("{int:0>int_digits$}");
    let frac = format!("{frac:0<width$}", width = scale as usize);
    assert_eq!(
        (int.len(), frac.len()),
        (int_digits, scale as usize),
        "{text} does not fit DECIMAL({precision},{scale})"
    );
    let mut out = Vec::new();
    let group = |digits: &str, out: &mut Vec<u8>| {
        let n: u32 = if digits.is_empty() {
            0
        } else {
            digits.parse().unwrap()
        };
        out.extend(&n.to_be_bytes()[4 - BYTES[digits.len()]..]);
    };
    let lead = int_digits % 9;
    group(&int[..lead], &mut out);
    for chunk in int.as_bytes()[lead..].chunks(9) {
        group(std::str::from_utf8(chunk).unwrap(), &mut out);
    }
    for chunk in frac.as_bytes().chunks(9) {
        group(std::str::from_utf8(chunk).unwrap(), &mut out);
    }
    out[0] ^= 0x80;
    if negative {
        for b in &mut out {
            *b = !*b;
        }
    }
    out
}

/// Opaque scalars of binary JSON (`json_binary.h`: a field type, then
/// the value MySQL stores for it).
pub mod json_opaque {
    use super::jsonb::{opaque, V};

    /// DECIMAL: precision, scale, the binary decimal.
    pub fn decimal(text: &str, precision: u8, scale: u8) -> V {
        let mut data = vec![precision, scale];
        data.extend(super::decimal_bin(text, precision, scale));
        opaque(super::ty::NEWDECIMAL, &data)
    }

    /// `TIME_to_longlong_datetime_packed`, little-endian.
    fn datetime_packed(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> [u8; 8] {
        let ymd = ((y * 13 + mo) << 5) | d;
        let hms = (h << 12) | (mi << 6) | s;
        ((((ymd << 17) | hms) << 24) + us).to_le_bytes()
    }

    pub fn datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> V {
        opaque(12, &datetime_packed(y, mo, d, h, mi, s, us))
    }

    pub fn timestamp(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> V {
        opaque(7, &datetime_packed(y, mo, d, h, mi, s, us))
    }

    pub fn date(y: i64, mo: i64, d: i64) -> V {
        opaque(10, &datetime_packed(y, mo, d, 0, 0, 0, 0))
    }

    /// `TIME_to_longlong_time_packed`: negated for a negative time.
    pub fn time(negative: bool, h: i64, mi: i64, s: i64, us: i64) -> V {
        let v = (((h << 12) | (mi << 6) | s) << 24) + us;
        opaque(11, &(if negative { -v } else { v }).to_le_bytes())
    }
}

/// The zstd TRANSACTION_PAYLOAD body of already built inner events (no
/// checksums, `log_pos` 0, as MySQL writes them).
pub fn zstd_payload(inner: &[(u8, Vec<u8>)], timestamp: u32, server_id: u32) -> Vec<u8> {
    let mut plain = Vec::new();
    for (t, body) in inner {
        plain.extend(event_bytes_with(
            timestamp, server_id, 0, *t, 0, body, false,
        ));
    }
    let compressed = zstd::encode_all(&plain[..], 3).unwrap();
    use payload_field::*;
    transaction_payload_body(
        &[
            (COMPRESSION_TYPE, ZSTD),
            (UNCOMPRESSED_SIZE, plain.len() as u64),
            (PAYLOAD_SIZE, compressed.len() as u64),
        ],
        &compressed,
    )
}

/// The builders agree with mysql_common's reader (the library sluice
/// parses events with) and with the byte layouts MySQL documents.
#[cfg(test)]
mod self_check {
    use super::*;
    use mysql_common::binlog::consts::{BinlogChecksumAlg, EventType};
    use mysql_common::binlog::events::{
        GtidEvent, OptionalMetadataField, PreviousGtidsEvent, QueryEvent, RotateEvent,
        TableMapEvent,
    };
    use mysql_common::binlog::{BinlogFileHeader, EventStreamReader};

    const UUID: [u8; 16] = [
        0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95,
        0x63,
    ];

    /// Every event of a file, its checksum checked.
    fn events(bytes: &[u8]) -> Vec<mysql_common::binlog::events::Event> {
        assert_eq!(&bytes[..4], BinlogFileHeader::VALUE);
        let mut reader =
            EventStreamReader::new(mysql_common::binlog::consts::BinlogVersion::Version4);
        let mut out = Vec::new();
        let mut pos = 4;
        while pos < bytes.len() {
            let size = u32::from_le_bytes(bytes[pos + 9..pos + 13].try_into().unwrap()) as usize;
            let raw = &bytes[pos..pos + size];
            let event = reader.read(raw).unwrap().unwrap();
            assert_eq!(
                event.header().log_pos() as usize,
                pos + size,
                "log_pos is the event's end"
            );
            let alg = BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32;
            let stored = u32::from_le_bytes(raw[size - 4..].try_into().unwrap());
            let mut summed = raw[..size - 4].to_vec();
            if raw[4] == et::FORMAT_DESCRIPTION {
                // Summed without the in-use flag, which the server clears on close.
                summed[17] &= !(BINLOG_IN_USE as u8);
            } else {
                assert_eq!(event.calc_checksum(alg), stored);
            }
            assert_eq!(crc32fast::hash(&summed), stored);
            out.push(event);
            pos += size;
        }
        out
    }

    #[test]
    fn a_file_reads_back_with_mysql_common() {
        let mut f = BinlogFile::mysql8("binlog.000001", 7, 1_709_211_909);
        f.event(
            et::MYSQL_PREVIOUS_GTIDS,
            &previous_gtids_body(&[(UUID, &[(1, 3)])]),
        );
        let gtid = Gtid {
            uuid: UUID,
            gno: 3,
            ddl: true,
        };
        let create = "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, n INT UNSIGNED, s VARCHAR(10))";
        f.transaction(&gtid, &[(et::QUERY, query_body("shop", create, Some(9)))]);
        let columns = [
            Column::new("id", ty::LONG, &[]).key(),
            Column::new("n", ty::LONG, &[]).unsigned(),
            Column::new("s", ty::VARCHAR, &[40, 0]),
        ];
        let gtid4 = Gtid {
            uuid: UUID,
            gno: 4,
            ddl: false,
        };
        let tx_start = f.pos();
        f.transaction(
            &gtid4,
            &[
                (et::QUERY, query_body("shop", "BEGIN", None)),
                (et::TABLE_MAP, table_map_full(70, "shop", "t", &columns)),
                (
                    et::WRITE_ROWS_V2,
                    rows_body(70, &[vec![cell::int(1), cell::uint(u32::MAX), None]]),
                ),
                (et::XID, 5u64.to_le_bytes().to_vec()),
            ],
        );
        let tx_end = f.pos();
        f.rotate("binlog.000002");
        let bytes = f.finish(true);
        assert_eq!(bytes[4 + 17] & 1, 1, "the in-use flag is set");

        let evs = events(&bytes);
        assert_eq!(evs.len(), 10);
        let fde: mysql_common::binlog::events::FormatDescriptionEvent<'_> =
            evs[0].read_event().unwrap();
        assert_eq!(fde.server_version().trim_end_matches('\0'), "8.0.36");
        assert_eq!(
            fde.get_event_type_header_length(EventType::TABLE_MAP_EVENT),
            8
        );
        assert_eq!(fde.get_event_type_header_length(EventType::GTID_EVENT), 42);
        assert_eq!(
            fde.get_event_type_header_length(EventType::TRANSACTION_PAYLOAD_EVENT),
            40
        );
        assert_eq!(
            evs[0].footer().get_checksum_alg().unwrap(),
            Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)
        );
        let prev: PreviousGtidsEvent<'_> = evs[1].read_event().unwrap();
        let sids = prev.sids();
        assert_eq!(sids.len(), 1);
        assert_eq!(sids[0].uuid(), UUID);
        assert_eq!(
            (sids[0].intervals()[0].start(), sids[0].intervals()[0].end()),
            (1, 3)
        );

        let g: GtidEvent = evs[2].read_event().unwrap();
        assert_eq!((g.sid(), g.gno(), g.flags_raw()), (UUID, 3, 1));
        let q: QueryEvent<'_> = evs[3].read_event().unwrap();
        assert_eq!((q.schema().as_ref(), q.query().as_ref()), ("shop", create));

        let g: GtidEvent = evs[4].read_event().unwrap();
        assert_eq!(g.gno(), 4);
        assert_eq!(
            g.tx_length(),
            tx_end - tx_start,
            "the transaction length counts every event"
        );
        assert_eq!(g.immediate_server_version(), 80036);
        let tm: TableMapEvent<'_> = evs[6].read_event().unwrap();
        assert_eq!((tm.table_id(), tm.columns_count()), (70, 3));
        let mut names = Vec::new();
        let mut unsigned = Vec::new();
        let mut pk = Vec::new();
        for field in tm.iter_optional_meta() {
            match field.unwrap() {
                OptionalMetadataField::ColumnName(n) => {
                    names = n
                        .iter_names()
                        .map(|c| c.unwrap().name().into_owned())
                        .collect()
                }
                OptionalMetadataField::Signedness(bits) => {
                    unsigned = bits.iter().map(|b| *b).collect()
                }
                OptionalMetadataField::SimplePrimaryKey(k) => {
                    pk = k.iter_indexes().map(|i| i.unwrap()).collect()
                }
                _ => {}
            }
        }
        assert_eq!(names, ["id", "n", "s"]);
        assert_eq!(unsigned, [false, true]);
        assert_eq!(pk, [0]);
        let rows = &evs[7];
        assert_eq!(rows.header().event_type_raw(), et::WRITE_ROWS_V2);
        // Present bitmap 0b111, NULL bitmap 0b100, then 1 and 2^32-1.
        assert_eq!(
            &rows.data()[10..],
            [3, 0b111, 0b100, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]
        );
        let rotate: RotateEvent<'_> = evs[9].read_event().unwrap();
        assert_eq!(rotate.name().as_ref(), "binlog.000002");
    }

    #[test]
    fn values_have_mysqls_binary_layout() {
        // DECIMAL(5,2) 123.45 (as in MySQL's decimal2bin comment: 3+2 digits).
        assert_eq!(decimal_bin("123.45", 5, 2), [0x80, 0x7B, 45]);
        assert_eq!(decimal_bin("-123.45", 5, 2), [!0x80, !0x7B, !45]);
        // DECIMAL(10,2): 8 integer digits in 4 bytes, 2 fraction digits in 1.
        assert_eq!(decimal_bin("12.5", 10, 2), [0x80, 0, 0, 12, 50]);
        // DECIMAL(19,10): 9 integer digits in one group, 10 fraction digits in 4 + 1 bytes.
        assert_eq!(
            decimal_bin("1.0000000005", 19, 10),
            [0x80, 0, 0, 1, 0, 0, 0, 0, 5]
        );
        // DATETIME(6) 2024-02-29 13:05:09.120000.
        let dt = cell::datetime6(2024, 2, 29, 13, 5, 9, 120_000).unwrap();
        let ymd = ((2024 * 13 + 2) << 5) | 29;
        let packed: i64 = ((ymd << 17) | (13 << 12) | (5 << 6) | 9) | (1 << 39);
        assert_eq!(&dt[..5], &packed.to_be_bytes()[3..]);
        assert_eq!(&dt[5..], [0x01, 0xD4, 0xC0]);
        assert_eq!(cell::varchar("é").unwrap(), [2, 0xC3, 0xA9]);
        assert_eq!(row_image(&vec![cell::int(1), None]), [0b10, 1, 0, 0, 0]);
        assert_eq!(all_present(9), [0xFF, 0x01]);
        assert_eq!(msb_bitmap([true, false, true].into_iter()), [0b1010_0000]);
    }
}
