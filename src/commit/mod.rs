//! The commit protocol (DESIGN.md "Exactly-once"): a checkpoint is one
//! manifest written put-if-absent at `_sluice/manifests/<seq>.json`. Writing
//! it *is* the commit. On start the newest manifest gives the cursor and the
//! counters, and data files no manifest lists are deleted.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    ListResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use crate::error::store as store_error;
use crate::error::{backoff, Error, Result};
pub use crate::lake::manifest::*;

mod newest;
pub mod retention;
pub use newest::{FoundBy, Newest, HINT_PATH};

/// Tries of one manifest write, and reads of it back, that get no answer
/// from the store before sluice stops (about a minute of backoff between
/// them; fewer in unit tests, which wait them out).
#[cfg(not(test))]
pub const COMMIT_ATTEMPTS: u32 = 8;
#[cfg(test)]
pub const COMMIT_ATTEMPTS: u32 = 3;

/// The `writer.id` of a manifest's bytes (read loosely: any format).
fn writer_id(manifest: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(manifest).ok()?;
    Some(v.pointer("/writer/id")?.as_str()?.to_owned())
}

/// The data files a local lake holds for checkpoint `seq` that `listed`
/// (file names) does not name, and the staging files (`part-<seq>-…
/// parquet#<n>`) of uploads a kill cut short: none can ever be committed
/// once `seq` is. Deleted, and returned. One directory read a table: an
/// object listing walks each table's `_delta_log/` too (0.7 s for 10,000
/// tables).
fn remove_local_orphans(
    root: &std::path::Path,
    seq: u64,
    listed: &BTreeSet<String>,
) -> Result<Vec<Path>> {
    let dirs = |dir: &std::path::Path, all: bool| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| all || !matches!(e.file_name().to_str(), Some("_sluice" | "_current")))
            .map(|e| e.path())
            .collect()
    };
    let mut removed = Vec::new();
    for db in dirs(root, false) {
        for table in dirs(&db, true) {
            for entry in std::fs::read_dir(&table).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let orphan = match name.rsplit_once('#') {
                    Some((file, n)) => {
                        !n.is_empty()
                            && n.bytes().all(|b| b.is_ascii_digit())
                            && file_checkpoint_seq(file) == Some(seq)
                    }
                    None => file_checkpoint_seq(&name) == Some(seq) && !listed.contains(&name),
                };
                if !orphan {
                    continue;
                }
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => removed.push(Path::from(entry.path().to_string_lossy().as_ref())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::Lake(format!(
                            "cannot remove the uncommitted file {}: {e}",
                            entry.path().display()
                        )))
                    }
                }
            }
        }
    }
    Ok(removed)
}

/// The lake as the committer sees it.
pub struct Lake {
    pub store: Arc<dyn ObjectStore>,
    /// The root directory of a local lake. The local store stages every
    /// upload as `<file>#<n>` and renames it when complete; a kill in
    /// between leaves the staging file, which the store's listing hides.
    pub local_root: Option<std::path::PathBuf>,
    /// How many requests of per-file and per-table work go out at once
    /// (`[sink] requests_in_flight`).
    pub in_flight: usize,
}

impl Lake {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Lake {
            store,
            local_root: None,
            in_flight: crate::config::DEFAULT_REQUESTS_IN_FLIGHT,
        }
    }

    /// The lake named by `[sink]`.
    pub fn open(sink: &crate::config::SinkConfig) -> Result<Self> {
        let mut lake = Lake::new(crate::sink::open_store(sink)?);
        lake.in_flight = sink.requests_in_flight;
        if let crate::config::LakeLocation::Local(root) = &sink.location {
            lake.local_root = Some(root.clone());
        }
        Ok(lake)
    }

    /// Removes the empty `_sluice/_delta_log/` folder that the put-if-absent
    /// probe of earlier releases left in a local lake (object stores have no
    /// folders, so only a local lake has one). A folder that holds anything
    /// is not sluice's and stays.
    pub fn remove_old_probe_folder(&self) {
        let Some(root) = &self.local_root else {
            return;
        };
        let folder = root.join(crate::sink::OLD_PROBE_DIR);
        match std::fs::remove_dir(&folder) {
            Ok(()) => {
                tracing::info!(folder = %folder.display(), "removed the empty folder an earlier release's store probe left")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(folder = %folder.display(), error = %e, "left a folder named like a Delta log in _sluice/ as it is")
            }
        }
    }

    /// The newest committed manifest, if any, found without a listing of
    /// the manifests (see [`Lake::newest_seq`]).
    pub async fn latest_manifest(&self) -> Result<Option<Manifest>> {
        let found = self.newest_seq().await?;
        tracing::debug!(seq = ?found.seq, found_by = ?found.found_by, requests = found.requests, "newest manifest");
        match found.seq {
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

    /// The manifests after `after` up to `newest` (itself included) that may
    /// have files or DDL, oldest first: it follows `last_change` back from
    /// `newest`, so an idle spell costs no read, and reads one by one where
    /// a manifest does not say (an earlier release's). Manifests below the
    /// retention floor are gone and none is read; a hole (a retention round
    /// a crash ended, a lake copied from another) is skipped. Also returns
    /// how many manifests it read.
    pub async fn changes_after(
        &self,
        after: u64,
        newest: &Manifest,
    ) -> Result<(Vec<Manifest>, u64)> {
        let after = after.max(self.manifest_floor().await?.saturating_sub(1));
        let mut out = Vec::new();
        let mut reads = 0;
        if newest.seq <= after {
            return Ok((out, reads));
        }
        out.push(newest.clone());
        // The oldest manifest read so far, and what it says came before it;
        // below `unknown` nothing is said (one by one from there down).
        let (mut oldest, mut link) = (newest.seq, newest.last_change);
        let unknown = loop {
            match link {
                Some(seq) if seq <= after => break after + 1,
                Some(seq) if seq < oldest => match self.read_manifest(seq).await {
                    Ok(m) => {
                        reads += 1;
                        (oldest, link) = (m.seq, m.last_change);
                        if m.has_changes() {
                            out.push(m);
                        }
                    }
                    Err(Error::Store(object_store::Error::NotFound { .. })) => break seq,
                    Err(e) => return Err(e),
                },
                _ => break oldest,
            }
        };
        for seq in (after + 1..unknown).rev() {
            reads += 1;
            match self.read_manifest(seq).await {
                Ok(m) if m.has_changes() => out.push(m),
                Ok(_) => {}
                Err(Error::Store(object_store::Error::NotFound { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        out.reverse();
        Ok((out, reads))
    }

    /// Whether manifest `seq` is in the lake and another writer's than `writer`.
    pub async fn taken_by_other(&self, seq: u64, writer: &str) -> Result<bool> {
        match self.store.get(&manifest_path(seq)).await {
            Ok(found) => Ok(writer_id(&found.bytes().await?).as_deref() != Some(writer)),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
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
    ///
    /// A PUT that fails without an answer (a timeout, a connection cut after
    /// the request went out) may have landed, and object_store resends a
    /// request whose answer was lost, so the resend can meet our own
    /// manifest. Either way the manifest is read back before anything else:
    /// our exact bytes mean the commit happened; another writer's id means
    /// fenced; nothing there means the PUT is sent again. Only an answer
    /// ends this: if the store gives none for [`COMMIT_ATTEMPTS`] tries the
    /// error is definite, because the caller's rewind (forget, re-read,
    /// delete what it wrote) would be wrong over a manifest that exists.
    pub async fn commit(&self, manifest: &Manifest) -> Result<()> {
        let body = Bytes::from(
            serde_json::to_vec_pretty(manifest)
                .map_err(|e| Error::Lake(format!("cannot encode manifest: {e}")))?,
        );
        let path = manifest_path(manifest.seq);
        let mut failures = 0;
        loop {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            let failed = match self
                .store
                .put_opts(&path, PutPayload::from(body.clone()), opts)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e @ object_store::Error::AlreadyExists { .. }) => e,
                Err(e) if store_error::is_transient(&e) => e,
                Err(e) => return Err(e.into()),
            };
            match self.read_back(manifest.seq, &mut failures).await? {
                Some(found) if found == body => {
                    if !matches!(failed, object_store::Error::AlreadyExists { .. }) {
                        tracing::warn!(%path, kind = %crate::error::HasKind::error_kind(&failed), error = %Error::Store(failed), "the manifest write got no answer, but the manifest is in the lake: committed");
                    }
                    return Ok(());
                }
                Some(found) => {
                    if writer_id(&found).as_deref() == Some(manifest.writer.id.as_str()) {
                        // Only a PUT that landed after a read found nothing can do this.
                        return Err(Error::Lake(format!(
                            "manifest {path} was committed by an earlier attempt of this sidecar with other contents; restart sluice: it resumes from that manifest"
                        )));
                    }
                    return Err(Error::Fenced { seq: manifest.seq });
                }
                None => {
                    failures += 1;
                    if failures >= COMMIT_ATTEMPTS {
                        // Read back as absent: nothing is committed, the caller may rewind.
                        return Err(failed.into());
                    }
                    let delay = backoff(failures);
                    tracing::warn!(%path, kind = %crate::error::HasKind::error_kind(&failed), error = %Error::Store(failed), retry_in = ?delay, "the manifest write failed and the manifest is not in the lake: writing it again");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// The bytes of manifest `seq`, `None` if there is none. Transient errors
    /// are retried (counted in `failures`); running out of tries is definite.
    async fn read_back(&self, seq: u64, failures: &mut u32) -> Result<Option<Bytes>> {
        let path = manifest_path(seq);
        loop {
            let read = match self.store.get(&path).await {
                Ok(found) => found.bytes().await,
                Err(e) => Err(e),
            };
            let e = match read {
                Ok(bytes) => return Ok(Some(bytes)),
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) if store_error::is_transient(&e) => e,
                Err(e) => return Err(e.into()),
            };
            *failures += 1;
            if *failures >= COMMIT_ATTEMPTS {
                return Err(Error::Lake(format!(
                    "cannot tell whether manifest {path} was committed: the object store did not answer {COMMIT_ATTEMPTS} tries ({}); restart sluice once the store answers: it resumes from the lake",
                    store_error::explain(&e)
                )));
            }
            let delay = backoff(*failures);
            tracing::warn!(%path, kind = %crate::error::HasKind::error_kind(&e), error = %Error::Store(e), retry_in = ?delay, "cannot read back the manifest just written: retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// An object store's data files for checkpoint `m.seq` that `listed`
    /// does not name, deleted: every table folder's files from the seq's
    /// name on, the folders listed several at once (a lake of many tables
    /// pays round trips, not one per table).
    async fn remove_listed_orphans(
        &self,
        m: &Manifest,
        listed: &BTreeSet<&str>,
    ) -> Result<Vec<Path>> {
        let in_flight = self.in_flight;
        let dbs = self.store.list_with_delimiter(None).await?;
        let store = self.store.as_ref();
        let tables: Vec<ListResult> = futures::stream::iter(
            dbs.common_prefixes
                .into_iter()
                .filter(|db| db.as_ref() != "_sluice"),
        )
        .map(|db| async move { store.list_with_delimiter(Some(&db)).await })
        .buffered(in_flight)
        .try_collect()
        .await?;
        let tails: Vec<Vec<ObjectMeta>> =
            futures::stream::iter(tables.into_iter().flat_map(|t| t.common_prefixes))
                .map(|table| async move {
                    let offset = table.clone().join(format!("part-{:020}", m.seq));
                    store
                        .list_with_offset(Some(&table), &offset)
                        .try_collect()
                        .await
                })
                .buffered(in_flight)
                .try_collect()
                .await?;
        let mut removed = Vec::new();
        for meta in tails.into_iter().flatten() {
            let Some(file_seq) = meta.location.filename().and_then(file_checkpoint_seq) else {
                continue;
            };
            if file_seq == m.seq && !listed.contains(meta.location.as_ref()) {
                self.store.delete(&meta.location).await?;
                removed.push(meta.location);
            }
        }
        Ok(removed)
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
        let mut removed = match &self.local_root {
            Some(root) => {
                let (root, seq) = (root.clone(), m.seq);
                let names: BTreeSet<String> = listed
                    .iter()
                    .filter_map(|p| p.rsplit('/').next())
                    .map(str::to_owned)
                    .collect();
                tokio::task::spawn_blocking(move || remove_local_orphans(&root, seq, &names))
                    .await
                    .map_err(|e| {
                        Error::Lake(format!("the scan for uncommitted files failed: {e}"))
                    })??
            }
            None => self.remove_listed_orphans(m, &listed).await?,
        };
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
            let path = stored_path(&f.path);
            (f, self.store.head(&path).await)
        }))
        .buffer_unordered(self.in_flight)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::binlog::Flavor;
    use std::collections::BTreeMap;

    /// A local lake's scan for uncommitted files takes the staging files
    /// of the committed seq and its data files the manifest does not list;
    /// listed files, other seqs' files, other names, a table folder named
    /// like a reserved one inside a database, and `_sluice/` stay.
    #[test]
    fn a_local_lake_loses_only_the_unlisted_and_staging_files_of_the_committed_seq() {
        let root = tempfile::tempdir().unwrap();
        let table = root.path().join("shop").join("orders");
        let underscored = root.path().join("shop").join("_current");
        std::fs::create_dir_all(&table).unwrap();
        std::fs::create_dir_all(&underscored).unwrap();
        std::fs::create_dir_all(root.path().join("_sluice")).unwrap();
        let name = |seq: u64, n: u32| {
            data_file_path("shop", "orders", seq, n, "w1")
                .filename()
                .unwrap()
                .to_string()
        };
        let files = [
            format!("{}#1", name(5, 0)),
            format!("{}#12", name(5, 1)),
            name(5, 4),
            format!("{}#1", name(6, 0)),
            name(5, 2),
            format!("{}#x", name(5, 3)),
            name(6, 5),
        ];
        for f in &files {
            std::fs::write(table.join(f), b"x").unwrap();
        }
        std::fs::write(underscored.join(name(5, 6)), b"x").unwrap();
        std::fs::write(
            root.path()
                .join("_sluice")
                .join(format!("{}#1", name(5, 0))),
            b"x",
        )
        .unwrap();
        let listed = BTreeSet::from([name(5, 2)]);
        let removed = remove_local_orphans(root.path(), 5, &listed).unwrap();
        assert_eq!(removed.len(), 4, "{removed:?}");
        let mut left: Vec<String> = std::fs::read_dir(&table)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut expected = files[3..].to_vec();
        expected.sort();
        assert_eq!(left, expected);
        assert!(!underscored.join(name(5, 6)).exists());
        assert!(root
            .path()
            .join("_sluice")
            .join(format!("{}#1", name(5, 0)))
            .exists());
    }

    #[test]
    fn names_carry_the_checkpoint_seq() {
        let p = data_file_path("shop", "orders", 42, 3, "abc123");
        assert_eq!(
            p.as_ref(),
            "shop/orders/part-00000000000000000042-00003-abc123.parquet"
        );
        assert_eq!(file_checkpoint_seq(p.filename().unwrap()), Some(42));
        // delta-rs's OPTIMIZE output in the same folder is not a checkpoint's.
        assert_eq!(
            file_checkpoint_seq(
                "part-00001-8d5c6b4e-2f6a-4c1e-9d0b-3c1f2a9e7b11-c000.zstd.parquet"
            ),
            None
        );
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
        assert_eq!(loaded.types, 0, "the first release wrote no `types`");
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

    /// `column_policies` is written only when a policy changed, and each
    /// entry names the table, the column and both policies.
    #[test]
    fn column_policies_are_optional_in_the_manifest() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schemas/manifest.schema.json")).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let mut m = serde_json::to_value(manifest(3, "ab")).unwrap();
        assert!(m.get("column_policies").is_none());
        assert!(validator.is_valid(&m));
        m["column_policies"] = serde_json::json!([
            {"table": "shop.users", "column": "email", "from": "none", "to": "hash"},
            {"table": "shop.users", "column": "name", "from": "truncate(4)", "to": "none"},
        ]);
        assert!(validator.is_valid(&m));
        let loaded: Manifest = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(loaded.column_policies.len(), 2);
        m["column_policies"][0]["to"] = "truncate(0)".into();
        assert!(!validator.is_valid(&m));
        m["column_policies"][0]["to"] = "hash".into();
        m["column_policies"][0]["key"] = "secret".into();
        assert!(!validator.is_valid(&m));
    }

    fn manifest(seq: u64, writer: &str) -> Manifest {
        Manifest {
            format: FORMAT,
            seq,
            committed_at: "2026-01-01T00:00:00Z".into(),
            writer: Writer {
                id: writer.into(),
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
                path: data_file_path("shop", "t", seq, 0, writer).to_string(),
                rows: 1,
                bytes: 1,
                schema_version: 1,
            }],
            ddl: vec![],
            totals: BTreeMap::new(),
            xa_prepared: Vec::new(),
            snapshot: None,
            snapshot_requests: Vec::new(),
            filter: None,
            column_policies: Vec::new(),
            erasures: Vec::new(),
            zero_dates: 0,
            types: TYPES,
            last_change: None,
        }
    }

    #[tokio::test]
    async fn second_commit_of_a_seq_is_fenced_and_orphans_go() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::new(crate::sink::open_local(dir.path()).unwrap());
        let m = manifest(1, "ab");
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

    /// `changes_after` returns exactly the manifests with files or DDL after
    /// a seq (and the newest), whatever mix of linked manifests, manifests
    /// of an earlier release (no link) and holes the lake has, and reads
    /// only those plus the unlinked ones.
    #[tokio::test]
    async fn changes_after_skips_idle_spells_and_finds_every_change() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = std::env::var("SLUICE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x1d1e);
        for case in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ case);
            let dir = tempfile::tempdir().unwrap();
            let lake = Lake::new(crate::sink::open_local(dir.path()).unwrap());
            let n: u64 = rng.gen_range(1..120);
            // The first `old` manifests are an earlier release's: no link.
            let old: u64 = rng.gen_range(0..=n.min(10));
            let mut written: Vec<Manifest> = Vec::new();
            for seq in 1..=n {
                let mut m = manifest(seq, "ab");
                match rng.gen_range(0..10) {
                    0 => m.ddl = vec![serde_json::json!({"sql": "DROP TABLE t"})],
                    1 | 2 => {}
                    _ => m.files.clear(),
                }
                if seq > old {
                    m.last_change = written.last().map(Manifest::last_change_after);
                }
                let body = serde_json::to_vec(&m).unwrap();
                lake.store
                    .put(&manifest_path(seq), body.into())
                    .await
                    .unwrap();
                written.push(m);
            }
            // Holes: a crashed retention round, a lake copied from another.
            let mut gone = std::collections::BTreeSet::new();
            for _ in 0..rng.gen_range(0..3) {
                let seq = rng.gen_range(1..=n);
                if seq < n && gone.insert(seq) {
                    lake.store.delete(&manifest_path(seq)).await.unwrap();
                }
            }
            let newest = written.last().unwrap();
            let after = rng.gen_range(0..=n);
            let (found, reads) = lake.changes_after(after, newest).await.unwrap();
            let want: Vec<u64> = written
                .iter()
                .filter(|m| m.seq > after && !gone.contains(&m.seq))
                .filter(|m| m.has_changes() || m.seq == n)
                .map(|m| m.seq)
                .collect();
            let got: Vec<u64> = found.iter().map(|m| m.seq).collect();
            assert_eq!(
                got, want,
                "seed {seed} case {case}: n={n} old={old} after={after} gone={gone:?}"
            );
            // A hole in the chain is read past one by one.
            let changed = want.len() as u64;
            let bound = changed + old.saturating_sub(after);
            assert!(
                !gone.is_empty() || reads <= bound,
                "seed {seed} case {case}: {reads} reads for {changed} changed manifests (n={n} old={old} after={after})"
            );
        }
    }

    /// A manifest write whose answer is lost, and whose read back fails too,
    /// is our commit: never "fenced", nothing written again.
    #[tokio::test]
    async fn lost_answer_to_a_manifest_write_is_our_commit() {
        use crate::sink::testing::{Faults, FaultyStore};
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FaultyStore {
            inner: crate::sink::open_local(dir.path()).unwrap(),
            faults: Faults::default(),
        });
        let lake = Lake::new(store.clone());
        let faults = &store.faults;

        faults.lost_answers.store(1, Ordering::SeqCst);
        faults.failed_gets.store(1, Ordering::SeqCst);
        lake.commit(&manifest(1, "ab")).await.unwrap();
        assert_eq!(faults.lost_answers.load(Ordering::SeqCst), 0);
        assert_eq!(faults.failed_gets.load(Ordering::SeqCst), 0);
        let m1 = lake.read_manifest(1).await.unwrap();
        assert_eq!(m1.writer.id, "ab");

        // The write never landed: it is sent again.
        faults.failed_creates.store(1, Ordering::SeqCst);
        lake.commit(&manifest(2, "ab")).await.unwrap();
        assert_eq!(faults.failed_creates.load(Ordering::SeqCst), 0);
        assert_eq!(lake.latest_manifest().await.unwrap().unwrap().seq, 2);

        // Another writer's manifest behind a write without an answer: fenced.
        let theirs = serde_json::to_vec_pretty(&manifest(3, "cd")).unwrap();
        store
            .inner
            .put(&manifest_path(3), PutPayload::from(theirs.clone()))
            .await
            .unwrap();
        faults.failed_creates.store(1, Ordering::SeqCst);
        assert!(matches!(
            lake.commit(&manifest(3, "ab")).await,
            Err(Error::Fenced { seq: 3 })
        ));
        assert!(lake.taken_by_other(3, "ab").await.unwrap());
        assert!(!lake.taken_by_other(1, "ab").await.unwrap());
        assert!(!lake.taken_by_other(9, "ab").await.unwrap());

        // Our own manifest from another try (a write that landed after a
        // read found nothing) is not "fenced" either, and not overwritten.
        let mut earlier = manifest(4, "ab");
        earlier.committed_at = "2026-01-01T00:00:01Z".into();
        lake.commit(&earlier).await.unwrap();
        let err = lake.commit(&manifest(4, "ab")).await.unwrap_err();
        assert!(
            !matches!(err, Error::Fenced { .. }) && !err.is_transient(),
            "{err}"
        );
        assert_eq!(
            lake.read_manifest(4).await.unwrap().committed_at,
            earlier.committed_at
        );

        // No answer at all: whether the manifest landed is unknown, which is
        // definite (a rewind would forget a commit that may exist).
        faults.failed_creates.store(1, Ordering::SeqCst);
        faults.failed_gets.store(u32::MAX, Ordering::SeqCst);
        let err = lake.commit(&manifest(5, "ab")).await.unwrap_err();
        assert!(!err.is_transient(), "{err}");
        assert!(
            err.to_string().contains("cannot tell whether manifest"),
            "{err}"
        );
        faults.failed_gets.store(0, Ordering::SeqCst);
        assert!(!lake.manifest_exists(5).await.unwrap());
    }
}
