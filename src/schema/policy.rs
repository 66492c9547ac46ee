//! Column policies (DESIGN.md "Column policies and erasure"): the
//! `[[columns]]` rules of the configuration, which column of which table
//! each one governs, and what that does to the column's type in the lake.
//! The values themselves are policed where a batch is written
//! (`crate::batch::policy`); here is only the shape.

use arrow::datatypes::DataType;

use super::{ColumnDef, TableSchema};
pub use crate::config::policy::{ColumnKey, ColumnPolicies, ColumnRule, PolicyAction};
pub use crate::error::PolicyError;
use crate::types::ColumnKind;

/// The lake type of a column of kind `kind` under `policy`: a hashed column
/// is text; the other actions keep the source column's lake type.
pub fn lake_type(kind: &ColumnKind, policy: Option<PolicyAction>) -> DataType {
    match policy {
        Some(PolicyAction::Hash) => DataType::Utf8,
        _ => kind.arrow_type(),
    }
}

impl ColumnPolicies {
    /// Gives every column of `table` the policy the configuration sets for
    /// it (none where no entry matches), or says why one cannot apply.
    pub fn assign(&self, table: &mut TableSchema) -> Result<(), PolicyError> {
        let key = table.fold_key();
        let qualified = table.qualified_name();
        for c in &mut table.columns {
            let Some(rule) = self.rule_for(&table.database, &table.name, &c.name) else {
                c.policy = None;
                continue;
            };
            let in_key = key.iter().any(|k| k.eq_ignore_ascii_case(&c.name));
            // A truncated key would fold distinct rows into one.
            if in_key && rule.action != PolicyAction::Hash {
                return Err(PolicyError::KeyColumn {
                    entry: rule.entry,
                    pattern: rule.pattern.clone(),
                    table: qualified,
                    column: c.name.clone(),
                    action: match rule.action {
                        PolicyAction::Exclude => "excluded",
                        PolicyAction::Mask => "masked",
                        _ => "truncated",
                    }
                    .into(),
                });
            }
            if let PolicyAction::Truncate(_) = rule.action {
                if !truncatable(&c.kind) {
                    return Err(PolicyError::TruncateType {
                        entry: rule.entry,
                        pattern: rule.pattern.clone(),
                        table: qualified,
                        column: c.name.clone(),
                        mysql_type: c.mysql_type.clone(),
                    });
                }
            }
            c.policy = Some(rule.action);
        }
        Ok(())
    }

    /// The entries that match no column of `tables`: a `match` that
    /// governs nothing is most likely a typo that leaves data unpoliced.
    pub fn unmatched<'a>(&'a self, tables: &[&TableSchema]) -> Vec<&'a ColumnRule> {
        self.rules
            .iter()
            .filter(|r| {
                !tables.iter().any(|t| {
                    t.columns.iter().any(|c| {
                        self.rule_for(&t.database, &t.name, &c.name)
                            .is_some_and(|first| first.entry == r.entry)
                    })
                })
            })
            .collect()
    }
}

/// Whether `truncate` applies: text (characters) and binary (bytes) values.
fn truncatable(kind: &ColumnKind) -> bool {
    matches!(
        kind.arrow_type(),
        DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary
    )
}

/// A column's policy as a change between two versions of its table, for the
/// manifest's `column_policies` note.
pub fn describe(policy: Option<PolicyAction>) -> String {
    policy.map_or_else(|| "none".to_string(), PolicyAction::name)
}

impl ColumnDef {
    /// The column's type in the lake's files, its policy applied.
    pub fn lake_type(&self) -> DataType {
        lake_type(&self.kind, self.policy)
    }

    /// Whether the column is in the lake's files (not excluded).
    pub fn in_lake(&self) -> bool {
        self.policy != Some(PolicyAction::Exclude)
    }
}

impl TableSchema {
    /// Whether any column has a policy: then `_sql`, which holds the
    /// statements' literal values, is null for every row.
    pub fn has_policy(&self) -> bool {
        self.columns.iter().any(|c| c.policy.is_some())
    }

    /// The same shape without its excluded columns: what the lake's files
    /// of the table hold, column for column.
    pub fn without_excluded(&self) -> TableSchema {
        let mut t = self.clone();
        t.columns.retain(ColumnDef::in_lake);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    fn rule(entry: usize, pattern: &str, action: PolicyAction) -> ColumnRule {
        ColumnRule {
            entry,
            pattern: pattern.into(),
            regex: Regex::new(&format!("(?i)^(?:{pattern})$")).unwrap(),
            action,
        }
    }

    fn users() -> TableSchema {
        TableSchema {
            database: "shop".into(),
            name: "users".into(),
            version: 1,
            columns: vec![
                ColumnDef::new("id", "int", None, false, true).unwrap(),
                ColumnDef::new(
                    "email",
                    "varchar(100)",
                    Some("utf8mb4".into()),
                    false,
                    false,
                )
                .unwrap(),
                ColumnDef::new("age", "int", None, true, false).unwrap(),
            ],
            charset: None,
            unique_keys: Vec::new(),
        }
    }

    #[test]
    fn action_names_read_back() {
        for a in [
            PolicyAction::Exclude,
            PolicyAction::Hash,
            PolicyAction::Mask,
            PolicyAction::Truncate(12),
        ] {
            assert_eq!(PolicyAction::parse(&a.name()), Some(a));
        }
        assert_eq!(PolicyAction::parse("truncate(0)"), None);
        assert_eq!(PolicyAction::parse("blur"), None);
    }

    #[test]
    fn first_matching_entry_wins_and_matches_the_whole_name_without_case() {
        let p = ColumnPolicies {
            rules: vec![
                rule(1, r"shop\.users\.email", PolicyAction::Hash),
                rule(2, r"shop\.users\..*", PolicyAction::Mask),
                rule(3, r"users\.age", PolicyAction::Exclude),
            ],
            key: None,
        };
        let mut t = users();
        p.assign(&mut t).unwrap_err(); // entry 2 masks the key `id`
        let p = ColumnPolicies {
            rules: vec![
                rule(1, r"shop\.users\.EMAIL", PolicyAction::Hash),
                rule(2, r"shop\.users\.(email|age)", PolicyAction::Mask),
                rule(3, r"users\.age", PolicyAction::Exclude),
            ],
            key: None,
        };
        p.assign(&mut t).unwrap();
        let got: Vec<_> = t.columns.iter().map(|c| c.policy).collect();
        assert_eq!(
            got,
            vec![None, Some(PolicyAction::Hash), Some(PolicyAction::Mask)]
        );
        // Entry 3 is not anchored on the database: it matches nothing.
        let unmatched: Vec<usize> = p.unmatched(&[&t]).iter().map(|r| r.entry).collect();
        assert_eq!(unmatched, vec![3]);
    }

    #[test]
    fn key_columns_may_only_be_hashed() {
        for (action, word) in [
            (PolicyAction::Exclude, "excluded"),
            (PolicyAction::Mask, "masked"),
            (PolicyAction::Truncate(3), "truncated"),
        ] {
            let p = ColumnPolicies {
                rules: vec![rule(2, r"shop\.users\.id", action)],
                key: None,
            };
            let e = p.assign(&mut users()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("[[columns]] entry 2 (match 'shop\\.users\\.id'): shop.users.id is part of the key of shop.users, and a key column can only be hashed, not {word} (the current table is keyed by it); leave the key column out of the match or use action = \"hash\"")
            );
        }
        let p = ColumnPolicies {
            rules: vec![rule(1, r"shop\.users\.id", PolicyAction::Hash)],
            key: None,
        };
        let mut t = users();
        p.assign(&mut t).unwrap();
        assert_eq!(t.columns[0].lake_type(), DataType::Utf8);
    }

    #[test]
    fn truncate_is_for_text_and_binary_columns() {
        let p = ColumnPolicies {
            rules: vec![rule(1, r"shop\.users\.age", PolicyAction::Truncate(2))],
            key: None,
        };
        let e = p.assign(&mut users()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[[columns]] entry 1 (match 'shop\\.users\\.age'): shop.users.age is int; truncate applies to text and binary columns only"
        );
    }

    #[test]
    fn excluded_columns_leave_the_lake_shape_and_masked_ones_stay() {
        let p = ColumnPolicies {
            rules: vec![
                rule(1, r"shop\.users\.email", PolicyAction::Exclude),
                rule(2, r"shop\.users\.age", PolicyAction::Mask),
            ],
            key: None,
        };
        let mut t = users();
        p.assign(&mut t).unwrap();
        assert!(t.has_policy());
        let lake: Vec<_> = t
            .without_excluded()
            .columns
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(lake, vec!["id", "age"]);
        let fields = t.column_fields(false);
        assert_eq!(fields.len(), 2);
        assert!(fields[1].is_nullable());
    }
}
