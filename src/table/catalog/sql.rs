//! The database of a SQL catalog: the Iceberg JDBC catalog's two tables,
//! on SQLite (rusqlite, one connection a statement, off the async threads)
//! or PostgreSQL (tokio-postgres, one connection kept). Statements are
//! written once with `$1…$N` parameters, all text.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::CatalogName;
use crate::config::{CatalogStore, CATALOG_PASSWORD_ENV};
use crate::error::{Error, Result};

/// A row of text columns.
pub(super) type Row = Vec<Option<String>>;

/// The tables as Spark, Trino, Flink and pyiceberg create them (Iceberg's
/// `JdbcCatalog`, schema V0, and pyiceberg's `SqlCatalog`).
const SCHEMA: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS iceberg_tables (\
        catalog_name VARCHAR(255) NOT NULL, \
        table_namespace VARCHAR(255) NOT NULL, \
        table_name VARCHAR(255) NOT NULL, \
        metadata_location VARCHAR(1000), \
        previous_metadata_location VARCHAR(1000), \
        PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (\
        catalog_name VARCHAR(255) NOT NULL, \
        namespace VARCHAR(255) NOT NULL, \
        property_key VARCHAR(255) NOT NULL, \
        property_value VARCHAR(1000), \
        PRIMARY KEY (catalog_name, namespace, property_key))",
];

const ENTRY: &str = "SELECT metadata_location FROM iceberg_tables \
     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3";
const ENTRIES: &str = "SELECT table_namespace, table_name, metadata_location \
     FROM iceberg_tables WHERE catalog_name = $1";
const INSERT: &str = "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, \
     metadata_location, previous_metadata_location) VALUES ($1, $2, $3, $4, NULL) \
     ON CONFLICT DO NOTHING";
const SWAP: &str = "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
     WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $2";
const DELETE: &str = "DELETE FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 \
     AND table_name = $3 AND metadata_location = $4";
/// A namespace exists in the JDBC catalog when it has a property; pyiceberg
/// and Iceberg's `JdbcCatalog` both write `exists`.
const NAMESPACE: &str = "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, \
     property_key, property_value) VALUES ($1, $2, 'exists', 'true') ON CONFLICT DO NOTHING";

pub(super) enum Sql {
    Sqlite(PathBuf),
    Postgres {
        config: Box<tokio_postgres::Config>,
        client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
    },
}

impl Sql {
    pub(super) fn open(store: &CatalogStore) -> Result<Sql> {
        Ok(match store {
            CatalogStore::Sqlite(path) => Sql::Sqlite(path.clone()),
            CatalogStore::Glue => return Err(Error::Catalog("Glue is not a SQL catalog".into())),
            CatalogStore::Postgres(uri) => {
                let mut config = tokio_postgres::Config::from_str(uri)
                    .map_err(|e| Error::Catalog(format!("catalog.uri: {e}")))?;
                if config.get_password().is_none() {
                    if let Ok(password) = std::env::var(CATALOG_PASSWORD_ENV) {
                        config.password(password);
                    }
                }
                config.connect_timeout(Duration::from_secs(10));
                Sql::Postgres {
                    config: Box::new(config),
                    client: tokio::sync::Mutex::new(None),
                }
            }
        })
    }

    /// Creates the catalog's tables where they are missing.
    pub(super) async fn create_schema(&self) -> Result<()> {
        for statement in SCHEMA {
            self.execute(statement, Vec::new()).await?;
        }
        Ok(())
    }

    pub(super) async fn list(&self, catalog: &str) -> Result<HashMap<CatalogName, String>> {
        let mut held = HashMap::new();
        for row in self.query(ENTRIES, vec![catalog.to_string()]).await? {
            if let [Some(ns), Some(t), Some(location)] = row.as_slice() {
                let name = CatalogName {
                    namespace: ns.clone(),
                    table: t.clone(),
                };
                held.insert(name, location.clone());
            }
        }
        Ok(held)
    }

    pub(super) async fn get(&self, catalog: &str, name: &CatalogName) -> Result<Option<String>> {
        let rows = self.query(ENTRY, keyed(catalog, name, &[])).await?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten()))
    }

    pub(super) async fn register(
        &self,
        catalog: &str,
        name: &CatalogName,
        location: &str,
    ) -> Result<bool> {
        let ns = vec![catalog.to_string(), name.namespace.clone()];
        self.execute(NAMESPACE, ns).await?;
        let n = self
            .execute(INSERT, keyed(catalog, name, &[location]))
            .await?;
        Ok(n == 1)
    }

    pub(super) async fn swap(
        &self,
        catalog: &str,
        name: &CatalogName,
        from: &str,
        to: &str,
    ) -> Result<bool> {
        let mut params = vec![to.to_string(), from.to_string()];
        params.extend(keyed(catalog, name, &[]));
        Ok(self.execute(SWAP, params).await? == 1)
    }

    pub(super) async fn delete(
        &self,
        catalog: &str,
        name: &CatalogName,
        location: &str,
    ) -> Result<bool> {
        let n = self
            .execute(DELETE, keyed(catalog, name, &[location]))
            .await?;
        Ok(n == 1)
    }

    /// The rows `sql` selects.
    pub(super) async fn query(&self, sql: &'static str, params: Vec<String>) -> Result<Vec<Row>> {
        self.run(sql, params, true).await.map(|(rows, _)| rows)
    }

    /// How many rows `sql` changed.
    pub(super) async fn execute(&self, sql: &'static str, params: Vec<String>) -> Result<u64> {
        self.run(sql, params, false).await.map(|(_, n)| n)
    }

    async fn run(
        &self,
        sql: &'static str,
        params: Vec<String>,
        rows: bool,
    ) -> Result<(Vec<Row>, u64)> {
        match self {
            Sql::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || sqlite(&path, sql, &params, rows))
                    .await
                    .map_err(|e| Error::Catalog(format!("the SQLite catalog's task failed: {e}")))?
            }
            Sql::Postgres { config, client } => {
                let mut held = client.lock().await;
                // A connection the server closed is opened again, once.
                for attempt in 0..2 {
                    let c = match held.as_ref() {
                        Some(c) if !c.is_closed() => c,
                        _ => {
                            let (c, connection) = config
                                .connect(tokio_postgres::NoTls)
                                .await
                                .map_err(|e| pg_error(config, e))?;
                            tokio::spawn(async move {
                                if let Err(e) = connection.await {
                                    tracing::debug!(error = %e, "the PostgreSQL catalog's connection ended");
                                }
                            });
                            held.insert(c)
                        }
                    };
                    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                        .iter()
                        .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                        .collect();
                    let done = if rows {
                        c.query(sql, &refs).await.map(|found| {
                            let rows = found
                                .iter()
                                .map(|r| {
                                    (0..r.len())
                                        .map(|i| r.get::<_, Option<String>>(i))
                                        .collect()
                                })
                                .collect();
                            (rows, 0)
                        })
                    } else {
                        c.execute(sql, &refs).await.map(|n| (Vec::new(), n))
                    };
                    match done {
                        Ok(done) => return Ok(done),
                        Err(e) if attempt == 0 && c.is_closed() => {
                            tracing::debug!(error = %e, "the PostgreSQL catalog's connection was closed; connecting again");
                            *held = None;
                        }
                        Err(e) => return Err(pg_error(config, e)),
                    }
                }
                Err(Error::Catalog(
                    "the PostgreSQL catalog kept closing its connection".into(),
                ))
            }
        }
    }
}

/// The key of `name`'s row followed by `more` (ENTRY, INSERT, DELETE).
fn keyed(catalog: &str, name: &CatalogName, more: &[&str]) -> Vec<String> {
    let mut params = vec![
        catalog.to_string(),
        name.namespace.clone(),
        name.table.clone(),
    ];
    params.extend(more.iter().map(|v| v.to_string()));
    params
}

fn pg_error(config: &tokio_postgres::Config, e: tokio_postgres::Error) -> Error {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    // The error's source says what the server or the socket said.
    let cause = std::error::Error::source(&e)
        .map(|s| format!(": {s}"))
        .unwrap_or_default();
    Error::Catalog(format!(
        "the PostgreSQL catalog at {}: {e}{cause}",
        hosts.join(",")
    ))
}

fn sqlite(
    path: &std::path::Path,
    sql: &str,
    params: &[String],
    rows: bool,
) -> Result<(Vec<Row>, u64)> {
    let fail =
        |e: rusqlite::Error| Error::Catalog(format!("the SQLite catalog {}: {e}", path.display()));
    let conn = rusqlite::Connection::open(path).map_err(fail)?;
    conn.busy_timeout(Duration::from_secs(30)).map_err(fail)?;
    // `?N` is SQLite's spelling of the N-th parameter.
    let sql = sql.replace('$', "?");
    let mut statement = conn.prepare(&sql).map_err(fail)?;
    let params = rusqlite::params_from_iter(params.iter());
    if !rows {
        return statement
            .execute(params)
            .map(|n| (Vec::new(), n as u64))
            .map_err(fail);
    }
    let width = statement.column_count();
    let found = statement
        .query_map(params, |r| {
            (0..width)
                .map(|i| r.get::<_, Option<String>>(i))
                .collect::<rusqlite::Result<Row>>()
        })
        .map_err(fail)?
        .collect::<rusqlite::Result<Vec<Row>>>()
        .map_err(fail)?;
    Ok((found, 0))
}
