//! The fold of one table: the changes since its last fold, applied to the
//! files that hold their keys, in one Delta commit.
//!
//! Memory is bounded: the changes go through a [`Sorter`] (sorted runs
//! spilled to local disk past the fold's budget) and come back in key order
//! one small batch at a time; the table's files are read one row group at a
//! time and new files are written as they fill, so a fold holds a run's
//! worth of changes, a row group of the file it merges into and the row
//! group it writes. The changelog is decoded ahead of the fold by a task of
//! its own (on the second core), in an eighth of the fold's share.
//!
//! Changes that come in key order, one per key — a table's first fold after
//! its snapshot, whose chunks are read in key order — skip the sorter: a
//! first pass over their key columns finds them in order, and the fold reads
//! them again as they are while it writes ([`stream::ChangeStream`]), so
//! they are never copied into runs nor spilled. So do the last changes of
//! a fold read in two passes when they come in key order (a bulk INSERT,
//! then an UPDATE and a DELETE of its rows in key order): the second pass
//! reads the rows that put as they are and merges in the keys removed,
//! which the first kept aside.

use std::collections::BTreeMap;

use arrow::array::{BinaryArray, BooleanArray};
use futures::TryStreamExt;

use super::super::compaction::plan::LiveFile;
use super::super::files::{open_parquet, open_parquet_leaves};
use super::apply::{place, Place};
use super::sort::{Merge, Sorter, KEY, REMOVED, VALUES};
use super::*;

mod changes;
mod copy;
mod dense;
mod key_runs;
mod keys;
mod marks;
mod output;
mod purge;
mod removals;
mod stream;
use changes::{
    in_key_order, last_changes, live_sources, manifest_sources, read_change_rows, source_bytes,
};
use key_runs::runs_column;
pub(super) use marks::LiveRows;
pub(crate) use output::delta_file_properties;
use output::{keyed_file_properties, Output, ROW_GROUP_BYTES};
use stream::ChangeStream;

fn key_rows(conv: &RowConverter, batch: &RecordBatch, key_idx: &[usize]) -> Result<Rows> {
    let cols: Vec<ArrayRef> = key_idx.iter().map(|i| batch.column(*i).clone()).collect();
    conv.convert_columns(&cols)
        .map_err(|e| Error::Lake(format!("current table: key of a row: {e}")))
}

fn lake_err(t: &FoldTable, what: impl std::fmt::Display) -> Error {
    Error::Lake(format!("current table of {}: {what}", t.name()))
}

/// The shape a fold writes and how it compares keys.
struct Target<'a> {
    tv: &'a TableVersion,
    schema: SchemaRef,
    conv: RowConverter,
    key_idx: Vec<usize>,
}

/// A fold's changes in key order, each key's last, as batches of the
/// sorter's runs (`[key, seq, removed, values]`).
enum Changes<'a> {
    /// Sorted (and maybe spilled) by a [`Sorter`].
    Sorted(Merge),
    /// Read again as they are: they came in key order.
    InOrder(Box<ChangeStream<'a>>),
}

impl Changes<'_> {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        match self {
            Changes::Sorted(merge) => merge.next_batch(),
            Changes::InOrder(stream) => stream.next_batch().await,
        }
    }
}

/// Rows picked for the output, in key order: `(0, row)` of the file batch
/// being merged, `(1, row)` of the change batch.
type Picks = Vec<(usize, usize)>;

/// Applies changes in key order to the files of a current table.
struct Applier<'a> {
    ctx: &'a Ctx<'a>,
    dir: &'a Path,
    target: &'a Target<'a>,
    reshape: Option<&'a [Option<String>]>,
    files: &'a [(String, FileRange)],
    /// The `add` actions of the files, by path.
    adds: &'a BTreeMap<String, Value>,
    ranges: &'a [FileRange],
    merge: Changes<'a>,
    /// The change batch: its rows (the table's columns), keys, removals,
    /// and the next row to apply.
    changes: RecordBatch,
    keys: BinaryArray,
    removed: BooleanArray,
    next: usize,
    /// The file batch being merged and its keys.
    file: RecordBatch,
    file_keys: Option<Rows>,
    picks: Picks,
    out: Output<'a>,
    /// The files read and rewritten.
    rewritten: Vec<&'a String>,
}

impl<'a> Applier<'a> {
    fn empty(&self) -> RecordBatch {
        RecordBatch::new_empty(self.target.schema.clone())
    }

    /// Writes the picked rows out.
    async fn flush(&mut self) -> Result<()> {
        let (Some(&(fs, fr)), Some(&(ls, lr))) = (self.picks.first(), self.picks.last()) else {
            return Ok(());
        };
        let key = |src: usize, row: usize| -> Vec<u8> {
            match (src, &self.file_keys) {
                (0, Some(k)) => k.row(row).as_ref().to_vec(),
                _ => self.keys.value(row).to_vec(),
            }
        };
        let (first, last) = (key(fs, fr), key(ls, lr));
        let one_source = self.picks.iter().all(|p| p.0 == fs);
        let batch = if one_source && lr + 1 - fr == self.picks.len() {
            // Consecutive rows of one batch (rows are picked in order): no
            // copy.
            let from = if fs == 0 { &self.file } else { &self.changes };
            from.slice(fr, self.picks.len())
        } else {
            interleave_record_batch(&[&self.file, &self.changes], &self.picks)
                .map_err(|e| Error::Lake(format!("current table: merging rows: {e}")))?
        };
        self.picks.clear();
        self.out.push(&batch, &first, &last).await
    }

    /// Whether a change is left; loads the next change batch (after writing
    /// out the rows picked from this one).
    async fn ready(&mut self) -> Result<bool> {
        if self.next < self.changes.num_rows() {
            return Ok(true);
        }
        self.flush().await?;
        let Some(batch) = self.merge.next_batch().await? else {
            self.changes = self.empty();
            return Ok(false);
        };
        self.keys = batch.column(KEY).as_binary::<i32>().clone();
        self.removed = batch.column(REMOVED).as_boolean().clone();
        self.changes = RecordBatch::try_new(
            self.target.schema.clone(),
            batch.columns()[VALUES..].to_vec(),
        )
        .map_err(|e| Error::Lake(format!("current table: a change batch: {e}")))?;
        self.next = 0;
        Ok(true)
    }

    /// Where the next change goes (`None`: a removal of a key no file holds).
    fn place_next(&self) -> Option<Place> {
        place(
            self.ranges,
            self.keys.value(self.next),
            !self.removed.value(self.next),
            self.ctx.target_bytes,
        )
    }

    /// Where the next change goes; changes that go nowhere (removals of keys
    /// no file holds) are passed over here, so that they never end a file's
    /// merge early. `None` when no change is left.
    async fn next_place(&mut self) -> Result<Option<Place>> {
        while self.ready().await? {
            match self.place_next() {
                Some(to) => return Ok(Some(to)),
                None => self.next += 1,
            }
        }
        Ok(None)
    }

    /// Picks the next change's row if it puts one, and moves past it.
    fn take_change(&mut self) {
        if !self.removed.value(self.next) {
            self.picks.push((1, self.next));
        }
        self.next += 1;
    }

    async fn run(mut self) -> Result<(Output<'a>, Vec<&'a String>)> {
        let mut next_file = 0;
        while let Some(to) = self.next_place().await? {
            let file = match to {
                Place::File(i) => i,
                Place::Gap(g) => g,
            };
            if file < next_file {
                return Err(Error::Lake(format!(
                    "current table fold: a change went to {to:?} after file {next_file} (a bug); the previous version stays"
                )));
            }
            while next_file < file {
                self.pass(next_file).await?;
                next_file += 1;
            }
            match to {
                Place::Gap(_) => self.take_change(),
                Place::File(i) => {
                    self.rewrite(i).await?;
                    next_file = i + 1;
                }
            }
        }
        while next_file < self.files.len() {
            self.pass(next_file).await?;
            next_file += 1;
        }
        self.flush().await?;
        self.out.cut().await?;
        Ok((self.out, self.rewritten))
    }

    /// A file no change touches: kept as it is (the output so far ends
    /// before its range), or rewritten in a new shape.
    async fn pass(&mut self, i: usize) -> Result<()> {
        if self.reshape.is_some() {
            return self.rewrite(i).await;
        }
        self.flush().await?;
        self.out.cut().await
    }

    /// Merges file `i` with the changes that go to it.
    async fn rewrite(&mut self, i: usize) -> Result<()> {
        let (path, _) = &self.files[i];
        let mut rows = LiveRows::open(&self.ctx.store, self.dir, path, &self.adds[path]).await?;
        while let Some(batch) = rows.next().await? {
            self.flush().await?;
            self.file = own_shape(batch, self.reshape, &self.target.schema)?;
            self.file_keys = Some(key_rows(
                &self.target.conv,
                &self.file,
                &self.target.key_idx,
            )?);
            let mut r = 0;
            while r < self.file.num_rows() {
                let here = self.next_place().await? == Some(Place::File(i));
                if !here {
                    // No change left for this file: the rest of it as it is.
                    let n = self.file.num_rows();
                    self.picks.extend((r..n).map(|row| (0, row)));
                    break;
                }
                let order = match (&self.file_keys, here) {
                    (Some(keys), true) => {
                        Some(self.keys.value(self.next).cmp(keys.row(r).as_ref()))
                    }
                    _ => None,
                };
                match order {
                    Some(std::cmp::Ordering::Less) => self.take_change(),
                    Some(std::cmp::Ordering::Equal) => {
                        self.take_change();
                        r += 1;
                    }
                    _ => {
                        self.picks.push((0, r));
                        r += 1;
                    }
                }
            }
        }
        // Changes past the file's last row.
        while self.next_place().await? == Some(Place::File(i)) {
            self.take_change();
        }
        self.rewritten.push(path);
        Ok(())
    }
}

/// What the fold of a table starts from.
pub(super) enum Base {
    /// The table's own current table.
    Own,
    /// Copies of the files of another name's current table (`state`, in
    /// `dir`): the table had that name then (RENAME TABLE). The name's own
    /// files all go.
    Copy {
        dir: Path,
        state: Box<TableState>,
        name: String,
    },
    /// No rows: the table is new since, or read from its beginning. The
    /// name's own files (another table's) all go.
    Empty,
}

/// Folds into the current table of the name `lineage` has now the changes
/// of that table after manifest `after` (`files`, renumbered as in the
/// lineage), starting from `base`; `state` is the name's current table.
pub(super) async fn fold_table(
    ctx: &Ctx<'_>,
    lineage: &Lineage,
    state: TableState,
    files: &[(u64, DataFile)],
    base: Base,
    after: u64,
    next_seqs: &BTreeMap<u64, i64>,
) -> Result<FoldReport> {
    let t = &lineage.table;
    let dir = current_dir(&t.db, &t.table);
    let folded = folded_seq(&state);
    if state.version.is_some() && folded >= ctx.s1 {
        return Ok(FoldReport::default());
    }
    remove_unfinished(ctx.store.as_ref(), &dir, folded, &state).await?;
    let started = std::time::Instant::now();
    let tv = lineage.last();
    let own_version = lineage.members.last().map_or(tv.schema.version, |m| m.1);
    let schema = shape::current_schema(&tv.schema);
    let keys = shape::key_columns(&tv.schema);
    let key_idx: Vec<usize> = keys
        .iter()
        .filter_map(|k| tv.schema.columns.iter().position(|c| &c.name == k))
        .collect();
    let key_fields: Vec<SortField> = key_idx
        .iter()
        .map(|i| SortField::new(schema.field(*i).data_type().clone()))
        .collect();
    let key_desc = key_idx
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                schema.field(*i).name(),
                schema.field(*i).data_type()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let conv = RowConverter::new(key_fields).map_err(|e| lake_err(t, e))?;
    let target = Target {
        tv,
        schema: schema.clone(),
        conv,
        key_idx,
    };

    // The starting point: the table's files, a renamed table's copies, or
    // none; the version of their shape, renumbered as in the lineage.
    let mut copied = Vec::new();
    let (base_files, file_version, same_key) = match &base {
        Base::Copy {
            dir: src_dir,
            state: src,
            name: from,
        } => {
            let mut files = BTreeMap::new();
            for (i, (path, add)) in src.files.iter().enumerate() {
                let name = format!("current-{:020}-{:05}-renamed.parquet", ctx.s1, i);
                let to = dir.clone().join(name.as_str());
                ctx.store
                    .copy(&src_dir.clone().join(path.as_str()), &to)
                    .await?;
                copied.push(to);
                // Its deletion vector's file goes along, at the same place.
                if let Some(v) = dv::descriptor_file(&add["deletionVector"]) {
                    let to = dir.clone().join(v.as_str());
                    if !copied.contains(&to) {
                        ctx.store
                            .copy(&src_dir.clone().join(v.as_str()), &to)
                            .await?;
                        copied.push(to);
                    }
                }
                let mut add = add.clone();
                add["path"] = json!(name);
                files.insert(name, add);
            }
            let (v, k) = base_shape(lineage, from, src);
            (files, v, k)
        }
        Base::Own => {
            let (v, k) = base_shape(lineage, &t.name(), &state);
            (state.files.clone(), v, k)
        }
        Base::Empty => (BTreeMap::new(), None, None),
    };
    let same_key = same_key.as_deref() == Some(key_desc.as_str());
    let reshape = file_version
        .filter(|v| *v != tv.schema.version)
        .map(|v| {
            let sources = shape::origins(&t.versions, v, tv.schema.version);
            (v, shape::stored_names(&t.versions, v, sources, true))
        })
        .filter(|(v, sources)| !same_shape(t, *v, sources, &schema))
        .map(|(_, sources)| sources);

    let manifest = manifest_sources(files, after);
    // Changes that come in key order, one per key (the first fold after a
    // snapshot, whose chunks are read in key order), are not sorted: they
    // are read again, as they are, while the fold writes. An error here (a
    // file another writer removed) is met again below.
    let mut in_order = in_key_order(ctx, t, &manifest, &target)
        .await
        .unwrap_or(None);
    let mut sorter = Sorter::new(schema.clone(), ctx.budget, &ctx.spill_root);
    // Changes too many to sort in memory (their Parquet alone is past a
    // sixteenth of the budget; decoded rows take several times that) are
    // read in two passes: the rows that hold each key's last change first,
    // from the key columns, then only those rows (`last_changes`).
    let two_passes = in_order.is_none() && source_bytes(&manifest) > ctx.budget as u64 / 16;
    let mut counted = None;
    // The rows of the manifests' files that the second pass reads (all
    // when `None`). When they come in key order (a bulk UPDATE or DELETE
    // of keys a bulk INSERT wrote before it), they skip the sorter too.
    let mut selected = None;
    // Those of them that put, and the keys removed, when they need no sorting.
    let mut ordered = None;
    // The manifests' files first: the log need not be read unless another
    // writer removed one of them (OPTIMIZE; VACUUM may have deleted it).
    let read = match in_order {
        Some(_) => Ok(()),
        None if two_passes => {
            match last_changes(ctx, t, &manifest, &target, !base_files.is_empty()).await {
                Ok(last) => {
                    counted = Some(last.changes);
                    let picked = selected.insert(last.selected);
                    match last.in_order {
                        Some(o) => {
                            in_order = Some(o.found);
                            ordered = Some((o.puts, o.removals));
                            Ok(())
                        }
                        None => {
                            read_change_rows(ctx, t, &manifest, &target, &mut sorter, Some(picked))
                                .await
                        }
                    }
                }
                Err(e) => Err(e),
            }
        }
        None => read_change_rows(ctx, t, &manifest, &target, &mut sorter, None).await,
    };
    if let Err(e) = read {
        match live_sources(ctx, t, files, after, next_seqs).await? {
            Some(sources) => {
                tracing::info!(table = %t.name(), error = %e, "a changelog file of the fold was removed from its Delta table by another writer; reading its rows from the live files");
                sorter = Sorter::new(schema.clone(), ctx.budget, &ctx.spill_root);
                counted = None;
                selected = None;
                in_order = None;
                ordered = None;
                read_change_rows(ctx, t, &sources, &target, &mut sorter, None).await?;
            }
            None => return Err(e),
        }
    }
    let read_at = std::time::Instant::now();
    let mut report = FoldReport {
        read_ms: (read_at - started).as_millis() as u64,
        changed_rows: in_order
            .as_ref()
            .map(|o| o.changes)
            .or(counted)
            .unwrap_or_else(|| sorter.changes()),
        ..Default::default()
    };
    // Files by key range; unusable ranges (a changed key, no tags) mean
    // the table is rebuilt from all its rows.
    let mut ranged: Vec<(String, FileRange)> = Vec::new();
    let mut unranged = !same_key || file_version.is_none();
    for (path, add) in &base_files {
        let tags = &add["tags"];
        let range = (|| {
            Some(FileRange {
                first: unhex(tags[TAG_FIRST].as_str()?)?,
                last: unhex(tags[TAG_LAST].as_str()?)?,
                bytes: add["size"].as_u64()?,
            })
        })();
        match range {
            Some(r) => ranged.push((path.clone(), r)),
            None => unranged = true,
        }
    }
    ranged.sort_by(|a, b| a.1.first.cmp(&b.1.first));
    // Files of folds with deletion vectors may overlap in key range: only
    // such a fold can apply changes to them; any other rebuilds the table.
    let vectors = ctx.deletion_vectors && matches!(base, Base::Own) && reshape.is_none();
    let overlap = ranged.windows(2).any(|w| w[1].1.first <= w[0].1.last);
    if overlap && !vectors {
        unranged = true;
    }

    let mut removed: Vec<&String> = Vec::new();
    if !matches!(base, Base::Own) {
        // The name held another table: none of its files stay.
        removed.extend(state.files.keys());
    }
    let full = sorter.truncated() || (unranged && !base_files.is_empty());
    if full && in_order.take().is_some() {
        // The table is rebuilt through the sorter: its changes go there too.
        read_change_rows(ctx, t, &manifest, &target, &mut sorter, selected.as_deref()).await?;
    }
    if full {
        if !sorter.truncated_all() {
            // Every row of the table joins the changes, before all of them
            // (a change of the primary key: the table is rebuilt in the new
            // key order, through the sorter's bounded memory).
            // (A renamed table's files are copied into `dir` by now.)
            for (path, add) in &base_files {
                sort_live_rows(
                    ctx,
                    &dir,
                    path,
                    add,
                    reshape.as_deref(),
                    &target,
                    &mut sorter,
                )
                .await?;
            }
        }
        removed.extend(base_files.keys());
        ranged.clear();
    }
    let spilled = sorter.spilled_runs();
    let sorted = sorter.changes();
    let ranges: Vec<FileRange> = ranged.iter().map(|r| r.1.clone()).collect();
    let out = Output {
        ctx,
        dir: &dir,
        schema: schema.clone(),
        props: keyed_file_properties(&schema, &target.key_idx)?,
        runs_column: runs_column(&schema, &target.key_idx),
        open: None,
        adds: Vec::new(),
        written: Vec::new(),
        n: 0,
        data_change: true,
        bytes_per_row: None,
    };
    // Files whose vectors grow: their `add` again, with the new vector.
    let mut marked: Vec<(String, Value)> = Vec::new();
    // A fold of new keys in key order copies the changelog's column chunks
    // when their shapes allow it: a first fold, or (with vectors) one whose
    // keys all come after every row of the table's files, whose files then
    // stay as they are (inserts of ascending keys). An error here (a file
    // another writer removed) is met again below.
    let appends = |o: &changes::InOrder| {
        let after_all = o.first.as_ref().is_some_and(|first| {
            ranged.len() == base_files.len() && ranged.iter().all(|(_, r)| r.last < *first)
        });
        base_files.is_empty() || (vectors && reshape.is_none() && after_all)
    };
    let copy = match &in_order {
        Some(o) if o.puts_only && selected.is_none() && !full && appends(o) => {
            copy::plan(ctx, t, &manifest, &target).await.unwrap_or(None)
        }
        _ => None,
    };
    let puts_read;
    let changes = match in_order {
        Some(_) => {
            let (puts, removals) = match ordered {
                Some((puts, removals)) => (Some(puts), Some(removals)),
                None => (None, None),
            };
            puts_read = puts;
            Changes::InOrder(Box::new(ChangeStream::new(
                ctx,
                t,
                &manifest,
                puts_read.as_deref(),
                removals,
                &target,
            )))
        }
        None => Changes::Sorted(sorter.finish()?),
    };
    let run = if let Some(plan) = copy {
        let mut out = out;
        match out.copy(t, plan, &target).await {
            Ok(rows) => {
                report.rows_copied = rows;
                Ok((out, Vec::new()))
            }
            Err(e) => Err(e),
        }
    } else if vectors && !full {
        let mut out = out;
        let done = async {
            let marks =
                marks::mark_changes(ctx, &dir, &target, &ranged, &base_files, changes, &mut out)
                    .await?;
            out.cut().await?;
            let (adds, file) =
                marks::with_vectors(ctx, &dir, &ranged, &base_files, marks, &mut report).await?;
            marked = adds;
            out.written.extend(file);
            Ok(())
        }
        .await;
        done.map(|()| (out, Vec::new()))
    } else {
        Applier {
            ctx,
            dir: &dir,
            target: &target,
            reshape: reshape.as_deref(),
            files: &ranged,
            adds: &base_files,
            ranges: &ranges,
            merge: changes,
            changes: RecordBatch::new_empty(schema.clone()),
            keys: BinaryArray::from_vec(vec![]),
            removed: BooleanArray::from(Vec::<bool>::new()),
            next: 0,
            file: RecordBatch::new_empty(schema.clone()),
            file_keys: None,
            picks: Vec::new(),
            out,
            rewritten: Vec::new(),
        }
        .run()
        .await
    };
    report.apply_ms = read_at.elapsed().as_millis() as u64;
    let applied_at = std::time::Instant::now();
    let (out, rewritten) = match run {
        Ok(done) => done,
        Err(e) => {
            // Files of this fold are named for a seq no version holds: the
            // next fold deletes them too; try now.
            let _ = remove_unfinished(ctx.store.as_ref(), &dir, folded, &state).await;
            return Err(e);
        }
    };
    removed.extend(rewritten);
    report.spilled_runs = spilled;
    report.rows_sorted = sorted;

    // The commit: files out, files in, the shape and the seq folded.
    let fields: Vec<arrow::datatypes::Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let schema_string = super::super::schema::schema_string(&fields)
        .map_err(|e| lake_err(t, format!("a type Delta Lake cannot hold: {e}")))?;
    let protocol = super::super::schema::protocol_with(&fields, ctx.deletion_vectors);
    let now = chrono::Utc::now().timestamp_millis();
    let mut configuration = json!({CONF_VERSION: own_version.to_string(), CONF_KEY: key_desc});
    let mut conf_keys = vec![CONF_VERSION, CONF_KEY];
    if ctx.deletion_vectors {
        configuration[CONF_VECTORS] = json!("true");
        conf_keys.push(CONF_VECTORS);
    }
    let metadata = match &state.metadata {
        None => Some(json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "name": t.name(),
            "description": format!("current state of {} (sluice)", t.name()),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_string,
            "partitionColumns": [],
            "configuration": configuration,
            "createdTime": now,
        })),
        // Properties other writers set (SET TBLPROPERTIES) stay as they are.
        Some(old)
            if old["schemaString"].as_str() != Some(schema_string.as_str())
                || conf_keys
                    .iter()
                    .any(|k| old["configuration"][*k] != configuration[*k]) =>
        {
            let mut new = old.clone();
            new["schemaString"] = json!(schema_string);
            if !new["configuration"].is_object() {
                new["configuration"] = json!({});
            }
            for k in &conf_keys {
                new["configuration"][*k] = configuration[*k].clone();
            }
            Some(new)
        }
        Some(_) => None,
    };
    let raise = super::super::schema::raised(state.protocol.as_ref(), &protocol);
    let Output { adds, written, .. } = out;
    let logged_removes: Vec<&String> = removed
        .iter()
        .copied()
        .filter(|p| state.files.contains_key(*p))
        .collect();
    if state.version.is_some()
        && adds.is_empty()
        && logged_removes.is_empty()
        && marked.is_empty()
        && metadata.is_none()
        && !files.iter().any(|(seq, _)| *seq > folded)
    {
        // Nothing changed and no change was read: no new version. Changes
        // that net to nothing (rows inserted and deleted again) still get
        // one, with no files, that records the seq they reach: `status`
        // would otherwise call the table behind its changelog.
        return Ok(report);
    }
    let version = state.version.map_or(0, |v| v + 1);
    let mut commit = fold_commit(ctx, t, version, "fold");
    commit.protocol = raise;
    commit.metadata = metadata;
    let actions = &mut commit.files;
    for p in &logged_removes {
        report.files_removed += 1;
        report.bytes_removed += state.files[*p]["size"].as_u64().unwrap_or(0);
        actions.push(remove_action(p, &state.files[*p]));
    }
    // A file whose vector grew: removed with its old vector, added with the new.
    for (p, add) in &marked {
        actions.push(remove_action(p, &state.files[p]));
        actions.push(json!({ "add": add }));
    }
    // Copies of a renamed table's files that were not rewritten go in as they are.
    let kept_copies: Vec<&Value> = base_files
        .iter()
        .filter(|(p, _)| matches!(base, Base::Copy { .. }) && !removed.contains(p))
        .map(|(_, a)| a)
        .collect();
    // The vector files those copies name: any other copied vector file
    // belongs to a copy that was rewritten.
    let kept_vectors: std::collections::HashSet<String> = kept_copies
        .iter()
        .filter_map(|a| dv::descriptor_file(&a["deletionVector"]))
        .collect();
    for add in kept_copies {
        actions.push(json!({ "add": add }));
    }
    report.files_added = adds.len();
    for add in &adds {
        report.bytes_added += add["add"]["size"].as_u64().unwrap_or(0);
    }
    actions.extend(adds);
    if let Err(u) = write(ctx, &dir, &commit).await {
        // Only a commit known not to be in the log frees its files: after an
        // answer that was lost, the version may name them.
        if !u.may_have_landed {
            for p in written.iter().chain(&copied) {
                let _ = ctx.store.delete(p).await;
            }
        }
        return Err(u.error);
    }
    // Copies that were rewritten are in no version, nor are their vector
    // files (no clean-up would ever find them: no version names them).
    for p in &copied {
        let unused = p.filename().is_some_and(|n| {
            removed.iter().any(|r| r.as_str() == n)
                || (dv::file_seq(n).is_some() && !kept_vectors.contains(n))
        });
        if unused {
            let _ = ctx.store.delete(p).await;
        }
    }
    report.commits = 1;
    report.commit_ms = applied_at.elapsed().as_millis() as u64;
    if ctx.deletion_vectors {
        // The fold is committed: a purge that fails is redone after the next.
        if let Err(e) = purge::purge(ctx, t, &target, &dir, &mut report).await {
            tracing::warn!(table = %t.name(), error = %e, "purge of a current table failed; the next fold tries again");
        }
    }
    Ok(report)
}

/// Puts every live row of a file of the current table (in `dir`, reshaped
/// by `reshape`) into `sorter`, before every change.
async fn sort_live_rows(
    ctx: &Ctx<'_>,
    dir: &Path,
    path: &str,
    add: &Value,
    reshape: Option<&[Option<String>]>,
    target: &Target<'_>,
    sorter: &mut Sorter,
) -> Result<()> {
    let mut rows = LiveRows::open(&ctx.store, dir, path, add).await?;
    while let Some(batch) = rows.next().await? {
        let batch = own_shape(batch, reshape, &target.schema)?;
        let kb = sorter.add_keys(key_rows(&target.conv, &batch, &target.key_idx)?);
        let n = batch.num_rows();
        let vb = sorter.add_values(batch);
        for r in 0..n as u32 {
            sorter.put(i64::MIN, (kb, r), (vb, r));
        }
        sorter.spill_if_full()?;
    }
    Ok(())
}

/// The version (renumbered as in `lineage`) and the key of the files of
/// `name`'s current table `state`; no version when the lineage lacks it (the
/// files are then rebuilt, matched by column name).
fn base_shape(lineage: &Lineage, name: &str, state: &TableState) -> (Option<u32>, Option<String>) {
    let conf = state.metadata.as_ref().map(|m| &m["configuration"]);
    let version = conf
        .and_then(|c| c[CONF_VERSION].as_str())
        .and_then(|v| v.parse().ok())
        .and_then(|v| lineage.renumbered(name, v));
    let key = conf.and_then(|c| c[CONF_KEY].as_str()).map(str::to_string);
    (version, key)
}

/// Whether files of version `from` of `t` are in the shape of `schema`
/// already, every column from the column of its name (a RENAME TABLE, an
/// index change): then they are kept as they are, not rewritten.
fn same_shape(t: &FoldTable, from: u32, sources: &[Option<String>], schema: &SchemaRef) -> bool {
    let Some(v) = t.versions.iter().find(|v| v.schema.version == from) else {
        return false;
    };
    shape::current_schema(&v.schema).fields() == schema.fields()
        && sources.len() + 2 == schema.fields().len()
        && sources
            .iter()
            .zip(schema.fields().iter())
            .all(|(s, f)| s.as_deref() == Some(f.name().as_str()))
}

/// A batch of the current table's own files in the shape of `schema`.
fn own_shape(
    batch: RecordBatch,
    reshape: Option<&[Option<String>]>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    match reshape {
        Some(sources) => shape::reshape(&batch, sources, schema),
        None if batch.schema().fields() == schema.fields() => Ok(batch),
        None => {
            // Same version, other nullability or metadata: names match.
            let names: Vec<Option<String>> = schema
                .fields()
                .iter()
                .take(schema.fields().len() - 2)
                .map(|f| Some(f.name().clone()))
                .collect();
            shape::reshape(&batch, &names, schema)
        }
    }
}
