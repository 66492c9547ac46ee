//! Which small files of a changelog table are merged into which new file:
//! pure, from the `add` actions of the table's live files.
//!
//! A file takes part when sluice wrote it (its rows are in `_seq` order,
//! which the merge relies on), it is smaller than the target, older than
//! `min_age`, and all its rows are older than the last complete fold (the
//! fold reads the manifests' files after it, which compaction then never
//! touches). The files taken are ordered by their first `_seq` and cut
//! into runs of at most the target size: each run becomes one file. A run
//! of one file gains nothing and is left out.

use serde_json::Value;

use super::COMPACTED_DIR;
use crate::table::rewrite::REWRITTEN_DIR;

/// A live file of a changelog table, as its `add` action describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    /// Relative to the table folder, as the log names it.
    pub path: String,
    pub size: u64,
    pub modified_ms: i64,
    /// The least and greatest `_seq` of its rows (`None`: the stats lack them).
    pub seqs: Option<(i64, i64)>,
}

impl LiveFile {
    /// The file of an `add` action (as [`crate::table::log::TableState`] keeps them).
    pub fn of_add(path: &str, add: &Value) -> LiveFile {
        let stats: Option<Value> = match &add["stats"] {
            Value::String(s) => serde_json::from_str(s).ok(),
            Value::Object(_) => Some(add["stats"].clone()),
            _ => None,
        };
        let seqs = stats.and_then(|s| {
            let lo = s["minValues"]["_seq"].as_i64()?;
            let hi = s["maxValues"]["_seq"].as_i64()?;
            Some((lo, hi))
        });
        LiveFile {
            path: path.to_string(),
            size: add["size"].as_u64().unwrap_or(0),
            modified_ms: add["modificationTime"].as_i64().unwrap_or(0),
            seqs,
        }
    }
}

/// What a round of compaction of one table may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub target_bytes: u64,
    pub min_age_ms: i64,
    pub now_ms: i64,
    /// Only files whose rows are all below this `_seq` (the next `_seq` of
    /// the last completely folded manifest); `None`: no fold to wait for.
    pub below_seq: Option<i64>,
    /// Input files of one commit at most: a table with a long backlog is
    /// compacted over several rounds, each a commit of bounded size.
    pub max_inputs: usize,
}

/// One new file: the files it replaces, in `_seq` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub files: Vec<LiveFile>,
}

impl Group {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// The groups of one round.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub groups: Vec<Group>,
    /// Files were left for another round by [`Limits::max_inputs`].
    pub more: bool,
}

/// Whether sluice wrote the file at `path` (relative to the table folder):
/// the stream's `part-<seq, 20 digits>-…`, a type rewrite's copy of one,
/// or a compacted file. Files of other writers (an OPTIMIZE by Spark or
/// delta-rs, a Z-order) may hold their rows in any order.
pub fn written_by_sluice(path: &str) -> bool {
    let stream = |name: &str| {
        name.strip_prefix("part-")
            .and_then(|rest| rest.get(..21))
            .is_some_and(|seq| seq.ends_with('-') && seq[..20].bytes().all(|b| b.is_ascii_digit()))
            && name.ends_with(".parquet")
    };
    match path.split_once('/') {
        None => stream(path),
        // A type rewrite's copy of either.
        Some((REWRITTEN_DIR, name)) => name
            .strip_prefix('v')
            .and_then(|n| n.split_once('-'))
            .is_some_and(|(v, rest)| {
                v.bytes().all(|b| b.is_ascii_digit())
                    && (stream(rest) || super::compacted_writer(rest).is_some())
            }),
        Some((COMPACTED_DIR, name)) => super::compacted_writer(name).is_some(),
        Some(_) => false,
    }
}

/// Plans a round: the live files merged, in groups of at most the target
/// size.
pub fn plan(files: impl IntoIterator<Item = LiveFile>, limits: &Limits) -> Plan {
    let mut taken: Vec<(i64, LiveFile)> = files
        .into_iter()
        .filter(|f| f.size < limits.target_bytes)
        .filter(|f| limits.now_ms - f.modified_ms >= limits.min_age_ms)
        .filter(|f| written_by_sluice(&f.path))
        .filter_map(|f| {
            let (lo, hi) = f.seqs?;
            limits.below_seq.is_none_or(|b| hi < b).then_some((lo, f))
        })
        .collect();
    taken.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
    let mut runs: Vec<Group> = Vec::new();
    let mut run = Group { files: Vec::new() };
    let mut bytes = 0;
    for (_, f) in taken {
        if !run.files.is_empty() && bytes + f.size > limits.target_bytes {
            runs.push(std::mem::replace(&mut run, Group { files: Vec::new() }));
            bytes = 0;
        }
        bytes += f.size;
        run.files.push(f);
    }
    runs.push(run);
    let mut out = Plan::default();
    let mut inputs = 0;
    for g in runs.into_iter().filter(|g| g.files.len() > 1) {
        if inputs + g.files.len() > limits.max_inputs.max(2) {
            out.more = true;
            break;
        }
        inputs += g.files.len();
        out.groups.push(g);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_000_000_000;

    fn part(seq: u64) -> String {
        format!("part-{seq:020}-00000-abcdef012345.parquet")
    }

    fn file(path: &str, size: u64, age_ms: i64, seqs: (i64, i64)) -> LiveFile {
        LiveFile {
            path: path.to_string(),
            size,
            modified_ms: NOW - age_ms,
            seqs: Some(seqs),
        }
    }

    fn limits(target: u64) -> Limits {
        Limits {
            target_bytes: target,
            min_age_ms: 1000,
            now_ms: NOW,
            below_seq: None,
            max_inputs: 1000,
        }
    }

    fn paths(plan: &Plan) -> Vec<Vec<&str>> {
        plan.groups
            .iter()
            .map(|g| g.files.iter().map(|f| f.path.as_str()).collect())
            .collect()
    }

    #[test]
    fn the_stats_of_an_add_give_the_seq_range() {
        let add = json!({"path": "p", "size": 42, "modificationTime": 7,
            "stats": "{\"numRecords\":2,\"minValues\":{\"_seq\":10},\"maxValues\":{\"_seq\":19}}"});
        assert_eq!(
            LiveFile::of_add("p", &add),
            LiveFile {
                path: "p".into(),
                size: 42,
                modified_ms: 7,
                seqs: Some((10, 19))
            }
        );
        let bare = json!({"path": "p", "size": 42, "modificationTime": 7});
        assert_eq!(LiveFile::of_add("p", &bare).seqs, None);
    }

    #[test]
    fn only_files_sluice_wrote_are_merged() {
        assert!(written_by_sluice(&part(42)));
        assert!(written_by_sluice(&format!("_rewritten/v12-{}", part(42))));
        assert!(written_by_sluice(
            "_rewritten/v3-compacted-00000000000000000007-abcdef012345-0a1b2c3d.parquet"
        ));
        assert!(written_by_sluice(
            "_compacted/compacted-00000000000000000007-abcdef012345-0a1b2c3d.parquet"
        ));
        // delta-rs and Spark name their files `part-00001-<uuid>-c000…`.
        assert!(!written_by_sluice(
            "part-00001-4f5e3b1a-1c2d-4e5f-8a9b-0c1d2e3f4a5b-c000.zstd.parquet"
        ));
        assert!(!written_by_sluice("_rewritten/x-part-1.parquet"));
        assert!(!written_by_sluice("_delta_log/00000000000000000001.json"));
        assert!(!written_by_sluice("other/part-1.parquet"));
    }

    #[test]
    fn small_old_files_go_in_seq_order_into_runs_of_the_target_size() {
        let files = vec![
            file(&part(3), 40, 5000, (30, 39)),
            file(&part(1), 40, 5000, (10, 19)),
            file(&part(2), 40, 5000, (20, 29)),
            // Too young.
            file(&part(9), 10, 10, (90, 99)),
            // As large as the target: stays.
            file(&part(4), 100, 5000, (40, 49)),
            file(&part(5), 30, 5000, (50, 59)),
            file(&part(6), 30, 5000, (60, 69)),
            // Another writer's file, in any row order.
            file("part-00000-0a1b.c000.parquet", 5, 5000, (0, 100)),
        ];
        let plan = plan(files, &limits(100));
        assert_eq!(
            paths(&plan),
            vec![
                vec![part(1).as_str(), part(2).as_str()],
                vec![part(3).as_str(), part(5).as_str(), part(6).as_str()],
            ]
        );
        assert!(plan.groups.iter().all(|g| g.bytes() <= 100));
        assert!(!plan.more);
    }

    #[test]
    fn a_run_of_one_file_is_left_alone() {
        let files = vec![
            file(&part(1), 70, 5000, (10, 19)),
            file(&part(2), 70, 5000, (20, 29)),
            file(&part(3), 70, 5000, (30, 39)),
        ];
        assert!(plan(files, &limits(100)).groups.is_empty());
    }

    #[test]
    fn files_the_next_fold_reads_stay() {
        let files = vec![
            file(&part(1), 10, 5000, (10, 19)),
            file(&part(2), 10, 5000, (20, 29)),
            file(&part(3), 10, 5000, (30, 39)),
            file(&part(4), 10, 5000, (40, 49)),
        ];
        let mut l = limits(100);
        // The last complete fold's manifest ends before `_seq` 30.
        l.below_seq = Some(30);
        assert_eq!(
            paths(&plan(files.clone(), &l)),
            vec![vec![part(1).as_str(), part(2).as_str()]]
        );
        // A file whose rows straddle the fold stays too.
        l.below_seq = Some(35);
        assert_eq!(
            paths(&plan(files.clone(), &l)),
            vec![vec![part(1).as_str(), part(2).as_str()]]
        );
        // Files without `_seq` statistics stay.
        let mut no_stats = files;
        no_stats[0].seqs = None;
        assert_eq!(
            paths(&plan(no_stats, &limits(100))),
            vec![vec![part(2).as_str(), part(3).as_str(), part(4).as_str()]]
        );
    }

    #[test]
    fn a_long_backlog_takes_several_rounds() {
        let files: Vec<LiveFile> = (1..=10)
            .map(|i| file(&part(i), 10, 5000, (i as i64 * 10, i as i64 * 10 + 9)))
            .collect();
        let mut l = limits(30);
        l.max_inputs = 7;
        let p = plan(files, &l);
        // Runs of three; a third run would pass seven inputs.
        assert_eq!(p.groups.len(), 2);
        assert_eq!(p.groups.iter().map(|g| g.files.len()).sum::<usize>(), 6);
        assert!(p.more);
    }

    #[test]
    fn files_interleaved_in_seq_order_by_their_first_row() {
        // A snapshot chunk and stream rows of one checkpoint overlap.
        let files = vec![
            file(&part(7), 10, 5000, (75, 95)),
            file(
                &format!("part-{:020}-00001-abcdef012345.parquet", 7),
                10,
                5000,
                (70, 99),
            ),
            file(&part(6), 10, 5000, (60, 69)),
        ];
        let p = plan(files, &limits(100));
        let firsts: Vec<i64> = p.groups[0]
            .files
            .iter()
            .map(|f| f.seqs.unwrap().0)
            .collect();
        assert_eq!(firsts, vec![60, 70, 75]);
    }
}
