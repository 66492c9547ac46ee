//! Snapshot keys: which key a table is read along ([`key_columns`]), how
//! the reader orders by it, and whether a read may go on after a key of an
//! earlier definition (after a DDL, or resumed after a stop).

use std::collections::HashMap;

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

/// The columns of unique indexes, a table's indexes together, each in key
/// order, the primary key first; `{where}` narrows it to some tables.
const INDEX_COLUMNS: &str = "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, SUB_PART \
     FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 AND {where} \
     ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX";

/// What the key needs of every column of the same tables.
const COLUMN_TYPES: &str =
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, CAST(DATA_TYPE AS BINARY), \
     IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS WHERE {where}";

/// Database, table, index name, column, prefix length: one column of a
/// unique index.
type IndexColumn = (String, String, String, String, Option<u64>);
/// Database, table, column, data type, IS_NULLABLE, charset, collation.
type ColumnType = (
    String,
    String,
    String,
    Option<Vec<u8>>,
    Option<String>,
    Option<String>,
    Option<String>,
);
/// One column of a unique index with its column's row of COLUMNS, if the
/// view shows it.
type KeyPart = (IndexColumn, Option<ColumnType>);

/// The unique indexes' columns of the tables `filter` (a condition on
/// `TABLE_SCHEMA` and `TABLE_NAME`) names, each with its column's type.
/// Two queries joined here: MariaDB joins two `information_schema` views by
/// reading one for every row of the other, which took 12.8 s for 10,000
/// tables where the two queries take 0.15 s. A column the COLUMNS view does
/// not show (the table changed between the two) makes its index unusable.
async fn key_parts(
    conn: &mut Conn,
    filter: &str,
    params: Vec<mysql_async::Value>,
) -> std::result::Result<Vec<KeyPart>, mysql_async::Error> {
    let indexes: Vec<IndexColumn> = conn
        .exec(INDEX_COLUMNS.replace("{where}", filter), params.clone())
        .await?;
    if indexes.is_empty() {
        return Ok(Vec::new());
    }
    let columns: Vec<ColumnType> = conn
        .exec(COLUMN_TYPES.replace("{where}", filter), params)
        .await?;
    // Column names compare without case, as the server compares them.
    let mut types: HashMap<(String, String, String), ColumnType> = HashMap::new();
    for c in columns {
        types.insert((c.0.clone(), c.1.clone(), c.2.to_lowercase()), c);
    }
    Ok(indexes
        .into_iter()
        .map(|i| {
            // A column may be in several indexes.
            let t = types.get(&(i.0.clone(), i.1.clone(), i.3.to_lowercase()));
            (i, t.cloned())
        })
        .collect())
}

/// The primary key, else the first unique key whose columns are all NOT
/// NULL; `None` when the table has neither.
pub(super) async fn key_columns(
    conn: &mut Conn,
    db: &str,
    table: &str,
) -> Result<Option<Vec<KeyColumn>>> {
    let parts = key_parts(
        conn,
        "TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        vec![db.into(), table.into()],
    )
    .await
    .map_err(|e| Error::Connection(format!("snapshot key of {db}.{table}: {e}")))?;
    Ok(choose_keys(parts)
        .remove(&(db.to_string(), table.to_string()))
        .flatten())
}

/// The key of every table of `databases` that has a unique index, in two
/// queries (a thousand tables' keys asked one by one cost seconds): as
/// [`key_columns`] finds it, `None` where no unique index qualifies. A
/// table without any unique index is not in the map.
pub(super) async fn all_key_columns(
    conn: &mut Conn,
    databases: &[&str],
) -> Result<HashMap<(String, String), Option<Vec<KeyColumn>>>> {
    if databases.is_empty() {
        return Ok(HashMap::new());
    }
    let marks = vec!["?"; databases.len()].join(", ");
    let params: Vec<mysql_async::Value> = databases
        .iter()
        .map(|d| mysql_async::Value::from(*d))
        .collect();
    let parts = key_parts(conn, &format!("TABLE_SCHEMA IN ({marks})"), params)
        .await
        .map_err(|e| Error::Connection(format!("snapshot keys: {e}")))?;
    Ok(choose_keys(parts))
}

/// A unique index: usable as a snapshot key when its columns are all NOT
/// NULL and none is indexed by a prefix.
struct UniqueIndex {
    name: String,
    columns: Vec<KeyColumn>,
    usable: bool,
}

/// Each table's key from its unique indexes' columns (as [`INDEX_COLUMNS`]
/// orders them): the first index whose columns are all NOT NULL and none
/// indexed by a prefix.
fn choose_keys(parts: Vec<KeyPart>) -> HashMap<(String, String), Option<Vec<KeyColumn>>> {
    // Per table, its unique indexes in order.
    let mut tables: HashMap<(String, String), Vec<UniqueIndex>> = HashMap::new();
    for ((db, table, index, column, sub_part), facts) in parts {
        let (data_type, nullable, charset, collation) = match facts {
            Some((_, _, _, d, n, cs, co)) => (d, n, cs, co),
            None => (None, None, None, None),
        };
        let indexes = tables.entry((db, table)).or_default();
        if indexes.last().is_none_or(|i| i.name != index) {
            indexes.push(UniqueIndex {
                name: index,
                columns: Vec::new(),
                usable: true,
            });
        }
        let Some(entry) = indexes.last_mut() else {
            continue;
        };
        entry.usable &= nullable.as_deref() == Some("NO") && sub_part.is_none();
        let data_type =
            String::from_utf8_lossy(&data_type.unwrap_or_default()).to_ascii_lowercase();
        let numeric = matches!(data_type.as_str(), "enum" | "set" | "bit");
        entry.columns.push(KeyColumn {
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
    tables
        .into_iter()
        .map(|(name, indexes)| {
            let key = indexes.into_iter().find(|i| i.usable).map(|i| i.columns);
            (name, key)
        })
        .collect()
}
