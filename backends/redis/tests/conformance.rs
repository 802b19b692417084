//! The conformance suite on RedisStore + RedisBus, through the suite's macro like every
//! other backend: a fresh key prefix per case, deleted by the factory's teardown, and
//! reopened as new clients on the same prefix (the Streams bus outlives the restart).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::{BackendFactory, StoreMap};
use forge_core::{Bus, Error, Result, Store};
use forge_redis::{RedisBus, RedisStore};
use parking_lot::Mutex;

/// Hands out a store and its bus under `base:cN`, a fresh sub-prefix per case.
struct RedisFactory {
    server: String,
    base: String,
    case: AtomicU64,
    /// Each store handed out, with the URL of its case (prefix included).
    open: StoreMap<(String, Arc<RedisStore>)>,
    /// The URL of the store returned last, for the bus to go with it.
    last: Mutex<Option<String>>,
}

impl RedisFactory {
    /// The factory, or `None` (after saying so) when no server is configured.
    fn from_env() -> Option<Self> {
        Some(Self {
            server: common::redis_url()?,
            base: common::fresh_prefix(),
            case: AtomicU64::new(0),
            open: StoreMap::new(),
            last: Mutex::new(None),
        })
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
        let url = common::with_prefix(&self.server, &format!("{}:c{case}", self.base), "");
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
        let left = common::count_prefix(&self.server, &self.base);
        common::delete_prefix(&self.server, &self.base);
        if !std::thread::panicking() {
            assert_eq!(left, 0, "keys left under {} after teardown", self.base);
        }
    }
}

forge_conformance::conformance_tests!(match RedisFactory::from_env() {
    Some(factory) => factory,
    None => return,
});
