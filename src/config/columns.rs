//! `[[columns]]` (column policies) and `[column_key]` (the key of `hash`).

use std::path::PathBuf;

use regex::Regex;
use serde::Deserialize;

use super::policy::{ColumnKey, ColumnPolicies, ColumnRule, PolicyAction};

/// Environment variable holding the key of `action = "hash"` (preferred
/// over `[column_key] file`).
pub const COLUMN_KEY_ENV: &str = "SLUICE_COLUMN_KEY";

/// One `[[columns]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawColumnRule {
    #[serde(rename = "match")]
    pattern: String,
    action: toml::Value,
}

/// `[column_key]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawColumnKey {
    file: Option<PathBuf>,
}

const ACTIONS: &str = r#"use "exclude", "hash", "mask" or { truncate = N }"#;

fn parse_action(entry: usize, value: &toml::Value) -> Result<PolicyAction, String> {
    let at = format!("[[columns]] entry {entry}: action");
    match value {
        toml::Value::String(s) => match s.as_str() {
            "exclude" => Ok(PolicyAction::Exclude),
            "hash" => Ok(PolicyAction::Hash),
            "mask" => Ok(PolicyAction::Mask),
            other => Err(format!("{at}: `{other}` is not an action, {ACTIONS}")),
        },
        toml::Value::Table(t) => {
            if let Some(key) = t.keys().find(|k| *k != "truncate") {
                return Err(format!("{at}: `{key}` is not an action, {ACTIONS}"));
            }
            match t.get("truncate").and_then(toml::Value::as_integer) {
                Some(n) if n >= 1 && n <= u32::MAX as i64 => Ok(PolicyAction::Truncate(n as u32)),
                Some(n) => Err(format!(
                    "{at}: truncate = {n} is out of range, keep at least 1 character"
                )),
                None => Err(format!(
                    "{at}: truncate takes a number, e.g. {{ truncate = 4 }}"
                )),
            }
        }
        other => Err(format!("{at}: `{other}` is not an action, {ACTIONS}")),
    }
}

/// The key: `SLUICE_COLUMN_KEY`, else the first line of `[column_key] file`.
fn read_key(raw: &RawColumnKey) -> Result<Option<ColumnKey>, String> {
    let text = match std::env::var(COLUMN_KEY_ENV) {
        Ok(k) => Some(k),
        Err(_) => match &raw.file {
            Some(file) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| format!("column_key.file: cannot read {}: {e}", file.display()))?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            None => None,
        },
    };
    match text {
        Some(k) if k.is_empty() => Err(format!(
            "column_key: the key is empty; put at least one byte in {COLUMN_KEY_ENV} or the key file"
        )),
        Some(k) => Ok(Some(ColumnKey::new(k.as_bytes()))),
        None => Ok(None),
    }
}

/// Compiles the entries; a hashing entry without a key is an error that
/// names it.
pub(super) fn parse_columns(
    raw: Vec<RawColumnRule>,
    raw_key: &RawColumnKey,
) -> Result<ColumnPolicies, String> {
    let mut rules = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let entry = i + 1;
        // Without case: MySQL compares column names without it, and a
        // policy that misses `Email` for `email` would leak it.
        let regex = Regex::new(&format!("(?i)^(?:{})$", r.pattern)).map_err(|e| {
            // The regex crate's message spans lines; its last says why.
            let text = e.to_string();
            let why = text.lines().last().unwrap_or("").trim();
            let why = why.strip_prefix("error: ").unwrap_or(why).to_string();
            format!(
                "[[columns]] entry {entry}: match: bad regex `{}`: {why}",
                r.pattern
            )
        })?;
        rules.push(ColumnRule {
            entry,
            pattern: r.pattern,
            regex,
            action: parse_action(entry, &r.action)?,
        });
    }
    let key = read_key(raw_key)?;
    if key.is_none() {
        if let Some(r) = rules.iter().find(|r| r.action == PolicyAction::Hash) {
            return Err(format!(
                "[[columns]] entry {}: action \"hash\" needs a key; set {COLUMN_KEY_ENV} or [column_key] file",
                r.entry
            ));
        }
    }
    Ok(ColumnPolicies { rules, key })
}
