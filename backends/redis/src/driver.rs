//! The Redis driver: `redis://…[?prefix=…]`, a store with a durable Streams bus, and a
//! fresh key prefix per throwaway instance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{
    on_server, Backend, Driver, DriverInfo, DriverOptions, InstanceOptions, Instances, Kind,
    ProbeRun, StoreMap, WriteProbe, Written,
};
use forge_core::{Bus, Result, Store};

use crate::probe::{redis_appendfsync, redis_memory_usage, redis_persistence, RedisDisk};
use crate::{RedisBus, RedisOptions, RedisStore};

/// The driver of [`RedisStore`] and [`RedisBus`].
pub static DRIVER: RedisDriver = RedisDriver;

/// See [`DRIVER`].
#[derive(Debug)]
pub struct RedisDriver;

#[async_trait]
impl Driver for RedisDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "redis",
            schemes: &["redis", "rediss"],
            shape: "redis://HOST[:PORT][/DB][?prefix=NAME&maxlen=N&fsync=always|everysec|off&search=on|off] (store + durable Streams bus)",
            kind: Kind::Server,
        }
    }

    async fn open_store(&self, url: &str, options: &DriverOptions) -> Result<Arc<dyn Store>> {
        on_server(url, options.retry, RedisStore::connect(url)).await
    }

    async fn open_bus(&self, url: &str, options: &DriverOptions) -> Result<Option<Arc<dyn Bus>>> {
        let opts = RedisOptions::from_url(url)?.with_retry(options.retry);
        Ok(Some(Arc::new(RedisBus::with_options(opts).await?)))
    }

    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        let redis = RedisOptions::from_url(url)?;
        let base = (!options.in_place).then(|| {
            format!(
                "{}:{}",
                redis.prefix,
                forge_core::id::ascending(&options.purpose_name())
            )
        });
        Ok(Arc::new(Prefixes {
            url: url.to_owned(),
            options: redis,
            base,
            case: AtomicU64::new(0),
            opened: StoreMap::new(),
        }))
    }
}

/// A fresh key prefix per instance, `<base>:c<n>`, deleted at teardown; or, in place,
/// the URL's prefix for every instance, left as it is.
struct Prefixes {
    url: String,
    options: RedisOptions,
    /// `None`: in place.
    base: Option<String>,
    case: AtomicU64,
    opened: StoreMap<(Arc<RedisOptions>, Arc<RedisStore>)>,
}

impl Prefixes {
    async fn open(&self, options: Arc<RedisOptions>) -> Result<Arc<dyn Store>> {
        let redis = Arc::new(RedisStore::with_options(&options).await?);
        let store = Arc::clone(&redis) as Arc<dyn Store>;
        self.opened.insert(&store, (options, redis));
        Ok(store)
    }
}

#[async_trait]
impl Instances for Prefixes {
    fn how(&self) -> String {
        match &self.base {
            Some(base) => format!("fresh key prefix per instance under {base}"),
            None => format!("key prefix {} in place, shared", self.options.prefix),
        }
    }

    async fn fresh(&self) -> Result<Backend> {
        let mut options = self.options.clone();
        if let Some(base) = &self.base {
            let n = self.case.fetch_add(1, Ordering::Relaxed) + 1;
            options.prefix = format!("{base}:c{n}");
        }
        let options = Arc::new(options);
        let store = self.open(Arc::clone(&options)).await?;
        let bus = RedisBus::with_options((*options).clone()).await?;
        Ok(Backend {
            store,
            bus: Some(Arc::new(bus)),
        })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let (options, _) = self
            .opened
            .remove(&store)
            .ok_or_else(|| forge_core::Error::invalid("reopen: not a store of these instances"))?;
        forge_core::driver::last_handle(&store)?;
        drop(store);
        self.open(options).await.map(Some)
    }

    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        match self.opened.get(store) {
            Some((options, _)) => Ok(Some(Arc::new(
                RedisBus::with_options((*options).clone()).await?,
            ))),
            None => Ok(None),
        }
    }

    fn url(&self, store: &Arc<dyn Store>) -> Option<String> {
        // The last `prefix=` of a URL is the one that counts.
        let (options, _) = self.opened.get(store)?;
        Some(forge_core::driver::with_query(
            &self.url,
            &format!("prefix={}", options.prefix),
        ))
    }

    fn probe(&self, store: &Arc<dyn Store>) -> Option<Box<dyn WriteProbe>> {
        let (_, redis) = self.opened.get(store)?;
        Some(Box::new(Probe {
            url: self.url.clone(),
            pattern: redis.keys().pattern(),
        }))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        if let Some((_, redis)) = self.opened.remove(&store) {
            if self.base.is_some() {
                redis.clear().await?;
            }
        }
        Ok(())
    }
}

/// Growth of the AOF when it is on and not rewritten during the run, else growth of
/// `MEMORY USAGE` of the instance's keys.
struct Probe {
    url: String,
    pattern: String,
}

struct Started {
    url: String,
    pattern: String,
    disk: RedisDisk,
    memory: u64,
}

#[async_trait]
impl WriteProbe for Probe {
    async fn start(&self) -> Result<Box<dyn ProbeRun>> {
        Ok(Box::new(Started {
            url: self.url.clone(),
            pattern: self.pattern.clone(),
            disk: redis_persistence(&self.url).await?,
            memory: redis_memory_usage(&self.url, &self.pattern).await?,
        }))
    }
}

#[async_trait]
impl ProbeRun for Started {
    async fn finish(self: Box<Self>) -> Result<Written> {
        let disk_now = redis_persistence(&self.url).await?;
        let disk = self.disk;
        if disk.aof_enabled || disk_now.aof_enabled {
            // Bytes appended to the AOF, or nothing: falling back to memory would
            // change what is counted between two rows of one table.
            let grown = match (disk.aof_current_size, disk_now.aof_current_size) {
                (Some(a), Some(b))
                    if disk.aof_rewrites == disk_now.aof_rewrites
                        && !disk_now.aof_rewrite_in_progress =>
                {
                    Some(b.saturating_sub(a))
                }
                _ => None,
            };
            let fsync = redis_appendfsync(&self.url)
                .await
                .unwrap_or_else(|| "unknown".to_owned());
            return Ok(Written {
                // `None`: an AOF rewrite ran during the run, not measurable.
                bytes: grown,
                source: format!("redis AOF bytes appended (appendfsync {fsync})"),
                syncs: None,
            });
        }
        // No persistence: what the run's keys hold in memory.
        let now = redis_memory_usage(&self.url, &self.pattern).await?;
        Ok(Written {
            bytes: Some(now.saturating_sub(self.memory)),
            source: "redis MEMORY USAGE of the run's keys (store and Streams bus; no AOF)"
                .to_owned(),
            syncs: None,
        })
    }
}
