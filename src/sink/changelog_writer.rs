//! The encoder of a changelog file: Parquet with [`changelog_properties`],
//! written a batch at a time, each batch's columns encoded on two threads.
//!
//! `ArrowWriter` encodes a batch's columns one after another on the calling
//! thread. A table's stream rows go into one file in their order, so one
//! file's encoding is the stream's longest serial step: split over the
//! columns, it takes both cores while the decoder waits for memory, and
//! shares them with it otherwise.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::file::writer::SerializedFileWriter;

use super::changelog_properties;
use crate::error::{Error, Result};

/// Rows of a changelog file's row group at most.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// What a column writer holds before its first row, which its own
/// `memory_size` leaves out: parquet gives each column a zstd codec with a
/// decompression context (95 KiB) beside its encoders. Measured: 278 KiB
/// for a writer of 15 columns, so 10,000 open files took 2.8 GiB.
pub const COLUMN_WRITER_BYTES: usize = 20 * 1024;

/// A changelog file being written into memory.
pub struct ChangelogWriter {
    file: SerializedFileWriter<Vec<u8>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// The column writers of the row group in progress, one per leaf.
    columns: Vec<ArrowColumnWriter>,
    group_rows: usize,
    /// Row groups written so far.
    groups: usize,
}

impl ChangelogWriter {
    pub fn try_new(schema: SchemaRef) -> Result<Self> {
        let props = changelog_properties(&schema)?.build();
        // `ArrowWriter` puts the Arrow schema in the file's metadata; its
        // lower-level parts then take the columns.
        let (file, factory) = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))?
            .into_serialized_writer()?;
        let columns = factory.create_column_writers(0)?;
        Ok(Self {
            file,
            factory,
            schema,
            columns,
            group_rows: 0,
            groups: 0,
        })
    }

    /// Encodes a batch of rows, in row groups of at most [`ROW_GROUP_ROWS`].
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let rows = (ROW_GROUP_ROWS - self.group_rows).min(batch.num_rows() - offset);
            self.write_part(&batch.slice(offset, rows))?;
            offset += rows;
            if self.group_rows == ROW_GROUP_ROWS {
                self.close_group()?;
            }
        }
        Ok(())
    }

    fn write_part(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut leaves = Vec::with_capacity(self.columns.len());
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            leaves.extend(compute_leaves(field, column)?);
        }
        // Every other leaf to each thread: a row's column and its before
        // image's go apart, which evens the halves out.
        let (mut even, mut odd): (Vec<_>, Vec<_>) = self
            .columns
            .iter_mut()
            .zip(&leaves)
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        std::thread::scope(|scope| {
            let other = scope.spawn(move || write_leaves(&mut odd));
            let mine = write_leaves(&mut even);
            let theirs = other
                .join()
                .map_err(|_| Error::Lake("a parquet encoder thread panicked".into()))?;
            mine.and(theirs)
        })?;
        self.group_rows += batch.num_rows();
        Ok(())
    }

    /// Ends the row group in progress, if it has rows.
    fn close_group(&mut self) -> Result<()> {
        if self.group_rows == 0 {
            return Ok(());
        }
        self.groups += 1;
        let next = self.factory.create_column_writers(self.groups)?;
        let columns = std::mem::replace(&mut self.columns, next);
        let mut group = self.file.next_row_group()?;
        for column in columns {
            column.close()?.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.group_rows = 0;
        Ok(())
    }

    /// The bytes it holds: the finished row groups, the pages in progress,
    /// and each column writer's own state ([`COLUMN_WRITER_BYTES`]).
    pub fn memory_size(&self) -> usize {
        self.file.bytes_written()
            + self
                .columns
                .iter()
                .map(|c| c.memory_size() + COLUMN_WRITER_BYTES)
                .sum::<usize>()
    }

    /// The whole file.
    pub fn finish(mut self) -> Result<Vec<u8>> {
        self.close_group()?;
        Ok(self.file.into_inner()?)
    }
}

fn write_leaves(columns: &mut [(usize, (&mut ArrowColumnWriter, &ArrowLeafColumn))]) -> Result<()> {
    for (_, (writer, leaf)) in columns.iter_mut() {
        writer.write(leaf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    /// Seeded rows of a changelog-like shape: a key, a nullable string, a
    /// zoned timestamp (kept only through the Arrow schema in the file's
    /// metadata) and a nullable `_before` struct of the two.
    fn batch(schema: &SchemaRef, seed: u64, rows: usize) -> RecordBatch {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let draws: Vec<u64> = (0..rows).map(|_| next()).collect();
        let id: ArrayRef = Arc::new(Int64Array::from_iter_values(
            draws.iter().map(|d| *d as i64 - (1 << 30)),
        ));
        let s: ArrayRef = Arc::new(StringArray::from_iter(
            draws
                .iter()
                .map(|d| (d % 5 != 0).then(|| format!("v{}", d % 997))),
        ));
        let ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from_iter_values(draws.iter().map(|d| *d as i64))
                .with_timezone("Europe/Berlin"),
        );
        let DataType::Struct(fields) = schema.field(3).data_type().clone() else {
            unreachable!("the test schema's `_before` is a struct")
        };
        let nulls = arrow::buffer::NullBuffer::from_iter(draws.iter().map(|d| d % 3 != 0));
        let before: ArrayRef = Arc::new(StructArray::new(
            fields,
            vec![Arc::clone(&id), Arc::clone(&s)],
            Some(nulls),
        ));
        RecordBatch::try_new(Arc::clone(schema), vec![id, s, ts, before]).unwrap()
    }

    #[test]
    fn batches_read_back_exactly_in_row_groups_of_at_most_the_bound() {
        let row = Fields::from(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]);
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("Europe/Berlin".into())),
                false,
            ),
            Field::new("_before", DataType::Struct(row), true),
        ]));
        let batches: Vec<RecordBatch> = [(7, 100_000), (8, 50_000), (9, 7), (10, 0)]
            .into_iter()
            .map(|(seed, rows)| batch(&schema, seed, rows))
            .collect();
        let mut writer = ChangelogWriter::try_new(Arc::clone(&schema)).unwrap();
        for b in &batches {
            writer.write(b).unwrap();
        }
        assert!(writer.memory_size() > 0);
        let bytes = Bytes::from(writer.finish().unwrap());

        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let groups: Vec<i64> = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        assert_eq!(
            groups,
            vec![ROW_GROUP_ROWS as i64, 150_007 - ROW_GROUP_ROWS as i64]
        );
        assert_eq!(reader.schema(), &schema);
        let read: Vec<RecordBatch> = reader.build().unwrap().map(|b| b.unwrap()).collect();
        let read = arrow::compute::concat_batches(&schema, &read).unwrap();
        let written = arrow::compute::concat_batches(&schema, &batches).unwrap();
        assert_eq!(read, written);
    }

    #[test]
    fn an_empty_file_is_a_valid_file_of_no_rows() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let bytes = Bytes::from(
            ChangelogWriter::try_new(Arc::clone(&schema))
                .unwrap()
                .finish()
                .unwrap(),
        );
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
        assert_eq!(reader.schema(), &schema);
    }
}
