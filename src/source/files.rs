//! Offline replay: binlog files read from a directory instead of a server
//! (`[source] binlog_dir`), for backfill from backups and for benchmarks.
//!
//! A reader thread frames the files into the same packets a server sends —
//! a rotate naming each file, its format description, then its events — so
//! decoding, the lake and exactly-once behave exactly as with a server.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::replica::{Packet, Packets, ServerFailure, BATCH_BYTES, BATCH_PACKETS, READ_AHEAD};
use super::BinlogPosition;
use crate::decode::values::le_uint;
use crate::error::{Error, Result};

const HEADER_LEN: usize = 19;
const MAGIC: &[u8; 4] = b"\xfebin";

/// The binlog files of `dir` in order, with their sizes: every `<stem>.<number>`
/// sharing the stem of the first such file, sorted by number.
pub fn list(dir: &Path) -> Result<Vec<(String, u64)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Error::Preflight(format!(
            "source.binlog_dir: cannot read {}: {e}",
            dir.display()
        ))
    })?;
    // (name, stem, number, size)
    let mut files: Vec<(String, String, u64, u64)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stem, number)) = name.rsplit_once('.') else {
            continue;
        };
        if stem.is_empty() || number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        files.push((
            name.clone(),
            stem.to_string(),
            number.parse().unwrap_or(0),
            meta.len(),
        ));
    }
    files.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
    if let Some(stem) = files.first().map(|f| f.1.clone()) {
        files.retain(|f| f.1 == stem);
    }
    if files.is_empty() {
        return Err(Error::Preflight(format!(
            "source.binlog_dir: {} holds no binlog files (name.000001, ...); copy the server's binlogs there",
            dir.display()
        )));
    }
    Ok(files.into_iter().map(|(n, _, _, size)| (n, size)).collect())
}

/// What the first file's format description says about the server.
pub struct FileServer {
    pub version: String,
    pub server_id: u32,
    pub checksum: bool,
    /// The format description's timestamp: when the file was started.
    pub created: u32,
}

/// Reads the format description at the start of a binlog file.
pub fn describe(path: &Path) -> Result<FileServer> {
    let bad =
        |msg: String| Error::Preflight(format!("source.binlog_dir: {}: {msg}", path.display()));
    let mut f = File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut head = vec![0u8; 4 + HEADER_LEN];
    f.read_exact(&mut head)
        .map_err(|_| bad("too short for a binlog file".into()))?;
    if &head[..4] != MAGIC {
        return Err(bad("not a binlog file (no \\xfebin magic)".into()));
    }
    let size = le_uint(&head[13..17]) as usize;
    if head[8] != 15 || !(HEADER_LEN + 57..=64 * 1024).contains(&size) {
        return Err(bad("the first event is not a format description".into()));
    }
    let mut body = vec![0u8; size - HEADER_LEN];
    f.read_exact(&mut body)
        .map_err(|_| bad("truncated format description".into()))?;
    let version = String::from_utf8_lossy(&body[2..52])
        .trim_end_matches('\0')
        .to_string();
    // After the event type header lengths comes the checksum algorithm byte,
    // then (when it is not 0 = off) the 4-byte checksum.
    let header_lens = body.len() - 57 - 5;
    let alg = body.get(57 + header_lens).copied().unwrap_or(0);
    Ok(FileServer {
        version,
        server_id: le_uint(&head[9..13]) as u32,
        checksum: alg != 0 && alg != 0xff,
        created: le_uint(&head[4..8]) as u32,
    })
}

/// Starts the reader thread at `start`, returning the packet channel.
pub fn open(dir: &Path, start: &BinlogPosition, checksum: bool) -> Result<mpsc::Receiver<Packets>> {
    let files = list(dir)?;
    let first = files
        .iter()
        .position(|(f, _)| *f == start.file)
        .ok_or_else(|| {
            Error::Position(format!(
                "{start}: binlog file {} is not in {}; copy it there or start from a file it holds",
                start.file,
                dir.display()
            ))
        })?;
    let paths: Vec<(String, PathBuf)> = files[first..]
        .iter()
        .map(|(f, _)| (f.clone(), dir.join(f)))
        .collect();
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let pos = start.pos;
    std::thread::Builder::new()
        .name("sluice-binlog-files".into())
        .spawn(move || {
            let mut out = Batcher::new(&tx);
            if let Err(e) = read_files(&paths, pos, checksum, &mut out) {
                out.push(Err(e));
            }
            out.flush();
        })
        .map_err(|e| Error::Preflight(format!("cannot start the binlog file reader: {e}")))?;
    Ok(rx)
}

fn read_files(
    paths: &[(String, PathBuf)],
    mut pos: u64,
    checksum: bool,
    out: &mut Batcher<'_>,
) -> std::result::Result<(), ServerFailure> {
    for (name, path) in paths {
        let io = |e: std::io::Error| ServerFailure::Io(format!("{}: {e}", path.display()));
        let mut r = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?);
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic != MAGIC {
            return Err(ServerFailure::Corrupt(format!(
                "{}: not a binlog file",
                path.display()
            )));
        }
        if !out.push(Ok(rotate_packet(name, pos.max(4), checksum))) {
            return Ok(());
        }
        // The format description first, then from the start position on.
        let Some(fde) = read_event(&mut r).map_err(io)? else {
            pos = 4;
            continue;
        };
        let after_fde = 4 + (fde.len() - 1) as u64;
        if !out.push(Ok(fde)) {
            return Ok(());
        }
        if pos > after_fde {
            r.seek(SeekFrom::Start(pos)).map_err(io)?;
        }
        while let Some(packet) = read_event(&mut r).map_err(io)? {
            if !out.push(Ok(packet)) {
                return Ok(());
            }
        }
        // The end of the file, or a partially written last event: next file.
        pos = 4;
    }
    Ok(())
}

/// Gathers packets into batches for the channel (see `replica::BATCH_BYTES`).
struct Batcher<'a> {
    tx: &'a mpsc::Sender<Packets>,
    batch: Packets,
    bytes: usize,
}

impl<'a> Batcher<'a> {
    fn new(tx: &'a mpsc::Sender<Packets>) -> Self {
        Batcher {
            tx,
            batch: Vec::with_capacity(BATCH_PACKETS),
            bytes: 0,
        }
    }

    /// Adds a packet, sending the batch when it is full; `false` once the
    /// stream has been dropped and reading should stop.
    fn push(&mut self, packet: Packet) -> bool {
        self.bytes += packet.as_ref().map_or(0, Vec::len);
        self.batch.push(packet);
        if self.batch.len() >= BATCH_PACKETS || self.bytes >= BATCH_BYTES {
            return self.flush();
        }
        true
    }

    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        self.bytes = 0;
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_PACKETS));
        self.tx.blocking_send(batch).is_ok()
    }
}

/// One event with a leading status byte, like a server's packet; `None` at
/// the end of the file or before an incomplete last event.
fn read_event(r: &mut BufReader<File>) -> std::io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; HEADER_LEN];
    match read_full(r, &mut header)? {
        0 => return Ok(None),
        n if n < HEADER_LEN => return Ok(None),
        _ => {}
    }
    let size = le_uint(&header[9..13]) as usize;
    if size < HEADER_LEN {
        return Err(std::io::Error::other(format!(
            "event of {size} bytes is shorter than its header: corrupt binlog"
        )));
    }
    let mut packet = Vec::with_capacity(size + 1);
    packet.push(0);
    packet.extend_from_slice(&header);
    packet.resize(size + 1, 0);
    if read_full(r, &mut packet[1 + HEADER_LEN..])? < size - HEADER_LEN {
        return Ok(None);
    }
    Ok(Some(packet))
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// An artificial rotate event naming the file, as a server sends first.
pub(crate) fn rotate_packet(name: &str, pos: u64, checksum: bool) -> Vec<u8> {
    let size = HEADER_LEN + 8 + name.len() + if checksum { 4 } else { 0 };
    let mut p = Vec::with_capacity(size + 1);
    p.push(0);
    p.extend_from_slice(&0u32.to_le_bytes()); // timestamp
    p.push(4); // ROTATE_EVENT
    p.extend_from_slice(&0u32.to_le_bytes()); // server id
    p.extend_from_slice(&(size as u32).to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes()); // log_pos
    p.extend_from_slice(&0x20u16.to_le_bytes()); // LOG_EVENT_ARTIFICIAL_F
    p.extend_from_slice(&pos.to_le_bytes());
    p.extend_from_slice(name.as_bytes());
    if checksum {
        let crc = crc32fast::hash(&p[1..]);
        p.extend_from_slice(&crc.to_le_bytes());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_order_and_close_at_the_packet_and_byte_bounds() {
        let (tx, mut rx) = mpsc::channel(READ_AHEAD);
        let reader = std::thread::spawn(move || {
            let mut out = Batcher::new(&tx);
            // 300 small packets, then two of 200 KiB: the byte bound closes
            // the batch holding the second.
            for i in 0..300u32 {
                assert!(out.push(Ok(i.to_le_bytes().to_vec())));
            }
            assert!(out.push(Ok(vec![1; 200 * 1024])));
            assert!(out.push(Ok(vec![2; 200 * 1024])));
            assert!(out.push(Err(ServerFailure::Io("the end".into()))));
            out.flush();
        });
        let mut sizes = Vec::new();
        let mut seen = Vec::new();
        while let Some(batch) = rx.blocking_recv() {
            sizes.push(batch.len());
            seen.extend(batch);
        }
        reader.join().unwrap();
        assert_eq!(sizes, vec![128, 128, 46, 1]);
        for (i, p) in seen[..300].iter().enumerate() {
            assert_eq!(p.as_ref().unwrap(), &(i as u32).to_le_bytes().to_vec());
        }
        assert_eq!(seen[300].as_ref().unwrap()[0], 1);
        assert_eq!(seen[301].as_ref().unwrap()[0], 2);
        assert!(matches!(&seen[302], Err(ServerFailure::Io(m)) if m == "the end"));
    }
}
