//! `[[routes]]`: shards written into one lake table (DESIGN.md "Shard
//! routing"). A route's `match` is an anchored regex over the source
//! `db.table`; its `table` names the lake `db.table` and may use the
//! match's captures (`$1`, `${name}`).

use regex::Regex;
use serde::Deserialize;

/// One `[[routes]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    #[serde(rename = "match")]
    pattern: String,
    table: String,
    #[serde(default)]
    unique_key: bool,
}

/// One route: entry number (1-based, as the error messages count), the
/// compiled pattern, the target template.
#[derive(Debug, Clone)]
struct Route {
    entry: usize,
    pattern: String,
    regex: Regex,
    table: String,
    unique_key: bool,
}

/// The lake table a source table is routed into.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteTarget {
    pub db: String,
    pub table: String,
    /// `unique_key = true`: the source key identifies a row across the
    /// shards, so the current table is keyed by it alone.
    pub unique_key: bool,
}

impl RouteTarget {
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.db, self.table)
    }
}

/// Every `[[routes]]` entry.
#[derive(Debug, Clone, Default)]
pub struct Routes(Vec<Route>);

impl Routes {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The lake table `db.table` is routed into, if a route matches it; an
    /// error naming both entries when two do.
    pub fn target(&self, db: &str, table: &str) -> Result<Option<RouteTarget>, String> {
        let name = format!("{db}.{table}");
        let mut matched = self.0.iter().filter(|r| r.regex.is_match(&name));
        let Some(route) = matched.next() else {
            return Ok(None);
        };
        if let Some(other) = matched.next() {
            return Err(format!(
                "[[routes]] entries {} (`{}`) and {} (`{}`) both match the table {name}: \
                 make the patterns exclusive",
                route.entry, route.pattern, other.entry, other.pattern
            ));
        }
        let mut target = String::new();
        if let Some(captures) = route.regex.captures(&name) {
            captures.expand(&route.table, &mut target);
        }
        let Some((tdb, ttable)) = target.split_once('.').filter(|(d, t)| {
            !d.is_empty() && !t.is_empty() && !t.contains('.') && !target.contains('/')
        }) else {
            return Err(format!(
                "[[routes]] entry {}: table `{}` gives `{target}` for {name}, not a `db.table` name",
                route.entry, route.table
            ));
        };
        Ok(Some(RouteTarget {
            db: tdb.to_string(),
            table: ttable.to_string(),
            unique_key: route.unique_key,
        }))
    }
}

/// Parses the `[[routes]]` entries: each pattern compiles, each target
/// names a `db.table` and uses only captures its pattern has.
pub(super) fn parse_routes(raw: Vec<RawRoute>) -> Result<Routes, String> {
    let mut routes = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let entry = i + 1;
        let at = format!("[[routes]] entry {entry}");
        let regex = Regex::new(&format!("^(?:{})$", r.pattern))
            .map_err(|e| format!("{at}: match: bad regex `{}`: {e}", r.pattern))?;
        if r.table
            .split_once('.')
            .is_none_or(|(d, t)| d.is_empty() || t.is_empty())
        {
            return Err(format!(
                "{at}: table `{}` is not a `db.table` name, e.g. \"shop.orders\" or \"shop.orders_$1\"",
                r.table
            ));
        }
        for group in referenced_groups(&r.table) {
            let known = match group.parse::<usize>() {
                Ok(n) => n < regex.captures_len(),
                Err(_) => regex.capture_names().flatten().any(|n| n == group),
            };
            if !known {
                return Err(format!(
                    "{at}: table `{}` uses ${group}, which match `{}` does not capture",
                    r.table, r.pattern
                ));
            }
        }
        routes.push(Route {
            entry,
            pattern: r.pattern,
            regex,
            table: r.table,
            unique_key: r.unique_key,
        });
    }
    Ok(Routes(routes))
}

/// The capture groups a template names (`$1`, `${1}`, `$name`, `${name}`),
/// as `regex::Captures::expand` reads them (`$$` is a `$`).
fn referenced_groups(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            rest = after;
            continue;
        }
        let (name, after) = match rest.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => break,
            },
            None => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        if !name.is_empty() {
            out.push(name.to_string());
        }
        rest = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(entries: &[(&str, &str, bool)]) -> Result<Routes, String> {
        parse_routes(
            entries
                .iter()
                .map(|(p, t, u)| RawRoute {
                    pattern: p.to_string(),
                    table: t.to_string(),
                    unique_key: *u,
                })
                .collect(),
        )
    }

    #[test]
    fn a_route_names_its_target_with_the_captures() {
        let r = routes(&[(r"shop_(\d+)\.orders", "shop.orders", false)]).unwrap();
        let t = r.target("shop_07", "orders").unwrap().unwrap();
        assert_eq!((t.db.as_str(), t.table.as_str()), ("shop", "orders"));
        assert!(!t.unique_key);
        // Anchored: a longer name is not matched.
        assert_eq!(r.target("shop_07", "orders_old").unwrap(), None);
        assert_eq!(r.target("xshop_07", "orders").unwrap(), None);

        let r = routes(&[(r"(?P<db>\w+)_(\d+)\.(\w+)", "${db}.${3}_all", true)]).unwrap();
        let t = r.target("shop_1", "items").unwrap().unwrap();
        assert_eq!(t.qualified_name(), "shop.items_all");
        assert!(t.unique_key);
    }

    #[test]
    fn two_routes_that_match_one_table_are_an_error_naming_both() {
        let r = routes(&[
            (r"shop_\d+\.orders", "shop.orders", false),
            (r"shop_1\..*", "one.all", false),
        ])
        .unwrap();
        let e = r.target("shop_1", "orders").unwrap_err();
        assert!(e.contains("entries 1") && e.contains("and 2"), "{e}");
        assert!(e.contains("shop_1.orders"), "{e}");
        assert!(r.target("shop_2", "orders").unwrap().is_some());
    }

    #[test]
    fn bad_routes_are_errors_naming_the_entry() {
        let e = routes(&[("shop_(", "a.b", false)]).unwrap_err();
        assert!(e.starts_with("[[routes]] entry 1: match: bad regex"), "{e}");
        let e = routes(&[("a\\.b", "a.b", false), ("x\\.y", "nodot", false)]).unwrap_err();
        assert!(e.starts_with("[[routes]] entry 2: table `nodot`"), "{e}");
        let e = routes(&[(r"shop_(\d+)\.orders", "shop.orders_$2", false)]).unwrap_err();
        assert!(e.contains("uses $2"), "{e}");
        let e = routes(&[(r"shop_(\d+)\.orders", "shop.${name}", false)]).unwrap_err();
        assert!(e.contains("uses $name"), "{e}");
        // A capture that is empty for one table gives no table name there.
        let r = routes(&[(r"(\w*)\.orders", "$1.orders", false)]).unwrap();
        assert!(r.target("", "orders").is_err());
    }

    #[test]
    fn referenced_groups_reads_the_templates_expand_reads() {
        assert_eq!(referenced_groups("a.b"), Vec::<String>::new());
        assert_eq!(referenced_groups("a_$1.b_${2}x"), ["1", "2"]);
        assert_eq!(referenced_groups("$$1.$name"), ["name"]);
        // As `expand` reads it: the longest name, so `$1_all` is group `1_all`.
        assert_eq!(referenced_groups("a.$1_all"), ["1_all"]);
    }
}
