//! `sluice snapshot DB.TABLE… [--replace]`: a request object in the lake,
//! `_sluice/requests/<id>.json`, that the running sidecar adopts (DESIGN.md,
//! "Initial snapshot").
//!
//! The lake is the only channel between the command and the sidecar, so a
//! request written while sluice is stopped waits there for the next start,
//! and one written to an S3 lake reaches a sidecar on another machine. Its
//! life:
//!
//! 1. the command writes it put-if-absent under a name no other request has;
//! 2. the sidecar lists the requests every `[flush] interval` (and at start),
//!    and adopts those that no committed manifest names: their tables'
//!    snapshots start, and the next manifest lists the request's id in
//!    `snapshot_requests`;
//! 3. once that manifest is committed the object is deleted. A request that a
//!    committed manifest names is never adopted again, so a crash between the
//!    commit and the delete only leaves an object the next listing deletes.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::config::{Config, TableFilter};
use crate::error::{Error, Result};
use crate::sink::conditional::{put_if_absent, Created};

pub const REQUEST_DIR: &str = "_sluice/requests";

/// One request, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// `db.table` names, each captured by the filter when it was written.
    pub tables: Vec<String>,
    /// Restart the tables' rows: a `truncate` marker precedes the new
    /// snapshot's first chunk.
    #[serde(default)]
    pub replace: bool,
    /// When the request was written (RFC 3339, UTC).
    pub requested_at: String,
}

pub fn request_path(id: &str) -> Path {
    Path::from(format!("{REQUEST_DIR}/{id}.json"))
}

/// The names as `db.table`, each once, or why one cannot be asked for.
pub fn check_tables(
    filter: &TableFilter,
    tables: &[String],
) -> std::result::Result<Vec<String>, String> {
    if tables.is_empty() {
        return Err("name at least one table as DB.TABLE".into());
    }
    let mut out: Vec<String> = Vec::new();
    for t in tables {
        let (db, name) = match t.split_once('.') {
            Some((db, name)) if !db.is_empty() && !name.is_empty() => (db, name),
            _ => return Err(format!("`{t}` is not a table name of the form DB.TABLE")),
        };
        if !filter.captures(db, name) {
            return Err(format!(
                "{t} is not captured ([filter] include/exclude leave it out): only captured tables can be snapshotted; widen the filter instead ([snapshot] new_tables decides whether a newly captured table is read)"
            ));
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.clone());
        }
    }
    Ok(out)
}

/// The names with each routed lake table (DESIGN.md "Shard routing") that
/// is not itself a captured table in place of its shards: the captured
/// tables of the source that `[[routes]]` write into it.
async fn routed_shards(config: &Config, tables: &[String]) -> Result<Vec<String>> {
    if config.routes.is_empty() {
        return Ok(tables.to_vec());
    }
    let mut conn = crate::source::connect(&config.source).await?;
    let captured = crate::schema::bootstrap::table_names(&mut conn, &config.filter).await?;
    let mut out = Vec::new();
    for t in tables {
        let real = t
            .split_once('.')
            .is_some_and(|(db, name)| captured.contains_key(&(db.to_string(), name.to_string())));
        let shards: Vec<String> = match real {
            true => Vec::new(),
            false => captured
                .keys()
                .filter(|(db, name)| {
                    config
                        .routes
                        .target(db, name)
                        .is_ok_and(|r| r.is_some_and(|r| r.qualified_name() == *t))
                })
                .map(|(db, name)| format!("{db}.{name}"))
                .collect(),
        };
        match shards.is_empty() {
            true => out.push(t.clone()),
            false => out.extend(shards),
        }
    }
    Ok(out)
}

/// Writes `request` under a new name and returns its id: the time it was
/// asked for (so listings come oldest first) and a random part.
pub async fn put(store: &dyn ObjectStore, request: &SnapshotRequest) -> Result<String> {
    let body = serde_json::to_vec_pretty(request)
        .map_err(|e| Error::Lake(format!("cannot encode a snapshot request: {e}")))?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%3fZ");
    let id = format!(
        "{stamp}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    // A lost answer resent meets this very request: the store layer reads
    // it back (`sink::conditional`); its random id keeps any other out.
    match put_if_absent(store, &request_path(&id), body.into()).await? {
        Created::Written => Ok(id),
        Created::Taken(_) => Err(Error::Request(format!(
            "the request name {id} is taken by another request; ask again"
        ))),
        Created::Unknown(e) => Err(e.into()),
    }
}

/// A request object as listed: its id, and the request or why it cannot be
/// read.
pub type Listed = (String, std::result::Result<SnapshotRequest, String>);

/// Every request in the lake, oldest first.
pub async fn list(store: &dyn ObjectStore) -> Result<Vec<Listed>> {
    let prefix = Path::from(REQUEST_DIR);
    let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
    let mut ids: Vec<String> = metas
        .iter()
        .filter_map(|m| {
            m.location
                .filename()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let bytes = match store.get(&request_path(&id)).await {
            Ok(found) => found.bytes().await?,
            // Deleted since the listing: adopted by a sidecar that just committed.
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let parsed = serde_json::from_slice::<SnapshotRequest>(&bytes)
            .map_err(|e| format!("not a snapshot request: {e}"));
        out.push((id, parsed));
    }
    Ok(out)
}

/// Deletes a request object; one already gone is fine.
pub async fn delete(store: &dyn ObjectStore, id: &str) -> Result<()> {
    match store.delete(&request_path(id)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `sluice snapshot`: checks the names against the filter, then writes the
/// request. Nothing is written when a name is refused. Returns the line to
/// print.
pub async fn request(config: &Config, tables: &[String], replace: bool) -> Result<String> {
    let tables = routed_shards(config, tables).await?;
    let tables = check_tables(&config.filter, &tables).map_err(Error::Request)?;
    let lake = crate::commit::Lake::open(&config.sink)?;
    // A lake this binary cannot read (a newer format) is refused here too:
    // the sidecar that reads it would not know the request either.
    lake.latest_manifest().await?;
    let request = SnapshotRequest {
        tables: tables.clone(),
        replace,
        requested_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    };
    let id = put(lake.store.as_ref(), &request).await?;
    Ok(format!(
        "snapshot request {id} for {}{}: the running sidecar adopts it within [flush] interval (a stopped one at its next start); `sluice status` shows its progress",
        tables.join(", "),
        if replace { " (replace)" } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::PutPayload;
    use std::sync::Arc;

    #[test]
    fn names_are_checked_against_the_filter() {
        let f = TableFilter::new(&[r"shop\..*".into()], &[r"shop\.secret".into()]).unwrap();
        let ok = check_tables(&f, &["shop.a".into(), "shop.b".into(), "shop.a".into()]).unwrap();
        assert_eq!(ok, vec!["shop.a".to_string(), "shop.b".to_string()]);
        let e = check_tables(&f, &["shop.secret".into()]).unwrap_err();
        assert!(e.starts_with("shop.secret is not captured"), "{e}");
        let e = check_tables(&f, &["other.t".into()]).unwrap_err();
        assert!(e.starts_with("other.t is not captured"), "{e}");
        let e = check_tables(&f, &["shop".into()]).unwrap_err();
        assert!(e.contains("DB.TABLE"), "{e}");
        assert!(check_tables(&f, &[]).is_err());
    }

    #[tokio::test]
    async fn requests_are_listed_oldest_first_and_deleted() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let req = |t: &str| SnapshotRequest {
            tables: vec![t.into()],
            replace: t.ends_with('b'),
            requested_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let a = put(store.as_ref(), &req("shop.a")).await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = put(store.as_ref(), &req("shop.b")).await.unwrap();
        assert_ne!(a, b);
        store
            .put(&request_path("junk"), PutPayload::from(b"{}".to_vec()))
            .await
            .unwrap();
        let listed = list(store.as_ref()).await.unwrap();
        let ids: Vec<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, vec![a.as_str(), b.as_str(), "junk"]);
        assert_eq!(listed[0].1.as_ref().unwrap(), &req("shop.a"));
        assert!(listed[1].1.as_ref().unwrap().replace);
        assert!(listed[2].1.is_err());
        delete(store.as_ref(), &a).await.unwrap();
        delete(store.as_ref(), &a).await.unwrap();
        let ids: Vec<String> = list(store.as_ref())
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, vec![b, "junk".to_string()]);
    }
}
