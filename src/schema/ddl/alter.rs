//! ALTER TABLE, split into clauses and read one by one.

use sqlparser::ast::{
    AlterTableOperation, ColumnOption, MySQLColumnPosition, RenameTableNameKind, Statement,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use super::create::{
    charset_option, column_spec, constraint_primary_key, constraint_unique, object_name,
    spec_options,
};
use super::scan::{tokenize, Token, Tokens};
use super::{AlterOp, ColumnPosition, ColumnSpec, UniqueSpec};

fn position(p: &Option<MySQLColumnPosition>) -> ColumnPosition {
    match p {
        None => ColumnPosition::Last,
        Some(MySQLColumnPosition::First) => ColumnPosition::First,
        Some(MySQLColumnPosition::After(id)) => ColumnPosition::After(id.value.clone()),
    }
}

/// Splits at top-level commas (outside parentheses and quotes).
pub(super) fn split_top_level(s: &str) -> Vec<String> {
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
        key_position: None,
        unique: false,
        generated: false,
        fills_rows: false,
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
            match (
                constraint_primary_key(constraint),
                constraint_unique(constraint),
            ) {
                (Some(cols), _) => vec![AlterOp::AddPrimaryKey(cols)],
                (None, Some(unique)) => vec![AlterOp::AddUnique(unique)],
                (None, None) => vec![],
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
/// `RENAME COLUMN IF EXISTS`, `ALTER [COLUMN] IF EXISTS`), which sqlparser does not read: the clause
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
                r"(?is)^\s*(ADD|DROP|MODIFY|CHANGE|RENAME|ALTER)(\s+COLUMN)?\s+IF\s+(NOT\s+)?EXISTS\s+(.*)$",
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
        ("DROP" | "MODIFY" | "CHANGE" | "ALTER", false) => true,
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

/// The clauses that add, drop or rename a unique index (sqlparser reads
/// only some of their forms): `ADD [CONSTRAINT [c]] UNIQUE [KEY | INDEX]
/// [IF NOT EXISTS] [name] [USING t] (parts) [options]`, `DROP {INDEX | KEY
/// | CONSTRAINT} [IF EXISTS] name`, `RENAME {INDEX | KEY} old TO new`.
/// `None` for any other clause, and for a unique key on an expression
/// (MySQL's functional key parts), which cannot key rows.
fn index_clause(clause: &str) -> Option<AlterOp> {
    let mut t = Tokens {
        tokens: tokenize(clause),
        pos: 0,
    };
    let name = |t: &mut Tokens| match t.tokens.get(t.pos) {
        Some(Token::Word(w)) => {
            t.pos += 1;
            Some(w.clone())
        }
        _ => None,
    };
    if t.keyword("DROP") {
        if !(t.keyword("INDEX") || t.keyword("KEY") || t.keyword("CONSTRAINT")) {
            return None;
        }
        t.keywords(&["IF", "EXISTS"]);
        let index = name(&mut t)?;
        return Some(if index.eq_ignore_ascii_case("PRIMARY") {
            AlterOp::DropPrimaryKey
        } else {
            AlterOp::DropIndex(index)
        });
    }
    if t.keyword("RENAME") {
        if !(t.keyword("INDEX") || t.keyword("KEY")) {
            return None;
        }
        let old = name(&mut t)?;
        t.keyword("TO").then_some(())?;
        let new = name(&mut t)?;
        return Some(AlterOp::RenameIndex { old, new });
    }
    if !t.keyword("ADD") {
        return None;
    }
    let mut constraint = None;
    if t.keyword("CONSTRAINT")
        && !matches!(t.tokens.get(t.pos), Some(Token::Word(w)) if w.eq_ignore_ascii_case("UNIQUE"))
    {
        constraint = name(&mut t);
    }
    if !t.keyword("UNIQUE") {
        return None;
    }
    let _ = t.keyword("KEY") || t.keyword("INDEX");
    t.keywords(&["IF", "NOT", "EXISTS"]);
    let mut using_hash = false;
    let mut using = |t: &mut Tokens| {
        if t.keyword("USING") || t.keyword("TYPE") {
            using_hash |= t.keyword("HASH");
            t.keyword("BTREE");
        }
    };
    let unnamed = match t.tokens.get(t.pos) {
        Some(Token::Punct('(')) => true,
        Some(Token::Word(w)) => w.eq_ignore_ascii_case("USING"),
        _ => false,
    };
    let index = if unnamed { None } else { name(&mut t) };
    using(&mut t);
    if !t.punct('(') {
        return None;
    }
    let mut parts = Vec::new();
    loop {
        let column = name(&mut t)?;
        let mut prefix = None;
        if t.punct('(') {
            prefix = match t.tokens.get(t.pos) {
                Some(Token::Word(n)) => n.parse().ok(),
                _ => None,
            };
            t.pos += 1;
            t.punct(')').then_some(())?;
        }
        let _ = t.keyword("ASC") || t.keyword("DESC");
        parts.push((column, prefix));
        if t.punct(')') {
            break;
        }
        t.punct(',').then_some(())?;
    }
    using(&mut t);
    Some(AlterOp::AddUnique(UniqueSpec {
        name: index.or(constraint),
        parts,
        using_hash,
    }))
}

/// Parses one ALTER TABLE clause that sqlparser may not know.
pub(super) fn alter_clause(clause: &str, default_db: &str) -> Result<Vec<AlterOp>, String> {
    let words: Vec<String> = clause
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if let Some(ops) = conditional_column_clause(clause, default_db)? {
        return Ok(ops);
    }
    // `DROP CONSTRAINT [IF EXISTS] PRIMARY [KEY]`: the primary key's name is PRIMARY.
    if w(0) == "DROP" && w(1) == "CONSTRAINT" {
        let name = if w(2) == "IF" && w(3) == "EXISTS" {
            w(4)
        } else {
            w(2)
        };
        if name.trim_matches('`') == "PRIMARY" {
            return Ok(vec![AlterOp::DropPrimaryKey]);
        }
    }
    if let Some(op) = index_clause(clause) {
        return Ok(vec![op]);
    }
    // `ADD [COLUMN] (a INT, b INT)`: one ADD per column.
    if w(0) == "ADD" {
        let rest = clause.trim_start()[3..].trim_start();
        let rest = match rest.get(..6) {
            Some(k) if k.eq_ignore_ascii_case("COLUMN") => rest[6..].trim_start(),
            _ => rest,
        };
        if let Some(list) = rest
            .strip_prefix('(')
            .and_then(|r| r.trim_end().strip_suffix(')'))
        {
            let mut ops = Vec::new();
            for column in split_top_level(list) {
                ops.extend(alter_clause(&format!("ADD COLUMN {column}"), default_db)?);
            }
            return Ok(ops);
        }
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
            "INDEX"
                | "KEY"
                | "FOREIGN"
                | "CONSTRAINT"
                | "CHECK"
                | "PARTITION"
                | "SYSTEM"
                | "PERIOD"
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

/// Whether an ALTER TABLE clause is a further column of a preceding
/// `ORDER BY` (`col`, `t.col`, with `ASC`/`DESC`).
pub(super) fn is_order_by_item(clause: &str) -> bool {
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
pub(super) fn sql_table_clause_start(sql: &str) -> Option<usize> {
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
