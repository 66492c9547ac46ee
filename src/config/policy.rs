//! The `[[columns]]` rules as the configuration gives them (DESIGN.md
//! "Column policies and erasure"): what each entry does, which columns it
//! matches, and the key of `hash`. What a policy does to a table's shape is
//! `crate::schema::policy`; to the values, `crate::batch::policy`.

use std::fmt;
use std::sync::Arc;

use regex::Regex;

/// What a policy does to a column's values on their way to the lake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyAction {
    /// The column is not in the lake at all.
    Exclude,
    /// HMAC-SHA256 of the value's canonical bytes, as 64 lowercase hex
    /// digits: the lake column is text whatever the source type.
    Hash,
    /// Every value is null.
    Mask,
    /// The first N characters of text, the first N bytes of binary values.
    Truncate(u32),
}

impl PolicyAction {
    /// The form of the configuration and of the schema history:
    /// `exclude`, `hash`, `mask`, `truncate(N)`.
    pub fn name(self) -> String {
        match self {
            PolicyAction::Exclude => "exclude".into(),
            PolicyAction::Hash => "hash".into(),
            PolicyAction::Mask => "mask".into(),
            PolicyAction::Truncate(n) => format!("truncate({n})"),
        }
    }

    /// Reads [`PolicyAction::name`]'s form back.
    pub fn parse(text: &str) -> Option<PolicyAction> {
        Some(match text {
            "exclude" => PolicyAction::Exclude,
            "hash" => PolicyAction::Hash,
            "mask" => PolicyAction::Mask,
            t => PolicyAction::Truncate(
                t.strip_prefix("truncate(")?
                    .strip_suffix(')')?
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)?,
            ),
        })
    }
}

impl fmt::Display for PolicyAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The key of `hash`, from `SLUICE_COLUMN_KEY` or `[column_key] file`. Its
/// `Debug` shows no byte of it, so that no log or error can print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ColumnKey(Arc<[u8]>);

impl ColumnKey {
    pub fn new(bytes: &[u8]) -> ColumnKey {
        ColumnKey(Arc::from(bytes))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ColumnKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ColumnKey(redacted)")
    }
}

/// One `[[columns]]` entry.
#[derive(Debug, Clone)]
pub struct ColumnRule {
    /// The entry's number in the file, from 1, as errors name it.
    pub entry: usize,
    /// `match` as written.
    pub pattern: String,
    /// `match` anchored on the whole `db.table.column`, without case.
    pub regex: Regex,
    pub action: PolicyAction,
}

/// Every `[[columns]]` entry, in file order, and the key of `hash`.
#[derive(Debug, Clone, Default)]
pub struct ColumnPolicies {
    pub rules: Vec<ColumnRule>,
    /// `SLUICE_COLUMN_KEY` or `[column_key] file`, when set (a hashing entry
    /// without it is a configuration error).
    pub key: Option<ColumnKey>,
}

impl ColumnPolicies {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first entry whose `match` takes `db.table.column`.
    pub fn rule_for(&self, db: &str, table: &str, column: &str) -> Option<&ColumnRule> {
        if self.rules.is_empty() {
            return None;
        }
        let name = format!("{db}.{table}.{column}");
        self.rules.iter().find(|r| r.regex.is_match(&name))
    }
}
