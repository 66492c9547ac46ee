//! Binlog events to row changes: event classification, transaction
//! boundaries, GTIDs, and the rows decoder ([`rows`]) that writes straight
//! into Arrow builders, with the plan `schema::plan` made of each TABLE_MAP
//! from the column types of `crate::types`. MySQL 8 only: compressed
//! transactions ([`payload`]) and partial JSON updates ([`rows`], [`json`]).

pub mod compressed;
pub mod dml;
pub mod json;
pub mod payload;
#[cfg(test)]
mod robustness;
pub mod rows;
#[cfg(test)]
pub(crate) mod testing;
pub mod values;

use values::le_uint;

/// Event type codes we act on. MySQL's are in mysql_common's `EventType`;
/// MariaDB's own (160–163) are not, see `shared/notes/mariadb-binlog-facts.md`.
pub mod event_type {
    pub const QUERY: u8 = 2;
    pub const ROTATE: u8 = 4;
    /// LOAD DATA logged as a statement (binlog_format STATEMENT or MIXED).
    pub const EXECUTE_LOAD_QUERY: u8 = 18;
    pub const FORMAT_DESCRIPTION: u8 = 15;
    pub const XID: u8 = 16;
    pub const TABLE_MAP: u8 = 19;
    pub const WRITE_ROWS_V1: u8 = 23;
    pub const UPDATE_ROWS_V1: u8 = 24;
    pub const DELETE_ROWS_V1: u8 = 25;
    pub const HEARTBEAT: u8 = 27;
    pub const MYSQL_ROWS_QUERY: u8 = 29;
    pub const WRITE_ROWS_V2: u8 = 30;
    pub const UPDATE_ROWS_V2: u8 = 31;
    pub const DELETE_ROWS_V2: u8 = 32;
    pub const MYSQL_GTID: u8 = 33;
    pub const MYSQL_ANONYMOUS_GTID: u8 = 34;
    pub const MYSQL_PREVIOUS_GTIDS: u8 = 35;
    pub const XA_PREPARE: u8 = 38;
    pub const PARTIAL_UPDATE_ROWS: u8 = 39;
    pub const TRANSACTION_PAYLOAD: u8 = 40;
    pub const HEARTBEAT_V2: u8 = 41;
    pub const MARIADB_ANNOTATE_ROWS: u8 = 160;
    pub const MARIADB_BINLOG_CHECKPOINT: u8 = 161;
    pub const MARIADB_GTID: u8 = 162;
    pub const MARIADB_GTID_LIST: u8 = 163;
    /// MariaDB's compressed query and rows events (`log_bin_compress=ON`).
    pub const MARIADB_COMPRESSED_FIRST: u8 = 165;
    pub const MARIADB_COMPRESSED_LAST: u8 = 171;
}

/// A MariaDB GTID event body: sequence u64, domain u32, flags u8.
/// Returns the GTID text `domain-server-seq` and whether the group is a
/// standalone statement (DDL) without BEGIN/COMMIT.
pub fn mariadb_gtid(body: &[u8], server_id: u32) -> Option<(String, bool)> {
    if body.len() < 13 {
        return None;
    }
    let seq = le_uint(&body[0..8]);
    let domain = le_uint(&body[8..12]);
    const FL_STANDALONE: u8 = 1;
    Some((
        format!("{domain}-{server_id}-{seq}"),
        body[12] & FL_STANDALONE != 0,
    ))
}

/// A MySQL GTID event body: flags u8, source uuid (16 bytes), gno i64.
pub fn mysql_gtid(body: &[u8]) -> Option<String> {
    if body.len() < 25 {
        return None;
    }
    let u = &body[1..17];
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    let gno = le_uint(&body[17..25]);
    Some(format!(
        "{}-{}-{}-{}-{}:{gno}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// The statement of a MySQL Rows_query or MariaDB Annotate_rows event, cut
/// at `limit` bytes so a 20 MB statement cannot blow memory. Held once per
/// statement; every row it produced refers to it.
pub fn statement_text(event_type: u8, body: &[u8], limit: usize) -> std::sync::Arc<str> {
    // Rows_query starts with a length byte the server ignores; Annotate_rows is all text.
    let text = if event_type == event_type::MYSQL_ROWS_QUERY {
        body.get(1..).unwrap_or_default()
    } else {
        body
    };
    let text = String::from_utf8_lossy(&text[..text.len().min(limit)]);
    // A cut inside a multi-byte character leaves U+FFFD at the end: drop it.
    std::sync::Arc::from(text.trim_end_matches('\u{FFFD}'))
}

/// What a Query event's statement means for the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum QueryKind {
    Begin,
    /// COMMIT of a non-transactional group (no XID event follows).
    Commit,
    Rollback,
    /// `SAVEPOINT name`, inside a transaction.
    Savepoint(String),
    /// `ROLLBACK [WORK] TO [SAVEPOINT] name`, inside a transaction.
    RollbackTo(String),
    /// Anything else: DDL or an administrative statement, a transaction of
    /// its own unless it comes inside one.
    Other,
}

pub fn classify_query(statement: &str) -> QueryKind {
    let s = statement.trim_start();
    let mut words = Words(s);
    let word = words.next_word().unwrap_or_default().to_ascii_uppercase();
    match word.as_str() {
        "BEGIN" => QueryKind::Begin,
        "COMMIT" => QueryKind::Commit,
        "SAVEPOINT" => match words.identifier() {
            Some(name) => QueryKind::Savepoint(name),
            None => QueryKind::Other,
        },
        "ROLLBACK" => {
            let mut next = words.next_word().map(|w| w.to_ascii_uppercase());
            if next.as_deref() == Some("WORK") {
                next = words.next_word().map(|w| w.to_ascii_uppercase());
            }
            match next.as_deref() {
                Some("TO") => {
                    let mut ahead = Words(words.0);
                    if ahead
                        .next_word()
                        .is_some_and(|w| w.eq_ignore_ascii_case("SAVEPOINT"))
                    {
                        // `ROLLBACK TO savepoint` names a savepoint "savepoint".
                        if let Some(name) = ahead.identifier() {
                            return QueryKind::RollbackTo(name);
                        }
                    }
                    match words.identifier() {
                        Some(name) => QueryKind::RollbackTo(name),
                        None => QueryKind::Other,
                    }
                }
                _ => QueryKind::Rollback,
            }
        }
        "XA" => {
            let upper = s.to_ascii_uppercase();
            if upper.starts_with("XA START") || upper.starts_with("XA BEGIN") {
                QueryKind::Begin
            } else if upper.starts_with("XA COMMIT") {
                QueryKind::Commit
            } else if upper.starts_with("XA ROLLBACK") {
                QueryKind::Rollback
            } else {
                QueryKind::Other
            }
        }
        _ => QueryKind::Other,
    }
}

/// A cursor over the words of a short statement.
struct Words<'a>(&'a str);

impl<'a> Words<'a> {
    fn next_word(&mut self) -> Option<&'a str> {
        let s = self.0.trim_start();
        let end = s
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(s.len());
        self.0 = &s[end..];
        (end > 0).then(|| &s[..end])
    }

    /// An identifier, bare or quoted with backticks (or double quotes under
    /// ANSI_QUOTES), in the lower case the server compares savepoints in.
    fn identifier(&mut self) -> Option<String> {
        let s = self.0.trim_start();
        let quote = s.chars().next().filter(|c| *c == '`' || *c == '"');
        let name = match quote {
            Some(q) => {
                let mut name = String::new();
                let mut chars = s[1..].chars().peekable();
                loop {
                    match chars.next()? {
                        c if c == q && chars.peek() == Some(&q) => {
                            chars.next();
                            name.push(q);
                        }
                        c if c == q => break,
                        c => name.push(c),
                    }
                }
                name
            }
            None => s
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect(),
        };
        (!name.is_empty()).then(|| name.to_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_bodies() {
        let mut b = 42u64.to_le_bytes().to_vec();
        b.extend(3u32.to_le_bytes());
        b.push(1);
        assert_eq!(mariadb_gtid(&b, 7), Some(("3-7-42".to_string(), true)));
        let mut m = vec![1u8];
        m.extend((0u8..16).collect::<Vec<_>>());
        m.extend(9u64.to_le_bytes());
        assert_eq!(
            mysql_gtid(&m).unwrap(),
            "00010203-0405-0607-0809-0a0b0c0d0e0f:9"
        );
    }

    #[test]
    fn statements_are_cut_at_the_limit_on_a_character_boundary() {
        let mut rows_query = vec![5u8];
        rows_query.extend("UPDATE t SET a = '€'".as_bytes());
        assert_eq!(
            &*statement_text(event_type::MYSQL_ROWS_QUERY, &rows_query, 4096),
            "UPDATE t SET a = '€'"
        );
        // '€' is 3 bytes: a 19-byte cut falls inside it.
        assert_eq!(
            &*statement_text(event_type::MYSQL_ROWS_QUERY, &rows_query, 19),
            "UPDATE t SET a = '"
        );
        assert_eq!(
            &*statement_text(event_type::MARIADB_ANNOTATE_ROWS, b"DELETE FROM t", 6),
            "DELETE"
        );
    }

    #[test]
    fn query_kinds() {
        assert_eq!(classify_query("BEGIN"), QueryKind::Begin);
        assert_eq!(classify_query("COMMIT"), QueryKind::Commit);
        assert_eq!(classify_query("XA START X'01'"), QueryKind::Begin);
        assert_eq!(
            classify_query("ROLLBACK TO SAVEPOINT a"),
            QueryKind::RollbackTo("a".into())
        );
        assert_eq!(
            classify_query("ROLLBACK TO `Sp``1`"),
            QueryKind::RollbackTo("sp`1".into())
        );
        assert_eq!(
            classify_query("rollback work to savepoint s_2"),
            QueryKind::RollbackTo("s_2".into())
        );
        assert_eq!(
            classify_query("SAVEPOINT `a b`"),
            QueryKind::Savepoint("a b".into())
        );
        assert_eq!(classify_query("ROLLBACK"), QueryKind::Rollback);
        assert_eq!(classify_query("ROLLBACK WORK"), QueryKind::Rollback);
        assert_eq!(classify_query("ALTER TABLE t ADD c INT"), QueryKind::Other);
    }
}
