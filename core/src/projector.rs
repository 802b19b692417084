//! The `Projector`: assigns per-session sequence numbers, commits sync events to the
//! store, and only then publishes them; bus-only events go straight to the bus.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use tracing::Instrument;

use crate::bus::Bus;
use crate::error::Result;
use crate::event::{BusEvent, Envelope, Event, SyncEvent};
use crate::id::SessionId;
use crate::store::Store;
use crate::tenant::TenantId;

/// A writer's handle on one session: tenant, session and its sequence counter.
///
/// Obtained from [`Projector::scope`]. Clones share the counter. One session should have
/// one writer (one Processor) at a time: concurrent commits on a session are serialized
/// and lose nothing, but their deltas may interleave on the bus.
#[derive(Clone)]
pub struct Scope {
    /// Tenant.
    pub tenant: TenantId,
    /// Session.
    pub session_id: SessionId,
    state: Arc<SeqState>,
}

struct SeqState {
    last: AtomicU64,
    commit: tokio::sync::Mutex<()>,
}

impl Scope {
    /// A scope whose next seq is `last_seq + 1`. For projector implementations.
    pub fn new(tenant: TenantId, session_id: SessionId, last_seq: u64) -> Self {
        Self {
            tenant,
            session_id,
            state: Arc::new(SeqState {
                last: AtomicU64::new(last_seq),
                commit: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Reserves the next seq.
    pub fn next_seq(&self) -> u64 {
        self.state.last.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The last seq handed out.
    pub fn last_seq(&self) -> u64 {
        self.state.last.load(Ordering::Acquire)
    }

    /// Serializes commits on this session; hold the guard from seq assignment to publish.
    pub async fn commit_guard(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.state.commit.lock().await
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("tenant", &self.tenant)
            .field("session_id", &self.session_id)
            .field("last_seq", &self.last_seq())
            .finish_non_exhaustive()
    }
}

/// Turns sync events into store rows and bus events, in that order.
#[async_trait]
pub trait Projector: fmt::Debug + Send + Sync + 'static {
    /// A handle for writing to `session`.
    ///
    /// # Behavior
    /// - The first seq handed out is above every seq the store has applied and the bus
    ///   has published for the session, so seqs stay strictly increasing across restarts.
    async fn scope(&self, tenant: &TenantId, session: &SessionId) -> Result<Scope>;

    /// Commits `events` as one batch, then publishes them.
    ///
    /// # Behavior
    /// - Each event gets the next seq of the session, in order.
    /// - The batch is committed to the store in one transaction before any of its events
    ///   is published; if the commit fails nothing is published.
    /// - Returns the seq of the last event (the scope's last seq when `events` is empty).
    async fn commit(&self, scope: &Scope, events: Vec<SyncEvent>) -> Result<u64>;

    /// Publishes a bus-only event (delta, status) with the next seq. Never touches the
    /// store.
    fn emit(&self, scope: &Scope, event: Event) -> Result<u64>;

    /// Commits everything accepted so far that is not committed yet, and publishes
    /// what that releases. A projector that commits in `commit` has nothing to do.
    async fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// The store it projects into.
    fn store(&self) -> &Arc<dyn Store>;

    /// The bus it publishes on.
    fn bus(&self) -> &Arc<dyn Bus>;
}

/// The in-process projector: store commit, then bus publish.
#[derive(Debug)]
pub struct DirectProjector {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    scopes: Scopes,
}

/// The scopes a projector has handed out: one per session, shared by every writer of
/// it, the first starting above every seq the store has applied and the bus has
/// published for the session (so seqs keep growing across restarts).
#[derive(Debug, Default)]
pub struct Scopes {
    map: Mutex<HashMap<(TenantId, SessionId), Scope>>,
}

impl Scopes {
    /// The scope of `session`, created on first use from what `store` and `bus` hold.
    pub async fn get(
        &self,
        store: &dyn Store,
        bus: &dyn Bus,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Scope> {
        let key = (tenant.clone(), session.clone());
        if let Some(s) = self.map.lock().get(&key) {
            return Ok(s.clone());
        }
        let stored = store.session(tenant, session).await?.map_or(0, |s| s.seq);
        let published = bus.last_seq(tenant, session).await?.unwrap_or(0);
        let fresh = Scope::new(tenant.clone(), session.clone(), stored.max(published));
        Ok(self.map.lock().entry(key).or_insert(fresh).clone())
    }
}

impl DirectProjector {
    /// A projector over `store` and `bus`.
    pub fn new(store: Arc<dyn Store>, bus: Arc<dyn Bus>) -> Self {
        Self {
            store,
            bus,
            scopes: Scopes::default(),
        }
    }
}

#[async_trait]
impl Projector for DirectProjector {
    async fn scope(&self, tenant: &TenantId, session: &SessionId) -> Result<Scope> {
        self.scopes
            .get(self.store.as_ref(), self.bus.as_ref(), tenant, session)
            .await
    }

    async fn commit(&self, scope: &Scope, events: Vec<SyncEvent>) -> Result<u64> {
        let _guard = scope.commit_guard().await;
        if events.is_empty() {
            return Ok(scope.last_seq());
        }
        let batch: Vec<Envelope<SyncEvent>> = events
            .into_iter()
            .map(|event| Envelope {
                tenant: scope.tenant.clone(),
                session_id: scope.session_id.clone(),
                seq: scope.next_seq(),
                event,
            })
            .collect();
        let span = tracing::debug_span!(
            "apply_batch",
            projector = "direct",
            tenant = %scope.tenant,
            session = %scope.session_id,
            events = batch.len(),
        );
        self.store.apply(&batch).instrument(span).await?;
        let mut last = 0;
        for env in batch {
            last = env.seq;
            self.bus.publish(env.into())?;
        }
        Ok(last)
    }

    fn emit(&self, scope: &Scope, event: Event) -> Result<u64> {
        let seq = scope.next_seq();
        self.bus.publish(BusEvent::new(Envelope {
            tenant: scope.tenant.clone(),
            session_id: scope.session_id.clone(),
            seq,
            event,
        }))?;
        Ok(seq)
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }
}
