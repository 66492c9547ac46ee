//! `sluice schema show | history | resync`: the schema history as the
//! command line shows and repairs it, read beside a running pipeline.

use crate::commit::Lake;
use crate::config::{Config, TableFilter};
use crate::error::{Error, Result};
use crate::schema::apply::{columns_from_specs, unique_keys_from_specs};
use crate::schema::bootstrap;
use crate::schema::ddl::{parse_ddl, Change};
use crate::schema::history::{PointInTime, SchemaHistory, TableVersion};
use crate::schema::TableSchema;
use crate::source::{self, BinlogPosition};

pub(crate) fn split_table(name: &str) -> Result<(String, String)> {
    name.split_once('.')
        .filter(|(d, t)| !d.is_empty() && !t.is_empty())
        .map(|(d, t)| (d.to_string(), t.to_string()))
        .ok_or_else(|| Error::Schema {
            table: name.to_string(),
            message: "name the table as DB.TABLE".into(),
        })
}

/// The history store, completed from the lake, and the committed checkpoint.
/// Read-only towards the lake: a pipeline may be running beside us.
pub(crate) async fn open(config: &Config) -> Result<(SchemaHistory, Lake, u64)> {
    let lake = Lake::open(&config.sink)?;
    let committed = lake.latest_manifest().await?.map(|m| m.seq).unwrap_or(0);
    let history = SchemaHistory::open(&config.state_dir)?;
    history
        .sync_with_lake(lake.store.as_ref(), committed, false)
        .await?;
    Ok((history, lake, committed))
}

pub(crate) fn committed_versions(
    history: &SchemaHistory,
    db: &str,
    table: &str,
    committed: u64,
) -> Result<Vec<TableVersion>> {
    let versions: Vec<TableVersion> = history
        .versions(db, table)?
        .into_iter()
        .filter(|v| v.checkpoint <= committed)
        .collect();
    if versions.is_empty() {
        return Err(Error::Schema {
            table: format!("{db}.{table}"),
            message: "no committed schema history: is the table captured by [filter], and has sluice run since it was created?".into(),
        });
    }
    Ok(versions)
}

/// The JSON of DESIGN.md: `{table, version, position, committed_at, statement, columns}`.
/// A column's `key_position` is its place in the primary key as sluice
/// orders by it ([`key_places`]), also for a version stored before the
/// order was recorded.
fn version_json(v: &TableVersion) -> serde_json::Value {
    let mut j = v.to_json();
    let places = key_places(&v.schema);
    if let Some(cols) = j.get_mut("columns").and_then(|c| c.as_array_mut()) {
        for (c, place) in cols.iter_mut().zip(&places) {
            if let Some(o) = c.as_object_mut() {
                o.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        "name"
                            | "lake_name"
                            | "mysql_type"
                            | "arrow_type"
                            | "policy"
                            | "nullable"
                            | "primary_key"
                            | "charset"
                            | "labels"
                    )
                });
                o.insert("key_position".into(), serde_json::json!(place));
            }
        }
    }
    j
}

/// Each column's place (1-based) in the primary key in the order the
/// current-state table sorts by ([`TableSchema::primary_key`]); `None` for
/// columns outside it.
fn key_places(schema: &TableSchema) -> Vec<Option<usize>> {
    let key = schema.primary_key();
    schema
        .columns
        .iter()
        .map(|c| {
            key.iter()
                .position(|k| std::ptr::eq(*k, c))
                .map(|at| at + 1)
        })
        .collect()
}

fn describe(v: &TableVersion) -> String {
    let mut out = format!(
        "{} version {}{}\n  in force from {}{} (committed {})\n  statement: {}\n",
        v.qualified_name(),
        v.schema.version,
        if v.dropped { " (dropped)" } else { "" },
        v.position,
        v.gtid
            .as_deref()
            .map(|g| format!(" gtid {g}"))
            .unwrap_or_default(),
        v.committed_at,
        v.statement
            .as_deref()
            .map(one_line)
            .unwrap_or_else(|| "(bootstrap from information_schema)".into()),
    );
    // The arrow type is the lake's, the column's policy applied (a hashed
    // column is text); the policy column shows only where there is one.
    let key_width = v.schema.primary_key().len();
    let row = |(c, place): (&crate::schema::ColumnDef, Option<usize>)| {
        [
            c.name.clone(),
            c.mysql_type.clone(),
            c.lake_type().to_string(),
            if c.nullable { "yes" } else { "no" }.to_string(),
            // A key of several columns shows their order: `PK 2`.
            match place {
                Some(at) if key_width > 1 => format!("PK {at}"),
                Some(_) => "PK".to_string(),
                None => String::new(),
            },
        ]
    };
    let places = key_places(&v.schema);
    if v.schema.has_policy() {
        let rows: Vec<[String; 6]> = v
            .schema
            .columns
            .iter()
            .zip(places)
            .map(|(c, place)| {
                let [a, b, t, n, k] = row((c, place));
                let policy = c.policy.map(|p| p.name()).unwrap_or_default();
                [a, b, t, n, k, policy]
            })
            .collect();
        out.push_str(&table(
            &[
                "column",
                "mysql type",
                "arrow type",
                "null",
                "key",
                "policy",
            ],
            &rows,
        ));
    } else {
        let rows: Vec<[String; 5]> = v.schema.columns.iter().zip(places).map(row).collect();
        out.push_str(&table(
            &["column", "mysql type", "arrow type", "null", "key"],
            &rows,
        ));
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A plain text table with aligned columns.
fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::from("  ");
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            s.push_str(c);
            if i + 1 < N {
                s.push_str(&" ".repeat(w - c.chars().count() + 2));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    out.push_str(&line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    ));
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

pub async fn show(config: &Config, name: &str, at: Option<&str>, as_json: bool) -> Result<String> {
    let (db, tbl) = split_table(name)?;
    let at = at
        .map(PointInTime::parse)
        .transpose()
        .map_err(|message| Error::Schema {
            table: name.to_string(),
            message,
        })?;
    let (history, _, committed) = open(config).await?;
    let versions = committed_versions(&history, &db, &tbl, committed)?;
    let v = match &at {
        None => versions.last().cloned(),
        Some(at) => history
            .at(&db, &tbl, at)?
            .filter(|v| v.checkpoint <= committed),
    }
    .ok_or_else(|| Error::Schema {
        table: name.to_string(),
        message: format!(
            "no version at or before that point; the oldest is version {} at {}",
            versions[0].schema.version, versions[0].position
        ),
    })?;
    Ok(if as_json {
        serde_json::to_string_pretty(&version_json(&v)).unwrap_or_default()
    } else {
        describe(&v)
    })
}

pub async fn history(config: &Config, name: &str, as_json: bool) -> Result<String> {
    let (db, tbl) = split_table(name)?;
    let (history, _, committed) = open(config).await?;
    let versions = committed_versions(&history, &db, &tbl, committed)?;
    if as_json {
        return Ok(serde_json::to_string_pretty(
            &versions.iter().map(version_json).collect::<Vec<_>>(),
        )
        .unwrap_or_default());
    }
    let rows: Vec<[String; 6]> = versions
        .iter()
        .map(|v| {
            let stmt = v
                .statement
                .as_deref()
                .map(one_line)
                .unwrap_or_else(|| "(bootstrap from information_schema)".into());
            [
                v.schema.version.to_string(),
                v.position.to_string(),
                v.gtid.clone().unwrap_or_default(),
                v.committed_at.clone(),
                format!(
                    "{}{}",
                    v.schema.columns.len(),
                    if v.dropped { " (dropped)" } else { "" }
                ),
                if stmt.chars().count() > 100 {
                    stmt.chars().take(97).collect::<String>() + "..."
                } else {
                    stmt
                },
            ]
        })
        .collect();
    Ok(format!(
        "{name}: {} versions\n{}",
        versions.len(),
        table(
            &[
                "version",
                "position",
                "gtid",
                "committed at",
                "columns",
                "statement"
            ],
            &rows
        )
    ))
}

/// Records the table's shape for the position where the pipeline stopped
/// (the DDL it could not read), or the committed cursor when it did not stop
/// on one. The shape is the table's on the server now, or, with `shape_sql`,
/// the one a `CREATE TABLE` statement describes: the way out for a table the
/// server no longer has (dropped or renamed later in the binlog).
pub async fn resync(config: &Config, name: &str, shape_sql: Option<&str>) -> Result<String> {
    let (db, tbl) = split_table(name)?;
    let (history, lake, _) = open(config).await?;
    let shape = match shape_sql {
        Some(sql) => shape_from_create(&history, name, &db, &tbl, sql)?,
        None => {
            let mut conn = source::connect(&config.source).await?;
            let exact = TableFilter::new(&[regex::escape(name)], &[]).map_err(Error::Preflight)?;
            let mut tables = bootstrap::read_tables(&mut conn, &exact).await?;
            tables
                .remove(&(db.clone(), tbl.clone()))
                .ok_or_else(|| Error::Schema {
                    table: name.to_string(),
                    message: "the server has no such table now; give its shape at the stop with --shape \"CREATE TABLE …\"".into(),
                })?
        }
    };
    let blocked: Option<serde_json::Value> = history
        .meta("blocked_ddl")?
        .and_then(|s| serde_json::from_str(&s).ok());
    let at = match blocked.filter(|b| b.get("table").and_then(|t| t.as_str()) == Some(name)) {
        Some(b) => BinlogPosition {
            file: b
                .get("file")
                .and_then(|f| f.as_str())
                .unwrap_or_default()
                .to_string(),
            pos: b.get("pos").and_then(|p| p.as_u64()).unwrap_or(4),
        },
        None => {
            let m = lake.latest_manifest().await?.ok_or_else(|| Error::Schema {
                table: name.to_string(),
                message:
                    "the lake has no checkpoint yet; start sluice, it reads the shape at start"
                        .into(),
            })?;
            BinlogPosition {
                file: m.cursor.file,
                pos: m.cursor.pos,
            }
        }
    };
    history.add_pending_resync(&shape, &at)?;
    Ok(format!(
        "recorded the current shape of {name} ({}) for {at}; sluice applies it when it reaches that position\n",
        shape.describe()
    ))
}

/// The shape a `CREATE TABLE` statement describes, named `db.tbl` whatever
/// name the statement uses. Columns without a charset take the statement's
/// table charset, else the one the history last knew for the table.
fn shape_from_create(
    history: &SchemaHistory,
    name: &str,
    db: &str,
    tbl: &str,
    sql: &str,
) -> Result<TableSchema> {
    let bad = |message: String| Error::Schema {
        table: name.to_string(),
        message,
    };
    let mut changes = parse_ddl(sql, db).map_err(|e| bad(format!("--shape: {e}")))?;
    let Some(Change::Create {
        columns,
        unique_keys,
        charset,
        ..
    }) = (changes.len() == 1).then(|| changes.remove(0))
    else {
        return Err(bad(
            "--shape must be one CREATE TABLE statement with a column list".into(),
        ));
    };
    let known = history
        .versions(db, tbl)?
        .last()
        .and_then(|v| v.schema.charset.clone());
    let charset = charset.or(known).ok_or_else(|| {
        bad(
            "--shape: say the table's charset (DEFAULT CHARSET=…): the history does not know it"
                .into(),
        )
    })?;
    let specs = columns;
    let columns = columns_from_specs(&specs, &charset).map_err(|e| bad(format!("--shape: {e}")))?;
    let unique_keys = unique_keys_from_specs(&specs, &unique_keys, &columns)
        .map_err(|e| bad(format!("--shape: {e}")))?;
    Ok(TableSchema {
        database: db.to_string(),
        name: tbl.to_string(),
        version: 0,
        columns,
        charset: Some(charset),
        unique_keys,
    })
}
