//! Columns, keys, charsets and names as sqlparser gives them.

use sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableLikeKind, IndexColumn, IndexOption, IndexType,
    ObjectName, Statement, TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use super::scan::{tokenize, Token, Tokens};
use super::{Change, ColumnSpec, TableName, UniqueSpec};

/// A charset as the server names it (`utf8` is `utf8mb3`).
fn charset_name(cs: &str) -> String {
    let cs = cs
        .trim_matches(|c| c == '`' || c == '\'' || c == '"')
        .to_ascii_lowercase();
    if cs == "utf8" {
        "utf8mb3".into()
    } else {
        cs
    }
}

/// Collation names start with their charset: `utf8mb4_general_ci` → `utf8mb4`.
pub fn charset_of_collation(collation: &str) -> String {
    let c = collation.to_ascii_lowercase();
    match c.split('_').next() {
        Some("utf8") => "utf8mb3".to_string(),
        Some(cs) => cs.to_string(),
        None => c,
    }
}

pub(super) fn object_name(name: &ObjectName, default_db: &str) -> Result<TableName, String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(|i| i.value.clone())
                .unwrap_or_else(|| p.to_string())
        })
        .collect();
    match parts.as_slice() {
        [t] => Ok((default_db.to_string(), t.clone())),
        [d, t] => Ok((d.clone(), t.clone())),
        _ => Err(format!("unexpected name {name}")),
    }
}

pub(super) fn column_spec(def: &sqlparser::ast::ColumnDef) -> ColumnSpec {
    let mut spec = ColumnSpec {
        name: def.name.value.clone(),
        mysql_type: def.data_type.to_string(),
        charset: None,
        nullable: true,
        primary_key: false,
        key_position: None,
        unique: false,
        generated: false,
        fills_rows: false,
    };
    spec_options(&mut spec, def.options.iter().map(|o| &o.option));
    spec
}

pub(super) fn spec_options<'a>(
    spec: &mut ColumnSpec,
    options: impl Iterator<Item = &'a ColumnOption>,
) {
    let mut collation = None;
    let mut explicit_null = false;
    for option in options {
        match option {
            ColumnOption::NotNull => spec.nullable = false,
            ColumnOption::Null => {
                spec.nullable = true;
                explicit_null = true;
            }
            ColumnOption::Default(sqlparser::ast::Expr::Value(v))
                if matches!(v.value, sqlparser::ast::Value::Null) => {}
            ColumnOption::Default(_) => spec.fills_rows = true,
            ColumnOption::PrimaryKey(_) => {
                spec.primary_key = true;
                spec.key_position = Some(1);
                spec.nullable = false;
            }
            ColumnOption::Unique(_) => spec.unique = true,
            ColumnOption::Generated { .. } => {
                spec.generated = true;
                spec.fills_rows = true;
            }
            ColumnOption::CharacterSet(cs) => spec.charset = Some(charset_name(&cs.to_string())),
            ColumnOption::Collation(c) => collation = Some(charset_of_collation(&c.to_string())),
            // The server makes an AUTO_INCREMENT column NOT NULL.
            ColumnOption::DialectSpecific(tokens)
                if tokens
                    .iter()
                    .any(|t| t.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")) =>
            {
                spec.nullable = false;
                spec.fills_rows = true;
            }
            _ => {}
        }
    }
    // `VARCHAR(10) CHARACTER SET latin1` may stay inside the type text.
    let upper = spec.mysql_type.to_ascii_uppercase();
    if let Some(i) = upper.find(" CHARACTER SET ") {
        let cs = spec.mysql_type[i + 15..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        let cs = charset_name(cs);
        spec.mysql_type = spec.mysql_type[..i].to_string();
        spec.charset.get_or_insert(cs);
    }
    if spec.charset.is_none() {
        spec.charset = collation;
    }
    // SERIAL is BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE.
    if spec.mysql_type.eq_ignore_ascii_case("SERIAL") {
        spec.mysql_type = "BIGINT UNSIGNED".into();
        spec.nullable = false;
        spec.unique = true;
        spec.fills_rows = true;
    }
    // Without explicit_defaults_for_timestamp (MariaDB before 10.10, and
    // often set so) the first TIMESTAMP column is NOT NULL DEFAULT
    // current_timestamp(): only an explicit NULL rules that out.
    if !explicit_null && upper.trim_start().starts_with("TIMESTAMP") {
        spec.fills_rows = true;
    }
}

pub(super) fn constraint_primary_key(c: &TableConstraint) -> Option<Vec<String>> {
    match c {
        TableConstraint::PrimaryKey(pk) => {
            Some(pk.columns.iter().map(|ic| key_part(ic).0).collect())
        }
        _ => None,
    }
}

/// A key part's column and prefix length: `name` or `name(10)`.
fn key_part(ic: &IndexColumn) -> (String, Option<u32>) {
    match &ic.column.expr {
        sqlparser::ast::Expr::Identifier(id) => (id.value.clone(), None),
        // `UNIQUE (name(10))`: a prefix of the column.
        sqlparser::ast::Expr::Function(f) => {
            let text = f.to_string();
            let prefix = text
                .rsplit_once('(')
                .and_then(|(_, n)| n.trim_end_matches(')').trim().parse().ok());
            (f.name.to_string().trim_matches('`').to_string(), prefix)
        }
        other => (other.to_string().trim_matches('`').to_string(), None),
    }
}

/// A `UNIQUE` table constraint (`[CONSTRAINT [c]] UNIQUE [KEY|INDEX] [name]
/// [USING …] (cols) [USING …]`); `None` for any other constraint.
pub(super) fn constraint_unique(c: &TableConstraint) -> Option<UniqueSpec> {
    let TableConstraint::Unique(u) = c else {
        return None;
    };
    let using_hash = matches!(u.index_type, Some(IndexType::Hash))
        || u.index_options
            .iter()
            .any(|o| matches!(o, IndexOption::Using(IndexType::Hash)));
    Some(UniqueSpec {
        // MariaDB names the index after the constraint when it has no name of its own.
        name: u
            .index_name
            .as_ref()
            .or(u.name.as_ref())
            .map(|n| n.value.clone()),
        parts: u.columns.iter().map(key_part).collect(),
        using_hash,
    })
}

/// The table default charset from a CREATE/ALTER option text such as
/// `ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_bin`.
pub(super) fn charset_option(text: &str) -> Option<String> {
    let upper = text.to_ascii_uppercase();
    let value_after = |key: &str| -> Option<String> {
        let i = upper.find(key)?;
        let rest = text[i + key.len()..]
            .trim_start()
            .trim_start_matches('=')
            .trim_start();
        let v: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!v.is_empty()).then(|| v.to_ascii_lowercase())
    };
    value_after("CHARACTER SET")
        .or_else(|| value_after("CHARSET"))
        .map(|c| charset_name(&c))
        .or_else(|| value_after("COLLATE").map(|c| charset_of_collation(&c)))
}

pub(super) fn create_change(ct: &CreateTable, default_db: &str) -> Result<Option<Change>, String> {
    if ct.temporary {
        return Ok(None);
    }
    let table = object_name(&ct.name, default_db)?;
    if let Some(like) = &ct.like {
        let like = match like {
            CreateTableLikeKind::Parenthesized(l) | CreateTableLikeKind::Plain(l) => &l.name,
        };
        return Ok(Some(Change::CreateLike {
            table,
            like: object_name(like, default_db)?,
            if_not_exists: ct.if_not_exists,
        }));
    }
    if ct.columns.is_empty() {
        return Ok(Some(Change::CreateAsSelect { table }));
    }
    let mut columns: Vec<ColumnSpec> = ct.columns.iter().map(column_spec).collect();
    for pk in ct.constraints.iter().filter_map(constraint_primary_key) {
        for c in &mut columns {
            if let Some(at) = pk.iter().position(|p| p.eq_ignore_ascii_case(&c.name)) {
                c.primary_key = true;
                c.key_position = Some(at as u32 + 1);
                c.nullable = false;
            }
        }
    }
    let unique_keys = ct
        .constraints
        .iter()
        .filter_map(constraint_unique)
        .collect();
    Ok(Some(Change::Create {
        table,
        columns,
        unique_keys,
        charset: charset_option(&ct.table_options.to_string()),
        replace: ct.or_replace,
        if_not_exists: ct.if_not_exists,
    }))
}

/// `CREATE TABLE name (…) options`: the column list is parsed by sqlparser
/// without the table options and partitioning, which it reads only in part
/// (MariaDB's `PAGE_COMPRESSED=1`, `WITH SYSTEM VERSIONING`, …); the default
/// charset is read from the options. `None` for other statements.
pub(super) fn create_with_column_list(
    sql: &str,
    default_db: &str,
) -> Result<Option<Change>, String> {
    let mut t = Tokens {
        tokens: tokenize(sql),
        pos: 0,
    };
    if !t.keyword("CREATE") {
        return Ok(None);
    }
    t.keywords(&["OR", "REPLACE"]);
    if !t.keyword("TABLE") {
        return Ok(None);
    }
    let Some((open, close)) = first_parenthesis(sql) else {
        return Ok(None);
    };
    let body = sql[open + 1..close].trim_start();
    let tail = &sql[close + 1..];
    let starts = |text: &str, kw: &str| {
        text.get(..kw.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(kw))
    };
    if starts(body, "LIKE") {
        return Ok(None);
    }
    let selects = starts(body, "SELECT")
        || tokenize(tail)
            .iter()
            .any(|tok| matches!(tok, Token::Word(w) if w.eq_ignore_ascii_case("SELECT")));
    if selects {
        t.keywords(&["IF", "NOT", "EXISTS"]);
        let table = t
            .table_name(default_db)
            .ok_or("CREATE TABLE without a table name")?;
        return Ok(Some(Change::CreateAsSelect { table }));
    }
    let stmts = Parser::parse_sql(&MySqlDialect {}, &sql[..=close]).map_err(|e| e.to_string())?;
    let Some(Statement::CreateTable(ct)) = stmts.first() else {
        return Ok(None);
    };
    Ok(match create_change(ct, default_db)? {
        Some(Change::Create {
            table,
            columns,
            unique_keys,
            replace,
            if_not_exists,
            ..
        }) => Some(Change::Create {
            table,
            columns,
            unique_keys,
            charset: charset_option(tail),
            replace,
            if_not_exists,
        }),
        other => other,
    })
}

/// Byte offsets of the first top-level `(` outside quotes and its `)`.
fn first_parenthesis(sql: &str) -> Option<(usize, usize)> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    let mut open = None;
    let mut chars = sql.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some(q) if c == q => {
                if chars.peek().map(|x| x.1) == Some(q) {
                    chars.next();
                } else {
                    quote = None;
                }
            }
            Some(_) if c == '\\' => {
                chars.next();
            }
            Some(_) => {}
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '(' => {
                    if depth == 0 && open.is_none() {
                        open = Some(i);
                    }
                    depth += 1;
                }
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return open.map(|o| (o, i));
                    }
                }
                _ => {}
            },
        }
    }
    None
}
