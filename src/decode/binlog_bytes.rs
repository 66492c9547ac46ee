//! Binlog event bytes built field by field from the layouts MySQL documents
//! (`libs/mysql/binlog/event/binlog_event.h`, `rows_event.h`,
//! `control_events.h`, `sql-common/json_binary.h`), for events no server
//! here produces.
//!
//! Plain Rust on byte vectors, no crate types: the unit tests include it
//! through `decode::testing`, the integration tests through
//! `tests/common/binlog_builder.rs` (`#[path]`), so both build the same
//! bytes; each uses only part of it.
#![allow(dead_code)]

/// A packed integer (`net_store_length`).
pub fn lenenc(n: u64, out: &mut Vec<u8>) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xFFFF => {
            out.push(252);
            out.extend(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(253);
            out.extend(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(254);
            out.extend(&n.to_le_bytes());
        }
    }
}

/// CRC-32 (IEEE), the binlog checksum.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= *b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A whole event: the 19-byte common header (timestamp, type, server id,
/// event size, log_pos, flags), the body, and a CRC32 when `checksum`.
pub fn event_bytes_with(
    timestamp: u32,
    server_id: u32,
    flags: u16,
    event_type: u8,
    log_pos: u32,
    body: &[u8],
    checksum: bool,
) -> Vec<u8> {
    let size = 19 + body.len() + if checksum { 4 } else { 0 };
    let mut e = timestamp.to_le_bytes().to_vec();
    e.push(event_type);
    e.extend(server_id.to_le_bytes());
    e.extend((size as u32).to_le_bytes());
    e.extend(log_pos.to_le_bytes());
    e.extend(flags.to_le_bytes());
    e.extend(body);
    if checksum {
        let crc = crc32(&e);
        e.extend(crc.to_le_bytes());
    }
    e
}

pub fn event_bytes(event_type: u8, log_pos: u32, body: &[u8], checksum: bool) -> Vec<u8> {
    event_bytes_with(1_700_000_000, 1, 0, event_type, log_pos, body, checksum)
}

/// TABLE_MAP body: table id (6 bytes), flags (2), schema and table names
/// (length byte, name, NUL), column count (packed), column types, metadata
/// (packed length, then each column's metadata), NULL-able bitmap. No
/// optional metadata.
pub fn table_map_body(
    table_id: u64,
    db: &str,
    table: &str,
    columns: &[(u8, &[u8])],
    nullable: &[bool],
) -> Vec<u8> {
    let mut b = table_id.to_le_bytes()[..6].to_vec();
    b.extend(1u16.to_le_bytes());
    for name in [db, table] {
        b.push(name.len() as u8);
        b.extend(name.as_bytes());
        b.push(0);
    }
    lenenc(columns.len() as u64, &mut b);
    b.extend(columns.iter().map(|(t, _)| *t));
    let meta: Vec<u8> = columns
        .iter()
        .flat_map(|(_, m)| m.iter().copied())
        .collect();
    lenenc(meta.len() as u64, &mut b);
    b.extend(meta);
    let mut bits = vec![0u8; nullable.len().div_ceil(8)];
    for (i, n) in nullable.iter().enumerate() {
        if *n {
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    b.extend(bits);
    b
}

/// The part of a v2 rows event before the rows: table id (6), flags (2,
/// STMT_END_F), extra data length (2, counting itself, no extra data),
/// column count (packed), the columns-present bitmap, and for updates the
/// after image's bitmap.
pub fn rows_v2_header(
    table_id: u64,
    ncols: u64,
    present: &[u8],
    present_after: Option<&[u8]>,
) -> Vec<u8> {
    let mut b = table_id.to_le_bytes()[..6].to_vec();
    b.extend(1u16.to_le_bytes());
    b.extend(2u16.to_le_bytes());
    lenenc(ncols, &mut b);
    b.extend(present);
    if let Some(after) = present_after {
        b.extend(after);
    }
    b
}

/// The post-header lengths a MySQL 8.0.26–8.0.x format description lists
/// for event types 1 to 41 (`Format_description_event`'s table in
/// `control_events.cpp`). Entry 40 is MySQL's own quirk: it holds the type
/// code TRANSACTION_PAYLOAD_EVENT (40) where the post-header length (0)
/// belongs; MySQL's reader never looks it up.
pub const MYSQL_8_0_POST_HEADER_LENS: [u8; 41] = [
    0, 13, 0, 8, 0, 0, 0, 0, 4, 0, // START_V3 .. EXEC_LOAD
    4, 0, 0, 0, 98, 0, 4, 26, 8, 0, // DELETE_FILE .. PRE_GA_WRITE_ROWS
    0, 0, 8, 8, 8, 2, 0, 0, 0, 10, // PRE_GA_UPDATE_ROWS .. WRITE_ROWS_V2
    10, 10, 42, 42, 0, 18, 52, 0, 10, 40, // UPDATE_ROWS_V2 .. TRANSACTION_PAYLOAD
    0,  // HEARTBEAT_V2
];

/// FORMAT_DESCRIPTION body: binlog version 4, the server version in 50
/// NUL-padded bytes, the creation time, the common header length (19), the
/// post-header lengths, and the checksum algorithm (1 = CRC32, 0 = off).
pub fn format_description_body(server_version: &str, created: u32, crc32: bool) -> Vec<u8> {
    let mut b = 4u16.to_le_bytes().to_vec();
    let mut version = server_version.as_bytes().to_vec();
    version.resize(50, 0);
    b.extend(version);
    b.extend(created.to_le_bytes());
    b.push(19);
    b.extend(MYSQL_8_0_POST_HEADER_LENS);
    b.push(u8::from(crc32));
    b
}

/// A source uuid and its GTID intervals, `[start, end)`.
pub type GtidIntervals<'a> = ([u8; 16], &'a [(u64, u64)]);

/// PREVIOUS_GTIDS body: the number of source ids (8 bytes), then for each
/// its uuid, the number of intervals (8 bytes) and the intervals as
/// `[start, end)` pairs of 8-byte integers.
pub fn previous_gtids_body(sets: &[GtidIntervals<'_>]) -> Vec<u8> {
    let mut b = (sets.len() as u64).to_le_bytes().to_vec();
    for (uuid, intervals) in sets {
        b.extend(uuid);
        b.extend((intervals.len() as u64).to_le_bytes());
        for (start, end) in *intervals {
            b.extend(start.to_le_bytes());
            b.extend(end.to_le_bytes());
        }
    }
    b
}

/// The fields of a MySQL 8 GTID event (`Gtid_event` in `control_events.h`).
pub struct GtidFields {
    /// 1 = FLAG_MAY_HAVE_SBR (a statement-logged transaction, e.g. DDL).
    pub flags: u8,
    pub uuid: [u8; 16],
    pub gno: u64,
    pub last_committed: u64,
    pub sequence_number: u64,
    /// Microseconds since the epoch; the original server's is the same.
    pub commit_micros: u64,
    /// Bytes of the whole transaction, this GTID event included.
    pub transaction_length: u64,
    /// e.g. 80036; the original server's is the same.
    pub server_version: u32,
}

/// GTID body: flags, uuid, gno, the logical timestamps (type code 2,
/// last_committed, sequence_number) — the 42-byte post-header — then the
/// 7-byte immediate commit timestamp (top bit clear: the original one is
/// the same), the transaction length (packed) and the 4-byte immediate
/// server version (top bit clear: the original one is the same).
pub fn gtid_body(g: &GtidFields) -> Vec<u8> {
    let mut b = vec![g.flags];
    b.extend(g.uuid);
    b.extend(g.gno.to_le_bytes());
    b.push(2);
    b.extend(g.last_committed.to_le_bytes());
    b.extend(g.sequence_number.to_le_bytes());
    b.extend(&g.commit_micros.to_le_bytes()[..7]);
    lenenc(g.transaction_length, &mut b);
    b.extend(g.server_version.to_le_bytes());
    b
}

/// QUERY body: thread id, execution time, database name length, error
/// code, status variables length, the status variables MySQL 8.0 writes
/// (flags2, sql_mode, catalog, charsets, and for DDL the XID it is logged
/// with, the utf8mb4 default collation, sql_require_primary_key and
/// default_table_encryption), the database name and NUL, the statement.
pub fn query_body(db: &str, statement: &str, ddl_xid: Option<u64>) -> Vec<u8> {
    let mut vars = vec![0]; // Q_FLAGS2_CODE
    vars.extend(0u32.to_le_bytes());
    vars.push(1); // Q_SQL_MODE_CODE
    vars.extend(0x4000_0000u64.to_le_bytes());
    vars.extend([6, 3]); // Q_CATALOG_NZ_CODE
    vars.extend(b"std");
    vars.push(4); // Q_CHARSET_CODE: client, connection, server collations
    for collation in [255u16, 255, 255] {
        vars.extend(collation.to_le_bytes());
    }
    if let Some(xid) = ddl_xid {
        vars.push(17); // Q_DDL_LOGGED_WITH_XID
        vars.extend(xid.to_le_bytes());
        vars.push(18); // Q_DEFAULT_COLLATION_FOR_UTF8MB4
        vars.extend(255u16.to_le_bytes());
        vars.extend([19, 0xff]); // Q_SQL_REQUIRE_PRIMARY_KEY (unset)
        vars.extend([20, 0]); // Q_DEFAULT_TABLE_ENCRYPTION
    }
    let mut b = 7u32.to_le_bytes().to_vec();
    b.extend(0u32.to_le_bytes());
    b.push(db.len() as u8);
    b.extend(0u16.to_le_bytes());
    b.extend((vars.len() as u16).to_le_bytes());
    b.extend(vars);
    b.extend(db.as_bytes());
    b.push(0);
    b.extend(statement.as_bytes());
    b
}

/// ROWS_QUERY body: a length byte (MySQL stores the length mod 256 and
/// readers ignore it), then the statement.
pub fn rows_query_body(statement: &str) -> Vec<u8> {
    let mut b = vec![statement.len() as u8];
    b.extend(statement.as_bytes());
    b
}

/// TRANSACTION_PAYLOAD header field codes and compression types.
pub mod payload_field {
    pub const PAYLOAD_SIZE: u64 = 1;
    pub const COMPRESSION_TYPE: u64 = 2;
    pub const UNCOMPRESSED_SIZE: u64 = 3;
    pub const ZSTD: u64 = 0;
    pub const NONE: u64 = 255;
}

/// TRANSACTION_PAYLOAD body: header fields as (code, length, value) packed
/// integers, the end mark 0, then the payload.
pub fn transaction_payload_body(fields: &[(u64, u64)], payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (code, value) in fields {
        let mut v = Vec::new();
        lenenc(*value, &mut v);
        lenenc(*code, &mut body);
        lenenc(v.len() as u64, &mut body);
        body.extend(v);
    }
    body.push(0);
    body.extend(payload);
    body
}

pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// MySQL binary JSON (`sql-common/json_binary.h`) and JSON diffs
/// (`Json_diff::write_binary`), built value by value.
pub mod jsonb {
    use super::lenenc;

    /// Type bytes of `json_binary.h`.
    pub const SMALL_OBJECT: u8 = 0x00;
    pub const LARGE_OBJECT: u8 = 0x01;
    pub const SMALL_ARRAY: u8 = 0x02;
    pub const LARGE_ARRAY: u8 = 0x03;
    pub const LITERAL: u8 = 0x04;
    pub const INT16: u8 = 0x05;
    pub const UINT16: u8 = 0x06;
    pub const INT32: u8 = 0x07;
    pub const UINT32: u8 = 0x08;
    pub const INT64: u8 = 0x09;
    pub const UINT64: u8 = 0x0A;
    pub const DOUBLE: u8 = 0x0B;
    pub const STRING: u8 = 0x0C;
    pub const OPAQUE: u8 = 0x0F;

    /// A value without its type byte, as it sits inside a container or after
    /// the type byte of a document.
    #[derive(Clone)]
    pub struct V {
        pub ty: u8,
        pub body: Vec<u8>,
    }

    impl V {
        /// The document: type byte, then the value.
        pub fn doc(&self) -> Vec<u8> {
            let mut d = vec![self.ty];
            d.extend(&self.body);
            d
        }
    }

    fn scalar(ty: u8, body: &[u8]) -> V {
        V {
            ty,
            body: body.to_vec(),
        }
    }

    pub fn null() -> V {
        scalar(LITERAL, &[0])
    }

    pub fn bool(b: bool) -> V {
        scalar(LITERAL, &[if b { 1 } else { 2 }])
    }

    pub fn i16(x: i16) -> V {
        scalar(INT16, &x.to_le_bytes())
    }

    pub fn u16(x: u16) -> V {
        scalar(UINT16, &x.to_le_bytes())
    }

    pub fn i32(x: i32) -> V {
        scalar(INT32, &x.to_le_bytes())
    }

    pub fn u32(x: u32) -> V {
        scalar(UINT32, &x.to_le_bytes())
    }

    pub fn i64(x: i64) -> V {
        scalar(INT64, &x.to_le_bytes())
    }

    pub fn u64(x: u64) -> V {
        scalar(UINT64, &x.to_le_bytes())
    }

    pub fn f64(x: f64) -> V {
        scalar(DOUBLE, &x.to_le_bytes())
    }

    /// The variable-length size of strings and opaque data: 7 bits a byte,
    /// high bit set on every byte but the last.
    pub fn varlen(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7F) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    pub fn string(s: &str) -> V {
        let mut body = Vec::new();
        varlen(s.len(), &mut body);
        body.extend(s.as_bytes());
        V { ty: STRING, body }
    }

    pub fn opaque(field_type: u8, data: &[u8]) -> V {
        let mut body = vec![field_type];
        varlen(data.len(), &mut body);
        body.extend(data);
        V { ty: OPAQUE, body }
    }

    /// Scalars small enough to sit in the value entry itself.
    fn inlined(v: &V, large: bool) -> bool {
        matches!(v.ty, LITERAL | INT16 | UINT16) || (large && matches!(v.ty, INT32 | UINT32))
    }

    /// An array or object: element count and byte size, key entries (offset,
    /// length), value entries (type, inlined value or offset), then keys and
    /// values. Offsets count from the start of the container.
    fn container(keys: Option<&[&str]>, values: &[V], large: bool) -> Vec<u8> {
        let w = if large { 4 } else { 2 };
        let put = |out: &mut Vec<u8>, at: usize, x: usize| {
            out[at..at + w].copy_from_slice(&x.to_le_bytes()[..w]);
        };
        let n = values.len();
        let key_entries = keys.map_or(0, |_| n * (w + 2));
        let header = 2 * w + key_entries + n * (1 + w);
        let mut out = vec![0u8; header];
        put(&mut out, 0, n);
        if let Some(keys) = keys {
            for (i, k) in keys.iter().enumerate() {
                let at = 2 * w + i * (w + 2);
                let offset = out.len();
                put(&mut out, at, offset);
                out[at + w..at + w + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
                out.extend(k.as_bytes());
            }
        }
        for (i, v) in values.iter().enumerate() {
            let at = 2 * w + key_entries + i * (1 + w);
            out[at] = v.ty;
            if inlined(v, large) {
                out[at + 1..at + 1 + v.body.len()].copy_from_slice(&v.body);
            } else {
                let offset = out.len();
                put(&mut out, at + 1, offset);
                out.extend(&v.body);
            }
        }
        let size = out.len();
        put(&mut out, w, size);
        out
    }

    pub fn array(values: &[V]) -> V {
        V {
            ty: SMALL_ARRAY,
            body: container(None, values, false),
        }
    }
    pub fn large_array(values: &[V]) -> V {
        V {
            ty: LARGE_ARRAY,
            body: container(None, values, true),
        }
    }
    /// Members must be given in MySQL's key order (shorter first).
    pub fn object(members: &[(&str, V)]) -> V {
        let keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
        let values: Vec<V> = members.iter().map(|(_, v)| v.clone()).collect();
        V {
            ty: SMALL_OBJECT,
            body: container(Some(&keys), &values, false),
        }
    }
    pub fn large_object(members: &[(&str, V)]) -> V {
        let keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
        let values: Vec<V> = members.iter().map(|(_, v)| v.clone()).collect();
        V {
            ty: LARGE_OBJECT,
            body: container(Some(&keys), &values, true),
        }
    }

    /// One `Json_diff`: operation, path, and the new value unless removing.
    pub fn diff(op: u8, path: &str, value: Option<&V>, out: &mut Vec<u8>) {
        out.push(op);
        lenenc(path.len() as u64, out);
        out.extend(path.as_bytes());
        if let Some(v) = value {
            let doc = v.doc();
            lenenc(doc.len() as u64, out);
            out.extend(doc);
        }
    }
}
