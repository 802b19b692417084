//! `GroupCommitProjector`: the commit policy that writes the fewest bytes while every
//! terminal boundary is still committed before it is published.
//!
//! Per-commit page writes dominate what a store writes for small transactions, so the
//! policy decides write amplification more than the row format does:
//!
//! - A **terminal** batch (one holding an event for which [`SyncEvent::is_terminal`]
//!   holds: a closed block, a finished tool, a step-finish, a completed message, a user
//!   message, any remove) is committed before any of its events is published, as with
//!   [`DirectProjector`](crate::projector::DirectProjector).
//! - A **non-terminal** batch (a block just opened, a tool `pending`/`running`, a
//!   step-start, an assistant message still streaming) is published at once — a
//!   subscriber must learn that a part exists before its deltas — and written with its
//!   session's next terminal commit. Writes of the same row coalesce: a text part opened
//!   and closed between two commits is written once.
//! - Terminal batches of many sessions that arrive within `window` share one
//!   transaction (group commit). The window is the longest a terminal boundary waits
//!   before it is published; `window = 0` commits at once, still grouping what arrives
//!   while an earlier commit is in flight.
//!
//! What this gives up against the direct projector: a non-terminal event can reach a
//! subscriber before the store holds it. After a crash the store lacks the non-terminal
//! writes since each session's last terminal commit; on a durable bus
//! [`recover`](crate::recover::recover) re-applies them from the bus before closing
//! what is open, so the streamed text is still rebuilt. Everything published after a
//! terminal event of a session waits for that event's commit, so per-session order on
//! the bus is kept.
//!
//! Time: with [`FlushMode::Timer`] a terminal `commit` returns once its group is
//! committed and published (at most `window` later). With [`FlushMode::Manual`] it
//! returns at once and the group is committed when [`GroupCommitProjector::advance`]
//! moves the clock past the window — for replays and benchmarks that run on recorded
//! event time, deterministically, without waiting in real time.

mod flush;
mod options;
mod outbox;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use tokio::time::Instant;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::bus::Bus;
use crate::error::{ErrorKind, Result};
use crate::event::{BusEvent, Event, SyncEvent};
use crate::id::SessionId;
use crate::projector::{ClaimPolicy, Projector, Scope, Scopes};
use crate::store::Store;
use crate::tenant::TenantId;

use flush::Flush;
use options::HISTOGRAM_MS;
use outbox::{Held, Outbox, SessionKey};

pub use options::{FlushMode, GroupCommitOptions, GroupCommitStats, DEFAULT_WINDOW};

struct Group {
    deadline: i64,
    members: Vec<SessionKey>,
}

#[derive(Default)]
struct State {
    /// The event-time clock of [`FlushMode::Manual`], ms.
    now: i64,
    sessions: HashMap<SessionKey, Outbox>,
    group: Option<Group>,
    stats: GroupCommitStats,
}

/// A projector that commits terminal boundaries before publishing them, lets the other
/// boundary writes ride along, and shares one transaction among the terminal
/// boundaries of every session arriving within a window. See the [module
/// docs](self).
pub struct GroupCommitProjector {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    options: GroupCommitOptions,
    window_ms: i64,
    epoch: Instant,
    state: Mutex<State>,
    scopes: Scopes,
    /// Serializes flushes: arrivals during a flush form the next group.
    flushing: tokio::sync::Mutex<()>,
}

impl fmt::Debug for GroupCommitProjector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommitProjector")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GroupCommitProjector {
    /// A projector over `store` and `bus`.
    pub fn new(store: Arc<dyn Store>, bus: Arc<dyn Bus>, options: GroupCommitOptions) -> Self {
        Self::with_claims(store, bus, options, ClaimPolicy::default())
    }

    /// A projector over `store` and `bus` claiming the sessions it writes with `policy`.
    pub fn with_claims(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        options: GroupCommitOptions,
        policy: ClaimPolicy,
    ) -> Self {
        let window_ms = i64::try_from(options.window.as_millis()).unwrap_or(i64::MAX);
        Self {
            store,
            bus,
            options,
            window_ms,
            epoch: Instant::now(),
            state: Mutex::new(State {
                stats: GroupCommitStats {
                    delay_histogram: vec![0; HISTOGRAM_MS + 1],
                    ..GroupCommitStats::default()
                },
                ..State::default()
            }),
            scopes: Scopes::new(policy),
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    /// Its options.
    pub fn options(&self) -> GroupCommitOptions {
        self.options
    }

    /// What it did so far.
    pub fn stats(&self) -> GroupCommitStats {
        self.state.lock().stats.clone()
    }

    /// Sync events written but not yet committed, over all sessions.
    pub fn pending(&self) -> usize {
        self.state
            .lock()
            .sessions
            .values()
            .map(|o| o.pending.len())
            .sum()
    }

    fn now_locked(&self, state: &State) -> i64 {
        match self.options.flush {
            FlushMode::Manual => state.now,
            FlushMode::Timer => i64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

impl GroupCommitProjector {
    /// [`Projector::commit`] without forgetting a fenced scope.
    async fn commit_events(&self, scope: &Scope, events: Vec<SyncEvent>) -> Result<u64> {
        let key = (scope.tenant.clone(), scope.session_id.clone());

        let terminal = events.iter().any(SyncEvent::is_terminal);
        self.scopes.keep(self.store.as_ref(), scope).await?;
        let last = {
            let mut guard = self.state.lock();
            let now = self.now_locked(&guard);
            let state = &mut *guard;
            let o = state.sessions.entry(key.clone()).or_default();
            if let Some(e) = o.take_failure() {
                return Err(e);
            }
            if events.is_empty() {
                return Ok(scope.last_seq());
            }
            let mut last = 0;
            for event in events {
                let env = scope.envelope(event);
                last = env.seq;
                let published = BusEvent::from(env.clone());
                o.push_pending(env, &mut state.stats.coalesced);
                if terminal {
                    o.held.push_back(Held {
                        event: published,
                        terminal: true,
                        arrived: now,
                    });
                } else {
                    self.publish_or_hold(o, published)?;
                }
            }
            if terminal {
                o.terminal = last;
                let group = state.group.get_or_insert_with(|| Group {
                    deadline: now.saturating_add(self.window_ms),
                    members: Vec::new(),
                });
                if !group.members.contains(&key) {
                    group.members.push(key.clone());
                }
            }
            last
        };
        if !terminal {
            return Ok(last);
        }
        match self.options.flush {
            FlushMode::Manual => {
                if self.window_ms == 0 {
                    // Our own failure, if any, is picked up below.
                    let _ = self.flush(Flush::Now).await;
                    let mut state = self.state.lock();
                    if let Some(e) = state.sessions.get_mut(&key).and_then(Outbox::take_failure) {
                        return Err(e);
                    }
                }
                Ok(last)
            }
            FlushMode::Timer => {
                self.wait_for(&key, last).await?;
                Ok(last)
            }
        }
    }
}

#[async_trait]
impl Projector for GroupCommitProjector {
    async fn scope(&self, tenant: &TenantId, session: &SessionId) -> Result<Scope> {
        self.scopes
            .get(self.store.as_ref(), self.bus.as_ref(), tenant, session)
            .await
    }

    async fn commit(&self, scope: &Scope, events: Vec<SyncEvent>) -> Result<u64> {
        let committed = self.commit_events(scope, events).await;
        if let Err(e) = &committed {
            if e.kind() == ErrorKind::Fenced {
                // Another writer claimed the session: the next `scope` claims again.
                self.scopes.forget(scope);
            }
        }
        committed
    }

    fn emit(&self, scope: &Scope, event: Event) -> Result<u64> {
        let key = (scope.tenant.clone(), scope.session_id.clone());
        let mut state = self.state.lock();
        let o = state.sessions.entry(key).or_default();
        if let Some(e) = o.take_failure() {
            return Err(e);
        }
        let published = scope.bus_event(event);
        let seq = published.seq;
        self.publish_or_hold(o, published)?;
        Ok(seq)
    }

    async fn sync(&self) -> Result<()> {
        self.flush(Flush::All).await.map_or(Ok(()), Err)
    }

    /// Commits what is pending first.
    async fn release(&self) -> Result<()> {
        self.sync().await?;
        self.scopes.release(self.store.as_ref()).await
    }

    /// Commits what the session has pending first.
    async fn release_scope(&self, scope: Scope) -> Result<()> {
        self.sync().await?;
        self.scopes.release_one(self.store.as_ref(), scope).await
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }
}
