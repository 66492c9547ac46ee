//! Purge: after a fold with deletion vectors, the files of a current table
//! that carry much dead weight are rewritten without it, in a commit of its
//! own with `dataChange: false` (readers' rows do not change).
//!
//! A file is purged when the share of its rows that its vector deletes
//! reaches `[current] purge_threshold` (default 30 %), and the small files
//! that folds with vectors leave behind (each fold writes the changed rows
//! into new files) are merged once [`SMALL_FILES`] of them gather. So the
//! live files of a table and their vectors stay bounded under any steady
//! load: every file is either near the target size with less than the
//! threshold deleted, or one of fewer than [`SMALL_FILES`] small ones.
//!
//! The rewrite sorts the files' live rows by key through the fold's
//! [`Sorter`] (bounded memory, spilled runs) and writes them as the fold
//! does. A crash before its commit leaves files named for the folded seq
//! that no version knows: the next fold deletes them.

use arrow::array::Array;

use super::*;

/// Small files (below a quarter of the target size) merged at once, at least.
pub(super) const SMALL_FILES: usize = 8;

/// The rows a file holds, from its `add` statistics.
fn records(add: &Value) -> Option<u64> {
    let stats: Value = serde_json::from_str(add["stats"].as_str()?).ok()?;
    stats["numRecords"].as_u64()
}

/// The files of `files` to purge: those whose deleted share reaches
/// `threshold`, and every small file once there are [`SMALL_FILES`].
pub(super) fn purge_candidates(
    files: &BTreeMap<String, Value>,
    threshold: f64,
    target_bytes: u64,
) -> Vec<String> {
    let mut out: Vec<String> = files
        .iter()
        .filter(|(_, add)| {
            let deleted = dv::cardinality(add);
            deleted > 0
                && records(add).is_none_or(|n| deleted as f64 >= threshold * n.max(1) as f64)
        })
        .map(|(p, _)| p.clone())
        .collect();
    let small: Vec<&String> = files
        .iter()
        .filter(|(p, add)| add["size"].as_u64().unwrap_or(0) < target_bytes / 4 && !out.contains(p))
        .map(|(p, _)| p)
        .collect();
    if small.len() >= SMALL_FILES {
        out.extend(small.into_iter().cloned());
    }
    out
}

/// Purges the files of the current table in `dir` (at `version`, of the
/// shape `target`) that [`purge_candidates`] picks, in one commit.
pub(super) async fn purge(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    target: &Target<'_>,
    dir: &Path,
    report: &mut FoldReport,
) -> Result<()> {
    let state = FORMAT.load(ctx.store.as_ref(), dir, true).await?;
    let Some(version) = state.version else {
        return Ok(());
    };
    let picked = purge_candidates(&state.files, ctx.purge_threshold, ctx.target_bytes);
    if picked.is_empty() {
        return Ok(());
    }
    let schema = target.schema.clone();
    let mut sorter = Sorter::new(schema.clone(), ctx.budget, &ctx.spill_root);
    for path in &picked {
        sort_live_rows(
            ctx,
            dir,
            path,
            &state.files[path],
            None,
            target,
            &mut sorter,
        )
        .await?;
    }
    let mut out = Output {
        ctx,
        dir,
        schema: schema.clone(),
        props: keyed_file_properties(&schema, &target.key_idx)?,
        runs_column: runs_column(&schema, &target.key_idx),
        open: None,
        adds: Vec::new(),
        written: Vec::new(),
        // Files named after the fold's (which committed): the next fold
        // tells them from its own by the log.
        n: 50_000,
        data_change: false,
        bytes_per_row: None,
    };
    let written = async {
        let mut merge = sorter.finish()?;
        while let Some(batch) = merge.next_batch()? {
            let keys = batch.column(KEY).as_binary::<i32>();
            if keys.is_empty() {
                continue;
            }
            let values = RecordBatch::try_new(schema.clone(), batch.columns()[VALUES..].to_vec())
                .map_err(|e| lake_err(t, format!("a purged batch: {e}")))?;
            out.push(&values, keys.value(0), keys.value(keys.len() - 1))
                .await?;
        }
        out.cut().await
    }
    .await;
    let Output {
        adds,
        written: paths,
        ..
    } = out;
    if let Err(e) = written {
        for p in &paths {
            let _ = ctx.store.delete(p).await;
        }
        return Err(e);
    }
    let mut commit = fold_commit(ctx, t, version + 1, "purge");
    for p in &picked {
        commit.files.push(remove_with(p, &state.files[p], false));
    }
    let added = adds.len();
    commit.files.extend(adds);
    match write(ctx, dir, &commit).await {
        Ok(()) => {
            report.files_purged += picked.len();
            report.files_added += added;
            report.commits += 1;
            tracing::debug!(table = %t.name(), purged = picked.len(), written = added, "purged files of a current table");
            Ok(())
        }
        Err(u) => {
            if !u.may_have_landed {
                for p in &paths {
                    let _ = ctx.store.delete(p).await;
                }
            }
            Err(u.error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(size: u64, rows: u64, deleted: u64) -> Value {
        let mut a = json!({"size": size, "stats": format!("{{\"numRecords\":{rows}}}")});
        if deleted > 0 {
            a["deletionVector"] = json!({"cardinality": deleted});
        }
        a
    }

    #[test]
    fn files_past_the_threshold_and_gathered_small_files_are_purged() {
        let mut files = BTreeMap::new();
        files.insert("big-light".to_string(), add(1000, 100, 29));
        files.insert("big-heavy".to_string(), add(1000, 100, 30));
        files.insert("small-0".to_string(), add(10, 10, 0));
        assert_eq!(purge_candidates(&files, 0.3, 1000), ["big-heavy"]);
        for i in 1..SMALL_FILES {
            files.insert(format!("small-{i}"), add(10, 10, 0));
        }
        let picked = purge_candidates(&files, 0.3, 1000);
        assert_eq!(picked.len(), 1 + SMALL_FILES);
        assert!(!picked.contains(&"big-light".to_string()));
        // A file with every row deleted goes too.
        let mut files = BTreeMap::new();
        files.insert("gone".to_string(), add(1000, 5, 5));
        assert_eq!(purge_candidates(&files, 0.9, 1000), ["gone"]);
    }
}
