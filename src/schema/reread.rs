//! Which DDL statements leave every existing value as `SELECT` shows it, and
//! which do not (DESIGN.md "DDL whose effect sluice cannot replay is re-read
//! from the source"). The binlog carries no rows for what an ALTER does to
//! the rows a table already has: sluice replays only the changes it knows
//! keep them, and re-reads the table after any other.
//!
//! The decision compares the table's schema versions before and after the
//! statement. Two things a version does not hold come from the statement's
//! one parse ([`ColumnStep`]): which column became which (a rename is not a
//! drop and an add), and whether an added column gets a value in existing
//! rows (a DEFAULT, a generated expression).

use std::fmt;

use super::ddl::AlterOp;
use super::{ColumnDef, TableSchema};
use crate::types::ColumnKind;

/// What one ALTER did to the columns, beside the new version's shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnStep {
    /// For every column of the new version, its name before the statement
    /// (`None`: the statement added it).
    pub origins: Vec<Option<String>>,
    /// For every column of the new version: added, it gets a value other
    /// than NULL in existing rows (see `ColumnSpec::fills_rows`).
    pub fills_rows: Vec<bool>,
}

impl ColumnStep {
    /// The step of an ALTER whose `ops` made `columns` from columns whose
    /// names were `origins` (see `apply::Altered`): an added column fills
    /// rows when a clause of the statement that declares it says so.
    pub fn of_alter(columns: &[ColumnDef], origins: &[Option<String>], ops: &[AlterOp]) -> Self {
        let fills = |name: &str| {
            fn declares(op: &AlterOp, name: &str) -> bool {
                match op {
                    AlterOp::Add(spec, _) | AlterOp::Change { column: spec, .. } => {
                        spec.name.eq_ignore_ascii_case(name) && spec.fills_rows
                    }
                    AlterOp::IfColumn { op, .. } => declares(op, name),
                    _ => false,
                }
            }
            ops.iter().any(|op| declares(op, name))
        };
        ColumnStep {
            origins: origins.to_vec(),
            fills_rows: columns
                .iter()
                .zip(origins)
                .map(|(c, o)| o.is_none() && fills(&c.name))
                .collect(),
        }
    }
}

/// Why a statement's effect on existing rows cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RereadReason {
    /// The columns that identify a row changed (a new primary key, or a
    /// unique key that now keys the table).
    RowKey {
        before: Vec<String>,
        after: Vec<String>,
    },
    /// An added column has a value in existing rows: a default, a generated
    /// expression, AUTO_INCREMENT, or the implicit default of NOT NULL.
    FilledColumn { column: String },
    /// A type change outside the allow-list (the server converts values).
    Type {
        column: String,
        from: String,
        to: String,
    },
    /// NULL to NOT NULL: the server turns NULLs into the type's default.
    NotNull { column: String },
    /// Another character set (CONVERT TO CHARACTER SET, or per column).
    Charset {
        column: String,
        from: String,
        to: String,
    },
    /// ENUM or SET labels changed: stored values are label numbers.
    Labels { column: String },
    /// RENAME TABLE moved the table while its rows were still being read
    /// under its old name (`db.table`).
    Renamed { from: String },
}

impl fmt::Display for RereadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RereadReason::RowKey { before, after } => write!(
                f,
                "the row key changed from ({}) to ({})",
                before.join(", "),
                after.join(", ")
            ),
            RereadReason::FilledColumn { column } => {
                write!(f, "added column `{column}` has values in existing rows")
            }
            RereadReason::Type { column, from, to } => {
                write!(f, "column `{column}` converted from {from} to {to}")
            }
            RereadReason::NotNull { column } => {
                write!(f, "column `{column}` became NOT NULL")
            }
            RereadReason::Charset { column, from, to } => {
                write!(f, "column `{column}` converted from {from} to {to}")
            }
            RereadReason::Labels { column } => {
                write!(f, "the labels of column `{column}` changed")
            }
            RereadReason::Renamed { from } => {
                write!(f, "renamed from {from} while its rows were being read")
            }
        }
    }
}

/// Whether the step from `before` to `after` (one statement, `step`) may
/// change a value that existing rows show, or the key that identifies them:
/// `None` for exactly the allow-list (ADD COLUMN nullable without a value,
/// DROP and RENAME COLUMN, integer widening, VARCHAR/VARBINARY/TEXT/BLOB
/// widening in the same charset, DECIMAL(p,s) to DECIMAL(p+k,s), NOT NULL to
/// NULL, and changes to indexes, comments, options and partitions, which
/// leave the shape as it was).
pub fn needs_reread(
    before: &TableSchema,
    after: &TableSchema,
    step: &ColumnStep,
) -> Option<RereadReason> {
    let origin = |i: usize| -> Option<&ColumnDef> {
        let name = step.origins.get(i)?.as_deref()?;
        before
            .columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    };
    for (i, column) in after.columns.iter().enumerate() {
        let Some(old) = origin(i) else {
            let filled = step.fills_rows.get(i).copied().unwrap_or(true);
            if filled || !column.nullable {
                return Some(RereadReason::FilledColumn {
                    column: column.name.clone(),
                });
            }
            continue;
        };
        if let Some(reason) = column_change(old, column) {
            return Some(reason);
        }
    }
    // The key before, under the names the statement gave its columns.
    let renamed = |name: &String| -> String {
        after
            .columns
            .iter()
            .enumerate()
            .find(|(i, _)| {
                step.origins
                    .get(*i)
                    .and_then(|o| o.as_deref())
                    .is_some_and(|o| o.eq_ignore_ascii_case(name))
            })
            .map_or_else(|| format!("{name} (dropped)"), |(_, c)| c.name.clone())
    };
    let key_before: Vec<String> = before.fold_key().iter().map(renamed).collect();
    let key_after = after.fold_key();
    // The same columns in another order (`DROP PRIMARY KEY, ADD PRIMARY KEY
    // (b, a)` of a key (a, b)) tell the same rows apart: the rows stay, and
    // only the current-state table's sort order changes, which its next
    // fold rebuilds by itself.
    let same = key_before.len() == key_after.len()
        && key_before
            .iter()
            .all(|a| key_after.iter().any(|b| a.eq_ignore_ascii_case(b)));
    if !same {
        return Some(RereadReason::RowKey {
            before: before.fold_key(),
            after: key_after,
        });
    }
    None
}

/// The change of one column that the statement kept (maybe renamed).
fn column_change(old: &ColumnDef, new: &ColumnDef) -> Option<RereadReason> {
    if old.nullable && !new.nullable {
        return Some(RereadReason::NotNull {
            column: new.name.clone(),
        });
    }
    // The same type in the same charset (a MODIFY that changed only the
    // collation, the default or a comment, or restated the column): the
    // server converts no value, whatever sluice derived from the text.
    if type_params(&old.mysql_type) == type_params(&new.mysql_type) && charset(old) == charset(new)
    {
        return None;
    }
    let type_change = || RereadReason::Type {
        column: new.name.clone(),
        from: old.mysql_type.clone(),
        to: new.mysql_type.clone(),
    };
    match (&old.kind, &new.kind) {
        (
            ColumnKind::Int {
                bytes: b1,
                unsigned: u1,
            },
            ColumnKind::Int {
                bytes: b2,
                unsigned: u2,
            },
        ) => {
            // Every value of the old type fits the new one: as wide and of
            // the same sign, or unsigned into a wider signed type.
            let fits = (u1 == u2 && b2 >= b1) || (*u1 && !*u2 && b2 > b1);
            (!fits).then(type_change)
        }
        (
            ColumnKind::Decimal {
                precision: p1,
                scale: s1,
            },
            ColumnKind::Decimal {
                precision: p2,
                scale: s2,
            },
        ) => {
            let sign_kept = !unsigned(&new.mysql_type) || unsigned(&old.mysql_type);
            (!(s1 == s2 && p2 >= p1 && sign_kept)).then(type_change)
        }
        (ColumnKind::Text { .. }, ColumnKind::Text { .. }) => {
            let (from, to) = (charset(old), charset(new));
            if from != to {
                return Some(RereadReason::Charset {
                    column: new.name.clone(),
                    from,
                    to,
                });
            }
            (!string_widening(&old.mysql_type, &new.mysql_type, false)).then(type_change)
        }
        (ColumnKind::Binary { .. }, ColumnKind::Binary { .. }) => {
            (!string_widening(&old.mysql_type, &new.mysql_type, true)).then(type_change)
        }
        (ColumnKind::Enum { labels: a }, ColumnKind::Enum { labels: b })
        | (ColumnKind::Set { labels: a }, ColumnKind::Set { labels: b }) => {
            (a != b).then(|| RereadReason::Labels {
                column: new.name.clone(),
            })
        }
        (a, b) if a == b => {
            // Same kind: FLOAT(7,2) rounds where FLOAT does not, a
            // geometry subtype refuses others; only the same type text
            // keeps every value.
            (type_params(&old.mysql_type) != type_params(&new.mysql_type)).then(type_change)
        }
        _ => Some(type_change()),
    }
}

fn unsigned(mysql_type: &str) -> bool {
    mysql_type.to_ascii_lowercase().contains("unsigned")
}

/// utf8 and utf8mb3 are one charset; a column without one is binary.
fn charset(c: &ColumnDef) -> String {
    match c.charset.as_deref().map(str::to_ascii_lowercase) {
        Some(cs) if cs == "utf8" => "utf8mb3".into(),
        Some(cs) => cs,
        None => "binary".into(),
    }
}

/// The type text with its parameters and attributes, lowercase, spaces
/// collapsed.
fn type_params(mysql_type: &str) -> String {
    mysql_type
        .to_ascii_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The base name (`varchar`) and the length in parentheses, if any.
fn name_and_length(mysql_type: &str) -> (String, Option<u64>) {
    let t = mysql_type.to_ascii_lowercase();
    let t = t.trim();
    match t.split_once('(') {
        Some((name, rest)) => {
            let len = rest
                .split([')', ','])
                .next()
                .and_then(|n| n.trim().parse().ok());
            (name.trim().to_string(), len)
        }
        None => (
            t.split_whitespace().next().unwrap_or_default().to_string(),
            None,
        ),
    }
}

/// Whether every value of a `from` column fits a `to` column unchanged:
/// VARCHAR(n) (VARBINARY(n)) to a longer one or to a TEXT (BLOB) type that
/// holds n characters of four bytes, and a TEXT (BLOB) type to a larger one.
/// CHAR and BINARY are never widened here: SELECT strips CHAR's trailing
/// spaces and pads BINARY, so their values change with the type.
fn string_widening(from: &str, to: &str, binary: bool) -> bool {
    let (f, fl) = name_and_length(from);
    let (t, tl) = name_and_length(to);
    let var = if binary { "varbinary" } else { "varchar" };
    let lobs: [&str; 4] = if binary {
        ["tinyblob", "blob", "mediumblob", "longblob"]
    } else {
        ["tinytext", "text", "mediumtext", "longtext"]
    };
    // Bytes each holds at most.
    const LOB_BYTES: [u64; 4] = [255, 65_535, 16_777_215, 4_294_967_295];
    // `TEXT(n)` is the smallest TEXT type that holds n characters: the
    // type, not n, is its limit.
    let lob = |name: &str| lobs.iter().position(|l| *l == name).map(|i| LOB_BYTES[i]);
    let max_bytes = if binary { 1 } else { 4 };
    match (f.as_str(), t.as_str()) {
        (a, b) if a == var && b == var => matches!((fl, tl), (Some(x), Some(y)) if y >= x),
        (a, b) if a == var => match (fl, lob(b)) {
            (Some(n), Some(cap)) => n * max_bytes <= cap,
            _ => false,
        },
        (a, b) => match (lob(a), lob(b)) {
            (Some(x), Some(y)) => y >= x,
            _ => false,
        },
    }
}

#[cfg(test)]
#[path = "reread_tests.rs"]
mod tests;
