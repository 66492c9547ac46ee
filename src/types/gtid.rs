//! GTID state: where a replica stands, independent of file names, so that a
//! cursor survives a failover to another server.
//!
//! - MariaDB: the last GTID per replication domain, `domain-server-seq[,...]`
//!   (what `@slave_connect_state` takes).
//! - MySQL: the set of executed GTIDs, `uuid:1-100:105,uuid2:1-7` (what
//!   COM_BINLOG_DUMP_GTID takes and `@@gtid_executed` prints).

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidState {
    /// domain → (server id, sequence number) of the last transaction.
    Mariadb(BTreeMap<u32, (u32, u64)>),
    /// source uuid (lowercase, with dashes, plus `:tag` when tagged) →
    /// inclusive, sorted, disjoint intervals of transaction numbers.
    Mysql(BTreeMap<String, Vec<(u64, u64)>>),
}

impl GtidState {
    /// Parses either form; MySQL sets are recognised by their `:`.
    pub fn parse(text: &str) -> Result<GtidState, String> {
        let text = text.trim();
        if text.contains(':') {
            let mut set = BTreeMap::new();
            for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let mut fields = part.split(':');
                let uuid = fields.next().unwrap_or_default().to_ascii_lowercase();
                if !is_uuid(&uuid) {
                    return Err(format!("`{part}`: `{uuid}` is not a server uuid"));
                }
                let mut key = uuid;
                let mut intervals: Vec<(u64, u64)> = Vec::new();
                for field in fields {
                    if field.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                        key = format!("{key}:{field}");
                        continue;
                    }
                    let (a, b) = field.split_once('-').unwrap_or((field, field));
                    let (a, b) = (
                        a.parse::<u64>()
                            .map_err(|_| format!("`{part}`: bad interval `{field}`"))?,
                        b.parse::<u64>()
                            .map_err(|_| format!("`{part}`: bad interval `{field}`"))?,
                    );
                    if a == 0 || b < a {
                        return Err(format!("`{part}`: bad interval `{field}`"));
                    }
                    intervals.push((a, b));
                }
                let entry: &mut Vec<(u64, u64)> = set.entry(key).or_default();
                for (a, b) in intervals {
                    insert_interval(entry, a, b);
                }
            }
            Ok(GtidState::Mysql(set))
        } else {
            let mut state = BTreeMap::new();
            for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (domain, server, seq) = parse_mariadb(part)
                    .ok_or_else(|| format!("`{part}` is not a MariaDB GTID domain-server-seq"))?;
                state.insert(domain, (server, seq));
            }
            Ok(GtidState::Mariadb(state))
        }
    }

    /// An empty state of the same flavor.
    pub fn empty_like(&self) -> GtidState {
        match self {
            GtidState::Mariadb(_) => GtidState::Mariadb(BTreeMap::new()),
            GtidState::Mysql(_) => GtidState::Mysql(BTreeMap::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            GtidState::Mariadb(m) => m.is_empty(),
            GtidState::Mysql(m) => m.is_empty(),
        }
    }

    /// Records one transaction: `domain-server-seq` or `uuid[:tag]:gno`.
    pub fn add(&mut self, gtid: &str) {
        match self {
            GtidState::Mariadb(state) => {
                if let Some((domain, server, seq)) = parse_mariadb(gtid) {
                    state.insert(domain, (server, seq));
                }
            }
            GtidState::Mysql(set) => {
                if let Some((key, gno)) = gtid.rsplit_once(':') {
                    if let Ok(gno) = gno.parse::<u64>() {
                        insert_interval(set.entry(key.to_ascii_lowercase()).or_default(), gno, gno);
                    }
                }
            }
        }
    }

    /// Records the MySQL transactions `key:first-last` (no-op on MariaDB).
    pub fn add_range(&mut self, key: &str, first: u64, last: u64) {
        if let GtidState::Mysql(set) = self {
            if first >= 1 && last >= first {
                insert_interval(
                    set.entry(key.to_ascii_lowercase()).or_default(),
                    first,
                    last,
                );
            }
        }
    }

    /// Whether every transaction of `other` is in this state: the server's
    /// `@@gtid_binlog_pos`/`@@gtid_executed` covered means caught up.
    pub fn covers(&self, other: &GtidState) -> bool {
        match (self, other) {
            (GtidState::Mariadb(a), GtidState::Mariadb(b)) => b
                .iter()
                .all(|(d, (_, seq))| a.get(d).is_some_and(|(_, s)| s >= seq)),
            (GtidState::Mysql(a), GtidState::Mysql(b)) => b.iter().all(|(k, ivs)| {
                let have = a.get(k).map(Vec::as_slice).unwrap_or_default();
                ivs.iter()
                    .all(|&(x, y)| have.iter().any(|&(p, q)| p <= x && y <= q))
            }),
            _ => false,
        }
    }

    /// The MySQL set as mysql_common SIDs for COM_BINLOG_DUMP_GTID.
    pub fn mysql_sids(&self) -> Result<Vec<mysql_common::packets::Sid<'static>>, String> {
        let GtidState::Mysql(set) = self else {
            return Err("a MariaDB GTID state cannot start a MySQL GTID dump".into());
        };
        set.iter()
            .map(|(key, ivs)| {
                let text = format!("{key}:{}", join_intervals(ivs));
                text.parse().map_err(|e| format!("GTID set `{text}`: {e}"))
            })
            .collect()
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidState::Mariadb(state) => {
                let parts: Vec<String> = state
                    .iter()
                    .map(|(d, (s, n))| format!("{d}-{s}-{n}"))
                    .collect();
                f.write_str(&parts.join(","))
            }
            GtidState::Mysql(set) => {
                let parts: Vec<String> = set
                    .iter()
                    .map(|(k, ivs)| format!("{k}:{}", join_intervals(ivs)))
                    .collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

fn parse_mariadb(gtid: &str) -> Option<(u32, u32, u64)> {
    let mut it = gtid.trim().split('-');
    let domain = it.next()?.parse().ok()?;
    let server = it.next()?.parse().ok()?;
    let seq = it.next()?.parse().ok()?;
    it.next().is_none().then_some((domain, server, seq))
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

fn join_intervals(ivs: &[(u64, u64)]) -> String {
    ivs.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// Adds `[a, b]` to sorted disjoint intervals, merging neighbours.
fn insert_interval(ivs: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    ivs.push((a, b));
    ivs.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ivs.len());
    for &(x, y) in ivs.iter() {
        match merged.last_mut() {
            Some(last) if x <= last.1.saturating_add(1) => last.1 = last.1.max(y),
            _ => merged.push((x, y)),
        }
    }
    *ivs = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn mariadb_state_keeps_the_last_gtid_per_domain() {
        let mut s = GtidState::parse("0-1-100, 1-2-5").unwrap();
        s.add("0-1-101");
        s.add("2-3-1");
        assert_eq!(s.to_string(), "0-1-101,1-2-5,2-3-1");
        // After a failover the new primary writes with its own server id.
        s.add("0-2-102");
        assert_eq!(s.to_string(), "0-2-102,1-2-5,2-3-1");
        assert!(s.covers(&GtidState::parse("0-1-102,1-2-5").unwrap()));
        assert!(!s.covers(&GtidState::parse("0-1-103").unwrap()));
        assert!(!s.covers(&GtidState::parse("7-1-1").unwrap()));
        assert!(GtidState::parse("0-1").is_err());
        assert!(GtidState::parse("0-1-x").is_err());
    }

    #[test]
    fn mysql_sets_merge_intervals() {
        let mut s = GtidState::parse(&format!("{U}:1-5:7")).unwrap();
        s.add(&format!("{U}:6"));
        assert_eq!(s.to_string(), format!("{U}:1-7"));
        s.add(&format!("{}:9", U.to_uppercase()));
        assert_eq!(s.to_string(), format!("{U}:1-7:9"));
        assert!(s.covers(&GtidState::parse(&format!("{U}:2-7")).unwrap()));
        assert!(!s.covers(&GtidState::parse(&format!("{U}:7-9")).unwrap()));
        let sids = s.mysql_sids().unwrap();
        assert_eq!(sids.len(), 1);
        assert_eq!(sids[0].intervals().len(), 2);
        assert!(GtidState::parse("not-a-uuid:1-5").is_err());
        assert!(GtidState::parse(&format!("{U}:5-1")).is_err());
        assert!(GtidState::parse(&format!("{U}:0")).is_err());
    }

    #[test]
    fn tagged_mysql_gtids_keep_their_tag() {
        let mut s = GtidState::parse(&format!("{U}:1-3,{U}:batch:1-2")).unwrap();
        s.add(&format!("{U}:batch:3"));
        assert_eq!(s.to_string(), format!("{U}:1-3,{U}:batch:1-3"));
    }
}
