//! Snapshot keys: which key a table is read along ([`key_columns`]), how
//! the reader orders by it, and whether a read may go on after a key of an
//! earlier definition (after a DDL, or resumed after a stop).

use mysql_async::prelude::*;
use mysql_async::Conn;

use super::super::{KeyOrder, KeyValue};
use crate::error::{Error, Result};

/// A key column and how its values are read and bound.
#[derive(Debug, Clone)]
pub(super) struct KeyColumn {
    pub name: String,
    /// Charset and collation of a text column: bound bytes are compared in them.
    pub collation: Option<(String, String)>,
    /// ENUM, SET and BIT keys compare by number.
    pub numeric: bool,
    /// DECIMAL(p,s): bound as its text, cast.
    pub decimal: Option<(u8, u8)>,
    /// A binary string: bound as its bytes.
    pub binary: bool,
}

/// Whether a key read after a DDL orders rows as the one the snapshot began
/// with: the same number of columns, compared alike (a renamed key column
/// keeps the order; another column, type class or collation does not).
pub(super) fn same_order(before: Option<&[KeyColumn]>, now: Option<&[KeyColumn]>) -> bool {
    match (before, now) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.collation == y.collation && x.numeric == y.numeric)
        }
        (None, None) => true,
        _ => false,
    }
}

/// How the reader orders by each key column (see [`KeyOrder`]).
pub(super) fn key_orders(key: &[KeyColumn]) -> Vec<KeyOrder> {
    key.iter()
        .map(|c| KeyOrder {
            name: c.name.clone(),
            order: match (&c.collation, c.numeric) {
                (_, true) => "number".into(),
                (Some((charset, collation)), false) => format!("{charset}/{collation}"),
                (None, false) => "value".into(),
            },
        })
        .collect()
}

/// Whether a snapshot saved with key `saved` and last key `after` goes on
/// after it under the key the table has `now`: the same order (a renamed
/// key column keeps it); without a saved key (earlier releases), as many
/// values as key columns.
pub(super) fn resumes_under(
    saved: Option<&[KeyOrder]>,
    now: Option<&[KeyColumn]>,
    after: Option<&[KeyValue]>,
) -> bool {
    let Some(now) = now else {
        return false;
    };
    match saved {
        Some(saved) => {
            let now = key_orders(now);
            saved.len() == now.len() && saved.iter().zip(&now).all(|(a, b)| a.order == b.order)
        }
        None => after.is_some_and(|a| a.len() == now.len()),
    }
}

pub(super) fn key_names(key: Option<&[KeyColumn]>) -> String {
    match key {
        Some(cols) => format!(
            "({})",
            cols.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "no usable key".into(),
    }
}

/// Index name, column, data type, IS_NULLABLE, charset, collation.
type KeyPart = (
    String,
    String,
    Vec<u8>,
    String,
    Option<String>,
    Option<String>,
);

/// The primary key, else the first unique key whose columns are all NOT
/// NULL; `None` when the table has neither.
pub(super) async fn key_columns(
    conn: &mut Conn,
    db: &str,
    table: &str,
) -> Result<Option<Vec<KeyColumn>>> {
    let q = |e: mysql_async::Error| Error::Connection(format!("snapshot key of {db}.{table}: {e}"));
    let rows: Vec<KeyPart> = conn
        .exec(
            "SELECT s.INDEX_NAME, s.COLUMN_NAME, CAST(c.DATA_TYPE AS BINARY), c.IS_NULLABLE, c.CHARACTER_SET_NAME, c.COLLATION_NAME \
             FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c \
               ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME \
             WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ? AND s.NON_UNIQUE = 0 AND s.SUB_PART IS NULL \
             ORDER BY s.INDEX_NAME = 'PRIMARY' DESC, s.INDEX_NAME, s.SEQ_IN_INDEX",
            (db, table),
        )
        .await
        .map_err(q)?;
    // Keys with a prefix part (SUB_PART) are left out above, so an index
    // counts only when all its columns came through: compare with the
    // index's column count.
    let counts: Vec<(String, u64)> = conn
        .exec(
            "SELECT INDEX_NAME, COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME",
            (db, table),
        )
        .await
        .map_err(q)?;
    let mut indexes: Vec<(String, Vec<KeyColumn>, bool)> = Vec::new();
    for (index, column, data_type, nullable, charset, collation) in rows {
        if indexes.last().is_none_or(|(i, _, _)| *i != index) {
            indexes.push((index.clone(), Vec::new(), true));
        }
        let entry = indexes.last_mut().expect("pushed above");
        entry.2 &= nullable == "NO";
        let data_type = String::from_utf8_lossy(&data_type).to_ascii_lowercase();
        let numeric = matches!(data_type.as_str(), "enum" | "set" | "bit");
        entry.1.push(KeyColumn {
            name: column,
            collation: match (charset, collation) {
                (Some(cs), Some(co)) if !numeric => Some((cs, co)),
                _ => None,
            },
            numeric,
            decimal: None,
            binary: false,
        });
    }
    let key = indexes.into_iter().find(|(index, cols, not_null)| {
        *not_null
            && counts
                .iter()
                .any(|(i, n)| i == index && *n as usize == cols.len())
    });
    Ok(key.map(|(_, cols, _)| cols))
}
