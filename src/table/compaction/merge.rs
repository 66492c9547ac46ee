//! The rows of a group of changelog files, merged back into one stream in
//! `_seq` order, a batch at a time.
//!
//! Every file sluice writes holds its rows in `_seq` order, and files
//! overlap in `_seq` only within one checkpoint (snapshot chunks and stream
//! rows are buffered apart), so the merge opens a file only once the rows
//! before its first `_seq` are out: it holds one read batch (and the row
//! group under it) of the one or two files that overlap, never the group.
//!
//! Files of one group may differ in their columns (a column added between
//! them). Rows of two shapes cannot share a file, so when the next file has
//! another shape the files open are merged out first, and what follows
//! starts a new output: each output is in `_seq` order on its own.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::interleave_record_batch;
use arrow::datatypes::{Int64Type, SchemaRef};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::arrow::async_reader::ParquetRecordBatchStream;

use crate::error::{Error, Result};
use crate::table::files::{open_parquet, StoreFile};

/// Rows per merged batch at most.
const MERGE_BATCH_ROWS: usize = 8192;

/// One file to merge.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: Path,
    pub size: u64,
    /// Its least `_seq` (from the stats).
    pub first_seq: i64,
}

struct Cursor {
    path: Path,
    stream: ParquetRecordBatchStream<StoreFile>,
    batch: RecordBatch,
    row: usize,
}

impl Cursor {
    fn seq(&self) -> i64 {
        seq_column(&self.batch).map_or(i64::MAX, |s| s.value(self.row))
    }

    /// Loads the next non-empty batch; false at the end of the file.
    async fn load(&mut self) -> Result<bool> {
        self.row = 0;
        while let Some(batch) = self.stream.try_next().await? {
            if batch.num_rows() > 0 {
                if seq_column(&batch).is_none() {
                    return Err(Error::Lake(format!(
                        "compaction: {} has no Int64 `_seq` column",
                        self.path
                    )));
                }
                self.batch = batch;
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn seq_column(batch: &RecordBatch) -> Option<&arrow::array::PrimitiveArray<Int64Type>> {
    batch
        .column_by_name("_seq")?
        .as_primitive_opt::<Int64Type>()
}

fn same_shape(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields() == b.fields()
}

/// The merge of a group's files.
pub struct SeqMerge {
    store: Arc<dyn ObjectStore>,
    /// Files not opened yet, by first `_seq`.
    pending: VecDeque<Input>,
    open: Vec<Cursor>,
    /// A file of another shape than the open ones: it waits until they are
    /// merged out.
    parked: Option<Cursor>,
    /// The `_seq` handed out last in the current shape.
    last: Option<i64>,
}

impl SeqMerge {
    pub fn new(store: Arc<dyn ObjectStore>, mut inputs: Vec<Input>) -> Self {
        inputs.sort_by_key(|i| i.first_seq);
        SeqMerge {
            store,
            pending: inputs.into(),
            open: Vec::new(),
            parked: None,
            last: None,
        }
    }

    /// The least `_seq` of the rows at hand.
    fn head(&self) -> Option<i64> {
        self.open.iter().map(Cursor::seq).min()
    }

    /// Opens the files whose first row may come before the rows at hand.
    async fn open_due(&mut self) -> Result<()> {
        while self.parked.is_none() {
            let Some(next) = self.pending.front() else {
                break;
            };
            if self.head().is_some_and(|h| h < next.first_seq) {
                break;
            }
            let Some(input) = self.pending.pop_front() else {
                break;
            };
            let stream = open_parquet(&self.store, input.path.clone(), Some(input.size)).await?;
            let mut cursor = Cursor {
                path: input.path,
                batch: RecordBatch::new_empty(stream.schema().clone()),
                stream,
                row: 0,
            };
            if !cursor.load().await? {
                continue;
            }
            match self.open.first() {
                Some(o) if !same_shape(&o.batch.schema(), &cursor.batch.schema()) => {
                    self.parked = Some(cursor);
                }
                _ => self.open.push(cursor),
            }
        }
        Ok(())
    }

    /// The next batch in `_seq` order; `None` at the end. A batch of another
    /// shape than the one before starts a new output.
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            self.open_due().await?;
            if self.open.is_empty() {
                match self.parked.take() {
                    Some(c) => {
                        self.open.push(c);
                        self.last = None;
                        continue;
                    }
                    None if self.pending.is_empty() => return Ok(None),
                    None => continue,
                }
            }
            // Rows from this `_seq` on wait for the next file to open.
            let bound = match &self.parked {
                Some(_) => None,
                None => self.pending.front().map(|p| p.first_seq),
            };
            let mut picks: Vec<(usize, usize)> = Vec::new();
            let mut spent = None;
            while picks.len() < MERGE_BATCH_ROWS {
                let Some((i, seq)) = self
                    .open
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (i, c.seq()))
                    .min_by_key(|(_, s)| *s)
                else {
                    break;
                };
                if bound.is_some_and(|b| seq >= b) {
                    break;
                }
                let c = &mut self.open[i];
                picks.push((i, c.row));
                c.row += 1;
                if c.row == c.batch.num_rows() {
                    spent = Some(i);
                    break;
                }
            }
            if picks.is_empty() {
                continue;
            }
            let batch = self.take(&picks)?;
            if let Some(i) = spent {
                if !self.open[i].load().await? {
                    self.open.remove(i);
                }
            }
            self.check_order(&batch)?;
            return Ok(Some(batch));
        }
    }

    /// The picked rows as one batch: a slice when they are one file's run.
    fn take(&self, picks: &[(usize, usize)]) -> Result<RecordBatch> {
        let (first, row) = picks[0];
        let run = picks
            .iter()
            .enumerate()
            .all(|(k, (i, r))| *i == first && *r == row + k);
        if run {
            return Ok(self.open[first].batch.slice(row, picks.len()));
        }
        let sources: Vec<&RecordBatch> = self.open.iter().map(|c| &c.batch).collect();
        interleave_record_batch(&sources, picks)
            .map_err(|e| Error::Lake(format!("compaction: merging rows: {e}")))
    }

    /// Rows must come out in strictly ascending `_seq`: a file out of
    /// order (not one sluice wrote) fails the compaction, which then
    /// leaves the table as it is.
    fn check_order(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(seqs) = seq_column(batch) else {
            return Err(Error::Lake("compaction: a merged batch has no _seq".into()));
        };
        for s in seqs.values().iter() {
            if self.last.is_some_and(|l| l >= *s) {
                return Err(Error::Lake(format!(
                    "compaction: rows out of _seq order ({s} after {}); the table is left as it is",
                    self.last.unwrap_or_default()
                )));
            }
            self.last = Some(*s);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use object_store::ObjectStoreExt;

    fn batch(seqs: &[i64], with_extra: bool) -> RecordBatch {
        let mut fields = vec![
            Field::new("id", DataType::Int64, true),
            Field::new("_seq", DataType::Int64, false),
        ];
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(seqs.iter().map(|s| s * 10))),
            Arc::new(Int64Array::from(seqs.to_vec())),
        ];
        if with_extra {
            fields.push(Field::new("extra", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from_iter_values(
                seqs.iter().map(|s| s.to_string()),
            )));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    async fn put(store: &Arc<dyn ObjectStore>, name: &str, b: &RecordBatch) -> Input {
        let bytes = crate::sink::encode_parquet(b).unwrap();
        let path = Path::from(format!("db/t/{name}"));
        let size = bytes.len() as u64;
        store.put(&path, bytes.into()).await.unwrap();
        Input {
            path,
            size,
            first_seq: seq_column(b).unwrap().value(0),
        }
    }

    /// Merges and returns each output's `_seq`s (a new output at each change of shape).
    async fn merged(store: &Arc<dyn ObjectStore>, inputs: Vec<Input>) -> Result<Vec<Vec<i64>>> {
        let mut merge = SeqMerge::new(store.clone(), inputs);
        let mut outputs: Vec<(SchemaRef, Vec<i64>)> = Vec::new();
        while let Some(b) = merge.next_batch().await? {
            let seqs = seq_column(&b).unwrap().values().to_vec();
            match outputs.last_mut() {
                Some((s, v)) if same_shape(s, &b.schema()) => v.extend(seqs),
                _ => outputs.push((b.schema(), seqs)),
            }
        }
        Ok(outputs.into_iter().map(|(_, v)| v).collect())
    }

    #[tokio::test]
    async fn overlapping_files_merge_in_seq_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let a = put(&store, "a.parquet", &batch(&[1, 2, 3], false)).await;
        // A snapshot chunk and the stream's rows of one checkpoint.
        let b = put(&store, "b.parquet", &batch(&[4, 6, 8, 10], false)).await;
        let c = put(&store, "c.parquet", &batch(&[5, 7, 9], false)).await;
        let d = put(&store, "d.parquet", &batch(&[11, 12], false)).await;
        let got = merged(&store, vec![d, c, b, a]).await.unwrap();
        assert_eq!(got, vec![(1..=12).collect::<Vec<i64>>()]);
    }

    #[tokio::test]
    async fn a_new_shape_starts_a_new_output() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let a = put(&store, "a.parquet", &batch(&[1, 2, 3, 9], false)).await;
        let b = put(&store, "b.parquet", &batch(&[4, 5], true)).await;
        let c = put(&store, "c.parquet", &batch(&[6, 7], true)).await;
        let got = merged(&store, vec![a, b, c]).await.unwrap();
        assert_eq!(got, vec![vec![1, 2, 3, 9], vec![4, 5, 6, 7]]);
    }

    #[tokio::test]
    async fn rows_out_of_order_fail_the_merge() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::sink::open_local(dir.path()).unwrap();
        let a = put(&store, "a.parquet", &batch(&[1, 5, 3], false)).await;
        let err = merged(&store, vec![a]).await.unwrap_err().to_string();
        assert!(err.contains("out of _seq order"), "{err}");
    }
}
