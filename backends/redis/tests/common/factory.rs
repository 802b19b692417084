//! The conformance factory of the Redis backend: a fresh key prefix per case, deleted by
//! the factory's teardown, and reopened as new clients on the same prefix (the Streams
//! bus outlives the restart). The same factory serves a single server and a cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::{BackendFactory, StoreMap};
use forge_core::{Bus, Error, Result, Store};
use forge_redis::{RedisBus, RedisStore};
use parking_lot::Mutex;

/// Hands out a store and its bus under `base:cN`, a fresh sub-prefix per case.
pub struct RedisFactory {
    server: String,
    /// Every node to check for keys left behind (the server, or each cluster node).
    nodes: Vec<String>,
    base: String,
    case: AtomicU64,
    /// Each store handed out, with the URL of its case (prefix included).
    open: StoreMap<(String, Arc<RedisStore>)>,
    /// The URL of the store returned last, for the bus to go with it.
    last: Mutex<Option<String>>,
}

impl RedisFactory {
    /// The factory, or `None` (after saying so) when no server is configured.
    pub fn from_env() -> Option<Self> {
        let server = super::redis_url()?;
        Some(Self::new(server.clone(), vec![server]))
    }

    /// A factory on `server` (a cluster's first node for a cluster), checking `nodes`
    /// for keys left behind.
    pub fn new(server: String, nodes: Vec<String>) -> Self {
        Self {
            server,
            nodes,
            base: super::fresh_prefix(),
            case: AtomicU64::new(0),
            open: StoreMap::new(),
            last: Mutex::new(None),
        }
    }

    async fn open_at(&self, url: String) -> Result<Arc<dyn Store>> {
        let redis = Arc::new(RedisStore::connect(&url).await?);
        let store = Arc::clone(&redis) as Arc<dyn Store>;
        self.open.insert(&store, (url.clone(), redis));
        *self.last.lock() = Some(url);
        Ok(store)
    }
}

#[async_trait]
impl BackendFactory for RedisFactory {
    fn name(&self) -> &'static str {
        "redis"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let case = self.case.fetch_add(1, Ordering::SeqCst) + 1;
        let url = super::with_prefix(&self.server, &format!("{}:c{case}", self.base), "");
        self.open_at(url).await
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        let url = self.last.lock().clone();
        let url = url.ok_or_else(|| Error::invalid("bus() before store()"))?;
        Ok(Some(Arc::new(RedisBus::connect(&url).await?)))
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let (url, redis) = self
            .open
            .remove(&store)
            .ok_or_else(|| Error::invalid("not a store of this factory"))?;
        drop((store, redis));
        Ok(Some(self.open_at(url).await?))
    }

    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        let (url, _) = self
            .open
            .get(store)
            .ok_or_else(|| Error::invalid("not a store of this factory"))?;
        Ok(Some(Arc::new(RedisBus::connect(&url).await?)))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        let Some((_, redis)) = self.open.remove(&store) else {
            return Ok(());
        };
        drop(store);
        redis.clear().await.map(drop)
    }
}

impl Drop for RedisFactory {
    /// Every case's keys went with its teardown: anything left under the base prefix is
    /// a teardown that was skipped (deleted here, and the test fails).
    fn drop(&mut self) {
        let mut left = 0;
        for node in &self.nodes {
            left += super::count_prefix(node, &self.base);
            super::delete_prefix(node, &self.base);
        }
        if !std::thread::panicking() {
            assert_eq!(left, 0, "keys left under {} after teardown", self.base);
        }
    }
}
