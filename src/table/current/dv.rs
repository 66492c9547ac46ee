//! Deletion vectors of current tables (Delta protocol "Deletion Vectors";
//! notes/deletion-vectors.md has what the readers accept, checked here).
//!
//! A vector marks rows of one data file as deleted by their position in
//! the file. Its bytes are a RoaringBitmapArray: the magic number
//! 1681511377 (u32 little-endian) followed by the portable 64-bit Roaring
//! layout, which is what the `roaring` crate's `RoaringTreemap` writes.
//! Vectors are stored in `deletion_vector_<uuid>.bin` files in the table
//! folder: a version byte 1, then per vector its size (u32 big-endian),
//! its bytes and their CRC-32 (u32 big-endian); the descriptor's `offset`
//! points at the size. The descriptor names the file by the Z85 text of its
//! UUID (storage type `u`, no random prefix).
//!
//! The first 8 bytes of a vector file's UUID are the manifest seq of the
//! fold that wrote it, as `current-<seq>-…` names a data file, so that the
//! files of a fold that died before its commit are found by name.
//!
//! A vector of at most [`INLINE_MAX`] bytes (a dozen rows or so) is stored
//! in its descriptor instead (storage type `i`, the Z85 text of its bytes
//! padded with zeros to a multiple of 4): the log grows by about as much as
//! a file descriptor would have taken, and a fold that marks only such
//! vectors writes no vector file at all.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use roaring::RoaringTreemap;
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// The RoaringBitmapArray magic number (portable serialization).
const MAGIC: u32 = 1_681_511_377;
/// The first byte of a vector file.
const FILE_VERSION: u8 = 1;
const FILE_PREFIX: &str = "deletion_vector_";
const FILE_SUFFIX: &str = ".bin";
/// Vectors up to this many bytes are stored inline, in the log.
pub const INLINE_MAX: usize = 64;

const Z85: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Z85 text of `bytes` (a multiple of 4 long).
fn z85_encode(bytes: &[u8]) -> Option<String> {
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = String::with_capacity(bytes.len() / 4 * 5);
    for chunk in bytes.chunks(4) {
        let mut v = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let mut five = [0u8; 5];
        for c in five.iter_mut().rev() {
            *c = Z85[(v % 85) as usize];
            v /= 85;
        }
        out.extend(five.iter().map(|b| *b as char));
    }
    Some(out)
}

/// The bytes of Z85 text (a multiple of 5 long).
fn z85_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() % 5 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 5 * 4);
    for chunk in text.chunks(5) {
        let mut v: u64 = 0;
        for c in chunk {
            let d = Z85.iter().position(|z| z == c)? as u64;
            v = v * 85 + d;
        }
        out.extend_from_slice(&u32::try_from(v).ok()?.to_be_bytes());
    }
    Some(out)
}

/// The serialized bytes of a vector.
pub fn serialize(rows: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + rows.serialized_size());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    // Writing into a Vec cannot fail.
    let _ = rows.serialize_into(&mut out);
    out
}

/// A vector from its serialized bytes.
pub fn deserialize(bytes: &[u8]) -> std::result::Result<RoaringTreemap, String> {
    let magic = bytes
        .get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
        .ok_or("shorter than its magic number")?;
    if magic != MAGIC {
        return Err(format!("magic number {magic}, not {MAGIC}"));
    }
    RoaringTreemap::deserialize_from(&bytes[4..]).map_err(|e| e.to_string())
}

/// The vector file of fold `seq`'s UUID `uuid` (the seq in its first 8 bytes).
fn file_uuid(seq: u64) -> uuid::Uuid {
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[..8].copy_from_slice(&seq.to_be_bytes());
    uuid::Uuid::from_bytes(bytes)
}

fn file_name(uuid: &uuid::Uuid) -> String {
    format!("{FILE_PREFIX}{}{FILE_SUFFIX}", uuid.hyphenated())
}

/// The seq of the fold that wrote the vector file `name`, `None` for any
/// other name.
pub fn file_seq(name: &str) -> Option<u64> {
    let id = name.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?;
    let uuid = uuid::Uuid::parse_str(id).ok()?;
    let b = uuid.as_bytes();
    Some(u64::from_be_bytes([
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
    ]))
}

/// The vector file a descriptor names, relative to the table folder (`u`
/// storage only: inline vectors have none, absolute ones are not ours).
pub fn descriptor_file(dv: &Value) -> Option<String> {
    if dv["storageType"].as_str() != Some("u") {
        return None;
    }
    let text = dv["pathOrInlineDv"].as_str()?;
    let split = text.len().checked_sub(20)?;
    let (prefix, id) = text.split_at_checked(split)?;
    let bytes: [u8; 16] = z85_decode(id)?.try_into().ok()?;
    let name = file_name(&uuid::Uuid::from_bytes(bytes));
    Some(if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    })
}

/// The number of rows a descriptor deletes (0 without one).
pub fn cardinality(add: &Value) -> u64 {
    add["deletionVector"]["cardinality"].as_u64().unwrap_or(0)
}

/// The vector of an `add` action of the table in `dir` (empty without one).
pub async fn read(store: &dyn ObjectStore, dir: &Path, add: &Value) -> Result<RoaringTreemap> {
    let dv = &add["deletionVector"];
    if dv.is_null() {
        return Ok(RoaringTreemap::new());
    }
    let bad = |why: String| {
        Error::Lake(format!(
            "deletion vector of {}/{}: {why}",
            dir,
            add["path"].as_str().unwrap_or("?")
        ))
    };
    let size = dv["sizeInBytes"]
        .as_u64()
        .ok_or_else(|| bad("no sizeInBytes".into()))?;
    let bytes = match dv["storageType"].as_str() {
        Some("i") => {
            let text = dv["pathOrInlineDv"].as_str().unwrap_or("");
            let mut bytes = z85_decode(text).ok_or_else(|| bad("inline data is not Z85".into()))?;
            bytes.truncate(size as usize);
            bytes
        }
        Some("u") => {
            let file =
                descriptor_file(dv).ok_or_else(|| bad("a path that is no Z85 UUID".into()))?;
            let path = file.split('/').fold(dir.clone(), |p, part| p.join(part));
            let offset = dv["offset"].as_u64().unwrap_or(1);
            let got = store
                .get_range(&path, offset..offset + 4 + size + 4)
                .await?;
            if got.len() as u64 != 4 + size + 4 {
                return Err(bad(format!("{path} is shorter than its vector")));
            }
            let stored = u32::from_be_bytes([got[0], got[1], got[2], got[3]]) as u64;
            if stored != size {
                return Err(bad(format!("{path} says {stored} bytes, the log {size}")));
            }
            let body = &got[4..4 + size as usize];
            let crc = &got[4 + size as usize..];
            if crc32fast::hash(body) != u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]) {
                return Err(bad(format!("{path}: CRC-32 mismatch")));
            }
            body.to_vec()
        }
        other => {
            return Err(bad(format!(
                "storage type {other:?}, which sluice does not read"
            )))
        }
    };
    deserialize(&bytes).map_err(bad)
}

/// The vectors of one fold: the small ones inline, the others written
/// into one file of the table folder.
pub struct VectorFile {
    uuid: uuid::Uuid,
    bytes: Vec<u8>,
    inline_bytes: u64,
}

impl VectorFile {
    pub fn new(seq: u64) -> Self {
        VectorFile {
            uuid: file_uuid(seq),
            bytes: vec![FILE_VERSION],
            inline_bytes: 0,
        }
    }

    /// Adds a vector; returns its descriptor.
    pub fn push(&mut self, rows: &RoaringTreemap) -> Value {
        let body = serialize(rows);
        if body.len() <= INLINE_MAX {
            self.inline_bytes += body.len() as u64;
            let mut padded = body.clone();
            padded.resize(body.len().div_ceil(4) * 4, 0);
            return json!({
                "storageType": "i",
                "pathOrInlineDv": z85_encode(&padded),
                "sizeInBytes": body.len(),
                "cardinality": rows.len(),
            });
        }
        let offset = self.bytes.len();
        self.bytes
            .extend_from_slice(&(body.len() as u32).to_be_bytes());
        self.bytes.extend_from_slice(&body);
        self.bytes
            .extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        json!({
            "storageType": "u",
            "pathOrInlineDv": z85_encode(self.uuid.as_bytes()),
            "offset": offset,
            "sizeInBytes": body.len(),
            "cardinality": rows.len(),
        })
    }

    /// Whether no vector goes into the file (all were inline, or none).
    pub fn is_empty(&self) -> bool {
        self.bytes.len() == 1
    }

    /// The bytes of the vectors stored inline.
    pub fn inline_bytes(&self) -> u64 {
        self.inline_bytes
    }

    pub fn path(&self, dir: &Path) -> Path {
        dir.clone().join(file_name(&self.uuid))
    }

    /// Writes the file (before the commit that names it); returns its size.
    pub async fn write(self, store: &dyn ObjectStore, dir: &Path) -> Result<u64> {
        let size = self.bytes.len() as u64;
        store
            .put(&self.path(dir), PutPayload::from(self.bytes))
            .await?;
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn z85_matches_the_zeromq_example() {
        let bytes = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(z85_encode(&bytes).as_deref(), Some("HelloWorld"));
        assert_eq!(z85_decode("HelloWorld").as_deref(), Some(&bytes[..]));
        assert_eq!(z85_decode("Hello"), Some(bytes[..4].to_vec()));
        assert_eq!(z85_decode("Hell"), None);
        assert_eq!(z85_encode(&[1, 2, 3]), None);
    }

    #[test]
    fn vectors_round_trip_with_the_portable_magic() {
        let mut rows = RoaringTreemap::new();
        rows.insert(0);
        rows.insert(7);
        rows.insert_range(1000..70_000);
        rows.insert(5u64 << 32);
        let bytes = serialize(&rows);
        assert_eq!(&bytes[..4], &1_681_511_377u32.to_le_bytes());
        // Buckets as u64 little-endian after the magic: two of them.
        assert_eq!(&bytes[4..12], &2u64.to_le_bytes());
        assert_eq!(deserialize(&bytes), Ok(rows));
        assert!(deserialize(&[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn a_file_names_its_fold_and_its_descriptor_finds_it() {
        let mut file = VectorFile::new(42);
        let rows: RoaringTreemap = (0..100u64).map(|r| r * 3).collect();
        let first = file.push(&rows);
        let second = file.push(&rows);
        assert_eq!(first["offset"], 1);
        let size = first["sizeInBytes"].as_u64().unwrap();
        assert_eq!(second["offset"].as_u64().unwrap(), 1 + 4 + size + 4);
        assert_eq!(first["cardinality"], 100);
        let name = descriptor_file(&first).unwrap();
        assert_eq!(file_seq(&name), Some(42));
        assert_eq!(file.path(&Path::from("t")).filename(), Some(name.as_str()));
        assert_ne!(first, second);
        assert_eq!(
            file_seq("current-00000000000000000042-00000-ab.parquet"),
            None
        );
    }

    #[tokio::test]
    async fn a_written_vector_reads_back_and_a_bad_crc_is_refused() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let dir = Path::from("t");
        let mut file = VectorFile::new(1);
        let rows: RoaringTreemap = (0..50u64).map(|r| r * r).chain([100_000]).collect();
        let dv = file.push(&rows);
        assert_eq!(dv["storageType"], "u");
        let path = file.path(&dir);
        file.write(store.as_ref(), &dir).await.unwrap();
        let add = json!({"path": "x.parquet", "deletionVector": dv});
        assert_eq!(read(store.as_ref(), &dir, &add).await.unwrap(), rows);
        let mut bytes = store
            .get(&path)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        store.put(&path, bytes.into()).await.unwrap();
        let err = read(store.as_ref(), &dir, &add)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("CRC-32 mismatch"), "{err}");
        // Inline vectors (another writer's) read too.
        let body = serialize(&rows);
        let mut padded = body.clone();
        padded.resize(body.len().div_ceil(4) * 4, 0);
        let inline = json!({"path": "x", "deletionVector": {"storageType": "i",
            "pathOrInlineDv": z85_encode(&padded), "sizeInBytes": body.len(), "cardinality": 51}});
        assert_eq!(read(store.as_ref(), &dir, &inline).await.unwrap(), rows);
    }

    #[tokio::test]
    async fn small_vectors_go_inline_and_leave_the_file_empty() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let dir = Path::from("t");
        let mut file = VectorFile::new(7);
        for rows in [
            RoaringTreemap::from_iter([0u64]),
            RoaringTreemap::from_iter([1u64, 5, 9, 13, 4 << 32]),
            RoaringTreemap::from_iter(0..3u64),
        ] {
            let dv = file.push(&rows);
            assert_eq!(dv["storageType"], "i", "{rows:?}");
            assert_eq!(dv["cardinality"].as_u64(), Some(rows.len()));
            let size = dv["sizeInBytes"].as_u64().unwrap() as usize;
            assert!(size <= INLINE_MAX);
            assert_eq!(
                dv["pathOrInlineDv"].as_str().unwrap().len(),
                size.div_ceil(4) * 5
            );
            assert_eq!(descriptor_file(&dv), None);
            let add = json!({"path": "x.parquet", "deletionVector": dv});
            assert_eq!(read(store.as_ref(), &dir, &add).await.unwrap(), rows);
        }
        assert!(file.is_empty());
        assert!(file.inline_bytes() > 0);
        // One row past the bound goes to the file.
        let big: RoaringTreemap = (0..INLINE_MAX as u64).map(|r| r * 2).collect();
        assert_eq!(file.push(&big)["storageType"], "u");
        assert!(!file.is_empty());
    }
}
