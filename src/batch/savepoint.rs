//! Savepoints of the transaction in hand, and the rows a logged
//! `ROLLBACK TO SAVEPOINT` or `ROLLBACK` took back.
//!
//! With transactional tables only, the server truncates its binlog cache at
//! `ROLLBACK TO SAVEPOINT` (and logs nothing of a rolled-back transaction),
//! so rolled-back rows never reach the binlog. Once a non-transactional table
//! (MyISAM, Aria) changed inside the transaction, the cache cannot be
//! truncated: the rolled-back rows are in the binlog, followed by a
//! `ROLLBACK TO` (or `ROLLBACK`) Query event, and a replica undoes the rows of
//! the transactional tables; those of the non-transactional ones stay, as on
//! the source. So must we: the `_seq` range is recorded here and the rows of
//! transactional tables in it are left out when their buffer is written (or
//! their pending file rewritten). `_seq` keeps its gap; it stays strictly
//! increasing.

use std::collections::HashSet;

use std::ops::Range;

use arrow::array::{AsArray, BooleanArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

#[derive(Debug, Default)]
pub struct Savepoints {
    /// Savepoints of the transaction in hand, oldest first: the name as the
    /// server compares it (lower case) and the `_seq` of the first row after it.
    marks: Vec<(String, i64)>,
    /// `_seq` ranges taken back, until every buffer that may hold them is written.
    discarded: Vec<Range<i64>>,
    /// The `_seq` of the transaction's first row.
    tx_start: i64,
    /// Tables (`db.table`) whose rows a rollback does not undo.
    non_transactional: HashSet<String>,
}

impl Savepoints {
    /// A transaction begins; its first row will get `next_seq`.
    pub fn begin(&mut self, next_seq: i64) {
        self.marks.clear();
        self.tx_start = next_seq;
    }

    /// A logged `ROLLBACK` ends the transaction: every row of it is taken back.
    pub fn rollback(&mut self, next_seq: i64) -> Range<i64> {
        self.marks.clear();
        let range = self.tx_start.min(next_seq)..next_seq;
        if !range.is_empty() {
            self.discarded.push(range.clone());
        }
        range
    }

    /// Rows of these tables are never taken back: the server cannot undo them.
    pub fn keep_tables(&mut self, tables: impl IntoIterator<Item = String>) {
        self.non_transactional.extend(tables);
    }

    /// `SAVEPOINT name`: a savepoint of the same name moves here.
    pub fn set(&mut self, name: &str, next_seq: i64) {
        let name = name.to_lowercase();
        self.marks.retain(|(n, _)| *n != name);
        self.marks.push((name, next_seq));
    }

    /// `ROLLBACK TO SAVEPOINT name`: the rows from the savepoint to `next_seq`
    /// are taken back; later savepoints are gone, this one stays. Returns the
    /// range taken back (empty when no row came after the savepoint).
    pub fn rollback_to(&mut self, name: &str, next_seq: i64) -> Result<Range<i64>, String> {
        let name = name.to_lowercase();
        let Some(i) = self.marks.iter().rposition(|(n, _)| *n == name) else {
            return Err(format!(
                "ROLLBACK TO SAVEPOINT `{name}` without a SAVEPOINT of that name in the transaction"
            ));
        };
        self.marks.truncate(i + 1);
        let range = self.marks[i].1..next_seq;
        if !range.is_empty() {
            self.discarded.push(range.clone());
        }
        Ok(range)
    }

    /// The transaction ended: its savepoints are gone (rows taken back stay
    /// taken back until written).
    pub fn end_transaction(&mut self) {
        self.marks.clear();
    }

    /// Every buffer was written: no row of a discarded range is left in memory.
    pub fn written(&mut self) {
        self.discarded.clear();
        self.non_transactional.clear();
    }

    /// Whether rows of `table` in `seqs` were taken back.
    pub fn overlaps(&self, table: &str, seqs: &Range<i64>) -> bool {
        !self.non_transactional.contains(table)
            && self
                .discarded
                .iter()
                .any(|r| r.start < seqs.end && seqs.start < r.end)
    }

    /// The batch of `table` (`db.table`) without the rows taken back.
    pub fn keep(&self, table: &str, batch: RecordBatch) -> Result<RecordBatch> {
        if self.discarded.is_empty() || self.non_transactional.contains(table) {
            return Ok(batch);
        }
        let seqs = batch
            .column_by_name("_seq")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| Error::Lake("a change batch without an Int64 _seq column".into()))?;
        let keep: BooleanArray = seqs
            .values()
            .iter()
            .map(|s| Some(!self.discarded.iter().any(|r| r.contains(s))))
            .collect();
        Ok(filter_record_batch(&batch, &keep)?)
    }
}

/// The `_seq` range of a change batch (empty for an empty batch).
pub fn seq_range(batch: &RecordBatch) -> Range<i64> {
    let Some(seqs) = batch
        .column_by_name("_seq")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
    else {
        return 0..0;
    };
    match (arrow::compute::min(seqs), arrow::compute::max(seqs)) {
        (Some(lo), Some(hi)) => lo..hi + 1,
        _ => 0..0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(seqs: &[i64]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("v", DataType::Utf8, false),
            Field::new("_seq", DataType::Int64, false),
        ]);
        let v: StringArray = seqs.iter().map(|s| Some(format!("r{s}"))).collect();
        RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(v), Arc::new(Int64Array::from(seqs.to_vec()))],
        )
        .unwrap()
    }

    fn seqs_of(b: &RecordBatch) -> Vec<i64> {
        b.column_by_name("_seq")
            .unwrap()
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn rollback_to_takes_back_the_rows_after_the_savepoint_only() {
        let mut sp = Savepoints::default();
        sp.set("a", 10);
        sp.set("B", 12);
        // ROLLBACK TO b, then more rows, then ROLLBACK TO a.
        assert_eq!(sp.rollback_to("b", 14).unwrap(), 12..14);
        assert_eq!(sp.rollback_to("A", 16).unwrap(), 10..16);
        let kept = sp
            .keep("s.t", batch(&[8, 9, 10, 12, 13, 15, 16, 17]))
            .unwrap();
        assert_eq!(seqs_of(&kept), [8, 9, 16, 17]);
        assert_eq!(kept.column(0).as_string::<i32>().value(2), "r16");
        assert!(sp.overlaps("s.t", &(15..16)));
        assert!(!sp.overlaps("s.t", &(16..30)));
        // A non-transactional table keeps its rows, as the server does.
        sp.keep_tables(["s.aria".to_string()]);
        assert!(!sp.overlaps("s.aria", &(15..16)));
        assert_eq!(
            seqs_of(&sp.keep("s.aria", batch(&[10, 16])).unwrap()),
            [10, 16]
        );
    }

    #[test]
    fn later_savepoints_go_and_a_repeated_name_moves() {
        let mut sp = Savepoints::default();
        sp.set("a", 1);
        sp.set("b", 2);
        sp.set("a", 5);
        assert_eq!(sp.rollback_to("a", 7).unwrap(), 5..7);
        // b was set before the moved a: it is still there.
        assert_eq!(sp.rollback_to("b", 9).unwrap(), 2..9);
        // a came after b: gone.
        assert!(sp.rollback_to("a", 9).unwrap_err().contains("`a`"));
        sp.end_transaction();
        assert!(sp.rollback_to("b", 9).is_err());
        // What was taken back stays out until written.
        assert_eq!(seqs_of(&sp.keep("s.t", batch(&[1, 3, 9])).unwrap()), [1, 9]);
        sp.written();
        assert_eq!(
            seqs_of(&sp.keep("s.t", batch(&[1, 3, 9])).unwrap()),
            [1, 3, 9]
        );
    }

    #[test]
    fn nothing_taken_back_when_no_row_followed_the_savepoint() {
        let mut sp = Savepoints::default();
        sp.set("a", 4);
        assert!(sp.rollback_to("a", 4).unwrap().is_empty());
        assert_eq!(seqs_of(&sp.keep("s.t", batch(&[3, 4])).unwrap()), [3, 4]);
        assert_eq!(seq_range(&batch(&[7, 3, 5])), 3..8);
        assert_eq!(seq_range(&batch(&[])), 0..0);
    }

    #[test]
    fn a_logged_rollback_takes_back_the_whole_transaction() {
        let mut sp = Savepoints::default();
        sp.begin(20);
        sp.set("a", 22);
        assert_eq!(sp.rollback(25), 20..25);
        assert!(
            sp.rollback_to("a", 25).is_err(),
            "savepoints end with the transaction"
        );
        assert_eq!(
            seqs_of(&sp.keep("s.t", batch(&[19, 20, 24, 25])).unwrap()),
            [19, 25]
        );
        sp.begin(30);
        assert!(sp.rollback(30).is_empty());
    }
}
