//! Deliberately broken wrappers of `LocalBus`, and factories that pair broken parts.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::BackendFactory;
use forge_core::model::PartBody;
use forge_core::{
    Bus, BusCapabilities, BusEvent, Envelope, Event, LocalBus, MemoryStore, Replay, Result,
    SessionId, Store, Subscription, SyncEvent, TenantId, Topic,
};
use parking_lot::Mutex;

use super::store::{BrokenStore, StoreBug};

/// The bug a [`BrokenBus`] has.
#[derive(Debug)]
pub enum BusBug {
    /// Every two consecutive events of a session are delivered swapped.
    ReordersPairs,
    /// Every text delta is also written into the store (the naive write-every-token
    /// design): the store receives deltas.
    PersistsDeltas(Arc<dyn Store>),
}

/// `LocalBus` with one bug.
#[derive(Debug)]
pub struct BrokenBus {
    inner: LocalBus,
    bug: BusBug,
    held: Mutex<HashMap<(TenantId, SessionId), BusEvent>>,
}

impl BrokenBus {
    pub fn new(replay: usize, bug: BusBug) -> Self {
        Self {
            inner: LocalBus::with_replay(replay),
            bug,
            held: Mutex::new(HashMap::new()),
        }
    }

    fn persist(store: &Arc<dyn Store>, e: &BusEvent) {
        let Event::PartDelta(d) = &e.event else {
            return;
        };
        // MemoryStore never awaits, so this does not block a worker.
        futures::executor::block_on(async {
            let Ok(Some(m)) = store.message(&e.tenant, &e.session_id, &d.message_id).await else {
                return;
            };
            let Some(mut part) = m.parts.into_iter().find(|p| p.id == d.part_id) else {
                return;
            };
            match &mut part.body {
                PartBody::Text(t) => t.text.push_str(&d.delta),
                PartBody::Reasoning(r) => r.text.push_str(&d.delta),
                _ => return,
            }
            let _ = store
                .apply(&[Envelope {
                    tenant: e.tenant.clone(),
                    session_id: e.session_id.clone(),
                    seq: e.seq,
                    event: SyncEvent::PartUpdated { part },
                }])
                .await;
        });
    }
}

#[async_trait]
impl Bus for BrokenBus {
    fn capabilities(&self) -> BusCapabilities {
        self.inner.capabilities()
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
        match &self.bug {
            BusBug::ReordersPairs => {
                let key = (event.tenant.clone(), event.session_id.clone());
                let held = self.held.lock().remove(&key);
                match held {
                    None => {
                        self.held.lock().insert(key, event);
                        Ok(())
                    }
                    Some(first) => {
                        self.inner.publish(event)?;
                        self.inner.publish(first)
                    }
                }
            }
            BusBug::PersistsDeltas(store) => {
                Self::persist(store, &event);
                self.inner.publish(event)
            }
        }
    }

    async fn flush(&self) -> Result<()> {
        let held: Vec<BusEvent> = self.held.lock().drain().map(|(_, e)| e).collect();
        for e in held {
            self.inner.publish(e)?;
        }
        self.inner.flush().await
    }

    async fn subscribe(
        &self,
        tenant: &TenantId,
        topic: Topic,
        from_seq: Option<u64>,
    ) -> Result<Subscription> {
        self.inner.subscribe(tenant, topic, from_seq).await
    }

    async fn replay(&self, tenant: &TenantId, session: &SessionId, from: u64) -> Result<Replay> {
        self.inner.replay(tenant, session, from).await
    }

    async fn last_seq(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<u64>> {
        self.inner.last_seq(tenant, session).await
    }
}

/// What a [`Broken`] factory builds.
#[derive(Clone, Copy, Debug)]
pub enum Wrapper {
    /// A broken store with a durable `LocalBus`.
    Store(StoreBug),
    /// A `MemoryStore` with a bus that reorders pairs of events.
    ReorderingBus,
    /// A `MemoryStore` with a bus that writes every delta into it.
    DeltaPersistingBus,
    /// A store whose bug shows at scale or with real data, with a durable `LocalBus`.
    Scale(super::scale::ScaleBug),
}

/// A factory for one broken wrapper. The bus of a case is built over the store the
/// suite asked for just before (the factory contract).
pub struct Broken {
    pub wrapper: Wrapper,
    last: Mutex<Option<Arc<dyn Store>>>,
}

impl Broken {
    pub fn new(wrapper: Wrapper) -> Self {
        Self {
            wrapper,
            last: Mutex::new(None),
        }
    }
}

const REPLAY: usize = 100_000;

#[async_trait]
impl BackendFactory for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let store: Arc<dyn Store> = match self.wrapper {
            Wrapper::Store(bug) => Arc::new(BrokenStore::new(bug)),
            Wrapper::Scale(bug) => super::scale::store(bug),
            _ => Arc::new(MemoryStore::new()),
        };
        *self.last.lock() = Some(Arc::clone(&store));
        Ok(store)
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        let bus: Arc<dyn Bus> = match self.wrapper {
            Wrapper::Store(_) | Wrapper::Scale(_) => Arc::new(LocalBus::with_replay(REPLAY)),
            Wrapper::ReorderingBus => Arc::new(BrokenBus::new(REPLAY, BusBug::ReordersPairs)),
            Wrapper::DeltaPersistingBus => {
                let store = self
                    .last
                    .lock()
                    .clone()
                    .unwrap_or_else(|| Arc::new(MemoryStore::new()));
                Arc::new(BrokenBus::new(REPLAY, BusBug::PersistsDeltas(store)))
            }
        };
        Ok(Some(bus))
    }
}
