//! The changelog rows a fold reads: the manifests' files after the last
//! fold, or, where another writer replaced them (OPTIMIZE, then VACUUM), the
//! same `_seq` ranges from the live files of the changelog's Delta log.

use super::*;

/// A changelog file a fold reads, and which of its rows it takes.
pub(super) struct ChangeSource {
    path: Path,
    bytes: Option<u64>,
    /// The rows taken, each range with the schema version its rows were
    /// written in: a manifest's own file is one range of every row; a file
    /// that another writer (OPTIMIZE, compaction, a type rewrite) made of
    /// files the fold needs holds other rows too.
    ranges: Vec<SeqRange>,
}

/// The rows with `_seq` in `lo..hi`, written in schema `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SeqRange {
    lo: i64,
    hi: i64,
    version: u32,
}

impl ChangeSource {
    fn manifest_file(f: &DataFile) -> ChangeSource {
        ChangeSource {
            path: stored_path(&f.path),
            bytes: Some(f.bytes),
            ranges: vec![SeqRange {
                lo: i64::MIN,
                hi: i64::MAX,
                version: f.schema_version,
            }],
        }
    }
}

/// The manifests' files after manifest `after`, read as they are.
pub(super) fn manifest_sources(files: &[(u64, DataFile)], after: u64) -> Vec<ChangeSource> {
    files
        .iter()
        .filter(|(seq, _)| *seq > after)
        .map(|(_, f)| ChangeSource::manifest_file(f))
        .collect()
}

/// The same rows, read from what each changelog's Delta log holds now:
/// the manifests' files it still lists (or has not listed yet) as they are,
/// and for those another writer removed (OPTIMIZE, then VACUUM may have
/// deleted them), the rows of their manifests' `_seq` ranges from the live
/// files that cover them. `None` when no file was removed: the manifests'
/// files are what the log holds.
pub(super) async fn live_sources(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    files: &[(u64, DataFile)],
    after: u64,
    next_seqs: &BTreeMap<u64, i64>,
) -> Result<Option<Vec<ChangeSource>>> {
    let mut by_dir: BTreeMap<String, Vec<(u64, &DataFile)>> = BTreeMap::new();
    for (seq, f) in files.iter().filter(|(seq, _)| *seq > after) {
        by_dir
            .entry(crate::table::table_dir(f).to_string())
            .or_default()
            .push((*seq, f));
    }
    let mut before_first: Option<i64> = None;
    let mut out = Vec::new();
    let mut replaced_any = false;
    for (dir, files) in by_dir {
        let dir = Path::from(dir);
        let state = log::load(ctx.store.as_ref(), &dir, true).await?;
        let mut replaced: Vec<SeqRange> = Vec::new();
        let mut direct = std::collections::BTreeSet::new();
        for (seq, f) in files {
            let name = stored_path(&f.path)
                .filename()
                .unwrap_or_default()
                .to_string();
            if state.files.contains_key(&name) || seq > state.applied {
                direct.insert(name);
                out.push(ChangeSource::manifest_file(f));
                continue;
            }
            // The rows of manifest `seq` are those from the previous
            // manifest's next `_seq` up to its own.
            let lo = match next_seqs.range(..seq).next_back() {
                Some((_, n)) => *n,
                None => match before_first {
                    Some(n) => n,
                    None => {
                        let n = if after == 0 {
                            i64::MIN
                        } else {
                            Lake::new(ctx.store.clone())
                                .read_manifest(after)
                                .await?
                                .cursor
                                .next_seq
                        };
                        *before_first.insert(n)
                    }
                },
            };
            let hi = next_seqs.get(&seq).copied().ok_or_else(|| {
                lake_err(t, format!("manifest {seq} was not read before the fold"))
            })?;
            replaced.push(SeqRange {
                lo,
                hi,
                version: f.schema_version,
            });
        }
        if replaced.is_empty() {
            continue;
        }
        replaced_any = true;
        replaced.sort_unstable();
        replaced.dedup();
        if let Some(w) = replaced
            .windows(2)
            .find(|w| w[0].lo < w[1].hi && w[1].lo < w[0].hi)
        {
            return Err(lake_err(
                t,
                format!(
                    "another writer replaced the changelog files of {dir} in _seq {}..{}, which hold rows of schema versions {} and {}: the fold cannot tell them apart",
                    w[1].lo, w[0].hi, w[0].version, w[1].version
                ),
            ));
        }
        for (path, add) in &state.files {
            if direct.contains(path) {
                continue;
            }
            let live = LiveFile::of_add(path, add);
            let ranges: Vec<SeqRange> = replaced
                .iter()
                .copied()
                .filter(|r| live.seqs.is_none_or(|(lo, hi)| lo < r.hi && r.lo <= hi))
                .collect();
            if ranges.is_empty() {
                continue;
            }
            out.push(ChangeSource {
                path: path.split('/').fold(dir.clone(), |p, part| p.join(part)),
                bytes: Some(live.size),
                ranges,
            });
        }
    }
    Ok(replaced_any.then_some(out))
}

/// Reads the rows of `sources` into `sorter`.
pub(super) async fn read_change_rows(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
    sorter: &mut Sorter,
) -> Result<()> {
    let (tv, key_idx) = (target.tv, &target.key_idx[..]);
    for src in sources {
        let names: Vec<Vec<Option<String>>> = src
            .ranges
            .iter()
            .map(|r| {
                shape::stored_names(
                    &t.versions,
                    r.version,
                    shape::origins(&t.versions, r.version, tv.schema.version),
                    false,
                )
            })
            .collect();
        // Only what the fold uses: the table's columns, `_seq`, `_ts`, `_op`
        // and the key of `_before` (not the whole before image, nor `_sql`).
        let wanted = |path: &[String]| {
            names.iter().any(|sources| {
                let mut keys = key_idx
                    .iter()
                    .filter_map(|i| sources.get(*i).and_then(|s| s.as_deref()));
                match path {
                    [root, field, ..] if root == "_before" => {
                        keys.any(|k| k.eq_ignore_ascii_case(field))
                    }
                    [root, ..] => {
                        matches!(root.as_str(), "_seq" | "_ts" | "_op")
                            || sources
                                .iter()
                                .flatten()
                                .any(|s| s.eq_ignore_ascii_case(root))
                    }
                    [] => false,
                }
            })
        };
        let mut stream =
            open_parquet_leaves(&ctx.store, src.path.clone(), src.bytes, wanted).await?;
        while let Some(batch) = stream.try_next().await? {
            for (range, sources) in src.ranges.iter().zip(&names) {
                if range.lo == i64::MIN && range.hi == i64::MAX {
                    add_change_batch(t, src, &batch, sources, target, sorter)?;
                    continue;
                }
                let seq = shape::cdc_column(batch.schema().fields(), batch.columns(), "_seq")
                    .cloned()
                    .ok_or_else(|| {
                        lake_err(t, format!("changelog file {} has no _seq", src.path))
                    })?;
                let seq = cast(&seq, &DataType::Int64).map_err(|e| lake_err(t, e))?;
                let seq = seq.as_primitive::<arrow::datatypes::Int64Type>();
                let keep: BooleanArray = seq
                    .iter()
                    .map(|s| Some(s.is_some_and(|s| range.lo <= s && s < range.hi)))
                    .collect();
                if keep.true_count() == 0 {
                    continue;
                }
                let rows = arrow::compute::filter_record_batch(&batch, &keep)
                    .map_err(|e| lake_err(t, e))?;
                add_change_batch(t, src, &rows, sources, target, sorter)?;
            }
            sorter.spill_if_full()?;
        }
    }
    Ok(())
}

/// Puts the changes of one changelog batch, whose columns are stored under
/// `sources`, into `sorter`.
pub(super) fn add_change_batch(
    t: &FoldTable,
    src: &ChangeSource,
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Target<'_>,
    sorter: &mut Sorter,
) -> Result<()> {
    let (schema, conv, key_idx) = (&target.schema, &target.conv, &target.key_idx[..]);
    let ncols = target.tv.schema.columns.len();
    let mut cols = shape::project(batch, sources, schema, ncols)?;
    let column = |name: &str| {
        shape::cdc_column(batch.schema().fields(), batch.columns(), name)
            .cloned()
            .ok_or_else(|| lake_err(t, format!("changelog file {} has no {name}", src.path)))
    };
    let seq = cast(&column("_seq")?, &DataType::Int64).map_err(|e| lake_err(t, e))?;
    let ts = cast(
        &column("_ts")?,
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
    )
    .map_err(|e| lake_err(t, e))?;
    let ops = cast(&column("_op")?, &DataType::Utf8).map_err(|e| lake_err(t, e))?;
    cols.push(seq.clone());
    cols.push(ts);
    let values = RecordBatch::try_new(schema.clone(), cols).map_err(|e| lake_err(t, e))?;
    let krows = key_rows(conv, &values, key_idx)?;
    // The before image's key of each update that moves its row.
    let before = shape::project_before(batch, sources, schema, ncols)?;
    let brows = match &before {
        Some(b) => {
            let cols: Vec<ArrayRef> = key_idx.iter().map(|i| b[*i].clone()).collect();
            Some(conv.convert_columns(&cols).map_err(|e| lake_err(t, e))?)
        }
        None => None,
    };
    let moved: Vec<bool> = (0..values.num_rows())
        .map(|r| match (&before, &brows) {
            (Some(b), Some(br)) => !b[key_idx[0]].is_null(r) && br.row(r) != krows.row(r),
            _ => false,
        })
        .collect();
    let kb = sorter.add_keys(krows);
    let bb = brows.map(|br| sorter.add_keys(br));
    let seqs = seq.as_primitive::<arrow::datatypes::Int64Type>();
    let ops = ops.as_string::<i32>();
    let n = values.num_rows();
    let vb = sorter.add_values(values);
    for (r, moved) in moved.into_iter().enumerate().take(n) {
        let (s, at) = (seqs.value(r), r as u32);
        match ops.value(r) {
            "insert" | "snapshot" => sorter.put(s, (kb, at), (vb, at)),
            "update" => {
                // A key move: the before image's key is gone.
                if let (Some(bk), true) = (bb, moved) {
                    sorter.remove(s, (bk, at));
                }
                sorter.put(s, (kb, at), (vb, at));
            }
            "delete" => sorter.remove(s, (kb, at)),
            "truncate" => sorter.truncate(s),
            other => {
                return Err(lake_err(
                    t,
                    format!("changelog file {} has a row with _op `{other}`", src.path),
                ))
            }
        }
    }
    Ok(())
}
