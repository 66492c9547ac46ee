//! How far each table's Delta log lags its manifests (DESIGN.md "The Delta
//! logs stay right"): kept by the running sidecar from its own commits
//! ([`Lags`], for `/metrics`, the status page and `/readyz`), and read from
//! the lake for `sluice status` ([`lake_lags`]).

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::Serialize;

use std::collections::BTreeSet;

use object_store::ObjectStore;

use super::{
    by_table, has_data_files, load_logs, table_dirs, table_logs, table_names, RepairReport,
    SchemaVersions, TableLogs, TableState, REPAIR_KEY, RETRY_FIRST, RETRY_MAX,
};
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
    for (dir, state) in table_logs(store, lake.in_flight).await? {
        let state = state?;
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
    for (dir, state) in table_logs(store, lake.in_flight).await? {
        let Some((db, table)) = table_names(&dir) else {
            continue;
        };
        let state = match state {
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

/// Catching lagging Delta logs up: at checkpoints, from the tick of an idle
/// stream, and in full at a start.
impl TableLogs {
    /// The Delta commits of manifest `m` while some tables' logs lag (a
    /// checkpoint after a failure; the start repairs with [`Self::repair`]):
    /// each lagging table whose wait ran out makes its missing commits in
    /// manifest order, from the manifests its lag lists, and stops at the
    /// first failure, which doubles its wait; so a table that keeps failing
    /// costs one manifest read and one try per wait, not a pass over its
    /// whole lag at every checkpoint. The tables of `m` that do not lag
    /// commit as usual. `schemas` must cover `m`'s tables and the lagging.
    pub async fn commit_lagging(
        &mut self,
        store: &dyn ObjectStore,
        lake: &crate::commit::Lake,
        m: &Manifest,
        schemas: &SchemaVersions,
    ) -> Result<usize> {
        let mut failed = Vec::new();
        let mut made = self
            .catch_up(store, lake, Some(m), schemas, &mut failed)
            .await;
        let mut ready = Vec::new();
        for (key, t) in by_table(m) {
            if self.lag.lags(&key) {
                // Its earlier manifests come first: this one waits with them.
                self.lag.missed_after(&t.dir, (m.seq, &m.committed_at));
                continue;
            }
            ready.push(t);
        }
        for (t, result) in self.commit_tables(store, m, ready, schemas).await {
            match result {
                Ok(done) => made += usize::from(done),
                Err(e) => {
                    self.back_off(t.dir.as_ref());
                    failed.push((t.files[0].table.clone(), e));
                }
            }
        }
        self.behind = !self.lag.missing().is_empty();
        first_failure(m.seq, failed).map_or(Ok(made), Err)
    }

    /// The lagging tables whose wait has run out make their missing commits,
    /// in manifest order, each stopping at its first failure (which doubles
    /// its wait). `m` is the manifest just committed, if any (read from
    /// memory, not the store). Returns the commits made.
    async fn catch_up(
        &mut self,
        store: &dyn ObjectStore,
        lake: &crate::commit::Lake,
        m: Option<&Manifest>,
        schemas: &SchemaVersions,
        failed: &mut Vec<(String, Error)>,
    ) -> usize {
        let mut made = 0;
        let now = std::time::Instant::now();
        for (dir, table, seqs) in self.lag.missing() {
            if self.retry.get(&dir).is_some_and(|(at, _)| *at > now) {
                continue;
            }
            for seq in seqs {
                let read = match m {
                    Some(m) if m.seq == seq => Ok(m.clone()),
                    _ => lake.read_manifest(seq).await,
                };
                let older = match read {
                    Ok(older) => older,
                    Err(e) => {
                        failed.push((table.clone(), e));
                        self.back_off(&dir);
                        break;
                    }
                };
                let Some(t) = by_table(&older).remove(&dir) else {
                    self.lag.caught_up_one(&dir, seq);
                    continue;
                };
                match self.commit_table(store, &older, t, schemas).await {
                    Ok(done) => made += usize::from(done),
                    Err(e) => {
                        failed.push((table.clone(), e));
                        self.back_off(&dir);
                        break;
                    }
                }
            }
            if !self.lag.lags(&dir) {
                self.retry.remove(&dir);
            }
        }
        made
    }

    /// Whether some lagging table's wait has run out (an idle stream makes
    /// no checkpoint to try it at: the tick calls [`Self::retry_lagging`]).
    pub fn retry_due(&self) -> bool {
        let now = std::time::Instant::now();
        self.lag
            .missing()
            .iter()
            .any(|(dir, _, _)| self.retry.get(dir).is_none_or(|(at, _)| *at <= now))
    }

    /// Tries the lagging tables whose wait has run out, between checkpoints.
    pub async fn retry_lagging(
        &mut self,
        store: &dyn ObjectStore,
        lake: &crate::commit::Lake,
        schemas: &SchemaVersions,
    ) -> Result<usize> {
        let mut failed = Vec::new();
        let made = self.catch_up(store, lake, None, schemas, &mut failed).await;
        self.behind = !self.lag.missing().is_empty();
        match failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(made),
        }
    }

    /// The table folder `dir` failed again: its next try waits twice as long.
    fn back_off(&mut self, dir: &str) {
        let failures = self.retry.get(dir).map_or(0, |(_, n)| *n);
        let wait = RETRY_FIRST
            .saturating_mul(1 << failures.min(16))
            .min(RETRY_MAX);
        self.retry.insert(
            dir.to_string(),
            (std::time::Instant::now() + wait, failures + 1),
        );
    }

    /// Whether a whole repair may run now (after a failure that no table's
    /// lag holds, such as a log that cannot be read): it waits like a
    /// table's retry.
    pub fn repair_due(&mut self) -> bool {
        let due = self
            .retry
            .get(REPAIR_KEY)
            .is_none_or(|(at, _)| *at <= std::time::Instant::now());
        if due {
            self.back_off(REPAIR_KEY);
        }
        due
    }

    /// Every lagging table may be tried at once (the run's last try).
    pub fn clear_waits(&mut self) {
        self.retry.clear();
    }

    /// The lagging tables that [`Self::commit_lagging`] follows.
    pub fn has_lags(&self) -> bool {
        !self.lag.missing().is_empty()
    }

    /// The `db.table` of every table whose log lags (for the schema
    /// versions [`Self::commit_lagging`] needs).
    pub fn lagging_tables(&self) -> Vec<(String, String)> {
        self.lag
            .missing()
            .into_iter()
            .filter_map(|(dir, _, _)| table_names(&Path::parse(dir).ok()?))
            .collect()
    }

    /// Makes the Delta commits missing for manifests up to `newest`: at start
    /// (a crash between a manifest and its Delta commits, a lake of an
    /// earlier sluice without logs) and after a Delta commit failed.
    pub async fn repair(
        &mut self,
        store: &dyn ObjectStore,
        lake: &crate::commit::Lake,
        newest: &Manifest,
        schemas: &SchemaVersions,
    ) -> Result<RepairReport> {
        let mut report = RepairReport::default();
        // Tables whose log lacks some manifest: those without a log that have
        // data files, and those whose newest commit counts fewer rows than
        // the newest manifest (every manifest that touches a table adds rows).
        let mut lagging: BTreeMap<String, u64> = BTreeMap::new();
        let mut failed = Vec::new();
        let dirs = table_dirs(store, self.in_flight).await?;
        // The logs this run does not know yet, read at once.
        let unknown = dirs
            .iter()
            .filter(|dir| !self.tables.contains_key(&dir.to_string()))
            .cloned()
            .collect();
        let mut loaded: BTreeMap<String, Result<TableState>> =
            load_logs(store, unknown, self.in_flight)
                .await
                .into_iter()
                .map(|(dir, state)| (dir.to_string(), state))
                .collect();
        for dir in dirs {
            let name =
                table_names(&dir).map_or_else(|| dir.to_string(), |(d, t)| format!("{d}.{t}"));
            if let Some(read) = loaded.remove(&dir.to_string()) {
                match read {
                    Ok(state) => {
                        self.tables.insert(dir.to_string(), state);
                    }
                    Err(e) => {
                        failed.push((name, e));
                        continue;
                    }
                }
            }
            let state = match self.state(store, &dir).await {
                Ok(state) => state.clone(),
                Err(e) => {
                    failed.push((name, e));
                    continue;
                }
            };
            let duplicates = state
                .metadata
                .as_ref()
                .and_then(|m| m["schemaString"].as_str())
                .is_some_and(super::legacy_names::has_case_duplicates);
            if duplicates {
                if let Err(e) = self.rename_legacy(store, &dir, newest.seq, schemas).await {
                    failed.push((name, e));
                    continue;
                }
            }
            match state.version {
                None => {
                    if has_data_files(store, &dir).await? {
                        lagging.insert(dir.to_string(), 0);
                        report.built += 1;
                    }
                }
                Some(_) => {
                    if log_lags(&state, newest) {
                        lagging.insert(dir.to_string(), state.applied);
                    }
                }
            }
        }
        // A table the log shows caught up (by another run, say) lags no more.
        self.lag.keep_only(|dir| lagging.contains_key(dir));
        let Some(from) = lagging.values().min().map(|a| a + 1) else {
            self.behind = !failed.is_empty();
            return first_failure(newest.seq, failed).map_or(Ok(report), Err);
        };
        // A table whose commit fails is skipped from then on (its later
        // manifests count in its lag); the others go on.
        let mut stuck: BTreeSet<String> = BTreeSet::new();
        // Idle manifests, and those below the retention floor (retention
        // keeps every one a lagging log needs), are not read.
        for m in lake.changes_after(from - 1, newest).await?.0 {
            let mut ready = Vec::new();
            for (key, t) in by_table(&m) {
                if lagging.get(&key).is_none_or(|applied| *applied >= m.seq) {
                    continue;
                }
                if stuck.contains(&key) {
                    self.lag.missed_after(&t.dir, (m.seq, &m.committed_at));
                    continue;
                }
                ready.push(t);
            }
            for (t, result) in self.commit_tables(store, &m, ready, schemas).await {
                match result {
                    Ok(true) => report.commits += 1,
                    Ok(false) => {}
                    Err(e) => {
                        // Its later manifests wait for this one (they
                        // count in its lag); the other tables go on.
                        stuck.insert(t.dir.to_string());
                        failed.push((t.files[0].table.clone(), e));
                    }
                }
            }
        }
        self.behind = !failed.is_empty();
        first_failure(newest.seq, failed).map_or(Ok(report), Err)
    }
}

/// Logs each table's Delta commit failure, naming the table (a definite
/// one as an error), and gives the first for the caller to count.
pub(super) fn first_failure(seq: u64, failed: Vec<(String, Error)>) -> Option<Error> {
    for (table, e) in &failed {
        let kind = crate::error::HasKind::error_kind(e);
        if kind == crate::error::ErrorKind::Definite {
            tracing::error!(table = %table, seq, %kind, error = %e, "could not make the Delta commit of this table; the other tables go on, and the next checkpoint or start retries it");
        } else {
            tracing::warn!(table = %table, seq, %kind, error = %e, "could not make the Delta commit of this table; the other tables go on, and the next checkpoint or start retries it");
        }
    }
    failed.into_iter().next().map(|(_, e)| e)
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
