//! What a property runs on: the runtime, fresh backends and tenants per case, and
//! helpers for building envelopes and comparing results.

use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use forge_core::{
    Bus, BusCapabilities, Capabilities, Envelope, Error, LocalBus, Store, SyncEvent, TenantId,
};
use parking_lot::Mutex;
use serde::Serialize;

use crate::exercised::{Measured, Stats};
pub(crate) use crate::runner::{run_cases, run_scaled, CaseRun};
use crate::{BackendFactory, Config};

/// How long one generated case may take before it counts as hung.
pub(crate) const CASE_TIMEOUT: Duration = Duration::from_mins(1);

/// The suite's runtime: two workers, so concurrency cases really run in parallel.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build the conformance runtime: {e}"))
}

/// What the backend under test can do.
#[derive(Clone, Debug)]
pub(crate) struct Caps {
    pub store: Capabilities,
    pub bus: Option<BusCapabilities>,
}

/// Opens one backend to read its capabilities.
pub(crate) fn probe(
    rt: &tokio::runtime::Runtime,
    factory: &dyn BackendFactory,
) -> (Option<Capabilities>, Option<BusCapabilities>) {
    rt.block_on(async {
        let store = factory.store().await.ok().map(|s| s.capabilities());
        let bus = factory.bus().await.ok().flatten().map(|b| b.capabilities());
        (store, bus)
    })
}

/// Everything a property needs while it runs.
pub(crate) struct Ctx<'a> {
    pub factory: &'a dyn BackendFactory,
    pub rt: &'a tokio::runtime::Runtime,
    pub config: Config,
    pub caps: Caps,
    /// What the property exercised so far.
    pub stats: Arc<Stats>,
}

/// A fresh backend for one case, with the tenants the case used (cleaned up after).
pub(crate) struct Backend {
    pub store: Arc<dyn Store>,
    /// The factory's bus, if it has one.
    pub bus: Option<Arc<dyn Bus>>,
    tenants: Mutex<Vec<TenantId>>,
}

impl Backend {
    /// A fresh tenant, unique in this process and across runs.
    pub fn tenant(&self) -> TenantId {
        let t = fresh_tenant();
        self.tenants.lock().push(t.clone());
        t
    }

    /// A fixed tenant (e.g. `..`), remembered for cleanup. If the store already holds
    /// sessions in it (a shared database), a fresh tenant is used instead, so the
    /// suite never touches rows it did not write.
    pub async fn fixed_tenant(&self, id: &str) -> Result<TenantId, String> {
        let t = TenantId::new(id).map_err(|e| format!("tenant {id:?}: {e}"))?;
        let empty = self
            .store
            .sessions(&t)
            .await
            .map_err(ctx_err(format!("sessions({id:?})")))?
            .is_empty();
        if !empty {
            return Ok(self.tenant());
        }
        self.tenants.lock().push(t.clone());
        Ok(t)
    }

    /// The factory's bus, or a live-only `LocalBus` for store-only backends.
    pub fn bus_or_local(&self) -> Arc<dyn Bus> {
        self.bus
            .clone()
            .unwrap_or_else(|| Arc::new(LocalBus::new()) as Arc<dyn Bus>)
    }

    /// Deletes every session of the tenants this case used (best effort), so a factory
    /// over a shared database is left as it was found.
    pub async fn cleanup(&self) {
        let tenants = std::mem::take(&mut *self.tenants.lock());
        for t in tenants {
            let Ok(sessions) = self.store.sessions(&t).await else {
                continue;
            };
            let batch: Vec<Envelope<SyncEvent>> = sessions
                .into_iter()
                .map(|s| {
                    env(
                        &t,
                        s.seq + 1,
                        SyncEvent::SessionDeleted {
                            session_id: s.info.id,
                        },
                    )
                })
                .collect();
            if !batch.is_empty() {
                let _ = self.store.apply(&batch).await;
            }
        }
    }
}

fn fresh_tenant() -> TenantId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    TenantId::new(&format!("fc-{salt:016x}-{n}"))
        .unwrap_or_else(|e| unreachable!("generated tenant ids are valid: {e}"))
}

impl Ctx<'_> {
    /// A fresh backend from the factory, its store measured into [`Ctx::stats`].
    pub async fn backend(&self) -> Result<Backend, String> {
        let store = self
            .factory
            .store()
            .await
            .map_err(|e| format!("the factory could not open a store: {e}"))?;
        let store: Arc<dyn Store> = Arc::new(Measured {
            inner: store,
            stats: Arc::clone(&self.stats),
        });
        let bus = self
            .factory
            .bus()
            .await
            .map_err(|e| format!("the factory could not open a bus: {e}"))?;
        Ok(Backend {
            store,
            bus,
            tenants: Mutex::new(Vec::new()),
        })
    }

    /// Runs one case body on the runtime, with a timeout.
    pub fn block<F: Future<Output = Result<(), String>>>(&self, f: F) -> Result<(), String> {
        self.rt.block_on(async {
            match tokio::time::timeout(CASE_TIMEOUT, f).await {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "the case did not finish within {}s (hung?)",
                    CASE_TIMEOUT.as_secs()
                )),
            }
        })
    }
}

/// An envelope for a sync event of the event's own session.
pub(crate) fn env(tenant: &TenantId, seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant.clone(),
        session_id: event.session_id().clone(),
        seq,
        event,
    }
}

/// Envelopes numbered from `first_seq`.
pub(crate) fn envs(
    tenant: &TenantId,
    first_seq: u64,
    events: Vec<SyncEvent>,
) -> Vec<Envelope<SyncEvent>> {
    events
        .into_iter()
        .zip(first_seq..)
        .map(|(e, seq)| env(tenant, seq, e))
        .collect()
}

/// The name of an error's kind, for messages and matching.
pub(crate) fn kind(e: &Error) -> &'static str {
    e.kind()
}

/// `Ok` if `expected == actual`, else a message showing both (as JSON when possible).
pub(crate) fn same<T: PartialEq + Debug + Serialize>(
    what: &str,
    expected: &T,
    actual: &T,
) -> Result<(), String> {
    if expected == actual {
        return Ok(());
    }
    let show = |v: &T| {
        let s = serde_json::to_string(v).unwrap_or_else(|_| format!("{v:?}"));
        if s.chars().count() > 4_000 {
            format!("{}…", s.chars().take(4_000).collect::<String>())
        } else {
            s
        }
    };
    Err(format!(
        "{what}:\n  expected: {}\n  actual:   {}",
        show(expected),
        show(actual)
    ))
}

/// Wraps a store error with what was being done.
pub(crate) fn ctx_err(what: impl std::fmt::Display) -> impl FnOnce(Error) -> String {
    move |e| format!("{what}: {} error: {e}", kind(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_fresh_and_valid() {
        let a = fresh_tenant();
        let b = fresh_tenant();
        assert_ne!(a, b);
        assert!(a.as_str().len() <= TenantId::MAX_LEN);
    }
}
