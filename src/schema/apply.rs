//! Applying parsed DDL to a table's shape, and deriving a shape from a
//! TABLE_MAP that carries `binlog_row_metadata=FULL` metadata.

use mysql_common::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_common::collations::{Collation, CollationId};
use mysql_common::constants::ColumnType;

use super::ddl::{AlterOp, ColumnPosition, ColumnSpec, TableName, UniqueSpec};
use super::{next_key_position, sort_unique_keys, ColumnDef, TableSchema, UniqueKey};
use crate::types::column::{is_textual, max_bytes_per_char, server_type};
use crate::types::metadata::{enum_set_labels, raw_field};

/// A column's charset: its own, else the table's default (textual types only).
fn resolve_charset(spec: &ColumnSpec, table_charset: &str) -> Option<String> {
    if !is_textual(&spec.mysql_type) {
        // BINARY/BLOB carry none; MariaDB's JSON is LONGTEXT utf8mb4.
        return if spec.mysql_type.eq_ignore_ascii_case("json") {
            Some("utf8mb4".into())
        } else {
            spec.charset.clone().filter(|_| false)
        };
    }
    Some(
        spec.charset
            .clone()
            .unwrap_or_else(|| table_charset.to_string()),
    )
}

fn column_from_spec(spec: &ColumnSpec, table_charset: &str) -> Result<ColumnDef, String> {
    let charset = resolve_charset(spec, table_charset);
    let mut column = ColumnDef::new(
        spec.name.clone(),
        server_type(&spec.mysql_type, charset.as_deref()),
        charset,
        spec.nullable,
        spec.primary_key,
    )?;
    column.key_position = spec.key_position.filter(|_| spec.primary_key);
    Ok(column)
}

pub fn columns_from_specs(
    specs: &[ColumnSpec],
    table_charset: &str,
) -> Result<Vec<ColumnDef>, String> {
    let mut seen = std::collections::HashSet::new();
    specs
        .iter()
        .map(|s| {
            if !seen.insert(s.name.to_ascii_lowercase()) {
                return Err(format!("duplicate column `{}`", s.name));
            }
            column_from_spec(s, table_charset)
        })
        .collect()
}

/// The unique keys of a CREATE TABLE: those declared on columns (`code INT
/// UNIQUE`), then the table's, in the server's key order.
pub fn unique_keys_from_specs(
    specs: &[ColumnSpec],
    keys: &[UniqueSpec],
    columns: &[ColumnDef],
) -> Result<Vec<UniqueKey>, String> {
    let mut out = Vec::new();
    for spec in specs.iter().filter(|s| s.unique) {
        add_unique(&mut out, columns, &column_unique(&spec.name))?;
    }
    for key in keys {
        add_unique(&mut out, columns, key)?;
    }
    sort_unique_keys(columns, &mut out);
    Ok(out)
}

/// The unique key a column-level `UNIQUE` makes.
fn column_unique(column: &str) -> UniqueSpec {
    UniqueSpec {
        name: None,
        parts: vec![(column.to_string(), None)],
        using_hash: false,
    }
}

/// InnoDB's longest B-tree key (16 KiB pages): MariaDB makes a longer
/// unique key a long hash key.
const MAX_BTREE_KEY_BYTES: u64 = 3072;

/// The bytes a key part takes in an index, as far as the long-hash rule
/// needs it; `None` for a BLOB/TEXT column without a prefix (always a long
/// hash). Types other than strings count 8 bytes, near enough: only string
/// keys come near the limit.
fn key_part_bytes(column: &ColumnDef, prefix: Option<u32>) -> Option<u64> {
    let per_char = column.charset.as_deref().map_or(1, max_bytes_per_char);
    let lower = column.mysql_type.to_ascii_lowercase();
    let base = lower
        .split(|c: char| c == '(' || c.is_whitespace())
        .next()
        .unwrap_or("");
    let declared = lower
        .split_once('(')
        .and_then(|(_, rest)| rest.split([')', ',']).next())
        .and_then(|n| n.trim().parse::<u64>().ok());
    let prefix = prefix.map(u64::from);
    match base {
        "char" | "character" | "nchar" | "varchar" | "nvarchar" => {
            Some(prefix.or(declared).unwrap_or(1) * per_char)
        }
        "binary" | "varbinary" => Some(prefix.or(declared).unwrap_or(1)),
        "tinytext" | "text" | "mediumtext" | "longtext" | "json" | "tinyblob" | "blob"
        | "mediumblob" | "longblob" | "geometry" | "point" | "linestring" | "polygon"
        | "multipoint" | "multilinestring" | "multipolygon" | "geometrycollection" => {
            prefix.map(|p| p * per_char)
        }
        _ => Some(8),
    }
}

/// The name the server gives an unnamed key: its first column's, else that
/// with `_2`, `_3`, … (MariaDB's `make_unique_key_name`). Only the unique
/// keys are known here, so a plain index of the same name goes unseen.
fn unique_key_name(keys: &[UniqueKey], column: &str) -> String {
    let taken = |n: &str| {
        n.eq_ignore_ascii_case("PRIMARY") || keys.iter().any(|k| k.name.eq_ignore_ascii_case(n))
    };
    if !taken(column) {
        return column.to_string();
    }
    (2..)
        .map(|i| format!("{column}_{i}"))
        .find(|n| !taken(n))
        .unwrap_or_default()
}

/// Adds the unique key `spec` to `keys` (last; the caller sorts). A name
/// that exists already adds nothing: `ADD UNIQUE IF NOT EXISTS`.
fn add_unique(
    keys: &mut Vec<UniqueKey>,
    columns: &[ColumnDef],
    spec: &UniqueSpec,
) -> Result<(), String> {
    if let Some(name) = &spec.name {
        if keys.iter().any(|k| k.name.eq_ignore_ascii_case(name)) {
            return Ok(());
        }
    }
    if spec.parts.is_empty() {
        return Err("a UNIQUE key without columns".into());
    }
    let mut names = Vec::with_capacity(spec.parts.len());
    let mut bytes = Some(0u64);
    for (part, prefix) in &spec.parts {
        let column = &columns[index_of(columns, part)?];
        names.push(column.name.clone());
        bytes = bytes
            .zip(key_part_bytes(column, *prefix))
            .map(|(a, b)| a + b);
    }
    let name = match &spec.name {
        Some(n) => n.clone(),
        None => unique_key_name(keys, &names[0]),
    };
    keys.push(UniqueKey {
        name,
        columns: names,
        prefix: spec.parts.iter().any(|(_, p)| p.is_some()),
        hash: spec.using_hash || bytes.is_none_or(|b| b > MAX_BTREE_KEY_BYTES),
    });
    Ok(())
}

/// A column renamed from `old` to `new`, in every key that has it.
fn rename_in_keys(keys: &mut [UniqueKey], old: &str, new: &str) {
    for name in keys.iter_mut().flat_map(|k| k.columns.iter_mut()) {
        if name.eq_ignore_ascii_case(old) {
            *name = new.to_string();
        }
    }
}

fn index_of(columns: &[ColumnDef], name: &str) -> Result<usize, String> {
    columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("no column `{name}`"))
}

/// Inserts `column` at `position` (named by the columns' new names); returns
/// its index.
fn insert_at(
    columns: &mut Vec<ColumnDef>,
    column: ColumnDef,
    position: &ColumnPosition,
) -> Result<usize, String> {
    let i = match position {
        ColumnPosition::Last => columns.len(),
        ColumnPosition::First => 0,
        ColumnPosition::After(name) => index_of(columns, name)? + 1,
    };
    columns.insert(i, column);
    Ok(i)
}

/// The result of an ALTER TABLE on one table.
#[derive(Debug)]
pub struct Altered {
    pub columns: Vec<ColumnDef>,
    pub charset: String,
    /// In the server's key order.
    pub unique_keys: Vec<UniqueKey>,
    pub renamed_to: Option<TableName>,
    /// The name each column had before the statement (`None`: added by it).
    pub origins: Vec<Option<String>>,
    /// The unique keys the statement adds, with the index of the clause
    /// that adds each: the server adds them after every column change, in
    /// statement order.
    new_keys: Vec<(usize, UniqueSpec)>,
    /// The index of the clause being applied.
    clause: usize,
    /// The columns the statement drops, as the primary key had them when
    /// they went (see [`rekey_dropped`]).
    dropped: Vec<ColumnDef>,
}

impl Altered {
    /// The column that DROP, CHANGE, MODIFY and RENAME COLUMN name: they name
    /// the table as the statement found it (`CHANGE a b INT, RENAME b TO c`
    /// renames the old a and the old b), or else a column that an ADD of the
    /// same statement made.
    fn named(&self, name: &str) -> Result<usize, String> {
        self.origins
            .iter()
            .position(|o| o.as_deref().is_some_and(|o| o.eq_ignore_ascii_case(name)))
            .or_else(|| {
                (0..self.columns.len()).find(|&i| {
                    self.origins[i].is_none() && self.columns[i].name.eq_ignore_ascii_case(name)
                })
            })
            .ok_or_else(|| format!("no column `{name}`"))
    }

    /// The name each column of the result had before the statement (`None`:
    /// added by it); a renamed column keeps its data under the new name.
    pub fn origins(&self) -> &[Option<String>] {
        &self.origins
    }
}

/// Applies ALTER TABLE operations in order, as the server does.
pub fn apply_alter(base: &TableSchema, ops: &[AlterOp]) -> Result<Altered, String> {
    let mut altered = Altered {
        columns: base.columns.clone(),
        charset: base.charset.clone().unwrap_or_else(|| "utf8mb4".into()),
        unique_keys: base.unique_keys.clone(),
        renamed_to: None,
        origins: base.columns.iter().map(|c| Some(c.name.clone())).collect(),
        new_keys: Vec::new(),
        clause: 0,
        dropped: Vec::new(),
    };
    // The server applies DROP (of columns and keys), CHANGE, MODIFY and
    // RENAME to the table as it was, then adds the new columns, then the new
    // keys: `ADD PRIMARY KEY (a), DROP PRIMARY KEY` moves the key, `ADD z,
    // CHANGE z y` renames the old z and adds a new one, and `DROP i, ADD i …,
    // ADD PRIMARY KEY (i)` keys the new i.
    // A CHANGE or MODIFY of a column that only an ADD of the same statement
    // makes (`ADD c INT, MODIFY c BIGINT`) changes the added column.
    let added = |name: &str| {
        index_of(&base.columns, name).is_err()
            && ops.iter().any(|op| match op {
                AlterOp::Add(spec, _) => spec.name.eq_ignore_ascii_case(name),
                _ => false,
            })
    };
    let phase = |op: &AlterOp| match op {
        AlterOp::Add(..) => 1,
        AlterOp::IfColumn { op, .. } if matches!(op.as_ref(), AlterOp::Add(..)) => 1,
        AlterOp::Change { old, .. } if added(old) => 2,
        AlterOp::AddPrimaryKey(_) | AlterOp::AddPrimaryKeyIfNone(_) | AlterOp::AddUnique(_) => 3,
        AlterOp::Period { .. } => 4,
        _ => 0,
    };
    for p in 0..5 {
        for (i, op) in ops.iter().enumerate().filter(|(_, op)| phase(op) == p) {
            altered.clause = i;
            apply_op(&mut altered, op, &base.columns)?;
        }
    }
    rekey_dropped(&mut altered);
    close_key_gaps(&mut altered.columns);
    let mut new_keys = std::mem::take(&mut altered.new_keys);
    new_keys.sort_by_key(|(i, _)| *i);
    for (_, spec) in &new_keys {
        add_unique(&mut altered.unique_keys, &altered.columns, spec)?;
    }
    sort_unique_keys(&altered.columns, &mut altered.unique_keys);
    Ok(altered)
}

/// A key part of a column the statement dropped, until [`rekey_dropped`]
/// decides: no column name holds a NUL.
fn dropped_key_part(name: &str) -> String {
    format!("\0{name}")
}

/// The server keeps a table's keys by column name across one ALTER TABLE:
/// a key part whose column was dropped names a column that the statement
/// adds under the same name (`DROP i, ADD i INT AUTO_INCREMENT` keeps `i`
/// in the primary key, NOT NULL, and in its unique keys), not one renamed
/// to it; otherwise the part leaves the key, and a key left without
/// columns goes. (MariaDB refuses to drop one column of a several-column
/// unique key; MySQL narrows the key.)
fn rekey_dropped(t: &mut Altered) {
    for gone in std::mem::take(&mut t.dropped) {
        let readded = (0..t.columns.len()).find(|&i| {
            t.origins[i].is_none() && t.columns[i].name.eq_ignore_ascii_case(&gone.name)
        });
        let part = dropped_key_part(&gone.name);
        match readded {
            Some(i) => {
                let name = t.columns[i].name.clone();
                rename_in_keys(&mut t.unique_keys, &part, &name);
                if gone.primary_key {
                    t.columns[i].primary_key = true;
                    t.columns[i].key_position = gone.key_position;
                    t.columns[i].nullable = false;
                }
            }
            None => {
                for key in t.unique_keys.iter_mut() {
                    key.columns.retain(|c| *c != part);
                }
            }
        }
    }
    t.unique_keys.retain(|k| !k.columns.is_empty());
}

/// Numbers the primary key's places 1, 2, … again in their order, after a
/// key column left the key with the column (`DROP a` of `PRIMARY KEY (b,
/// a, c)`): the server narrows the key and keeps the others' order.
fn close_key_gaps(columns: &mut [ColumnDef]) {
    let mut placed: Vec<(u32, usize)> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.primary_key)
        .filter_map(|(i, c)| c.key_position.map(|p| (p, i)))
        .collect();
    placed.sort_unstable();
    for (at, (_, i)) in placed.into_iter().enumerate() {
        columns[i].key_position = Some(at as u32 + 1);
    }
}

/// Applies one operation; `before` is the table as the statement found it.
fn apply_op(t: &mut Altered, op: &AlterOp, before: &[ColumnDef]) -> Result<(), String> {
    match op {
        AlterOp::Add(spec, position) => {
            if index_of(&t.columns, &spec.name).is_ok() {
                return Err(format!("column `{}` already exists", spec.name));
            }
            let column = column_from_spec(spec, &t.charset)?;
            let i = insert_at(&mut t.columns, column, position)?;
            t.origins.insert(i, None);
            if spec.unique {
                t.new_keys.push((t.clause, column_unique(&spec.name)));
            }
        }
        AlterOp::Drop(name) => {
            let i = t.named(name)?;
            let column = t.columns.remove(i);
            t.origins.remove(i);
            // Whether it leaves its keys is known at the end of the statement.
            let gone = dropped_key_part(&column.name);
            rename_in_keys(&mut t.unique_keys, &column.name, &gone);
            t.dropped.push(column);
        }
        AlterOp::Change {
            old,
            column,
            position,
        } => {
            let i = t.named(old)?;
            let was_pk = t.columns[i].primary_key;
            let mut new = column_from_spec(column, &t.charset)?;
            // The column keeps its place in the key under its new definition.
            if was_pk {
                new.primary_key = true;
                new.key_position = t.columns[i].key_position;
            }
            if new.primary_key {
                new.nullable = false;
            }
            rename_in_keys(&mut t.unique_keys, &t.columns[i].name, &new.name);
            match position {
                ColumnPosition::Last => t.columns[i] = new,
                p => {
                    t.columns.remove(i);
                    let origin = t.origins.remove(i);
                    let j = insert_at(&mut t.columns, new, p)?;
                    t.origins.insert(j, origin);
                }
            }
            if column.unique {
                t.new_keys.push((t.clause, column_unique(&column.name)));
            }
        }
        AlterOp::RenameColumn { old, new } => {
            let i = t.named(old)?;
            rename_in_keys(&mut t.unique_keys, &t.columns[i].name, new);
            t.columns[i].name = new.clone();
        }
        AlterOp::AddUnique(spec) => t.new_keys.push((t.clause, spec.clone())),
        AlterOp::DropIndex(name) => t.unique_keys.retain(|k| !k.name.eq_ignore_ascii_case(name)),
        AlterOp::RenameIndex { old, new } => {
            for key in t.unique_keys.iter_mut() {
                if key.name.eq_ignore_ascii_case(old) {
                    key.name = new.clone();
                }
            }
        }
        AlterOp::AddPrimaryKey(names) => {
            let columns = &mut t.columns;
            for (at, name) in names.iter().enumerate() {
                let i = index_of(columns, name)?;
                columns[i].primary_key = true;
                columns[i].key_position = Some(at as u32 + 1);
                columns[i].nullable = false;
            }
        }
        AlterOp::AddPrimaryKeyIfNone(names) => {
            // Decided against the table before the statement, like IF EXISTS.
            if !before.iter().any(|c| c.primary_key) && !t.columns.iter().any(|c| c.primary_key) {
                apply_op(t, &AlterOp::AddPrimaryKey(names.clone()), before)?;
            }
        }
        AlterOp::DropPrimaryKey => {
            for c in t.columns.iter_mut().chain(t.dropped.iter_mut()) {
                c.primary_key = false;
                c.key_position = None;
            }
        }
        AlterOp::RenameTo(name) => t.renamed_to = Some(name.clone()),
        AlterOp::ConvertCharset(cs) => {
            t.charset = cs.clone();
            for c in t.columns.iter_mut() {
                if let Some(from) = c.charset.clone().filter(|_| is_textual(&c.mysql_type)) {
                    let key_position = c.key_position;
                    *c = ColumnDef::new(
                        c.name.clone(),
                        converted_type(&c.mysql_type, &from, cs),
                        Some(cs.clone()),
                        c.nullable,
                        c.primary_key,
                    )?;
                    c.key_position = key_position;
                }
            }
        }
        AlterOp::DefaultCharset(cs) => t.charset = cs.clone(),
        AlterOp::Period {
            start,
            end,
            system_versioned,
        } => {
            let columns = &mut t.columns;
            let keyed = columns.iter().any(|c| c.primary_key);
            for name in [start, end] {
                let i = index_of(columns, name)?;
                columns[i].nullable = false;
            }
            let i = index_of(columns, end)?;
            if *system_versioned && keyed && !columns[i].primary_key {
                // The server appends the row end to the key.
                columns[i].key_position = next_key_position(
                    columns
                        .iter()
                        .filter(|c| c.primary_key)
                        .map(|c| c.key_position),
                );
                columns[i].primary_key = true;
            }
        }
        // The server decides `IF [NOT] EXISTS` against the table before the
        // statement, and skips a clause that an earlier one made moot:
        // `DROP COLUMN IF EXISTS b, ADD COLUMN IF NOT EXISTS b …` only drops b.
        AlterOp::IfColumn { column, exists, op } => {
            let now = index_of(&t.columns, column).is_ok();
            let then = index_of(before, column).is_ok();
            if now == *exists && then == *exists {
                apply_op(t, op, before)?;
            }
        }
    }
    Ok(())
}

/// The type the server gives a text column when `CONVERT TO CHARACTER SET`
/// changes its charset: the length in characters is kept, so a TINYTEXT,
/// TEXT or MEDIUMTEXT whose bytes no longer fit becomes the next larger
/// text type, and so does a VARCHAR longer than a row allows (65535 bytes).
fn converted_type(mysql_type: &str, from: &str, to: &str) -> String {
    let (from_max, to_max) = (max_bytes_per_char(from), max_bytes_per_char(to));
    if to_max <= from_max {
        return mysql_type.to_string();
    }
    let lower = mysql_type.to_ascii_lowercase();
    let text_bytes = |bytes: u64| -> String {
        match bytes * to_max / from_max {
            n if n < 256 => "tinytext",
            n if n < 65_536 => "text",
            n if n < 16_777_216 => "mediumtext",
            _ => "longtext",
        }
        .to_string()
    };
    match lower.as_str() {
        "tinytext" => text_bytes(255),
        "text" => text_bytes(65_535),
        "mediumtext" => text_bytes(16_777_215),
        _ => {
            if let Some(n) = lower
                .strip_prefix("varchar(")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|n| n.trim().parse::<u64>().ok())
            {
                if n * to_max > 65_535 {
                    return if n * to_max < 16_777_216 {
                        "mediumtext".into()
                    } else {
                        "longtext".into()
                    };
                }
            }
            mysql_type.to_string()
        }
    }
}

fn quote_labels(labels: &[String]) -> String {
    labels
        .iter()
        .map(|l| format!("'{}'", l.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",")
}

/// ENUM/SET labels of TABLE_MAP metadata as text (lossy, as mysql_common's
/// `value()` was; the exact labels are taken by the decode plan).
fn labels_text(raw: &[u8]) -> Result<Vec<Vec<String>>, String> {
    Ok(enum_set_labels(raw)?
        .into_iter()
        .map(|labels| {
            labels
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        })
        .collect())
}

/// Derives a table's shape from a TABLE_MAP with full optional metadata
/// (`binlog_row_metadata=FULL`): names, signedness, charsets, ENUM/SET
/// labels, the primary key, and (from the null bits every TABLE_MAP has)
/// nullability. `None` when the metadata is not there.
/// The columns at `compressed` are MariaDB's compressed ones
/// ([`crate::decode::compressed::plain_table_map`]).
pub fn derive_from_table_map(
    tme: &TableMapEvent<'_>,
    compressed: &[usize],
) -> Result<Option<Vec<ColumnDef>>, String> {
    let n = tme.columns_count() as usize;
    let mut names: Option<Vec<String>> = None;
    let mut unsigned_flags: Vec<bool> = Vec::new();
    let mut default_charset: Option<u16> = None;
    let mut column_charsets: Option<Vec<u16>> = None;
    let mut enum_sets: (Vec<Vec<String>>, Vec<Vec<String>>) = (Vec::new(), Vec::new());
    let mut pk: Vec<usize> = Vec::new();
    for field in tme.iter_optional_meta() {
        match field.map_err(|e| format!("bad TABLE_MAP metadata: {e}"))? {
            OptionalMetadataField::ColumnName(cn) => {
                names = Some(
                    cn.iter_names()
                        .filter_map(|r| r.ok())
                        .map(|c| c.name().into_owned())
                        .collect(),
                )
            }
            OptionalMetadataField::Signedness(bits) => {
                unsigned_flags = bits.iter().map(|b| *b).collect()
            }
            OptionalMetadataField::DefaultCharset(dc) => {
                default_charset = Some(dc.default_charset());
                let mut all = vec![dc.default_charset(); n];
                for nd in dc.iter_non_default().filter_map(|r| r.ok()) {
                    if let Some(slot) = all.get_mut(nd.column_index() as usize) {
                        *slot = nd.charset();
                    }
                }
                column_charsets = Some(all);
            }
            OptionalMetadataField::ColumnCharset(cc) => {
                column_charsets = Some(cc.iter_charsets().filter_map(|r| r.ok()).collect())
            }
            OptionalMetadataField::EnumStrValue(v) => enum_sets.0 = labels_text(&raw_field(&v))?,
            OptionalMetadataField::SetStrValue(v) => enum_sets.1 = labels_text(&raw_field(&v))?,
            OptionalMetadataField::SimplePrimaryKey(k) => {
                pk = k
                    .iter_indexes()
                    .filter_map(|r| r.ok())
                    .map(|i| i as usize)
                    .collect()
            }
            OptionalMetadataField::PrimaryKeyWithPrefix(k) => {
                pk = k
                    .iter_keys()
                    .filter_map(|r| r.ok())
                    .map(|k| k.column_index() as usize)
                    .collect()
            }
            _ => {}
        }
    }
    let Some(names) = names else { return Ok(None) };
    if names.len() != n {
        return Err(format!("TABLE_MAP names {} columns of {n}", names.len()));
    }
    let _ = default_charset;
    // Charsets are listed for character columns only, in column order;
    // signedness for numeric columns only; labels for ENUM and SET columns.
    let (mut text_i, mut num_i, mut enum_i, mut set_i) = (0, 0, 0, 0);
    let mut columns = Vec::with_capacity(n);
    for (i, name) in names.into_iter().enumerate() {
        let ty = tme
            .get_column_type(i)
            .map_err(|e| format!("column {name}: {e}"))?
            .ok_or_else(|| format!("column {name}: no type"))?;
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        let m0 = meta.first().copied().unwrap_or(0) as u64;
        let m1 = meta.get(1).copied().unwrap_or(0) as u64;
        let mut numeric = |base: &str| {
            let unsigned = unsigned_flags.get(num_i).copied().unwrap_or(false);
            num_i += 1;
            if unsigned {
                format!("{base} unsigned")
            } else {
                base.to_string()
            }
        };
        let mut charset = || -> Result<Option<String>, String> {
            let id = column_charsets
                .as_ref()
                .and_then(|c| c.get(text_i))
                .copied();
            text_i += 1;
            match id {
                None => Ok(None),
                Some(id) => {
                    let cs = Collation::from(CollationId::from(id)).charset().to_string();
                    if cs.is_empty() {
                        Err(format!("column {name}: unknown collation id {id}"))
                    } else {
                        Ok(Some(cs))
                    }
                }
            }
        };
        use ColumnType as T;
        let (mysql_type, cs) = match ty {
            T::MYSQL_TYPE_TINY => (numeric("tinyint"), None),
            T::MYSQL_TYPE_SHORT => (numeric("smallint"), None),
            T::MYSQL_TYPE_INT24 => (numeric("mediumint"), None),
            T::MYSQL_TYPE_LONG => (numeric("int"), None),
            T::MYSQL_TYPE_LONGLONG => (numeric("bigint"), None),
            T::MYSQL_TYPE_FLOAT => (numeric("float"), None),
            T::MYSQL_TYPE_DOUBLE => (numeric("double"), None),
            T::MYSQL_TYPE_NEWDECIMAL => (numeric(&format!("decimal({m0},{m1})")), None),
            T::MYSQL_TYPE_YEAR => ("year".to_string(), None),
            T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE => ("date".to_string(), None),
            T::MYSQL_TYPE_DATETIME2 => (format!("datetime({m0})"), None),
            T::MYSQL_TYPE_TIMESTAMP2 => (format!("timestamp({m0})"), None),
            T::MYSQL_TYPE_TIME2 => (format!("time({m0})"), None),
            T::MYSQL_TYPE_DATETIME => ("datetime".to_string(), None),
            T::MYSQL_TYPE_TIMESTAMP => ("timestamp".to_string(), None),
            T::MYSQL_TYPE_TIME => ("time".to_string(), None),
            T::MYSQL_TYPE_BIT => (format!("bit({})", m1 * 8 + m0), None),
            T::MYSQL_TYPE_ENUM => {
                let labels = enum_sets.0.get(enum_i).cloned().unwrap_or_default();
                enum_i += 1;
                (format!("enum({})", quote_labels(&labels)), None)
            }
            T::MYSQL_TYPE_SET => {
                let labels = enum_sets.1.get(set_i).cloned().unwrap_or_default();
                set_i += 1;
                (format!("set({})", quote_labels(&labels)), None)
            }
            T::MYSQL_TYPE_STRING => {
                let cs = charset()?;
                // The real type's spare bits hold the length's bits 8-9 (lengths over 255 bytes).
                let bytes = m1 | (((m0 & 0x30) ^ 0x30) << 4);
                match cs.as_deref() {
                    Some("binary") | None => (format!("binary({bytes})"), None),
                    Some(c) => (format!("char({})", bytes / max_bytes_per_char(c)), cs),
                }
            }
            T::MYSQL_TYPE_VARCHAR | T::MYSQL_TYPE_VAR_STRING => {
                let cs = charset()?;
                // A compressed VARCHAR's length counts its header byte.
                let header = u64::from(compressed.contains(&i));
                let bytes = (m0 | (m1 << 8)).saturating_sub(header);
                match cs.as_deref() {
                    Some("binary") | None => (format!("varbinary({bytes})"), None),
                    Some(c) => (format!("varchar({})", bytes / max_bytes_per_char(c)), cs),
                }
            }
            T::MYSQL_TYPE_BLOB
            | T::MYSQL_TYPE_TINY_BLOB
            | T::MYSQL_TYPE_MEDIUM_BLOB
            | T::MYSQL_TYPE_LONG_BLOB => {
                let cs = charset()?;
                let size = ["tiny", "", "medium", "long"][(m0 as usize).clamp(1, 4) - 1];
                match cs.as_deref() {
                    Some("binary") | None => (format!("{size}blob"), None),
                    _ => (format!("{size}text"), cs),
                }
            }
            T::MYSQL_TYPE_JSON => ("json".to_string(), None),
            T::MYSQL_TYPE_GEOMETRY => ("geometry".to_string(), None),
            other => return Err(format!("column {name}: type {other:?} has no mapping")),
        };
        // The TABLE_MAP's null bits are the server's own nullability: what a
        // CREATE … SELECT made of each expression (`SELECT 1 AS i` is NOT NULL).
        let nullable = tme.null_bitmask().get(i).is_none_or(|b| *b);
        let mut column = ColumnDef::new(name, mysql_type, cs, nullable, pk.contains(&i))?;
        // The metadata lists the key's columns in key order.
        column.key_position = pk.iter().position(|k| *k == i).map(|at| at as u32 + 1);
        columns.push(column);
    }
    Ok(Some(columns))
}

#[cfg(test)]
mod tests;
