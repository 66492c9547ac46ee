//! The pure part of a fold: which file of the current table a changed key
//! goes to. Keys are byte strings that compare like the key values (Arrow's
//! row format), so no value is compared here.

/// The key range and size of one file of a current table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRange {
    pub first: Vec<u8>,
    pub last: Vec<u8>,
    pub bytes: u64,
}

/// Where a changed key goes: into a file that is rewritten, or into new
/// files written in the gap before file `g` (gap `files.len()` lies after
/// the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    File(usize),
    Gap(usize),
}

/// Places a changed key (`put`: a put, else a removal) among the files of a
/// current table, sorted by key, non-overlapping. A key inside a file's
/// range rewrites that file. A put between two files (or past either end)
/// grows the file before it while that file is below `target` bytes, else
/// it starts new files in that gap: with auto-increment keys, inserts land
/// after the last file, which fills up to `target` and is then left alone.
/// A removal outside every range touches no file (`None`). Keys in
/// ascending order get places in ascending order (gap `g` before file `g`).
pub fn place(files: &[FileRange], key: &[u8], put: bool, target: u64) -> Option<Place> {
    let after = files.partition_point(|f| f.first.as_slice() <= key);
    let (file, gap) = match after {
        0 if files.is_empty() => (None, 0),
        0 => (Some(0).filter(|_| files[0].bytes < target), 0),
        n if key <= files[n - 1].last.as_slice() => return Some(Place::File(n - 1)),
        n => (Some(n - 1).filter(|i| files[*i].bytes < target), n),
    };
    if !put {
        return None;
    }
    Some(file.map_or(Place::Gap(gap), Place::File))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u8, last: u8, bytes: u64) -> FileRange {
        FileRange {
            first: vec![first],
            last: vec![last],
            bytes,
        }
    }

    fn places(files: &[FileRange], keys: &[u8], put: bool) -> Vec<Option<Place>> {
        keys.iter().map(|x| place(files, &[*x], put, 100)).collect()
    }

    #[test]
    fn keys_go_to_the_file_whose_range_holds_them() {
        let files = [range(10, 19, 100), range(20, 29, 100), range(40, 49, 100)];
        let got = places(&files, &[12, 25, 29, 45], true);
        use Place::*;
        assert_eq!(
            got,
            [Some(File(0)), Some(File(1)), Some(File(1)), Some(File(2))]
        );
    }

    #[test]
    fn appends_after_a_full_file_start_new_files_and_leave_it_alone() {
        let files = [range(10, 19, 100), range(20, 29, 100)];
        use Place::*;
        let got = places(&files, &[5, 30, 35], true);
        assert_eq!(got, [Some(Gap(0)), Some(Gap(2)), Some(Gap(2))]);
    }

    #[test]
    fn appends_grow_a_file_below_the_target() {
        let files = [range(10, 19, 100), range(20, 29, 40)];
        use Place::*;
        assert_eq!(
            places(&files, &[30, 15], true),
            [Some(File(1)), Some(File(0))]
        );
        // A small first file takes keys before it too.
        let files = [range(10, 19, 40)];
        assert_eq!(places(&files, &[5], true), [Some(File(0))]);
    }

    #[test]
    fn removals_outside_every_range_touch_nothing() {
        let files = [range(10, 19, 100)];
        assert_eq!(places(&files, &[5, 30], false), [None, None]);
        assert_eq!(places(&files, &[15], false), [Some(Place::File(0))]);
        // With no file at all, puts start the first file.
        assert_eq!(places(&[], &[5, 30], true), [Some(Place::Gap(0)); 2]);
    }

    #[test]
    fn ascending_keys_get_ascending_places() {
        let files = [range(10, 19, 40), range(30, 39, 100), range(50, 59, 100)];
        let order = |p: Place| match p {
            Place::Gap(g) => 2 * g,
            Place::File(i) => 2 * i + 1,
        };
        let mut last = 0;
        for k in 0..=70u8 {
            if let Some(p) = place(&files, &[k], true, 100) {
                assert!(order(p) >= last, "key {k}: {p:?} after {last}");
                last = order(p);
            }
        }
    }
}
