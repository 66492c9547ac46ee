//! `[catalog]`: every changelog and current table registered by name, its
//! pointer moved to each new Iceberg metadata file (DESIGN.md "Tables by
//! name"). The SQL catalog is the Iceberg JDBC catalog's tables
//! (`iceberg_tables`, `iceberg_namespace_properties`), which Spark, Trino,
//! Flink and pyiceberg read, on SQLite or PostgreSQL.
//!
//! An entry is only ever moved with a compare-and-swap on the location it
//! held, only forward (to a higher `v<N>`), and only when it points into
//! the table's own metadata folder: a name that points at another table is
//! a conflict the operator resolves, never overwritten. A current table
//! whose snapshot ends it (DROP TABLE, a RENAME away) leaves the catalog;
//! its changelog stays. After a commit one statement moves the entry; at
//! start one query lists the catalog and only what differs is written.

mod glue;
mod sql;

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use futures::StreamExt;
use object_store::path::Path;

use super::iceberg::{self, Head};
use super::names::{CatalogName, CatalogNames, LakeTable};
use crate::config::{CatalogConfig, CatalogStore};
use crate::error::{Error, Result};
use sql::Sql;

/// The catalog of this process.
pub struct Catalog {
    backend: Backend,
    /// The JDBC catalog's `catalog_name`.
    name: String,
    names: CatalogNames,
    ready: tokio::sync::OnceCell<()>,
}

static CATALOG: OnceLock<Catalog> = OnceLock::new();

/// Turns the catalog of `config` on for this process (nothing for `type =
/// "none"`): every Iceberg commit from now on moves its table's entry.
pub fn enable(config: &CatalogConfig) -> Result<()> {
    let Some(store) = &config.store else {
        return Ok(());
    };
    let catalog = Catalog {
        backend: Backend::open(store)?,
        name: config.name.clone(),
        names: CatalogNames {
            current: config.current_namespace.clone(),
            changelog: config.changelog_namespace.clone(),
            lower_snake: *store == CatalogStore::Glue,
        },
        ready: tokio::sync::OnceCell::new(),
    };
    let _ = CATALOG.set(catalog);
    Ok(())
}

/// The catalog when one is on.
pub(super) fn get() -> Option<&'static Catalog> {
    CATALOG.get()
}

/// What the entries of a [`Catalog::reconcile`] became.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub registered: usize,
    pub moved: usize,
    pub dropped: usize,
    pub unchanged: usize,
    /// Tables whose entry could not be settled, with why.
    pub failed: Vec<(String, String)>,
}

/// What an entry should be.
enum Want {
    /// Pointing at this metadata file (N of `v<N>`).
    At(String, u64),
    /// Gone: the table ended.
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Registered,
    Moved,
    Dropped,
    Unchanged,
}

/// Where the entries are kept. Each operation is a compare-and-swap on the
/// location an entry holds: `false` when the entry was not as expected.
enum Backend {
    Sql(Sql),
    Glue(glue::Glue),
}

impl Backend {
    fn open(store: &CatalogStore) -> Result<Backend> {
        Ok(match store {
            CatalogStore::Glue => Backend::Glue(glue::Glue::open()?),
            sql => Backend::Sql(Sql::open(sql)?),
        })
    }

    async fn ready(&self) -> Result<()> {
        match self {
            Backend::Sql(s) => s.create_schema().await,
            Backend::Glue(_) => Ok(()),
        }
    }

    /// Every Iceberg table of catalog `catalog` and where it points: all of
    /// the SQL catalog's (one query), those of `namespaces` in Glue (one
    /// listing per database, `in_flight` at a time).
    async fn list(
        &self,
        catalog: &str,
        namespaces: &BTreeSet<String>,
        in_flight: usize,
    ) -> Result<HashMap<CatalogName, String>> {
        match self {
            Backend::Sql(s) => s.list(catalog).await,
            Backend::Glue(g) => g.list(namespaces, in_flight).await,
        }
    }

    async fn get(&self, catalog: &str, name: &CatalogName) -> Result<Option<String>> {
        match self {
            Backend::Sql(s) => s.get(catalog, name).await,
            Backend::Glue(g) => g.get(name).await,
        }
    }

    /// Registers `name` at `location` if it has no entry.
    async fn register(&self, catalog: &str, name: &CatalogName, location: &str) -> Result<bool> {
        match self {
            Backend::Sql(s) => s.register(catalog, name, location).await,
            Backend::Glue(g) => g.register(name, location).await,
        }
    }

    /// Moves `name` from `from` to `to` if it is at `from`.
    async fn swap(&self, catalog: &str, name: &CatalogName, from: &str, to: &str) -> Result<bool> {
        match self {
            Backend::Sql(s) => s.swap(catalog, name, from, to).await,
            Backend::Glue(g) => g.swap(name, from, to).await,
        }
    }

    /// Drops `name` if it is at `location`.
    async fn delete(&self, catalog: &str, name: &CatalogName, location: &str) -> Result<bool> {
        match self {
            Backend::Sql(s) => s.delete(catalog, name, location).await,
            Backend::Glue(g) => g.delete(name, location).await,
        }
    }
}

/// How many times an entry another writer keeps changing is read again.
const TRIES: usize = 3;

impl Catalog {
    async fn ready(&self) -> Result<()> {
        self.ready
            .get_or_try_init(|| self.backend.ready())
            .await
            .map(|_| ())
    }

    /// After the Iceberg commit of `dir` that made `head`: its entry moved
    /// there (one statement when it pointed at the metadata file before),
    /// registered, or dropped when the snapshot ends the table. A failure
    /// is logged; the next commit or start settles the entry.
    pub(super) async fn follow(&self, settings: &iceberg::Settings, dir: &Path, head: Head) {
        let Some(table) = LakeTable::from_dir(dir) else {
            return;
        };
        let name = self.names.of(&table);
        let outcome = async {
            self.ready().await?;
            let want = want(settings, dir, head);
            if let (Want::At(location, n), Some(before)) = (&want, head.n.checked_sub(1)) {
                let before = iceberg::metadata_location(settings, dir, before);
                if self.backend.swap(&self.name, &name, &before, location).await? {
                    return Ok(Change::Moved);
                }
                tracing::debug!(entry = %name, n, "the catalog entry was not at the previous metadata file; reading it");
            }
            let prefix = iceberg::metadata_prefix(settings, dir);
            self.settle(&name, &prefix, &want, None).await
        }
        .await;
        match outcome {
            Ok(change) => tracing::debug!(entry = %name, ?change, "catalog entry settled"),
            Err(e) => tracing::warn!(
                table = %dir,
                entry = %name,
                error = %e,
                "the catalog entry of the table is not at its newest Iceberg metadata; the next commit, a start or `sluice catalog sync` tries again"
            ),
        }
    }

    /// Every table of `heads` (its folder and Iceberg head) registered,
    /// moved or dropped as its head says: at start, and by `sluice catalog
    /// sync`. One query lists the catalog; only what differs is written,
    /// `in_flight` tables at a time. Two tables that take one catalog name
    /// are both left alone and reported.
    pub async fn reconcile(
        &self,
        settings: &iceberg::Settings,
        heads: Vec<(Path, Head)>,
        in_flight: usize,
    ) -> Result<Report> {
        self.ready().await?;
        let mut report = Report::default();
        let mut by_name: HashMap<CatalogName, Vec<(Path, Head)>> = HashMap::new();
        for (dir, head) in heads {
            if let Some(t) = LakeTable::from_dir(&dir) {
                by_name
                    .entry(self.names.of(&t))
                    .or_default()
                    .push((dir, head));
            }
        }
        let namespaces: BTreeSet<String> = by_name.keys().map(|n| n.namespace.clone()).collect();
        let held = self
            .backend
            .list(&self.name, &namespaces, in_flight)
            .await?;
        let mut work = Vec::new();
        for (name, mut tables) in by_name {
            if tables.len() > 1 {
                tables.sort_by(|a, b| a.0.cmp(&b.0));
                let folders: Vec<String> = tables.iter().map(|(d, _)| d.to_string()).collect();
                report.failed.push((
                    name.to_string(),
                    format!(
                        "the tables of folders {} both take the catalog name {name}; rename one at the source or change [catalog] current_namespace/changelog_namespace",
                        folders.join(" and ")
                    ),
                ));
                continue;
            }
            let (dir, head) = tables.remove(0);
            let was = held.get(&name).cloned();
            work.push((name, dir, head, was));
        }
        let settled: Vec<_> = futures::stream::iter(work)
            .map(|(name, dir, head, was)| async move {
                let prefix = iceberg::metadata_prefix(settings, &dir);
                let want = want(settings, &dir, head);
                let outcome = self.settle(&name, &prefix, &want, Some(was)).await;
                (name, outcome)
            })
            .buffer_unordered(in_flight.max(1))
            .collect()
            .await;
        for (name, outcome) in settled {
            match outcome {
                Ok(Change::Registered) => report.registered += 1,
                Ok(Change::Moved) => report.moved += 1,
                Ok(Change::Dropped) => report.dropped += 1,
                Ok(Change::Unchanged) => report.unchanged += 1,
                Err(e) => report.failed.push((name.to_string(), e.to_string())),
            }
        }
        report.failed.sort();
        Ok(report)
    }

    /// Brings the entry `name` of the table whose metadata folder is
    /// `prefix` to `want`; `held` is what it was read to hold, if it was.
    async fn settle(
        &self,
        name: &CatalogName,
        prefix: &str,
        want: &Want,
        mut held: Option<Option<String>>,
    ) -> Result<Change> {
        for _ in 0..TRIES {
            let was = match held.take() {
                Some(was) => was,
                None => self.backend.get(&self.name, name).await?,
            };
            let b = &self.backend;
            let written = match (want, was) {
                (Want::Gone, None) => return Ok(Change::Unchanged),
                // Another table's entry of that name is not ours to drop.
                (Want::Gone, Some(was)) if !was.starts_with(prefix) => {
                    return Ok(Change::Unchanged)
                }
                (Want::Gone, Some(was)) => b
                    .delete(&self.name, name, &was)
                    .await?
                    .then_some(Change::Dropped),
                (Want::At(location, _), None) => b
                    .register(&self.name, name, location)
                    .await?
                    .then_some(Change::Registered),
                (Want::At(location, _), Some(was)) if &was == location => {
                    return Ok(Change::Unchanged)
                }
                (Want::At(_, _), Some(was)) if !was.starts_with(prefix) => {
                    return Err(Error::Catalog(format!(
                        "{name} is registered at {was}, not in this table's metadata folder {prefix}: drop that entry from the catalog (or set [catalog] current_namespace/changelog_namespace so the names differ) and run `sluice catalog sync`"
                    )))
                }
                // Never back: a newer metadata file is there already.
                (Want::At(_, n), Some(was))
                    if iceberg::metadata_number(&was).is_some_and(|m| m > *n) =>
                {
                    return Ok(Change::Unchanged)
                }
                (Want::At(location, _), Some(was)) => b
                    .swap(&self.name, name, &was, location)
                    .await?
                    .then_some(Change::Moved),
            };
            if let Some(change) = written {
                return Ok(change);
            }
            // Changed between the read and the write: read it again.
        }
        Err(Error::Catalog(format!(
            "{name} kept changing under another writer; not settled"
        )))
    }
}

fn want(settings: &iceberg::Settings, dir: &Path, head: Head) -> Want {
    if head.ended {
        Want::Gone
    } else {
        Want::At(iceberg::metadata_location(settings, dir, head.n), head.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(file: &std::path::Path) -> Catalog {
        Catalog {
            backend: Backend::Sql(Sql::Sqlite(file.to_path_buf())),
            name: "sluice".into(),
            names: CatalogNames {
                current: "{db}".into(),
                changelog: "{db}_changelog".into(),
                lower_snake: false,
            },
            ready: tokio::sync::OnceCell::new(),
        }
    }

    /// The entry `ns.table` and its previous location.
    async fn entry(c: &Catalog, ns: &str, table: &str) -> Option<(String, Option<String>)> {
        let rows = sql(c)
            .query(
                "SELECT metadata_location, previous_metadata_location FROM iceberg_tables \
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
                vec!["sluice".into(), ns.into(), table.into()],
            )
            .await
            .unwrap();
        rows.into_iter()
            .next()
            .map(|r| (r[0].clone().unwrap(), r[1].clone()))
    }

    fn sql(c: &Catalog) -> &Sql {
        match &c.backend {
            Backend::Sql(s) => s,
            Backend::Glue(_) => panic!("a SQL catalog"),
        }
    }

    fn head(n: u64) -> Head {
        Head { n, ended: false }
    }

    #[tokio::test]
    async fn an_entry_is_registered_moved_forward_only_dropped_at_an_end_and_another_tables_name_is_left_alone(
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let c = catalog(&tmp.path().join("c.db"));
        let settings = iceberg::Settings::new("file:///lake/");
        let dir = Path::from("_current/shop/t");
        let at = |n: u64| format!("file:///lake/_current/shop/t/metadata/v{n}.metadata.json");

        c.follow(&settings, &dir, head(1)).await;
        assert_eq!(entry(&c, "shop", "t").await, Some((at(1), None)));
        c.follow(&settings, &dir, head(2)).await;
        assert_eq!(entry(&c, "shop", "t").await, Some((at(2), Some(at(1)))));
        // A missed catalog move: the next commit reads the entry and moves it.
        c.follow(&settings, &dir, head(5)).await;
        assert_eq!(entry(&c, "shop", "t").await, Some((at(5), Some(at(2)))));
        // Never back, also at a start that read an older head.
        let report = c
            .reconcile(&settings, vec![(dir.clone(), head(4))], 4)
            .await
            .unwrap();
        assert_eq!(report.unchanged, 1);
        assert_eq!(entry(&c, "shop", "t").await.unwrap().0, at(5));

        // A name held by a location outside the table's metadata folder.
        let foreign = "file:///other/t/metadata/v9.metadata.json";
        sql(&c)
            .execute(
                "UPDATE iceberg_tables SET metadata_location = $1",
                vec![foreign.into()],
            )
            .await
            .unwrap();
        c.follow(&settings, &dir, head(6)).await;
        assert_eq!(entry(&c, "shop", "t").await.unwrap().0, foreign);
        let report = c
            .reconcile(&settings, vec![(dir.clone(), head(6))], 4)
            .await
            .unwrap();
        assert_eq!(report.failed.len(), 1);
        assert!(
            report.failed[0]
                .1
                .contains("shop.t is registered at file:///other"),
            "{:?}",
            report.failed
        );
        // Its end does not drop another table's entry either.
        c.follow(&settings, &dir, Head { n: 7, ended: true }).await;
        assert_eq!(entry(&c, "shop", "t").await.unwrap().0, foreign);

        // An end drops the table's own entry; the changelog's is another name.
        let log = Path::from("shop/t");
        c.follow(&settings, &log, head(3)).await;
        sql(&c)
            .execute(
                "DELETE FROM iceberg_tables WHERE table_namespace = 'shop'",
                Vec::new(),
            )
            .await
            .unwrap();
        c.follow(&settings, &dir, head(8)).await;
        c.follow(&settings, &dir, Head { n: 9, ended: true }).await;
        assert_eq!(entry(&c, "shop", "t").await, None);
        assert_eq!(
            entry(&c, "shop_changelog", "t").await.unwrap().0,
            "file:///lake/shop/t/metadata/v3.metadata.json"
        );
    }

    #[tokio::test]
    async fn two_tables_of_one_catalog_name_are_both_left_out_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let c = catalog(&tmp.path().join("c.db"));
        let settings = iceberg::Settings::new("file:///lake");
        let heads = vec![
            (Path::from_iter(["_current", "a.b", "t"]), head(1)),
            (Path::from_iter(["_current", "a_b", "t"]), head(1)),
            (Path::from_iter(["a.b", "t"]), head(2)),
        ];
        let report = c.reconcile(&settings, heads, 2).await.unwrap();
        assert_eq!(
            (report.registered, report.failed.len()),
            (1, 1),
            "{report:?}"
        );
        let (name, why) = &report.failed[0];
        assert_eq!(name, "a_b.t");
        assert!(why.contains("_current/a.b/t and _current/a_b/t"), "{why}");
        assert_eq!(entry(&c, "a_b", "t").await, None);
        assert!(entry(&c, "a_b_changelog", "t").await.is_some());
    }
}
