//! Table shapes: what each captured table's columns are at each point of the
//! stream. `bootstrap` reads `information_schema`, `ddl` parses statements,
//! `apply` changes shapes, `history` keeps every version (SQLite + the lake),
//! `tracker` follows the stream, `plan` checks a shape against a TABLE_MAP.
//! What a single column is (its kind, charset, Arrow type, binlog layout)
//! is `crate::types`, which `decode` shares.

pub mod apply;
pub mod bootstrap;
pub mod ddl;
pub mod history;
pub mod lake_names;
pub mod plan;
pub mod policy;
pub mod reread;
pub mod tracker;

use arrow::datatypes::{Field, Fields};

use crate::types::column::kind_from_type;
use crate::types::ColumnKind;

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    /// The MySQL column type, e.g. `decimal(10,2) unsigned` or `enum('a','b')`.
    pub mysql_type: String,
    /// The character set of a textual column (`None` for other types).
    pub charset: Option<String>,
    pub kind: ColumnKind,
    pub nullable: bool,
    pub primary_key: bool,
    /// The column's place in the primary key, 1-based, when `primary_key`:
    /// the server orders rows by the key's columns in this order, not in
    /// table order (`PRIMARY KEY (b, a)`). `None` outside the key, and for
    /// key columns of histories written before sluice recorded the order
    /// (their keys fold in table order, as they did).
    pub key_position: Option<u32>,
    /// The column's name in the changelog's Parquet files and Delta schema
    /// ([`lake_names`]); empty until the schema history assigns it.
    pub lake_name: String,
    /// The `[[columns]]` policy in force for this version of the table
    /// ([`policy`]); recorded with the version, like the lake name.
    pub policy: Option<policy::PolicyAction>,
}

impl ColumnDef {
    /// Derives the [`ColumnKind`] from the type text and the charset.
    pub fn new(
        name: impl Into<String>,
        mysql_type: impl Into<String>,
        charset: Option<String>,
        nullable: bool,
        primary_key: bool,
    ) -> Result<Self, String> {
        let name = name.into();
        let mysql_type = mysql_type.into();
        let kind = kind_from_type(&mysql_type, charset.as_deref())
            .map_err(|e| format!("column `{name}` {mysql_type}: {e}"))?;
        Ok(ColumnDef {
            name,
            mysql_type,
            charset,
            kind,
            nullable,
            primary_key,
            key_position: None,
            lake_name: String::new(),
            policy: None,
        })
    }

    /// The lake name, or the source name for a shape the history has not
    /// named (a shape of a unit test, a `schema resync` statement).
    pub fn lake(&self) -> &str {
        if self.lake_name.is_empty() {
            &self.name
        } else {
            &self.lake_name
        }
    }
}

/// One captured table's shape at one point of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    pub database: String,
    pub name: String,
    pub version: u32,
    pub columns: Vec<ColumnDef>,
    /// The table's default character set (for columns added later).
    pub charset: Option<String>,
    /// The table's UNIQUE indexes (the primary key aside), in the server's
    /// key order ([`sort_unique_keys`]).
    pub unique_keys: Vec<UniqueKey>,
}

/// A UNIQUE index of a table, other than the primary key. `primary_key` on
/// [`ColumnDef`] marks a real `PRIMARY KEY` only; a unique key that the
/// server uses in place of a missing one is found by
/// [`TableSchema::clustering_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// The index name, as `DROP INDEX` names it.
    pub name: String,
    /// Its columns, in index order.
    pub columns: Vec<String>,
    /// Some column is indexed by a prefix only (`UNIQUE (name(10))`).
    pub prefix: bool,
    /// MariaDB's long unique key (`USING HASH`): a BLOB/TEXT column without
    /// a prefix, a key longer than InnoDB's 3072 bytes, or `USING HASH`.
    pub hash: bool,
}

/// Puts unique keys in the order the server keeps them (MariaDB's
/// `sort_keys` in sql_table.cc): long hash keys last, before them the keys
/// with a nullable column, before those the prefix keys; otherwise in the
/// order they were made. The order decides which key
/// [`TableSchema::clustering_key`] picks, and it is the order
/// `information_schema.STATISTICS` lists them in.
pub fn sort_unique_keys(columns: &[ColumnDef], keys: &mut [UniqueKey]) {
    keys.sort_by_key(|k| (k.hash, has_nullable_column(columns, k), k.prefix));
}

/// The place after the primary key's last, for a column that joins the
/// end of the key (a system-versioned table's row end): `None` when some key
/// column's place is not recorded, so that key stays in table order.
pub fn next_key_position(key: impl IntoIterator<Item = Option<u32>>) -> Option<u32> {
    key.into_iter()
        .try_fold(0, |last, place| place.map(|p| last.max(p)))
        .map(|last| last + 1)
}

fn has_nullable_column(columns: &[ColumnDef], key: &UniqueKey) -> bool {
    key.columns.iter().any(|name| {
        columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .is_none_or(|c| c.nullable)
    })
}

impl TableSchema {
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    /// The table's columns as Arrow fields of the changelog's files, under
    /// their lake names and in their lake types (used both top-level and
    /// inside `_before`). The column policies are part of it: an excluded
    /// column has no field, a hashed one is text, a masked one nullable, so
    /// that every writer of the table's files agrees with its Delta schema.
    pub fn column_fields(&self, force_nullable: bool) -> Fields {
        self.columns
            .iter()
            .filter(|c| c.in_lake())
            .map(|c| {
                let masked = c.policy == Some(policy::PolicyAction::Mask);
                Field::new(
                    c.lake(),
                    c.lake_type(),
                    force_nullable || c.nullable || masked,
                )
            })
            .collect()
    }

    /// The unique key InnoDB clusters a table without a primary key by, and
    /// that MariaDB then shows as the primary key (`COLUMN_KEY = 'PRI'`, the
    /// TABLE_MAP's primary key): the first in key order whose columns are
    /// all NOT NULL, none indexed by a prefix, and that is no long hash key.
    /// A nullable unique key allows any number of rows whose key is NULL, so
    /// it does not identify a row. `None` when the table has a primary key.
    pub fn clustering_key(&self) -> Option<&UniqueKey> {
        if self.columns.iter().any(|c| c.primary_key) {
            return None;
        }
        self.unique_keys
            .iter()
            .find(|k| !k.hash && !k.prefix && !has_nullable_column(&self.columns, k))
    }

    /// The primary key's columns in key order: the order of their
    /// [`key_position`](ColumnDef::key_position)s when every key column has
    /// one, else (a history written before the order was recorded) in table
    /// order. Empty when the table has no primary key.
    pub fn primary_key(&self) -> Vec<&ColumnDef> {
        let mut key: Vec<&ColumnDef> = self.columns.iter().filter(|c| c.primary_key).collect();
        if key.iter().all(|c| c.key_position.is_some()) {
            // Stable: equal places (which no statement makes) keep table order.
            key.sort_by_key(|c| c.key_position);
        }
        key
    }

    /// The columns that identify a row, as the current-state tables fold
    /// by them: the [`primary_key`](Self::primary_key)'s in key order, else
    /// those of the [`clustering_key`](Self::clustering_key) in index order,
    /// else none. Both are the orders the server keeps rows in.
    pub fn fold_key(&self) -> Vec<String> {
        let pk: Vec<String> = self
            .primary_key()
            .into_iter()
            .map(|c| c.name.clone())
            .collect();
        if !pk.is_empty() {
            return pk;
        }
        let Some(key) = self.clustering_key() else {
            return Vec::new();
        };
        key.columns
            .iter()
            .filter_map(|name| {
                self.columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name))
                    .map(|c| c.name.clone())
            })
            .collect()
    }

    /// A one-line description for error messages: `id int, name varchar(10)`.
    pub fn describe(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.mysql_type))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
