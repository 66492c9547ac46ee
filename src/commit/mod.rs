//! The commit protocol (DESIGN.md "Exactly-once"): a checkpoint is one
//! manifest written put-if-absent at `_sluice/manifests/<seq>.json`. Writing
//! it *is* the commit. On start the newest manifest gives the cursor and the
//! counters, and data files no manifest lists are deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::source::Flavor;

pub const MANIFEST_DIR: &str = "_sluice/manifests";
/// The manifest format; 2 when it carries snapshot state. A lake with a
/// newer format is refused.
pub const FORMAT: u32 = 1;
pub const FORMAT_SNAPSHOT: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub seq: u64,
    pub committed_at: String,
    pub writer: Writer,
    pub source: SourceIdentity,
    pub cursor: Cursor,
    pub files: Vec<DataFile>,
    pub ddl: Vec<serde_json::Value>,
    /// Cumulative committed rows per `db.table` since the lake began.
    #[serde(default)]
    pub totals: BTreeMap<String, u64>,
    /// Zero or partly-zero dates written as null since the lake began
    /// (committed rows only). Absent from manifests of earlier versions.
    #[serde(default)]
    pub zero_dates: u64,
    /// XA transactions prepared before the cursor whose `XA COMMIT` or
    /// `XA ROLLBACK` is after it: their rows wait in held files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xa_prepared: Vec<PreparedXa>,
    /// The initial snapshot of every table it covers (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<crate::snapshot::SnapshotProgress>,
}

/// A prepared XA transaction whose outcome the stream has not reached yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreparedXa {
    /// The XA id as the server writes it: `X'gtrid',X'bqual',formatID`.
    pub xid: String,
    /// The GTID of the prepared part: its rows carry it.
    pub gtid: Option<String>,
    /// The held files of its rows, under `_sluice/xa/`.
    pub files: Vec<DataFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Writer {
    pub id: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceIdentity {
    pub flavor: Flavor,
    pub server_id: u32,
    pub server_uuid: Option<String>,
    pub version: String,
}

/// Where reading resumes, and the counters that keep `_seq`/`_tx_seq` monotonic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub file: String,
    pub pos: u64,
    pub gtid: Option<String>,
    pub next_seq: i64,
    pub next_tx_seq: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataFile {
    pub table: String,
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub schema_version: u32,
}

pub fn manifest_path(seq: u64) -> Path {
    Path::from(format!("{MANIFEST_DIR}/{seq:020}.json"))
}

/// The checkpoint sequence a data file was written for, from its name
/// `part-<seq>-<n>-<writer>.parquet`.
pub fn file_checkpoint_seq(name: &str) -> Option<u64> {
    name.strip_prefix("part-")?.split('-').next()?.parse().ok()
}

pub fn data_file_path(db: &str, table: &str, seq: u64, n: u32, writer: &str) -> Path {
    // Path::from_iter percent-encodes characters an object key should not hold.
    Path::from_iter([
        db.to_string(),
        table.to_string(),
        format!("part-{seq:020}-{n:05}-{writer}.parquet"),
    ])
}

/// The lake as the committer sees it.
pub struct Lake {
    pub store: Arc<dyn ObjectStore>,
}

impl Lake {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Lake { store }
    }

    /// The newest committed manifest, if any.
    pub async fn latest_manifest(&self) -> Result<Option<Manifest>> {
        let prefix = Path::from(MANIFEST_DIR);
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        let newest = metas
            .iter()
            .filter_map(|m| {
                let name = m.location.filename()?;
                name.strip_suffix(".json")?.parse::<u64>().ok()
            })
            .max();
        match newest {
            Some(seq) => Ok(Some(self.read_manifest(seq).await?)),
            None => Ok(None),
        }
    }

    pub async fn read_manifest(&self, seq: u64) -> Result<Manifest> {
        let path = manifest_path(seq);
        let bytes = self.store.get(&path).await?.bytes().await?;
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Lake(format!("manifest {path} is not readable: {e}")))?;
        if !(FORMAT..=FORMAT_SNAPSHOT).contains(&m.format) {
            return Err(Error::Lake(format!(
                "manifest {path} has format {}, this sluice reads formats {FORMAT} and {FORMAT_SNAPSHOT}; upgrade sluice",
                m.format
            )));
        }
        Ok(m)
    }

    /// Whether manifest `seq` is in the lake.
    pub async fn manifest_exists(&self, seq: u64) -> Result<bool> {
        match self.store.head(&manifest_path(seq)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the manifest put-if-absent. If it exists, another writer owns the lake.
    pub async fn commit(&self, manifest: &Manifest) -> Result<()> {
        let body = serde_json::to_vec_pretty(manifest)
            .map_err(|e| Error::Lake(format!("cannot encode manifest: {e}")))?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let path = manifest_path(manifest.seq);
        match self
            .store
            .put_opts(&path, PutPayload::from(body.clone()), opts)
            .await
        {
            Ok(_) => Ok(()),
            // A retried request whose first attempt landed finds our own manifest.
            Err(object_store::Error::AlreadyExists { .. }) if self.holds(&path, &body).await => {
                Ok(())
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(Error::Fenced { seq: manifest.seq })
            }
            // The answer may have been lost after the object was written: then
            // the commit happened, and its files must not be treated as orphans.
            Err(e) if self.holds(&path, &body).await => {
                tracing::warn!(%path, error = %e, "the manifest write reported an error but the manifest is in the lake: committed");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the object at `path` holds exactly `body` (every manifest
    /// carries its writer id and commit time, so no other writer's matches).
    async fn holds(&self, path: &Path, body: &[u8]) -> bool {
        match self.store.get(path).await {
            Ok(found) => found.bytes().await.is_ok_and(|b| b.as_ref() == body),
            Err(_) => false,
        }
    }

    /// Deletes data files of checkpoints that never committed: those written
    /// for a sequence above `committed` and, of `committed` itself, those its
    /// manifest does not list (a fenced writer's leftovers). Only the tail of
    /// each table folder is listed, from `part-<committed>` on.
    /// Deletes what can provably never be committed, once manifest `m` is
    /// committed: data files named for checkpoint `m.seq` that `m` does not
    /// list (a writer fenced at that seq, or one that died before it), and
    /// held XA files written for a checkpoint up to `m.seq` that `m` does not
    /// list (resolved transactions, or a dead writer's).
    ///
    /// Files named for a later checkpoint are left alone: another sidecar
    /// still running on this lake may yet commit them (it is fenced at its
    /// next commit, and deletes its own files then). So a start cleans up
    /// after the newest manifest, and after its own first commit, which
    /// fences every writer that started before it.
    pub async fn remove_orphans(&self, m: &Manifest) -> Result<Vec<Path>> {
        let listed: BTreeSet<&str> = m
            .files
            .iter()
            .chain(m.xa_prepared.iter().flat_map(|x| x.files.iter()))
            .map(|f| f.path.as_str())
            .collect();
        let mut removed = Vec::new();
        let dbs = self.store.list_with_delimiter(None).await?;
        for db in dbs.common_prefixes {
            if db.as_ref() == "_sluice" {
                continue;
            }
            let tables = self.store.list_with_delimiter(Some(&db)).await?;
            for table in tables.common_prefixes {
                let offset = table.clone().join(format!("part-{:020}", m.seq));
                let tail: Vec<_> = self
                    .store
                    .list_with_offset(Some(&table), &offset)
                    .try_collect()
                    .await?;
                for meta in tail {
                    let Some(file_seq) = meta.location.filename().and_then(file_checkpoint_seq)
                    else {
                        continue;
                    };
                    if file_seq == m.seq && !listed.contains(meta.location.as_ref()) {
                        self.store.delete(&meta.location).await?;
                        removed.push(meta.location);
                    }
                }
            }
        }
        let held: Vec<_> = self
            .store
            .list(Some(&Path::from(XA_DIR)))
            .try_collect()
            .await?;
        for meta in held {
            let written_for = meta
                .location
                .parts()
                .nth(2)
                .and_then(|p| p.as_ref().split('-').next()?.parse::<u64>().ok());
            if written_for.is_some_and(|seq| seq <= m.seq)
                && !listed.contains(meta.location.as_ref())
            {
                self.store.delete(&meta.location).await?;
                removed.push(meta.location);
            }
        }
        Ok(removed)
    }

    /// Checks, before a commit, that every file it is about to list is in the
    /// store with the size it was written with. A file that vanished means
    /// something else deletes in this lake: committing would lose its rows.
    pub async fn verify_files(&self, files: &[&DataFile]) -> Result<()> {
        let heads = futures::stream::iter(files.iter().map(|f| async move {
            let path = Path::from(f.path.as_str());
            (f, self.store.head(&path).await)
        }))
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
        for (f, head) in heads {
            match head {
                Ok(meta) if meta.size == f.bytes => {}
                Ok(meta) => {
                    return Err(Error::Lake(format!(
                        "{} holds {} bytes, {} were written: something else writes to this lake; stop any other sidecar on it and restart",
                        f.path, meta.size, f.bytes
                    )))
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::Lake(format!(
                        "{} was written for this checkpoint and is gone: something else deletes in this lake; stop any other sidecar on it and restart",
                        f.path
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Held files of prepared XA transactions: `_sluice/xa/<checkpoint seq>-<writer>-<n>/<db>/<table>.parquet`.
pub const XA_DIR: &str = "_sluice/xa";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_checkpoint_seq() {
        let p = data_file_path("shop", "orders", 42, 3, "abc123");
        assert_eq!(
            p.as_ref(),
            "shop/orders/part-00000000000000000042-00003-abc123.parquet"
        );
        assert_eq!(file_checkpoint_seq(p.filename().unwrap()), Some(42));
        assert_eq!(
            manifest_path(7).as_ref(),
            "_sluice/manifests/00000000000000000007.json"
        );
    }

    /// `zero_dates` came later: a manifest without it still validates
    /// against the schema and loads (as 0); one with it validates too.
    #[test]
    fn zero_dates_is_optional_in_the_manifest() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schemas/manifest.schema.json")).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let old = serde_json::json!({
            "format": 1,
            "seq": 3,
            "committed_at": "2026-01-01T00:00:00.000Z",
            "writer": {"id": "ab12", "version": "0.1.0"},
            "source": {"flavor": "mariadb", "server_id": 1, "server_uuid": null, "version": "10.11"},
            "cursor": {"file": "binlog.000001", "pos": 400, "gtid": "0-1-5", "next_seq": 9, "next_tx_seq": 4},
            "files": [],
            "ddl": [],
            "totals": {"shop.t": 8}
        });
        assert!(validator.is_valid(&old));
        let loaded: Manifest = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(loaded.zero_dates, 0);
        assert_eq!(loaded.totals["shop.t"], 8);

        let mut new = old;
        new["zero_dates"] = 2.into();
        assert!(validator.is_valid(&new));
        let loaded: Manifest = serde_json::from_value(new.clone()).unwrap();
        assert_eq!(loaded.zero_dates, 2);
        assert_eq!(serde_json::to_value(&loaded).unwrap()["zero_dates"], 2);
        new["zero_dates"] = (-1).into();
        assert!(!validator.is_valid(&new));
    }

    #[tokio::test]
    async fn second_commit_of_a_seq_is_fenced_and_orphans_go() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(crate::sink::open_local(dir.path()).unwrap());
        let m = Manifest {
            format: FORMAT,
            seq: 1,
            committed_at: "2026-01-01T00:00:00Z".into(),
            writer: Writer {
                id: "ab".into(),
                version: "0".into(),
            },
            source: SourceIdentity {
                flavor: Flavor::Mariadb,
                server_id: 1,
                server_uuid: None,
                version: "x".into(),
            },
            cursor: Cursor {
                file: "binlog.000001".into(),
                pos: 4,
                gtid: None,
                next_seq: 1,
                next_tx_seq: 1,
            },
            files: vec![DataFile {
                table: "shop.t".into(),
                path: "shop/t/part-00000000000000000001-00000-ab.parquet".into(),
                rows: 1,
                bytes: 1,
                schema_version: 1,
            }],
            ddl: vec![],
            totals: BTreeMap::new(),
            xa_prepared: Vec::new(),
            snapshot: None,
            zero_dates: 0,
        };
        for (seq, writer) in [(1, "ab"), (1, "cd"), (2, "ab"), (0, "ab")] {
            crate::sink::put_file(
                lake.store.as_ref(),
                &data_file_path("shop", "t", seq, 0, writer),
                vec![1],
                crate::config::DEFAULT_MULTIPART_THRESHOLD,
            )
            .await
            .unwrap();
        }
        lake.commit(&m).await.unwrap();
        // The same manifest again (a retried request whose first attempt landed) is no conflict.
        lake.commit(&m).await.unwrap();
        let mut other = m.clone();
        other.writer.id = "cd".into();
        assert!(matches!(
            lake.commit(&other).await,
            Err(Error::Fenced { seq: 1 })
        ));
        let latest = lake.latest_manifest().await.unwrap().unwrap();
        assert_eq!(latest.seq, 1);
        let mut removed: Vec<String> = lake
            .remove_orphans(&latest)
            .await
            .unwrap()
            .iter()
            .map(|p| p.to_string())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            vec!["shop/t/part-00000000000000000001-00000-cd.parquet"],
            "checkpoint 2 may still be committed by a live writer"
        );
    }
}
