//! The erasure of one Delta table of the lake: a table's changelog or its
//! current table.
//!
//! 1. **Live files.** Every file the log lists whose `_seq` range begins
//!    before the erasure's cut is scanned, only its naming columns and
//!    `_seq` read. A file that holds a named row from before the cut is
//!    copied without those rows (and, in a current table, without the rows
//!    its deletion vector deletes, whose bytes are still in it) and swapped
//!    in by one commit with `dataChange: true` — `remove` of each file,
//!    `add` of each copy. The commit is put-if-absent: when the stream, a
//!    fold, a compaction or another writer took the version, the log is read
//!    again and the commit made on top if every file it removes is still
//!    live as it was; else the copies are deleted and the pass begins again.
//!    The replaced files are deleted at once, not after the retention.
//! 2. **Files of earlier versions.** A file that only a tombstone names (a
//!    compaction's input, a type rewrite's original, an older version of a
//!    current table) and that holds a named row is deleted: time travel to
//!    those versions then fails, as the README says. Copies of an earlier
//!    `forget` that died before its commit, which no version names, go too.
//!
//! 3. **The log's statistics.** The commits and checkpoints that added the
//!    replaced and deleted files lose those files' column bounds
//!    (`table::redact`): they are values of the erased rows.
//!
//! A kill anywhere leaves either the previous version (the copies are
//! orphans the next run deletes) or the new one (the replaced files, now
//! tombstones, are deleted by the next run's step 2): running `forget`
//! again finishes the job.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Int64Type;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::AsyncArrowWriter;
use parquet::schema::types::ColumnPath;
use roaring::RoaringTreemap;
use serde::Serialize;
use serde_json::{json, Value};

use super::matcher::Matcher;
use crate::error::{Error, Result};
use crate::table::current::dv;
use crate::table::files::{open_parquet, open_parquet_leaves, parquet_metadata};
use crate::table::format::{
    carried_facts, Commit, Operation, Put, TableFormat, TableState, FORMAT,
};
use crate::table::stats;

/// Test hook: abort the process at a point of an erasure (`copied`: after
/// the copies are written, before the commit; `committed`: after the
/// changelog's commit, before the replaced files are deleted).
pub const ABORT_IN_FORGET: &str = "SLUICE_TEST_ABORT_IN_FORGET";
/// The folder of a changelog table's copies.
pub const ERASED_DIR: &str = "_erased";
/// How a copy's name begins.
const PREFIX: &str = "erased-";
/// Passes of one table whose commit another writer's changes undid, at most.
const TRIES: u32 = 20;

/// Which table of the lake a pass erases from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Changelog,
    Current,
}

/// What a pass did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Erased {
    pub commits: usize,
    pub files_rewritten: usize,
    /// Files of earlier versions that held named rows, deleted.
    pub files_deleted: usize,
    pub rows_removed: u64,
    pub bytes_rewritten: u64,
    pub bytes_written: u64,
    /// Commit and checkpoint files of the log whose stats lost the column
    /// bounds of files no longer live.
    pub log_files_redacted: usize,
    /// Which named rows the table held.
    #[serde(skip)]
    pub found: BTreeSet<usize>,
}

/// One table's erasure.
pub struct Pass<'a> {
    pub store: Arc<dyn ObjectStore>,
    pub dir: Path,
    pub kind: Kind,
    pub matcher: &'a Matcher,
    /// Rows with a `_seq` below it are erased; later ones are kept.
    pub cut: i64,
    /// Names this run's copies (`<ms>-<random>`).
    pub stamp: &'a str,
    /// What the commits' `commitInfo` says of the erasure.
    pub info: Value,
}

/// The columns of the Parquet file `file` written DELTA_BINARY_PACKED.
async fn delta_columns(
    store: &Arc<dyn ObjectStore>,
    file: &Path,
    size: Option<u64>,
) -> Result<Vec<ColumnPath>> {
    let (meta, _) = parquet_metadata(store, file.clone(), size).await?;
    let Some(group) = meta.row_groups().first() else {
        return Ok(Vec::new());
    };
    Ok(group
        .columns()
        .iter()
        .filter(|c| {
            c.encodings()
                .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED)
        })
        .map(|c| c.column_path().clone())
        .collect())
}

/// A live file and what replaces it.
struct Swap {
    path: String,
    add: Value,
    copy: Option<(String, Value)>,
}

impl Pass<'_> {
    pub async fn run(&self) -> Result<Erased> {
        let mut out = Erased::default();
        let mut tries = 0;
        let state = loop {
            let state = FORMAT.load(self.store.as_ref(), &self.dir, true).await?;
            if state.version.is_none() {
                return Ok(out);
            }
            let mut swaps = Vec::new();
            let mut pass = Erased::default();
            for (path, add) in &state.files {
                if !self.may_hold(add) {
                    continue;
                }
                if let Some(swap) = self.swap(path, add, &mut pass).await? {
                    swaps.push(swap);
                }
            }
            out.found.extend(pass.found.iter().copied());
            if swaps.is_empty() {
                break state;
            }
            if std::env::var(ABORT_IN_FORGET).is_ok_and(|v| v == "copied") {
                std::process::abort();
            }
            if self.commit(state, &swaps).await? {
                out.commits += 1;
                out.files_rewritten += pass.files_rewritten;
                out.rows_removed += pass.rows_removed;
                out.bytes_rewritten += pass.bytes_rewritten;
                out.bytes_written += pass.bytes_written;
                if self.kind == Kind::Changelog
                    && std::env::var(ABORT_IN_FORGET).is_ok_and(|v| v == "committed")
                {
                    std::process::abort();
                }
                for s in &swaps {
                    delete(self.store.as_ref(), &self.file(&s.path)).await?;
                }
                // What the log holds now (the copies live) decides
                // what is earlier and what an orphan.
                break FORMAT.load(self.store.as_ref(), &self.dir, true).await?;
            }
            for s in &swaps {
                if let Some((copy, _)) = &s.copy {
                    delete(self.store.as_ref(), &self.file(copy)).await?;
                }
            }
            tries += 1;
            if tries >= TRIES {
                return Err(Error::Forget(format!(
                    "{}: other writers replaced the files to erase {tries} times in a row; run forget again",
                    self.dir
                )));
            }
        };
        out.files_deleted += self.earlier_files(&state, &mut out.found).await?;
        // The bounds of the replaced files' rows in the log's stats.
        out.log_files_redacted = FORMAT
            .redact_bounds(self.store.as_ref(), &self.dir, &state)
            .await?;
        Ok(out)
    }

    /// Whether a live file may hold rows from before the cut (its stats say).
    fn may_hold(&self, add: &Value) -> bool {
        let stats: Option<Value> = add["stats"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok());
        let min = stats.as_ref().and_then(|s| s["minValues"]["_seq"].as_i64());
        min.is_none_or(|m| m < self.cut)
    }

    fn file(&self, rel: &str) -> Path {
        rel.split('/')
            .fold(self.dir.clone(), |p, part| p.join(part))
    }

    /// The positions of the rows of a file to erase, and how many it holds.
    async fn positions(
        &self,
        path: &Path,
        size: Option<u64>,
        found: &mut BTreeSet<usize>,
    ) -> Result<RoaringTreemap> {
        let names = self.matcher.column_names();
        let mut stream = open_parquet_leaves(&self.store, path.clone(), size, |parts| {
            let own = |n: &String| names.contains(n);
            match parts {
                [one] => one == "_seq" || own(one),
                [s, field] => s == "_before" && own(field),
                _ => false,
            }
        })
        .await?;
        let mut out = RoaringTreemap::new();
        let mut base = 0u64;
        while let Some(batch) = stream.try_next().await? {
            let (hit, named) = self.matcher.matches(&batch);
            let seqs = seq_column(&batch, path)?;
            for i in 0..batch.num_rows() {
                if hit.value(i) && seqs.is_valid(i) && seqs.value(i) < self.cut {
                    out.insert(base + i as u64);
                }
            }
            if !named.is_empty() {
                found.extend(named);
            }
            base += batch.num_rows() as u64;
        }
        Ok(out)
    }

    /// The copy of a live file without the named rows, if it holds any.
    async fn swap(&self, path: &str, add: &Value, pass: &mut Erased) -> Result<Option<Swap>> {
        let file = self.file(path);
        let size = add["size"].as_u64();
        let erase = self.positions(&file, size, &mut pass.found).await?;
        if erase.is_empty() {
            return Ok(None);
        }
        // A current table's file also drops the rows its vector deletes:
        // their bytes would stay in the copy.
        let deleted = match self.kind {
            Kind::Current => dv::read(self.store.as_ref(), &self.dir, add).await?,
            Kind::Changelog => RoaringTreemap::new(),
        };
        pass.rows_removed += (&erase - &deleted).len();
        let gone = &erase | &deleted;
        let name = copy_name(path, self.stamp);
        let rel = match self.kind {
            Kind::Changelog => format!("{ERASED_DIR}/{name}"),
            Kind::Current => name,
        };
        let dest = self.file(&rel);
        // A current table's key columns keep their DELTA_BINARY_PACKED
        // encoding (a fold scans them).
        let delta = match self.kind {
            Kind::Current => delta_columns(&self.store, &file, size).await?,
            Kind::Changelog => Vec::new(),
        };
        let mut stream = open_parquet(&self.store, file.clone(), size).await?;
        let mut writer: Option<AsyncArrowWriter<object_store::buffered::BufWriter>> = None;
        let mut base = 0u64;
        while let Some(batch) = stream.try_next().await? {
            let n = batch.num_rows() as u64;
            let keep: BooleanArray = (base..base + n).map(|p| Some(!gone.contains(p))).collect();
            base += n;
            let kept = filter_record_batch(&batch, &keep)?;
            if kept.num_rows() == 0 {
                continue;
            }
            if writer.is_none() {
                writer = Some(self.writer(&dest, &kept, &delta)?);
            }
            if let Some(w) = writer.as_mut() {
                w.write(&kept).await?;
            }
        }
        pass.files_rewritten += 1;
        pass.bytes_rewritten += size.unwrap_or(0);
        let copy = match writer {
            None => None,
            Some(w) => {
                w.close().await?;
                let facts = stats::file_facts(self.store.as_ref(), &dest).await?;
                pass.bytes_written += facts.size;
                let mut new = json!({
                    "path": rel,
                    "partitionValues": {},
                    "size": facts.size,
                    "modificationTime": facts.modified_ms,
                    "dataChange": true,
                    "stats": facts.stats.to_string(),
                });
                // A subset of the rows: the key range still bounds them.
                if !add["tags"].is_null() {
                    new["tags"] = add["tags"].clone();
                }
                Some((rel, json!({ "add": new })))
            }
        };
        Ok(Some(Swap {
            path: path.to_string(),
            add: add.clone(),
            copy,
        }))
    }

    fn writer(
        &self,
        dest: &Path,
        batch: &RecordBatch,
        delta: &[ColumnPath],
    ) -> Result<AsyncArrowWriter<object_store::buffered::BufWriter>> {
        let props = match self.kind {
            Kind::Changelog => crate::sink::changelog_properties(&batch.schema())?.build(),
            Kind::Current => crate::table::current::delta_file_properties(delta)?,
        };
        let upload = object_store::buffered::BufWriter::new(self.store.clone(), dest.clone());
        Ok(AsyncArrowWriter::try_new(
            upload,
            batch.schema(),
            Some(props),
        )?)
    }

    /// Commits `swaps` on top of `state`, or on top of other writers'
    /// commits while they leave the files alone. False when another writer
    /// replaced a file first.
    async fn commit(&self, mut state: TableState, swaps: &[Swap]) -> Result<bool> {
        for _ in 0..TRIES {
            let version = state.version.map_or(0, |v| v + 1);
            let mut info = carried_facts(&state);
            info["forget"] = self.info.clone();
            let mut commit = Commit::new(version, Operation::Erase, info);
            for s in swaps {
                commit
                    .files
                    .push(crate::table::current::remove_with(&s.path, &s.add, true));
                if let Some((_, add)) = &s.copy {
                    commit.files.push(add.clone());
                }
            }
            match FORMAT
                .commit(self.store.as_ref(), &self.dir, &commit)
                .await?
            {
                Put::Written => {
                    FORMAT
                        .maintain(self.store.as_ref(), &self.dir, version)
                        .await;
                    return Ok(true);
                }
                Put::Unknown(e) => return Err(e),
                Put::Taken => {
                    state = FORMAT.load(self.store.as_ref(), &self.dir, true).await?;
                    let untouched = swaps.iter().all(|s| {
                        state.files.get(&s.path).is_some_and(|live| {
                            live["deletionVector"] == s.add["deletionVector"]
                                && live["size"] == s.add["size"]
                        })
                    });
                    if !untouched {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Deletes the files that only earlier versions name and that hold
    /// named rows, and the copies of an earlier run that no version names.
    async fn earlier_files(
        &self,
        state: &TableState,
        found: &mut BTreeSet<usize>,
    ) -> Result<usize> {
        let mut deleted = 0;
        let mut known: BTreeSet<&str> = state.files.keys().map(String::as_str).collect();
        let mut earlier: BTreeSet<&str> = BTreeSet::new();
        for rm in state.tombstones.values() {
            if let Some(p) = rm["path"].as_str() {
                known.insert(p);
                if !state.files.contains_key(p) {
                    earlier.insert(p);
                }
            }
        }
        // A manifest's file that reached the log only as a copy in the
        // changelog's supertype (`_rewritten/v<version>-<name>`): no
        // version names it, and it holds the copy's rows.
        let originals: BTreeSet<String> = known
            .iter()
            .filter_map(|p| {
                let name = p.strip_prefix("_rewritten/v")?.split_once('-')?.1;
                (!known.contains(name)).then(|| name.to_string())
            })
            .collect();
        for path in earlier
            .into_iter()
            .chain(originals.iter().map(String::as_str))
        {
            let file = self.file(path);
            let erase = match self.positions(&file, None, found).await {
                Ok(e) => e,
                Err(Error::Store(object_store::Error::NotFound { .. })) => continue,
                Err(e) => return Err(e),
            };
            if !erase.is_empty() {
                delete(self.store.as_ref(), &file).await?;
                deleted += 1;
            }
        }
        // Copies of a run that died before its commit.
        let folder = match self.kind {
            Kind::Changelog => self.dir.clone().join(ERASED_DIR),
            Kind::Current => self.dir.clone(),
        };
        let listed = self.store.list_with_delimiter(Some(&folder)).await?;
        for o in listed.objects {
            let Some(name) = o.location.filename() else {
                continue;
            };
            let rel = match self.kind {
                Kind::Changelog => format!("{ERASED_DIR}/{name}"),
                Kind::Current => name.to_string(),
            };
            if name.starts_with(PREFIX) && !known.contains(rel.as_str()) {
                delete(self.store.as_ref(), &o.location).await?;
            }
        }
        Ok(deleted)
    }
}

fn seq_column<'a>(batch: &'a RecordBatch, path: &Path) -> Result<&'a Int64Array> {
    batch
        .column_by_name("_seq")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| Error::Lake(format!("data file {path} has no _seq column")))
}

/// The name of a copy of `path` made by run `stamp`: the original's name
/// (without an earlier run's prefix) after this run's.
fn copy_name(path: &str, stamp: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let original = name
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.splitn(3, '-').nth(2))
        .unwrap_or(name);
    format!("{PREFIX}{stamp}-{original}")
}

async fn delete(store: &dyn ObjectStore, path: &Path) -> Result<()> {
    match store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_keep_the_original_name_once() {
        assert_eq!(
            copy_name("_rewritten/v3-part-1.parquet", "17-ab"),
            "erased-17-ab-v3-part-1.parquet"
        );
        assert_eq!(
            copy_name("_erased/erased-17-ab-part-1.parquet", "18-cd"),
            "erased-18-cd-part-1.parquet"
        );
        assert_eq!(
            copy_name("current-0001-00000-x.parquet", "18-cd"),
            "erased-18-cd-current-0001-00000-x.parquet"
        );
    }
}
