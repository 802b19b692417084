//! What a property runs on: the runtime, fresh backends and tenants per case, and
//! helpers for building envelopes and comparing results.

use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use forge_core::{
    Bus, BusCapabilities, Capabilities, Envelope, Error, LocalBus, Store, SyncEvent, TenantId,
};
use futures::FutureExt as _;
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

/// Opens one backend to read its capabilities (and tears it down).
pub(crate) fn probe(
    rt: &tokio::runtime::Runtime,
    factory: &dyn BackendFactory,
) -> (Option<Capabilities>, Option<BusCapabilities>) {
    rt.block_on(async {
        let store = factory.store().await.ok();
        let bus = factory.bus().await.ok().flatten().map(|b| b.capabilities());
        let caps = store.as_ref().map(|s| s.capabilities());
        if let Some(store) = store {
            let _ = factory.teardown(store).await;
        }
        (caps, bus)
    })
}

/// Everything a property needs while it runs.
pub(crate) struct Ctx<'a> {
    pub factory: &'a dyn BackendFactory,
    pub rt: &'a tokio::runtime::Runtime,
    pub config: Config,
    pub caps: Caps,
    /// The stores the running case got from the factory, torn down when it ends.
    opened: Mutex<Vec<Arc<dyn Store>>>,
    /// The buses it got, flushed and dropped before the stores are torn down, so that
    /// nothing published reaches the backend after its teardown.
    buses: Mutex<Vec<Arc<dyn Bus>>>,
    /// What the property exercised so far.
    pub stats: Arc<Stats>,
}

/// A fresh backend for one case, with the tenants the case used (cleaned up after).
pub(crate) struct Backend {
    /// The store, measured into the context's stats.
    pub store: Arc<dyn Store>,
    /// The store as the factory returned it (for reopen and teardown).
    raw: Arc<dyn Store>,
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
            // A session a writer of the case claimed is taken over first; one never
            // claimed is deleted unfenced, so it leaves no fence record behind (a fixed
            // tenant is used again by later cases, unfenced).
            let mut batch: Vec<Envelope<SyncEvent>> = Vec::with_capacity(sessions.len());
            for s in sessions {
                let epoch = match self.store.claimed(&t, &s.info.id).await {
                    Ok(None) => None,
                    Ok(Some(_)) => {
                        let request = forge_core::ClaimRequest::new(
                            "conformance-cleanup",
                            forge_core::id::now_ms(),
                        )
                        .mode(forge_core::ClaimMode::TakeOver);
                        match self.store.claim(&t, &s.info.id, &request).await {
                            Ok(claim) => Some(claim.epoch),
                            Err(_) => continue,
                        }
                    }
                    Err(_) => continue,
                };
                let deleted = SyncEvent::SessionDeleted {
                    session_id: s.info.id,
                };
                batch.push(env(&t, s.seq + 1, deleted).with_epoch(epoch));
            }
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

impl<'a> Ctx<'a> {
    /// A context for running properties of `factory` on `rt`.
    pub fn new(
        factory: &'a dyn BackendFactory,
        rt: &'a tokio::runtime::Runtime,
        config: Config,
        caps: Caps,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            factory,
            rt,
            config,
            caps,
            opened: Mutex::new(Vec::new()),
            buses: Mutex::new(Vec::new()),
            stats,
        }
    }

    /// A fresh backend from the factory, torn down when the case ends, its store
    /// measured into [`Ctx::stats`].
    pub async fn backend(&self) -> Result<Backend, String> {
        let store = self
            .factory
            .store()
            .await
            .map_err(|e| format!("the factory could not open a store: {e}"))?;
        self.opened.lock().push(Arc::clone(&store));
        let raw = Arc::clone(&store);
        let store = self.measured(store);
        let bus = self.factory_bus().await?;
        Ok(Backend {
            store,
            raw,
            bus,
            tenants: Mutex::new(Vec::new()),
        })
    }

    /// `store`, measured into [`Ctx::stats`].
    fn measured(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Measured {
            inner: store,
            stats: Arc::clone(&self.stats),
        })
    }

    /// A bus as a restarted process gets it: the factory's (fresh) bus, or a fresh
    /// live-only `LocalBus` for a store-only backend.
    pub async fn fresh_bus(&self) -> Result<Arc<dyn Bus>, String> {
        let bus = self.factory_bus().await?;
        Ok(bus.unwrap_or_else(|| Arc::new(LocalBus::new())))
    }

    /// A bus from the factory (`None` for a store-only backend), closed when the case
    /// ends.
    async fn factory_bus(&self) -> Result<Option<Arc<dyn Bus>>, String> {
        let bus = self
            .factory
            .bus()
            .await
            .map_err(|e| format!("the factory could not open a bus: {e}"))?;
        self.buses.lock().extend(bus.clone());
        Ok(bus)
    }

    /// Closes `b` — flushes its bus, drops its bus and store — and opens the same
    /// storage again through [`BackendFactory::reopen`]. `Ok(None)` when the factory
    /// cannot. The caller must hold no other handle on the store or the bus.
    pub async fn reopen(&self, b: Backend) -> Result<Option<Reopened>, String> {
        let Backend {
            store,
            raw,
            bus,
            tenants,
        } = b;
        // The measuring wrapper holds a handle on the factory's store: drop it first.
        drop(store);
        let store = raw;
        if let Some(bus) = bus {
            self.buses.lock().retain(|b| !same_bus(b, &bus));
            // A restart after an orderly shutdown: what was published has reached the
            // transport, so the reopened bus (if it outlives the process) knows it.
            bus.flush()
                .await
                .map_err(ctx_err("flushing the bus before closing"))?;
        }
        self.opened.lock().retain(|s| !same_store(s, &store));
        let Some(store) = self
            .factory
            .reopen(store)
            .await
            .map_err(ctx_err("reopen (BackendFactory::reopen)"))?
        else {
            return Ok(None);
        };
        self.opened.lock().push(Arc::clone(&store));
        let raw = Arc::clone(&store);
        let kept = self
            .factory
            .reopen_bus(&store)
            .await
            .map_err(ctx_err("reopening the bus (BackendFactory::reopen_bus)"))?;
        let bus_kept = kept.is_some();
        let bus = match kept {
            Some(bus) => {
                self.buses.lock().push(Arc::clone(&bus));
                Some(bus)
            }
            None => self.factory_bus().await?,
        };
        Ok(Some(Reopened {
            backend: Backend {
                store: self.measured(store),
                raw,
                bus,
                tenants,
            },
            bus_kept,
        }))
    }

    /// Runs one case body on the runtime, with a timeout, then tears down every store
    /// the case opened (also when it failed or panicked).
    pub fn block<F: Future<Output = Result<(), String>>>(&self, f: F) -> Result<(), String> {
        self.block_with(f)
    }

    /// [`Ctx::block`] for a body with a value.
    pub fn block_with<T, F: Future<Output = Result<T, String>>>(&self, f: F) -> Result<T, String> {
        self.rt.block_on(async {
            let run = AssertUnwindSafe(tokio::time::timeout(CASE_TIMEOUT, f))
                .catch_unwind()
                .await;
            let torn = self.teardown().await;
            let result = match run {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(format!(
                    "the case did not finish within {}s (hung?)",
                    CASE_TIMEOUT.as_secs()
                )),
                Err(panic) => std::panic::resume_unwind(panic),
            };
            match (result, torn) {
                (Ok(_), Err(e)) => Err(e),
                (result, _) => result,
            }
        })
    }

    /// Flushes and drops every bus the case opened, then hands every store it opened to
    /// [`BackendFactory::teardown`].
    async fn teardown(&self) -> Result<(), String> {
        let buses = std::mem::take(&mut *self.buses.lock());
        for bus in buses {
            // Best effort: a failed case may have left the bus broken.
            let _ = bus.flush().await;
        }
        let stores = std::mem::take(&mut *self.opened.lock());
        let mut first = Ok(());
        for store in stores {
            if let Err(e) = self.factory.teardown(store).await {
                if first.is_ok() {
                    first = Err(format!(
                        "teardown after the case failed: {} error: {e}",
                        e.kind()
                    ));
                }
            }
        }
        first
    }
}

/// A backend opened again by [`Ctx::reopen`].
pub(crate) struct Reopened {
    /// The reopened store and the bus to run with it.
    pub backend: Backend,
    /// Whether the bus is the same deployment's bus reopened (it outlives a restart);
    /// otherwise it is a fresh one.
    pub bus_kept: bool,
}

/// Whether two handles point at the same store.
fn same_store(a: &Arc<dyn Store>, b: &Arc<dyn Store>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Whether two handles point at the same bus.
fn same_bus(a: &Arc<dyn Bus>, b: &Arc<dyn Bus>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// An envelope for a sync event of the event's own session.
pub(crate) fn env(tenant: &TenantId, seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant.clone(),
        session_id: event.session_id().clone(),
        seq,
        epoch: None,
        event,
    }
}

/// `batch` written under the current claim of each of its sessions, as the session's
/// writer would write it (unfenced where a session was never claimed): for a property
/// that writes beside a projector holding the session.
pub(crate) async fn under_claims(
    store: &dyn Store,
    mut batch: Vec<Envelope<SyncEvent>>,
) -> Result<Vec<Envelope<SyncEvent>>, String> {
    for env in &mut batch {
        env.epoch = store
            .claimed(&env.tenant, &env.session_id)
            .await
            .map_err(ctx_err(format!("claimed({})", env.session_id)))?
            .map(|c| c.epoch);
    }
    Ok(batch)
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

/// Applies `batch` to `model`, which must accept it (else the error is `rejected:` and
/// the model's reason), then to `store` (`what` names the write in its error).
pub(crate) async fn apply_both(
    model: &mut crate::reference::ReferenceStore,
    store: &dyn Store,
    batch: &[Envelope<SyncEvent>],
    rejected: &str,
    what: &str,
) -> Result<(), String> {
    model
        .apply(batch)
        .map_err(|r| format!("{rejected}: {r:?}"))?;
    store.apply(batch).await.map_err(ctx_err(what))
}

/// What the store read `read` returns is `want`: `call` names the read in its error,
/// `what` in a difference.
pub(crate) async fn same_read<T: PartialEq + Debug + Serialize>(
    what: &str,
    want: &T,
    call: &str,
    read: impl Future<Output = forge_core::Result<T>>,
) -> Result<(), String> {
    let got = read.await.map_err(ctx_err(call))?;
    same(what, want, &got)
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
    move |e| format!("{what}: {} error: {e}", e.kind())
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
