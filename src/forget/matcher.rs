//! Which rows of a lake file belong to the keys (or column values) that
//! `sluice forget` erases.
//!
//! The user names rows by the table's columns as they are now, with plain
//! values (`{"id": 42}`). A file holds them as some version of the table
//! wrote them: under that version's lake names, in its lake types, and
//! through its column policies (a hashed key column holds the HMAC). So the
//! values are turned into each version's form once — a [`View`] per
//! distinct form — and a file's rows are compared with every view whose
//! columns the file has: its own columns, and the same fields of `_before`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StringArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use serde_json::Value;

use crate::batch::policy::{hash, truncate};
use crate::schema::history::TableVersion;
use crate::schema::lake_names::current_names;
use crate::schema::policy::{ColumnKey, PolicyAction};
use crate::schema::ColumnDef;
use crate::table::current::shape::origins;

/// One form of the named rows: the columns' names in a file and the values
/// they hold there, in Arrow's row format.
#[derive(Debug)]
struct View {
    names: Vec<String>,
    types: Vec<DataType>,
    conv: RowConverter,
    /// Row-format bytes of each named row, and which of them it is (a
    /// row named twice is both).
    wanted: HashMap<Vec<u8>, Vec<usize>>,
}

/// The rows to erase, in every form the table's files may hold them.
#[derive(Debug)]
pub struct Matcher {
    views: Vec<View>,
    /// How many rows (keys or `--where` objects) were named.
    pub count: usize,
}

/// Where a file's column names come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// The changelog's Parquet files: each version's lake names.
    Changelog,
    /// The current table: each version's current names.
    Current,
}

/// The named rows' values, by the table's current column names.
pub struct Named<'a> {
    /// The columns the rows are named by (current names, in order).
    pub columns: Vec<String>,
    /// Each named row: one JSON value per column.
    pub rows: Vec<Vec<&'a Value>>,
    /// The columns are the table's key (a renamed key column is found in
    /// older versions by its place in the key).
    pub by_key: bool,
}

impl Matcher {
    /// The views of `named` over the table's `versions` (oldest first).
    pub fn new(
        versions: &[TableVersion],
        named: &Named<'_>,
        key: Option<&ColumnKey>,
        names: Names,
    ) -> Result<Matcher, String> {
        let latest = versions.last().ok_or("the table has no schema history")?;
        let mut views: Vec<View> = Vec::new();
        // Newest first: the values must fit the table as it is now. A
        // current table's earlier files (of earlier versions of it) are in
        // the shapes of earlier versions too.
        for (i, v) in versions.iter().rev().enumerate() {
            let Some(columns) = columns_at(versions, v, latest, named) else {
                continue;
            };
            let shown: Vec<String> = match names {
                Names::Changelog => columns.iter().map(|c| c.lake_name.clone()).collect(),
                Names::Current => {
                    let all = current_names(&v.schema.columns);
                    columns
                        .iter()
                        .map(|c| {
                            let at = v.schema.columns.iter().position(|x| x.name == c.name);
                            at.map_or_else(|| c.name.clone(), |p| all[p].clone())
                        })
                        .collect()
                }
            };
            match view(&shown, &columns, named, key) {
                Ok(view) => {
                    if !views.iter().any(|o| {
                        o.names == view.names
                            && o.types == view.types
                            && o.wanted.len() == view.wanted.len()
                            && o.wanted.keys().all(|k| view.wanted.contains_key(k))
                    }) {
                        views.push(view);
                    }
                }
                // The values must fit the table as it is now; an older
                // version that cannot hold them holds no such rows.
                Err(e) if i == 0 => return Err(e),
                Err(_) => {}
            }
        }
        Ok(Matcher {
            views,
            count: named.rows.len(),
        })
    }

    /// The columns (and `_before` fields) any view compares.
    pub fn column_names(&self) -> std::collections::BTreeSet<String> {
        self.views
            .iter()
            .flat_map(|v| v.names.iter().cloned())
            .collect()
    }

    /// Which rows of `batch` hold a named row, in its own columns or in
    /// `_before`, and which named rows they are.
    pub fn matches(&self, batch: &RecordBatch) -> (BooleanArray, Vec<usize>) {
        let mut hit = vec![false; batch.num_rows()];
        let mut found = Vec::new();
        let before = batch
            .schema()
            .index_of("_before")
            .ok()
            .map(|i| batch.column(i).clone());
        for view in &self.views {
            let own: Option<Vec<ArrayRef>> = view
                .names
                .iter()
                .map(|n| batch.column_by_name(n).cloned())
                .collect();
            let in_before: Option<Vec<ArrayRef>> = before.as_ref().and_then(|b| {
                let s = b.as_struct_opt()?;
                view.names
                    .iter()
                    .map(|n| s.column_by_name(n).cloned())
                    .collect()
            });
            for cols in [own, in_before].into_iter().flatten() {
                view.mark(&cols, &mut hit, &mut found);
            }
        }
        found.sort_unstable();
        found.dedup();
        (BooleanArray::from(hit), found)
    }
}

impl View {
    fn mark(&self, cols: &[ArrayRef], hit: &mut [bool], found: &mut Vec<usize>) {
        let safe = CastOptions {
            safe: true,
            ..Default::default()
        };
        let cast: Option<Vec<ArrayRef>> = cols
            .iter()
            .zip(&self.types)
            .map(|(c, t)| cast_with_options(c, t, &safe).ok())
            .collect();
        let Some(cast) = cast else { return };
        let Ok(rows) = self.conv.convert_columns(&cast) else {
            return;
        };
        for (i, row) in rows.iter().enumerate() {
            // A null never names a row (the struct's own null, or a
            // column's), and every value of a named row is set.
            if cast.iter().any(|c| c.is_null(i)) {
                continue;
            }
            if let Some(named) = self.wanted.get(row.as_ref()) {
                hit[i] = true;
                found.extend(named);
            }
        }
    }
}

/// The columns of version `v` that hold `named`'s columns, or `None` when it
/// lacks one.
fn columns_at<'v>(
    versions: &[TableVersion],
    v: &'v TableVersion,
    latest: &TableVersion,
    named: &Named<'_>,
) -> Option<Vec<&'v ColumnDef>> {
    // Each latest column's name in `v` (renames followed through the DDL).
    let back = origins(versions, v.schema.version, latest.schema.version);
    let key_now = latest.schema.fold_key();
    let key_then = v.schema.fold_key();
    named
        .columns
        .iter()
        .map(|name| {
            let at_latest = latest.schema.columns.iter().position(|c| &c.name == name)?;
            let then = back.get(at_latest).cloned().flatten().or_else(|| {
                // A key column is the same place of the key then.
                let place = key_now.iter().position(|k| k == name)?;
                (named.by_key && key_now.len() == key_then.len()).then(|| key_then[place].clone())
            })?;
            v.schema.columns.iter().find(|c| c.name == then)
        })
        .collect()
}

/// The named rows in the form `columns` (of one version) hold them.
fn view(
    shown: &[String],
    columns: &[&ColumnDef],
    named: &Named<'_>,
    key: Option<&ColumnKey>,
) -> Result<View, String> {
    let mut arrays = Vec::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate() {
        let values: Vec<&Value> = named.rows.iter().map(|r| r[i]).collect();
        arrays.push(lake_values(c, &values, key)?);
    }
    let types: Vec<DataType> = arrays.iter().map(|a| a.data_type().clone()).collect();
    let conv = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())
        .map_err(|e| format!("columns {}: {e}", shown.join(", ")))?;
    let rows = conv
        .convert_columns(&arrays)
        .map_err(|e| format!("columns {}: {e}", shown.join(", ")))?;
    let mut wanted: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        wanted.entry(r.as_ref().to_vec()).or_default().push(i);
    }
    Ok(View {
        names: shown.to_vec(),
        types,
        conv,
        wanted,
    })
}

/// `values` as column `c` holds them in the lake: parsed into its type,
/// then through its policy.
fn lake_values(
    c: &ColumnDef,
    values: &[&Value],
    key: Option<&ColumnKey>,
) -> Result<ArrayRef, String> {
    let mut texts = Vec::with_capacity(values.len());
    for v in values {
        texts.push(match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => if *b { "1" } else { "0" }.to_string(),
            Value::Null => return Err(format!("column {} is null: name rows by values", c.name)),
            other => {
                return Err(format!(
                    "column {}: {other} is not a value (give a string or a number)",
                    c.name
                ))
            }
        });
    }
    let text: ArrayRef = Arc::new(StringArray::from(texts.clone()));
    let raw_type = crate::schema::policy::lake_type(&c.kind, None);
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let raw = cast_with_options(&text, &raw_type, &strict).map_err(|_| {
        let bad = texts
            .iter()
            .find(|t| {
                let one: ArrayRef = Arc::new(StringArray::from(vec![t.as_str()]));
                cast_with_options(&one, &raw_type, &strict).is_err()
            })
            .cloned()
            .unwrap_or_default();
        format!(
            "`{bad}` is not a value of column {} ({})",
            c.name, c.mysql_type
        )
    })?;
    match c.policy {
        None => Ok(raw),
        Some(PolicyAction::Hash) => {
            let key = key.ok_or_else(|| {
                format!(
                    "column {} is hashed and no column key is set: set SLUICE_COLUMN_KEY or [column_key] file as sluice run has it",
                    c.name
                )
            })?;
            Ok(Arc::new(hash(&c.kind, &raw, key)?))
        }
        Some(PolicyAction::Truncate(n)) => truncate(&raw, n as usize)
            .ok_or_else(|| format!("column {} cannot be truncated", c.name)),
        Some(PolicyAction::Mask) => Err(format!(
            "column {} is masked in the lake: it cannot name rows",
            c.name
        )),
        Some(PolicyAction::Exclude) => Err(format!(
            "column {} is excluded from the lake: it cannot name rows",
            c.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StructArray};
    use arrow::datatypes::{Field, Schema};
    use serde_json::json;

    fn version(n: u32, columns: Vec<ColumnDef>, statement: Option<&str>) -> TableVersion {
        let mut schema = crate::schema::TableSchema {
            database: "db".into(),
            name: "t".into(),
            version: n,
            columns,
            charset: None,
            unique_keys: Vec::new(),
        };
        for c in &mut schema.columns {
            c.lake_name = c.name.clone();
        }
        TableVersion {
            schema,
            order_key: n as i64,
            position: crate::source::BinlogPosition {
                file: "b.1".into(),
                pos: n as u64,
            },
            gtid: None,
            committed_at: String::new(),
            statement: statement.map(str::to_string),
            dropped: false,
            checkpoint: n as u64,
        }
    }

    fn col(name: &str, ty: &str, pk: bool) -> ColumnDef {
        ColumnDef::new(name, ty, None, false, pk).unwrap()
    }

    #[test]
    fn keys_match_own_columns_and_before_images_across_a_rename() {
        let v1 = version(
            1,
            vec![col("id", "int", true), col("v", "int", false)],
            None,
        );
        let v2 = version(
            2,
            vec![col("uid", "int", true), col("v", "int", false)],
            Some("ALTER TABLE t RENAME COLUMN id TO uid"),
        );
        let versions = vec![v1, v2];
        let k1 = json!(7);
        let k2 = json!("9");
        let named = Named {
            columns: vec!["uid".into()],
            rows: vec![vec![&k1], vec![&k2], vec![&k1]],
            by_key: true,
        };
        let m = Matcher::new(&versions, &named, None, Names::Changelog).unwrap();
        // A file of version 1: `id`, with a `_before` of the same names.
        let before = StructArray::from(vec![(
            Arc::new(Field::new("id", DataType::Int64, true)),
            Arc::new(Int64Array::from(vec![Some(1), Some(9), None])) as ArrayRef,
        )]);
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("_before", before.data_type().clone(), true),
            ])),
            vec![Arc::new(Int64Array::from(vec![7, 2, 3])), Arc::new(before)],
        )
        .unwrap();
        let (hit, found) = m.matches(&batch);
        assert_eq!(hit, BooleanArray::from(vec![true, true, false]));
        // A key named twice is found twice.
        assert_eq!(found, vec![0, 1, 2]);
    }

    #[test]
    fn values_that_do_not_fit_the_column_are_refused() {
        let versions = vec![version(1, vec![col("id", "int", true)], None)];
        let bad = json!("x1");
        let named = Named {
            columns: vec!["id".into()],
            rows: vec![vec![&bad]],
            by_key: true,
        };
        let e = Matcher::new(&versions, &named, None, Names::Changelog).unwrap_err();
        assert!(e.contains("`x1` is not a value of column id"), "{e}");
    }

    #[test]
    fn hashed_keys_match_their_hmac() {
        let mut c = col("id", "int", true);
        c.policy = Some(PolicyAction::Hash);
        let versions = vec![version(1, vec![c], None)];
        let key = ColumnKey::new(b"k");
        let v = json!(42);
        let named = Named {
            columns: vec!["id".into()],
            rows: vec![vec![&v]],
            by_key: true,
        };
        let m = Matcher::new(&versions, &named, Some(&key), Names::Changelog).unwrap();
        // HMAC-SHA256("k", "42"), as Python's hmac computes it.
        let digest = {
            use hmac::{Hmac, Mac};
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"k").unwrap();
            mac.update(b"42");
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true)])),
            vec![Arc::new(StringArray::from(vec![digest.as_str(), "42"]))],
        )
        .unwrap();
        assert_eq!(m.matches(&batch).0, BooleanArray::from(vec![true, false]));
        assert!(Matcher::new(&versions, &named, None, Names::Changelog)
            .unwrap_err()
            .contains("no column key"));
    }
}
