//! The changelog rows a fold reads: the manifests' files after the last
//! fold, or, where another writer replaced them (OPTIMIZE, then VACUUM), the
//! same `_seq` ranges from the live files of the changelog's Delta log.

use arrow::array::{Array, BooleanArray};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use roaring::RoaringTreemap;

use super::super::super::files::{AheadFile, ReadAhead, StoreFile};
use super::super::sort::{truncated_shard, KEY, SEQ, VALUES};
pub(super) use super::removals::Removals;
use super::*;

/// A changelog file a fold reads, and which of its rows it takes.
pub(super) struct ChangeSource {
    pub(super) path: Path,
    pub(super) bytes: Option<u64>,
    /// The rows taken, each range with the schema version its rows were
    /// written in: a manifest's own file is one range of every row; a file
    /// that another writer (OPTIMIZE, compaction, a type rewrite) made of
    /// files the fold needs holds other rows too.
    pub(super) ranges: Vec<SeqRange>,
}

/// The rows with `_seq` in `lo..hi`, written in schema `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SeqRange {
    pub(super) lo: i64,
    pub(super) hi: i64,
    version: u32,
}

impl ChangeSource {
    /// Whether every row of the file is taken (not a file another writer
    /// made of several).
    pub(super) fn whole(&self) -> bool {
        matches!(self.ranges.as_slice(), [r] if r.lo == i64::MIN && r.hi == i64::MAX)
    }

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

/// The bytes of the files of `sources` (as the manifests give them).
pub(super) fn source_bytes(sources: &[ChangeSource]) -> u64 {
    sources.iter().filter_map(|s| s.bytes).sum()
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
        let state = FORMAT.load(ctx.store.as_ref(), &dir, true).await?;
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

/// The names each range of `src` has its columns stored under.
pub(super) fn stored_names(
    t: &FoldTable,
    src: &ChangeSource,
    target: &Target<'_>,
) -> Vec<Vec<Option<String>>> {
    let tv = target.tv;
    src.ranges
        .iter()
        .map(|r| {
            shape::stored_names(
                &t.versions,
                r.version,
                shape::origins(&t.versions, r.version, tv.schema.version),
                false,
            )
        })
        .collect()
}

/// Whether a changelog leaf column (`path`, `["_before", "id"]` for a field
/// of a struct) is one a fold uses: the table's columns (only the key's
/// with `keys_only`), `_seq`, `_ts`, `_op` and the key of `_before` (not the
/// whole before image, nor `_sql`). `names`: as [`stored_names`] gives them.
pub(super) fn wanted(
    path: &[String],
    names: &[Vec<Option<String>>],
    key_idx: &[usize],
    keys_only: bool,
) -> bool {
    names.iter().any(|sources| {
        let mut keys = key_idx
            .iter()
            .filter_map(|i| sources.get(*i).and_then(|s| s.as_deref()));
        match path {
            [root, field, ..] if root == "_before" => keys.any(|k| k.eq_ignore_ascii_case(field)),
            [root, ..] if matches!(root.as_str(), "_seq" | "_ts" | "_op") => true,
            [root, ..] if keys_only => keys.any(|k| k.eq_ignore_ascii_case(root)),
            [root, ..] => sources
                .iter()
                .flatten()
                .any(|s| s.eq_ignore_ascii_case(root)),
            [] => false,
        }
    })
}

/// Opens the changelog file of `src`, its columns a fold uses.
pub(super) async fn open_source(
    ctx: &Ctx<'_>,
    src: &ChangeSource,
    names: &[Vec<Option<String>>],
    target: &Target<'_>,
    keys_only: bool,
) -> Result<ParquetRecordBatchStream<StoreFile>> {
    open_parquet_leaves(&ctx.store, src.path.clone(), src.bytes, |path| {
        wanted(path, names, &target.key_idx, keys_only)
    })
    .await
}

/// Reads the files of `sources` (their columns a fold uses; with
/// `selected`, only the rows it names) ahead of the fold, on another
/// thread, in an eighth of the fold's memory share; with the names each
/// source's columns are stored under ([`stored_names`]).
pub(super) fn read_ahead(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
    keys_only: bool,
    selected: Option<&[RoaringTreemap]>,
) -> (Vec<Vec<Vec<Option<String>>>>, ReadAhead) {
    let names: Vec<_> = sources
        .iter()
        .map(|src| stored_names(t, src, target))
        .collect();
    let files = sources
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (src, names))| {
            let (names, key_idx) = (names.clone(), target.key_idx.clone());
            AheadFile {
                path: src.path.clone(),
                size: src.bytes,
                wanted: Box::new(move |path| wanted(path, &names, &key_idx, keys_only)),
                rows: selected.map(|s| s[i].clone()),
            }
        })
        .collect();
    (
        names,
        ReadAhead::spawn(ctx.store.clone(), files, ctx.budget / 8),
    )
}

/// Reads the rows of `sources` into `sorter`; with `selected`, only the
/// rows it names (by source, their positions in the file): the others are
/// skipped by the Parquet reader, not decoded.
pub(super) async fn read_change_rows(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
    sorter: &mut Sorter,
    selected: Option<&[RoaringTreemap]>,
) -> Result<()> {
    let (names, mut batches) = read_ahead(ctx, t, sources, target, false, selected);
    while let Some((i, batch)) = batches.next().await? {
        let src = &sources[i];
        for (range, sources) in src.ranges.iter().zip(&names[i]) {
            if range.lo == i64::MIN && range.hi == i64::MAX {
                add_change_batch(t, src, &batch, sources, target, sorter)?;
                continue;
            }
            let seq = cast(&cdc_column(t, src, &batch, "_seq")?, &DataType::Int64)
                .map_err(|e| lake_err(t, e))?;
            let seq = seq.as_primitive::<arrow::datatypes::Int64Type>();
            let keep: BooleanArray = seq
                .iter()
                .map(|s| Some(s.is_some_and(|s| range.lo <= s && s < range.hi)))
                .collect();
            if keep.true_count() == 0 {
                continue;
            }
            let rows =
                arrow::compute::filter_record_batch(&batch, &keep).map_err(|e| lake_err(t, e))?;
            add_change_batch(t, src, &rows, sources, target, sorter)?;
        }
        sorter.spill_if_full()?;
    }
    Ok(())
}

/// The changes of one changelog batch, in the current table's shape.
pub(super) struct ChangeRows {
    /// The rows they put (the current table's columns).
    pub(super) values: RecordBatch,
    pub(super) keys: Rows,
    /// The before image's key of each row, when the batch has `_before`.
    before: Option<Rows>,
    /// Whether an update moves its row to another key.
    pub(super) moved: Vec<bool>,
    pub(super) cdc: SeqsOps,
}

/// The `_seq` (as Int64) and `_op` of every row of a changelog batch.
pub(super) struct SeqsOps {
    pub(super) seqs: ArrayRef,
    ops: Vec<Op>,
}

impl SeqsOps {
    pub(super) fn seq(&self, r: usize) -> i64 {
        self.seqs
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(r)
    }

    pub(super) fn op(&self, r: usize) -> Op {
        self.ops[r]
    }
}

/// A change's `_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Insert,
    Snapshot,
    Update,
    Delete,
    Truncate,
}

impl Op {
    fn parse(op: &str) -> Option<Op> {
        Some(match op {
            "insert" => Op::Insert,
            "snapshot" => Op::Snapshot,
            "update" => Op::Update,
            "delete" => Op::Delete,
            "truncate" => Op::Truncate,
            _ => return None,
        })
    }

    /// Whether the change puts a row.
    pub(super) fn puts(self) -> bool {
        matches!(self, Op::Insert | Op::Snapshot | Op::Update)
    }
}

/// The `_op` of every row of `ops`, or what a row holds instead. The column
/// is dictionary-encoded as sluice writes it: its few values are read once,
/// not a string per row.
fn parse_ops(ops: &ArrayRef) -> std::result::Result<Vec<Op>, String> {
    let strings = |a: &ArrayRef| cast(a, &DataType::Utf8).map_err(|e| e.to_string());
    let bad = |op: Option<&str>| op.map_or("NULL".to_string(), |op| format!("`{op}`"));
    let Some(dict) = ops.as_any_dictionary_opt() else {
        let ops = strings(ops)?;
        return ops
            .as_string::<i32>()
            .iter()
            .map(|op| op.and_then(Op::parse).ok_or_else(|| bad(op)))
            .collect();
    };
    let values = strings(dict.values())?;
    let values = values.as_string::<i32>();
    let codes: Vec<Option<Op>> = values.iter().map(|v| v.and_then(Op::parse)).collect();
    let valid = dict.keys();
    dict.normalized_keys()
        .into_iter()
        .enumerate()
        .map(|(r, k)| match codes.get(k).copied().flatten() {
            Some(op) if valid.is_valid(r) => Ok(op),
            _ if valid.is_null(r) => Err(bad(None)),
            _ => Err(bad(values.is_valid(k).then(|| values.value(k)))),
        })
        .collect()
}

/// The changes of one changelog batch, whose columns are stored under
/// `sources`.
pub(super) fn change_rows(
    t: &FoldTable,
    src: &ChangeSource,
    batch: &RecordBatch,
    sources: &[Option<String>],
    target: &Target<'_>,
) -> Result<ChangeRows> {
    let (schema, conv, key_idx) = (&target.schema, &target.conv, &target.key_idx[..]);
    let ncols = target.tv.schema.columns.len();
    let mut cols = shape::project(batch, sources, schema, ncols)?;
    let cdc = seqs_and_ops(t, src, batch)?;
    let ts = cast(
        &cdc_column(t, src, batch, "_ts")?,
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
    )
    .map_err(|e| lake_err(t, e))?;
    cols.push(cdc.seqs.clone());
    cols.push(ts);
    let values = RecordBatch::try_new(schema.clone(), cols).map_err(|e| lake_err(t, e))?;
    let keys = key_rows(conv, &values, key_idx)?;
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
            (Some(b), Some(br)) => !b[key_idx[0]].is_null(r) && br.row(r) != keys.row(r),
            _ => false,
        })
        .collect();
    Ok(ChangeRows {
        values,
        keys,
        before: brows,
        moved,
        cdc,
    })
}

/// The CDC column `name` of a changelog batch.
fn cdc_column(
    t: &FoldTable,
    src: &ChangeSource,
    batch: &RecordBatch,
    name: &str,
) -> Result<ArrayRef> {
    shape::cdc_column(batch.schema_ref().fields(), batch.columns(), name)
        .cloned()
        .ok_or_else(|| lake_err(t, format!("changelog file {} has no {name}", src.path)))
}

/// The [`SeqsOps`] of a changelog batch.
pub(super) fn seqs_and_ops(
    t: &FoldTable,
    src: &ChangeSource,
    batch: &RecordBatch,
) -> Result<SeqsOps> {
    let seqs =
        cast(&cdc_column(t, src, batch, "_seq")?, &DataType::Int64).map_err(|e| lake_err(t, e))?;
    let ops = parse_ops(&cdc_column(t, src, batch, "_op")?).map_err(|bad| {
        lake_err(
            t,
            format!("changelog file {} has a row with _op {bad}", src.path),
        )
    })?;
    Ok(SeqsOps { seqs, ops })
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
    let rows = change_rows(t, src, batch, sources, target)?;
    let n = rows.values.num_rows();
    // Only the rows that changes put are kept (a delete's row is its before
    // image, which no fold writes): `put_row[r]` is row r's place among them.
    let mut put_row = vec![0u32; n];
    let mut next = 0u32;
    for (r, p) in put_row.iter_mut().enumerate() {
        *p = next;
        next += u32::from(rows.cdc.op(r).puts());
    }
    let vb = if next as usize == n {
        sorter.add_values(rows.values.clone())
    } else {
        let keep: BooleanArray = (0..n).map(|r| Some(rows.cdc.op(r).puts())).collect();
        let kept =
            arrow::compute::filter_record_batch(&rows.values, &keep).map_err(|e| lake_err(t, e))?;
        sorter.add_values(kept)
    };
    let kb = sorter.add_keys(rows.keys.clone());
    let bb = rows.before.clone().map(|br| sorter.add_keys(br));
    for (r, &row) in put_row.iter().enumerate() {
        let (s, at) = (rows.cdc.seq(r), r as u32);
        match rows.cdc.op(r) {
            Op::Insert | Op::Snapshot => sorter.put(s, (kb, at), (vb, row)),
            Op::Update => {
                // A key move: the before image's key is gone.
                if let (Some(bk), true) = (bb, rows.moved[r]) {
                    sorter.remove(s, (bk, at));
                }
                sorter.put(s, (kb, at), (vb, row));
            }
            Op::Delete => sorter.remove(s, (kb, at)),
            Op::Truncate => match truncated_shard(&rows.values, r) {
                Some((db, table)) => sorter.truncate_shard(s, db, table),
                None => sorter.truncate(s),
            },
        }
    }
    Ok(())
}

/// The first of a fold's two passes over changes too many to sort in
/// memory: the rows of `sources` that hold a key's last change (and every
/// TRUNCATE), found from the key, `_seq`, `_ts` and `_op` columns alone,
/// by source, as positions in the file. The second pass
/// ([`read_change_rows`]) then copies and sorts only those rows: a row
/// that a later change of its key replaces is never copied, spilled nor
/// merged. A row is named when any key it changes (an update that moves a
/// key changes two) has its last change there; the second pass applies
/// the replay rules to the rows named, which hold every key's last change,
/// so it gives the same as a pass over every row. The positions take at
/// most a few bytes a row named (a compressed bitmap); the keys are sorted
/// in the fold's memory budget. Also the changes, counted as the sorter
/// counts them, and whether the rows named come in key order.
pub(super) async fn last_changes(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
    removals_matter: bool,
) -> Result<LastChanges> {
    // A change's position: its source in the high bits, its row below;
    // the top bit set for a delete.
    const ROW_BITS: u32 = 40;
    const ROW_MASK: u64 = (1 << ROW_BITS) - 1;
    const REMOVES: u64 = 1 << 63;
    if let Some(found) = dense::last_changes(ctx, t, sources, target, removals_matter).await? {
        return Ok(found);
    }
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("sluice.position", DataType::UInt64, true),
    ]));
    let mut keys = Sorter::new(schema.clone(), ctx.budget, &ctx.spill_root);
    let mut selected = vec![RoaringTreemap::new(); sources.len()];
    let mut truncates = 0;
    let mut moves = false;
    let (names, mut batches) = read_ahead(ctx, t, sources, target, true, None);
    // The source being read, and the position in it of the batch's first row.
    let (mut reading, mut at) = (usize::MAX, 0u64);
    while let Some((i, batch)) = batches.next().await? {
        let src = &sources[i];
        if i != reading {
            (reading, at) = (i, 0);
        }
        let n = batch.num_rows();
        for (range, names) in src.ranges.iter().zip(&names[i]) {
            let rows = change_rows(t, src, &batch, names, target)?;
            let positions = arrow::array::UInt64Array::from_iter_values((0..n).map(|r| {
                let deletes = if rows.cdc.op(r) == Op::Delete {
                    REMOVES
                } else {
                    0
                };
                deletes | ((i as u64) << ROW_BITS) | (at + r as u64)
            }));
            let vb = keys.add_values(
                RecordBatch::try_new(schema.clone(), vec![Arc::new(positions)])
                    .map_err(|e| lake_err(t, e))?,
            );
            let kb = keys.add_keys(rows.keys.clone());
            let bb = rows.before.clone().map(|b| keys.add_keys(b));
            for r in 0..n {
                let (s, at_r) = (rows.cdc.seq(r), r as u32);
                if s < range.lo || s >= range.hi {
                    continue;
                }
                match rows.cdc.op(r) {
                    Op::Truncate => {
                        truncates += 1;
                        selected[i].insert(at + r as u64);
                    }
                    _ => {
                        keys.put(s, (kb, at_r), (vb, at_r));
                        if let (Some(bk), true) = (bb, rows.moved[r]) {
                            keys.put(s, (bk, at_r), (vb, at_r));
                            moves = true;
                        }
                    }
                }
            }
        }
        at += n as u64;
        keys.spill_if_full()?;
    }
    let changes = keys.changes() + truncates;
    let mut last = keys.finish()?;
    // The rows named come in key order when the positions of the rows that
    // put ascend with their keys (each then holds one key's last change);
    // the keys that a delete removes last are kept aside, in key order (the
    // merge's), while they take little of the budget — unless no file holds
    // a key (a table's first fold): then removals change nothing.
    let whole = sources.iter().all(ChangeSource::whole);
    let mut ascending = whole && truncates == 0 && !moves;
    let mut previous: Option<u64> = None;
    let mut first = None;
    let mut puts = vec![RoaringTreemap::new(); sources.len()];
    let mut removals = Removals::default();
    while let Some(batch) = last.next_batch()? {
        let positions = batch
            .column(VALUES)
            .as_primitive::<arrow::datatypes::UInt64Type>();
        let batch_keys = batch.column(KEY).as_binary::<i32>();
        let seqs = batch
            .column(SEQ)
            .as_primitive::<arrow::datatypes::Int64Type>();
        if first.is_none() && batch.num_rows() > 0 {
            first = Some(batch_keys.value(0).to_vec());
        }
        for (r, &p) in positions.values().iter().enumerate() {
            let (source, row) = (((p & !REMOVES) >> ROW_BITS) as usize, p & ROW_MASK);
            selected[source].insert(row);
            if !ascending {
                continue;
            }
            if p & REMOVES != 0 {
                if removals_matter {
                    ascending = removals.push(batch_keys.value(r), seqs.value(r), ctx.budget);
                }
            } else {
                ascending = previous.is_none_or(|q| q < p);
                previous = Some(p);
                puts[source].insert(row);
            }
        }
    }
    let in_order = ascending.then(|| Ordered {
        found: InOrder {
            changes,
            // No fold copies the chunks of rows picked from among others.
            puts_only: false,
            first,
        },
        puts,
        removals,
    });
    Ok(LastChanges {
        selected,
        changes,
        in_order,
    })
}

/// What [`last_changes`] found.
pub(super) struct LastChanges {
    /// The rows of each source that hold a key's last change.
    pub selected: Vec<RoaringTreemap>,
    /// The changes, counted as the sorter counts them.
    pub changes: usize,
    /// Set when the rows of `selected` that put a row, read in order, come
    /// in key order, one per key (no TRUNCATE, no key move, every source
    /// read whole): they need no sorting.
    pub in_order: Option<Ordered>,
}

/// Last changes that need no sorting: [`ChangeStream`] reads the rows that
/// put as they are and merges the keys removed in (none when they do not
/// matter).
pub(super) struct Ordered {
    pub found: InOrder,
    /// The rows of each source that put a key's last row.
    pub puts: Vec<RoaringTreemap>,
    pub removals: Removals,
}

/// Whether the changes of `sources`, read in order, come in key order, one
/// per key, with no TRUNCATE and no update that moves a key: a table's
/// first fold after its snapshot, whose chunks are read in key order. Such
/// changes need no sorting: [`ChangeStream`] reads them again, as they
/// are. Reads only the key, `_seq`, `_ts` and `_op` columns, and stops at
/// the first change out of order.
pub(super) async fn in_key_order(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
) -> Result<Option<InOrder>> {
    // Rows of files another writer made of several: not read whole.
    if !sources.iter().all(ChangeSource::whole) {
        return Ok(None);
    }
    if !samples_in_key_order(ctx, t, sources, target).await? {
        return Ok(None);
    }
    let mut last: Option<Vec<u8>> = None;
    let mut found = InOrder {
        changes: 0,
        puts_only: true,
        first: None,
    };
    for src in sources {
        let names = stored_names(t, src, target);
        let mut stream = open_source(ctx, src, &names, target, true).await?;
        while let Some(batch) = stream.try_next().await? {
            let rows = change_rows(t, src, &batch, &names[0], target)?;
            if !ascending(&rows, last.as_deref()) {
                return Ok(None);
            }
            let n = rows.keys.num_rows();
            if n > 0 {
                found
                    .first
                    .get_or_insert_with(|| rows.keys.row(0).as_ref().to_vec());
                last = Some(rows.keys.row(n - 1).as_ref().to_vec());
            }
            found.puts_only &= (0..n).all(|r| rows.cdc.op(r).puts());
            found.changes += n;
        }
    }
    Ok(Some(found))
}

/// Files of `sources` sampled before [`in_key_order`] reads them all.
const ORDER_SAMPLES: usize = 9;

/// Whether the first batches of a few files spread over `sources` come in
/// key order: a necessary condition of [`in_key_order`], read in a few
/// batches. Changes out of order mostly show here (a bulk UPDATE after the
/// INSERT that wrote its keys starts again from the least key), before all
/// the rows in order ahead of them are read.
async fn samples_in_key_order(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &[ChangeSource],
    target: &Target<'_>,
) -> Result<bool> {
    let n = sources.len();
    if n <= ORDER_SAMPLES {
        return Ok(true);
    }
    let mut last: Option<Vec<u8>> = None;
    for k in 0..ORDER_SAMPLES {
        let src = &sources[k * (n - 1) / (ORDER_SAMPLES - 1)];
        let names = stored_names(t, src, target);
        let mut stream = open_source(ctx, src, &names, target, true).await?;
        let Some(batch) = stream.try_next().await? else {
            continue;
        };
        let rows = change_rows(t, src, &batch, &names[0], target)?;
        if !ascending(&rows, last.as_deref()) {
            return Ok(false);
        }
        if let Some(r) = rows.keys.num_rows().checked_sub(1) {
            last = Some(rows.keys.row(r).as_ref().to_vec());
        }
    }
    Ok(true)
}

/// What [`in_key_order`] found of changes in key order.
pub(super) struct InOrder {
    pub changes: usize,
    /// Whether every change puts a row (none deletes one).
    pub puts_only: bool,
    /// The key of the first change (the least), in the row format.
    pub first: Option<Vec<u8>>,
}

/// Whether the changes of `rows` follow a change with key `after` in key
/// order, one per key, none a TRUNCATE or a key move.
pub(super) fn ascending(rows: &ChangeRows, after: Option<&[u8]>) -> bool {
    let keys = &rows.keys;
    (0..keys.num_rows()).all(|r| {
        let op = rows.cdc.op(r);
        let previous = match r {
            0 => after,
            _ => Some(keys.row(r - 1).data()),
        };
        op != Op::Truncate && !rows.moved[r] && previous.is_none_or(|p| p < keys.row(r).data())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray};
    use arrow::datatypes::Int8Type;
    use arrow::datatypes::{Field, Schema};

    /// Changes of keys `keys` with `_op`s `ops`; `moved`: the rows whose
    /// update moves their key.
    fn rows(keys: &[i32], ops: &[&str], moved: &[usize]) -> ChangeRows {
        let conv = RowConverter::new(vec![SortField::new(DataType::Int32)]).unwrap();
        let ids: ArrayRef = Arc::new(Int32Array::from(keys.to_vec()));
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, true)]));
        ChangeRows {
            values: RecordBatch::try_new(schema, vec![ids.clone()]).unwrap(),
            keys: conv.convert_columns(&[ids]).unwrap(),
            before: None,
            moved: (0..keys.len()).map(|r| moved.contains(&r)).collect(),
            cdc: SeqsOps {
                seqs: Arc::new(Int64Array::from_iter_values(1..=keys.len() as i64)),
                ops: ops.iter().map(|op| Op::parse(op).unwrap()).collect(),
            },
        }
    }

    #[test]
    fn only_changes_in_key_order_one_per_key_skip_the_sorter() {
        let snapshot = rows(&[1, 2, 5, 9], &["snapshot"; 4], &[]);
        assert!(ascending(&snapshot, None));
        // The next batch (or file) must start above the last key before it.
        let last = snapshot.keys.row(3).data().to_vec();
        let next = rows(&[10, 11], &["insert", "insert"], &[]);
        assert!(ascending(&next, Some(&last)));
        let back = rows(&[9, 11], &["insert", "insert"], &[]);
        assert!(!ascending(&back, Some(&last)));
        // Sorted, but a key changed twice: its last change must be found.
        let twice = rows(
            &[1, 2, 2, 3],
            &["insert", "insert", "update", "insert"],
            &[],
        );
        assert!(!ascending(&twice, None));
        // One change out of order in the middle.
        let odd = rows(&[1, 2, 7, 4, 8], &["insert"; 5], &[]);
        assert!(!ascending(&odd, None));
        // Deletes in key order are changes like any; a TRUNCATE or an update
        // that moves its key (two keys change) is not taken as it is.
        let deletes = rows(&[1, 3, 4], &["delete", "insert", "delete"], &[]);
        assert!(ascending(&deletes, None));
        let truncate = rows(&[1, 3], &["insert", "truncate"], &[]);
        assert!(!ascending(&truncate, None));
        let moved = rows(&[1, 3], &["insert", "update"], &[1]);
        assert!(!ascending(&moved, None));
        assert!(ascending(&rows(&[], &[], &[]), None));
    }

    #[test]
    fn ops_read_from_dictionaries_and_plain_strings() {
        let dict: DictionaryArray<Int8Type> = vec![
            Some("insert"),
            Some("delete"),
            None,
            Some("update"),
            Some("insert"),
        ]
        .into_iter()
        .collect();
        let dict: ArrayRef = Arc::new(dict);
        assert_eq!(parse_ops(&dict), Err("NULL".to_string()));
        let dict: DictionaryArray<Int8Type> =
            vec!["snapshot", "delete", "truncate", "update", "snapshot"]
                .into_iter()
                .collect();
        let dict: ArrayRef = Arc::new(dict);
        assert_eq!(
            parse_ops(&dict).unwrap(),
            [
                Op::Snapshot,
                Op::Delete,
                Op::Truncate,
                Op::Update,
                Op::Snapshot
            ]
        );
        // A dictionary value no row uses may be anything.
        let keys = arrow::array::Int8Array::from(vec![1, 1, 0]);
        let values = Arc::new(StringArray::from(vec!["insert", "upsert"]));
        let odd: ArrayRef = Arc::new(DictionaryArray::new(keys, values.clone()));
        assert_eq!(parse_ops(&odd), Err("`upsert`".to_string()));
        let keys = arrow::array::Int8Array::from(vec![0, 0]);
        let unused: ArrayRef = Arc::new(DictionaryArray::new(keys, values));
        assert_eq!(parse_ops(&unused).unwrap(), [Op::Insert, Op::Insert]);
        let plain: ArrayRef = Arc::new(StringArray::from(vec!["insert", "delete"]));
        assert_eq!(parse_ops(&plain).unwrap(), [Op::Insert, Op::Delete]);
        let plain: ArrayRef = Arc::new(StringArray::from(vec!["insert", "replace"]));
        assert_eq!(parse_ops(&plain), Err("`replace`".to_string()));
    }
}
