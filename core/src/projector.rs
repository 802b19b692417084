//! The `Projector`: assigns per-session sequence numbers, commits sync events to the
//! store, and only then publishes them; bus-only events go straight to the bus.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tracing::Instrument;

use crate::bus::Bus;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{BusEvent, Envelope, Event, SyncEvent};
use crate::fence::{Claim, ClaimMode, ClaimRequest, DEFAULT_LEASE_MS};
use crate::id::SessionId;
use crate::store::Store;
use crate::tenant::TenantId;

/// A writer's handle on one session: tenant, session, its sequence counter and the
/// epoch of the writer's claim on it ([`crate::fence`]).
///
/// Obtained from [`Projector::scope`], which claims the session first. Clones share the
/// counter and the claim. A session has one writer at a time, and the store enforces it:
/// once another writer claimed the session, this scope's commits fail with
/// [`Error::Fenced`] and the next [`Projector::scope`] claims
/// again. Within a scope, concurrent commits are serialized and lose nothing, but their
/// deltas may interleave on the bus.
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
    /// The claim's epoch; 0 for an unfenced scope.
    epoch: u64,
    /// When the claim's lease runs out, Unix ms (renewals move it).
    expires_ms: AtomicI64,
    /// The lease asked for, ms (a renewal asks for it again).
    lease_ms: i64,
}

impl Scope {
    /// An unfenced scope whose next seq is `last_seq + 1`: its batches carry no epoch, so
    /// a store accepts them only for a session never claimed. For projector
    /// implementations and tests.
    pub fn new(tenant: TenantId, session_id: SessionId, last_seq: u64) -> Self {
        Self::build(tenant, session_id, last_seq, 0, 0, 0)
    }

    /// A scope writing under `claim`, whose next seq is `last_seq + 1`; `lease_ms` is
    /// what a renewal asks for. Read `last_seq` after the claim was granted, so it counts
    /// everything the previous holder committed.
    pub fn claimed(
        tenant: TenantId,
        session_id: SessionId,
        last_seq: u64,
        claim: &Claim,
        lease_ms: i64,
    ) -> Self {
        Self::build(
            tenant,
            session_id,
            last_seq,
            claim.epoch,
            claim.expires_ms,
            lease_ms,
        )
    }

    fn build(
        tenant: TenantId,
        session_id: SessionId,
        last_seq: u64,
        epoch: u64,
        expires_ms: i64,
        lease_ms: i64,
    ) -> Self {
        Self {
            tenant,
            session_id,
            state: Arc::new(SeqState {
                last: AtomicU64::new(last_seq),
                commit: tokio::sync::Mutex::new(()),
                epoch,
                expires_ms: AtomicI64::new(expires_ms),
                lease_ms,
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

    /// The epoch its batches carry; `None` for an unfenced scope.
    pub fn epoch(&self) -> Option<u64> {
        (self.state.epoch != 0).then_some(self.state.epoch)
    }

    /// When its claim's lease runs out, Unix ms (0 for an unfenced scope).
    pub fn expires_ms(&self) -> i64 {
        self.state.expires_ms.load(Ordering::Acquire)
    }

    /// An envelope of this scope with the next seq and the scope's epoch.
    pub fn envelope<E>(&self, event: E) -> Envelope<E> {
        Envelope::new(
            self.tenant.clone(),
            self.session_id.clone(),
            self.next_seq(),
            event,
        )
        .with_epoch(self.epoch())
    }

    /// A bus-only event (a delta, a status) of this scope with the next seq. It carries
    /// no epoch: no store checks it, and the bus bytes stay as they were.
    pub fn bus_event(&self, event: Event) -> BusEvent {
        BusEvent::new(Envelope::new(
            self.tenant.clone(),
            self.session_id.clone(),
            self.next_seq(),
            event,
        ))
    }

    /// Whether the lease is past its middle at `now_ms`, so a writer renews it.
    fn due(&self, now_ms: i64) -> bool {
        self.epoch().is_some()
            && now_ms.saturating_mul(2)
                >= self
                    .expires_ms()
                    .saturating_mul(2)
                    .saturating_sub(self.state.lease_ms)
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
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// Turns sync events into store rows and bus events, in that order.
#[async_trait]
pub trait Projector: fmt::Debug + Send + Sync + 'static {
    /// A handle for writing to `session`, claimed for this projector's writer.
    ///
    /// # Behavior
    /// - The session is claimed ([`Store::claim`]) as the projector's [`ClaimPolicy`]
    ///   says before anything is read: a session another writer holds fails with
    ///   [`Error::Held`] naming it, or is waited for or taken over.
    /// - The first seq handed out is above every seq the store has applied and the bus
    ///   has published for the session, so seqs stay strictly increasing across restarts
    ///   and across writers.
    /// - A scope handed out earlier is handed out again while its claim holds (renewed
    ///   when its lease is past the middle); once another writer fenced it, a new claim
    ///   and a new scope replace it.
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

    /// Ends the claims of the sessions this projector wrote, so their next writer need
    /// not wait out the leases. Commit or sync first: a scope used after it fails.
    async fn release(&self) -> Result<()> {
        Ok(())
    }

    /// Ends the claim of `scope`'s session once this writer is done with it (a request
    /// that wrote a session ended), unless another writer of this process still uses the
    /// session. Commit or sync first.
    async fn release_scope(&self, scope: Scope) -> Result<()> {
        let _ = scope;
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

/// What a writer does when the session it claims is held by another writer whose lease
/// still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnHeld {
    /// Fail with [`Error::Held`], naming the holder.
    Fail,
    /// Claim again until the lease runs out or it is released, for at most this long;
    /// then fail as [`OnHeld::Fail`].
    Wait(Duration),
    /// Take the session over: the holder's later batches are refused.
    TakeOver,
}

/// How a projector claims the sessions it writes ([`crate::fence`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPolicy {
    /// The writer's name, reported to the writers it keeps out.
    pub holder: String,
    /// The lease asked for, ms; renewed by a commit or a `scope` past its middle.
    pub lease_ms: i64,
    /// What to do about a holder whose lease runs.
    pub on_held: OnHeld,
}

impl Default for ClaimPolicy {
    /// [`ClaimPolicy::holder_name`]`("forge-store")`, [`DEFAULT_LEASE_MS`], fail when held.
    fn default() -> Self {
        Self {
            holder: Self::holder_name("forge-store"),
            lease_ms: DEFAULT_LEASE_MS,
            on_held: OnHeld::Fail,
        }
    }
}

impl ClaimPolicy {
    /// `role@host:pid`: unique per process on a host, readable in an error.
    pub fn holder_name(role: &str) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("{role}@{host}:{}", std::process::id())
    }

    /// The default policy with `holder` as the writer's name.
    pub fn holder(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            ..Self::default()
        }
    }

    /// The same policy with `on_held`.
    #[must_use]
    pub fn on_held(mut self, on_held: OnHeld) -> Self {
        self.on_held = on_held;
        self
    }

    /// The same policy with a lease of `lease_ms`.
    #[must_use]
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Claims `session` as this policy says, at the wall clock.
    ///
    /// # Errors
    /// [`Error::Held`] when another writer holds it (after waiting,
    /// with [`OnHeld::Wait`]); the store's error.
    pub async fn claim(
        &self,
        store: &dyn Store,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Claim> {
        let mode = match self.on_held {
            OnHeld::TakeOver => ClaimMode::TakeOver,
            OnHeld::Fail | OnHeld::Wait(_) => ClaimMode::Free,
        };
        let deadline = match self.on_held {
            OnHeld::Wait(d) => Some(tokio::time::Instant::now() + d),
            OnHeld::Fail | OnHeld::TakeOver => None,
        };
        loop {
            let request = ClaimRequest {
                holder: self.holder.clone(),
                mode,
                now_ms: now_ms(),
                lease_ms: self.lease_ms,
            };
            match store.claim(tenant, session, &request).await {
                Err(Error::Held { expires_ms, .. })
                    if deadline.is_some_and(|d| tokio::time::Instant::now() < d) =>
                {
                    // Until the lease runs out, or a release, whichever is first; a
                    // release is seen within a quarter second.
                    let left = u64::try_from(expires_ms.saturating_sub(now_ms())).unwrap_or(0);
                    let pause = Duration::from_millis(left.clamp(1, 250));
                    let until = deadline.map_or(pause, |d| {
                        d.saturating_duration_since(tokio::time::Instant::now())
                    });
                    tokio::time::sleep(pause.min(until)).await;
                }
                other => return other,
            }
        }
    }
}

/// The wall clock, Unix ms.
fn now_ms() -> i64 {
    crate::id::now_ms()
}

/// The scopes a projector has handed out: one per session, shared by every writer of
/// it in this process, each holding a claim on its session made with the projector's
/// [`ClaimPolicy`], the first starting above every seq the store has applied and the bus
/// has published for the session (so seqs keep growing across restarts and writers).
#[derive(Debug, Default)]
pub struct Scopes {
    map: Mutex<HashMap<(TenantId, SessionId), Scope>>,
    policy: ClaimPolicy,
    /// Serializes claims of this process, so its own tasks never fence each other.
    claiming: tokio::sync::Mutex<()>,
}

impl Scopes {
    /// Scopes claimed with `policy`.
    pub fn new(policy: ClaimPolicy) -> Self {
        Self {
            map: Mutex::default(),
            policy,
            claiming: tokio::sync::Mutex::default(),
        }
    }

    /// How it claims.
    pub fn policy(&self) -> &ClaimPolicy {
        &self.policy
    }

    /// The scope of `session`: the one handed out before while its claim holds (renewed
    /// when due), else a new claim's, starting from what `store` and `bus` hold.
    ///
    /// # Errors
    /// [`Error::Held`] as the policy says; the store's or bus's
    /// error.
    pub async fn get(
        &self,
        store: &dyn Store,
        bus: &dyn Bus,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Scope> {
        let key = (tenant.clone(), session.clone());
        let cached = self.map.lock().get(&key).cloned();
        if let Some(s) = cached {
            match self.keep(store, &s).await {
                Ok(()) => return Ok(s),
                Err(Error::Fenced { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let _claiming = self.claiming.lock().await;
        // Another task of this process may have claimed while this one waited.
        if let Some(s) = self.map.lock().get(&key) {
            if s.epoch().is_some() && s.expires_ms() > now_ms() {
                return Ok(s.clone());
            }
        }
        let claim = self.policy.claim(store, tenant, session).await?;
        let stored = store.session(tenant, session).await?.map_or(0, |s| s.seq);
        let published = bus.last_seq(tenant, session).await?.unwrap_or(0);
        let fresh = Scope::claimed(
            tenant.clone(),
            session.clone(),
            stored.max(published),
            &claim,
            self.policy.lease_ms,
        );
        self.map.lock().insert(key, fresh.clone());
        Ok(fresh)
    }

    /// Renews `scope`'s lease when it is past its middle. A commit calls it first.
    ///
    /// # Errors
    /// [`Error::Fenced`] when another writer claimed the session
    /// (the scope is forgotten, so the next [`Scopes::get`] claims again); the store's
    /// error.
    pub async fn keep(&self, store: &dyn Store, scope: &Scope) -> Result<()> {
        let Some(epoch) = scope.epoch() else {
            return Ok(());
        };
        let now = now_ms();
        if !scope.due(now) {
            return Ok(());
        }
        let request = ClaimRequest {
            holder: self.policy.holder.clone(),
            mode: ClaimMode::Renew(epoch),
            now_ms: now,
            lease_ms: scope.state.lease_ms,
        };
        match store
            .claim(&scope.tenant, &scope.session_id, &request)
            .await
        {
            Ok(claim) => {
                scope
                    .state
                    .expires_ms
                    .fetch_max(claim.expires_ms, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                if e.kind() == ErrorKind::Fenced {
                    self.forget(scope);
                }
                Err(e)
            }
        }
    }

    /// Forgets `scope` when the store fenced it, so the next [`Scopes::get`] claims
    /// again. Does nothing when another scope replaced it already.
    pub fn forget(&self, scope: &Scope) {
        let key = (scope.tenant.clone(), scope.session_id.clone());
        let mut map = self.map.lock();
        if map
            .get(&key)
            .is_some_and(|s| Arc::ptr_eq(&s.state, &scope.state))
        {
            map.remove(&key);
        }
    }

    /// Releases `scope`'s claim when nothing else of this process uses it (no other
    /// clone of it is alive), so another process may claim the session at once. The
    /// scope is forgotten first, under the lock every hand-out takes, so no writer of
    /// this process gets it once its release has begun: the next [`Scopes::get`] claims
    /// anew. Does nothing while another writer of this process holds a clone.
    ///
    /// # Errors
    /// The store's error.
    pub async fn release_one(&self, store: &dyn Store, scope: Scope) -> Result<()> {
        let Some(epoch) = scope.epoch() else {
            return Ok(());
        };
        {
            let mut map = self.map.lock();
            let key = (scope.tenant.clone(), scope.session_id.clone());
            let cached = map
                .get(&key)
                .is_some_and(|s| Arc::ptr_eq(&s.state, &scope.state));
            // The map's copy and the caller's: no one else writes with it.
            if !cached || Arc::strong_count(&scope.state) > 2 {
                return Ok(());
            }
            map.remove(&key);
        }
        store
            .release(&scope.tenant, &scope.session_id, epoch)
            .await?;
        // Its lease is over: a use of it after this (there should be none) renews it
        // first, and fails if another writer claimed the session meanwhile.
        scope.state.expires_ms.store(0, Ordering::Release);
        Ok(())
    }

    /// Releases every claim handed out and forgets the scopes.
    ///
    /// # Errors
    /// The first store error; the other claims are still released.
    pub async fn release(&self, store: &dyn Store) -> Result<()> {
        let scopes: Vec<Scope> = self.map.lock().drain().map(|(_, s)| s).collect();
        let mut first = None;
        for s in scopes {
            if let Some(epoch) = s.epoch() {
                if let Err(e) = store.release(&s.tenant, &s.session_id, epoch).await {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl DirectProjector {
    /// A projector over `store` and `bus`.
    pub fn new(store: Arc<dyn Store>, bus: Arc<dyn Bus>) -> Self {
        Self::with_claims(store, bus, ClaimPolicy::default())
    }

    /// A projector over `store` and `bus` claiming the sessions it writes with `policy`.
    pub fn with_claims(store: Arc<dyn Store>, bus: Arc<dyn Bus>, policy: ClaimPolicy) -> Self {
        Self {
            store,
            bus,
            scopes: Scopes::new(policy),
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
        self.scopes.keep(self.store.as_ref(), scope).await?;
        let batch: Vec<Envelope<SyncEvent>> = events
            .into_iter()
            .map(|event| scope.envelope(event))
            .collect();
        let span = tracing::debug_span!(
            "apply_batch",
            projector = "direct",
            tenant = %scope.tenant,
            session = %scope.session_id,
            events = batch.len(),
        );
        if let Err(e) = self.store.apply(&batch).instrument(span).await {
            if e.kind() == ErrorKind::Fenced {
                self.scopes.forget(scope);
            }
            return Err(e);
        }
        let mut last = 0;
        for env in batch {
            last = env.seq;
            self.bus.publish(env.into())?;
        }
        Ok(last)
    }

    fn emit(&self, scope: &Scope, event: Event) -> Result<u64> {
        let published = scope.bus_event(event);
        let seq = published.seq;
        self.bus.publish(published)?;
        Ok(seq)
    }

    async fn release(&self) -> Result<()> {
        self.scopes.release(self.store.as_ref()).await
    }

    async fn release_scope(&self, scope: Scope) -> Result<()> {
        self.scopes.release_one(self.store.as_ref(), scope).await
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }
}
