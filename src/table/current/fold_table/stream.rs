//! The second pass of a fold whose changes need no sorting: the changelog
//! rows read again as they are, with the removed keys merged in among them.

use arrow::array::{Array, BinaryArray, BooleanArray, Int64Array};
use roaring::RoaringTreemap;

use super::super::super::files::ReadAhead;
use super::super::sort::{run_schema, KEY, RUN_BATCH_ROWS, VALUES};
use super::changes::{ascending, change_rows, read_ahead, ChangeSource, Removals};
use super::*;

/// Changes that [`in_key_order`] found in key order, read again as they are
/// and handed out as batches of the sorter's runs (`[key, seq, removed,
/// values]`): no sorting, no spilling, one changelog batch in memory.
pub(super) struct ChangeStream<'a> {
    t: &'a FoldTable,
    sources: &'a [ChangeSource],
    target: &'a Target<'a>,
    schema: SchemaRef,
    /// The names each source's columns are stored under, and the sources'
    /// rows (those selected), read ahead.
    names: Vec<Vec<Option<String>>>,
    batches: ReadAhead,
    /// The last key handed out.
    last: Option<Vec<u8>>,
    /// The rest of the batch being handed out.
    pending: Option<RecordBatch>,
    /// Keys removed, merged in among the rows read, and the next of them.
    removals: Option<(BinaryArray, Int64Array)>,
    next_removal: usize,
}

impl<'a> ChangeStream<'a> {
    pub fn new(
        ctx: &'a Ctx<'a>,
        t: &'a FoldTable,
        sources: &'a [ChangeSource],
        selected: Option<&'a [RoaringTreemap]>,
        removals: Option<Removals>,
        target: &'a Target<'a>,
    ) -> Self {
        let (names, batches) = read_ahead(ctx, t, sources, target, false, selected);
        ChangeStream {
            t,
            sources,
            target,
            schema: run_schema(&target.schema),
            // Such sources are whole files: one range, one version.
            names: names
                .into_iter()
                .map(|n| n.into_iter().next().unwrap_or_default())
                .collect(),
            batches,
            last: None,
            pending: None,
            removals: removals.map(Removals::finish),
            next_removal: 0,
        }
    }

    /// `batch` (changes that put rows) with the removed keys below `upto`
    /// (all that are left when `None`) merged in, in key order.
    fn with_removals(&mut self, batch: RecordBatch, upto: Option<&[u8]>) -> Result<RecordBatch> {
        let Some((keys, seqs)) = &self.removals else {
            return Ok(batch);
        };
        let from = self.next_removal;
        let mut to = from;
        while to < keys.len() && upto.is_none_or(|u| keys.value(to) < u) {
            to += 1;
        }
        if to == from {
            return Ok(batch);
        }
        self.next_removal = to;
        let n = to - from;
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(keys.slice(from, n)),
            Arc::new(seqs.slice(from, n)),
            Arc::new(BooleanArray::from(vec![true; n])),
        ];
        cols.extend(
            self.schema.fields()[VALUES..]
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), n)),
        );
        let removed =
            RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| lake_err(self.t, e))?;
        if batch.num_rows() == 0 {
            return Ok(removed);
        }
        // Both in key order, no key in both: merged like two sorted runs.
        let (put_keys, removed_keys) = (
            batch.column(KEY).as_binary::<i32>(),
            removed.column(KEY).as_binary::<i32>(),
        );
        let mut picks = Vec::with_capacity(batch.num_rows() + n);
        let (mut p, mut r) = (0, 0);
        while p < put_keys.len() || r < n {
            if r == n || (p < put_keys.len() && put_keys.value(p) < removed_keys.value(r)) {
                picks.push((0, p));
                p += 1;
            } else {
                picks.push((1, r));
                r += 1;
            }
        }
        interleave_record_batch(&[&batch, &removed], &picks).map_err(|e| lake_err(self.t, e))
    }

    /// The next batch, of [`RUN_BATCH_ROWS`] changes at most (as the
    /// sorter's: new files are cut between batches).
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.pending.is_none() {
            self.pending = self.next_read().await?;
        }
        let Some(batch) = self.pending.take() else {
            return Ok(None);
        };
        if batch.num_rows() > RUN_BATCH_ROWS {
            self.pending = Some(batch.slice(RUN_BATCH_ROWS, batch.num_rows() - RUN_BATCH_ROWS));
            return Ok(Some(batch.slice(0, RUN_BATCH_ROWS)));
        }
        Ok(Some(batch))
    }

    async fn next_read(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some((i, batch)) = self.batches.next().await? else {
                // The keys removed after the last row put.
                let rest = self.with_removals(RecordBatch::new_empty(self.schema.clone()), None)?;
                return Ok((rest.num_rows() > 0).then_some(rest));
            };
            let src = &self.sources[i];
            let rows = change_rows(self.t, src, &batch, &self.names[i], self.target)?;
            let n = rows.keys.num_rows();
            if n == 0 {
                continue;
            }
            if !ascending(&rows, self.last.as_deref()) {
                return Err(lake_err(
                    self.t,
                    format!(
                        "changelog file {} changed between two reads of a fold (a bug); the previous version stays",
                        src.path
                    ),
                ));
            }
            self.last = Some(rows.keys.row(n - 1).as_ref().to_vec());
            let keys = BinaryArray::from_iter_values(rows.keys.iter());
            let removed: BooleanArray = (0..n).map(|r| Some(!rows.cdc.op(r).puts())).collect();
            let mut cols: Vec<ArrayRef> =
                vec![Arc::new(keys), rows.cdc.seqs.clone(), Arc::new(removed)];
            cols.extend(rows.values.columns().iter().cloned());
            let batch =
                RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| lake_err(self.t, e))?;
            let last = self.last.take();
            let batch = self.with_removals(batch, last.as_deref());
            self.last = last;
            return batch.map(Some);
        }
    }
}
