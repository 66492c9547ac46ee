//! Reads the captured tables' shapes from `information_schema` at start.

use std::collections::BTreeMap;
use std::sync::Arc;

use mysql_async::prelude::Queryable;

use super::{Charset, ColumnDef, ColumnKind, TableSchema};
use crate::config::TableFilter;
use crate::error::{Error, Result};

const COLUMNS_SQL: &str = "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, \
     c.COLUMN_TYPE, c.IS_NULLABLE, c.COLUMN_KEY, c.CHARACTER_SET_NAME, \
     c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.DATETIME_PRECISION, c.CHARACTER_OCTET_LENGTH \
     FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
     ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
     WHERE t.TABLE_TYPE = 'BASE TABLE' \
     AND c.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') \
     ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION";

type ColumnRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
);

/// All captured tables' current shapes, keyed by `(db, table)`.
pub async fn read_tables(
    conn: &mut mysql_async::Conn,
    filter: &TableFilter,
) -> Result<BTreeMap<(String, String), TableSchema>> {
    let rows: Vec<ColumnRow> = conn
        .query(COLUMNS_SQL)
        .await
        .map_err(|e| Error::Preflight(format!("reading information_schema.COLUMNS: {e}")))?;
    let mut tables: BTreeMap<(String, String), TableSchema> = BTreeMap::new();
    for (
        db,
        table,
        name,
        data_type,
        column_type,
        nullable,
        key,
        charset,
        precision,
        scale,
        fsp,
        octets,
    ) in rows
    {
        if !filter.captures(&db, &table) {
            continue;
        }
        let qualified = format!("{db}.{table}");
        let kind = column_kind(
            &data_type,
            &column_type,
            charset.as_deref(),
            precision,
            scale,
            fsp,
            octets,
        )
        .map_err(|message| Error::Schema {
            table: qualified.clone(),
            message: format!("column `{name}` {column_type}: {message}"),
        })?;
        tables
            .entry((db.clone(), table.clone()))
            .or_insert_with(|| TableSchema {
                database: db,
                name: table,
                version: 1,
                columns: Vec::new(),
            })
            .columns
            .push(ColumnDef {
                name,
                mysql_type: column_type,
                kind,
                nullable: nullable == "YES",
                primary_key: key == "PRI",
            });
    }
    Ok(tables)
}

/// Maps one `information_schema.COLUMNS` row to a [`ColumnKind`].
pub fn column_kind(
    data_type: &str,
    column_type: &str,
    charset: Option<&str>,
    precision: Option<u64>,
    scale: Option<u64>,
    fsp: Option<u64>,
    octets: Option<u64>,
) -> std::result::Result<ColumnKind, String> {
    let unsigned = column_type.contains("unsigned");
    let fsp = fsp.unwrap_or(0) as u8;
    let text = |charset: Option<&str>| -> std::result::Result<ColumnKind, String> {
        match charset {
            None | Some("binary") => Ok(ColumnKind::Binary { pad_to: None }),
            Some(cs) => Charset::from_mysql(cs)
                .map(|charset| ColumnKind::Text { charset })
                .ok_or_else(|| format!("character set {cs} is not supported")),
        }
    };
    Ok(match data_type {
        "tinyint" => ColumnKind::Int { bytes: 1, unsigned },
        "smallint" => ColumnKind::Int { bytes: 2, unsigned },
        "mediumint" => ColumnKind::Int { bytes: 3, unsigned },
        "int" | "integer" => ColumnKind::Int { bytes: 4, unsigned },
        "bigint" => ColumnKind::Int { bytes: 8, unsigned },
        "float" => ColumnKind::Float,
        "double" | "real" => ColumnKind::Double,
        "decimal" | "numeric" => ColumnKind::Decimal {
            precision: precision.ok_or("no precision")? as u8,
            scale: scale.unwrap_or(0) as u8,
        },
        "date" => ColumnKind::Date,
        "datetime" => ColumnKind::DateTime { fsp },
        "timestamp" => ColumnKind::Timestamp { fsp },
        "time" => ColumnKind::Time { fsp },
        "year" => ColumnKind::Year,
        "bit" => ColumnKind::Bit {
            bits: precision.ok_or("no bit width")? as u16,
        },
        "enum" => ColumnKind::Enum {
            labels: Arc::from(parse_labels(column_type)?),
        },
        "set" => ColumnKind::Set {
            labels: Arc::from(parse_labels(column_type)?),
        },
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => text(charset)?,
        "binary" => ColumnKind::Binary {
            pad_to: octets.map(|n| n as usize),
        },
        "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            ColumnKind::Binary { pad_to: None }
        }
        "json" if charset.is_some() => text(charset)?,
        "json" => ColumnKind::Json,
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" | "geomcollection" => ColumnKind::Geometry,
        other => return Err(format!("type {other} is not supported")),
    })
}

/// The labels of `enum('a','b''c')` or `set(...)`, unquoted.
pub fn parse_labels(column_type: &str) -> std::result::Result<Vec<String>, String> {
    let open = column_type.find('(').ok_or("no label list")?;
    let body = &column_type[open + 1..column_type.rfind(')').ok_or("no label list")?];
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let mut label = String::new();
                loop {
                    match chars.next() {
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            label.push('\'');
                        }
                        Some('\'') => break,
                        Some('\\') => match chars.next() {
                            Some(e) => label.push(e),
                            None => return Err("unterminated label".into()),
                        },
                        Some(ch) => label.push(ch),
                        None => return Err("unterminated label".into()),
                    }
                }
                labels.push(label);
            }
            ',' | ' ' => {}
            other => return Err(format!("unexpected `{other}` in label list")),
        }
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_with_quotes_and_commas() {
        assert_eq!(
            parse_labels("enum('a','b''c','d,e')").unwrap(),
            vec!["a", "b'c", "d,e"]
        );
        assert_eq!(parse_labels("set('')").unwrap(), vec![""]);
    }

    #[test]
    fn kinds_from_information_schema() {
        assert_eq!(
            column_kind(
                "bigint",
                "bigint(20) unsigned",
                None,
                Some(20),
                Some(0),
                None,
                None
            ),
            Ok(ColumnKind::Int {
                bytes: 8,
                unsigned: true
            })
        );
        assert_eq!(
            column_kind("binary", "binary(8)", None, None, None, None, Some(8)),
            Ok(ColumnKind::Binary { pad_to: Some(8) })
        );
        assert_eq!(
            column_kind(
                "varchar",
                "varchar(10)",
                Some("latin1"),
                None,
                None,
                None,
                Some(10)
            ),
            Ok(ColumnKind::Text {
                charset: Charset::Legacy(encoding_rs::WINDOWS_1252)
            })
        );
        assert!(column_kind("vector", "vector(3)", None, None, None, None, None).is_err());
    }
}
