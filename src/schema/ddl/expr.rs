//! Expressions inside column definitions that no shape depends on: a
//! generated column's `AS (…)` and a `CHECK (…)` constraint. The server
//! accepts any expression there (dynamic-column functions such as
//! `COLUMN_GET(c, 1 AS CHAR)`, JSON functions, `CASE … END`), which
//! sqlparser reads only in part; the statement is read without them, each
//! expression skipped by its balanced parentheses (quotes and comments
//! respected) and written as `(0)`, so that the column stays a generated
//! column, or the constraint a constraint, and the rest of the statement
//! parses whatever the expression held.

/// `sql` with the expression of every generated column (`AS (…)`,
/// `GENERATED ALWAYS AS (…)`) and of every `CHECK (…)` replaced by `(0)`.
/// In CREATE TABLE only the column list is rewritten (depth one and below),
/// so that `CREATE TABLE t AS (SELECT …)` keeps its query; ALTER TABLE has
/// no query, and its columns are at depth zero (`ADD c INT AS (…)`) or one
/// (`ADD (c INT AS (…), …)`). A parenthesis that never closes leaves the
/// rest of the statement as it was, for the parser to report.
pub(super) fn without_column_expressions(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let creates = first_word(sql).eq_ignore_ascii_case("CREATE");
    let mut out = String::with_capacity(sql.len());
    let mut depth = 0usize;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(end) = skip_quoted_or_comment(bytes, i) {
            i = end;
            continue;
        }
        match c {
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            c if is_word_byte(c) && (i == 0 || !is_word_byte(bytes[i - 1])) => {
                let end = i + bytes[i..].iter().take_while(|b| is_word_byte(**b)).count();
                let word = &sql[i..end];
                let in_columns = !creates || depth >= 1;
                let introduces = word.eq_ignore_ascii_case("AS") && in_columns
                    || word.eq_ignore_ascii_case("CHECK");
                if introduces {
                    let open = skip_blank(bytes, end);
                    if bytes.get(open) == Some(&b'(') {
                        if let Some(close) = matching_parenthesis(bytes, open) {
                            out.push_str(&sql[copied..end]);
                            out.push_str(" (0)");
                            copied = close + 1;
                            i = close + 1;
                            continue;
                        }
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&sql[copied..]);
    out
}

fn first_word(sql: &str) -> &str {
    let bytes = sql.as_bytes();
    let start = skip_blank(bytes, 0);
    let len = bytes[start..]
        .iter()
        .take_while(|b| is_word_byte(**b))
        .count();
    &sql[start..start + len]
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// The offset after whitespace and comments from `i`.
fn skip_blank(bytes: &[u8], mut i: usize) -> usize {
    loop {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        match skip_quoted_or_comment(bytes, i) {
            Some(end) if !matches!(bytes[i], b'\'' | b'"' | b'`') => i = end,
            _ => return i,
        }
    }
}

/// When a quoted string or name, or a comment, starts at `i`: the offset
/// just after it (the end of the text when it never ends). Strings in
/// single or double quotes take backslash escapes and doubled quotes;
/// backticked names take doubled backticks.
fn skip_quoted_or_comment(bytes: &[u8], i: usize) -> Option<usize> {
    let c = *bytes.get(i)?;
    let next = bytes.get(i + 1).copied();
    match c {
        b'\'' | b'"' | b'`' => {
            let mut j = i + 1;
            while j < bytes.len() {
                match bytes[j] {
                    b'\\' if c != b'`' => j += 2,
                    d if d == c => {
                        if bytes.get(j + 1) == Some(&c) {
                            j += 2;
                        } else {
                            return Some(j + 1);
                        }
                    }
                    _ => j += 1,
                }
            }
            Some(bytes.len())
        }
        b'/' if next == Some(b'*') => Some(
            bytes[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(bytes.len(), |p| i + 2 + p + 2),
        ),
        // `--` starts a comment only when a blank follows, as in MariaDB.
        b'#' => Some(line_end(bytes, i)),
        b'-' if next == Some(b'-') && bytes.get(i + 2).is_none_or(|b| b.is_ascii_whitespace()) => {
            Some(line_end(bytes, i))
        }
        _ => None,
    }
}

fn line_end(bytes: &[u8], i: usize) -> usize {
    bytes[i..]
        .iter()
        .position(|b| *b == b'\n')
        .map_or(bytes.len(), |p| i + p + 1)
}

/// The offset of the `)` that closes the `(` at `open`.
fn matching_parenthesis(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        if let Some(end) = skip_quoted_or_comment(bytes, i) {
            i = end;
            continue;
        }
        match bytes[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::without_column_expressions as strip;

    #[test]
    fn dynamic_column_functions_are_skipped() {
        assert_eq!(
            strip("create table t (dynamic_cols blob, color char(32) as (COLUMN_GET(dynamic_cols, 1 as char)) persistent)"),
            "create table t (dynamic_cols blob, color char(32) as (0) persistent)"
        );
    }

    #[test]
    fn parentheses_and_quotes_inside_strings_are_text() {
        assert_eq!(
            strip(
                r#"CREATE TABLE t (a TEXT, b INT AS (LENGTH(CONCAT(a, ')', '(('))) VIRTUAL, c INT)"#
            ),
            "CREATE TABLE t (a TEXT, b INT AS (0) VIRTUAL, c INT)"
        );
        assert_eq!(
            strip(
                r"CREATE TABLE t (b VARCHAR(9) AS (CONCAT('it''s )', 'a\')b', x)) STORED, c INT)"
            ),
            "CREATE TABLE t (b VARCHAR(9) AS (0) STORED, c INT)"
        );
        assert_eq!(
            strip(r#"CREATE TABLE t (b VARCHAR(9) AS (CONCAT("q"")", "\")")), c INT)"#),
            "CREATE TABLE t (b VARCHAR(9) AS (0), c INT)"
        );
    }

    #[test]
    fn backticked_names_and_comments_inside() {
        assert_eq!(
            strip("CREATE TABLE t (`a)` INT, b INT AS (`a)` /* ) */ + 1 # )\n), c INT)"),
            "CREATE TABLE t (`a)` INT, b INT AS (0), c INT)"
        );
        assert_eq!(
            strip("CREATE TABLE t (b INT AS -- note\n (a -- )\n + 1), c INT)"),
            "CREATE TABLE t (b INT AS (0), c INT)"
        );
        assert_eq!(
            strip("CREATE TABLE t (b INT AS (`x``)` + 1), c INT)"),
            "CREATE TABLE t (b INT AS (0), c INT)"
        );
    }

    #[test]
    fn case_json_and_generated_always() {
        assert_eq!(
            strip("CREATE TABLE t (j JSON, k INT GENERATED ALWAYS AS (CASE WHEN JSON_VALUE(j, '$.a') = ')' THEN 1 ELSE (2) END) VIRTUAL INVISIBLE, PRIMARY KEY (k))"),
            "CREATE TABLE t (j JSON, k INT GENERATED ALWAYS AS (0) VIRTUAL INVISIBLE, PRIMARY KEY (k))"
        );
        assert_eq!(
            strip("ALTER TABLE t ADD x VARCHAR(20) AS (JSON_UNQUOTE(JSON_EXTRACT(j, '$.\"(\"'))) STORED, ADD y INT"),
            "ALTER TABLE t ADD x VARCHAR(20) AS (0) STORED, ADD y INT"
        );
        assert_eq!(
            strip("alter table t add (x int as (a mod 3), y int check (y > 0 and y < (3)))"),
            "alter table t add (x int as (0), y int check (0))"
        );
    }

    #[test]
    fn checks_and_row_periods() {
        assert_eq!(
            strip("CREATE TABLE t (a INT CHECK (a IN (1, ')')), CONSTRAINT c CHECK (COLUMN_CHECK(a)))"),
            "CREATE TABLE t (a INT CHECK (0), CONSTRAINT c CHECK (0))"
        );
        let versioned = "CREATE TABLE t (a INT, s TIMESTAMP(6) AS ROW START, e TIMESTAMP(6) AS ROW END, PERIOD FOR SYSTEM_TIME (s, e))";
        assert_eq!(strip(versioned), versioned);
    }

    #[test]
    fn create_select_keeps_its_query() {
        let q = "CREATE TABLE t AS (SELECT 1 AS a)";
        assert_eq!(strip(q), q);
        let q = "CREATE TABLE t (b INT AS (a)) AS SELECT 1 AS a";
        assert_eq!(strip(q), "CREATE TABLE t (b INT AS (0)) AS SELECT 1 AS a");
    }

    #[test]
    fn unbalanced_is_left_for_the_parser() {
        let q = "CREATE TABLE t (b INT AS (a + (1), c INT";
        assert_eq!(strip(q), q);
        let q = "CREATE TABLE t (b INT AS ('a)";
        assert_eq!(strip(q), q);
    }
}
