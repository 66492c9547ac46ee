//! Keys a fold's first pass found removed, kept aside for the second.

/// Keys whose last change removes them, in key order, and those changes'
/// `_seq`.
#[derive(Default)]
pub(crate) struct Removals {
    keys: arrow::array::BinaryBuilder,
    seqs: Vec<i64>,
    /// What they take in memory (about).
    bytes: usize,
}

impl Removals {
    /// Adds a key (after every key added before) removed by a change at
    /// `seq`; false once they take more than a quarter of `budget`.
    pub(super) fn push(&mut self, key: &[u8], seq: i64, budget: usize) -> bool {
        self.bytes += key.len() + 12;
        self.keys.append_value(key);
        self.seqs.push(seq);
        self.bytes <= budget / 4
    }

    /// The keys and their `_seq` values.
    pub(super) fn finish(mut self) -> (arrow::array::BinaryArray, arrow::array::Int64Array) {
        (
            self.keys.finish(),
            arrow::array::Int64Array::from(self.seqs),
        )
    }
}
