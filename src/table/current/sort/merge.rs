//! Sorted runs merged back into one stream of run batches in key order
//! ([`Merge`]): a heap of the runs' next keys, and a run's whole stretch
//! below every other run's next key taken at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::compute::{filter_record_batch, interleave_record_batch};
use arrow::datatypes::{Int64Type, SchemaRef};

use super::{err, KEY, SEQ};
use crate::error::Result;

/// The batches of a run or a chain of runs, in key order.
pub(super) type Source = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

struct Cursor {
    source: Source,
    /// The batch being merged; empty before the first and after the last.
    batch: RecordBatch,
    row: usize,
}

impl Cursor {
    fn key(&self) -> &[u8] {
        self.batch.column(KEY).as_binary::<i32>().value(self.row)
    }

    fn seq(&self) -> i64 {
        self.batch
            .column(SEQ)
            .as_primitive::<Int64Type>()
            .value(self.row)
    }

    /// Loads the next non-empty batch; false at the end of the run.
    fn load(&mut self) -> Result<bool> {
        self.row = 0;
        for batch in self.source.by_ref() {
            let batch = batch?;
            if batch.num_rows() > 0 {
                self.batch = batch;
                return Ok(true);
            }
        }
        self.batch = RecordBatch::new_empty(self.batch.schema());
        Ok(false)
    }
}

/// Sorted runs merged back into one stream of run batches in key order.
pub struct Merge {
    cursors: Vec<Cursor>,
    /// `(key, cursor)` of every cursor with rows left in its batch.
    heap: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    /// Cursors whose batch ran out and that load their next one before the
    /// next batch is merged (the last one may still be picked from).
    spent: Vec<usize>,
    truncated_at: Option<i64>,
    shards: Option<ShardFilter>,
    /// Changes per merged batch at most.
    batch_rows: usize,
    /// The last key handed out.
    last_key: Option<Vec<u8>>,
    _spill_dir: Option<tempfile::TempDir>,
}

impl Merge {
    pub(super) fn new(
        schema: &SchemaRef,
        sources: Vec<Source>,
        truncated_at: Option<i64>,
        shards: Option<ShardFilter>,
        spill_dir: Option<tempfile::TempDir>,
        batch_rows: usize,
    ) -> Self {
        let cursors = sources
            .into_iter()
            .map(|source| Cursor {
                source,
                batch: RecordBatch::new_empty(schema.clone()),
                row: 0,
            })
            .collect::<Vec<_>>();
        let spent = (0..cursors.len()).collect();
        Merge {
            cursors,
            heap: BinaryHeap::new(),
            spent,
            truncated_at,
            shards,
            batch_rows,
            last_key: None,
            _spill_dir: spill_dir,
        }
    }

    /// The next batch of changes in key order (one per key), `None` at the
    /// end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            for c in std::mem::take(&mut self.spent) {
                if self.cursors[c].load()? {
                    self.heap.push(Reverse((self.cursors[c].key().to_vec(), c)));
                }
            }
            if self.heap.is_empty() {
                return Ok(None);
            }
            let batch = if self.cursors.len() == 1 {
                // One run: its batches as they are.
                self.heap.clear();
                self.spent.push(0);
                self.cursors[0].batch.clone()
            } else {
                let picks = self.pick();
                let (Some(&(c, from)), Some(&(last_c, to))) = (picks.first(), picks.last()) else {
                    continue;
                };
                if c == last_c && to + 1 - from == picks.len() && picks.iter().all(|p| p.0 == c) {
                    // Consecutive rows of one run (a run's rows ascend):
                    // no copy.
                    self.cursors[c].batch.slice(from, picks.len())
                } else {
                    let sources: Vec<&RecordBatch> =
                        self.cursors.iter().map(|c| &c.batch).collect();
                    interleave_record_batch(&sources, &picks).map_err(err)?
                }
            };
            let batch = match self.truncated_at {
                Some(t) => {
                    let seqs = batch.column(SEQ).as_primitive::<Int64Type>();
                    let keep: BooleanArray = seqs.iter().map(|s| s.map(|s| s >= t)).collect();
                    filter_record_batch(&batch, &keep).map_err(err)?
                }
                None => batch,
            };
            let batch = match &self.shards {
                Some(shards) => shards.filter(batch)?,
                None => batch,
            };
            if batch.num_rows() > 0 {
                self.check_order(&batch)?;
                return Ok(Some(batch));
            }
        }
    }

    /// Keys must come out strictly ascending: a fold that placed a key twice
    /// would write it twice. Fails the fold instead.
    fn check_order(&mut self, batch: &RecordBatch) -> Result<()> {
        let keys = batch.column(KEY).as_binary::<i32>();
        let n = batch.num_rows();
        for r in 0..n {
            let key = keys.value(r);
            if self.last_key.as_deref().is_some_and(|last| last >= key) {
                return Err(err(
                    "sorted changes came out of key order (a bug); the previous version stays",
                ));
            }
            if r + 1 == n {
                self.last_key = Some(key.to_vec());
            } else if key >= keys.value(r + 1) {
                return Err(err(
                    "sorted changes came out of key order (a bug); the previous version stays",
                ));
            }
        }
        Ok(())
    }

    /// Picks `(cursor, row)` of the last change of each key, in key order,
    /// until a cursor's batch runs out.
    fn pick(&mut self) -> Vec<(usize, usize)> {
        let mut picks = Vec::with_capacity(self.batch_rows);
        while self.spent.is_empty() && picks.len() < self.batch_rows {
            let Some(Reverse((key, first))) = self.heap.pop() else {
                break;
            };
            let mut same = vec![first];
            while self
                .heap
                .peek()
                .is_some_and(|Reverse((k, _))| k.as_slice() == key.as_slice())
            {
                if let Some(Reverse((_, c))) = self.heap.pop() {
                    same.push(c);
                }
            }
            if same.len() == 1 {
                // No other run has this key: take at once the rows of this
                // run below the next run's key.
                let room = self.batch_rows - picks.len();
                let next = self.heap.peek().map(|Reverse((k, _))| k.as_slice());
                let cur = &mut self.cursors[first];
                let n = cur.batch.num_rows();
                let end = below(&cur.batch, cur.row + 1, (cur.row + room).min(n), next);
                picks.extend((cur.row..end).map(|r| (first, r)));
                cur.row = end;
                if end < n {
                    self.heap.push(Reverse((cur.key().to_vec(), first)));
                } else {
                    self.spent.push(first);
                }
                continue;
            }
            let best = same
                .iter()
                .copied()
                .max_by_key(|c| self.cursors[*c].seq())
                .unwrap_or(first);
            picks.push((best, self.cursors[best].row));
            for c in same {
                let cur = &mut self.cursors[c];
                cur.row += 1;
                if cur.row < cur.batch.num_rows() {
                    self.heap.push(Reverse((cur.key().to_vec(), c)));
                } else {
                    self.spent.push(c);
                }
            }
        }
        picks
    }
}

/// The end of the rows of `batch` from `from` up to `to` whose keys are
/// below `bound` (all of them without one); keys ascend.
fn below(batch: &RecordBatch, from: usize, to: usize, bound: Option<&[u8]>) -> usize {
    let Some(bound) = bound else {
        return to;
    };
    let keys = batch.column(KEY).as_binary::<i32>();
    let (mut lo, mut hi) = (from, to);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if keys.value(mid) < bound {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The TRUNCATEs of shards of a routed table, applied to merged changes: a
/// change that puts a row of a truncated shard before its TRUNCATE is
/// dropped (so the key keeps no row: the rows a table had are changes
/// before every other). Removals stay: their key has no row either way.
pub(super) struct ShardFilter {
    /// `_seq` of the last TRUNCATE by db, then table: looked up by the
    /// rows' own strings, without a copy per row.
    truncations: HashMap<String, HashMap<String, i64>>,
    /// The run batch columns of `_source_db` and `_source_table`.
    db: usize,
    table: usize,
}

impl ShardFilter {
    /// `None` without truncations, or for a table without the shard
    /// columns (which no shard TRUNCATE names).
    pub(super) fn new(
        values: &arrow::datatypes::Schema,
        truncations: super::ShardTruncations,
    ) -> Option<Self> {
        use crate::schema::lake_names::{SOURCE_DB, SOURCE_TABLE};
        if truncations.is_empty() {
            return None;
        }
        let at = |name: &str| values.index_of(name).ok().map(|i| i + super::VALUES);
        let mut by_db: HashMap<String, HashMap<String, i64>> = HashMap::new();
        for ((db, table), seq) in truncations {
            by_db.entry(db).or_default().insert(table, seq);
        }
        Some(ShardFilter {
            truncations: by_db,
            db: at(SOURCE_DB)?,
            table: at(SOURCE_TABLE)?,
        })
    }

    fn filter(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let strings = |i: usize| {
            arrow::compute::cast(batch.column(i), &arrow::datatypes::DataType::Utf8).map_err(err)
        };
        let (db, table) = (strings(self.db)?, strings(self.table)?);
        let (db, table) = (db.as_string::<i32>(), table.as_string::<i32>());
        let seqs = batch.column(SEQ).as_primitive::<Int64Type>();
        let removed = batch.column(super::REMOVED).as_boolean();
        let keep: BooleanArray = (0..batch.num_rows())
            .map(|r| {
                if removed.value(r) || db.is_null(r) || table.is_null(r) {
                    return Some(true);
                }
                let at = self
                    .truncations
                    .get(db.value(r))
                    .and_then(|tables| tables.get(table.value(r)));
                Some(at.is_none_or(|t| seqs.value(r) >= *t))
            })
            .collect();
        filter_record_batch(&batch, &keep).map_err(err)
    }
}
