//! `sluice forget --config F DB.TABLE --key JSON… | --keys-file F | --where
//! JSON…` (DESIGN.md "Column policies and erasure"): every row of the named
//! keys — and every `_before` image holding one — is taken out of the
//! table's changelog and its current table, beside a running sidecar.
//!
//! The erasure is of the past: rows from before the cut, the `_seq` after
//! the last manifest the table's changelog log holds when `forget` starts.
//! Rows of the keys that arrive later are kept.
//!
//! Order matters for a fold running beside: the changelog goes first (its
//! replaced files deleted), then the current table. A fold that read a
//! replaced changelog file before it went either committed before the
//! current table's pass read its log (the pass then erases what it wrote),
//! or finds its version taken by the pass's commit and folds again, reading
//! the copies (`fold_table::changes::live_sources`).
//!
//! Each run leaves a record, `_sluice/erasures/<id>.json`: the table, how
//! many keys, each key as an HMAC with the column key (never the values),
//! the cut and what was rewritten. `sluice status` lists them.

pub mod erase;
pub mod matcher;

use std::path::PathBuf;

use hmac::{Hmac, Mac};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::{json, Map, Value};
use sha2::Sha256;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::schema_commands as commands;
use crate::table::current::current_dir;
use crate::table::format::{TableFormat, FORMAT};
use erase::{Kind, Pass};
use matcher::{Matcher, Named, Names};

/// The folder of the erasure records.
pub const ERASURE_DIR: &str = "_sluice/erasures";
/// Keys without rows listed one by one at most; the rest are counted.
const SHOWN_MISSING: usize = 10;

/// What the command was asked.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `DB.TABLE`.
    pub table: String,
    /// `--key` objects, as given.
    pub keys: Vec<String>,
    /// `--keys-file`: one JSON object per line.
    pub keys_file: Option<PathBuf>,
    /// `--where` objects, as given.
    pub wheres: Vec<String>,
    /// `--shard DB.TABLE`: of a routed table (DESIGN.md "Shard routing"),
    /// the rows that came from this shard (`_source_db`, `_source_table`
    /// added to every object).
    pub shard: Option<String>,
}

/// What the command prints: a summary, and a line for each key the lake
/// held no rows of.
#[derive(Debug)]
pub struct Outcome {
    pub summary: String,
    pub warnings: Vec<String>,
    /// The record written, as JSON.
    pub record: Value,
}

fn bad(what: impl Into<String>) -> Error {
    Error::Forget(what.into())
}

/// A named row as given, with where it came from (`--key …`, a file's line).
type Given = (String, Map<String, Value>);

/// The named rows as given, and whether they name keys (not `--where`).
fn read_objects(req: &Request) -> Result<(Vec<Given>, bool)> {
    let by_key = !req.keys.is_empty() || req.keys_file.is_some();
    if by_key && !req.wheres.is_empty() {
        return Err(bad(
            "give --key / --keys-file or --where, not both: --key names rows of a table with a key, --where rows of a table without one",
        ));
    }
    let mut texts: Vec<(String, String)> = Vec::new();
    for k in &req.keys {
        texts.push((format!("--key {k}"), k.clone()));
    }
    for w in &req.wheres {
        texts.push((format!("--where {w}"), w.clone()));
    }
    if let Some(file) = &req.keys_file {
        let body = std::fs::read_to_string(file).map_err(|e| {
            bad(format!(
                "--keys-file {}: cannot read it: {e}",
                file.display()
            ))
        })?;
        for (n, line) in body.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            texts.push((
                format!("--keys-file {} line {}", file.display(), n + 1),
                line.to_string(),
            ));
        }
    }
    if texts.is_empty() {
        return Err(bad(
            "name the rows to erase with --key '{\"id\": 42}' (or --keys-file FILE, one such object per line), or --where '{\"column\": value}' for a table without a key",
        ));
    }
    let mut out = Vec::with_capacity(texts.len());
    for (label, text) in texts {
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "{label}: not JSON ({e}); give an object such as '{{\"id\": 42}}'"
            ))
        })?;
        match value {
            Value::Object(mut o) if !o.is_empty() => {
                if let Some(shard) = &req.shard {
                    with_shard(&mut o, shard).map_err(|e| bad(format!("{label}: {e}")))?;
                }
                out.push((label, o))
            }
            _ => {
                return Err(bad(format!(
                    "{label}: not a JSON object of column values; give an object such as '{{\"id\": 42}}'"
                )))
            }
        }
    }
    Ok((out, by_key))
}

/// Adds the shard of `--shard DB.TABLE` to a named row of a routed table.
fn with_shard(object: &mut Map<String, Value>, shard: &str) -> std::result::Result<(), String> {
    use crate::schema::lake_names::{SOURCE_DB, SOURCE_TABLE};
    let Some((db, table)) = shard
        .split_once('.')
        .filter(|(d, t)| !d.is_empty() && !t.is_empty())
    else {
        return Err(format!(
            "--shard `{shard}` is not a table name of the form DB.TABLE"
        ));
    };
    for (column, value) in [(SOURCE_DB, db), (SOURCE_TABLE, table)] {
        match object.get(column) {
            Some(v) if v.as_str() != Some(value) => {
                return Err(format!("{column} is {v}, and --shard says {value}"))
            }
            _ => {
                object.insert(column.to_string(), Value::String(value.to_string()));
            }
        }
    }
    Ok(())
}

/// The columns the rows are named by and each row's values in their order.
fn name_rows<'a>(
    table: &str,
    schema: &crate::schema::TableSchema,
    objects: &'a [Given],
    by_key: bool,
) -> Result<Named<'a>> {
    let key = schema.fold_key();
    let list = |names: &[String]| names.join(", ");
    if by_key && key.is_empty() {
        return Err(bad(format!(
            "{table} has no primary key (nor a NOT NULL unique key): name its rows with --where '{{\"column\": value}}'"
        )));
    }
    if !by_key && !key.is_empty() {
        return Err(bad(format!(
            "{table} has a key ({}): name its rows with --key",
            list(&key)
        )));
    }
    let column = |label: &str, given: &str| -> Result<String> {
        schema
            .columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(given))
            .map(|c| c.name.clone())
            .ok_or_else(|| bad(format!("{label}: {table} has no column `{given}`")))
    };
    let columns: Vec<String> = if by_key {
        key.clone()
    } else {
        let (label, first) = &objects[0];
        first
            .keys()
            .map(|k| column(label, k))
            .collect::<Result<_>>()?
    };
    let mut rows = Vec::with_capacity(objects.len());
    for (label, o) in objects {
        let mut values: Vec<Option<&Value>> = vec![None; columns.len()];
        for (k, v) in o {
            let name = column(label, k)?;
            let Some(at) = columns.iter().position(|c| *c == name) else {
                return Err(bad(if by_key {
                    format!(
                        "{label}: `{name}` is not a key column of {table} (its key is ({}))",
                        list(&key)
                    )
                } else {
                    format!(
                        "{label}: every --where names the same columns ({}), this one also `{name}`",
                        list(&columns)
                    )
                }));
            };
            values[at] = Some(v);
        }
        if let Some(missing) = values.iter().position(Option::is_none) {
            return Err(bad(if by_key {
                format!(
                    "{label}: no value for key column `{}` (the key of {table} is ({}))",
                    columns[missing],
                    list(&key)
                )
            } else {
                format!(
                    "{label}: every --where names the same columns ({}), this one not `{}`",
                    list(&columns),
                    columns[missing]
                )
            }));
        }
        rows.push(values.into_iter().flatten().collect());
    }
    Ok(Named {
        columns,
        rows,
        by_key,
    })
}

/// A named row as the record keeps it: the HMAC of its canonical JSON
/// (`{"id":42}`, the columns in the key's order, no spaces) with the column
/// key, so that whoever holds the key can tell whether a key was erased.
fn key_hmac(key: &[u8], columns: &[String], values: &[&Value]) -> String {
    let fields: Vec<String> = columns
        .iter()
        .zip(values)
        .map(|(c, v)| format!("{}:{v}", Value::from(c.as_str())))
        .collect();
    let canonical = format!("{{{}}}", fields.join(","));
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(canonical.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Erases the rows `req` names.
pub async fn forget(config: &Config, req: &Request) -> Result<Outcome> {
    let started_at = chrono::Utc::now();
    let (db, table) = commands::split_table(&req.table)?;
    let name = format!("{db}.{table}");
    let (objects, by_key) = read_objects(req)?;
    let (history, lake, committed) = commands::open(config).await?;
    let versions = commands::committed_versions(&history, &db, &table, committed)?;
    let latest = &versions[versions.len() - 1].schema;
    let named = name_rows(&name, latest, &objects, by_key)?;
    let column_key = config.columns.key.as_ref();
    let changelog_matcher = Matcher::new(&versions, &named, column_key, Names::Changelog)
        .map_err(|e| bad(format!("{name}: {e}")))?;
    let current_matcher = Matcher::new(&versions, &named, column_key, Names::Current)
        .map_err(|e| bad(format!("{name}: {e}")))?;

    let store = lake.store.clone();
    let dir = Path::from_iter([db.clone(), table.clone()]);
    let state = FORMAT.load(store.as_ref(), &dir, false).await?;
    // The cut: after the last manifest the changelog's log holds.
    let cut = match state
        .last_info
        .as_ref()
        .and_then(|i| i["cursor"]["next_seq"].as_i64())
    {
        Some(n) => n,
        None if state.applied > 0 => lake.read_manifest(state.applied).await?.cursor.next_seq,
        None => i64::MIN,
    };
    let stamp = format!(
        "{:013}-{}",
        started_at.timestamp_millis(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let info = json!({
        "id": stamp,
        "named_by": if by_key { "key" } else { "where" },
        "keys": named.rows.len(),
        "before_seq": cut,
    });
    let changelog = Pass {
        store: store.clone(),
        dir,
        kind: Kind::Changelog,
        matcher: &changelog_matcher,
        cut,
        stamp: &stamp,
        info: info.clone(),
    }
    .run()
    .await?;
    let current = Pass {
        store: store.clone(),
        dir: current_dir(&db, &table),
        kind: Kind::Current,
        matcher: &current_matcher,
        cut,
        stamp: &stamp,
        info: info.clone(),
    }
    .run()
    .await?;

    let found: std::collections::BTreeSet<usize> =
        changelog.found.union(&current.found).copied().collect();
    let hmacs: Option<Vec<String>> = column_key.map(|k| {
        named
            .rows
            .iter()
            .map(|r| key_hmac(k.bytes(), &named.columns, r))
            .collect()
    });
    let record = json!({
        "id": stamp,
        "table": name,
        "named_by": if by_key { "key" } else { "where" },
        "keys": named.rows.len(),
        "keys_found": found.len(),
        "key_hmacs": hmacs,
        "before_seq": cut,
        "started_at": started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "finished_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "changelog": changelog,
        "current": current,
        "sluice_version": env!("CARGO_PKG_VERSION"),
    });
    let record_path = record_path(&stamp);
    store
        .put(
            &record_path,
            PutPayload::from(serde_json::to_vec_pretty(&record).unwrap_or_default()),
        )
        .await?;

    let what = if by_key { "key" } else { "--where" };
    let mut warnings = Vec::new();
    let missing: Vec<usize> = (0..named.rows.len())
        .filter(|i| !found.contains(i))
        .collect();
    for i in missing.iter().take(SHOWN_MISSING) {
        let (label, _) = &objects[*i];
        warnings.push(format!(
            "{label}: {name} has no rows of it in the lake before _seq {cut} (never copied, or erased already)"
        ));
    }
    if missing.len() > SHOWN_MISSING {
        warnings.push(format!(
            "… and {} more {what}s without rows in the lake",
            missing.len() - SHOWN_MISSING
        ));
    }
    let mut summary = format!(
        "erased {} of {} {what}s of {name} (rows before _seq {cut}): changelog {} rows, {} files rewritten, {} earlier files deleted",
        found.len(),
        named.rows.len(),
        changelog.rows_removed,
        changelog.files_rewritten,
        changelog.files_deleted,
    );
    if current.commits > 0 || current.files_deleted > 0 {
        summary.push_str(&format!(
            "; current table {} rows, {} files rewritten, {} earlier files deleted",
            current.rows_removed, current.files_rewritten, current.files_deleted
        ));
    }
    summary.push_str(&format!("; recorded in {record_path}"));
    if column_key.is_none() {
        warnings.push(
            "no column key is set (SLUICE_COLUMN_KEY or [column_key] file): the record counts the keys but cannot name them by HMAC".to_string(),
        );
    }
    Ok(Outcome {
        summary,
        warnings,
        record,
    })
}

/// Where the record of run `id` is.
pub fn record_path(id: &str) -> Path {
    Path::from(format!("{ERASURE_DIR}/{id}.json"))
}

/// The erasure records of the lake, oldest first.
pub async fn records(store: &dyn object_store::ObjectStore) -> Result<Vec<Value>> {
    use futures::TryStreamExt;
    let mut metas: Vec<object_store::ObjectMeta> = store
        .list(Some(&Path::from(ERASURE_DIR)))
        .try_collect()
        .await?;
    metas.sort_by(|a, b| a.location.cmp(&b.location));
    let mut out = Vec::with_capacity(metas.len());
    for m in metas {
        let bytes = store.get(&m.location).await?.bytes().await?;
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_joins_every_key_of_a_routed_table() {
        let mut o: Map<String, Value> = serde_json::from_str(r#"{"id": 1}"#).unwrap();
        with_shard(&mut o, "shop_1.orders").unwrap();
        assert_eq!(
            Value::Object(o.clone()),
            serde_json::json!({"id": 1, "_source_db": "shop_1", "_source_table": "orders"})
        );
        // Saying the same again is fine; another shard is not.
        with_shard(&mut o, "shop_1.orders").unwrap();
        let e = with_shard(&mut o, "shop_2.orders").unwrap_err();
        assert!(e.contains("--shard says shop_2"), "{e}");
        let e = with_shard(&mut o, "orders").unwrap_err();
        assert!(e.contains("DB.TABLE"), "{e}");
    }

    #[test]
    fn bad_input_names_the_problem_and_the_fix() {
        let req = |keys: &[&str], wheres: &[&str]| Request {
            table: "db.t".into(),
            keys: keys.iter().map(|s| s.to_string()).collect(),
            keys_file: None,
            wheres: wheres.iter().map(|s| s.to_string()).collect(),
            shard: None,
        };
        let e = read_objects(&req(&["{id: 1}"], &[]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("forget: --key {id: 1}: not JSON"), "{e}");
        let e = read_objects(&req(&["[1]"], &[])).unwrap_err().to_string();
        assert!(e.contains("not a JSON object"), "{e}");
        let e = read_objects(&req(&["{\"id\":1}"], &["{\"a\":1}"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not both"), "{e}");
        let e = read_objects(&req(&[], &[])).unwrap_err().to_string();
        assert!(e.contains("--key"), "{e}");
    }

    #[test]
    fn rows_are_named_by_the_whole_key() {
        let schema = crate::schema::TableSchema {
            database: "db".into(),
            name: "t".into(),
            version: 1,
            columns: vec![
                crate::schema::ColumnDef::new("a", "int", None, false, true).unwrap(),
                crate::schema::ColumnDef::new("b", "int", None, false, true).unwrap(),
                crate::schema::ColumnDef::new("v", "int", None, true, false).unwrap(),
            ],
            charset: None,
            unique_keys: Vec::new(),
        };
        let obj = |text: &str| match serde_json::from_str::<Value>(text).unwrap() {
            Value::Object(o) => (format!("--key {text}"), o),
            _ => unreachable!(),
        };
        let ok = vec![obj(r#"{"B": 2, "a": 1}"#)];
        let named = name_rows("db.t", &schema, &ok, true).unwrap();
        assert_eq!(named.columns, vec!["a", "b"]);
        assert_eq!(named.rows[0], vec![&json!(1), &json!(2)]);
        let missing = vec![obj(r#"{"a": 1}"#)];
        let e = name_rows("db.t", &schema, &missing, true).err().unwrap();
        assert!(e.to_string().contains("no value for key column `b`"), "{e}");
        let extra = vec![obj(r#"{"a": 1, "b": 2, "v": 3}"#)];
        let e = name_rows("db.t", &schema, &extra, true).err().unwrap();
        assert!(e.to_string().contains("`v` is not a key column"), "{e}");
        let unknown = vec![obj(r#"{"a": 1, "zz": 3}"#)];
        let e = name_rows("db.t", &schema, &unknown, true).err().unwrap();
        assert!(e.to_string().contains("has no column `zz`"), "{e}");
        let e = name_rows("db.t", &schema, &ok, false).err().unwrap();
        assert!(e.to_string().contains("has a key (a, b)"), "{e}");
    }

    #[test]
    fn key_hmacs_are_of_the_canonical_json() {
        // Python: hmac.new(b"k", b'{"id":42}', hashlib.sha256).hexdigest()
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(br#"{"id":42}"#);
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(key_hmac(b"k", &["id".to_string()], &[&json!(42)]), want);
    }
}
