//! Lake column names (DESIGN.md "Lake column names"). Delta matches column
//! names without case and every table's files also hold the CDC columns, so
//! a source column named `_ts`, or two columns of the history that differ
//! only in case (`price` renamed to `Price`), would give a Delta schema two
//! fields of one name, which every reader refuses. Each source column gets
//! a lake name when it first enters the table's history, kept for as long
//! as the column lives:
//! - a name equal to a CDC column's in any case gets `_` appended (more
//!   `_` until it is unique);
//! - a name that differs from a lake name of the history only in case takes
//!   that lake name (a case-only rename, a drop and re-add in another case),
//!   unless a column of the same version holds it.
//!
//! Current-state tables show the source's current names, with the same
//! CDC rule ([`current_names`]).

use super::history::TableVersion;
use super::ColumnDef;

/// The CDC columns of every changelog file, in file order.
pub const CDC_COLUMNS: [&str; 9] = [
    "_op",
    "_seq",
    "_tx_seq",
    "_binlog_file",
    "_binlog_pos",
    "_gtid",
    "_ts",
    "_sql",
    "_before",
];

/// The columns a routed table (DESIGN.md "Shard routing") adds to its
/// shards' columns: the shard each row came from. A `truncate` marker that
/// names a shard empties only that shard's rows.
pub const SOURCE_DB: &str = "_source_db";
pub const SOURCE_TABLE: &str = "_source_table";

/// Equal as Delta (and MySQL) compare column names: without case.
pub fn same_name(a: &str, b: &str) -> bool {
    a == b || a.to_lowercase() == b.to_lowercase()
}

pub fn is_cdc(name: &str) -> bool {
    CDC_COLUMNS.iter().any(|c| same_name(c, name))
}

/// Gives each column of `columns` without a lake name its lake name.
/// `earlier` is the table's history before this version, oldest first,
/// already named.
pub fn assign(earlier: &[TableVersion], columns: &mut [ColumnDef]) {
    let history: Vec<&str> = earlier
        .iter()
        .flat_map(|v| v.schema.columns.iter().map(|c| c.lake_name.as_str()))
        .filter(|l| !l.is_empty())
        .collect();
    // A column of the previous version keeps its lake name, before any new
    // column could take it.
    if let Some(previous) = earlier.last().filter(|v| !v.dropped) {
        for c in columns.iter_mut().filter(|c| c.lake_name.is_empty()) {
            if let Some(p) = previous
                .schema
                .columns
                .iter()
                .find(|p| !p.lake_name.is_empty() && same_name(&p.name, &c.name))
            {
                c.lake_name = p.lake_name.clone();
            }
        }
    }
    for i in 0..columns.len() {
        if !columns[i].lake_name.is_empty() {
            continue;
        }
        let taken = |name: &str| {
            is_cdc(name)
                || columns
                    .iter()
                    .any(|c| !c.lake_name.is_empty() && same_name(&c.lake_name, name))
        };
        let mut name = columns[i].name.clone();
        while taken(&name) {
            name.push('_');
        }
        if let Some(known) = history.iter().find(|l| same_name(l, &name)) {
            name = known.to_string();
        }
        columns[i].lake_name = name;
    }
}

/// Names the columns of versions stored before lake names were recorded,
/// by the same rule: `versions` is one table's whole history, oldest first.
pub fn fill_history(versions: &mut [TableVersion]) {
    for i in 0..versions.len() {
        let (earlier, rest) = versions.split_at_mut(i);
        assign(earlier, &mut rest[0].schema.columns);
    }
}

/// The names of `columns` in a current-state table: the source's names,
/// a CDC column's name with `_` appended until unique.
pub fn current_names(columns: &[ColumnDef]) -> Vec<String> {
    let mut out: Vec<Option<String>> = columns
        .iter()
        .map(|c| (!is_cdc(&c.name)).then(|| c.name.clone()))
        .collect();
    for i in 0..columns.len() {
        if out[i].is_some() {
            continue;
        }
        let mut name = format!("{}_", columns[i].name);
        while is_cdc(&name) || out.iter().flatten().any(|n| same_name(n, &name)) {
            name.push('_');
        }
        out[i] = Some(name);
    }
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableSchema;
    use crate::types::binlog::BinlogPosition;

    fn col(name: &str) -> ColumnDef {
        ColumnDef::new(name, "int", None, true, false).unwrap()
    }

    fn version(n: u32, names: &[&str], dropped: bool) -> TableVersion {
        TableVersion {
            schema: TableSchema {
                database: "d".into(),
                name: "t".into(),
                version: n,
                columns: names.iter().map(|n| col(n)).collect(),
                charset: None,
                unique_keys: Vec::new(),
            },
            order_key: n as i64,
            position: BinlogPosition {
                file: "b.000001".into(),
                pos: 4,
            },
            gtid: None,
            committed_at: String::new(),
            statement: None,
            dropped,
            checkpoint: 1,
        }
    }

    /// The lake names of each version of a history given by source names.
    fn named(history: &[(&[&str], bool)]) -> Vec<Vec<String>> {
        let mut versions: Vec<TableVersion> = history
            .iter()
            .enumerate()
            .map(|(i, (names, dropped))| version(i as u32 + 1, names, *dropped))
            .collect();
        fill_history(&mut versions);
        versions
            .iter()
            .map(|v| {
                v.schema
                    .columns
                    .iter()
                    .map(|c| c.lake_name.clone())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn cdc_names_take_an_underscore_in_any_case() {
        let got = named(&[(&["id", "_ts", "_OP", "_Seq", "_before", "_sql_"], false)]);
        assert_eq!(got[0], ["id", "_ts_", "_OP_", "_Seq_", "_before_", "_sql_"]);
        // A source column already named like the suffixed name pushes the
        // CDC-named one further.
        let got = named(&[(&["_ts_", "_ts"], false)]);
        assert_eq!(got[0], ["_ts_", "_ts__"]);
        let got = named(&[(&["_TS", "_ts_"], false)]);
        assert_eq!(got[0], ["_TS_", "_ts__"]);
    }

    #[test]
    fn case_only_renames_and_re_adds_keep_the_lake_name() {
        let got = named(&[
            (&["id", "price"], false),
            (&["id", "Price"], false),
            (&["id"], false),
            (&["id", "PRICE"], false),
        ]);
        assert_eq!(got[1], ["id", "price"]);
        assert_eq!(got[3], ["id", "price"]);
        // Dropped with the table and created again in another case.
        let got = named(&[
            (&["id", "Name"], false),
            (&["id", "Name"], true),
            (&["ID", "name"], false),
        ]);
        assert_eq!(got[2], ["id", "Name"]);
    }

    #[test]
    fn a_lake_name_is_fixed_for_the_column_s_life() {
        // `_ts` came first: a later `_TS_` column cannot take its lake name,
        // even when added before it in table order.
        let got = named(&[(&["_ts"], false), (&["_TS_", "_ts"], false)]);
        assert_eq!(got[1], ["_TS__", "_ts_"]);
        // A rename to a new name is a new lake column (the old one is null
        // in later files); renamed back, it finds its first lake name.
        let got = named(&[(&["a"], false), (&["b"], false), (&["A"], false)]);
        assert_eq!(got, [vec!["a"], vec!["b"], vec!["a"]]);
    }

    #[test]
    fn lake_names_are_unique_without_case_over_the_history() {
        let histories: [&[(&[&str], bool)]; 3] = [
            &[
                (&["_ts", "x"], false),
                (&["_ts_", "x"], false),
                (&["_TS", "_Ts_"], false),
            ],
            &[
                (&["a", "_op"], false),
                (&["A", "_op_"], false),
                (&["_OP__", "_op_"], false),
            ],
            &[
                (&["p"], false),
                (&["p"], true),
                (&["P", "p_"], false),
                (&["_before", "P"], false),
            ],
        ];
        for h in histories {
            let got = named(h);
            for v in &got {
                let mut seen: Vec<String> = CDC_COLUMNS.iter().map(|c| c.to_string()).collect();
                for n in v {
                    assert!(
                        !seen.iter().any(|s| same_name(s, n)),
                        "{n} twice in {got:?}"
                    );
                    seen.push(n.clone());
                }
            }
            let mut union: Vec<&String> = got.iter().flatten().collect();
            union.sort();
            union.dedup();
            for (i, a) in union.iter().enumerate() {
                for b in &union[i + 1..] {
                    assert!(!same_name(a, b), "{a} and {b} in the union of {got:?}");
                }
            }
        }
    }

    #[test]
    fn current_tables_use_current_names_with_the_cdc_rule() {
        let cols: Vec<ColumnDef> = ["Price", "_ts", "_ts_", "_SEQ"]
            .iter()
            .map(|n| col(n))
            .collect();
        assert_eq!(current_names(&cols), ["Price", "_ts__", "_ts_", "_SEQ_"]);
    }
}
