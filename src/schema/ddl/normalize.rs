//! Rewrites of the statement text before it is parsed: executable comments
//! and the MariaDB spellings sqlparser does not read.

/// The server that ran a statement: it decides which executable comments
/// (`/*!50100 … */`, `/*M!100500 … */`) were part of the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerVersion {
    pub mariadb: bool,
    /// `major * 10000 + minor * 100 + patch`, as the comments write it.
    pub id: u32,
}

impl ServerVersion {
    /// From `@@version` or a format description event (`10.11.19-MariaDB-log`,
    /// `8.0.36`); `None` when it does not start with a version number.
    pub fn parse(version: &str) -> Option<ServerVersion> {
        let numbers: Vec<u32> = version
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .next()?
            .split('.')
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        let [major, minor, patch, ..] = numbers[..] else {
            return None;
        };
        Some(ServerVersion {
            mariadb: version.to_ascii_lowercase().contains("mariadb"),
            id: major.checked_mul(10_000)? + minor.min(99) * 100 + patch.min(99),
        })
    }

    /// Whether the body of a comment opened by `marker` (`!` or `M!`) with
    /// the version number `needs` was executed.
    fn executes(&self, marker: &str, needs: Option<u32>) -> bool {
        (marker == "/*!" || self.mariadb) && needs.is_none_or(|n| n <= self.id)
    }
}

/// Removes the markers of the executable comments the server executed
/// (`/*!40101 … */`, `/*M!100500 … */`, all of them when the server is
/// unknown) so their content is parsed, and drops the others with their
/// content as the server did; plain comments stay for the parser to skip.
pub(super) fn unwrap_executable_comments(sql: &str, server: Option<ServerVersion>) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    let mut open = 0;
    loop {
        let next_open = ["/*!", "/*M!"]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, *m)))
            .min();
        let next_close = if open > 0 { rest.find("*/") } else { None };
        match (next_open, next_close) {
            (Some((o, marker)), c) if c.is_none_or(|c| o < c) => {
                out.push_str(&rest[..o]);
                rest = &rest[o + marker.len()..];
                // A version is 5 digits, or 6 (MariaDB 10 and later).
                let digits = rest.bytes().take(6).take_while(u8::is_ascii_digit).count();
                let needs = (digits >= 5).then(|| rest[..digits].parse().ok()).flatten();
                if digits >= 5 {
                    rest = &rest[digits..];
                }
                if server.is_none_or(|s| s.executes(marker, needs)) {
                    open += 1;
                } else {
                    // Not executed: a plain comment, gone with its content.
                    rest = rest.find("*/").map_or("", |c| &rest[c + 2..]);
                    out.push(' ');
                }
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
pub(super) fn normalize_mariadb(sql: &str) -> String {
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
            // System versioning: the columns stay, NOT NULL; their role is
            // no part of the shape.
            (
                r"(?i)\s+(GENERATED\s+ALWAYS\s+)?AS\s+ROW\s+(START|END)\b",
                " NOT NULL",
            ),
            // Periods (system time, application time) name columns, and add none.
            (r"(?i),\s*PERIOD\s+FOR\s+(\w+|`[^`]*`)\s*\([^)]*\)", ""),
            (r"(?i)\bWITH(OUT)?\s+SYSTEM\s+VERSIONING\b", ""),
            // `CHARSET x` is MariaDB's synonym of `CHARACTER SET x`.
            (
                r"(?i)([\w)])\s+CHARSET\s+([\w`'\x22])",
                "${1} CHARACTER SET ${2}",
            ),
            // `a mod 3`: MOD as an operator is `%`.
            (r"(?i)([\w)])\s+MOD\s+", "$1 % "),
        ]
        .into_iter()
        .filter_map(|(re, to)| regex::Regex::new(re).ok().map(|r| (r, to)))
        .collect()
    });
    let mut out = sql.to_string();
    for (re, to) in rules {
        out = re.replace_all(&out, *to).into_owned();
    }
    outside_quotes(&out, |plain| {
        qualified_column_names(&digit_names(&type_spellings(&without_attributes(plain))))
    })
}

/// Drops the column attributes that change no type (`INVISIBLE`, `VISIBLE`,
/// `COMPRESSED[=method]`) where they follow a type or another attribute, and
/// keeps them where they are a name (`CREATE TABLE compressed`,
/// `(a INT, invisible INT INVISIBLE)`, `CHANGE COLUMN invisible …`).
fn without_attributes(sql: &str) -> String {
    use std::sync::OnceLock;
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Some(re) = RE
        .get_or_init(|| {
            regex::Regex::new(r"(?i)(\S+)(\s+)(INVISIBLE|VISIBLE|COMPRESSED(\s*=\s*\w+)?)\b").ok()
        })
        .as_ref()
    else {
        return sql.to_string();
    };
    const NAMING: &[&str] = &[
        "TABLE", "COLUMN", "ADD", "DROP", "CHANGE", "MODIFY", "AFTER", "TO", "AS", "EXISTS",
        "LIKE", "KEY", "INDEX", "BY", "RENAME", "FROM", "INTO", "ON", "ALTER", "TABLES",
    ];
    re.replace_all(sql, |c: &regex::Captures| {
        let before = &c[1];
        let names =
            before.ends_with([',', '(']) || NAMING.iter().any(|k| before.eq_ignore_ascii_case(k));
        if names {
            c[0].to_string()
        } else {
            format!("{before}{}", &c[2])
        }
    })
    .into_owned()
}

/// Names that start with digits (`1ea10`, `1e`), which MariaDB accepts unquoted
/// when they are not numbers, quoted for sqlparser, which reads them as numbers.
fn digit_names(sql: &str) -> String {
    use std::sync::OnceLock;
    static RE: OnceLock<Option<(regex::Regex, regex::Regex)>> = OnceLock::new();
    let Some((word, number)) = RE
        .get_or_init(|| {
            Some((
                regex::Regex::new(r"\b([0-9]+[A-Za-z_$][0-9A-Za-z_$]*)(\s*[+-]\s*[0-9])?").ok()?,
                regex::Regex::new(r"(?i)^(0x[0-9a-f]+|0b[01]+|[0-9]+e[0-9]*)$").ok()?,
            ))
        })
        .as_ref()
    else {
        return sql.to_string();
    };
    word.replace_all(sql, |c: &regex::Captures| {
        let name = &c[1];
        let exponent = c.get(2).is_some() && name.to_ascii_lowercase().ends_with('e');
        if number.is_match(name) && (exponent || !name.to_ascii_lowercase().ends_with('e')) {
            c[0].to_string()
        } else {
            format!("`{name}`{}", c.get(2).map_or("", |m| m.as_str()))
        }
    })
    .into_owned()
}

/// `CREATE TABLE t1 (t1.a INT)`: a column definition may name its table, which
/// changes nothing; sqlparser reads only the bare name.
fn qualified_column_names(sql: &str) -> String {
    use std::sync::OnceLock;
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Some(re) = RE
        .get_or_init(|| {
            regex::Regex::new(
                r"(?i)([(,]\s*)(\w+|`[^`]*`)\.(\w+|`[^`]*`)(\s+(?:(?:tiny|small|medium|big)?int|integer|char|varchar|(?:tiny|medium|long)?text|(?:tiny|medium|long)?blob|decimal|numeric|float|double|real|date|time|datetime|timestamp|year|bit|bool|boolean|enum|set|binary|varbinary|json)\b)",
            )
            .ok()
        })
        .as_ref()
    else {
        return sql.to_string();
    };
    re.replace_all(sql, |c: &regex::Captures| {
        let name = &c[3];
        if name.starts_with('`') {
            format!("{}{name}{}", &c[1], &c[4])
        } else {
            // Quoted: the bare name may be a keyword (`t1.index`).
            format!("{}`{name}`{}", &c[1], &c[4])
        }
    })
    .into_owned()
}

/// The double-quoted parts of a statement in the meaning its `sql_mode` gave
/// them: names under `ANSI_QUOTES` (written here with backticks), string
/// values otherwise (with single quotes), so that sqlparser reads them as
/// the server did.
pub(super) fn requote(sql: &str, ansi_quotes: bool) -> String {
    if !sql.contains('"') {
        return sql.to_string();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '`' => {
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' && c == '\'' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        if chars.peek() == Some(&c) {
                            out.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            '"' => {
                let mut text = String::new();
                while let Some(d) = chars.next() {
                    if d == '\\' && !ansi_quotes {
                        if let Some(e) = chars.next() {
                            text.push(d);
                            text.push(e);
                        }
                    } else if d == '"' {
                        if chars.peek() == Some(&'"') {
                            text.push('"');
                            chars.next();
                        } else {
                            break;
                        }
                    } else {
                        text.push(d);
                    }
                }
                if ansi_quotes {
                    out.push('`');
                    out.push_str(&text.replace('`', "``"));
                    out.push('`');
                } else {
                    out.push('\'');
                    out.push_str(&text.replace('\'', "''"));
                    out.push('\'');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Applies `rewrite` to the parts of `sql` outside quotes and backticks, so
/// that names and string values are never rewritten.
fn outside_quotes(sql: &str, rewrite: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut plain = 0;
    let mut chars = sql.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !matches!(c, '\'' | '"' | '`') {
            continue;
        }
        out.push_str(&rewrite(&sql[plain..i]));
        let mut end = sql.len();
        while let Some((j, d)) = chars.next() {
            if d == '\\' && c != '`' {
                chars.next();
            } else if d == c {
                if chars.peek().map(|x| x.1) == Some(c) {
                    chars.next();
                } else {
                    end = j + c.len_utf8();
                    break;
                }
            }
        }
        out.push_str(&sql[i..end]);
        plain = end;
    }
    out.push_str(&rewrite(&sql[plain..]));
    out
}

/// The type spellings MariaDB accepts that sqlparser does not read, or reads
/// as another type, in the server's own words: `NATIONAL CHAR`/`NCHAR` (and
/// their VARCHAR forms) are utf8mb3, `LONG [VARCHAR]` is MEDIUMTEXT, `LONG
/// VARBINARY` MEDIUMBLOB, `INT1`..`INT8`/`MIDDLEINT` the integers of that
/// many bytes, `FLOAT4`/`FLOAT8` FLOAT/DOUBLE, and `FLOAT(p)` with a
/// precision above 24 DOUBLE.
fn type_spellings(sql: &str) -> String {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(regex::Regex, &'static str)>> = OnceLock::new();
    static FLOAT: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        const LENGTH: &str = r"(\s*\(\s*\d+\s*\))?";
        [
            (
                format!(
                    "(?i)\\b(NATIONAL\\s+(CHAR|CHARACTER)\\s+VARYING|NATIONAL\\s+VARCHAR|\
                     NCHAR\\s+VARCHAR|NCHAR\\s+VARYING|NVARCHAR){LENGTH}"
                ),
                "VARCHAR$3 CHARACTER SET utf8mb3",
            ),
            (
                format!(r"(?i)\b(NATIONAL\s+(CHAR|CHARACTER)|NCHAR){LENGTH}"),
                "CHAR$3 CHARACTER SET utf8mb3",
            ),
            (
                r"(?i)\b(VARCHARACTER|CHARACTER\s+VARYING|CHAR\s+VARYING)\b".into(),
                "VARCHAR",
            ),
            (r"(?i)\bLONG\s+VARBINARY\b".into(), "MEDIUMBLOB"),
            (
                r"(?i)\bLONG(\s+VARCHAR)?(\s+BINARY)?\b".into(),
                "MEDIUMTEXT",
            ),
            (r"(?i)\bINT1\b".into(), "TINYINT"),
            (r"(?i)\bINT2\b".into(), "SMALLINT"),
            (r"(?i)\b(INT3|MIDDLEINT)\b".into(), "MEDIUMINT"),
            (r"(?i)\bINT4\b".into(), "INT"),
            (r"(?i)\bINT8\b".into(), "BIGINT"),
            (r"(?i)\bFLOAT4\b".into(), "FLOAT"),
            (r"(?i)\bFLOAT8\b".into(), "DOUBLE"),
        ]
        .into_iter()
        .filter_map(|(re, to): (String, _)| regex::Regex::new(&re).ok().map(|r| (r, to)))
        .collect()
    });
    let mut out = sql.to_string();
    for (re, to) in rules {
        out = re.replace_all(&out, *to).into_owned();
    }
    let float = FLOAT.get_or_init(|| regex::Regex::new(r"(?i)\bFLOAT\s*\(\s*(\d+)\s*\)").ok());
    if let Some(re) = float {
        out = re
            .replace_all(&out, |c: &regex::Captures| match c[1].parse::<u32>() {
                Ok(p) if p <= 24 => "FLOAT".to_string(),
                Ok(p) if p <= 53 => "DOUBLE".to_string(),
                _ => c[0].to_string(),
            })
            .into_owned();
    }
    out
}

/// A `PERIOD FOR name (start, end)` clause of a statement.
pub(super) struct Period {
    pub system_time: bool,
    pub start: String,
    pub end: String,
}

/// The periods a statement declares, and whether it turns system versioning
/// on (`WITH SYSTEM VERSIONING` on the table or a column, `ADD SYSTEM
/// VERSIONING`). [`normalize_mariadb`] removes both from the text.
pub(super) fn periods(sql: &str) -> (Vec<Period>, bool) {
    use std::sync::OnceLock;
    static RES: OnceLock<Option<(regex::Regex, regex::Regex)>> = OnceLock::new();
    let Some((period, versioning)) = RES
        .get_or_init(|| {
            const NAME: &str = r"(\w+|`(?:[^`]|``)*`)";
            Some((
                regex::Regex::new(&format!(
                    r"(?i)\bPERIOD\s+FOR\s+{NAME}\s*\(\s*{NAME}\s*,\s*{NAME}\s*\)"
                ))
                .ok()?,
                regex::Regex::new(r"(?i)\b(WITH|ADD)\s+SYSTEM\s+VERSIONING\b").ok()?,
            ))
        })
        .as_ref()
    else {
        return (Vec::new(), false);
    };
    let name = |n: &str| {
        n.strip_prefix('`')
            .and_then(|n| n.strip_suffix('`'))
            .map_or_else(|| n.to_string(), |n| n.replace("``", "`"))
    };
    let found = outside_quotes_matches(sql, period)
        .into_iter()
        .map(|c| Period {
            system_time: name(&c[1]).eq_ignore_ascii_case("SYSTEM_TIME"),
            start: name(&c[2]),
            end: name(&c[3]),
        })
        .collect();
    let versioned = !outside_quotes_matches(sql, versioning).is_empty();
    (found, versioned)
}

/// The matches of `re` in the parts of `sql` outside strings (backticked
/// names stay, so that a period's columns can be named with them).
fn outside_quotes_matches(sql: &str, re: &regex::Regex) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let masked = outside_strings_masked(sql);
    for c in re.captures_iter(&masked) {
        // The original text at the same offsets.
        found.push(
            (0..c.len())
                .map(|i| {
                    c.get(i)
                        .map_or(String::new(), |m| sql[m.range()].to_string())
                })
                .collect(),
        );
    }
    found
}

/// `sql` with the content of '…' and "…" strings replaced by spaces, byte
/// for byte, so that offsets into it are offsets into `sql`.
fn outside_strings_masked(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in sql.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(c);
                    continue;
                }
                out.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// `sql` without its plain comments (`/* … */`, `# …`, `-- …`), each
/// replaced by a space; run after [`unwrap_executable_comments`], so the
/// comments left are the ones the server did not execute (MariaDB logs
/// `/*M!999999 … */` as `/*M 999999 … */`). ALTER TABLE is split at commas,
/// and a comma inside a comment must not split it.
pub(super) fn without_plain_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' && q != '`' {
                out.extend(chars.next());
            } else if c == q {
                quote = None;
            }
            continue;
        }
        let next = chars.peek().copied();
        let line_comment = c == '#'
            || (c == '-' && next == Some('-') && {
                let mut ahead = chars.clone();
                ahead.next();
                ahead.next().is_none_or(char::is_whitespace)
            });
        if c == '/' && next == Some('*') {
            chars.next();
            let mut last = ' ';
            for d in chars.by_ref() {
                if last == '*' && d == '/' {
                    break;
                }
                last = d;
            }
            out.push(' ');
        } else if line_comment {
            for d in chars.by_ref() {
                if d == '\n' {
                    break;
                }
            }
            out.push(' ');
        } else {
            if matches!(c, '\'' | '"' | '`') {
                quote = Some(c);
            }
            out.push(c);
        }
    }
    out
}
