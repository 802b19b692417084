//! The Postgres driver: `postgres://…[?schema=NAME]`, and throwaway instances in a
//! fresh schema.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{
    on_server, Backend, Driver, DriverInfo, DriverOptions, InstanceOptions, Instances, Kind,
    ProbeRun, StoreMap, WriteProbe, Written,
};
use forge_core::{Result, Store};
use parking_lot::Mutex;

use super::testing::TestSchema;
use super::wal::{
    pg_connect, pg_stat_wal, pg_wait_for_stats, pg_wal_insert_lsn, PgWalStats, PG_STATS_MAX_LAG,
};
use super::{PostgresOptions, PostgresStore};

/// The driver of [`PostgresStore`].
pub static DRIVER: PostgresDriver = PostgresDriver;

/// See [`DRIVER`].
#[derive(Debug)]
pub struct PostgresDriver;

#[async_trait]
impl Driver for PostgresDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "postgres",
            schemes: &["postgres", "postgresql"],
            shape: "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&search=on|off&search_language=CONFIG]",
            kind: Kind::Server,
        }
    }

    async fn open_store(&self, url: &str, options: &DriverOptions) -> Result<Arc<dyn Store>> {
        on_server(url, options.retry, PostgresStore::connect(url)).await
    }

    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        PostgresOptions::from_url(url)?;
        // A schema the URL names is the caller's: used as it is and left in place.
        let (schema, store_url) = if options.in_place || url.contains("schema=") {
            (None, url.to_owned())
        } else {
            let schema = TestSchema::create_for(url, &options.purpose_name()).await?;
            let store_url = schema.url();
            (Some(schema), store_url)
        };
        let shared = Arc::new(PostgresStore::connect(&store_url).await?);
        Ok(Arc::new(InSchema {
            server: url.to_owned(),
            store_url,
            shared,
            made: Mutex::new(schema),
            opened: StoreMap::new(),
        }))
    }
}

/// Instances in one schema: every instance shares it (and one pool on it), and writes
/// under tenants of its own. A schema made for the set is dropped at
/// [`Instances::close`], or when the set is dropped.
struct InSchema {
    server: String,
    store_url: String,
    shared: Arc<PostgresStore>,
    made: Mutex<Option<TestSchema>>,
    opened: StoreMap<Arc<PostgresStore>>,
}

impl InSchema {
    fn remember(&self, store: Arc<PostgresStore>) -> Arc<dyn Store> {
        let handle = Arc::clone(&store) as Arc<dyn Store>;
        self.opened.insert(&handle, store);
        handle
    }
}

#[async_trait]
impl Instances for InSchema {
    fn how(&self) -> String {
        match &*self.made.lock() {
            Some(s) => format!("schema {} for this run; own tenants per instance", s.name()),
            None => "the URL's schema, shared; own tenants per instance".to_owned(),
        }
    }

    async fn fresh(&self) -> Result<Backend> {
        Ok(Backend {
            store: self.remember(Arc::clone(&self.shared)),
            bus: None,
        })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.opened.remove(&store);
        drop(store);
        let store = PostgresStore::connect(&self.store_url).await?;
        Ok(Some(self.remember(Arc::new(store))))
    }

    fn url(&self, store: &Arc<dyn Store>) -> Option<String> {
        self.opened.get(store).map(|_| self.store_url.clone())
    }

    fn probe(&self, store: &Arc<dyn Store>) -> Option<Box<dyn WriteProbe>> {
        Some(Box::new(WalProbe {
            server: self.server.clone(),
            store: self.opened.get(store)?,
        }))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        if let Some(pg) = self.opened.remove(&store) {
            if !Arc::ptr_eq(&pg, &self.shared) {
                pg.close().await;
            }
        }
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        self.shared.close().await;
        let schema = self.made.lock().take();
        match schema {
            Some(schema) => schema.drop().await,
            None => Ok(()),
        }
    }
}

/// WAL bytes of the whole cluster from the insert LSN, and `pg_stat_wal.wal_sync` as
/// syncs.
struct WalProbe {
    server: String,
    store: Arc<PostgresStore>,
}

struct Started {
    server: String,
    store: Arc<PostgresStore>,
    lsn: u64,
    wal: PgWalStats,
}

#[async_trait]
impl WriteProbe for WalProbe {
    async fn start(&self) -> Result<Box<dyn ProbeRun>> {
        let mut conn = pg_connect(&self.server).await?;
        // Every page a run touches first after a checkpoint costs a full-page image in
        // the WAL; starting each run right after one makes runs comparable instead of
        // depending on when the server last checkpointed. Needs superuser or
        // pg_checkpoint; without it the run goes on.
        let _ = sqlx::raw_sql("CHECKPOINT").execute(&mut conn).await;
        let lsn = pg_wal_insert_lsn(&mut conn).await?;
        let wal = pg_stat_wal(&mut conn).await?;
        // The readings are taken; a failed goodbye changes nothing.
        let _ = sqlx::Connection::close(conn).await;
        Ok(Box::new(Started {
            server: self.server.clone(),
            store: Arc::clone(&self.store),
            lsn,
            wal,
        }))
    }
}

#[async_trait]
impl ProbeRun for Started {
    async fn finish(self: Box<Self>) -> Result<Written> {
        // A connection reports its WAL syncs to pg_stat_wal when it goes idle or closes:
        // close the pool before reading them.
        self.store.close().await;
        let mut conn = pg_connect(&self.server).await?;
        let lsn_now = pg_wal_insert_lsn(&mut conn).await?;
        // If the wait runs out (other clients keep the server busy), the syncs reported
        // may miss some.
        pg_wait_for_stats(&mut conn, PG_STATS_MAX_LAG).await?;
        let wal_now = pg_stat_wal(&mut conn).await?;
        let _ = sqlx::Connection::close(conn).await;
        Ok(Written {
            bytes: Some(lsn_now.saturating_sub(self.lsn)),
            source: "postgres WAL: pg_wal_lsn_diff of the insert LSN, from a CHECKPOINT (full-page images included)".to_owned(),
            syncs: Some(wal_now.since(&self.wal).wal_sync),
        })
    }
}
