//! A fold's changes, sorted by key in bounded memory: the replay rules
//! reduce the changes of a key to its last one (the one with the highest
//! `_seq`), so a fold needs, in key order, each changed key's last change.
//!
//! [`Sorter`] collects changes until they take its budget, then sorts them,
//! keeps the last change of each key and spills that run to a local Arrow
//! IPC file. [`Merge`] merges the runs back in key order, one small batch at
//! a time. A fold whose changes fit the budget never touches the disk.
//!
//! Changes often come partly in key order (a snapshot's chunks, a bulk
//! insert or update in key order), and then cost less: runs whose key
//! ranges do not overlap are read one after another as one ([`chains`]), so
//! they need no merge pass and a merge holds one batch per chain, not per
//! run; rows a run takes in the order they came are sliced from their
//! batches, not copied ([`parts`]); and a merge takes at once the rows of a
//! run that lie below every other run's next key.
//!
//! A run batch is `[key, seq, removed, <the current table's columns>]`: the
//! key in Arrow's row format (bytes that compare like the key values), the
//! change's `_seq`, whether it removes the key, and the row it puts (all
//! null for a removal).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, Int64Array, RecordBatch,
};
use arrow::compute::interleave_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use arrow::row::Rows;

use crate::error::{Error, Result};

mod merge;
pub use merge::Merge;
use merge::Source;

/// Column of a run batch: the key.
pub const KEY: usize = 0;
/// Column of a run batch: the change's `_seq`.
pub const SEQ: usize = 1;
/// Column of a run batch: whether the change removes the key.
pub const REMOVED: usize = 2;
/// The first column of the row a change puts.
pub const VALUES: usize = 3;

/// Rows per batch of a run at most (and so per batch a [`Merge`] holds per
/// run); fewer for wide rows, so that [`FAN_IN`] batches fit the budget.
pub const RUN_BATCH_ROWS: usize = 2048;
/// Runs merged at once; more are first merged in groups of this many into
/// longer runs, so that a merge holds about one budget of batches.
const FAN_IN: usize = 32;
/// The bookkeeping of one change, on top of its row.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

fn err(what: impl std::fmt::Display) -> Error {
    Error::Lake(format!("current table fold: {what}"))
}

/// The schema of run batches over a current table's `values` schema.
pub fn run_schema(values: &Schema) -> SchemaRef {
    let mut fields = vec![
        Field::new("sluice.key", DataType::Binary, false),
        Field::new("sluice.seq", DataType::Int64, false),
        Field::new("sluice.removed", DataType::Boolean, false),
    ];
    fields.extend(
        values
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true)),
    );
    Arc::new(Schema::new(fields))
}

/// One change: its key (`keys[kb].row(kr)`) and row (`values[vb]`, row
/// `vr`; `vb == NONE` for a removal).
#[derive(Debug, Clone, Copy)]
struct Entry {
    seq: i64,
    kb: u32,
    kr: u32,
    vb: u32,
    vr: u32,
}

const NONE: u32 = u32::MAX;

/// Where a row or a key was added: `(batch, row)`.
pub type At = (u32, u32);

/// A sorted run and the keys it starts and ends with.
struct Run {
    batches: RunBatches,
    first: Vec<u8>,
    last: Vec<u8>,
}

enum RunBatches {
    /// The run built last, still in memory.
    Held(Vec<RecordBatch>),
    /// A run spilled to a file of the spill directory.
    File(PathBuf),
}

/// The first and last key of a run's batches (in key order); `None` for a
/// run without rows.
fn key_range(batches: &[RecordBatch]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut full = batches.iter().filter(|b| b.num_rows() > 0);
    let first = full.next()?;
    let last = full.next_back().unwrap_or(first);
    let key = |b: &RecordBatch, r: usize| b.column(KEY).as_binary::<i32>().value(r).to_vec();
    Some((key(first, 0), key(last, last.num_rows() - 1)))
}

/// Groups runs, given by their key ranges, into chains: the runs of a chain
/// hold disjoint key ranges in ascending order, so reading them one after
/// another is one sorted run, and a merge holds one batch per chain rather
/// than one per run. Changes that arrive in key order (a snapshot's chunks)
/// spill runs that make one chain: no merge at all. Runs are taken by first
/// key and each joins a chain that ends below it, which gives the fewest
/// chains (the most runs that overlap at one key). Indices into `ranges`,
/// each chain in key order.
fn chains(ranges: &[(&[u8], &[u8])]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by(|a, b| ranges[*a].0.cmp(ranges[*b].0));
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let first = ranges[i].0;
        // Any chain that ends below it will do: every later run starts at
        // or after this one.
        match chains
            .iter_mut()
            .find(|c| c.last().is_some_and(|l| ranges[*l].1 < first))
        {
            Some(chain) => chain.push(i),
            None => chains.push(vec![i]),
        }
    }
    chains
}

pub struct Sorter {
    values_schema: SchemaRef,
    schema: SchemaRef,
    budget: usize,
    values: Vec<RecordBatch>,
    keys: Vec<Rows>,
    entries: Vec<Entry>,
    bytes: usize,
    spill_root: PathBuf,
    spill_dir: Option<tempfile::TempDir>,
    /// Run files written (merged ones included).
    spilled: usize,
    runs: Vec<Run>,
    /// Rows per batch of the runs (see [`RUN_BATCH_ROWS`]).
    batch_rows: usize,
    truncated_at: Option<i64>,
    /// TRUNCATEs of one shard of a routed table: `(db, table)` → `_seq`.
    shard_truncations: ShardTruncations,
    changes: usize,
}

/// The shard a `truncate` marker of a routed table names (DESIGN.md "Shard
/// routing"): `_source_db` and `_source_table` set; `None` for a marker
/// of the whole table.
pub fn truncated_shard(values: &RecordBatch, r: usize) -> Option<(&str, &str)> {
    use crate::schema::lake_names::{SOURCE_DB, SOURCE_TABLE};
    use arrow::array::Array;
    let text = |name: &str| {
        let c = values.column_by_name(name)?.as_string_opt::<i32>()?;
        c.is_valid(r).then(|| c.value(r))
    };
    Some((text(SOURCE_DB)?, text(SOURCE_TABLE)?))
}

/// The `_seq` of the last TRUNCATE of each shard of a routed table.
pub type ShardTruncations = std::collections::HashMap<(String, String), i64>;

impl Sorter {
    /// A sorter of changes to rows of `values_schema` that spills runs under
    /// `spill_root` once they hold `budget` bytes.
    pub fn new(values_schema: SchemaRef, budget: usize, spill_root: &Path) -> Self {
        Sorter {
            schema: run_schema(&values_schema),
            values_schema,
            budget: budget.max(1 << 20),
            values: Vec::new(),
            keys: Vec::new(),
            entries: Vec::new(),
            bytes: 0,
            spill_root: spill_root.to_path_buf(),
            spill_dir: None,
            spilled: 0,
            runs: Vec::new(),
            batch_rows: RUN_BATCH_ROWS,
            truncated_at: None,
            shard_truncations: ShardTruncations::new(),
            changes: 0,
        }
    }

    /// Adds rows that changes will put; their batch number.
    pub fn add_values(&mut self, batch: RecordBatch) -> u32 {
        self.bytes += batch.get_array_memory_size();
        self.values.push(batch);
        (self.values.len() - 1) as u32
    }

    /// Adds keys that changes name; their batch number.
    pub fn add_keys(&mut self, rows: Rows) -> u32 {
        self.bytes += rows.size();
        self.keys.push(rows);
        (self.keys.len() - 1) as u32
    }

    /// A change at `seq` that puts row `row` under key `key`.
    pub fn put(&mut self, seq: i64, key: At, row: At) {
        self.push(seq, key, row);
    }

    /// A change at `seq` that removes `key`.
    pub fn remove(&mut self, seq: i64, key: At) {
        self.push(seq, key, (NONE, 0));
    }

    fn push(&mut self, seq: i64, (kb, kr): At, (vb, vr): At) {
        self.changes += 1;
        self.entries.push(Entry {
            seq,
            kb,
            kr,
            vb,
            vr,
        });
    }

    /// A TRUNCATE at `seq`: every change before it, and every row the table
    /// had, is gone.
    pub fn truncate(&mut self, seq: i64) {
        self.changes += 1;
        self.truncated_at = Some(self.truncated_at.map_or(seq, |t| t.max(seq)));
    }

    /// A TRUNCATE of one shard of a routed table at `seq`: every row of that
    /// shard put before it, and every row of it the table had, is gone.
    pub fn truncate_shard(&mut self, seq: i64, db: &str, table: &str) {
        self.changes += 1;
        let at = self
            .shard_truncations
            .entry((db.to_string(), table.to_string()))
            .or_insert(seq);
        *at = (*at).max(seq);
    }

    /// Whether any TRUNCATE came, of the table or of a shard: the table is
    /// rebuilt.
    pub fn truncated(&self) -> bool {
        self.truncated_at.is_some() || !self.shard_truncations.is_empty()
    }

    /// Whether the whole table was truncated: none of its rows stays.
    pub fn truncated_all(&self) -> bool {
        self.truncated_at.is_some()
    }

    /// How many changes were added.
    pub fn changes(&self) -> usize {
        self.changes
    }

    /// How many runs went to disk.
    pub fn spilled_runs(&self) -> usize {
        self.spilled
    }

    /// Spills the changes held when they take the budget. Call between
    /// batches: a spill ends every batch number handed out so far.
    pub fn spill_if_full(&mut self) -> Result<()> {
        // Half the budget: building a run copies the rows it keeps.
        if self.bytes + self.entries.len() * ENTRY_BYTES < self.budget / 2 {
            return Ok(());
        }
        if self.runs.is_empty() && !self.entries.is_empty() {
            let per_row = self.bytes / self.entries.len();
            self.batch_rows = (self.budget / FAN_IN / per_row.max(1)).clamp(16, RUN_BATCH_ROWS);
        }
        let run = self.sorted_run()?;
        self.write_run(run.into_iter().map(Ok))
    }

    /// Writes a sorted run to a file of the spill directory.
    fn write_run(&mut self, run: impl Iterator<Item = Result<RecordBatch>>) -> Result<()> {
        if self.spill_dir.is_none() {
            std::fs::create_dir_all(&self.spill_root).map_err(|e| {
                err(format!(
                    "cannot create {} for spilled changes: {e}",
                    self.spill_root.display()
                ))
            })?;
            let dir = tempfile::Builder::new()
                .prefix("fold-")
                .tempdir_in(&self.spill_root)
                .map_err(|e| err(format!("{}: {e}", self.spill_root.display())))?;
            self.spill_dir = Some(dir);
        }
        let dir = self.spill_dir.as_ref().map(|d| d.path().to_path_buf());
        let path = dir
            .unwrap_or_default()
            .join(format!("run-{:05}.arrow", self.spilled));
        self.spilled += 1;
        let file = File::create(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), &self.schema)
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        let mut range: Option<(Vec<u8>, Vec<u8>)> = None;
        for batch in run {
            let batch = batch?;
            if let Some((first, last)) = key_range(std::slice::from_ref(&batch)) {
                range = Some(match range {
                    Some((f, _)) => (f, last),
                    None => (first, last),
                });
            }
            writer
                .write(&batch)
                .map_err(|e| err(format!("{}: {e}", path.display())))?;
        }
        writer
            .finish()
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        match range {
            Some((first, last)) => self.runs.push(Run {
                batches: RunBatches::File(path),
                first,
                last,
            }),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(())
    }

    fn open_run(path: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let reader = FileReader::try_new_buffered(file, None)
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        Ok(Box::new(reader.map(|b| b.map_err(err))))
    }

    /// The batches of runs read one after another (a chain), each run's
    /// file opened when the one before it is done.
    fn chain_source(runs: Vec<RunBatches>) -> Source {
        Box::new(runs.into_iter().flat_map(|run| -> Source {
            match run {
                RunBatches::Held(batches) => Box::new(batches.into_iter().map(Ok)),
                RunBatches::File(path) => match Self::open_run(&path) {
                    Ok(source) => source,
                    Err(e) => Box::new(std::iter::once(Err(e))),
                },
            }
        }))
    }

    /// How many chains the spilled runs and `held` make.
    fn chain_count(&self, held: Option<&Run>) -> usize {
        let ranges: Vec<(&[u8], &[u8])> = self
            .runs
            .iter()
            .chain(held)
            .map(|r| (r.first.as_slice(), r.last.as_slice()))
            .collect();
        chains(&ranges).len()
    }

    /// Merges the oldest [`FAN_IN`] runs into one until the runs (and the
    /// held one) make at most `FAN_IN` chains, which a merge then reads at
    /// once. A merge keeps each key's last change; a TRUNCATE is applied
    /// only by the final one.
    fn merge_runs(&mut self, held: Option<&Run>) -> Result<()> {
        while self.runs.len() >= FAN_IN && self.chain_count(held) > FAN_IN {
            let group: Vec<Run> = self.runs.drain(..FAN_IN).collect();
            let sources = group
                .iter()
                .map(|r| match &r.batches {
                    RunBatches::File(p) => Self::open_run(p),
                    RunBatches::Held(b) => Ok(Box::new(b.clone().into_iter().map(Ok)) as Source),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut merge = Merge::new(&self.schema, sources, None, None, None, self.batch_rows);
            self.write_run(std::iter::from_fn(|| merge.next_batch().transpose()))?;
            for r in group {
                if let RunBatches::File(p) = r.batches {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        Ok(())
    }

    /// Sorts the changes held by key and `_seq`, keeps each key's last and
    /// builds the run's batches; the sorter is empty after.
    fn sorted_run(&mut self) -> Result<Vec<RecordBatch>> {
        let mut entries = std::mem::take(&mut self.entries);
        let keys = std::mem::take(&mut self.keys);
        let mut values = std::mem::take(&mut self.values);
        self.bytes = 0;
        let key = |e: &Entry| keys[e.kb as usize].row(e.kr as usize);
        entries.sort_unstable_by(|a, b| key(a).cmp(&key(b)).then(a.seq.cmp(&b.seq)));
        // The last change of each key.
        let mut last: Vec<Entry> = Vec::with_capacity(entries.len());
        for e in entries {
            match last.last_mut() {
                Some(l) if key(l) == key(&e) => *l = e,
                _ => last.push(e),
            }
        }
        let nulls = RecordBatch::try_new(
            self.values_schema.clone(),
            self.values_schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 1))
                .collect(),
        )
        .map_err(err)?;
        values.push(nulls);
        let null_batch = values.len() - 1;
        let sources: Vec<&RecordBatch> = values.iter().collect();
        let mut out = Vec::with_capacity(last.len().div_ceil(self.batch_rows));
        for part in parts(&last, self.batch_rows) {
            let mut kb = BinaryBuilder::with_capacity(part.len(), part.len() * 8);
            let mut seqs = Vec::with_capacity(part.len());
            let mut removed = Vec::with_capacity(part.len());
            let mut picks = Vec::with_capacity(part.len());
            for e in part {
                kb.append_value(key(e).as_ref());
                seqs.push(e.seq);
                removed.push(e.vb == NONE);
                picks.push(match e.vb {
                    NONE => (null_batch, 0),
                    b => (b as usize, e.vr as usize),
                });
            }
            let rows = match slice_of(part) {
                // Rows that arrived in key order: taken as they are.
                Some((b, from)) => values[b].slice(from, part.len()),
                None => interleave_record_batch(&sources, &picks).map_err(err)?,
            };
            let mut cols: Vec<ArrayRef> = vec![
                Arc::new(kb.finish()),
                Arc::new(Int64Array::from(seqs)),
                Arc::new(BooleanArray::from(removed)),
            ];
            cols.extend(rows.columns().iter().cloned());
            out.push(RecordBatch::try_new(self.schema.clone(), cols).map_err(err)?);
        }
        Ok(out)
    }

    /// The changes in key order, each key's last, without those a TRUNCATE
    /// ended.
    pub fn finish(mut self) -> Result<Merge> {
        let held = self.sorted_run()?;
        let held = key_range(&held).map(|(first, last)| Run {
            batches: RunBatches::Held(held),
            first,
            last,
        });
        self.merge_runs(held.as_ref())?;
        let mut runs: Vec<Run> = std::mem::take(&mut self.runs);
        runs.extend(held);
        let ranges: Vec<(&[u8], &[u8])> = runs
            .iter()
            .map(|r| (r.first.as_slice(), r.last.as_slice()))
            .collect();
        let groups = chains(&ranges);
        let mut slots: Vec<Option<RunBatches>> =
            runs.into_iter().map(|r| Some(r.batches)).collect();
        let sources: Vec<Source> = groups
            .into_iter()
            .map(|g| Self::chain_source(g.into_iter().filter_map(|i| slots[i].take()).collect()))
            .collect();
        let shards = merge::ShardFilter::new(&self.values_schema, self.shard_truncations);
        Ok(Merge::new(
            &self.schema,
            sources,
            self.truncated_at,
            shards,
            self.spill_dir.take(),
            self.batch_rows,
        ))
    }
}

/// Shorter stretches of consecutive rows than this are copied with the
/// changes around them rather than cut into a batch of their own.
const MIN_SLICE_ROWS: usize = 64;

/// `(batch, first row)` when the changes of `part` put consecutive rows of
/// one batch, in order.
fn slice_of(part: &[Entry]) -> Option<(usize, usize)> {
    let first = part.first()?;
    let consecutive = first.vb != NONE
        && part
            .iter()
            .enumerate()
            .all(|(i, e)| e.vb == first.vb && e.vr as usize == first.vr as usize + i);
    consecutive.then_some((first.vb as usize, first.vr as usize))
}

/// The changes of a run cut into batches of at most `max` changes: each
/// stretch of at least [`MIN_SLICE_ROWS`] changes that put consecutive rows
/// of one batch (changes that arrived in key order, one per key) in batches
/// of its own, which then take those rows without copying them.
fn parts(entries: &[Entry], max: usize) -> Vec<&[Entry]> {
    let max = max.max(1);
    let mut out = Vec::with_capacity(entries.len().div_ceil(max));
    let (mut start, mut i) = (0, 0);
    while i < entries.len() {
        // The stretch of consecutive rows that begins at `i`.
        let e = entries[i];
        let mut j = i + 1;
        while j < entries.len()
            && j - i < max
            && e.vb != NONE
            && entries[j].vb == e.vb
            && entries[j].vr as usize == e.vr as usize + (j - i)
        {
            j += 1;
        }
        if j - i >= MIN_SLICE_ROWS.min(max) {
            out.extend(entries[start..i].chunks(max));
            out.push(&entries[i..j]);
            start = j;
        }
        i = j;
    }
    out.extend(entries[start..].chunks(max));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::row::{RowConverter, SortField};

    fn values_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::Int32, true),
        ]))
    }

    /// Feeds `(seq, op, id, v)` changes (op: 'p' put, 'r' remove, 't'
    /// truncate) in batches of `per` rows and returns `(id, Some(v) | None)`
    /// in key order.
    fn sort(
        changes: &[(i64, char, i32, i32)],
        per: usize,
        budget: usize,
    ) -> (Vec<(i32, Option<i32>)>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let conv = RowConverter::new(vec![SortField::new(DataType::Int32)]).unwrap();
        let mut s = Sorter::new(values_schema(), budget, dir.path());
        s.budget = budget;
        for part in changes.chunks(per) {
            let ids: ArrayRef = Arc::new(Int32Array::from_iter_values(part.iter().map(|c| c.2)));
            let vs: ArrayRef = Arc::new(Int32Array::from_iter_values(part.iter().map(|c| c.3)));
            let keys = conv.convert_columns(std::slice::from_ref(&ids)).unwrap();
            let kb = s.add_keys(keys);
            let vb = s.add_values(RecordBatch::try_new(values_schema(), vec![ids, vs]).unwrap());
            for (r, (seq, op, _, _)) in part.iter().enumerate() {
                match op {
                    'p' => s.put(*seq, (kb, r as u32), (vb, r as u32)),
                    'r' => s.remove(*seq, (kb, r as u32)),
                    _ => s.truncate(*seq),
                }
            }
            s.spill_if_full().unwrap();
        }
        let runs = s.spilled_runs();
        let mut m = s.finish().unwrap();
        let mut out = Vec::new();
        while let Some(b) = m.next_batch().unwrap() {
            let removed = b.column(REMOVED).as_boolean();
            let v = b
                .column(VALUES + 1)
                .as_primitive::<arrow::datatypes::Int32Type>();
            let keys = b.column(KEY).as_binary::<i32>();
            let parser = conv.parser();
            let parsed = conv
                .convert_rows(keys.iter().map(|k| parser.parse(k.unwrap())))
                .unwrap();
            let ids = parsed[0].as_primitive::<arrow::datatypes::Int32Type>();
            for r in 0..b.num_rows() {
                out.push((ids.value(r), (!removed.value(r)).then(|| v.value(r))));
            }
        }
        (out, runs)
    }

    /// The replay rules applied naively: the model the sorter must match.
    fn model(changes: &[(i64, char, i32, i32)]) -> Vec<(i32, Option<i32>)> {
        let mut ordered = changes.to_vec();
        ordered.sort_by_key(|c| c.0);
        let mut state = std::collections::BTreeMap::new();
        for (_, op, id, v) in ordered {
            match op {
                'p' => {
                    state.insert(id, Some(v));
                }
                'r' => {
                    state.insert(id, None);
                }
                _ => state.clear(),
            }
        }
        state.into_iter().collect()
    }

    #[test]
    fn spilled_runs_merge_to_the_last_change_of_each_key() {
        // A seeded random workload: puts and removals over few keys, out of
        // `_seq` order across batches (as files of different manifests).
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for round in 0..20 {
            let n = 500 + next(3000) as usize;
            let mut changes: Vec<(i64, char, i32, i32)> = (0..n)
                .map(|i| {
                    let op = match next(10) {
                        0..=6 => 'p',
                        _ => 'r',
                    };
                    (i as i64 + 1, op, next(400) as i32, next(1_000_000) as i32)
                })
                .collect();
            if round % 4 == 1 {
                let at = next(n as u64) as usize;
                changes[at].1 = 't';
            }
            // Shuffle batches of changes, as manifests arrive in any order.
            for i in (1..changes.len()).rev() {
                let j = next(i as u64 + 1) as usize;
                changes.swap(i, j);
            }
            let want = model(&changes);
            let (got, _) = sort(&changes, 1000, usize::MAX);
            // Small batches make more runs than a merge takes at once:
            // merged first in groups, then with the rest.
            let per = if round % 2 == 0 { 97 } else { 7 };
            let (spilled, runs) = sort(&changes, per, 1);
            assert!(runs > 3, "round {round}: only {runs} runs spilled");
            if per == 7 {
                assert!(
                    runs > FAN_IN + 1,
                    "round {round}: {runs} runs, no merge pass"
                );
            }
            assert_eq!(got, want, "round {round}, in memory");
            assert_eq!(spilled, want, "round {round}, spilled");
        }
    }

    fn put(vb: u32, vr: u32) -> Entry {
        Entry {
            seq: 1,
            kb: 0,
            kr: vr,
            vb,
            vr,
        }
    }

    fn removal() -> Entry {
        Entry {
            seq: 1,
            kb: 0,
            kr: 0,
            vb: NONE,
            vr: 0,
        }
    }

    fn lens(parts: &[&[Entry]]) -> Vec<(usize, bool)> {
        parts
            .iter()
            .map(|p| (p.len(), slice_of(p).is_some()))
            .collect()
    }

    #[test]
    fn changes_in_key_order_are_cut_into_slices_of_their_batches() {
        // 300 consecutive rows of batch 0: slices of at most 128.
        let run: Vec<Entry> = (0..300).map(|r| put(0, r)).collect();
        assert_eq!(
            lens(&parts(&run, 128)),
            [(128, true), (128, true), (44, true)]
        );
        assert_eq!(slice_of(&run[128..256]), Some((0, 128)));
        // Sorted, but a key had two changes: the run keeps the last, so a
        // row is skipped; two slices, no copy.
        let mut gap: Vec<Entry> = (0..100).map(|r| put(0, r)).collect();
        gap.extend((101..200).map(|r| put(0, r)));
        assert_eq!(lens(&parts(&gap, 1000)), [(100, true), (99, true)]);
        // One change out of order in the middle: copied with its
        // neighbours only when they are too few to slice.
        let mut odd: Vec<Entry> = (0..100).map(|r| put(0, r)).collect();
        odd.push(put(1, 7));
        odd.extend((100..200).map(|r| put(0, r)));
        assert_eq!(
            lens(&parts(&odd, 1000)),
            [(100, true), (1, true), (100, true)]
        );
        let mut few: Vec<Entry> = (0..10).map(|r| put(0, r)).collect();
        few.push(put(1, 7));
        few.extend((10..20).map(|r| put(0, r)));
        assert_eq!(lens(&parts(&few, 1000)), [(21, false)]);
        // A new batch starts a new slice; removals are never sliced.
        let mut two: Vec<Entry> = (0..70).map(|r| put(0, r)).collect();
        two.extend((0..70).map(|r| put(1, r)));
        two.push(removal());
        assert_eq!(
            lens(&parts(&two, 1000)),
            [(70, true), (70, true), (1, false)]
        );
        // Random rows: copied, in batches of at most the maximum.
        let random: Vec<Entry> = (0..300).map(|r| put(0, (r * 7919) % 300)).collect();
        assert_eq!(
            lens(&parts(&random, 128)),
            [(128, false), (128, false), (44, false)]
        );
        assert!(parts(&[], 128).is_empty());
    }

    #[test]
    fn runs_with_disjoint_ascending_keys_make_one_chain() {
        let k = |x: u8| vec![x];
        let chain_of = |ranges: &[(Vec<u8>, Vec<u8>)]| {
            let r: Vec<(&[u8], &[u8])> = ranges
                .iter()
                .map(|(a, b)| (a.as_slice(), b.as_slice()))
                .collect();
            chains(&r)
        };
        // A snapshot's runs: one after another, given in any order.
        let ordered = [(k(20), k(29)), (k(0), k(9)), (k(10), k(19))];
        assert_eq!(chain_of(&ordered), [vec![1, 2, 0]]);
        // Runs that share a key must be merged (the key's last change).
        let touching = [(k(0), k(10)), (k(10), k(19)), (k(20), k(29))];
        assert_eq!(chain_of(&touching), [vec![0, 2], vec![1]]);
        // A run out of order in the middle (stream changes beside a
        // snapshot): it overlaps two, the rest still chain.
        let odd = [(k(0), k(9)), (k(5), k(25)), (k(10), k(19)), (k(30), k(39))];
        assert_eq!(chain_of(&odd), [vec![0, 2, 3], vec![1]]);
        // Runs over the same keys (insert, update, delete of each): one
        // chain each.
        let same = [(k(0), k(99)), (k(0), k(99)), (k(0), k(99))];
        assert_eq!(chain_of(&same).len(), 3);
    }

    #[test]
    fn changes_in_key_order_spill_without_a_merge_pass() {
        // One change per key, in key order, spilled every 7 changes: more
        // runs than a merge takes at once, yet none is merged (each run
        // file is one spill), and the result is the changes.
        let changes: Vec<(i64, char, i32, i32)> = (0..700)
            .map(|i| (i64::from(i) + 1, 'p', i, i * 3))
            .collect();
        let (got, runs) = sort(&changes, 7, 1);
        assert_eq!(runs, 100, "a merge pass wrote runs");
        assert_eq!(got, model(&changes));
        // The same with a key changed twice (sorted, a duplicate) and a
        // change out of order in the middle: merged right.
        let mut mixed = changes.clone();
        mixed.insert(350, (2000, 'p', 349, -1));
        mixed.insert(500, (2001, 'r', 3, 0));
        let (got, _) = sort(&mixed, 7, 1);
        assert_eq!(got, model(&mixed));
        let (got, _) = sort(&mixed, 1000, usize::MAX);
        assert_eq!(got, model(&mixed));
    }
}
