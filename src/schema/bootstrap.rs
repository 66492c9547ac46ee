//! Reads the captured tables' shapes from `information_schema` at start.

use std::collections::BTreeMap;

use mysql_async::prelude::Queryable;

use super::{ColumnDef, TableSchema, UniqueKey};
use crate::config::TableFilter;
use crate::error::{Error, Result};
use crate::types::ColumnKind;

/// Every base table and its collation. Read apart from the columns and
/// matched here: MariaDB joins two `information_schema` views by reading one
/// for every row of the other, which took 30 s for 10,000 tables where the
/// two queries take 0.15 s.
const TABLES_SQL: &str = "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION \
     FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' \
     AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')";

const COLUMNS_SQL: &str = "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, \
     IS_NULLABLE, CHARACTER_SET_NAME FROM information_schema.COLUMNS \
     WHERE TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') {only} \
     ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION";

type ColumnRow = (String, String, String, String, String, Option<String>);

/// The primary and unique keys. `COLUMNS.COLUMN_KEY` cannot tell them
/// apart: MariaDB says `PRI` for the columns of the unique key it uses in
/// place of a missing primary key. A table's keys are listed in the
/// server's key order (its `SHOW INDEX` order), which decides that key.
const KEYS_SQL: &str = "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, \
     SUB_PART, INDEX_TYPE FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 \
     AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') {only}";

type KeyRow = (
    String,
    String,
    String,
    u64,
    Option<String>,
    Option<u64>,
    String,
);

/// One index of [`KEYS_SQL`]: its parts as `(seq, column, prefix)`.
struct IndexRows {
    name: String,
    parts: Vec<(u64, Option<String>, Option<u64>)>,
    hash: bool,
}

/// Marks each table's primary key columns with their places in the key,
/// and records its unique keys.
fn add_keys(tables: &mut BTreeMap<(String, String), TableSchema>, rows: Vec<KeyRow>) {
    let mut indexes: BTreeMap<(String, String), Vec<IndexRows>> = BTreeMap::new();
    for (db, table, index, seq, column, sub_part, index_type) in rows {
        let list = indexes.entry((db, table)).or_default();
        let at = match list.iter().position(|i| i.name == index) {
            Some(at) => at,
            None => {
                list.push(IndexRows {
                    name: index,
                    parts: Vec::new(),
                    hash: index_type.eq_ignore_ascii_case("HASH"),
                });
                list.len() - 1
            }
        };
        list[at].parts.push((seq, column, sub_part));
    }
    for (key, list) in indexes {
        let Some(table) = tables.get_mut(&key) else {
            continue;
        };
        for mut index in list {
            index.parts.sort_by_key(|p| p.0);
            // A MySQL functional key part has no column: no row key.
            let Some(columns) = index
                .parts
                .iter()
                .map(|p| p.1.clone())
                .collect::<Option<Vec<String>>>()
            else {
                continue;
            };
            if index.name == "PRIMARY" {
                // `columns` is in SEQ_IN_INDEX order: the key's own order.
                for c in table.columns.iter_mut() {
                    let at = columns.iter().position(|k| k.eq_ignore_ascii_case(&c.name));
                    c.primary_key = at.is_some();
                    c.key_position = at.map(|at| at as u32 + 1);
                }
                continue;
            }
            table.unique_keys.push(UniqueKey {
                name: index.name,
                columns,
                prefix: index.parts.iter().any(|p| p.2.is_some()),
                hash: index.hash,
            });
        }
        super::sort_unique_keys(&table.columns, &mut table.unique_keys);
    }
}

/// MariaDB prints a compressed column's type as `varchar(10)
/// /*M!100301 COMPRESSED*/`; compression changes no value, and the history
/// records the type alone, as a CREATE TABLE gives it. The comment ends the
/// text, after the closing parenthesis of any ENUM labels.
fn without_compression_comment(column_type: String) -> String {
    match column_type.rfind("/*M!") {
        Some(i) if column_type.ends_with(" COMPRESSED*/") => {
            column_type[..i].trim_end().to_string()
        }
        _ => column_type,
    }
}

/// The most tables [`read_shapes_of`] names in its queries.
const MAX_NAMED_TABLES: usize = 4096;

/// The captured base tables, each with its collation: one cheap query
/// (0.07 s for 10,000 tables), where their shapes cost the server a table
/// open each ([`read_shapes_of`]).
pub type TableNames = BTreeMap<(String, String), Option<String>>;

pub async fn table_names(conn: &mut mysql_async::Conn, filter: &TableFilter) -> Result<TableNames> {
    let base: Vec<(String, String, Option<String>)> = conn
        .query(TABLES_SQL)
        .await
        .map_err(|e| Error::Preflight(format!("reading information_schema.TABLES: {e}")))?;
    Ok(base
        .into_iter()
        .filter(|(db, table, _)| filter.captures(db, table))
        .map(|(db, table, collation)| ((db, table), collation))
        .collect())
}

/// All captured tables' current shapes, keyed by `(db, table)`, each as version 1.
pub async fn read_tables(
    conn: &mut mysql_async::Conn,
    filter: &TableFilter,
) -> Result<BTreeMap<(String, String), TableSchema>> {
    let names = table_names(conn, filter).await?;
    read_shapes_of(conn, &names, false).await
}

/// The shapes of the tables `names` lists (from [`table_names`]); with
/// `only_these`, the server reads only theirs. Reading every table's
/// indexes costs the server a table open each: 1.1 s for 10,000 tables,
/// which a start whose history knows them all need not pay.
pub async fn read_shapes_of(
    conn: &mut mysql_async::Conn,
    names: &TableNames,
    only_these: bool,
) -> Result<BTreeMap<(String, String), TableSchema>> {
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    // A statement takes at most 65,535 parameters: past this many tables,
    // all are read and the others left out here.
    let (only, params) = match only_these && names.len() <= MAX_NAMED_TABLES {
        true => {
            let pairs = vec!["(?, ?)"; names.len()].join(", ");
            let params: Vec<mysql_async::Value> = names
                .keys()
                .flat_map(|(db, table)| [db.as_str().into(), table.as_str().into()])
                .collect();
            (
                format!("AND (TABLE_SCHEMA, TABLE_NAME) IN ({pairs})"),
                params,
            )
        }
        false => (String::new(), Vec::new()),
    };
    let rows: Vec<ColumnRow> = conn
        .exec(COLUMNS_SQL.replace("{only}", &only), params.clone())
        .await
        .map_err(|e| Error::Preflight(format!("reading information_schema.COLUMNS: {e}")))?;
    let mut tables: BTreeMap<(String, String), TableSchema> = BTreeMap::new();
    for (db, table, name, column_type, nullable, charset) in rows {
        // Views, and tables created between the two queries, are left out.
        let Some(collation) = names.get(&(db.clone(), table.clone())) else {
            continue;
        };
        let column_type = without_compression_comment(column_type);
        let column = ColumnDef::new(name, column_type, charset, nullable == "YES", false).map_err(
            |message| Error::Schema {
                table: format!("{db}.{table}"),
                message,
            },
        )?;
        tables
            .entry((db.clone(), table.clone()))
            .or_insert_with(|| TableSchema {
                database: db,
                name: table,
                version: 1,
                columns: Vec::new(),
                charset: collation.as_deref().map(super::ddl::charset_of_collation),
                unique_keys: Vec::new(),
            })
            .columns
            .push(column);
    }
    let keys: Vec<KeyRow> = conn
        .exec(KEYS_SQL.replace("{only}", &only), params)
        .await
        .map_err(|e| Error::Preflight(format!("reading information_schema.STATISTICS: {e}")))?;
    add_keys(&mut tables, keys);
    warn_about_lost_labels(conn, &tables).await;
    Ok(tables)
}

/// ENUM/SET labels outside the Basic Multilingual Plane (emoji) read as `?`
/// from `information_schema`: `COLUMNS.COLUMN_TYPE` is utf8mb3 on MariaDB,
/// and SHOW CREATE TABLE converts labels to utf8mb3 too (checked on MariaDB
/// 10.11). The exact labels reach sluice only through the TABLE_MAP's FULL
/// metadata, which the rows decoder prefers (`schema::plan::TablePlan`).
/// Without it a `?` label cannot be told from a lost character: say so,
/// with the fix, rather than write `?` into the lake unannounced.
async fn warn_about_lost_labels(
    conn: &mut mysql_async::Conn,
    tables: &BTreeMap<(String, String), TableSchema>,
) {
    let suspects: Vec<String> = tables
        .values()
        .flat_map(|t| {
            t.columns
                .iter()
                .filter(|c| matches!(&c.kind, ColumnKind::Enum { labels } | ColumnKind::Set { labels } if labels.iter().any(|l| l.contains('?'))))
                .map(move |c| format!("{}.{}", t.qualified_name(), c.name))
        })
        .collect();
    if suspects.is_empty() {
        return;
    }
    let metadata: Option<String> = conn
        .query_first("SELECT @@binlog_row_metadata")
        .await
        .ok()
        .flatten();
    if metadata.is_some_and(|m| m.eq_ignore_ascii_case("FULL")) {
        return;
    }
    tracing::warn!(
        "ENUM/SET labels with `?` in {}: information_schema shows every character outside the \
         Basic Multilingual Plane (e.g. an emoji) as `?`, so such labels would be written as `?`; \
         set binlog_row_metadata=FULL on the server so sluice reads the exact labels from the binlog",
        suspects.join(", ")
    );
}

/// Each database's default character set (`information_schema.SCHEMATA`).
pub async fn database_charsets(conn: &mut mysql_async::Conn) -> Result<BTreeMap<String, String>> {
    let rows: Vec<(String, String)> = conn
        .query("SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA")
        .await
        .map_err(|e| Error::Preflight(format!("reading information_schema.SCHEMATA: {e}")))?;
    Ok(rows.into_iter().collect())
}

/// The server's default character set, for databases created without one.
pub async fn server_charset(conn: &mut mysql_async::Conn) -> Result<String> {
    let cs: Option<String> = conn
        .query_first("SELECT @@character_set_server")
        .await
        .map_err(|e| Error::Preflight(format!("reading @@character_set_server: {e}")))?;
    Ok(cs.unwrap_or_else(|| "utf8mb4".into()))
}

/// The table names, database charsets and server charset a start needs;
/// the shapes of the tables its history does not know come after
/// ([`read_shapes_of`]).
pub async fn read_names(
    conn: &mut mysql_async::Conn,
    filter: &TableFilter,
) -> Result<(TableNames, BTreeMap<String, String>, String)> {
    Ok((
        table_names(conn, filter).await?,
        database_charsets(conn).await?,
        server_charset(conn).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: &str, seq: u64, column: &str) -> KeyRow {
        (
            "shop".into(),
            "t".into(),
            index.into(),
            seq,
            Some(column.into()),
            None,
            "BTREE".into(),
        )
    }

    /// `STATISTICS.SEQ_IN_INDEX` gives the primary key's order, whatever
    /// order the rows come in: `PRIMARY KEY (b, a)` keys by b first.
    #[test]
    fn the_primary_key_is_read_in_its_own_order() {
        let columns = ["a", "b", "v"]
            .iter()
            .map(|n| ColumnDef::new(*n, "int", None, false, false).unwrap())
            .collect();
        let table = TableSchema {
            database: "shop".into(),
            name: "t".into(),
            version: 1,
            columns,
            charset: None,
            unique_keys: Vec::new(),
        };
        let mut tables = BTreeMap::from([(("shop".to_string(), "t".to_string()), table)]);
        add_keys(
            &mut tables,
            vec![
                row("PRIMARY", 2, "a"),
                row("u", 1, "v"),
                row("PRIMARY", 1, "b"),
            ],
        );
        let t = &tables[&("shop".to_string(), "t".to_string())];
        let places: Vec<(bool, Option<u32>)> = t
            .columns
            .iter()
            .map(|c| (c.primary_key, c.key_position))
            .collect();
        assert_eq!(places, [(true, Some(2)), (true, Some(1)), (false, None)]);
        assert_eq!(t.fold_key(), ["b", "a"]);
        assert_eq!(t.unique_keys.len(), 1);
    }
}
