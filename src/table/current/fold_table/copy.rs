//! A table's first fold when every change puts a new key, in key order (the
//! chunks of its snapshot): the changelog's column chunks go into the
//! current table's files as they are, neither decoded nor encoded again.
//! Only the key columns, `_seq` and `_ts` are written anew (the current
//! table encodes its keys its own way, and the changelog stores `_seq` and
//! `_ts` as required columns, the current table as optional ones), from the
//! same small columns the fold reads anyway to check the order of the keys.
//!
//! [`plan`] says whether the files allow it: every table column stored
//! under its current name, with the same Arrow type and the same Parquet
//! column descriptor, in row groups of [`MIN_ROWS_PER_GROUP`] rows or more
//! on average and [`MAX_GROUP_BYTES`] (or a quarter of the target file
//! size) at most. A file's row groups are
//! copied whole, so the current table's row groups are the changelog's:
//! reading one later holds what reading the changelog's did.

use bytes::{Buf, Bytes};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowRowGroupWriterFactory, ArrowWriter};
use parquet::arrow::ArrowSchemaConverter;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use tokio::io::AsyncWriteExt;

use super::super::super::files::parquet_metadata;
use super::changes::{ascending, change_rows, open_source, stored_names, ChangeSource};
use super::key_runs::{KeyRuns, RUNS_KEY};
use super::*;

/// Files whose row groups hold fewer rows than this on average (a stream's
/// small flushes) are not copied: the current table would keep them small.
const MIN_ROWS_PER_GROUP: usize = 8192;

/// Row groups larger than this (compressed), or than a quarter of the
/// target file size, are not copied: a later fold reads a current table's
/// files a row group at a time, and files are cut between row groups.
const MAX_GROUP_BYTES: usize = 4 * ROW_GROUP_BYTES;

/// The changelog files of a fold that can be copied, each with its
/// metadata and, per table column, the leaf that holds it.
pub(super) struct CopyPlan<'a> {
    sources: Vec<(&'a ChangeSource, Arc<ParquetMetaData>, Vec<usize>)>,
}

/// Whether the files of `sources` can be copied into the current table of
/// `target`; reads their footers only.
pub(super) async fn plan<'a>(
    ctx: &Ctx<'_>,
    t: &FoldTable,
    sources: &'a [ChangeSource],
    target: &Target<'_>,
) -> Result<Option<CopyPlan<'a>>> {
    let ncols = target.tv.schema.columns.len();
    let want = ArrowSchemaConverter::new()
        .convert(&target.schema)
        .map_err(|e| lake_err(t, e))?;
    let not = |why: String| {
        tracing::debug!(table = %t.name(), "the first fold decodes its changes: {why}");
        Ok(None)
    };
    // One leaf per column: no nested type.
    if want.num_columns() != target.schema.fields().len() {
        return not("a nested column".into());
    }
    let mut out = Vec::new();
    for src in sources {
        let names = stored_names(t, src, target);
        let [names] = names.as_slice() else {
            return not(format!("{} holds rows of several shapes", src.path));
        };
        let (meta, schema) = parquet_metadata(&ctx.store, src.path.clone(), src.bytes).await?;
        let groups = meta.num_row_groups();
        let rows = meta.file_metadata().num_rows().max(0) as usize;
        if rows < MIN_ROWS_PER_GROUP * groups {
            return not(format!(
                "{} has {rows} rows in {groups} row groups",
                src.path
            ));
        }
        let largest = meta.row_groups().iter().map(|g| g.compressed_size()).max();
        let bound = (ctx.target_bytes / 4).min(MAX_GROUP_BYTES as u64);
        if largest.is_some_and(|b| b.max(0) as u64 > bound) {
            return not(format!("{} has a row group past {bound} bytes", src.path));
        }
        let have = meta.file_metadata().schema_descr();
        let mut leaves = Vec::with_capacity(ncols);
        for (i, field) in target.schema.fields().iter().take(ncols).enumerate() {
            let name = field.name();
            if names.get(i).and_then(|n| n.as_deref()) != Some(name.as_str()) {
                return not(format!("{name} is stored under another name"));
            }
            if schema
                .field_with_name(name)
                .map_or(true, |f| f.data_type() != field.data_type())
            {
                return not(format!("{name} is stored as another type in {}", src.path));
            }
            let leaf = (0..have.num_columns()).find(|j| {
                let parts = have.column(*j).path().parts().to_vec();
                parts.len() == 1 && &parts[0] == name
            });
            match leaf {
                Some(j) if *have.column(j) == *want.column(i) => leaves.push(j),
                _ => return not(format!("{name} is stored differently in {}", src.path)),
            }
        }
        out.push((src, meta, leaves));
    }
    Ok(Some(CopyPlan { sources: out }))
}

/// Bytes of a file from offset `base` on, read as the file itself.
struct Span {
    base: u64,
    bytes: Bytes,
}

impl Length for Span {
    fn len(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }
}

impl ChunkReader for Span {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.get_bytes(start, 0)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start
            .checked_sub(self.base)
            .map(|f| f as usize)
            .filter(|f| *f <= self.bytes.len())
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "offset {start} outside the span read from {}",
                    self.base
                ))
            })?;
        let to = match length {
            0 => self.bytes.len(),
            n => (from + n).min(self.bytes.len()),
        };
        Ok(self.bytes.slice(from..to))
    }
}

/// A current table file being written from copied row groups.
struct CopyFile {
    writer: SerializedFileWriter<Vec<u8>>,
    columns: ArrowRowGroupWriterFactory,
    upload: object_store::buffered::BufWriter,
    name: String,
    first: Vec<u8>,
    last: Vec<u8>,
    groups: usize,
    runs: Option<KeyRuns>,
}

impl CopyFile {
    /// Sends what the writer holds to the upload.
    async fn drain(&mut self) -> Result<()> {
        self.writer.flush()?;
        let bytes = std::mem::take(self.writer.inner_mut());
        self.upload.write_all(&bytes).await?;
        Ok(())
    }
}

impl Output<'_> {
    /// Copies the row groups of `plan` into new files, cut near the target
    /// size; returns the rows copied.
    pub(super) async fn copy(
        &mut self,
        t: &FoldTable,
        plan: CopyPlan<'_>,
        target: &Target<'_>,
    ) -> Result<u64> {
        let ncols = target.tv.schema.columns.len();
        let mut open: Option<CopyFile> = None;
        let mut last: Option<Vec<u8>> = None;
        let mut copied = 0u64;
        for (src, meta, leaves) in &plan.sources {
            let names = stored_names(t, src, target);
            let mut stream = open_source(self.ctx, src, &names, target, true).await?;
            for (g, group) in meta.row_groups().iter().enumerate() {
                let rows = group.num_rows().max(0) as usize;
                // The group's keys, `_seq` and `_ts` (a batch never spans
                // two row groups).
                let (mut seqs, mut tss) = (Vec::new(), Vec::new());
                let mut key_cols: Vec<Vec<ArrayRef>> = vec![Vec::new(); target.key_idx.len()];
                let mut first: Option<Vec<u8>> = None;
                let mut read = 0;
                while read < rows {
                    let batch = stream.try_next().await?.ok_or_else(|| {
                        lake_err(t, format!("changelog file {} ended early", src.path))
                    })?;
                    let change = change_rows(t, src, &batch, &names[0], target)?;
                    let n = change.keys.num_rows();
                    let all_put = (0..n).all(|r| change.cdc.op(r).puts());
                    if !all_put || !ascending(&change, last.as_deref()) {
                        return Err(lake_err(
                            t,
                            format!(
                                "changelog file {} changed between two reads of a fold (a bug); the previous version stays",
                                src.path
                            ),
                        ));
                    }
                    if n == 0 {
                        continue;
                    }
                    first.get_or_insert_with(|| change.keys.row(0).as_ref().to_vec());
                    last = Some(change.keys.row(n - 1).as_ref().to_vec());
                    for (k, i) in target.key_idx.iter().enumerate() {
                        key_cols[k].push(change.values.column(*i).clone());
                    }
                    seqs.push(change.values.column(ncols).clone());
                    tss.push(change.values.column(ncols + 1).clone());
                    read += n;
                }
                if read != rows {
                    return Err(lake_err(
                        t,
                        format!("changelog file {}: a batch spans two row groups", src.path),
                    ));
                }
                let Some(first) = first else {
                    continue;
                };
                // The bytes of the table columns' chunks.
                let spans: Vec<(u64, u64)> = leaves
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !target.key_idx.contains(i))
                    .map(|(_, j)| {
                        let c = group.column(*j);
                        let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
                        (start.max(0) as u64, c.compressed_size().max(0) as u64)
                    })
                    .collect();
                let from = spans.iter().map(|s| s.0).min().unwrap_or(0);
                let to = spans.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
                let span = Span {
                    base: from,
                    bytes: match spans.is_empty() {
                        // Every column is a key column: nothing to copy.
                        true => Bytes::new(),
                        false => self.ctx.store.get_range(&src.path, from..to).await?,
                    },
                };

                if open.is_none() {
                    open = Some(self.new_copy_file(target, &first)?);
                }
                let Some(file) = open.as_mut() else {
                    unreachable!("opened above")
                };
                // The key columns and `_seq` and `_ts` are encoded (the
                // key as the current table's files encode it: a fold
                // reads it); the other columns' chunks are copied.
                let mut encoded: BTreeMap<usize, &[ArrayRef]> = BTreeMap::new();
                for (k, i) in target.key_idx.iter().enumerate() {
                    encoded.insert(*i, &key_cols[k]);
                }
                if let Some(runs) = file.runs.as_mut() {
                    for keys in &key_cols[0] {
                        runs.push(keys.as_ref());
                    }
                }
                encoded.insert(ncols, &seqs);
                encoded.insert(ncols + 1, &tss);
                let columns = file.columns.create_column_writers(file.groups)?;
                if columns.len() != ncols + 2 {
                    return Err(lake_err(t, "a current table schema without _seq and _ts"));
                }
                let mut group_writer = file.writer.next_row_group()?;
                for (i, mut writer) in columns.into_iter().enumerate() {
                    if let Some(arrays) = encoded.get(&i) {
                        let field = target.schema.field(i);
                        for a in arrays.iter() {
                            for leaf in compute_leaves(field, a)? {
                                writer.write(&leaf)?;
                            }
                        }
                        writer.close()?.append_to_row_group(&mut group_writer)?;
                        continue;
                    }
                    let j = leaves[i];
                    let chunk = group.column(j);
                    let close = ColumnCloseResult {
                        bytes_written: chunk.compressed_size().max(0) as u64,
                        rows_written: rows as u64,
                        metadata: chunk.clone(),
                        bloom_filter: None,
                        column_index: meta
                            .page_index()
                            .and_then(|p| p.column_index(g, j).cloned()),
                        offset_index: meta
                            .page_index()
                            .and_then(|p| p.offset_index(g, j).cloned()),
                    };
                    group_writer.append_column(&span, close)?;
                }
                group_writer.close()?;
                file.groups += 1;
                file.last = last.clone().unwrap_or_default();
                file.drain().await?;
                copied += rows as u64;
                if file.writer.bytes_written() as u64 >= self.ctx.target_bytes {
                    if let Some(file) = open.take() {
                        self.finish_copy_file(file).await?;
                    }
                }
            }
        }
        if let Some(file) = open.take() {
            self.finish_copy_file(file).await?;
        }
        Ok(copied)
    }

    fn new_copy_file(&mut self, target: &Target<'_>, first: &[u8]) -> Result<CopyFile> {
        let (name, path) = self.next_name();
        let (writer, columns) =
            ArrowWriter::try_new(Vec::new(), target.schema.clone(), Some(self.props.clone()))?
                .into_serialized_writer()?;
        let upload = object_store::buffered::BufWriter::new(self.ctx.store.clone(), path.clone());
        self.written.push(path);
        Ok(CopyFile {
            writer,
            columns,
            upload,
            name,
            first: first.to_vec(),
            last: Vec::new(),
            groups: 0,
            runs: self.runs_column.map(|_| KeyRuns::default()),
        })
    }

    async fn finish_copy_file(&mut self, mut file: CopyFile) -> Result<()> {
        if let Some(runs) = file.runs.as_ref().and_then(KeyRuns::encode) {
            file.writer
                .append_key_value_metadata(parquet::file::metadata::KeyValue::new(
                    RUNS_KEY.to_string(),
                    runs,
                ));
        }
        let meta = file.writer.finish()?;
        file.drain().await?;
        file.upload.shutdown().await?;
        let size = file.writer.bytes_written() as u64;
        self.added(file.name, size, &meta, &file.first, &file.last);
        Ok(())
    }
}
