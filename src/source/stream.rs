//! One stream of binlog events, whatever feeds it: our MariaDB replication
//! connection, mysql_async's MySQL dump (GTID sets), or binlog files.
//!
//! Raw packets become mysql_common `Event`s here, with the CRC32 of every
//! event verified on the bytes as received (no copy).

use futures::StreamExt;
use mysql_common::binlog::consts::{BinlogChecksumAlg, BinlogVersion};
use mysql_common::binlog::events::Event;
use mysql_common::binlog::EventStreamReader;
use tokio::sync::mpsc;

use super::replica::{Packet, Packets, ServerFailure};
use crate::decode::values::le_uint;

pub struct EventStream {
    feed: Feed,
    reader: EventStreamReader,
}

enum Feed {
    /// Batches from a reader, and what is left of the batch in hand.
    Packets(mpsc::Receiver<Packets>, std::vec::IntoIter<Packet>),
    Mysql(Box<mysql_async::BinlogStream>),
}

impl EventStream {
    pub fn from_packets(rx: mpsc::Receiver<Packets>) -> EventStream {
        EventStream {
            feed: Feed::Packets(rx, Vec::new().into_iter()),
            reader: EventStreamReader::new(BinlogVersion::Version4),
        }
    }

    pub fn from_mysql(stream: mysql_async::BinlogStream) -> EventStream {
        EventStream {
            feed: Feed::Mysql(Box::new(stream)),
            reader: EventStreamReader::new(BinlogVersion::Version4),
        }
    }

    /// The next event; `None` when the feed ended (the server closed the
    /// dump, or the last binlog file is read).
    pub async fn next(&mut self) -> Option<Result<Event, ServerFailure>> {
        match &mut self.feed {
            Feed::Mysql(stream) => Some(stream.next().await?.map_err(|e| match e {
                mysql_async::Error::Server(s) => ServerFailure::Server {
                    code: s.code,
                    message: s.message,
                },
                other => ServerFailure::Io(other.to_string()),
            })),
            Feed::Packets(rx, batch) => {
                let packet = match batch.next() {
                    Some(p) => p,
                    None => {
                        *batch = rx.recv().await?.into_iter();
                        batch.next()?
                    }
                };
                match packet {
                    Ok(p) => Some(self.parse(&p[1..])),
                    Err(e) => Some(Err(e)),
                }
            }
        }
    }

    fn parse(&mut self, bytes: &[u8]) -> Result<Event, ServerFailure> {
        if bytes.len() < 19 {
            return Err(ServerFailure::Corrupt(format!(
                "an event of {} bytes is shorter than its header",
                bytes.len()
            )));
        }
        let size = le_uint(&bytes[9..13]) as usize;
        if size != bytes.len() {
            // mysql_common panics on a short event body: check first.
            return Err(ServerFailure::Corrupt(format!(
                "an event says it has {size} bytes but {} arrived",
                bytes.len()
            )));
        }
        let event = self
            .reader
            .read(bytes)
            .map_err(|e| ServerFailure::Corrupt(format!("unreadable event: {e}")))?
            .ok_or_else(|| ServerFailure::Corrupt("empty event".into()))?;
        let footer = event.footer();
        if footer.get_checksum_enabled()
            && matches!(
                footer.get_checksum_alg(),
                Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32))
            )
        {
            let (body, sum) = bytes.split_at(bytes.len() - 4);
            let expected = le_uint(sum) as u32;
            if checksum(body) != expected {
                let end = event.header().log_pos() as usize;
                return Err(ServerFailure::Corrupt(format!(
                    "checksum mismatch in the {}-byte event of type {} at position {} (ending at {end})",
                    bytes.len(),
                    bytes[4],
                    end.saturating_sub(bytes.len())
                )));
            }
        }
        Ok(event)
    }
}

/// CRC32 of an event without its checksum. The server flips the "binlog in
/// use" flag of a file's format description in place when it closes the
/// file, without updating the checksum: that flag is left out of the sum.
fn checksum(event: &[u8]) -> u32 {
    const FORMAT_DESCRIPTION: u8 = 15;
    const BINLOG_IN_USE: u8 = 0x01;
    if event[4] == FORMAT_DESCRIPTION && event[17] & BINLOG_IN_USE != 0 {
        let mut copy = event.to_vec();
        copy[17] &= !BINLOG_IN_USE;
        return crc32fast::hash(&copy);
    }
    crc32fast::hash(event)
}
