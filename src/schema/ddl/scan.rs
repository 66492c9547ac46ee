//! The keyword scanner: which tables a statement names, for statements
//! the full parser cannot read (see [`ddl_effect`]).

use super::TableName;

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
pub(super) enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

pub(super) fn tokenize(sql: &str) -> Vec<Token> {
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

pub(super) struct Tokens {
    pub(super) tokens: Vec<Token>,
    pub(super) pos: usize,
}

impl Tokens {
    pub(super) fn keyword(&mut self, kw: &str) -> bool {
        match self.tokens.get(self.pos) {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(kw) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    pub(super) fn keywords(&mut self, kws: &[&str]) -> bool {
        let save = self.pos;
        if kws.iter().all(|k| self.keyword(k)) {
            true
        } else {
            self.pos = save;
            false
        }
    }

    pub(super) fn punct(&mut self, p: char) -> bool {
        if self.tokens.get(self.pos) == Some(&Token::Punct(p)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// `name` or `db.name`.
    pub(super) fn table_name(&mut self, default_db: &str) -> Option<TableName> {
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
