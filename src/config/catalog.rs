//! `[catalog]`: where every changelog and current table is registered by
//! name (DESIGN.md "Tables by name"): the Iceberg JDBC catalog's tables on
//! SQLite or PostgreSQL (`sql`), or AWS Glue (`glue`).

use std::path::PathBuf;
use std::str::FromStr;

use serde::Deserialize;

/// Environment variable holding the PostgreSQL catalog's password.
pub const CATALOG_PASSWORD_ENV: &str = "SLUICE_CATALOG_PASSWORD";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCatalog {
    #[serde(rename = "type")]
    kind: Option<String>,
    uri: Option<String>,
    name: Option<String>,
    current_namespace: Option<String>,
    changelog_namespace: Option<String>,
}

/// `[catalog]` as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogConfig {
    /// `type`/`uri`: `None` when tables are reachable by path only.
    pub store: Option<CatalogStore>,
    /// `name`: the JDBC catalog's `catalog_name` (default "sluice").
    pub name: String,
    /// `current_namespace`: the namespace of current tables, `{db}` standing
    /// for the lake database (default "{db}").
    pub current_namespace: String,
    /// `changelog_namespace`: the namespace of changelog tables (default
    /// "{db}_changelog").
    pub changelog_namespace: String,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            store: None,
            name: "sluice".into(),
            current_namespace: "{db}".into(),
            changelog_namespace: "{db}_changelog".into(),
        }
    }
}

/// The database holding the SQL catalog's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogStore {
    /// `sqlite:///PATH`.
    Sqlite(PathBuf),
    /// `postgresql://USER@HOST:PORT/DB`, as given; the password comes from
    /// [`CATALOG_PASSWORD_ENV`] when the URI has none.
    Postgres(String),
    /// AWS Glue of the AWS environment's account and region.
    Glue,
}

pub(super) fn parse_catalog(
    raw: RawCatalog,
    iceberg: bool,
) -> std::result::Result<CatalogConfig, String> {
    let defaults = CatalogConfig::default();
    let store = match raw.kind.as_deref() {
        None | Some("none") => None,
        Some("sql") => {
            let uri = raw.uri.as_deref().ok_or(
                "catalog.uri: missing; the SQL catalog needs \"sqlite:///PATH\" or \"postgresql://USER@HOST:PORT/DB\"",
            )?;
            Some(parse_sql_uri(uri)?)
        }
        Some("glue") => {
            if raw.uri.is_some() {
                return Err("catalog.uri: Glue takes its region and endpoint from the AWS environment (AWS_REGION, AWS_ENDPOINT_URL_GLUE); remove uri".into());
            }
            Some(CatalogStore::Glue)
        }
        Some("rest") => {
            return Err("catalog.type: \"rest\" is not built in this version of sluice; use \"sql\" (SQLite or PostgreSQL, read by Spark, Trino, Flink and pyiceberg), \"glue\" or \"none\"".into())
        }
        Some(other) => {
            return Err(format!(
                "catalog.type: `{other}` is not a catalog type, use \"none\", \"sql\" or \"glue\""
            ))
        }
    };
    if store.is_some() && !iceberg {
        return Err(
            "catalog.type: the catalog registers Iceberg tables; set [iceberg] enabled = true"
                .into(),
        );
    }
    let namespace = |value: Option<String>, key: &str, default: &str| match value {
        None => Ok(default.to_string()),
        Some(v) if v.trim().is_empty() || v.split('.').any(str::is_empty) => Err(format!(
            "catalog.{key}: \"{v}\" is not a namespace (dot-separated, no empty level)"
        )),
        Some(v) => Ok(v),
    };
    let current_namespace = namespace(
        raw.current_namespace,
        "current_namespace",
        &defaults.current_namespace,
    )?;
    let changelog_namespace = namespace(
        raw.changelog_namespace,
        "changelog_namespace",
        &defaults.changelog_namespace,
    )?;
    if current_namespace == changelog_namespace {
        return Err(format!(
            "catalog.changelog_namespace: \"{changelog_namespace}\" is also catalog.current_namespace; a changelog and a current table of one name would take one catalog name"
        ));
    }
    let name = match raw.name {
        None => defaults.name,
        Some(n) if n.trim().is_empty() => return Err("catalog.name: must not be empty".into()),
        Some(n) => n,
    };
    Ok(CatalogConfig {
        store,
        name,
        current_namespace,
        changelog_namespace,
    })
}

fn parse_sql_uri(uri: &str) -> std::result::Result<CatalogStore, String> {
    if let Some(path) = uri.strip_prefix("sqlite://") {
        // sqlite:///abs/path: the third slash starts the path.
        if path.len() < 2 || !path.starts_with('/') {
            return Err(format!(
                "catalog.uri: \"{uri}\" names no file; write \"sqlite:///PATH\" (an absolute path)"
            ));
        }
        return Ok(CatalogStore::Sqlite(PathBuf::from(path)));
    }
    if uri.starts_with("postgresql://") || uri.starts_with("postgres://") {
        return match tokio_postgres::Config::from_str(uri) {
            Ok(_) => Ok(CatalogStore::Postgres(uri.to_string())),
            Err(e) => Err(format!(
                "catalog.uri: \"{uri}\" is not a PostgreSQL URI ({e}); write \"postgresql://USER@HOST:PORT/DB\""
            )),
        };
    }
    Err(format!(
        "catalog.uri: \"{uri}\" is neither \"sqlite:///PATH\" nor \"postgresql://USER@HOST:PORT/DB\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: &str, uri: Option<&str>) -> RawCatalog {
        RawCatalog {
            kind: Some(kind.into()),
            uri: uri.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_sql_catalog_takes_sqlite_and_postgresql_uris_and_needs_iceberg() {
        let c = parse_catalog(raw("sql", Some("sqlite:////var/c.db")), true).unwrap();
        assert_eq!(c.store, Some(CatalogStore::Sqlite("/var/c.db".into())));
        assert_eq!(
            (c.name.as_str(), c.current_namespace.as_str()),
            ("sluice", "{db}")
        );
        assert_eq!(c.changelog_namespace, "{db}_changelog");
        let c = parse_catalog(raw("sql", Some("postgresql://me@127.0.0.1:5/cat")), true).unwrap();
        assert_eq!(
            c.store,
            Some(CatalogStore::Postgres(
                "postgresql://me@127.0.0.1:5/cat".into()
            ))
        );
        let e = parse_catalog(raw("sql", Some("sqlite:///c.db")), false).unwrap_err();
        assert!(e.contains("[iceberg] enabled = true"), "{e}");
        for bad in ["sqlite://", "mysql://x/y", "postgresql://a@b:notaport/c"] {
            let e = parse_catalog(raw("sql", Some(bad)), true).unwrap_err();
            assert!(e.starts_with("catalog.uri:"), "{bad}: {e}");
        }
        let e = parse_catalog(raw("sql", None), true).unwrap_err();
        assert!(e.starts_with("catalog.uri: missing"), "{e}");
    }

    #[test]
    fn catalog_types_not_built_and_clashing_namespaces_are_errors() {
        let e = parse_catalog(raw("rest", None), true).unwrap_err();
        assert!(e.contains("\"rest\" is not built"), "{e}");
        assert_eq!(
            parse_catalog(raw("glue", None), true).unwrap().store,
            Some(CatalogStore::Glue)
        );
        let e = parse_catalog(raw("glue", Some("x")), true).unwrap_err();
        assert!(e.starts_with("catalog.uri: Glue takes"), "{e}");
        let e = parse_catalog(raw("hive", None), true).unwrap_err();
        assert!(e.contains("`hive` is not a catalog type"), "{e}");
        let mut r = raw("sql", Some("sqlite:///c.db"));
        r.changelog_namespace = Some("{db}".into());
        let e = parse_catalog(r, true).unwrap_err();
        assert!(e.starts_with("catalog.changelog_namespace"), "{e}");
        let mut r = raw("sql", Some("sqlite:///c.db"));
        r.current_namespace = Some("lake..{db}".into());
        let e = parse_catalog(r, true).unwrap_err();
        assert!(e.starts_with("catalog.current_namespace"), "{e}");
        assert_eq!(
            parse_catalog(RawCatalog::default(), false).unwrap(),
            CatalogConfig::default()
        );
    }
}
