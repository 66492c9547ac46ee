//! Every name a lake table has, decided here: its folder, which is also its
//! Delta and Iceberg location (`<db>/<table>` for a changelog table,
//! `_current/<db>/<table>` for a current table, each part percent-encoded
//! as the object store spells it), and its name in a catalog.
//!
//! Catalog names (README "Catalogs"): the namespace is the configured
//! template with `{db}` replaced by the lake database, in which every `.`
//! becomes `_` (a dot separates namespace levels); the table name is the
//! lake table's own. `db` and `table` are the lake's names, so a routed
//! table is named by its route's target.

use object_store::path::Path;

use super::current::CURRENT_DIR;

/// Which of a source table's two lake tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Every change, in order.
    Changelog,
    /// The rows as they are, folded from the changelog.
    Current,
}

/// A lake table by its names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LakeTable {
    pub kind: Kind,
    pub db: String,
    pub table: String,
}

impl LakeTable {
    /// The table of folder `dir`, if it is a table folder.
    pub fn from_dir(dir: &Path) -> Option<LakeTable> {
        let parts: Vec<_> = dir.parts().collect();
        let (kind, db, table) = match parts.as_slice() {
            [c, db, table] if c.as_ref() == CURRENT_DIR => (Kind::Current, db, table),
            [db, table] if !db.as_ref().starts_with('_') => (Kind::Changelog, db, table),
            _ => return None,
        };
        Some(LakeTable {
            kind,
            db: decode_part(db.as_ref()),
            table: decode_part(table.as_ref()),
        })
    }

    /// Its folder under the lake root.
    pub fn dir(&self) -> Path {
        match self.kind {
            Kind::Changelog => Path::from_iter([self.db.as_str(), self.table.as_str()]),
            Kind::Current => Path::from_iter([CURRENT_DIR, self.db.as_str(), self.table.as_str()]),
        }
    }

    /// `db.table`, as logs and errors name it.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.db, self.table)
    }
}

/// A table's name in a catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CatalogName {
    /// Levels joined by `.`, as the JDBC catalog stores a namespace.
    pub namespace: String,
    pub table: String,
}

impl std::fmt::Display for CatalogName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.namespace, self.table)
    }
}

/// The namespace templates of `[catalog]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogNames {
    pub current: String,
    pub changelog: String,
    /// The catalog takes only lower-case `[a-z0-9_]` names in one level
    /// (Glue): every other character becomes `_`, letters lower case.
    pub lower_snake: bool,
}

impl CatalogNames {
    /// The catalog name of `t`.
    pub fn of(&self, t: &LakeTable) -> CatalogName {
        let template = match t.kind {
            Kind::Changelog => &self.changelog,
            Kind::Current => &self.current,
        };
        let name = CatalogName {
            namespace: template.replace("{db}", &t.db.replace('.', "_")),
            table: t.table.clone(),
        };
        if !self.lower_snake {
            return name;
        }
        let snake = |s: &str| -> String {
            s.chars()
                .map(|c| match c.to_ascii_lowercase() {
                    c @ ('a'..='z' | '0'..='9' | '_') => c,
                    _ => '_',
                })
                .collect()
        };
        CatalogName {
            namespace: snake(&name.namespace),
            table: snake(&name.table),
        }
    }
}

/// A percent-encoded path part as the name it encodes.
pub(super) fn decode_part(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_names_its_table_and_back() {
        for (dir, kind, db, table) in [
            ("shop/orders", Kind::Changelog, "shop", "orders"),
            ("_current/shop/orders", Kind::Current, "shop", "orders"),
            ("a%2Fb/t", Kind::Changelog, "a/b", "t"),
            ("_current/a.b/t%25", Kind::Current, "a.b", "t%"),
        ] {
            let t = LakeTable::from_dir(&Path::parse(dir).unwrap()).unwrap();
            assert_eq!((t.kind, t.db.as_str(), t.table.as_str()), (kind, db, table));
            assert_eq!(t.dir().as_ref(), dir);
        }
        // The changelog folder is the one the manifest's data files are in.
        let file = crate::lake::manifest::data_file_path("a/b", "t.x", 1, 0, "w");
        let folder = Path::from_iter(file.parts().take(2));
        let t = LakeTable::from_dir(&folder).unwrap();
        assert_eq!((t.db.as_str(), t.table.as_str()), ("a/b", "t.x"));
        for not_a_table in ["_sluice/manifests", "shop", "_current/shop", "a/b/c"] {
            assert_eq!(
                LakeTable::from_dir(&Path::parse(not_a_table).unwrap()),
                None
            );
        }
    }

    #[test]
    fn catalog_names_follow_the_templates_with_dots_of_a_database_replaced() {
        let mut names = CatalogNames {
            current: "lake.{db}".into(),
            changelog: "{db}_changelog".into(),
            lower_snake: false,
        };
        let t = |kind, db: &str| LakeTable {
            kind,
            db: db.into(),
            table: "orders".into(),
        };
        assert_eq!(
            names.of(&t(Kind::Current, "shop")).to_string(),
            "lake.shop.orders"
        );
        assert_eq!(
            names.of(&t(Kind::Changelog, "a.b")),
            CatalogName {
                namespace: "a_b_changelog".into(),
                table: "orders".into()
            }
        );
        // Glue: one level of lower-case [a-z0-9_].
        names.lower_snake = true;
        let mixed = LakeTable {
            kind: Kind::Current,
            db: "Shop-EU".into(),
            table: "Orders$2".into(),
        };
        assert_eq!(names.of(&mixed).to_string(), "lake_shop_eu.orders_2");
    }
}
