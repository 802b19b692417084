//! The conformance suite on both dialects.
//!
//! SQLite: a fresh file per case, reopened by closing both pools and opening the file
//! again, removed with the case. Postgres (when `FORGE_TEST_POSTGRES_URL` is set): a
//! fresh schema per test, shared by its cases — the suite writes every case under a
//! fresh tenant, so cases do not see each other — reopened as a new pool on the same
//! schema, and dropped at the end of the test.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::{guarded, last_handle, BackendFactory, StoreMap};
use forge_core::{Bus, Error, LocalBus, Result, Store};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::{PostgresStore, SqliteStore};
use tokio::sync::OnceCell;

/// The bus the SQL backends are deployed with in one process: a LocalBus with a replay
/// buffer, so the bus properties and durable-bus recovery run too.
fn local_bus() -> Arc<dyn Bus> {
    Arc::new(LocalBus::with_replay(100_000))
}

/// Fresh files; each store remembered with its directory and pools, to reopen and to
/// close it.
#[derive(Default)]
struct Sqlite {
    open: StoreMap<(Arc<tempfile::TempDir>, Arc<SqliteStore>)>,
}

impl Sqlite {
    async fn open_in(&self, dir: Arc<tempfile::TempDir>) -> Result<Arc<dyn Store>> {
        let url = format!("sqlite://{}", dir.path().join("conformance.db").display());
        let sqlite = Arc::new(SqliteStore::open(&url).await?);
        let store = guarded(Arc::clone(&sqlite) as Arc<dyn Store>, Arc::clone(&dir));
        self.open.insert(&store, (dir, sqlite));
        Ok(store)
    }

    /// Forgets `store`, drops it and closes its pools; returns its directory. To reopen,
    /// `store` must be the last handle; at teardown a task the case aborted may still
    /// hold one for a moment (its queries then fail on the closed pools).
    async fn close(
        &self,
        store: Arc<dyn Store>,
        reopen: bool,
    ) -> Result<Option<Arc<tempfile::TempDir>>> {
        let Some((dir, sqlite)) = self.open.remove(&store) else {
            return Ok(None);
        };
        if reopen {
            last_handle(&store)?;
        }
        drop(store);
        sqlite.close().await;
        Ok(Some(dir))
    }
}

#[async_trait]
impl BackendFactory for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let dir = tempfile::tempdir().map_err(|e| Error::backend("sqlite", false, e))?;
        self.open_in(Arc::new(dir)).await
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(local_bus()))
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let dir = self
            .close(store, true)
            .await?
            .ok_or_else(|| Error::invalid("not a store of this factory"))?;
        Ok(Some(self.open_in(dir).await?))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        self.close(store, false).await.map(drop)
    }
}

struct Postgres {
    url: String,
    /// The test's schema and the store on it; the schema is dropped with the factory.
    shared: OnceCell<(Arc<PostgresStore>, TestSchema)>,
    /// The pools `reopen` opened, closed at teardown.
    reopened: StoreMap<Arc<PostgresStore>>,
}

impl Postgres {
    /// The factory, or `None` (after saying so) when no server is configured.
    fn from_env(test: &str) -> Option<Self> {
        Some(Self {
            url: common::postgres_url(test)?,
            shared: OnceCell::new(),
            reopened: StoreMap::new(),
        })
    }
}

#[async_trait]
impl BackendFactory for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let (store, _) = self
            .shared
            .get_or_try_init(|| async {
                let schema = TestSchema::create(&self.url).await?;
                let store = PostgresStore::connect(&schema.url()).await?;
                Ok::<_, Error>((Arc::new(store), schema))
            })
            .await?;
        Ok(Arc::clone(store) as Arc<dyn Store>)
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(local_bus()))
    }

    /// A new pool on the same schema (the old handle is the shared pool, or a pool an
    /// earlier reopen opened, which is closed first).
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.teardown(store).await?;
        let Some((_, schema)) = self.shared.get() else {
            return Err(Error::invalid("reopen before any store was opened"));
        };
        let pg = Arc::new(PostgresStore::connect(&schema.url()).await?);
        let store = Arc::clone(&pg) as Arc<dyn Store>;
        self.reopened.insert(&store, pg);
        Ok(Some(store))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        if let Some(pg) = self.reopened.remove(&store) {
            drop(store);
            pg.close().await;
        }
        Ok(())
    }
}

mod sqlite {
    forge_conformance::conformance_tests!(super::Sqlite::default());
}

mod postgres {
    forge_conformance::conformance_tests!(match super::Postgres::from_env("conformance") {
        Some(factory) => factory,
        None => return,
    });
}
