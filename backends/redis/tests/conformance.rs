//! The conformance suite on RedisStore + RedisBus: a fresh key prefix per case, all
//! deleted when the test ends.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::BackendFactory;
use forge_core::{Bus, Result, Store};
use forge_redis::{RedisBus, RedisStore};

/// Hands out a store and its bus under `base:cN`, a fresh sub-prefix per case.
struct RedisFactory {
    url: String,
    base: String,
    case: AtomicU64,
}

impl RedisFactory {
    fn url(&self, case: u64) -> String {
        common::with_prefix(&self.url, &format!("{}:c{case}", self.base), "")
    }
}

#[async_trait]
impl BackendFactory for RedisFactory {
    fn name(&self) -> &'static str {
        "redis"
    }
    async fn store(&self) -> Result<Arc<dyn Store>> {
        let case = self.case.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Arc::new(RedisStore::connect(&self.url(case)).await?))
    }
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        let case = self.case.load(Ordering::SeqCst);
        Ok(Some(Arc::new(RedisBus::connect(&self.url(case)).await?)))
    }
}

impl Drop for RedisFactory {
    fn drop(&mut self) {
        common::delete_prefix(&self.url, &self.base);
    }
}

/// Runs `property` against Redis, or prints the skip notice.
fn check(property: forge_conformance::Property) {
    let Some(url) = common::redis_url() else {
        return;
    };
    let factory = RedisFactory {
        url: url.clone(),
        base: common::fresh_prefix(),
        case: AtomicU64::new(0),
    };
    forge_conformance::assert_property(&factory, property);
    let base = factory.base.clone();
    drop(factory);
    assert_eq!(
        common::count_prefix(&url, &base),
        0,
        "keys left under {base}"
    );
}

macro_rules! properties {
    ($($name:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $name() {
                check(forge_conformance::Property::$variant);
            }
        )*
    };
}

properties! {
    upsert => Upsert,
    pagination => Pagination,
    filter_compacted => FilterCompacted,
    crash_boundary => CrashBoundary,
    crash_durable_bus => CrashDurableBus,
    write_discipline => WriteDiscipline,
    bus => Bus,
    bus_resume => BusResume,
    tenant_isolation => TenantIsolation,
    concurrency => Concurrency,
    round_trip => RoundTrip,
}

/// The macro's list and this one must not drift: every property of the suite runs here.
#[test]
fn every_property_runs() {
    assert_eq!(forge_conformance::Property::ALL.len(), 11);
}
