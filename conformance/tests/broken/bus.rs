//! Deliberately broken wrappers of `LocalBus`, and factories that pair broken parts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Every 1,000th delta is written into the store (a "save every N tokens"
    /// compromise).
    PersistsEvery1000thDelta(Arc<dyn Store>),
    /// Each session subscriber has a queue of 1,024 events filled at publish time; when
    /// it is full the event is dropped without a word (a bounded channel's `try_send`
    /// with its error ignored).
    SubscriberQueueDrops1024,
    /// Replay keeps only the newest 1,024 events of a session and does not say it is
    /// truncated (a stream capped with `MAXLEN` read as if it were whole).
    ReplayTrimsSilently1024,
    /// A session subscriber gets the events of every session whose id starts with its
    /// session's id (a channel pattern `session:ID*`).
    SessionTopicByPrefix,
    /// Subscribers skip what they missed without a word: the in-process bus with its
    /// `Error::Lagged` items filtered out (a receive loop that `continue`s on a
    /// broadcast channel's `Lagged`).
    SwallowsLagged,
}

/// What [`BusBug::SubscriberQueueDrops1024`] and [`BusBug::ReplayTrimsSilently1024`]
/// keep.
const BOUND: usize = 1_024;

/// The queues of a session's subscribers.
type Queues = Vec<Arc<Queue>>;

/// One subscriber's bounded queue.
#[derive(Debug, Default)]
struct Queue {
    events: Mutex<VecDeque<BusEvent>>,
    ready: tokio::sync::Notify,
}

/// `LocalBus` with one bug.
#[derive(Debug)]
pub struct BrokenBus {
    inner: LocalBus,
    bug: BusBug,
    held: Mutex<HashMap<(TenantId, SessionId), BusEvent>>,
    queues: Mutex<HashMap<(TenantId, SessionId), Queues>>,
    deltas: AtomicU64,
}

impl BrokenBus {
    pub fn new(replay: usize, bug: BusBug) -> Self {
        Self {
            inner: LocalBus::with_replay(replay),
            bug,
            held: Mutex::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            deltas: AtomicU64::new(0),
        }
    }

    /// A session subscription fed from a bounded queue (live events only).
    fn queued(&self, tenant: &TenantId, session: &SessionId) -> Subscription {
        let queue = Arc::new(Queue::default());
        self.queues
            .lock()
            .entry((tenant.clone(), session.clone()))
            .or_default()
            .push(Arc::clone(&queue));
        Subscription::new(futures::stream::unfold(queue, |queue| async move {
            loop {
                let next = queue.events.lock().pop_front();
                if let Some(e) = next {
                    return Some((Ok(e), queue));
                }
                // A notification sent since the check is kept as a permit.
                queue.ready.notified().await;
            }
        }))
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
            // Under the writer's claim, as the writer's own store would take it.
            let epoch = store
                .claimed(&e.tenant, &e.session_id)
                .await
                .ok()
                .flatten()
                .map(|c| c.epoch);
            let _ = store
                .apply(&[Envelope {
                    tenant: e.tenant.clone(),
                    session_id: e.session_id.clone(),
                    seq: e.seq,
                    epoch,
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
            BusBug::PersistsEvery1000thDelta(store) => {
                if matches!(event.event, Event::PartDelta(_))
                    && (self.deltas.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(1000)
                {
                    Self::persist(store, &event);
                }
                self.inner.publish(event)
            }
            BusBug::SubscriberQueueDrops1024 => {
                let key = (event.tenant.clone(), event.session_id.clone());
                for q in self.queues.lock().get(&key).into_iter().flatten() {
                    let mut events = q.events.lock();
                    if events.len() < BOUND {
                        events.push_back(event.clone());
                        q.ready.notify_one();
                    }
                }
                self.inner.publish(event)
            }
            BusBug::ReplayTrimsSilently1024
            | BusBug::SessionTopicByPrefix
            | BusBug::SwallowsLagged => self.inner.publish(event),
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
        match (&self.bug, &topic, from_seq) {
            (BusBug::SubscriberQueueDrops1024, Topic::Session(session), None) => {
                Ok(self.queued(tenant, session))
            }
            (BusBug::SessionTopicByPrefix, Topic::Session(session), _) => {
                use futures::StreamExt as _;
                let prefix = session.as_str().to_owned();
                let whole = self
                    .inner
                    .subscribe(tenant, Topic::Tenant, from_seq)
                    .await?;
                Ok(Subscription::new(whole.filter(move |e| {
                    let keep = e
                        .as_ref()
                        .map_or(true, |e| e.session_id.as_str().starts_with(&prefix));
                    futures::future::ready(keep)
                })))
            }
            (BusBug::SwallowsLagged, _, _) => {
                use futures::StreamExt as _;
                let sub = self.inner.subscribe(tenant, topic, from_seq).await?;
                Ok(Subscription::new(sub.filter(|e| {
                    futures::future::ready(!matches!(e, Err(forge_core::Error::Lagged { .. })))
                })))
            }
            _ => self.inner.subscribe(tenant, topic, from_seq).await,
        }
    }

    async fn replay(&self, tenant: &TenantId, session: &SessionId, from: u64) -> Result<Replay> {
        let mut replay = self.inner.replay(tenant, session, from).await?;
        if matches!(self.bug, BusBug::ReplayTrimsSilently1024) && replay.events.len() > BOUND {
            replay.events.drain(..replay.events.len() - BOUND);
        }
        Ok(replay)
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
    /// A `MemoryStore` with a bus that writes every 1,000th delta into it.
    CheckpointingBus,
    /// A `MemoryStore` with a bus whose session subscribers drop events past 1,024
    /// queued, silently.
    DroppingSubscriberBus,
    /// A `MemoryStore` with a bus whose replay silently keeps the newest 1,024 events.
    TrimmingReplayBus,
    /// A `MemoryStore` with a bus whose session subscribers also get the sessions whose
    /// ids extend their session's id.
    PrefixSubscriberBus,
    /// A `MemoryStore` with a bus whose subscribers skip what they missed without an
    /// `Error::Lagged`.
    SwallowingLaggedBus,
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
            Wrapper::DroppingSubscriberBus => {
                Arc::new(BrokenBus::new(REPLAY, BusBug::SubscriberQueueDrops1024))
            }
            Wrapper::TrimmingReplayBus => {
                Arc::new(BrokenBus::new(REPLAY, BusBug::ReplayTrimsSilently1024))
            }
            Wrapper::PrefixSubscriberBus => {
                Arc::new(BrokenBus::new(REPLAY, BusBug::SessionTopicByPrefix))
            }
            Wrapper::SwallowingLaggedBus => {
                Arc::new(BrokenBus::new(REPLAY, BusBug::SwallowsLagged))
            }
            Wrapper::DeltaPersistingBus | Wrapper::CheckpointingBus => {
                let store = self
                    .last
                    .lock()
                    .clone()
                    .unwrap_or_else(|| Arc::new(MemoryStore::new()));
                let bug = if matches!(self.wrapper, Wrapper::CheckpointingBus) {
                    BusBug::PersistsEvery1000thDelta(store)
                } else {
                    BusBug::PersistsDeltas(store)
                };
                Arc::new(BrokenBus::new(REPLAY, bug))
            }
        };
        Ok(Some(bus))
    }
}
