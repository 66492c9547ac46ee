//! What `sluice status` says about the current tables: per table, the
//! manifest seq it reflects and how far it lags behind its changelog.

use std::collections::BTreeMap;

use object_store::ObjectStore;
use serde::Serialize;

use super::{folded_seq, log, CURRENT_DIR};
use crate::commit::Lake;
use crate::error::Result;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CurrentStatus {
    /// The manifest seq the latest version reflects.
    pub seq: u64,
    /// The latest Delta version.
    pub version: u64,
    /// The newest manifest seq with changes of the table minus `seq`
    /// (0: current).
    pub lag_manifests: u64,
    /// Seconds since the oldest change not folded yet was committed (0: current).
    pub lag_seconds: i64,
}

/// The current table of every table that has one, by `db.table`.
pub async fn current_status(lake: &Lake) -> Result<BTreeMap<String, CurrentStatus>> {
    let store: &dyn ObjectStore = lake.store.as_ref();
    let mut out = BTreeMap::new();
    let root = object_store::path::Path::from(CURRENT_DIR);
    let dbs = store.list_with_delimiter(Some(&root)).await?;
    for db in dbs.common_prefixes {
        let tables = store.list_with_delimiter(Some(&db)).await?;
        for dir in tables.common_prefixes {
            let state = log::load(store, &dir, false).await?;
            let Some(version) = state.version else {
                continue;
            };
            let parts: Vec<String> = dir
                .parts()
                .skip(1)
                .map(|p| super::super::decode_part(p.as_ref()))
                .collect();
            let [db_name, table] = parts.as_slice() else {
                continue;
            };
            let seq = folded_seq(&state);
            // The changelog's last manifest with files of the table.
            let changelog = object_store::path::Path::from_iter([db_name.as_str(), table.as_str()]);
            let applied = log::load(store, &changelog, false).await?.applied;
            let (lag_manifests, lag_seconds) = if applied > seq {
                let since = match lake.read_manifest(seq + 1).await {
                    Ok(m) => chrono::DateTime::parse_from_rfc3339(&m.committed_at)
                        .map(|t| (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
                        .unwrap_or(0),
                    Err(_) => 0,
                };
                (applied - seq, since.max(0))
            } else {
                (0, 0)
            };
            out.insert(
                format!("{db_name}.{table}"),
                CurrentStatus {
                    seq,
                    version,
                    lag_manifests,
                    lag_seconds,
                },
            );
        }
    }
    Ok(out)
}
