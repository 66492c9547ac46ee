//! What `sluice status` says about the current tables: per table, the
//! manifest seq it reflects and how far it lags behind its changelog.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use serde::Serialize;

use super::{folded_seq, CURRENT_DIR};
use crate::commit::Lake;
use crate::error::Result;
use crate::table::format::{TableFormat, FORMAT};

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
    /// Why its Delta log cannot be read (then the rest is 0).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The current table of every table that has one, by `db.table`: the
/// tables read `lake.in_flight` at a time.
pub async fn current_status(lake: &Lake) -> Result<BTreeMap<String, CurrentStatus>> {
    let in_flight = lake.in_flight.max(1);
    let store: &dyn ObjectStore = lake.store.as_ref();
    let root = object_store::path::Path::from(CURRENT_DIR);
    let dbs = store.list_with_delimiter(Some(&root)).await?;
    let listed: Vec<_> = futures::stream::iter(dbs.common_prefixes)
        .map(|db| async move { store.list_with_delimiter(Some(&db)).await })
        .buffered(in_flight)
        .try_collect()
        .await?;
    let dirs = listed.into_iter().flat_map(|l| l.common_prefixes);
    let found: Vec<Option<(String, CurrentStatus)>> = futures::stream::iter(dirs)
        .map(|dir| table_status(lake, dir))
        .buffered(in_flight)
        .collect()
        .await;
    Ok(found.into_iter().flatten().collect())
}

/// `db.table` and the status of the current table at `dir`; `None` for a
/// folder that is no table's or a table with no version yet.
async fn table_status(
    lake: &Lake,
    dir: object_store::path::Path,
) -> Option<(String, CurrentStatus)> {
    let store: &dyn ObjectStore = lake.store.as_ref();
    let parts: Vec<String> = dir
        .parts()
        .skip(1)
        .map(|p| super::super::names::decode_part(p.as_ref()))
        .collect();
    let [db_name, table] = parts.as_slice() else {
        return None;
    };
    let name = format!("{db_name}.{table}");
    // One log that cannot be read is named with its error; the
    // others are still reported.
    let state = match FORMAT.load(store, &dir, false).await {
        Ok(state) => state,
        Err(e) => {
            let status = CurrentStatus {
                seq: 0,
                version: 0,
                lag_manifests: 0,
                lag_seconds: 0,
                error: e.to_string(),
            };
            return Some((name, status));
        }
    };
    let version = state.version?;
    let seq = folded_seq(&state);
    // The changelog's last manifest with files of the table.
    let changelog = object_store::path::Path::from_iter([db_name.as_str(), table.as_str()]);
    // (A changelog log that cannot be read is reported on its own.)
    let applied = FORMAT
        .load(store, &changelog, false)
        .await
        .map_or(seq, |s| s.applied);
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
    let status = CurrentStatus {
        seq,
        version,
        lag_manifests,
        lag_seconds,
        error: String::new(),
    };
    Some((name, status))
}
