//! How far each table's Delta log lags its manifests (DESIGN.md "The Delta
//! logs stay right"): kept by the running sidecar from its own commits
//! ([`Lags`], for `/metrics`, the status page and `/readyz`), and read from
//! the lake for `sluice status` ([`lake_lags`]).

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::Serialize;

use super::{by_table, has_data_files, log, table_dirs, table_names, TableState};
use crate::commit::{Lake, Manifest};
use crate::error::{Error, Result};

/// One table whose Delta log lacks the commits of some manifests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeltaLag {
    /// `db.table`.
    pub table: String,
    /// Manifests with files of the table whose Delta commit is missing.
    pub manifests: u64,
    /// When the oldest of them committed (RFC 3339).
    pub since: String,
    /// Unix milliseconds of `since`.
    #[serde(skip)]
    pub since_ms: i64,
    /// The error of the last failed try (empty when read from the lake).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl DeltaLag {
    /// Seconds since the oldest missing manifest committed, at `now_ms`.
    pub fn seconds(&self, now_ms: i64) -> i64 {
        (now_ms - self.since_ms).max(0) / 1000
    }
}

fn unix_ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|_| chrono::Utc::now().timestamp_millis())
}

struct Missed {
    table: String,
    /// Manifest seq → its `committed_at`.
    seqs: BTreeMap<u64, String>,
    error: String,
}

/// The manifests each table folder's Delta log misses, as this run saw its
/// commits fail.
#[derive(Default)]
pub(super) struct Lags(BTreeMap<String, Missed>);

impl Lags {
    /// The Delta commit of `table` (folder `dir`) for `m` failed with `e`.
    pub fn missed(&mut self, dir: &Path, table: &str, m: (u64, &str), e: &Error) {
        let entry = self.0.entry(dir.to_string()).or_insert_with(|| Missed {
            table: table.to_string(),
            seqs: BTreeMap::new(),
            error: String::new(),
        });
        entry.seqs.insert(m.0, m.1.to_string());
        entry.error = e.to_string();
    }

    /// `m` touches a table that already lags and was not tried again.
    pub fn missed_after(&mut self, dir: &Path, m: (u64, &str)) {
        if let Some(entry) = self.0.get_mut(dir.as_ref()) {
            entry.seqs.insert(m.0, m.1.to_string());
        }
    }

    /// The log of `dir` holds every manifest up to `seq`.
    pub fn caught_up(&mut self, dir: &Path, seq: u64) {
        if let Some(entry) = self.0.get_mut(dir.as_ref()) {
            entry.seqs.retain(|s, _| *s > seq);
            if entry.seqs.is_empty() {
                self.0.remove(dir.as_ref());
            }
        }
    }

    /// The table folders that lag, with their `db.table` and the seqs of
    /// the manifests their logs miss, oldest first.
    pub fn missing(&self) -> Vec<(String, String, Vec<u64>)> {
        self.0
            .iter()
            .map(|(dir, m)| {
                (
                    dir.clone(),
                    m.table.clone(),
                    m.seqs.keys().copied().collect(),
                )
            })
            .collect()
    }

    pub fn lags(&self, dir: &str) -> bool {
        self.0.contains_key(dir)
    }

    /// Manifest `seq` has no files of `dir` after all: it is not missed.
    pub fn caught_up_one(&mut self, dir: &str, seq: u64) {
        if let Some(entry) = self.0.get_mut(dir) {
            entry.seqs.remove(&seq);
            if entry.seqs.is_empty() {
                self.0.remove(dir);
            }
        }
    }

    /// Forgets the tables `lagging` does not name.
    pub fn keep_only(&mut self, lagging: impl Fn(&str) -> bool) {
        self.0.retain(|dir, _| lagging(dir));
    }

    pub fn list(&self) -> Vec<DeltaLag> {
        self.0
            .values()
            .filter_map(|m| {
                let (_, since) = m.seqs.first_key_value()?;
                Some(DeltaLag {
                    table: m.table.clone(),
                    manifests: m.seqs.len() as u64,
                    since: since.clone(),
                    since_ms: unix_ms(since),
                    error: m.error.clone(),
                })
            })
            .collect()
    }
}

impl super::TableLogs {
    /// The tables whose Delta log lags, as this run's commits left them.
    pub fn lags(&self) -> Vec<DeltaLag> {
        self.lag.list()
    }
}

/// Whether the log `state` of `table` lacks a manifest up to `newest`: its
/// newest commit counts fewer rows of the table than `newest` does (every
/// manifest that touches a table adds rows).
pub(super) fn log_lags(state: &TableState, newest: &Manifest) -> bool {
    let Some(info) = &state.last_info else {
        return false;
    };
    let Some(name) = info["table"].as_str() else {
        return false;
    };
    let behind = match newest.totals.get(name) {
        Some(total) => info["rows"].as_u64().is_none_or(|r| r < *total),
        None => false,
    };
    behind && state.applied < newest.seq
}

/// The first manifest the lake's lagging changelog logs still need (for
/// retention): after each lagging log's last, from the first for a table
/// with data files and no log yet; `None` when no log lags.
pub async fn delta_needs(lake: &Lake, newest: &Manifest) -> Result<Option<u64>> {
    let store = lake.store.as_ref();
    let mut need: Option<u64> = None;
    for dir in table_dirs(store).await? {
        if table_names(&dir).is_none() {
            continue;
        }
        let state = log::load(store, &dir, false).await?;
        let from = match state.version {
            None if has_data_files(store, &dir).await? => 1,
            None => continue,
            Some(_) if log_lags(&state, newest) => state.applied + 1,
            Some(_) => continue,
        };
        need = Some(need.map_or(from, |n: u64| n.min(from)));
    }
    Ok(need)
}

/// Every table of the lake whose Delta log lags `newest`, by `db.table`:
/// the manifests after its log's last that have files of it.
///
/// Also gives the Delta version of every table folder with a log, read by
/// the same load (`status` shows both).
pub async fn lake_lags(
    lake: &Lake,
    newest: &Manifest,
) -> Result<(BTreeMap<String, u64>, BTreeMap<String, DeltaLag>)> {
    let store = lake.store.as_ref();
    let mut versions = BTreeMap::new();
    // Table folder → (db.table, the last manifest seq its log holds).
    let mut behind: BTreeMap<String, (String, u64)> = BTreeMap::new();
    let mut unreadable: Vec<DeltaLag> = Vec::new();
    for dir in table_dirs(store).await? {
        let Some((db, table)) = table_names(&dir) else {
            continue;
        };
        let state = match log::load(store, &dir, false).await {
            Ok(state) => state,
            // A log that cannot be read (a file where its folder should
            // be, an unreadable checkpoint): named with its error, so that
            // `status` still reports every other table.
            Err(e) => {
                let name = format!("{db}.{table}");
                unreadable.push(DeltaLag {
                    table: name,
                    manifests: 0,
                    since: String::new(),
                    since_ms: 0,
                    error: e.to_string(),
                });
                continue;
            }
        };
        if let Some(v) = state.version {
            versions.insert(format!("{db}.{table}"), v);
        }
        let lags = match state.version {
            None => has_data_files(store, &dir).await?,
            Some(_) => log_lags(&state, newest),
        };
        if lags {
            behind.insert(dir.to_string(), (format!("{db}.{table}"), state.applied));
        }
    }
    let mut out: BTreeMap<String, DeltaLag> = unreadable
        .into_iter()
        .map(|l| (l.table.clone(), l))
        .collect();
    let Some(from) = behind.values().map(|(_, a)| a + 1).min() else {
        return Ok((versions, out));
    };
    // Idle manifests, and those below the retention floor, are not read.
    for m in lake.changes_after(from - 1, newest).await?.0 {
        for key in by_table(&m).keys() {
            let Some((name, applied)) = behind.get(key) else {
                continue;
            };
            if *applied >= m.seq {
                continue;
            }
            out.entry(name.clone())
                .and_modify(|l| l.manifests += 1)
                .or_insert_with(|| DeltaLag {
                    table: name.clone(),
                    manifests: 1,
                    since: m.committed_at.clone(),
                    since_ms: unix_ms(&m.committed_at),
                    error: String::new(),
                });
        }
    }
    Ok((versions, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lags_count_missed_manifests_until_a_commit_catches_up() {
        let mut lags = Lags::default();
        let dir = Path::from("shop/t");
        let e = Error::Lake("no".into());
        lags.missed(&dir, "shop.t", (3, "2026-01-01T00:00:00Z"), &e);
        lags.missed_after(&dir, (5, "2026-01-01T00:00:09Z"));
        // Another table that never failed is not counted.
        lags.missed_after(&Path::from("shop/u"), (5, "2026-01-01T00:00:09Z"));
        let list = lags.list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].table, "shop.t");
        assert_eq!(list[0].manifests, 2);
        assert_eq!(list[0].since, "2026-01-01T00:00:00Z");
        assert_eq!(list[0].error, "lake: no");
        assert_eq!(list[0].seconds(list[0].since_ms + 61_500), 61);
        lags.caught_up(&dir, 3);
        assert_eq!(lags.list()[0].manifests, 1);
        assert_eq!(lags.list()[0].since, "2026-01-01T00:00:09Z");
        lags.caught_up(&dir, 5);
        assert!(lags.list().is_empty());
    }
}
