//! Per-table buffers of decoded rows: the table's columns, the CDC columns and
//! the `_before` image, as Arrow builders. A buffer becomes one Parquet file
//! when it is flushed; one buffer never mixes schema versions.

pub mod column;
pub mod policy;
pub mod savepoint;

use std::sync::Arc;

use arrow::array::*;
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Int32Type, Int8Type, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::schema::policy::ColumnKey;
use crate::schema::TableSchema;
use column::ColumnBuilder;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    Insert,
    Update,
    Delete,
    /// A marker row (table columns null): every earlier row of the table is gone.
    Truncate,
    /// A row read by the initial snapshot.
    Snapshot,
}

impl RowOp {
    pub fn as_str(self) -> &'static str {
        match self {
            RowOp::Insert => "insert",
            RowOp::Update => "update",
            RowOp::Delete => "delete",
            RowOp::Truncate => "truncate",
            RowOp::Snapshot => "snapshot",
        }
    }
}

/// Where a row came from: the same for every row of one rows event.
pub struct RowOrigin<'a> {
    pub tx_seq: i64,
    pub file: &'a str,
    pub pos: u64,
    pub gtid: Option<&'a str>,
    /// Event header timestamp, seconds since the epoch.
    pub timestamp: u32,
    /// The statement that produced the rows (Rows_query / Annotate_rows).
    pub sql: Option<&'a Arc<str>>,
}

/// The Arrow schema of a table's Parquet files: its columns, then the CDC columns.
pub fn arrow_schema(table: &TableSchema) -> SchemaRef {
    let mut fields: Vec<Field> = table
        .column_fields(true)
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let dict = |keys: DataType| DataType::Dictionary(Box::new(keys), Box::new(DataType::Utf8));
    fields.extend([
        Field::new("_op", dict(DataType::Int8), false),
        Field::new("_seq", DataType::Int64, false),
        Field::new("_tx_seq", DataType::Int64, false),
        Field::new("_binlog_file", dict(DataType::Int32), false),
        Field::new("_binlog_pos", DataType::Int64, false),
        Field::new("_gtid", DataType::Utf8, true),
        Field::new(
            "_ts",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("_sql", dict(DataType::Int32), true),
        Field::new("_before", DataType::Struct(table.column_fields(true)), true),
    ]);
    Arc::new(Schema::new(fields))
}

/// The rows of one snapshot chunk as a batch of the table's file schema:
/// `_seq` from `first_seq` on, one `_tx_seq`, the chunk's position, `_gtid`,
/// `_sql` and `_before` null (DESIGN.md, "Initial snapshot"). `columns` are
/// the table's columns as read; their policies are applied here.
pub fn snapshot_batch(
    table: &TableSchema,
    columns: Vec<ArrayRef>,
    first_seq: i64,
    tx_seq: i64,
    at: (&str, u64),
    ts_ms: i64,
    key: Option<&ColumnKey>,
) -> Result<RecordBatch> {
    let n = columns.first().map_or(0, |c| c.len());
    let mut columns = policy::police_columns(table, columns, key)?;
    let mut op = StringDictionaryBuilder::<Int8Type>::new();
    let mut file = StringDictionaryBuilder::<Int32Type>::new();
    for _ in 0..n {
        op.append_value(RowOp::Snapshot.as_str());
        file.append_value(at.0);
    }
    let sql_values: ArrayRef = Arc::new(StringArray::from(Vec::<&str>::new()));
    columns.extend([
        Arc::new(op.finish()) as ArrayRef,
        Arc::new(Int64Array::from_iter_values(
            first_seq..first_seq + n as i64,
        )),
        Arc::new(Int64Array::from_value(tx_seq, n)),
        Arc::new(file.finish()),
        Arc::new(Int64Array::from_value(at.1 as i64, n)),
        Arc::new(StringArray::new_null(n)),
        Arc::new(TimestampMillisecondArray::from_value(ts_ms, n).with_timezone("UTC")),
        Arc::new(DictionaryArray::<Int32Type>::try_new(
            Int32Array::new_null(n),
            sql_values,
        )?),
        Arc::new(StructArray::new_null(table.column_fields(true), n)),
    ]);
    Ok(RecordBatch::try_new(arrow_schema(table), columns)?)
}

pub struct TableBuffer {
    pub table: Arc<TableSchema>,
    schema: SchemaRef,
    pub columns: Vec<ColumnBuilder>,
    pub before: Vec<ColumnBuilder>,
    before_valid: NullBufferBuilder,
    op: StringDictionaryBuilder<Int8Type>,
    seq: Int64Builder,
    tx_seq: Int64Builder,
    file: StringDictionaryBuilder<Int32Type>,
    pos: Int64Builder,
    gtid: StringBuilder,
    ts: TimestampMillisecondBuilder,
    /// `_sql` as dictionary keys into `sql_values`: one copy per statement.
    sql_keys: Int32Builder,
    sql_values: Vec<Arc<str>>,
    rows: usize,
    approx_bytes: usize,
    /// Fixed bytes every row takes in the builders, whatever its values.
    row_fixed_bytes: usize,
    /// Arrow memory per estimated byte, learned at each `finish`: builders
    /// grow by doubling, and strings carry offsets the estimate leaves out.
    scale: f64,
}

/// Fixed per-row bytes of the CDC columns: dictionary keys, counters,
/// offsets, the timestamp, null bits.
const CDC_ROW_BYTES: usize = 1 + 8 + 8 + 4 + 8 + 4 + 8 + 4 + 2;

/// Bytes one value takes in its Arrow builder before any variable-length data.
fn fixed_width(t: &DataType) -> usize {
    match t {
        DataType::Int16 => 2,
        DataType::Float32 | DataType::Date32 => 4,
        DataType::Decimal128(..) => 16,
        // Offsets of strings, binaries and lists.
        DataType::Utf8 | DataType::Binary | DataType::List(_) => 4,
        _ => 8,
    }
}

impl TableBuffer {
    pub fn new(table: Arc<TableSchema>) -> Self {
        let builders = || {
            table
                .columns
                .iter()
                .map(|c| ColumnBuilder::new(&c.kind))
                .collect()
        };
        // Each column twice: the row and the `_before` image (nulls still
        // take their slot).
        let row_fixed_bytes = CDC_ROW_BYTES
            + 2 * table
                .columns
                .iter()
                .map(|c| fixed_width(&c.kind.arrow_type()))
                .sum::<usize>();
        let n = column::INITIAL_ROWS;
        TableBuffer {
            schema: arrow_schema(&table),
            columns: builders(),
            before: builders(),
            table,
            before_valid: NullBufferBuilder::new(0),
            op: StringDictionaryBuilder::with_capacity(n, 4, 32),
            seq: Int64Builder::with_capacity(n),
            tx_seq: Int64Builder::with_capacity(n),
            file: StringDictionaryBuilder::with_capacity(n, 1, 32),
            pos: Int64Builder::with_capacity(n),
            gtid: StringBuilder::with_capacity(n, n * 16),
            ts: TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC"),
            sql_keys: Int32Builder::with_capacity(n),
            sql_values: Vec::new(),
            rows: 0,
            approx_bytes: 0,
            row_fixed_bytes,
            scale: 2.0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// An estimate of the memory the builders hold, kept cheaply per row:
    /// the fixed width of every slot plus the row's bytes in the binlog (a
    /// close bound on its variable-length data).
    pub fn approx_bytes(&self) -> usize {
        (self.approx_bytes as f64 * self.scale) as usize
    }

    /// Appends the CDC columns of one row; the decoder has appended (or will
    /// append) the table columns and, for updates, the before image.
    pub fn finish_row(&mut self, op: RowOp, seq: i64, origin: &RowOrigin<'_>, value_bytes: usize) {
        if op != RowOp::Update {
            for b in &mut self.before {
                b.append_null();
            }
        }
        self.before_valid.append(op == RowOp::Update);
        self.op.append_value(op.as_str());
        self.seq.append_value(seq);
        self.tx_seq.append_value(origin.tx_seq);
        self.file.append_value(origin.file);
        self.pos.append_value(origin.pos as i64);
        self.gtid.append_option(origin.gtid);
        self.ts.append_value(origin.timestamp as i64 * 1000);
        match origin.sql {
            Some(sql) => {
                if !self
                    .sql_values
                    .last()
                    .is_some_and(|last| Arc::ptr_eq(last, sql))
                {
                    self.sql_values.push(Arc::clone(sql));
                }
                self.sql_keys.append_value(self.sql_values.len() as i32 - 1);
            }
            None => self.sql_keys.append_null(),
        }
        self.rows += 1;
        self.approx_bytes += value_bytes + self.row_fixed_bytes + origin.gtid.map_or(0, str::len);
    }

    /// Appends a `truncate` marker row: every table column null.
    pub fn push_marker(&mut self, seq: i64, origin: &RowOrigin<'_>) {
        for b in &mut self.columns {
            b.append_null();
        }
        self.finish_row(RowOp::Truncate, seq, origin, 0);
    }

    /// Drains the builders into one record batch, the table's column
    /// policies applied (`key` hashes); the buffer is empty afterwards.
    pub fn finish(&mut self, key: Option<&ColumnKey>) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self.columns.iter_mut().map(|c| c.finish()).collect();
        let mut arrays = policy::police_columns(&self.table, columns, key)?;
        let before_children: Vec<ArrayRef> = self.before.iter_mut().map(|c| c.finish()).collect();
        let before_children = policy::police_columns(&self.table, before_children, key)?;
        let before_nulls: Option<NullBuffer> = self.before_valid.finish();
        let before = StructArray::try_new(
            self.table.column_fields(true),
            before_children,
            before_nulls,
        )?;
        arrays.push(Arc::new(self.op.finish()));
        arrays.push(Arc::new(self.seq.finish()));
        arrays.push(Arc::new(self.tx_seq.finish()));
        arrays.push(Arc::new(self.file.finish()));
        arrays.push(Arc::new(self.pos.finish()));
        arrays.push(Arc::new(self.gtid.finish()));
        arrays.push(Arc::new(self.ts.finish()));
        let mut sql_keys = self.sql_keys.finish();
        let statements = self.sql_values.drain(..);
        let sql_values = if self.table.has_policy() {
            // The statements hold the literal values the policies keep
            // out: neither a key nor a dictionary value is written.
            sql_keys = Int32Array::new_null(sql_keys.len());
            StringArray::from(Vec::<&str>::new())
        } else {
            StringArray::from_iter_values(statements.map(|s| s.to_string()))
        };
        arrays.push(Arc::new(DictionaryArray::<Int32Type>::try_new(
            sql_keys,
            Arc::new(sql_values),
        )?));
        arrays.push(Arc::new(before));
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)?;
        if self.rows >= 1024 {
            let measured = batch.get_array_memory_size() as f64 / self.approx_bytes.max(1) as f64;
            self.scale = measured.clamp(0.5, 8.0);
        }
        self.rows = 0;
        self.approx_bytes = 0;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ColumnDef;

    fn origin(sql: Option<&Arc<str>>) -> RowOrigin<'_> {
        RowOrigin {
            tx_seq: 1,
            file: "binlog.000001",
            pos: 4,
            gtid: None,
            timestamp: 0,
            sql,
        }
    }

    fn sql_column(batch: &RecordBatch) -> &DictionaryArray<Int32Type> {
        batch
            .column_by_name("_sql")
            .unwrap()
            .as_any()
            .downcast_ref::<DictionaryArray<Int32Type>>()
            .unwrap()
    }

    #[test]
    fn sql_is_held_once_per_statement() {
        let table = TableSchema {
            database: "shop".into(),
            name: "t".into(),
            version: 1,
            columns: vec![ColumnDef::new("id", "int", None, false, true).unwrap()],
            charset: None,
            unique_keys: Vec::new(),
        };
        let mut b = TableBuffer::new(Arc::new(table));
        let (a, c): (Arc<str>, Arc<str>) = (Arc::from("INSERT a"), Arc::from("INSERT c"));
        for sql in [Some(&a), Some(&a), None, Some(&c)] {
            b.columns[0].append_i64(1);
            b.finish_row(RowOp::Insert, 1, &origin(sql), 4);
        }
        let batch = b.finish(None).unwrap();
        let sql = sql_column(&batch);
        let keys: Vec<Option<i32>> = sql.keys().iter().collect();
        assert_eq!(keys, vec![Some(0), Some(0), None, Some(1)]);
        let values = sql.values().as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(
            values.iter().collect::<Vec<_>>(),
            vec![Some("INSERT a"), Some("INSERT c")]
        );
    }

    #[test]
    fn sql_of_a_policed_table_is_null_with_no_statement_kept() {
        use crate::schema::policy::PolicyAction;
        let mut v = ColumnDef::new("v", "int", None, true, false).unwrap();
        v.policy = Some(PolicyAction::Mask);
        let table = TableSchema {
            database: "shop".into(),
            name: "t".into(),
            version: 1,
            columns: vec![ColumnDef::new("id", "int", None, false, true).unwrap(), v],
            charset: None,
            unique_keys: Vec::new(),
        };
        let mut b = TableBuffer::new(Arc::new(table));
        let sql: Arc<str> = Arc::from("INSERT INTO t VALUES (1, 4242)");
        b.columns[0].append_i64(1);
        b.columns[1].append_i64(4242);
        b.finish_row(RowOp::Insert, 1, &origin(Some(&sql)), 8);
        let batch = b.finish(None).unwrap();
        let sql = sql_column(&batch);
        assert!(sql.is_null(0));
        assert_eq!(sql.values().len(), 0, "the statement is not in the file");
        assert!(batch.column_by_name("v").unwrap().is_null(0));
    }
}
