//! Which source table a name holds (DESIGN.md "Renames, name reuse and
//! online schema change"). A table keeps its rows through RENAME TABLE,
//! while the changelog keeps the rows written before a rename in the old
//! name's folder and later ones in the new name's: the rows of the table a
//! name holds at the folded manifest come from the folders of every name
//! that table had, each for the versions it had there.
//!
//! In a name's schema history, versions continue one table until a version
//! that ends it (`dropped`: DROP TABLE, or a RENAME away). A live version
//! that follows an end, or comes first, begins a table under that name:
//! moved there by a RENAME of that statement (the manifest's `renamed`
//! entries at its position say from which name, in statement order, so
//! chains and swaps in one statement pair up), or new (CREATE TABLE, a
//! bootstrap, a rename from a table sluice does not capture).

use std::collections::HashMap;

use super::FoldTable;
use crate::schema::history::TableVersion;

/// A RENAME TABLE (or ALTER TABLE … RENAME TO) read from a manifest's `ddl`
/// entries, in stream order.
#[derive(Debug, Clone)]
pub(super) struct RenameEvent {
    pub from: String,
    pub to: String,
    /// The statement's binlog position (file, offset).
    pub file: String,
    pub pos: u64,
}

/// One version of a name: the name and its index in the name's versions.
type At = (String, usize);

/// The versions of one source table from its beginning to the folded
/// manifest, across its names.
#[derive(Debug, Clone)]
pub(super) struct Lineage {
    /// Under the name the table has at the folded manifest; its versions
    /// are the table's, numbered 1.. in order, so that a column's values
    /// can be traced through every version ([`super::shape::origins`]).
    pub table: FoldTable,
    /// For each of those versions: its name and its own version number.
    pub members: Vec<(String, u32)>,
}

impl Lineage {
    /// The number in [`Lineage::table`] of version `version` of `name`, if
    /// it is one of this table's.
    pub fn renumbered(&self, name: &str, version: u32) -> Option<u32> {
        self.members
            .iter()
            .position(|(n, v)| n == name && *v == version)
            .map(|i| i as u32 + 1)
    }

    /// The version the table has at the folded manifest (renumbered).
    pub fn last(&self) -> &TableVersion {
        self.table
            .versions
            .last()
            .expect("a lineage has at least one version")
    }

    /// The seq of the manifest before the one that began the table.
    pub fn began_after(&self) -> u64 {
        self.table
            .versions
            .first()
            .map_or(0, |v| v.checkpoint.saturating_sub(1))
    }
}

/// The version that each version of every name continues, up to manifest
/// `s1`.
pub(super) struct Lineages<'a> {
    tables: &'a HashMap<String, &'a FoldTable>,
    s1: u64,
    parent: HashMap<At, At>,
}

fn same_position(v: &TableVersion, e: &RenameEvent) -> bool {
    v.position.file == e.file && v.position.pos == e.pos
}

impl<'a> Lineages<'a> {
    /// Links the versions of `tables` up to `s1`, with the renames read
    /// from the manifests (a rename before them leaves the table it moved
    /// looking new under its new name: the fold then reads further back).
    pub fn new(
        tables: &'a HashMap<String, &'a FoldTable>,
        s1: u64,
        renames: &[RenameEvent],
    ) -> Self {
        let mut parent = HashMap::new();
        // The k-th rename from (or into) a name in a statement ends (or
        // begins) its k-th version ended (or begun) there.
        let mut from_nth: HashMap<(String, String, u64), usize> = HashMap::new();
        let mut to_nth: HashMap<(String, String, u64), usize> = HashMap::new();
        for e in renames {
            let from_k = {
                let n = from_nth
                    .entry((e.from.clone(), e.file.clone(), e.pos))
                    .or_default();
                *n += 1;
                *n - 1
            };
            let to_k = {
                let n = to_nth
                    .entry((e.to.clone(), e.file.clone(), e.pos))
                    .or_default();
                *n += 1;
                *n - 1
            };
            let (Some(from), Some(to)) = (tables.get(&e.from), tables.get(&e.to)) else {
                continue;
            };
            let ended = from
                .versions
                .iter()
                .enumerate()
                .filter(|(_, v)| v.checkpoint <= s1 && v.dropped && same_position(v, e))
                .map(|(i, _)| i)
                .nth(from_k);
            let begun = to
                .versions
                .iter()
                .enumerate()
                .filter(|(i, v)| {
                    v.checkpoint <= s1
                        && !v.dropped
                        && same_position(v, e)
                        && (*i == 0 || to.versions[i - 1].dropped)
                })
                .map(|(i, _)| i)
                .nth(to_k);
            if let (Some(ended), Some(begun)) = (ended, begun) {
                parent.insert((e.to.clone(), begun), (e.from.clone(), ended));
            }
        }
        for (name, t) in tables {
            for (i, v) in t.versions.iter().enumerate().skip(1) {
                if v.checkpoint > s1 {
                    break;
                }
                // An end belongs to the table it ends; a live version after
                // a live one continues it (ALTER TABLE).
                if v.dropped || !t.versions[i - 1].dropped {
                    parent.insert((name.clone(), i), (name.clone(), i - 1));
                }
            }
        }
        Lineages { tables, s1, parent }
    }

    /// The index of the version of `name` in force at the end of manifest
    /// `seq`.
    pub fn index_at(&self, name: &str, seq: u64) -> Option<usize> {
        let t = self.tables.get(name)?;
        t.versions
            .iter()
            .rposition(|v| v.checkpoint <= seq.min(self.s1))
    }

    /// The table that `name` holds at `s1`, if the name has a live version
    /// there.
    pub fn lineage(&self, name: &str) -> Option<Lineage> {
        let t = self.tables.get(name)?;
        let last = self.index_at(name, self.s1)?;
        if t.versions[last].dropped {
            return None;
        }
        let mut chain: Vec<At> = vec![(name.to_string(), last)];
        while let Some(p) = self.parent.get(chain.last().expect("not empty")) {
            if chain.contains(p) {
                // A cycle is a bug in the links; stop rather than loop.
                break;
            }
            chain.push(p.clone());
        }
        chain.reverse();
        let mut versions = Vec::with_capacity(chain.len());
        let mut members = Vec::with_capacity(chain.len());
        for (k, (n, i)) in chain.iter().enumerate() {
            let mut v = self.tables[n].versions[*i].clone();
            members.push((n.clone(), v.schema.version));
            v.schema.version = k as u32 + 1;
            versions.push(v);
        }
        Some(Lineage {
            table: FoldTable {
                db: t.db.clone(),
                table: t.table.clone(),
                versions,
            },
            members,
        })
    }

    /// Whether the version of `name` in force at the end of manifest `seq`
    /// is a live version of `lineage`'s table: the current table of `name`
    /// as of `seq` then holds that table's rows as of `seq`.
    pub fn held_at(&self, lineage: &Lineage, name: &str, seq: u64) -> bool {
        let Some(i) = self.index_at(name, seq) else {
            return false;
        };
        let v = &self.tables[name].versions[i];
        !v.dropped && lineage.renumbered(name, v.schema.version).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ColumnDef, TableSchema};
    use crate::source::BinlogPosition;

    fn version(name: &str, version: u32, checkpoint: u64, pos: u64, dropped: bool) -> TableVersion {
        TableVersion {
            schema: TableSchema {
                database: "db".into(),
                name: name.into(),
                version,
                columns: Vec::<ColumnDef>::new(),
                charset: None,
                unique_keys: Vec::new(),
            },
            order_key: pos as i64,
            position: BinlogPosition {
                file: "binlog.000001".into(),
                pos,
            },
            gtid: None,
            committed_at: String::new(),
            statement: None,
            dropped,
            checkpoint,
        }
    }

    fn rename(from: &str, to: &str, pos: u64) -> RenameEvent {
        RenameEvent {
            from: format!("db.{from}"),
            to: format!("db.{to}"),
            file: "binlog.000001".into(),
            pos,
        }
    }

    fn members(l: &Lineages<'_>, name: &str) -> Vec<(String, u32)> {
        l.lineage(&format!("db.{name}"))
            .map(|x| {
                x.members
                    .into_iter()
                    .map(|(n, v)| (n.trim_start_matches("db.").to_string(), v))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn tables(list: Vec<(&str, Vec<TableVersion>)>) -> Vec<FoldTable> {
        list.into_iter()
            .map(|(n, versions)| FoldTable {
                db: "db".into(),
                table: n.into(),
                versions,
            })
            .collect()
    }

    fn by_name(t: &[FoldTable]) -> HashMap<String, &FoldTable> {
        t.iter().map(|t| (t.name(), t)).collect()
    }

    fn m(list: &[(&str, u32)]) -> Vec<(String, u32)> {
        list.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    /// `RENAME TABLE a TO tmp, b TO a, tmp TO b` at 100, in manifest 2.
    #[test]
    fn a_swap_in_one_statement_moves_each_table() {
        let t = tables(vec![
            (
                "a",
                vec![
                    version("a", 1, 1, 10, false),
                    version("a", 2, 2, 100, true),
                    version("a", 3, 2, 100, false),
                ],
            ),
            (
                "b",
                vec![
                    version("b", 1, 1, 20, false),
                    version("b", 2, 2, 100, true),
                    version("b", 3, 2, 100, false),
                ],
            ),
            (
                "tmp",
                vec![
                    version("tmp", 1, 2, 100, false),
                    version("tmp", 2, 2, 100, true),
                ],
            ),
        ]);
        let names = by_name(&t);
        let renames = [
            rename("a", "tmp", 100),
            rename("b", "a", 100),
            rename("tmp", "b", 100),
        ];
        let l = Lineages::new(&names, 2, &renames);
        assert_eq!(members(&l, "a"), m(&[("b", 1), ("b", 2), ("a", 3)]));
        assert_eq!(
            members(&l, "b"),
            m(&[("a", 1), ("a", 2), ("tmp", 1), ("tmp", 2), ("b", 3)])
        );
        assert!(l.lineage("db.tmp").is_none());
        // Before the fold's manifest, each name held its own table.
        let a = l.lineage("db.a").unwrap();
        assert!(l.held_at(&a, "db.b", 1));
        assert!(!l.held_at(&a, "db.a", 1));
    }

    /// `RENAME TABLE log TO log_old`, `CREATE TABLE log LIKE log_old`: the
    /// new `log` is a table of its own; `log_old` holds the old one.
    #[test]
    fn a_name_reused_after_a_rename_holds_a_new_table() {
        let t = tables(vec![
            (
                "log",
                vec![
                    version("log", 1, 1, 10, false),
                    version("log", 2, 2, 100, true),
                    version("log", 3, 2, 200, false),
                ],
            ),
            ("log_old", vec![version("log_old", 1, 2, 100, false)]),
        ]);
        let names = by_name(&t);
        let l = Lineages::new(&names, 2, &[rename("log", "log_old", 100)]);
        assert_eq!(members(&l, "log"), m(&[("log", 3)]));
        assert_eq!(
            members(&l, "log_old"),
            m(&[("log", 1), ("log", 2), ("log_old", 1)])
        );
        let log = l.lineage("db.log").unwrap();
        assert_eq!(log.began_after(), 1);
        assert!(!l.held_at(&log, "db.log", 1));
    }

    /// `r` → `r_tmp` in manifest 2, back to `r` in manifest 3; a manifest
    /// folded at 2 sees only the first rename.
    #[test]
    fn renames_back_to_an_earlier_name_across_folds() {
        let t = tables(vec![
            (
                "r",
                vec![
                    version("r", 1, 1, 10, false),
                    version("r", 2, 2, 100, true),
                    version("r", 3, 3, 200, false),
                ],
            ),
            (
                "r_tmp",
                vec![
                    version("r_tmp", 1, 2, 100, false),
                    version("r_tmp", 2, 3, 200, true),
                ],
            ),
        ]);
        let names = by_name(&t);
        let renames = [rename("r", "r_tmp", 100), rename("r_tmp", "r", 200)];
        let l = Lineages::new(&names, 3, &renames);
        assert_eq!(
            members(&l, "r"),
            m(&[("r", 1), ("r", 2), ("r_tmp", 1), ("r_tmp", 2), ("r", 3)])
        );
        let r = l.lineage("db.r").unwrap();
        assert!(l.held_at(&r, "db.r_tmp", 2));
        assert!(l.held_at(&r, "db.r", 1));
        let at2 = Lineages::new(&names, 2, &renames[..1]);
        assert!(at2.lineage("db.r").is_none());
        assert_eq!(
            members(&at2, "r_tmp"),
            m(&[("r", 1), ("r", 2), ("r_tmp", 1)])
        );
    }

    /// A rename whose manifest was not read: the table looks new under its
    /// new name, from the manifest before the rename's.
    #[test]
    fn a_rename_not_read_begins_the_table_there() {
        let t = tables(vec![
            (
                "a",
                vec![version("a", 1, 1, 10, false), version("a", 2, 5, 100, true)],
            ),
            ("b", vec![version("b", 1, 5, 100, false)]),
        ]);
        let names = by_name(&t);
        let l = Lineages::new(&names, 6, &[]);
        let b = l.lineage("db.b").unwrap();
        assert_eq!(b.members, m(&[("db.b", 1)]));
        assert_eq!(b.began_after(), 4);
    }
}
