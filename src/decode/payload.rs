//! MySQL 8's TRANSACTION_PAYLOAD events (`binlog_transaction_compression=ON`,
//! 8.0.20 and later): every event of a transaction but its GTID, compressed
//! together into one event. [`expand_payload`] gives back the inner events.
//!
//! Layout (`Transaction_payload_event` in MySQL's
//! `libs/mysql/binlog/event/control_events.h`): no post-header, whatever
//! the format description says (see [`expand_payload`]), then header
//! fields as triples of packed integers (`net_field_length`) — a type code,
//! the length of the value, the value — closed by the end mark 0:
//!
//! | code | field             | value                                |
//! |------|-------------------|--------------------------------------|
//! | 0    | end of the header | (no length, no value)                |
//! | 1    | payload size      | bytes of the payload after the header |
//! | 2    | compression type  | 0 = ZSTD, 255 = NONE                 |
//! | 3    | uncompressed size | bytes of the decompressed payload    |
//!
//! Unknown codes are skipped by their length, as MySQL does. The
//! decompressed payload is a plain sequence of events, each with the common
//! 19-byte header and without a checksum (WL#3549), their `log_pos` 0: they
//! have no position of their own in the binlog file. [`payload_events`]
//! inflates them one at a time.

use std::io::Read;

use mysql_common::binlog::events::{Event, FormatDescriptionEvent, TransactionPayloadReader};

use super::event_type;
use super::values::le_uint;
use crate::types::metadata::packed_int;

/// Compression types (`mysql::binlog::event::compression::type`).
const ZSTD: u64 = 0;
const NONE: u64 = 255;

/// Header field codes.
const END_MARK: u64 = 0;
const PAYLOAD_SIZE: u64 = 1;
const COMPRESSION_TYPE: u64 = 2;
const UNCOMPRESSED_SIZE: u64 = 3;

/// The common header every event starts with.
const EVENT_HEADER_LEN: usize = 19;

/// The events a TRANSACTION_PAYLOAD event carries, in order (typically Query
/// `BEGIN`, Rows_query, TABLE_MAP, rows events, XID), decompressed as they
/// are read: only the event in hand is inflated, so a compressed
/// transaction takes no more memory than an uncompressed one (whose rows
/// events the server cuts at `binlog_row_event_max_size`).
///
/// They are parsed with the outer event's format description, checksums
/// off. Their headers are as MySQL wrote them: `log_pos` is 0, so the
/// caller must give every inner event the position of the payload event
/// (where it starts, and where it ends for a cursor after the transaction).
///
/// Errors (at creation for the header, as an item for the rest, after
/// which the iterator ends): a malformed header, an unknown compression
/// type, an inner event larger than `max_event_bytes`
/// (`flush.max_buffer_bytes`: the memory budget), a payload that holds more
/// or fewer bytes than it announces, a truncated inner event, and an inner
/// TRANSACTION_PAYLOAD or FORMAT_DESCRIPTION (MySQL never nests them; either
/// would change how the rest of the stream is read).
pub fn payload_events(event: &Event, max_event_bytes: usize) -> Result<PayloadEvents<'_>, String> {
    // The header fields start right after the common header. The format
    // description's post-header length for this type is not looked up:
    // MySQL 8 writes the type code (40) there instead of 0, and its own
    // reader (`Transaction_payload_event`'s codec) ignores the entry too.
    let body = event.data();
    let header = PayloadHeader::parse(body)?;
    let payload = &body[header.payload.clone()];
    let reader = match header.compression {
        ZSTD => TransactionPayloadReader::new_zstd(payload)
            .map_err(|e| format!("TRANSACTION_PAYLOAD: zstd: {e}"))?,
        NONE => TransactionPayloadReader::new_uncompressed(payload),
        other => {
            return Err(format!(
                "TRANSACTION_PAYLOAD with unknown compression type {other} (0 is ZSTD, 255 NONE)"
            ))
        }
    };
    // Inner events carry no checksum: read them with checksums off.
    let fde = event.fde();
    let mut footer = fde.footer();
    footer.set_checksum_enabled(false);
    Ok(PayloadEvents {
        // One byte more than announced is read, to notice a longer payload
        // without inflating it all.
        reader: reader.take(
            header
                .uncompressed_size
                .map_or(u64::MAX, |n| n.saturating_add(1)),
        ),
        fde: fde.clone().with_footer(footer),
        announced: header.uncompressed_size,
        max_event_bytes,
        read: 0,
        count: 0,
        done: false,
    })
}

/// The inner events of one TRANSACTION_PAYLOAD, see [`payload_events`].
pub struct PayloadEvents<'a> {
    reader: std::io::Take<TransactionPayloadReader<'a>>,
    fde: FormatDescriptionEvent<'static>,
    announced: Option<u64>,
    max_event_bytes: usize,
    /// Decompressed bytes read so far.
    read: u64,
    count: usize,
    done: bool,
}

impl Iterator for PayloadEvents<'_> {
    type Item = Result<Event, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.read_event().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

impl PayloadEvents<'_> {
    /// The next inner event, `None` at the end of a payload that held what
    /// it announced.
    fn read_event(&mut self) -> Result<Option<Event>, String> {
        let n = self.count + 1;
        let mut head = [0u8; EVENT_HEADER_LEN];
        let got = self.fill(&mut head)?;
        if got == 0 {
            return match self.announced {
                Some(announced) if announced != self.read => Err(format!(
                    "TRANSACTION_PAYLOAD announces {announced} uncompressed bytes but holds {}",
                    self.read
                )),
                _ => Ok(None),
            };
        }
        if let Some(announced) = self.announced.filter(|a| self.read > *a) {
            return Err(format!(
                "TRANSACTION_PAYLOAD announces {announced} uncompressed bytes but holds more"
            ));
        }
        if got < EVENT_HEADER_LEN {
            return Err(format!(
                "TRANSACTION_PAYLOAD: inner event {n} is cut inside its header"
            ));
        }
        let ty = head[4];
        let size = le_uint(&head[9..13]) as usize;
        if size < EVENT_HEADER_LEN {
            return Err(format!(
                "TRANSACTION_PAYLOAD: inner event {n} (type {ty}) claims {size} bytes, less than its header"
            ));
        }
        if let Some(announced) = self.announced {
            if self.read - EVENT_HEADER_LEN as u64 + size as u64 > announced {
                return Err(format!(
                    "TRANSACTION_PAYLOAD announces {announced} uncompressed bytes but holds more (inner event {n} of type {ty} claims {size} bytes)"
                ));
            }
        }
        if size > self.max_event_bytes {
            return Err(format!(
                "TRANSACTION_PAYLOAD: inner event {n} (type {ty}) is {size} bytes uncompressed, more than flush.max_buffer_bytes ({} bytes) allows in memory; raise flush.max_buffer_bytes above it",
                self.max_event_bytes
            ));
        }
        match ty {
            event_type::TRANSACTION_PAYLOAD => {
                return Err(format!(
                    "TRANSACTION_PAYLOAD nested inside a TRANSACTION_PAYLOAD (inner event {n})"
                ))
            }
            event_type::FORMAT_DESCRIPTION => {
                return Err(format!(
                    "FORMAT_DESCRIPTION inside a TRANSACTION_PAYLOAD (inner event {n})"
                ))
            }
            _ => {}
        }
        let mut bytes = vec![0u8; size];
        bytes[..EVENT_HEADER_LEN].copy_from_slice(&head);
        let got = self.fill(&mut bytes[EVENT_HEADER_LEN..])?;
        if got < size - EVENT_HEADER_LEN {
            return Err(format!(
                "TRANSACTION_PAYLOAD: inner event {n} (type {ty}) claims {size} bytes, {} are left",
                EVENT_HEADER_LEN + got
            ));
        }
        let event = Event::read(&self.fde, &bytes[..])
            .map_err(|e| format!("TRANSACTION_PAYLOAD: inner event {n} (type {ty}): {e}"))?;
        self.count = n;
        Ok(Some(event))
    }

    /// Reads until `buf` is full or the payload ends; returns the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        let mut got = 0;
        while got < buf.len() {
            match self.reader.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("TRANSACTION_PAYLOAD: corrupt zstd payload: {e}")),
            }
        }
        self.read += got as u64;
        Ok(got)
    }
}

/// The header fields of a TRANSACTION_PAYLOAD event.
struct PayloadHeader {
    compression: u64,
    uncompressed_size: Option<u64>,
    /// Where the payload lies in the event body.
    payload: std::ops::Range<usize>,
}

impl PayloadHeader {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let mut r = body;
        let mut payload_size = None;
        let mut compression = None;
        let mut uncompressed_size = None;
        loop {
            let code =
                packed_int(&mut r).ok_or("TRANSACTION_PAYLOAD header cut before its end mark")?;
            if code == END_MARK {
                break;
            }
            let len = packed_int(&mut r).ok_or("TRANSACTION_PAYLOAD header field cut")? as usize;
            if len > r.len() {
                return Err(format!(
                    "TRANSACTION_PAYLOAD header field {code} of {len} bytes, {} left",
                    r.len()
                ));
            }
            let (mut value, rest) = r.split_at(len);
            r = rest;
            let slot = match code {
                PAYLOAD_SIZE => &mut payload_size,
                COMPRESSION_TYPE => &mut compression,
                UNCOMPRESSED_SIZE => &mut uncompressed_size,
                // Fields added by later versions: skipped by their length.
                _ => continue,
            };
            let v = packed_int(&mut value)
                .filter(|_| value.is_empty())
                .ok_or_else(|| format!("TRANSACTION_PAYLOAD header field {code} is malformed"))?;
            *slot = Some(v);
        }
        let size = payload_size.ok_or("TRANSACTION_PAYLOAD without a payload size")? as usize;
        let compression = compression.ok_or("TRANSACTION_PAYLOAD without a compression type")?;
        let start = body.len() - r.len();
        if size > r.len() {
            return Err(format!(
                "TRANSACTION_PAYLOAD payload of {size} bytes, the event has {} after its header",
                r.len()
            ));
        }
        Ok(PayloadHeader {
            compression,
            uncompressed_size,
            payload: start..start + size,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array, StringArray};

    use super::*;
    use crate::batch::TableBuffer;
    use crate::decode::rows::{decode_rows, DecodeStats, RowsKind};
    use crate::decode::testing::jsonb as jb;
    use crate::decode::testing::*;
    use crate::schema::plan::TablePlan;
    use mysql_common::binlog::events::TableMapEvent;

    const TABLE_ID: u64 = 0x71;

    /// TABLE_MAP `shop.items (id INT NOT NULL, doc JSON)`, WRITE_ROWS_V2 with
    /// two rows, XID: what MySQL compresses for `INSERT … ; COMMIT`. No
    /// checksums, `log_pos` 0, as MySQL writes them into a payload.
    fn inner_events() -> Vec<u8> {
        let tm = table_map_body(
            TABLE_ID,
            "shop",
            "items",
            &[(3, &[]), (245, &[4])],
            &[false, true],
        );
        let doc = jb::object(&[("n", jb::i16(5)), ("tag", jb::string("a"))]).doc();
        let mut rows = rows_v2_header(TABLE_ID, 2, &[0b11], None);
        // Row 1: no nulls, id 1, doc.
        rows.push(0);
        rows.extend(1i32.to_le_bytes());
        rows.extend((doc.len() as u32).to_le_bytes());
        rows.extend(&doc);
        // Row 2: doc NULL.
        rows.push(0b10);
        rows.extend(2i32.to_le_bytes());
        let mut bytes = event_bytes(event_type::TABLE_MAP, 0, &tm, false);
        bytes.extend(event_bytes(event_type::WRITE_ROWS_V2, 0, &rows, false));
        bytes.extend(event_bytes(event_type::XID, 0, &77u64.to_le_bytes(), false));
        bytes
    }

    /// A TRANSACTION_PAYLOAD event: header fields, then the payload; with
    /// the checksum the outer stream has.
    fn payload_event(fields: &[(u64, u64)], payload: &[u8]) -> Vec<u8> {
        let body = transaction_payload_body(fields, payload);
        event_bytes(event_type::TRANSACTION_PAYLOAD, 4_000, &body, true)
    }

    fn zstd_payload_event(inner: &[u8]) -> Vec<u8> {
        let compressed = zstd::encode_all(inner, 3).unwrap();
        payload_event(
            &[
                (COMPRESSION_TYPE, ZSTD),
                (UNCOMPRESSED_SIZE, inner.len() as u64),
                (PAYLOAD_SIZE, compressed.len() as u64),
            ],
            &compressed,
        )
    }

    /// Every inner event, or the first error.
    fn expand_payload(event: &Event) -> Result<Vec<Event>, String> {
        payload_events(event, usize::MAX)?.collect()
    }

    fn types(events: &[Event]) -> Vec<u8> {
        events.iter().map(|e| e.header().event_type_raw()).collect()
    }

    #[test]
    fn zstd_payload_expands_to_its_events_and_rows_decode() {
        let outer = read_event(&zstd_payload_event(&inner_events()), true);
        assert_eq!(
            outer.header().event_type_raw(),
            event_type::TRANSACTION_PAYLOAD
        );
        let inner = expand_payload(&outer).unwrap();
        assert_eq!(
            types(&inner),
            [
                event_type::TABLE_MAP,
                event_type::WRITE_ROWS_V2,
                event_type::XID
            ]
        );
        assert!(inner.iter().all(|e| e.header().log_pos() == 0));
        // The XID body survived whole (no checksum was cut from it).
        assert_eq!(inner[2].data(), 77u64.to_le_bytes());

        let tme: TableMapEvent<'_> = inner[0].read_event().unwrap();
        assert_eq!(tme.table_id(), TABLE_ID);
        assert_eq!(tme.table_name(), "items");
        let schema = table_schema(&[("id", "int"), ("doc", "json")]);
        let plan = TablePlan::new(Arc::clone(&schema), &tme).unwrap();
        let mut buffer = TableBuffer::new(schema);
        let (kind, post_header) = RowsKind::of_event_type(event_type::WRITE_ROWS_V2).unwrap();
        let mut seq = 10;
        let rows = decode_rows(
            &plan,
            kind,
            inner[1].data(),
            post_header,
            &mut buffer,
            &origin(),
            &mut seq,
            &mut DecodeStats::default(),
        )
        .unwrap();
        assert_eq!((rows, seq), (2, 12));
        let batch = buffer.finish(None).unwrap();
        let ids = batch.column_by_name("id").unwrap();
        let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 2]);
        let docs = batch.column_by_name("doc").unwrap();
        let docs = docs.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(docs.value(0), r#"{"n": 5, "tag": "a"}"#);
        assert!(docs.is_null(1));
    }

    #[test]
    fn the_post_header_length_mysql_8_announces_for_payloads_is_ignored() {
        // MySQL 8's format description says 40 for TRANSACTION_PAYLOAD.
        let mysql8 = fde(true).with_event_type_header_lengths(MYSQL_8_0_POST_HEADER_LENS.to_vec());
        assert_eq!(
            mysql8.get_event_type_header_length(
                mysql_common::binlog::consts::EventType::TRANSACTION_PAYLOAD_EVENT
            ),
            40
        );
        let outer = Event::read(&mysql8, &zstd_payload_event(&inner_events())[..]).unwrap();
        assert_eq!(expand_payload(&outer).unwrap().len(), 3);
    }

    #[test]
    fn uncompressed_payload_expands_too() {
        let inner = inner_events();
        // NONE is 255: a packed integer of 3 bytes (0xFC 0xFF 0x00).
        let bytes = payload_event(
            &[(COMPRESSION_TYPE, NONE), (PAYLOAD_SIZE, inner.len() as u64)],
            &inner,
        );
        assert_eq!(&bytes[19..23], [2, 3, 0xFC, 0xFF]);
        let events = expand_payload(&read_event(&bytes, true)).unwrap();
        assert_eq!(
            types(&events),
            [
                event_type::TABLE_MAP,
                event_type::WRITE_ROWS_V2,
                event_type::XID
            ]
        );
    }

    /// Memory is bounded per inner event, not per transaction: a payload
    /// far larger than the budget streams through when each event fits,
    /// and an event that does not fit is refused naming the key.
    #[test]
    fn inner_events_are_inflated_one_at_a_time_within_max_buffer_bytes() {
        // 3000 transactions' worth of TABLE_MAP + rows + XID: ~240 KB.
        let one = inner_events();
        let inner: Vec<u8> = one.iter().copied().cycle().take(one.len() * 3000).collect();
        let outer = read_event(&zstd_payload_event(&inner), true);
        let sizes: Vec<usize> = expand_payload(&read_event(&zstd_payload_event(&one), true))
            .unwrap()
            .iter()
            .map(|e| e.header().event_size() as usize)
            .collect();
        let biggest = *sizes.iter().max().unwrap();
        assert!(inner.len() > 1000 * biggest);
        let mut count = 0;
        for e in payload_events(&outer, biggest).unwrap() {
            let e = e.unwrap();
            assert!(e.header().event_size() as usize <= biggest);
            count += 1;
        }
        assert_eq!(count, 9000);

        let items: Vec<_> = payload_events(&outer, biggest - 1).unwrap().collect();
        let first_too_big = sizes.iter().position(|s| *s == biggest).unwrap();
        assert_eq!(
            items.len(),
            first_too_big + 1,
            "the iterator ends at its first error"
        );
        let err = items[first_too_big].as_ref().unwrap_err();
        assert!(
            err.contains(&format!("inner event {} ", first_too_big + 1))
                && err.contains(&format!("{biggest} bytes uncompressed"))
                && err.contains(&format!("flush.max_buffer_bytes ({} bytes)", biggest - 1)),
            "{err}"
        );
    }

    /// A payload that inflates beyond the size it announces is stopped at
    /// the announced size, not inflated whole.
    #[test]
    fn a_payload_holding_more_than_it_announces_is_stopped_there() {
        let one = inner_events();
        let inner: Vec<u8> = one
            .iter()
            .copied()
            .cycle()
            .take(one.len() * 20_000)
            .collect();
        let compressed = zstd::encode_all(&inner[..], 3).unwrap();
        let bytes = payload_event(
            &[
                (COMPRESSION_TYPE, ZSTD),
                (UNCOMPRESSED_SIZE, one.len() as u64),
                (PAYLOAD_SIZE, compressed.len() as u64),
            ],
            &compressed,
        );
        let outer = read_event(&bytes, true);
        let items: Vec<_> = payload_events(&outer, usize::MAX).unwrap().collect();
        assert_eq!(items.len(), 4, "three events, then the error");
        assert!(items[..3].iter().all(|e| e.is_ok()));
        let err = items[3].as_ref().unwrap_err();
        assert!(
            err.contains(&format!(
                "announces {} uncompressed bytes but holds more",
                one.len()
            )),
            "{err}"
        );
    }

    #[test]
    fn unknown_header_fields_are_skipped() {
        let inner = inner_events();
        let compressed = zstd::encode_all(&inner[..], 1).unwrap();
        let bytes = payload_event(
            &[
                (COMPRESSION_TYPE, ZSTD),
                (9, 123_456), // a field of some later version
                (UNCOMPRESSED_SIZE, inner.len() as u64),
                (PAYLOAD_SIZE, compressed.len() as u64),
            ],
            &compressed,
        );
        assert_eq!(expand_payload(&read_event(&bytes, true)).unwrap().len(), 3);
    }

    #[test]
    fn unknown_compression_is_refused() {
        let inner = inner_events();
        let bytes = payload_event(
            &[(COMPRESSION_TYPE, 1), (PAYLOAD_SIZE, inner.len() as u64)],
            &inner,
        );
        let err = expand_payload(&read_event(&bytes, true)).unwrap_err();
        assert!(err.contains("unknown compression type 1"), "{err}");
    }

    #[test]
    fn nested_payload_is_refused() {
        let inner_payload = zstd_payload_event(&inner_events());
        // As an inner event it has no checksum: cut it and fix its size.
        let mut nested = inner_payload[..inner_payload.len() - 4].to_vec();
        let size = nested.len() as u32;
        nested[9..13].copy_from_slice(&size.to_le_bytes());
        let bytes = payload_event(
            &[
                (COMPRESSION_TYPE, NONE),
                (PAYLOAD_SIZE, nested.len() as u64),
            ],
            &nested,
        );
        let err = expand_payload(&read_event(&bytes, true)).unwrap_err();
        assert!(err.contains("nested"), "{err}");
    }

    #[test]
    fn sizes_that_disagree_are_errors() {
        let inner = inner_events();
        let compressed = zstd::encode_all(&inner[..], 3).unwrap();
        let wrong_size = payload_event(
            &[
                (COMPRESSION_TYPE, ZSTD),
                (UNCOMPRESSED_SIZE, inner.len() as u64 - 1),
                (PAYLOAD_SIZE, compressed.len() as u64),
            ],
            &compressed,
        );
        let err = expand_payload(&read_event(&wrong_size, true)).unwrap_err();
        assert!(err.contains("announces"), "{err}");

        // An inner event cut short.
        let cut = &inner[..inner.len() - 3];
        let bytes = payload_event(
            &[(COMPRESSION_TYPE, NONE), (PAYLOAD_SIZE, cut.len() as u64)],
            cut,
        );
        let err = expand_payload(&read_event(&bytes, true)).unwrap_err();
        assert!(err.contains("inner event 3"), "{err}");

        // A payload size beyond the event.
        let bytes = payload_event(&[(COMPRESSION_TYPE, NONE), (PAYLOAD_SIZE, 10_000)], &inner);
        assert!(expand_payload(&read_event(&bytes, true)).is_err());

        // No end mark.
        let mut body = Vec::new();
        lenenc(COMPRESSION_TYPE, &mut body);
        lenenc(1, &mut body);
        let bytes = event_bytes(event_type::TRANSACTION_PAYLOAD, 4_000, &body, true);
        assert!(expand_payload(&read_event(&bytes, true)).is_err());
    }
}
