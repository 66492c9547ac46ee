//! DDL statements: which tables they touch and how they change them.
//!
//! [`parse_ddl`] turns a statement into [`Change`]s with `sqlparser` (MySQL
//! dialect). `ALTER TABLE` clauses are split here and parsed one by one, so
//! that table options sqlparser does not know (`CONVERT TO CHARACTER SET`,
//! `ENGINE=`, `ADD COLUMN (a, b)`) are handled without failing the whole
//! statement. [`ddl_effect`] is a keyword scanner that only finds the table
//! names; it decides whether a statement sqlparser cannot read touches a
//! captured table.

/// A table named by a statement, qualified with the statement's default database.
pub type TableName = (String, String);

mod alter;
mod create;
mod expr;
mod normalize;
mod scan;
#[cfg(test)]
mod tests;

use sqlparser::ast::{ObjectType, Statement};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use alter::{alter_clause, is_order_by_item, split_top_level, sql_table_clause_start};
pub use create::charset_of_collation;
use create::{charset_option, create_change, create_with_column_list, object_name};
pub use normalize::ServerVersion;
use normalize::{
    normalize_mariadb, periods, requote, unwrap_executable_comments, without_plain_comments,
};
pub use scan::{ddl_effect, DdlEffect};
use scan::{tokenize, Token, Tokens};

/// A column as a DDL statement declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: String,
    pub mysql_type: String,
    /// Explicit `CHARACTER SET` (or the charset of an explicit `COLLATE`).
    pub charset: Option<String>,
    pub nullable: bool,
    pub primary_key: bool,
    /// The column's place in the primary key (1-based), when `primary_key`:
    /// its place in a `PRIMARY KEY (…)` clause, 1 for `PRIMARY KEY` on the
    /// column itself.
    pub key_position: Option<u32>,
    /// `UNIQUE [KEY]` on the column: a unique index of that column alone.
    pub unique: bool,
    /// A generated column (`AS (…)`, `GENERATED ALWAYS AS (…)`).
    pub generated: bool,
    /// Added to a table that has rows, the column gets a value in them that
    /// is not NULL and that no binlog row carries: a DEFAULT other than NULL,
    /// a generated expression, AUTO_INCREMENT, or a TIMESTAMP without an
    /// explicit NULL (the server may make it `NOT NULL DEFAULT
    /// current_timestamp()`). NOT NULL alone is in `nullable`.
    pub fills_rows: bool,
}

/// A UNIQUE index as a statement declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueSpec {
    /// The index name (or else the constraint name); `None`: the server
    /// names it after its first column.
    pub name: Option<String>,
    /// The columns in index order, each with its prefix length (`name(10)`).
    pub parts: Vec<(String, Option<u32>)>,
    /// `USING HASH`.
    pub using_hash: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnPosition {
    Last,
    First,
    After(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterOp {
    Add(ColumnSpec, ColumnPosition),
    Drop(String),
    /// MODIFY (same name) and CHANGE (`old` may differ from the new name).
    Change {
        old: String,
        column: ColumnSpec,
        position: ColumnPosition,
    },
    RenameColumn {
        old: String,
        new: String,
    },
    AddPrimaryKey(Vec<String>),
    DropPrimaryKey,
    /// `ADD UNIQUE …`, `ADD CONSTRAINT … UNIQUE …`; with a name that exists
    /// already, nothing (`ADD UNIQUE IF NOT EXISTS`; without it the server
    /// refuses the statement).
    AddUnique(UniqueSpec),
    /// `DROP INDEX`, `DROP KEY`, `DROP CONSTRAINT` of a name, with or
    /// without `IF EXISTS`: an index of another name changes nothing.
    DropIndex(String),
    /// `RENAME INDEX old TO new`, `RENAME KEY old TO new`.
    RenameIndex {
        old: String,
        new: String,
    },
    RenameTo(TableName),
    /// `CONVERT TO CHARACTER SET`: every textual column and the table default.
    ConvertCharset(String),
    /// `[DEFAULT] CHARACTER SET =`: the table default only.
    DefaultCharset(String),
    /// `ADD PRIMARY KEY IF NOT EXISTS (…)`: only when the table has none.
    AddPrimaryKeyIfNone(Vec<String>),
    /// `PERIOD FOR name (start, end)`: both columns become NOT NULL; with
    /// system versioning (`system_versioned`) the end column joins the
    /// primary key, if the table has one.
    Period {
        start: String,
        end: String,
        system_versioned: bool,
    },
    /// A column clause with `IF [NOT] EXISTS`: `op` applies only when the
    /// column `column` exists (`exists`) or does not (`!exists`) at that point.
    IfColumn {
        column: String,
        exists: bool,
        op: Box<AlterOp>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create {
        table: TableName,
        columns: Vec<ColumnSpec>,
        /// Table-level UNIQUE keys, in statement order (column-level ones
        /// are [`ColumnSpec::unique`]).
        unique_keys: Vec<UniqueSpec>,
        charset: Option<String>,
        replace: bool,
        if_not_exists: bool,
    },
    CreateLike {
        table: TableName,
        like: TableName,
        if_not_exists: bool,
    },
    /// `CREATE TABLE … SELECT` without a column list: the statement does not say the shape.
    CreateAsSelect {
        table: TableName,
    },
    Alter {
        table: TableName,
        ops: Vec<AlterOp>,
    },
    Rename(Vec<(TableName, TableName)>),
    Drop(Vec<TableName>),
    Truncate(TableName),
    CreateDatabase {
        db: String,
        charset: Option<String>,
    },
    AlterDatabase {
        db: String,
        charset: String,
    },
    DropDatabase(String),
}

/// Parses a DDL statement into the changes it makes. `Ok(vec![])` for
/// statements that change no table (GRANT, views, routines, users, …);
/// `Err` with the reason when the statement looks like table DDL but cannot
/// be read.
pub fn parse_ddl(statement: &str, default_db: &str) -> Result<Vec<Change>, String> {
    parse_ddl_on(statement, default_db, None, false)
}

/// [`parse_ddl`] of a statement the server `server` ran: its executable
/// comments count as that server counted them (all of them when unknown),
/// and its double quotes are names when its `sql_mode` had `ANSI_QUOTES`,
/// strings otherwise.
pub fn parse_ddl_on(
    statement: &str,
    default_db: &str,
    server: Option<ServerVersion>,
    ansi_quotes: bool,
) -> Result<Vec<Change>, String> {
    let unwrapped = expr::without_column_expressions(&requote(
        &without_plain_comments(&unwrap_executable_comments(statement, server)),
        ansi_quotes,
    ));
    let (periods, versioned) = periods(&unwrapped);
    let period_ops: Vec<AlterOp> = periods
        .into_iter()
        .map(|p| AlterOp::Period {
            system_versioned: p.system_time && versioned,
            start: p.start,
            end: p.end,
        })
        .collect();
    let mut changes = parse_normalized(&normalize_mariadb(&unwrapped), default_db)?;
    let mariadb = server.is_none_or(|s| s.mariadb);
    for change in &mut changes {
        match change {
            Change::Alter { ops, .. } => {
                if mariadb {
                    ops.iter_mut().for_each(generated_json_of_op);
                }
                ops.extend(period_ops.clone());
            }
            Change::Create { columns, .. } => {
                if mariadb {
                    columns.iter_mut().for_each(generated_json_is_longtext);
                }
                for op in &period_ops {
                    period_of_specs(columns, op);
                }
            }
            _ => {}
        }
    }
    Ok(changes)
}

/// MariaDB's JSON is LONGTEXT (utf8mb4_bin) with a `json_valid` CHECK; a
/// generated JSON column is that LONGTEXT in the server's own words
/// (`information_schema` and `SHOW CREATE TABLE`). MySQL's JSON is a type
/// of its own, generated or not.
fn generated_json_is_longtext(spec: &mut ColumnSpec) {
    if spec.generated && spec.mysql_type.eq_ignore_ascii_case("json") {
        spec.mysql_type = "longtext".into();
        spec.charset.get_or_insert_with(|| "utf8mb4".into());
    }
}

fn generated_json_of_op(op: &mut AlterOp) {
    match op {
        AlterOp::Add(spec, _) | AlterOp::Change { column: spec, .. } => {
            generated_json_is_longtext(spec)
        }
        AlterOp::IfColumn { op, .. } => generated_json_of_op(op),
        _ => {}
    }
}

/// What [`AlterOp::Period`] does, to the columns of a CREATE TABLE.
fn period_of_specs(columns: &mut [ColumnSpec], period: &AlterOp) {
    let AlterOp::Period {
        start,
        end,
        system_versioned,
    } = period
    else {
        return;
    };
    let keyed = columns.iter().any(|c| c.primary_key);
    // The server appends the row end to the key.
    let end_position = super::next_key_position(
        columns
            .iter()
            .filter(|c| c.primary_key && !c.name.eq_ignore_ascii_case(end))
            .map(|c| c.key_position),
    );
    for c in columns.iter_mut() {
        if c.name.eq_ignore_ascii_case(start) || c.name.eq_ignore_ascii_case(end) {
            c.nullable = false;
        }
        if *system_versioned && keyed && c.name.eq_ignore_ascii_case(end) && !c.primary_key {
            c.primary_key = true;
            c.key_position = end_position;
        }
    }
}

/// MariaDB's `CONVERT PARTITION p TO TABLE t` (a new table `t` in the
/// altered table's shape) and `CONVERT TABLE t TO PARTITION …` (table `t`
/// ends); `None` for any other clause.
fn partition_table_clause(clause: &str, altered: &TableName, default_db: &str) -> Option<Change> {
    let mut t = Tokens {
        tokens: tokenize(clause),
        pos: 0,
    };
    if !t.keyword("CONVERT") {
        return None;
    }
    if t.keyword("PARTITION") {
        t.pos += 1;
        if t.keywords(&["TO", "TABLE"]) {
            let table = t.table_name(default_db)?;
            return Some(Change::CreateLike {
                table,
                like: altered.clone(),
                if_not_exists: false,
            });
        }
        return None;
    }
    if t.keyword("TABLE") {
        let table = t.table_name(default_db)?;
        return t
            .keywords(&["TO", "PARTITION"])
            .then(|| Change::Drop(vec![table]));
    }
    None
}

/// [`parse_ddl_on`] of the statement once rewritten for sqlparser.
fn parse_normalized(sql: &str, default_db: &str) -> Result<Vec<Change>, String> {
    let sql = sql.to_string();
    let mut t = Tokens {
        tokens: tokenize(&sql),
        pos: 0,
    };
    // ALTER TABLE is split into clauses here (see the module comment).
    if t.keyword("ALTER") {
        t.keyword("ONLINE");
        t.keyword("IGNORE");
        if t.keyword("TABLE") {
            t.keywords(&["IF", "EXISTS"]);
            let table = t
                .table_name(default_db)
                .ok_or("ALTER TABLE without a table name")?;
            let head = sql_table_clause_start(&sql).ok_or("cannot find the ALTER TABLE clauses")?;
            let mut ops = Vec::new();
            let mut other_tables = Vec::new();
            let mut in_order_by = false;
            for clause in split_top_level(&sql[head..]) {
                if let Some(change) = partition_table_clause(&clause, &table, default_db) {
                    other_tables.push(change);
                    continue;
                }
                // `ORDER BY a, b DESC`: the comma splits the clause, and
                // the order of rows is no part of the shape.
                let starts_order_by = clause
                    .get(..5)
                    .is_some_and(|w| w.eq_ignore_ascii_case("ORDER"));
                if starts_order_by || (in_order_by && is_order_by_item(&clause)) {
                    in_order_by = true;
                    continue;
                }
                in_order_by = false;
                ops.extend(alter_clause(&clause, default_db)?);
            }
            let mut changes = vec![Change::Alter { table, ops }];
            changes.extend(other_tables);
            return Ok(changes);
        }
        if t.keyword("DATABASE") || t.keyword("SCHEMA") {
            let db = match t.tokens.get(t.pos) {
                Some(Token::Word(w)) => w.clone(),
                _ => default_db.to_string(),
            };
            return Ok(charset_option(&sql)
                .map(|charset| vec![Change::AlterDatabase { db, charset }])
                .unwrap_or_default());
        }
        return Ok(vec![]);
    }
    t.pos = 0;
    let creates_database = t.keyword("CREATE") && (t.keyword("DATABASE") || t.keyword("SCHEMA"));
    if !creates_database && matches!(ddl_effect(&sql, default_db), DdlEffect::None) {
        return Ok(vec![]);
    }
    if let Some(change) = create_with_column_list(&sql, default_db)? {
        return Ok(vec![change]);
    }
    let stmts = Parser::parse_sql(&MySqlDialect {}, &sql).map_err(|e| e.to_string())?;
    let mut changes = Vec::new();
    for stmt in &stmts {
        match stmt {
            Statement::CreateTable(ct) => changes.extend(create_change(ct, default_db)?),
            Statement::RenameTable(pairs) => changes.push(Change::Rename(
                pairs
                    .iter()
                    .map(|r| {
                        Ok((
                            object_name(&r.old_name, default_db)?,
                            object_name(&r.new_name, default_db)?,
                        ))
                    })
                    .collect::<Result<_, String>>()?,
            )),
            Statement::Drop {
                object_type: ObjectType::Table,
                names,
                temporary: false,
                ..
            } => changes.push(Change::Drop(
                names
                    .iter()
                    .map(|n| object_name(n, default_db))
                    .collect::<Result<_, _>>()?,
            )),
            Statement::Drop {
                object_type: ObjectType::Database | ObjectType::Schema,
                names,
                ..
            } => {
                for n in names {
                    changes.push(Change::DropDatabase(
                        n.to_string().trim_matches('`').to_string(),
                    ));
                }
            }
            Statement::Truncate(tr) => {
                for target in &tr.table_names {
                    changes.push(Change::Truncate(object_name(&target.name, default_db)?));
                }
            }
            Statement::CreateDatabase {
                db_name,
                default_charset,
                default_collation,
                ..
            } => changes.push(Change::CreateDatabase {
                db: db_name.to_string().trim_matches('`').to_string(),
                charset: default_charset
                    .clone()
                    .map(|c| c.to_ascii_lowercase())
                    .or_else(|| default_collation.as_deref().map(charset_of_collation)),
            }),
            _ => {}
        }
    }
    Ok(changes)
}
