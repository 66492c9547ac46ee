//! Iceberg metadata beside the Delta log, over the same Parquet files
//! (DESIGN.md "Tables by name"; `[iceberg] enabled`). After each Delta
//! commit sluice writes, the table's `metadata/` folder gets an Iceberg
//! snapshot of the same version (format version 2):
//! - data manifests listing the Delta version's live files, a manifest per
//!   commit that adds files, rewritten only when a commit removes files
//!   they list, and merged into one when a table has more than
//!   [`MERGE_AT`];
//! - a current table's deletion vectors as position delete files: a
//!   commit that changes vectors writes one delete file with the whole
//!   vector of each file it changed (a vector only grows, so older delete
//!   files stay true), dropped once every file it covers is gone;
//! - the manifest list and `v<N>.metadata.json`, written put-if-absent:
//!   that write is the Iceberg commit. `version-hint.text` then names N.
//!
//! The snapshot's id is the Delta version plus one; its summary holds the
//! Delta version and the manifest seq. Delta stays the format of record:
//! the Iceberg side is followed from it and never read by sluice except to
//! continue its history. A table's state lives in memory between commits
//! (a commit costs a constant number of writes); without it (at the first
//! commit after a start, after a failure, or when another writer's commit
//! came between) the snapshot is built whole from the Delta log. A failure
//! here never fails the Delta commit: it is logged, and the next commit
//! repairs the Iceberg side.

mod avro;
mod deletes;
pub mod spec;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value;

use super::current::dv;
use super::format::{Commit, TableState};

use crate::error::{Error, Result};
use crate::sink::conditional::{put_if_absent, Created};
use avro::{Content, DataFile, ManifestFile, Status};

/// The folder of a table's Iceberg metadata.
pub const METADATA_DIR: &str = "metadata";
const VERSION_HINT: &str = "version-hint.text";
/// More manifests than this are merged into one of each kind.
pub const MERGE_AT: usize = 32;
/// Vectors read at once when a snapshot is built whole.
const READS_IN_FLIGHT: usize = 16;

/// Where the lake's files are, as readers name them.
#[derive(Debug)]
pub struct Settings {
    /// The lake root as a URI (`file:///abs/path`, `s3://bucket/prefix`),
    /// without a trailing slash.
    root: String,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Turns Iceberg metadata on for this process: every Delta commit from now
/// on is followed by its Iceberg snapshot. `root` is the lake root's URI.
pub fn enable(root: &str) {
    let _ = SETTINGS.set(Settings::new(root));
}

impl Settings {
    /// The settings of a lake whose root's URI is `root`.
    pub fn new(root: &str) -> Settings {
        Settings {
            root: root.trim_end_matches('/').to_string(),
        }
    }
}

/// The settings when Iceberg metadata is on.
pub(super) fn settings() -> Option<&'static Settings> {
    SETTINGS.get()
}

/// The Iceberg side of one table as its current snapshot holds it.
struct Table {
    delta_version: u64,
    /// N of the `v<N>.metadata.json` holding `metadata`.
    metadata_version: u64,
    metadata: Value,
    /// The Delta `schemaString` of that version.
    schema_string: String,
    manifests: Vec<Manifest>,
}

/// A manifest of the current snapshot and the files it lists (all live).
#[derive(Clone)]
struct Manifest {
    file: ManifestFile,
    entries: Vec<Entry>,
}

#[derive(Clone)]
struct Entry {
    /// The path relative to the table folder, as the Delta log names it.
    path: String,
    file: DataFile,
    /// A delete file's data files (paths as the Delta log names them).
    covers: Vec<String>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Table>>>;

static TABLES: LazyLock<Mutex<HashMap<String, Slot>>> = LazyLock::new(Default::default);

fn slot(dir: &Path) -> Slot {
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    tables.entry(dir.to_string()).or_default().clone()
}

/// The newest Iceberg metadata file of a table: what a catalog points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// N of `metadata/v<N>.metadata.json`.
    pub n: u64,
    /// Its snapshot ends the table (`sluice.ended`).
    pub ended: bool,
}

impl Head {
    fn of(t: &Table) -> Head {
        Head {
            n: t.metadata_version,
            ended: spec::ended(&t.metadata),
        }
    }
}

/// The location of `dir`'s metadata file `n` as readers name it.
pub fn metadata_location(settings: &Settings, dir: &Path, n: u64) -> String {
    format!("{}/{}", settings.root, metadata_path(dir, n))
}

/// The location of `dir`'s Iceberg metadata folder, with a trailing slash.
pub fn metadata_prefix(settings: &Settings, dir: &Path) -> String {
    format!("{}/{}/{METADATA_DIR}/", settings.root, dir)
}

/// N of a metadata location `…/v<N>.metadata.json`.
pub fn metadata_number(location: &str) -> Option<u64> {
    location
        .rsplit('/')
        .next()?
        .strip_prefix('v')?
        .strip_suffix(".metadata.json")?
        .parse()
        .ok()
}

/// After `commit` of `dir` landed in the Delta log: the Iceberg snapshot of
/// the same version, and its head when it was written. `load` reads the
/// Delta log with its files, for a snapshot built whole.
pub(super) async fn follow<L, F>(
    settings: &Settings,
    store: &dyn ObjectStore,
    dir: &Path,
    commit: &Commit,
    load: L,
) -> Option<Head>
where
    L: FnOnce() -> F,
    F: Future<Output = Result<TableState>>,
{
    let slot = slot(dir);
    let mut table = slot.lock().await;
    let location = format!("{}/{}", settings.root, dir);
    let outcome = match table.take() {
        Some(t) if t.delta_version + 1 == commit.version => {
            advance(store, dir, &location, t, commit).await.map(Some)
        }
        _ => match load().await {
            Ok(state) => rebuild(store, dir, &location, &state).await,
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(t) => {
            *table = t;
            table.as_ref().map(Head::of)
        }
        Err(e) => {
            tracing::warn!(
                table = %dir,
                version = commit.version,
                error = %e,
                "the Iceberg metadata of the table is behind its Delta log; the next commit writes it whole"
            );
            None
        }
    }
}

/// At start: when the Iceberg side of `dir` is behind its Delta log (a
/// crash between a Delta commit and its Iceberg commit, a failure, Iceberg
/// turned on for a lake that had none), its snapshot of the log's latest
/// version, built whole. Costs the head's reads and one probe of the next
/// Delta commit when nothing is behind. `next_commit` tells whether the
/// Delta log has the version after one; `load` reads the log with files.
/// The head after it (`None` when the table has no Iceberg side).
pub(super) async fn catch_up<N, NF, L, LF>(
    settings: &Settings,
    store: &dyn ObjectStore,
    dir: &Path,
    next_commit: N,
    load: L,
) -> Option<Head>
where
    N: FnOnce(u64) -> NF,
    NF: Future<Output = Result<bool>>,
    L: FnOnce() -> LF,
    LF: Future<Output = Result<TableState>>,
{
    let slot = slot(dir);
    let mut table = slot.lock().await;
    if let Some(t) = table.as_ref() {
        return Some(Head::of(t));
    }
    let location = format!("{}/{}", settings.root, dir);
    let outcome: Result<Option<Head>> = async {
        let found = head(store, dir).await?;
        let behind = match &found {
            Some((_, md)) => match spec::delta_version(md) {
                Some(v) => next_commit(v + 1).await?,
                None => true,
            },
            None => true,
        };
        if !behind {
            return Ok(found.map(|(n, md)| Head {
                n,
                ended: spec::ended(&md),
            }));
        }
        let state = load().await?;
        let t = rebuild(store, dir, &location, &state).await?;
        Ok(match t {
            Some(t) => {
                tracing::info!(table = %dir, version = t.delta_version, "the Iceberg metadata caught up with the Delta log");
                let h = Head::of(&t);
                *table = Some(t);
                Some(h)
            }
            // Already level: the head found is the one.
            None => found.map(|(n, md)| Head {
                n,
                ended: spec::ended(&md),
            }),
        })
    }
    .await;
    match outcome {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(
                table = %dir,
                error = %e,
                "could not bring the Iceberg metadata up to the Delta log; the next commit writes it whole"
            );
            None
        }
    }
}

fn metadata_path(dir: &Path, n: u64) -> Path {
    dir.clone()
        .join(METADATA_DIR)
        .join(format!("v{n}.metadata.json"))
}

/// The newest `v<N>.metadata.json` of `dir` and N: from the version hint,
/// then on past it while the next exists (a hint is written after its
/// metadata file, so it may lag by one).
async fn head(store: &dyn ObjectStore, dir: &Path) -> Result<Option<(u64, Value)>> {
    let hint = dir.clone().join(METADATA_DIR).join(VERSION_HINT);
    let hinted = match store.get(&hint).await {
        Ok(got) => {
            let text = got.bytes().await?;
            String::from_utf8_lossy(&text).trim().parse::<u64>().ok()
        }
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let mut found = None;
    let mut next = hinted.unwrap_or(1);
    loop {
        match store.get(&metadata_path(dir, next)).await {
            Ok(got) => {
                let bytes = got.bytes().await?;
                let md: Value = serde_json::from_slice(&bytes).map_err(|e| {
                    Error::Lake(format!(
                        "{}: not Iceberg table metadata: {e}",
                        metadata_path(dir, next)
                    ))
                })?;
                found = Some((next, md));
                next += 1;
            }
            Err(object_store::Error::NotFound { .. }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(found)
}

/// The number of rows of a Delta `add` (its stats' `numRecords`, else the
/// file's footer).
async fn records(store: &dyn ObjectStore, dir: &Path, add: &Value) -> Result<i64> {
    let stats = add["stats"]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    if let Some(n) = stats.as_ref().and_then(|s| s["numRecords"].as_i64()) {
        return Ok(n);
    }
    let path = add["path"].as_str().unwrap_or("");
    let file = path.split('/').fold(dir.clone(), |p, part| p.join(part));
    let facts = super::stats::file_facts(store, &file).await?;
    Ok(facts.stats["numRecords"].as_i64().unwrap_or(0))
}

/// The positions a Delta `add`'s deletion vector marks.
async fn positions(store: &dyn ObjectStore, dir: &Path, add: &Value) -> Result<Vec<u64>> {
    Ok(dv::read(store, dir, add).await?.iter().collect())
}

/// What a snapshot about to be written is.
struct Draft<'a> {
    delta_version: u64,
    manifest_seq: Option<u64>,
    operation: &'a str,
    table_uuid: String,
    schema_string: String,
    ended: bool,
}

/// The ids of the snapshot that follows `prev`: its id (the Delta version
/// plus one), its sequence number and its parent.
fn ids(prev: Option<&Value>, delta_version: u64, table_uuid: &str) -> (i64, i64, Option<i64>) {
    let prev = prev.filter(|p| p["table-uuid"] == table_uuid);
    let seq = prev
        .and_then(|p| p["last-sequence-number"].as_i64())
        .unwrap_or(0)
        + 1;
    let parent = prev.and_then(|p| p["current-snapshot-id"].as_i64());
    (delta_version as i64 + 1, seq, parent)
}

/// Writes what a snapshot needs beyond its manifests: the metadata (made
/// first: the manifests carry its schema), then the manifests `fresh` of
/// `manifests` that are new, the manifest list, and the metadata file.
async fn publish(
    store: &dyn ObjectStore,
    dir: &Path,
    location: &str,
    prev: Option<(u64, Value)>,
    draft: Draft<'_>,
    mut manifests: Vec<Manifest>,
    fresh: Vec<(usize, Vec<Status>)>,
) -> Result<Table> {
    let (id, seq, parent) = ids(
        prev.as_ref().map(|p| &p.1),
        draft.delta_version,
        &draft.table_uuid,
    );
    let now = chrono::Utc::now().timestamp_millis();
    let list_name = format!("snap-{id}-{}.avro", uuid::Uuid::new_v4().simple());
    let list_location = format!("{location}/{METADATA_DIR}/{list_name}");
    let snapshot = spec::Snapshot {
        id,
        parent,
        sequence_number: seq,
        now_ms: now,
        manifest_list: &list_location,
        operation: draft.operation,
        delta_version: draft.delta_version,
        manifest_seq: draft.manifest_seq,
        ended: draft.ended,
    }
    .to_json();
    let next = spec::Next {
        table_uuid: &draft.table_uuid,
        location,
        schema_string: &draft.schema_string,
        snapshot,
        now_ms: now,
        previous_file: prev
            .as_ref()
            .map(|(n, _)| format!("{location}/{METADATA_DIR}/v{n}.metadata.json")),
    };
    let metadata = spec::next_metadata(prev.as_ref().map(|p| &p.1), next).ok_or_else(|| {
        Error::Lake(format!(
            "{dir}: a column type Iceberg cannot hold; its Iceberg metadata stays behind"
        ))
    })?;
    let schema_id = metadata["current-schema-id"].as_i64().unwrap_or(0);
    let schema = metadata["schemas"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["schema-id"] == schema_id))
        .map(|s| s.to_string())
        .unwrap_or_default();

    let meta_dir = dir.clone().join(METADATA_DIR);
    futures::stream::iter(fresh.into_iter().map(|(at, statuses)| {
        let m = &manifests[at];
        let entries: Vec<(Status, &DataFile)> = statuses
            .into_iter()
            .zip(m.entries.iter().map(|e| &e.file))
            .collect();
        let bytes = avro::manifest(m.file.content, &entries, &schema, schema_id);
        let name = m.file.location.rsplit('/').next().unwrap_or("").to_string();
        let path = meta_dir.clone().join(name);
        async move {
            let bytes = bytes?;
            let len = bytes.len() as i64;
            store.put(&path, PutPayload::from(bytes)).await?;
            Ok::<_, Error>((at, len))
        }
    }))
    .buffer_unordered(READS_IN_FLIGHT)
    .try_collect::<Vec<_>>()
    .await?
    .into_iter()
    .for_each(|(at, len)| manifests[at].file.length = len);

    let files: Vec<&ManifestFile> = manifests.iter().map(|m| &m.file).collect();
    let list = avro::manifest_list(&files, id, parent, seq)?;
    store
        .put(&meta_dir.clone().join(list_name), PutPayload::from(list))
        .await?;

    let n = prev.as_ref().map_or(1, |(n, _)| n + 1);
    abort_before_commit();
    let body = Bytes::from(serde_json::to_vec_pretty(&metadata).unwrap_or_default());
    match put_if_absent(store, &metadata_path(dir, n), body).await? {
        Created::Written => {}
        Created::Taken(_) => {
            return Err(Error::Lake(format!(
            "{}: written by another writer; the next commit reads it and writes the snapshot again",
            metadata_path(dir, n)
        )))
        }
        Created::Unknown(e) => return Err(e.into()),
    }
    let hint = meta_dir.clone().join(VERSION_HINT);
    store.put(&hint, PutPayload::from(n.to_string())).await?;

    // What the new metadata no longer names: expired manifest lists and
    // the metadata file that fell out of the metadata log.
    if let Some((_, old)) = &prev {
        let mut gone: Vec<Path> = spec::expired(old, &metadata)
            .iter()
            .filter_map(|l| l.rsplit('/').next())
            .map(|name| meta_dir.clone().join(name))
            .collect();
        if n > spec::MAX_SNAPSHOTS as u64 + 1 {
            gone.push(metadata_path(dir, n - spec::MAX_SNAPSHOTS as u64 - 1));
        }
        for p in gone {
            if let Err(e) = store.delete(&p).await {
                tracing::debug!(file = %p, error = %e, "could not delete an expired Iceberg file");
            }
        }
    }
    Ok(Table {
        delta_version: draft.delta_version,
        metadata_version: n,
        metadata,
        schema_string: draft.schema_string,
        manifests,
    })
}

/// Tests: `SLUICE_TEST_ABORT_BEFORE_ICEBERG_COMMIT=N` aborts the process
/// before the N-th Iceberg metadata file is written (its manifests and
/// manifest list are), after the Delta commit it follows.
const ABORT_BEFORE_COMMIT: &str = "SLUICE_TEST_ABORT_BEFORE_ICEBERG_COMMIT";

fn abort_before_commit() {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(limit) = std::env::var(ABORT_BEFORE_COMMIT)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    if MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= limit {
        eprintln!("{ABORT_BEFORE_COMMIT}: aborting before Iceberg commit {limit}");
        std::process::abort();
    }
}

fn manifest_location(location: &str) -> String {
    format!(
        "{location}/{METADATA_DIR}/{}-m0.avro",
        uuid::Uuid::new_v4().simple()
    )
}

/// A manifest of `entries` written by snapshot `id` at `seq`: entries it
/// adds (`Status::Added`), or entries an older snapshot added that it
/// writes again (`Status::Existing`).
fn manifest(
    location: &str,
    content: Content,
    status: Status,
    entries: Vec<Entry>,
    (id, seq): (i64, i64),
) -> Manifest {
    let count = entries.len() as i32;
    let rows: i64 = entries.iter().map(|e| e.file.records).sum();
    let added = status == Status::Added;
    Manifest {
        file: ManifestFile {
            location: manifest_location(location),
            length: 0,
            content,
            seq,
            min_seq: entries.iter().map(|e| e.file.seq).min().unwrap_or(seq),
            added_snapshot_id: id,
            added_files: if added { count } else { 0 },
            existing_files: if added { 0 } else { count },
            added_rows: if added { rows } else { 0 },
            existing_rows: if added { 0 } else { rows },
        },
        entries,
    }
}

/// The table's metadata facts a snapshot needs from the Delta metadata.
fn delta_facts(metadata: Option<&Value>, dir: &Path) -> Result<(String, String)> {
    let md =
        metadata.ok_or_else(|| Error::Lake(format!("{dir}: the Delta log has no metaData")))?;
    let uuid = md["id"].as_str().unwrap_or_default().to_string();
    let schema = md["schemaString"].as_str().unwrap_or_default().to_string();
    Ok((uuid, schema))
}

/// The snapshot of the Delta log `state` built whole: one data manifest of
/// its live files, one delete file of all their vectors. Nothing when the
/// Iceberg side already equals that version.
async fn rebuild(
    store: &dyn ObjectStore,
    dir: &Path,
    location: &str,
    state: &TableState,
) -> Result<Option<Table>> {
    let Some(version) = state.version else {
        return Ok(None);
    };
    let prev = head(store, dir).await?;
    let (table_uuid, schema_string) = delta_facts(state.metadata.as_ref(), dir)?;
    if prev.as_ref().is_some_and(|(_, md)| {
        md["table-uuid"] == table_uuid.as_str() && spec::delta_version(md) == Some(version)
    }) {
        // Written already (a commit followed twice); the next commit
        // builds it whole, since its manifests are not in memory.
        return Ok(None);
    }
    let (id, seq, _) = ids(prev.as_ref().map(|p| &p.1), version, &table_uuid);
    let adds: Vec<Value> = state.files.values().cloned().collect();
    let facts: Vec<(i64, Vec<u64>)> =
        futures::stream::iter(adds.iter().cloned().map(|add| async move {
            let n = records(store, dir, &add).await?;
            let p = positions(store, dir, &add).await?;
            Ok::<_, Error>((n, p))
        }))
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut data = Vec::new();
    let mut vectors = Vec::new();
    for (add, (records, pos)) in adds.iter().zip(facts) {
        let path = add["path"].as_str().unwrap_or_default().to_string();
        let file = DataFile {
            location: format!("{location}/{path}"),
            records,
            size: add["size"].as_i64().unwrap_or(0),
            snapshot_id: id,
            seq,
        };
        if !pos.is_empty() {
            vectors.push((path.clone(), pos));
        }
        data.push(Entry {
            path,
            file,
            covers: vec![],
        });
    }
    let mut manifests = Vec::new();
    if !data.is_empty() {
        manifests.push(manifest(
            location,
            Content::Data,
            Status::Added,
            data,
            (id, seq),
        ));
    }
    if !vectors.is_empty() {
        manifests.push(delete_manifest(store, dir, location, vectors, id, seq).await?);
    }
    let fresh = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| (i, vec![Status::Added; m.entries.len()]))
        .collect();
    let draft = Draft {
        delta_version: version,
        manifest_seq: Some(state.applied).filter(|s| *s > 0).or_else(|| {
            state
                .txns
                .values()
                .filter_map(|t| t["version"].as_u64())
                .max()
        }),
        operation: "overwrite",
        table_uuid,
        schema_string,
        ended: state.last_info.as_ref().is_some_and(super::format::ends),
    };
    publish(store, dir, location, prev, draft, manifests, fresh)
        .await
        .map(Some)
}

/// Writes the delete file of `vectors` (data path, positions) and its
/// manifest, added by snapshot `id` at `seq`.
async fn delete_manifest(
    store: &dyn ObjectStore,
    dir: &Path,
    location: &str,
    vectors: Vec<(String, Vec<u64>)>,
    id: i64,
    seq: i64,
) -> Result<Manifest> {
    let covers: Vec<String> = vectors.iter().map(|(p, _)| p.clone()).collect();
    let rows = vectors
        .into_iter()
        .map(|(p, pos)| (format!("{location}/{p}"), pos))
        .collect();
    let (bytes, records) = deletes::position_deletes(rows)?;
    let name = format!("deletes-{}.parquet", uuid::Uuid::new_v4().simple());
    let size = bytes.len() as i64;
    store
        .put(
            &dir.clone().join(METADATA_DIR).join(name.as_str()),
            PutPayload::from(bytes),
        )
        .await?;
    let entry = Entry {
        path: format!("{METADATA_DIR}/{name}"),
        file: DataFile {
            location: format!("{location}/{METADATA_DIR}/{name}"),
            records,
            size,
            snapshot_id: id,
            seq,
        },
        covers,
    };
    Ok(manifest(
        location,
        Content::PositionDeletes,
        Status::Added,
        vec![entry],
        (id, seq),
    ))
}

/// The snapshot after `table` with `commit`: its new files in a new
/// manifest, its vectors in a new delete file, and the manifests that list
/// a file it removed written again without it.
async fn advance(
    store: &dyn ObjectStore,
    dir: &Path,
    location: &str,
    table: Table,
    commit: &Commit,
) -> Result<Table> {
    let table_uuid = table.metadata["table-uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let schema_string = match &commit.metadata {
        Some(md) => delta_facts(Some(md), dir)?.1,
        None => table.schema_string.clone(),
    };
    let (id, seq, _) = ids(Some(&table.metadata), commit.version, &table_uuid);
    let live: HashSet<&str> = table
        .manifests
        .iter()
        .filter(|m| m.file.content == Content::Data)
        .flat_map(|m| m.entries.iter().map(|e| e.path.as_str()))
        .collect();
    let mut added_paths = BTreeSet::new();
    let mut removed = BTreeSet::new();
    let mut new_data = Vec::new();
    let mut vectors = Vec::new();
    for action in &commit.files {
        if let Some(add) = action.get("add") {
            let path = add["path"].as_str().unwrap_or_default().to_string();
            added_paths.insert(path.clone());
            let pos = positions(store, dir, add).await?;
            if !live.contains(path.as_str()) {
                new_data.push(Entry {
                    path: path.clone(),
                    file: DataFile {
                        location: format!("{location}/{path}"),
                        records: records(store, dir, add).await?,
                        size: add["size"].as_i64().unwrap_or(0),
                        snapshot_id: id,
                        seq,
                    },
                    covers: vec![],
                });
            }
            if !pos.is_empty() {
                vectors.push((path, pos));
            }
        } else if let Some(p) = action.get("remove").and_then(|r| r["path"].as_str()) {
            removed.insert(p.to_string());
        }
    }
    removed.retain(|p| !added_paths.contains(p));
    let operation = if removed.is_empty() && vectors.is_empty() {
        "append"
    } else {
        "overwrite"
    };

    // The manifests that stay, those written again without the removed
    // files (or merged), and the new ones.
    let still_live = |p: &str| live.contains(p) && !removed.contains(p) || added_paths.contains(p);
    let mut manifests = Vec::new();
    let mut fresh = Vec::new();
    let mut rewrite: HashMap<bool, Vec<Entry>> = HashMap::new();
    let merge = table.manifests.len() + 2 > MERGE_AT;
    for m in table.manifests.iter() {
        let is_data = m.file.content == Content::Data;
        let keep = |e: &Entry| {
            if is_data {
                !removed.contains(&e.path)
            } else {
                e.covers.iter().any(|p| still_live(p))
            }
        };
        if !merge && m.entries.iter().all(keep) {
            manifests.push(m.clone());
        } else {
            rewrite
                .entry(is_data)
                .or_default()
                .extend(m.entries.iter().filter(|e| keep(e)).cloned());
        }
    }
    for (is_data, entries) in rewrite {
        if entries.is_empty() {
            continue;
        }
        let content = if is_data {
            Content::Data
        } else {
            Content::PositionDeletes
        };
        fresh.push((manifests.len(), vec![Status::Existing; entries.len()]));
        manifests.push(manifest(
            location,
            content,
            Status::Existing,
            entries,
            (id, seq),
        ));
    }
    if !new_data.is_empty() {
        fresh.push((manifests.len(), vec![Status::Added; new_data.len()]));
        manifests.push(manifest(
            location,
            Content::Data,
            Status::Added,
            new_data,
            (id, seq),
        ));
    }
    if !vectors.is_empty() {
        fresh.push((manifests.len(), vec![Status::Added]));
        manifests.push(delete_manifest(store, dir, location, vectors, id, seq).await?);
    }
    let draft = Draft {
        delta_version: commit.version,
        manifest_seq: commit.seq.or_else(|| {
            table.metadata["snapshots"]
                .as_array()
                .and_then(|s| s.last())
                .and_then(|s| s["summary"][spec::MANIFEST_SEQ_KEY].as_str())
                .and_then(|s| s.parse().ok())
        }),
        operation,
        table_uuid,
        schema_string,
        ended: commit.ends(),
    };
    publish(
        store,
        dir,
        location,
        Some((table.metadata_version, table.metadata)),
        draft,
        manifests,
        fresh,
    )
    .await
}
