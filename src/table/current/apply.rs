//! The pure part of a fold: the replay rules applied per key (DESIGN.md
//! "Reading the lake"), and which files of the current table a set of changed
//! keys touches. Keys are byte strings that compare like the key values
//! (Arrow's row format), so no value is compared here.

use std::collections::BTreeMap;

/// One changelog row, as the replay rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `insert` or `snapshot`: put the row under its key.
    Put,
    /// `update`: remove the key of the before image, put the row.
    Update { before: Vec<u8> },
    /// `delete`: remove the key.
    Delete,
    /// `truncate`: every earlier row is gone.
    Truncate,
}

/// What the changes since the last fold leave, per key: the row (an index
/// into the folded change rows) or `None` for a key that is gone.
#[derive(Debug, Default)]
pub struct ChangeSet {
    /// Every row the table had before these changes is gone.
    pub truncated: bool,
    pub keys: BTreeMap<Vec<u8>, Option<usize>>,
}

impl ChangeSet {
    /// Applies one row; rows must come in `_seq` order.
    pub fn apply(&mut self, op: Op, key: Vec<u8>, row: usize) {
        match op {
            Op::Put => {
                self.keys.insert(key, Some(row));
            }
            Op::Update { before } => {
                if before != key {
                    self.keys.insert(before, None);
                }
                self.keys.insert(key, Some(row));
            }
            Op::Delete => {
                self.keys.insert(key, None);
            }
            Op::Truncate => {
                self.keys.clear();
                self.truncated = true;
            }
        }
    }
}

/// The key range and size of one file of a current table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRange {
    pub first: Vec<u8>,
    pub last: Vec<u8>,
    pub bytes: u64,
}

/// Where each changed key goes: into a file that is rewritten, or into new
/// files written in a gap between two files (gap `g` lies before file `g`;
/// gap `files.len()` after the last).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Assignment<'k> {
    pub files: BTreeMap<usize, Vec<&'k [u8]>>,
    pub gaps: BTreeMap<usize, Vec<&'k [u8]>>,
}

/// Assigns changed keys (`true`: a put, `false`: a removal) to the files of a
/// current table, sorted by key, non-overlapping. A key inside a file's range
/// rewrites that file. A put between two files (or past either end) grows the
/// file before it while that file is below `target` bytes, else it starts new
/// files in that gap: with auto-increment keys, inserts land after the last
/// file, which fills up to `target` and is then left alone. A removal outside
/// every range removes nothing and touches no file.
pub fn assign<'k>(
    files: &[FileRange],
    keys: impl IntoIterator<Item = (&'k [u8], bool)>,
    target: u64,
) -> Assignment<'k> {
    let mut out = Assignment::default();
    for (key, put) in keys {
        let after = files.partition_point(|f| f.first.as_slice() <= key);
        let (file, gap) = match after {
            0 if files.is_empty() => (None, 0),
            0 => (Some(0).filter(|_| files[0].bytes < target), 0),
            n if key <= files[n - 1].last.as_slice() => {
                out.files.entry(n - 1).or_default().push(key);
                continue;
            }
            n => (Some(n - 1).filter(|i| files[*i].bytes < target), n),
        };
        if !put {
            continue;
        }
        match file {
            Some(i) => out.files.entry(i).or_default().push(key),
            None => out.gaps.entry(gap).or_default().push(key),
        }
    }
    out
}

/// How many files of about `target` bytes hold `bytes`, and so how to split
/// `rows` rows: at least one file.
pub fn split_rows(rows: usize, bytes: u64, target: u64) -> usize {
    let parts = bytes.div_ceil(target.max(1)).max(1) as usize;
    rows.div_ceil(parts).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u8) -> Vec<u8> {
        vec![n]
    }

    #[test]
    fn replay_rules_per_key() {
        let mut c = ChangeSet::default();
        c.apply(Op::Put, k(1), 0);
        c.apply(Op::Put, k(2), 1);
        // A key move: the old key is gone, the new one holds the row.
        c.apply(Op::Update { before: k(2) }, k(5), 2);
        c.apply(Op::Update { before: k(1) }, k(1), 3);
        c.apply(Op::Delete, k(7), 4);
        let got: Vec<_> = c.keys.iter().map(|(k, v)| (k[0], *v)).collect();
        assert_eq!(got, vec![(1, Some(3)), (2, None), (5, Some(2)), (7, None)]);
        assert!(!c.truncated);

        c.apply(Op::Truncate, Vec::new(), 5);
        assert!(c.truncated);
        assert!(c.keys.is_empty());
        c.apply(Op::Put, k(9), 6);
        // A delete after a put of the same fold removes it again.
        c.apply(Op::Delete, k(9), 7);
        assert_eq!(c.keys.get(&k(9)), Some(&None));
    }

    fn range(first: u8, last: u8, bytes: u64) -> FileRange {
        FileRange {
            first: k(first),
            last: k(last),
            bytes,
        }
    }

    #[test]
    fn keys_go_to_the_file_whose_range_holds_them() {
        let files = [range(10, 19, 100), range(20, 29, 100), range(40, 49, 100)];
        let keys = [k(12), k(25), k(25), k(45)];
        let a = assign(&files, keys.iter().map(|x| (x.as_slice(), true)), 100);
        assert_eq!(a.files.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(a.gaps.is_empty());
    }

    #[test]
    fn appends_after_a_full_file_start_new_files_and_leave_it_alone() {
        let files = [range(10, 19, 100), range(20, 29, 100)];
        let keys = [k(30), k(31), k(5), k(35)];
        let a = assign(&files, keys.iter().map(|x| (x.as_slice(), true)), 100);
        assert!(a.files.is_empty(), "{a:?}");
        assert_eq!(a.gaps[&2], vec![&[30u8][..], &[31], &[35]]);
        assert_eq!(a.gaps[&0], vec![&[5u8][..]]);
    }

    #[test]
    fn appends_grow_a_file_below_the_target() {
        let files = [range(10, 19, 100), range(20, 29, 40)];
        let keys = [k(30), k(15)];
        let a = assign(&files, keys.iter().map(|x| (x.as_slice(), true)), 100);
        assert_eq!(a.files[&1], vec![&[30u8][..]]);
        assert_eq!(a.files[&0], vec![&[15u8][..]]);
        assert!(a.gaps.is_empty());
    }

    #[test]
    fn removals_outside_every_range_touch_nothing() {
        let files = [range(10, 19, 100)];
        let keys = [k(5), k(30)];
        let a = assign(&files, keys.iter().map(|x| (x.as_slice(), false)), 100);
        assert_eq!(a, Assignment::default());
        // With no file at all, puts start the first file.
        let a = assign(&[], keys.iter().map(|x| (x.as_slice(), true)), 100);
        assert_eq!(a.gaps[&0].len(), 2);
    }

    #[test]
    fn files_split_near_the_target_size() {
        assert_eq!(split_rows(1000, 250, 100), 334);
        assert_eq!(split_rows(1000, 50, 100), 1000);
        assert_eq!(split_rows(0, 0, 100), 1);
    }
}
