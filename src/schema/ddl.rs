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

#[derive(Debug, PartialEq, Eq)]
pub enum DdlEffect {
    /// The statement changes these tables' shape or content.
    Tables(Vec<TableName>),
    /// DROP DATABASE: every table of the database is gone.
    DropDatabase(String),
    /// Not a statement that changes a table (GRANT, CREATE USER, views, ...).
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

fn tokenize(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' || (c == '-' && chars.get(i + 1) == Some(&'-')) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            // `/*! ... */` and `/*M! ... */` are executable comments: keep their body.
            let executable = chars.get(i + 2) == Some(&'!') || chars.get(i + 2) == Some(&'M');
            i += 2;
            if executable {
                while i < chars.len()
                    && (chars[i] == '!' || chars[i] == 'M' || chars[i].is_ascii_digit())
                {
                    i += 1;
                }
                continue;
            }
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '*' && chars.get(i + 1) == Some(&'/') {
            i += 2; // end of an executable comment
        } else if c == '`' || c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            while i < chars.len() {
                if chars[i] == c && chars.get(i + 1) == Some(&c) {
                    s.push(c);
                    i += 2;
                } else if chars[i] == c {
                    i += 1;
                    break;
                } else {
                    s.push(chars[i]);
                    i += 1;
                }
            }
            out.push(if c == '`' {
                Token::Word(s)
            } else {
                Token::Quoted(s)
            });
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

struct Tokens {
    tokens: Vec<Token>,
    pos: usize,
}

impl Tokens {
    fn keyword(&mut self, kw: &str) -> bool {
        match self.tokens.get(self.pos) {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(kw) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn keywords(&mut self, kws: &[&str]) -> bool {
        let save = self.pos;
        if kws.iter().all(|k| self.keyword(k)) {
            true
        } else {
            self.pos = save;
            false
        }
    }

    fn punct(&mut self, p: char) -> bool {
        if self.tokens.get(self.pos) == Some(&Token::Punct(p)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// `name` or `db.name`.
    fn table_name(&mut self, default_db: &str) -> Option<TableName> {
        let first = match self.tokens.get(self.pos) {
            Some(Token::Word(w)) => w.clone(),
            _ => return None,
        };
        self.pos += 1;
        if self.punct('.') {
            if let Some(Token::Word(w)) = self.tokens.get(self.pos) {
                let w = w.clone();
                self.pos += 1;
                return Some((first, w));
            }
            return None;
        }
        Some((default_db.to_string(), first))
    }
}

/// The tables `statement` changes, with `default_db` the Query event's database.
pub fn ddl_effect(statement: &str, default_db: &str) -> DdlEffect {
    let mut t = Tokens {
        tokens: tokenize(statement),
        pos: 0,
    };
    let mut tables = Vec::new();
    if t.keyword("CREATE") {
        t.keywords(&["OR", "REPLACE"]);
        if t.keyword("TEMPORARY") {
            return DdlEffect::None;
        }
        if t.keyword("DATABASE") || t.keyword("SCHEMA") {
            return DdlEffect::None;
        }
        if !t.keyword("TABLE") {
            return DdlEffect::None;
        }
        t.keywords(&["IF", "NOT", "EXISTS"]);
        tables.extend(t.table_name(default_db));
    } else if t.keyword("ALTER") {
        t.keyword("ONLINE");
        t.keyword("IGNORE");
        if !t.keyword("TABLE") {
            return DdlEffect::None;
        }
        t.keywords(&["IF", "EXISTS"]);
        tables.extend(t.table_name(default_db));
    } else if t.keyword("DROP") {
        if t.keyword("TEMPORARY") {
            return DdlEffect::None;
        }
        if t.keyword("DATABASE") || t.keyword("SCHEMA") {
            t.keywords(&["IF", "EXISTS"]);
            return match t.tokens.get(t.pos) {
                Some(Token::Word(w)) => DdlEffect::DropDatabase(w.clone()),
                _ => DdlEffect::None,
            };
        }
        if !t.keyword("TABLE") {
            return DdlEffect::None;
        }
        t.keywords(&["IF", "EXISTS"]);
        while let Some(name) = t.table_name(default_db) {
            tables.push(name);
            if !t.punct(',') {
                break;
            }
        }
    } else if t.keyword("RENAME") {
        if !t.keyword("TABLE") && !t.keyword("TABLES") {
            return DdlEffect::None;
        }
        t.keywords(&["IF", "EXISTS"]);
        while let Some(from) = t.table_name(default_db) {
            tables.push(from);
            if !t.keyword("TO") {
                break;
            }
            let Some(to) = t.table_name(default_db) else {
                break;
            };
            tables.push(to);
            if !t.punct(',') {
                break;
            }
        }
    } else if t.keyword("TRUNCATE") {
        t.keyword("TABLE");
        tables.extend(t.table_name(default_db));
    } else {
        return DdlEffect::None;
    }
    DdlEffect::Tables(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[(&str, &str)]) -> DdlEffect {
        DdlEffect::Tables(
            v.iter()
                .map(|(d, t)| (d.to_string(), t.to_string()))
                .collect(),
        )
    }

    #[test]
    fn alter_with_comment_and_backticks() {
        assert_eq!(
            ddl_effect(
                "/* hi */ ALTER  TABLE `shop`.`or``ders` ADD COLUMN x INT",
                "db"
            ),
            names(&[("shop", "or`ders")])
        );
    }

    #[test]
    fn drop_several_and_rename_pairs() {
        assert_eq!(
            ddl_effect(
                "DROP TABLE IF EXISTS a, `b`.c /* generated by server */",
                "shop"
            ),
            names(&[("shop", "a"), ("b", "c")])
        );
        assert_eq!(
            ddl_effect("RENAME TABLE a TO b, x.c TO y.d", "shop"),
            names(&[("shop", "a"), ("shop", "b"), ("x", "c"), ("y", "d")])
        );
    }

    #[test]
    fn unrelated_statements_are_none() {
        assert_eq!(
            ddl_effect("GRANT SELECT ON *.* TO x", "shop"),
            DdlEffect::None
        );
        assert_eq!(ddl_effect("CREATE USER x", "shop"), DdlEffect::None);
        assert_eq!(
            ddl_effect("CREATE VIEW v AS SELECT 1", "shop"),
            DdlEffect::None
        );
        assert_eq!(
            ddl_effect("CREATE TEMPORARY TABLE t (a int)", "shop"),
            DdlEffect::None
        );
        assert_eq!(
            ddl_effect("DROP DATABASE `shop`", "x"),
            DdlEffect::DropDatabase("shop".into())
        );
    }

    #[test]
    fn create_and_truncate() {
        assert_eq!(
            ddl_effect("CREATE TABLE IF NOT EXISTS t2 LIKE t1", "shop"),
            names(&[("shop", "t2")])
        );
        assert_eq!(
            ddl_effect("truncate table shop.t", "x"),
            names(&[("shop", "t")])
        );
    }
}

// ---------------------------------------------------------------------------
// Full parsing with sqlparser.

use sqlparser::ast::{
    AlterTableOperation, ColumnOption, CreateTable, CreateTableLikeKind, MySQLColumnPosition,
    ObjectName, ObjectType, RenameTableNameKind, Statement, TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

/// A column as a DDL statement declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: String,
    pub mysql_type: String,
    /// Explicit `CHARACTER SET` (or the charset of an explicit `COLLATE`).
    pub charset: Option<String>,
    pub nullable: bool,
    pub primary_key: bool,
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
    RenameTo(TableName),
    /// `CONVERT TO CHARACTER SET`: every textual column and the table default.
    ConvertCharset(String),
    /// `[DEFAULT] CHARACTER SET =`: the table default only.
    DefaultCharset(String),
    /// `ADD PRIMARY KEY IF NOT EXISTS (…)`: only when the table has none.
    AddPrimaryKeyIfNone(Vec<String>),
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

fn object_name(name: &ObjectName, default_db: &str) -> Result<TableName, String> {
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

/// Removes the markers of executable comments (`/*!40101 … */`, `/*M! … */`)
/// so their content is parsed; plain comments stay for the parser to skip.
fn unwrap_executable_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    let mut open = 0;
    loop {
        let next_open = ["/*!", "/*M!"]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, m.len())))
            .min();
        let next_close = if open > 0 { rest.find("*/") } else { None };
        match (next_open, next_close) {
            (Some((o, len)), c) if c.is_none_or(|c| o < c) => {
                out.push_str(&rest[..o]);
                rest = rest[o + len..].trim_start_matches(|c: char| c.is_ascii_digit());
                open += 1;
            }
            (_, Some(c)) => {
                out.push_str(&rest[..c]);
                rest = &rest[c + 2..];
                open -= 1;
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Rewrites MariaDB spellings sqlparser does not read into equivalent ones:
/// the `BINARY` attribute of character types (a `_bin` collation, same
/// charset), `PERSISTENT` for `STORED`, and the attributes that change no
/// type (system versioning's `AS ROW START/END` and `PERIOD FOR SYSTEM_TIME`,
/// `INVISIBLE`, `COMPRESSED`).
fn normalize_mariadb(sql: &str) -> String {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(regex::Regex, &'static str)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            (r"(?i)(\)|\bTEXT|\bCHAR|\bVARCHAR)\s+BINARY\b", "$1"),
            (r"(?i)\bPERSISTENT\b", "STORED"),
            // `RENAME TABLES` and `RENAME TABLE IF EXISTS`: a pair whose table
            // does not exist is skipped by the server and changes no shape here.
            (
                r"(?i)^(\s*)RENAME\s+TABLES?(\s+IF\s+EXISTS)?\b",
                "${1}RENAME TABLE",
            ),
            // System versioning: the columns stay, their role is no part of the shape.
            (
                r"(?i)\s+(GENERATED\s+ALWAYS\s+)?AS\s+ROW\s+(START|END)\b",
                "",
            ),
            (r"(?i),\s*PERIOD\s+FOR\s+SYSTEM_TIME\s*\([^)]*\)", ""),
            (r"(?i)\bWITH(OUT)?\s+SYSTEM\s+VERSIONING\b", ""),
            // `CHARSET x` is MariaDB's synonym of `CHARACTER SET x`.
            (
                r"(?i)([\w)])\s+CHARSET\s+([\w`'\x22])",
                "${1} CHARACTER SET ${2}",
            ),
            // Column attributes that change no type.
            (r"(?i)(\s)(IN)?VISIBLE\b", "$1"),
            (r"(?i)\s+COMPRESSED(\s*=\s*\w+)?\b", ""),
        ]
        .into_iter()
        .filter_map(|(re, to)| regex::Regex::new(re).ok().map(|r| (r, to)))
        .collect()
    });
    let mut out = sql.to_string();
    for (re, to) in rules {
        out = re.replace_all(&out, *to).into_owned();
    }
    out
}

fn column_spec(def: &sqlparser::ast::ColumnDef) -> ColumnSpec {
    let mut spec = ColumnSpec {
        name: def.name.value.clone(),
        mysql_type: def.data_type.to_string(),
        charset: None,
        nullable: true,
        primary_key: false,
    };
    spec_options(&mut spec, def.options.iter().map(|o| &o.option));
    spec
}

fn spec_options<'a>(spec: &mut ColumnSpec, options: impl Iterator<Item = &'a ColumnOption>) {
    let mut collation = None;
    for option in options {
        match option {
            ColumnOption::NotNull => spec.nullable = false,
            ColumnOption::Null => spec.nullable = true,
            ColumnOption::PrimaryKey(_) => {
                spec.primary_key = true;
                spec.nullable = false;
            }
            ColumnOption::CharacterSet(cs) => spec.charset = Some(charset_name(&cs.to_string())),
            ColumnOption::Collation(c) => collation = Some(charset_of_collation(&c.to_string())),
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
    if spec.mysql_type.eq_ignore_ascii_case("SERIAL") {
        spec.mysql_type = "BIGINT UNSIGNED".into();
        spec.nullable = false;
    }
}

fn constraint_primary_key(c: &TableConstraint) -> Option<Vec<String>> {
    match c {
        TableConstraint::PrimaryKey(pk) => Some(
            pk.columns
                .iter()
                .map(|ic| match &ic.column.expr {
                    sqlparser::ast::Expr::Identifier(id) => id.value.clone(),
                    // `PRIMARY KEY (name(10))`: a prefix of the column.
                    sqlparser::ast::Expr::Function(f) => {
                        f.name.to_string().trim_matches('`').to_string()
                    }
                    other => other.to_string().trim_matches('`').to_string(),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The table default charset from a CREATE/ALTER option text such as
/// `ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_bin`.
fn charset_option(text: &str) -> Option<String> {
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

fn create_change(ct: &CreateTable, default_db: &str) -> Result<Option<Change>, String> {
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
            if pk.iter().any(|p| p.eq_ignore_ascii_case(&c.name)) {
                c.primary_key = true;
                c.nullable = false;
            }
        }
    }
    Ok(Some(Change::Create {
        table,
        columns,
        charset: charset_option(&ct.table_options.to_string()),
        replace: ct.or_replace,
        if_not_exists: ct.if_not_exists,
    }))
}

fn position(p: &Option<MySQLColumnPosition>) -> ColumnPosition {
    match p {
        None => ColumnPosition::Last,
        Some(MySQLColumnPosition::First) => ColumnPosition::First,
        Some(MySQLColumnPosition::After(id)) => ColumnPosition::After(id.value.clone()),
    }
}

/// Splits at top-level commas (outside parentheses and quotes).
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                cur.push(c);
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' | '`' => {
                    quote = Some(c);
                    cur.push(c);
                }
                '(' => {
                    depth += 1;
                    cur.push(c);
                }
                ')' => {
                    depth -= 1;
                    cur.push(c);
                }
                ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            },
        }
    }
    if !cur.trim().is_empty() {
        parts.push(cur);
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// MODIFY (`old` = `new`) and CHANGE: the column's full new definition.
fn changed_column(
    old: &sqlparser::ast::Ident,
    new: &sqlparser::ast::Ident,
    data_type: &sqlparser::ast::DataType,
    options: &[ColumnOption],
    column_position: &Option<MySQLColumnPosition>,
) -> AlterOp {
    let mut column = ColumnSpec {
        name: new.value.clone(),
        mysql_type: data_type.to_string(),
        charset: None,
        nullable: true,
        primary_key: false,
    };
    spec_options(&mut column, options.iter());
    AlterOp::Change {
        old: old.value.clone(),
        column,
        position: position(column_position),
    }
}

fn alter_op(op: &AlterTableOperation, default_db: &str) -> Result<Vec<AlterOp>, String> {
    Ok(match op {
        AlterTableOperation::AddColumn {
            column_def,
            column_position,
            ..
        } => {
            vec![AlterOp::Add(
                column_spec(column_def),
                position(column_position),
            )]
        }
        AlterTableOperation::DropColumn { column_names, .. } => column_names
            .iter()
            .map(|c| AlterOp::Drop(c.value.clone()))
            .collect(),
        AlterTableOperation::ModifyColumn {
            col_name,
            data_type,
            options,
            column_position,
        } => vec![changed_column(
            col_name,
            col_name,
            data_type,
            options,
            column_position,
        )],
        AlterTableOperation::ChangeColumn {
            old_name,
            new_name,
            data_type,
            options,
            column_position,
        } => vec![changed_column(
            old_name,
            new_name,
            data_type,
            options,
            column_position,
        )],
        AlterTableOperation::RenameColumn {
            old_column_name,
            new_column_name,
        } => vec![AlterOp::RenameColumn {
            old: old_column_name.value.clone(),
            new: new_column_name.value.clone(),
        }],
        AlterTableOperation::AddConstraint { constraint, .. } => {
            match constraint_primary_key(constraint) {
                Some(cols) => vec![AlterOp::AddPrimaryKey(cols)],
                None => vec![],
            }
        }
        AlterTableOperation::DropPrimaryKey { .. } => vec![AlterOp::DropPrimaryKey],
        AlterTableOperation::RenameTable { table_name } => {
            let name = match table_name {
                RenameTableNameKind::As(n) | RenameTableNameKind::To(n) => n,
            };
            vec![AlterOp::RenameTo(object_name(name, default_db)?)]
        }
        // Indexes, foreign keys, engine, algorithm, lock, partitions, defaults:
        // none of them changes the row shape.
        _ => vec![],
    })
}

/// A column clause with MariaDB's `IF [NOT] EXISTS` (`ADD [COLUMN] IF NOT
/// EXISTS`, `DROP [COLUMN] IF EXISTS`, `MODIFY/CHANGE [COLUMN] IF EXISTS`,
/// `RENAME COLUMN IF EXISTS`), which sqlparser does not read: the clause
/// without the condition, wrapped in [`AlterOp::IfColumn`]. `None` for any
/// other clause (indexes, keys, constraints and partitions with `IF [NOT]
/// EXISTS` change no column and are skipped by the caller).
fn conditional_column_clause(
    clause: &str,
    default_db: &str,
) -> Result<Option<Vec<AlterOp>>, String> {
    use std::sync::OnceLock;
    static FORMS: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Some(re) = FORMS
        .get_or_init(|| {
            regex::Regex::new(
                r"(?is)^\s*(ADD|DROP|MODIFY|CHANGE|RENAME)(\s+COLUMN)?\s+IF\s+(NOT\s+)?EXISTS\s+(.*)$",
            )
            .ok()
        })
        .as_ref()
    else {
        return Err("internal error: the IF EXISTS pattern does not compile".into());
    };
    let Some(m) = re.captures(clause) else {
        return Ok(None);
    };
    let verb = m[1].to_ascii_uppercase();
    let column_kw = m.get(2).is_some();
    let not = m.get(3).is_some();
    let rest = &m[4];
    let wanted = match (verb.as_str(), not) {
        ("ADD", true) => false,
        ("DROP" | "MODIFY" | "CHANGE", false) => true,
        ("RENAME", false) if column_kw => true,
        _ => {
            return Err(format!(
                "`{clause}`: IF{} EXISTS does not go with {verb}",
                if not { " NOT" } else { "" }
            ))
        }
    };
    let inner = alter_clause(&format!("{verb} COLUMN {rest}"), default_db)?;
    inner
        .into_iter()
        .map(|op| {
            let column = match &op {
                AlterOp::Add(spec, _) => spec.name.clone(),
                AlterOp::Drop(name) => name.clone(),
                AlterOp::Change { old, .. } => old.clone(),
                AlterOp::RenameColumn { old, .. } => old.clone(),
                other => return Err(format!("`{clause}`: unexpected {other:?}")),
            };
            Ok(AlterOp::IfColumn {
                column,
                exists: wanted,
                op: Box::new(op),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Parses one ALTER TABLE clause that sqlparser may not know.
fn alter_clause(clause: &str, default_db: &str) -> Result<Vec<AlterOp>, String> {
    let words: Vec<String> = clause
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if let Some(ops) = conditional_column_clause(clause, default_db)? {
        return Ok(ops);
    }
    // `ADD [CONSTRAINT [name]] PRIMARY KEY IF NOT EXISTS [name] (cols)`.
    if w(0) == "ADD" && words.iter().any(|x| x == "PRIMARY") {
        let upper = clause.to_ascii_uppercase();
        if let (Some(at), Some(open)) = (upper.find(" IF NOT EXISTS"), clause.find('(')) {
            if at < open {
                let without = format!("ADD PRIMARY KEY {}", &clause[open..]);
                return alter_clause(&without, default_db)?
                    .into_iter()
                    .map(|op| match op {
                        AlterOp::AddPrimaryKey(cols) => Ok(AlterOp::AddPrimaryKeyIfNone(cols)),
                        other => Err(format!("`{clause}`: unexpected {other:?}")),
                    })
                    .collect();
            }
        }
    }
    // `RENAME [TO | AS] name`: sqlparser needs the TO or AS.
    if w(0) == "RENAME" && !matches!(w(1), "COLUMN" | "INDEX" | "KEY") {
        let mut t = Tokens {
            tokens: tokenize(clause),
            pos: 1,
        };
        let _ = t.keyword("TO") || t.keyword("AS");
        let name = t
            .table_name(default_db)
            .ok_or_else(|| format!("`{clause}`: no new table name"))?;
        if t.pos != t.tokens.len() {
            return Err(format!(
                "`{clause}`: unexpected text after the new table name"
            ));
        }
        return Ok(vec![AlterOp::RenameTo(name)]);
    }
    if w(0) == "CONVERT" && w(1) == "TO" {
        return charset_option(clause)
            .map(|cs| vec![AlterOp::ConvertCharset(cs)])
            .ok_or_else(|| format!("cannot read the charset of `{clause}`"));
    }
    let first = w(0).split('=').next().unwrap_or("").to_string();
    if matches!(
        first.as_str(),
        "DEFAULT" | "CHARACTER" | "CHARSET" | "COLLATE"
    ) && (w(0) != "DEFAULT"
        || matches!(
            w(1).split('=').next().unwrap_or(""),
            "CHARACTER" | "CHARSET" | "COLLATE"
        ))
    {
        return charset_option(clause)
            .map(|cs| vec![AlterOp::DefaultCharset(cs)])
            .ok_or_else(|| format!("cannot read the charset of `{clause}`"));
    }
    const TABLE_OPTIONS: &[&str] = &[
        "ENGINE",
        "AUTO_INCREMENT",
        "COMMENT",
        "ROW_FORMAT",
        "KEY_BLOCK_SIZE",
        "AVG_ROW_LENGTH",
        "CHECKSUM",
        "MAX_ROWS",
        "MIN_ROWS",
        "PACK_KEYS",
        "STATS_AUTO_RECALC",
        "STATS_PERSISTENT",
        "STATS_SAMPLE_PAGES",
        "ALGORITHM",
        "LOCK",
        "FORCE",
        "ORDER",
        "PAGE_CHECKSUM",
        "TRANSACTIONAL",
        "ENCRYPTED",
        "ENCRYPTION_KEY_ID",
        "PAGE_COMPRESSED",
        "PAGE_COMPRESSION_LEVEL",
        "SEQUENCE",
        "WITH",
        "WITHOUT",
        "DISCARD",
        "IMPORT",
        "ENABLE",
        "DISABLE",
        "ANALYZE",
        "OPTIMIZE",
        "REBUILD",
        "REPAIR",
        "COALESCE",
        "REORGANIZE",
        "EXCHANGE",
        "TRUNCATE",
        "REMOVE",
        "UPGRADE",
        "PARTITION",
        "VALIDATION",
        "DELAY_KEY_WRITE",
        "INSERT_METHOD",
        "UNION",
        "DATA",
        "INDEX",
        "CONNECTION",
        "PASSWORD",
        "TABLESPACE",
        "STORAGE",
        "COMPRESSION",
        "IETF_QUOTES",
        "SECONDARY_ENGINE",
        "AUTOEXTEND_SIZE",
    ];
    if TABLE_OPTIONS.contains(&first.as_str()) {
        return Ok(vec![]);
    }
    // `ADD [COLUMN] (a INT, b INT)`: several columns in one clause.
    if w(0) == "ADD" {
        let after_add = clause.trim_start()[3..].trim_start();
        let body = if w(1) == "COLUMN" {
            after_add[6..].trim_start()
        } else {
            after_add
        };
        if body.starts_with('(') && body.ends_with(')') {
            let mut ops = Vec::new();
            for col in split_top_level(&body[1..body.len() - 1]) {
                ops.extend(alter_clause(&format!("ADD COLUMN {col}"), default_db)?);
            }
            return Ok(ops);
        }
        // `ADD INDEX/KEY/UNIQUE/FULLTEXT/SPATIAL/FOREIGN/CONSTRAINT …` other than PRIMARY KEY.
        if matches!(
            w(1),
            "INDEX"
                | "KEY"
                | "UNIQUE"
                | "FULLTEXT"
                | "SPATIAL"
                | "FOREIGN"
                | "CHECK"
                | "PERIOD"
                | "SYSTEM"
                | "PARTITION"
        ) || (w(1) == "CONSTRAINT" && !words.iter().any(|x| x == "PRIMARY"))
        {
            return Ok(vec![]);
        }
    }
    if w(0) == "DROP"
        && matches!(
            w(1),
            "INDEX" | "KEY" | "FOREIGN" | "CONSTRAINT" | "CHECK" | "PARTITION" | "SYSTEM"
        )
    {
        return Ok(vec![]);
    }
    if w(0) == "ALTER" && matches!(w(1), "INDEX" | "CHECK" | "CONSTRAINT") {
        return Ok(vec![]);
    }
    if w(0) == "RENAME" && matches!(w(1), "INDEX" | "KEY") {
        return Ok(vec![]);
    }
    let sql = format!("ALTER TABLE _sluice_t {clause}");
    let stmts =
        Parser::parse_sql(&MySqlDialect {}, &sql).map_err(|e| format!("`{clause}`: {e}"))?;
    let mut ops = Vec::new();
    for stmt in &stmts {
        if let Statement::AlterTable(at) = stmt {
            for op in &at.operations {
                ops.extend(alter_op(op, default_db)?);
            }
        }
    }
    Ok(ops)
}

/// Parses a DDL statement into the changes it makes. `Ok(vec![])` for
/// statements that change no table (GRANT, views, routines, users, …);
/// `Err` with the reason when the statement looks like table DDL but cannot
/// be read.
pub fn parse_ddl(statement: &str, default_db: &str) -> Result<Vec<Change>, String> {
    let sql = normalize_mariadb(&unwrap_executable_comments(statement));
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
            let mut in_order_by = false;
            for clause in split_top_level(&sql[head..]) {
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
            return Ok(vec![Change::Alter { table, ops }]);
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

/// `CREATE TABLE name (…) options`: the column list is parsed by sqlparser
/// without the table options and partitioning, which it reads only in part
/// (MariaDB's `PAGE_COMPRESSED=1`, `WITH SYSTEM VERSIONING`, …); the default
/// charset is read from the options. `None` for other statements.
fn create_with_column_list(sql: &str, default_db: &str) -> Result<Option<Change>, String> {
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
            replace,
            if_not_exists,
            ..
        }) => Some(Change::Create {
            table,
            columns,
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

/// Whether an ALTER TABLE clause is a further column of a preceding
/// `ORDER BY` (`col`, `t.col`, with `ASC`/`DESC`).
fn is_order_by_item(clause: &str) -> bool {
    let tokens = tokenize(clause);
    let mut rest = tokens.as_slice();
    match rest {
        [Token::Word(_), Token::Punct('.'), Token::Word(_), tail @ ..]
        | [Token::Word(_), tail @ ..] => rest = tail,
        _ => return false,
    }
    match rest {
        [] => true,
        [Token::Word(w)] => w.eq_ignore_ascii_case("ASC") || w.eq_ignore_ascii_case("DESC"),
        _ => false,
    }
}

/// Byte offset in `sql` where the clauses of `ALTER … TABLE name` begin.
fn sql_table_clause_start(sql: &str) -> Option<usize> {
    // Walk the same tokens as the scanner, tracking byte offsets.
    let upper = sql.to_ascii_uppercase();
    let table_kw = upper.find("TABLE")?;
    let mut i = table_kw + 5;
    let bytes = sql.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && (bytes[i] as char).is_whitespace() {
            i += 1;
        }
        i
    };
    i = skip_ws(i);
    if upper[i..].starts_with("IF EXISTS") {
        i = skip_ws(i + 9);
    }
    // One or two (qualified) identifiers.
    let ident_end = |mut i: usize| -> usize {
        if bytes.get(i) == Some(&b'`') {
            i += 1;
            while i < bytes.len() {
                if bytes[i] == b'`' {
                    if bytes.get(i + 1) == Some(&b'`') {
                        i += 2;
                        continue;
                    }
                    return i + 1;
                }
                i += 1;
            }
            i
        } else {
            while i < bytes.len()
                && ((bytes[i] as char).is_alphanumeric()
                    || bytes[i] == b'_'
                    || bytes[i] == b'$'
                    || bytes[i] >= 0x80)
            {
                i += 1;
            }
            i
        }
    };
    i = ident_end(i);
    let j = skip_ws(i);
    if bytes.get(j) == Some(&b'.') {
        i = ident_end(skip_ws(j + 1));
    }
    Some(i)
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    fn t(d: &str, n: &str) -> TableName {
        (d.to_string(), n.to_string())
    }

    #[test]
    fn create_with_types_charsets_and_primary_key() {
        let c = parse_ddl(
            "CREATE TABLE IF NOT EXISTS `t1` (id INT NOT NULL AUTO_INCREMENT, name VARCHAR(20) CHARACTER SET latin1 \
             COLLATE latin1_bin DEFAULT 'x' COMMENT 'c', e ENUM('a','b''c') NOT NULL, u BIGINT UNSIGNED, \
             k VARCHAR(5) COLLATE utf8mb4_bin, PRIMARY KEY (id), KEY k (name)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb3",
            "shop",
        )
        .unwrap();
        let Change::Create {
            table,
            columns,
            charset,
            if_not_exists,
            ..
        } = &c[0]
        else {
            panic!("{c:?}")
        };
        assert_eq!(table, &t("shop", "t1"));
        assert!(*if_not_exists);
        assert_eq!(charset.as_deref(), Some("utf8mb3"));
        assert_eq!(columns.len(), 5);
        assert!(columns[0].primary_key && !columns[0].nullable);
        assert_eq!(columns[1].charset.as_deref(), Some("latin1"));
        assert_eq!(
            columns[2].mysql_type.to_ascii_lowercase(),
            "enum('a', 'b''c')"
        );
        assert_eq!(columns[3].mysql_type, "BIGINT UNSIGNED");
        assert_eq!(columns[4].charset.as_deref(), Some("utf8mb4"));
    }

    #[test]
    fn mariadb_address_types_in_create_and_alter() {
        let c = parse_ddl(
            "CREATE TABLE t (id INT PRIMARY KEY, a INET4, b inet6 NOT NULL, c UUID DEFAULT NULL)",
            "shop",
        )
        .unwrap();
        let Change::Create { columns, .. } = &c[0] else {
            panic!("{c:?}")
        };
        let kinds: Vec<_> = columns
            .iter()
            .map(|c| crate::schema::types::kind_from_type(&c.mysql_type, None).unwrap())
            .collect();
        use crate::schema::ColumnKind as K;
        assert_eq!(kinds[1..], [K::Inet4, K::Inet6, K::Uuid]);
        let c = parse_ddl(
            "ALTER TABLE t ADD b2 UUID, ADD COLUMN a2 INET6 AFTER id",
            "shop",
        )
        .unwrap();
        let Change::Alter { ops, .. } = &c[0] else {
            panic!("{c:?}")
        };
        let added: Vec<String> = ops
            .iter()
            .filter_map(|o| match o {
                AlterOp::Add(s, _) => Some(s.mysql_type.to_ascii_lowercase()),
                _ => None,
            })
            .collect();
        assert_eq!(added, ["uuid", "inet6"]);
    }

    #[test]
    fn multi_clause_alter_with_options_sqlparser_lacks() {
        let c = parse_ddl(
            "/* a comment */ ALTER  TABLE shop.`t1`\n ADD COLUMN c INT AFTER id, DROP COLUMN name, ENGINE=InnoDB, \
             MODIFY e ENUM('a','b','c') FIRST, CHANGE COLUMN s s2 SET('x') NULL, RENAME COLUMN d TO d2, \
             ADD PRIMARY KEY (id, c), ADD INDEX ix (c), ALGORITHM=INPLACE, DROP PRIMARY KEY, \
             CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, DEFAULT CHARSET=latin1, \
             ADD COLUMN (x1 INT, x2 TEXT), RENAME TO t9",
            "db",
        )
        .unwrap();
        let Change::Alter { table, ops } = &c[0] else {
            panic!("{c:?}")
        };
        assert_eq!(table, &t("shop", "t1"));
        let kinds: Vec<String> = ops
            .iter()
            .map(|o| match o {
                AlterOp::Add(s, p) => format!("add {} {p:?}", s.name),
                AlterOp::Drop(n) => format!("drop {n}"),
                AlterOp::Change {
                    old,
                    column,
                    position,
                } => format!("change {old}->{} {position:?}", column.name),
                AlterOp::RenameColumn { old, new } => format!("rename {old}->{new}"),
                AlterOp::AddPrimaryKey(c) | AlterOp::AddPrimaryKeyIfNone(c) => format!("pk {c:?}"),
                AlterOp::DropPrimaryKey => "droppk".into(),
                AlterOp::RenameTo(t) => format!("to {}.{}", t.0, t.1),
                AlterOp::ConvertCharset(c) => format!("convert {c}"),
                AlterOp::DefaultCharset(c) => format!("default {c}"),
                AlterOp::IfColumn { column, .. } => format!("if {column}"),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                "add c After(\"id\")",
                "drop name",
                "change e->e First",
                "change s->s2 Last",
                "rename d->d2",
                "pk [\"id\", \"c\"]",
                "droppk",
                "convert utf8mb4",
                "default latin1",
                "add x1 Last",
                "add x2 Last",
                "to db.t9",
            ]
        );
    }

    #[test]
    fn rename_drop_truncate_databases() {
        assert_eq!(
            parse_ddl("RENAME TABLE a TO b, c.d TO e.f", "s").unwrap(),
            vec![Change::Rename(vec![
                (t("s", "a"), t("s", "b")),
                (t("c", "d"), t("e", "f"))
            ])]
        );
        assert_eq!(
            parse_ddl(
                "DROP TABLE IF EXISTS `a`, b.c /* generated by server */",
                "s"
            )
            .unwrap(),
            vec![Change::Drop(vec![t("s", "a"), t("b", "c")])]
        );
        assert_eq!(
            parse_ddl("TRUNCATE a", "s").unwrap(),
            vec![Change::Truncate(t("s", "a"))]
        );
        assert_eq!(
            parse_ddl("CREATE DATABASE x CHARACTER SET latin1", "s").unwrap(),
            vec![Change::CreateDatabase {
                db: "x".into(),
                charset: Some("latin1".into())
            }]
        );
        assert_eq!(
            parse_ddl("DROP DATABASE IF EXISTS x", "s").unwrap(),
            vec![Change::DropDatabase("x".into())]
        );
        assert_eq!(
            parse_ddl("CREATE TABLE t2 LIKE x.t1", "s").unwrap(),
            vec![Change::CreateLike {
                table: t("s", "t2"),
                like: t("x", "t1"),
                if_not_exists: false
            }]
        );
        assert_eq!(
            parse_ddl("CREATE TABLE t4 SELECT * FROM t1", "s").unwrap(),
            vec![Change::CreateAsSelect {
                table: t("s", "t4")
            }]
        );
    }

    #[test]
    fn statements_that_change_no_table() {
        for s in [
            "GRANT SELECT ON *.* TO x",
            "CREATE USER x IDENTIFIED BY 'y'",
            "CREATE VIEW v AS SELECT 1",
            "CREATE DEFINER=`root`@`localhost` PROCEDURE p() BEGIN SELECT 1; END",
            "CREATE TEMPORARY TABLE tt (a INT)",
            "FLUSH PRIVILEGES",
            "ANALYZE TABLE t",
        ] {
            assert_eq!(parse_ddl(s, "s"), Ok(vec![]), "{s}");
        }
    }

    #[test]
    fn mariadb_spellings_sqlparser_lacks() {
        let c = parse_ddl(
            "ALTER TABLE t MODIFY COLUMN IF EXISTS c BIGINT, ADD d VARCHAR(5) BINARY NOT NULL",
            "s",
        )
        .unwrap();
        let Change::Alter { ops, .. } = &c[0] else {
            panic!("{c:?}")
        };
        assert!(
            matches!(&ops[0], AlterOp::IfColumn { column: c, exists: true, op } if c == "c" && matches!(op.as_ref(), AlterOp::Change { old, column, .. } if old == "c" && column.mysql_type == "BIGINT"))
        );
        assert!(
            matches!(&ops[1], AlterOp::Add(col, _) if col.mysql_type == "VARCHAR(5)" && !col.nullable)
        );
        // A column attribute nobody reads here: an error, never a guess.
        assert!(parse_ddl("ALTER TABLE t ADD COLUMN p POINT REF_SYSTEM_ID=4326", "s").is_err());
    }

    #[test]
    fn executable_comments_are_read() {
        let c = parse_ddl("/*!40000 ALTER TABLE t ADD COLUMN x INT */", "s").unwrap();
        assert_eq!(
            c,
            vec![Change::Alter {
                table: t("s", "t"),
                ops: vec![AlterOp::Add(
                    ColumnSpec {
                        name: "x".into(),
                        mysql_type: "INT".into(),
                        charset: None,
                        nullable: true,
                        primary_key: false
                    },
                    ColumnPosition::Last,
                )]
            }]
        );
    }
}
