//! Row changes logged as SQL text. A session with `binlog_format = STATEMENT`
//! (or MIXED, for statements the server deems safe) logs an INSERT, UPDATE,
//! DELETE, REPLACE or LOAD DATA as a Query event instead of rows events,
//! whatever the global setting the preflight checked. sluice cannot turn the
//! text into rows, so such a statement on a captured table must stop the
//! stream rather than be skipped. [`statement_dml`] says whether a statement
//! is one and which tables it writes (not those it only reads).
//!
//! sqlparser (MySQL dialect) reads the statement; when it cannot, a token
//! scan finds the target after `INSERT/REPLACE … INTO`, `UPDATE` or
//! `LOAD DATA … INTO TABLE`, or `DELETE FROM`. A statement whose targets
//! neither finds counts as touching a captured table.

use sqlparser::ast::{
    Delete, FromTable, ObjectName, Statement, TableFactor, TableObject, TableWithJoins,
    UpdateTableFromKind,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::config::TableFilter;
use crate::error::{Error, Result};

/// `(database, table)`, qualified with the statement's default database.
pub type TableName = (String, String);

/// A data-changing statement found in a Query event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementDml {
    /// `INSERT`, `REPLACE`, `UPDATE`, `DELETE` or `LOAD DATA`.
    pub verb: &'static str,
    /// The tables it writes; `None` when the statement could not be read
    /// well enough to tell.
    pub tables: Option<Vec<TableName>>,
}

impl StatementDml {
    /// Whether it may write a table that `captured` accepts. Unknown
    /// targets count as captured: a guess would risk a silent loss.
    pub fn writes_any(&self, mut captured: impl FnMut(&TableName) -> bool) -> bool {
        match &self.tables {
            Some(tables) => tables.iter().any(&mut captured),
            None => true,
        }
    }
}

/// Stops the stream at a row change logged as a statement on a captured
/// table (a definite error naming the table, the position and the
/// setting); any other statement passes.
pub fn refuse_captured(
    statement: &str,
    default_db: &str,
    filter: &TableFilter,
    file: &str,
    pos: u64,
) -> Result<()> {
    let Some(dml) = statement_dml(statement, default_db) else {
        return Ok(());
    };
    if !dml.writes_any(|(db, table)| filter.captures(db, table)) {
        return Ok(());
    }
    let tables = match &dml.tables {
        Some(tables) => tables
            .iter()
            .filter(|(db, table)| filter.captures(db, table))
            .map(|(db, table)| format!("captured table {db}.{table}"))
            .collect::<Vec<_>>()
            .join(", "),
        None => "tables sluice cannot tell apart from captured ones".to_string(),
    };
    const SHOWN: usize = 200;
    let mut shown: String = statement.chars().take(SHOWN).collect();
    if shown.len() < statement.len() {
        shown.push('…');
    }
    Err(Error::decode(
        file,
        pos,
        format!(
            "{verb} on {tables} was logged as a statement, not as rows (binlog_format = STATEMENT or MIXED in the session that ran it, or on MariaDB a table with transaction-precise system versioning, `ROW START` of type BIGINT UNSIGNED, whose changes are always logged as statements), so its row changes are not in the binlog: `{shown}`; set binlog_format = ROW globally and in every session that writes captured tables (or version the table by TIMESTAMP), then exclude the table or start a new lake after this position",
            verb = dml.verb,
            shown = shown.replace('\n', " "),
        ),
    ))
}

/// Whether `statement` (run with default database `default_db`) changes
/// rows, and which tables; `None` for anything else (DDL, BEGIN, SAVEPOINT,
/// GRANT, SET, ...).
pub fn statement_dml(statement: &str, default_db: &str) -> Option<StatementDml> {
    let tokens = words(statement);
    let verb = match tokens.first().map(|w| w.to_ascii_uppercase()).as_deref() {
        Some("INSERT") => "INSERT",
        Some("REPLACE") => "REPLACE",
        Some("UPDATE") => "UPDATE",
        Some("DELETE") => "DELETE",
        Some("LOAD") if tokens.get(1).is_some_and(|w| is_any(w, &["DATA", "XML"])) => "LOAD DATA",
        // `WITH … UPDATE/DELETE` (MySQL 8): the verb follows the CTEs.
        Some("WITH") => {
            let parsed = parsed_targets(statement, default_db);
            return match parsed {
                Some(Some(dml)) => Some(dml),
                Some(None) => None,
                None => tokens
                    .iter()
                    .find_map(|w| {
                        ["INSERT", "REPLACE", "UPDATE", "DELETE"]
                            .into_iter()
                            .find(|v| w.eq_ignore_ascii_case(v))
                    })
                    .map(|verb| StatementDml { verb, tables: None }),
            };
        }
        _ => return None,
    };
    match parsed_targets(statement, default_db) {
        Some(Some(dml)) => Some(dml),
        // The verb says DML; whatever sqlparser made of it, scan for the target.
        _ => Some(StatementDml {
            verb,
            tables: scanned_target(verb, statement, default_db).map(|t| vec![t]),
        }),
    }
}

/// What sqlparser reads: `None` when it cannot parse the statement,
/// `Some(None)` when it parses to something that writes no rows.
fn parsed_targets(statement: &str, default_db: &str) -> Option<Option<StatementDml>> {
    let parsed = Parser::parse_sql(&MySqlDialect {}, statement).ok()?;
    let [stmt] = parsed.as_slice() else {
        return None;
    };
    let stmt = match stmt {
        Statement::Query(q) => match q.body.as_ref() {
            sqlparser::ast::SetExpr::Insert(s)
            | sqlparser::ast::SetExpr::Update(s)
            | sqlparser::ast::SetExpr::Delete(s) => s,
            _ => return Some(None),
        },
        other => other,
    };
    let name = |n: &ObjectName| table_name(n, default_db);
    let dml = match stmt {
        Statement::Insert(insert) => {
            let TableObject::TableName(n) = &insert.table else {
                return None;
            };
            StatementDml {
                verb: if insert.replace_into {
                    "REPLACE"
                } else {
                    "INSERT"
                },
                tables: name(n).map(|t| vec![t]),
            }
        }
        Statement::Update(update) => {
            // Every table of a multi-table UPDATE counts as written: which
            // ones the SET list really changes depends on column names
            // sluice does not resolve here.
            let mut refs = Vec::new();
            relations(&update.table, &mut refs);
            if let Some(
                UpdateTableFromKind::BeforeSet(list) | UpdateTableFromKind::AfterSet(list),
            ) = &update.from
            {
                list.iter().for_each(|t| relations(t, &mut refs));
            }
            StatementDml {
                verb: "UPDATE",
                tables: refs
                    .iter()
                    .map(|(n, _)| name(n))
                    .collect::<Option<Vec<_>>>(),
            }
        }
        Statement::Delete(delete) => StatementDml {
            verb: "DELETE",
            tables: delete_targets(delete, default_db),
        },
        Statement::LoadData { table_name, .. } => StatementDml {
            verb: "LOAD DATA",
            tables: name(table_name).map(|t| vec![t]),
        },
        _ => return Some(None),
    };
    Some(Some(dml))
}

/// `DELETE FROM t …` writes `t`; `DELETE a, b FROM …` and
/// `DELETE FROM a, b USING …` write `a` and `b`, which may be aliases of
/// the tables joined after them.
fn delete_targets(delete: &Delete, default_db: &str) -> Option<Vec<TableName>> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(list) | FromTable::WithoutKeyword(list) => list,
    };
    let mut refs = Vec::new();
    from.iter().for_each(|t| relations(t, &mut refs));
    delete
        .using
        .iter()
        .flatten()
        .for_each(|t| relations(t, &mut refs));
    let targets: Vec<&ObjectName> = if !delete.tables.is_empty() {
        delete.tables.iter().collect()
    } else if delete.using.is_some() {
        // `DELETE FROM a, b USING …`: the FROM list names the targets.
        from.iter()
            .filter_map(|t| match &t.relation {
                TableFactor::Table { name, .. } => Some(name),
                _ => None,
            })
            .collect()
    } else {
        refs.iter().map(|(n, _)| *n).collect()
    };
    targets
        .into_iter()
        .map(|target| {
            let alias_of = refs.iter().find(|(_, alias)| {
                target.0.len() == 1 && alias.as_deref() == Some(last_part(target).as_str())
            });
            table_name(alias_of.map_or(target, |(n, _)| n), default_db)
        })
        .collect()
}

/// The named tables of a FROM item and its joins, with their aliases.
fn relations<'a>(t: &'a TableWithJoins, out: &mut Vec<(&'a ObjectName, Option<String>)>) {
    for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
        match factor {
            TableFactor::Table { name, alias, .. } => {
                out.push((name, alias.as_ref().map(|a| a.name.value.clone())));
            }
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => relations(table_with_joins, out),
            // Derived tables and functions cannot be written to.
            _ => {}
        }
    }
}

fn last_part(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_default()
}

fn table_name(name: &ObjectName, default_db: &str) -> Option<TableName> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [t] => Some((default_db.to_string(), t.clone())),
        [d, t] => Some((d.clone(), t.clone())),
        _ => None,
    }
}

/// The words of the statement (identifiers unquoted, keywords as written)
/// and its `.` and `,` punctuation, without comments and whitespace.
fn words(statement: &str) -> Vec<String> {
    let Ok(tokens) = Tokenizer::new(&MySqlDialect {}, statement).tokenize() else {
        // Unreadable (an open quote): the leading word still gives the verb.
        let first: String = statement
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        return vec![first];
    };
    tokens
        .into_iter()
        .filter_map(|t| match t {
            Token::Word(w) => Some(w.value),
            Token::Period => Some(".".into()),
            Token::Comma => Some(",".into()),
            Token::LParen => Some("(".into()),
            _ => None,
        })
        .collect()
}

fn is_any(word: &str, list: &[&str]) -> bool {
    list.iter().any(|k| word.eq_ignore_ascii_case(k))
}

/// The first target of a statement sqlparser could not read, from its
/// words: after `INTO` (INSERT, REPLACE), `INTO TABLE` (LOAD DATA), the
/// modifiers of a single-table UPDATE, or `DELETE … FROM` of a single-table
/// DELETE. `None` for anything unclear.
fn scanned_target(verb: &str, statement: &str, default_db: &str) -> Option<TableName> {
    let words = words(statement);
    let mut i = match verb {
        "INSERT" | "REPLACE" => {
            let mut i = 1;
            while words
                .get(i)
                .is_some_and(|w| is_any(w, &["LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"]))
            {
                i += 1;
            }
            i + usize::from(words.get(i).is_some_and(|w| w.eq_ignore_ascii_case("INTO")))
        }
        "UPDATE" => {
            let mut i = 1;
            while words
                .get(i)
                .is_some_and(|w| is_any(w, &["LOW_PRIORITY", "IGNORE"]))
            {
                i += 1;
            }
            // A multi-table UPDATE would need every table: unclear.
            let until_set = words
                .iter()
                .skip(i)
                .take_while(|w| !w.eq_ignore_ascii_case("SET"));
            if until_set
                .clone()
                .any(|w| w == "," || w.eq_ignore_ascii_case("JOIN"))
            {
                return None;
            }
            i
        }
        "DELETE" => {
            let mut i = 1;
            while words
                .get(i)
                .is_some_and(|w| is_any(w, &["LOW_PRIORITY", "QUICK", "IGNORE"]))
            {
                i += 1;
            }
            if !words.get(i).is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
                return None;
            }
            // Only `DELETE FROM name …`: a list or USING names aliases.
            let after = if words.get(i + 2).map(String::as_str) == Some(".") {
                i + 4
            } else {
                i + 2
            };
            if words
                .get(after)
                .is_some_and(|w| w == "," || is_any(w, &["USING", "JOIN"]))
            {
                return None;
            }
            i + 1
        }
        "LOAD DATA" => {
            let at = words.windows(2).position(|w| {
                w[0].eq_ignore_ascii_case("INTO") && w[1].eq_ignore_ascii_case("TABLE")
            })?;
            at + 2
        }
        _ => return None,
    };
    let first = words.get(i)?.clone();
    if first == "(" || first == "," || first == "." {
        return None;
    }
    i += 1;
    if words.get(i).map(String::as_str) == Some(".") {
        let table = words.get(i + 1)?.clone();
        return Some((first, table));
    }
    Some((default_db.to_string(), first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: &str, n: &str) -> TableName {
        (d.to_string(), n.to_string())
    }

    fn targets(sql: &str) -> (&'static str, Option<Vec<TableName>>) {
        let dml = statement_dml(sql, "app").unwrap_or_else(|| panic!("not DML: {sql}"));
        (dml.verb, dml.tables)
    }

    #[test]
    fn single_table_statements_name_their_table_with_the_default_database() {
        assert_eq!(
            targets("INSERT INTO t (a) VALUES (1)"),
            ("INSERT", Some(vec![t("app", "t")]))
        );
        assert_eq!(
            targets("insert ignore into `shop`.`order items` values (1)"),
            ("INSERT", Some(vec![t("shop", "order items")]))
        );
        assert_eq!(
            targets("REPLACE INTO shop.t VALUES (1, 'x')"),
            ("REPLACE", Some(vec![t("shop", "t")]))
        );
        assert_eq!(
            targets("UPDATE shop.t SET v = v + 1 WHERE id IN (SELECT id FROM other.u)"),
            ("UPDATE", Some(vec![t("shop", "t")]))
        );
        assert_eq!(
            targets("DELETE FROM t WHERE id = 3"),
            ("DELETE", Some(vec![t("app", "t")]))
        );
        assert_eq!(
            targets("/* app */ DELETE LOW_PRIORITY QUICK FROM shop.t LIMIT 5"),
            ("DELETE", Some(vec![t("shop", "t")]))
        );
    }

    #[test]
    fn insert_select_writes_only_its_target() {
        assert_eq!(
            targets("INSERT INTO other.copy SELECT * FROM shop.t JOIN shop.u USING (id)"),
            ("INSERT", Some(vec![t("other", "copy")]))
        );
        let dml = statement_dml("INSERT INTO other.copy SELECT * FROM shop.t", "app").unwrap();
        assert!(!dml.writes_any(|(db, _)| db == "shop"));
        assert!(dml.writes_any(|(db, _)| db == "other"));
    }

    #[test]
    fn multi_table_statements_name_every_target_resolving_aliases() {
        assert_eq!(
            targets("UPDATE shop.t a JOIN other.u b ON a.id = b.id SET a.v = b.v"),
            ("UPDATE", Some(vec![t("shop", "t"), t("other", "u")]))
        );
        assert_eq!(
            targets("DELETE a FROM shop.t AS a JOIN other.u AS b ON a.id = b.id"),
            ("DELETE", Some(vec![t("shop", "t")]))
        );
        assert_eq!(
            targets("DELETE b FROM shop.t AS a JOIN other.u AS b ON a.id = b.id"),
            ("DELETE", Some(vec![t("other", "u")]))
        );
        assert_eq!(
            targets("DELETE t1, t2 FROM t1 INNER JOIN t2 INNER JOIN t3 WHERE t1.id = t2.id"),
            ("DELETE", Some(vec![t("app", "t1"), t("app", "t2")]))
        );
        assert_eq!(
            targets("DELETE FROM x USING shop.t AS x JOIN other.u ON x.id = u.id"),
            ("DELETE", Some(vec![t("shop", "t")]))
        );
    }

    #[test]
    fn statements_sqlparser_cannot_read_are_scanned() {
        assert_eq!(
            targets("LOAD DATA LOCAL INFILE '/tmp/x.csv' REPLACE INTO TABLE `shop`.t FIELDS TERMINATED BY ','"),
            ("LOAD DATA", Some(vec![t("shop", "t")]))
        );
        assert_eq!(
            targets("INSERT DELAYED INTO t VALUES (1) RETURNING frob(("),
            ("INSERT", Some(vec![t("app", "t")]))
        );
        // A DELETE it cannot read has unknown targets, which count as captured.
        let dml = statement_dml("DELETE FROM a, b USING a JOIN b WHERE ((", "app").unwrap();
        assert_eq!(dml.tables, None);
        assert!(dml.writes_any(|_| false));
    }

    #[test]
    fn dml_on_a_captured_table_is_a_definite_error_naming_table_position_and_setting() {
        let filter = TableFilter::new(&[r"shop\..*".into()], &[]).unwrap();
        let e = refuse_captured(
            "UPDATE t SET v = 2 WHERE id = 1",
            "shop",
            &filter,
            "binlog.000003",
            1234,
        )
        .unwrap_err();
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(
            text.starts_with("decode at binlog.000003:1234: UPDATE on captured table shop.t ")
                && text.contains("binlog_format = STATEMENT or MIXED")
                && text.contains("set binlog_format = ROW")
                && !text.contains('\n'),
            "{text}"
        );
        // Another database's tables, and statements that are not DML, pass.
        for (sql, db) in [
            ("UPDATE t SET v = 2", "other"),
            ("INSERT INTO other.t SELECT * FROM shop.t", "shop"),
            ("CREATE TABLE shop.n (id INT)", "shop"),
        ] {
            assert!(refuse_captured(sql, db, &filter, "b.1", 4).is_ok(), "{sql}");
        }
    }

    #[test]
    fn other_statements_are_not_dml() {
        for sql in [
            "BEGIN",
            "COMMIT",
            "SAVEPOINT a",
            "ROLLBACK TO SAVEPOINT a",
            "CREATE TABLE t (id INT)",
            "ALTER TABLE shop.t ADD c INT",
            "TRUNCATE TABLE shop.t",
            "GRANT SELECT ON shop.* TO 'x'@'%'",
            "SET @a = 1",
            "SELECT 1",
            "WITH c AS (SELECT 1) SELECT * FROM c",
            "# comment only",
            "LOAD INDEX INTO CACHE t",
        ] {
            assert_eq!(statement_dml(sql, "app"), None, "{sql}");
        }
    }
}
