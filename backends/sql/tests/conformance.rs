//! The conformance suite on both dialects.
//!
//! SQLite: a fresh file per case, removed with it. Postgres (when
//! `FORGE_TEST_POSTGRES_URL` is set): a fresh schema per test, shared by its cases —
//! the suite writes every case under a fresh tenant, so cases do not see each other —
//! and dropped at the end of the test.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::{guarded, BackendFactory};
use forge_core::{Bus, Error, LocalBus, Result, Store};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::{PostgresStore, SqliteStore};
use tokio::sync::OnceCell;

/// The bus the SQL backends are deployed with in one process: a LocalBus with a replay
/// buffer, so the bus properties and durable-bus recovery run too.
fn local_bus() -> Arc<dyn Bus> {
    Arc::new(LocalBus::with_replay(100_000))
}

struct Sqlite;

#[async_trait]
impl BackendFactory for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let dir = tempfile::tempdir().map_err(|e| Error::backend("sqlite", false, e))?;
        let url = format!("sqlite://{}", dir.path().join("conformance.db").display());
        let store = SqliteStore::open(&url).await?;
        Ok(guarded(Arc::new(store), dir))
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(local_bus()))
    }
}

struct Postgres {
    url: String,
    /// The test's schema and the store on it; the schema is dropped with the factory.
    shared: OnceCell<(Arc<PostgresStore>, TestSchema)>,
}

impl Postgres {
    /// The factory, or `None` (after saying so) when no server is configured.
    fn from_env(test: &str) -> Option<Self> {
        Some(Self {
            url: common::postgres_url(test)?,
            shared: OnceCell::new(),
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
}

mod sqlite {
    forge_conformance::conformance_tests!(super::Sqlite);
}

mod postgres {
    forge_conformance::conformance_tests!(match super::Postgres::from_env("conformance") {
        Some(factory) => factory,
        None => return,
    });
}
