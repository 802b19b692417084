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

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::bus::Bus;
use crate::error::{Error, Result};
use crate::event::{Envelope, Event, SyncEvent};
use crate::id::{MessageId, PartId, SessionId};
use crate::projector::{Projector, Scope, Scopes};
use crate::store::Store;
use crate::tenant::TenantId;

/// The default group-commit window: 10 ms.
///
/// Measured on W1×1000 (`forge-store bench`): 10 ms is where most of the gain of
/// grouping is had; a longer window saves little more and delays every terminal
/// boundary by up to the window.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(10);

/// Who decides when a group's window has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// Wall clock: a terminal `commit` waits for its group and returns after the
    /// commit and publish.
    Timer,
    /// Event time: `commit` returns at once; [`GroupCommitProjector::advance`] commits
    /// groups whose window has passed, [`Projector::sync`] commits everything.
    Manual,
}

/// Options of a [`GroupCommitProjector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// How long the first terminal batch of a group waits for others.
    pub window: Duration,
    /// Wall-clock timer or event time.
    pub flush: FlushMode,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            flush: FlushMode::Timer,
        }
    }
}

/// What a [`GroupCommitProjector`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupCommitStats {
    /// Store transactions (one per group, plus per-session retries after a failure).
    pub commits: u64,
    /// Sync events committed, after coalescing.
    pub rows: u64,
    /// Sync events written to a pending row that was overwritten before its commit.
    pub coalesced: u64,
    /// Terminal batches committed.
    pub terminal_batches: u64,
    /// How long terminal batches waited between arrival and publish, in ms: a
    /// histogram with one bucket per millisecond (the last bucket holds everything
    /// longer).
    pub delay_histogram: Vec<u64>,
}

/// Delays of [`HISTOGRAM_MS`] or more land in the last bucket.
const HISTOGRAM_MS: usize = 10_000;

impl GroupCommitStats {
    /// The `q` quantile (0.0–1.0) of the publish delay in ms; `None` before the first
    /// terminal commit.
    pub fn delay_quantile(&self, q: f64) -> Option<u64> {
        let n: u64 = self.delay_histogram.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0;
        for (ms, count) in self.delay_histogram.iter().enumerate() {
            seen += count;
            if seen > rank {
                return Some(ms as u64);
            }
        }
        None
    }

    /// The longest publish delay in ms (capped at the histogram's range).
    pub fn delay_max(&self) -> Option<u64> {
        self.delay_histogram
            .iter()
            .rposition(|&c| c > 0)
            .map(|i| i as u64)
    }
}

type SessionKey = (TenantId, SessionId);

/// The row a sync event writes, for coalescing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum RowKey {
    Message(MessageId),
    Part(PartId),
}

fn row_key(event: &SyncEvent) -> Option<RowKey> {
    match event {
        SyncEvent::MessageUpdated { info } => Some(RowKey::Message(info.id.clone())),
        SyncEvent::PartUpdated { part } => Some(RowKey::Part(part.id.clone())),
        _ => None,
    }
}

/// An event waiting to be published; a terminal one also waits for its commit.
struct Held {
    event: Arc<Envelope<Event>>,
    terminal: bool,
    /// When it arrived (ms on the projector's clock), for terminal events.
    arrived: i64,
}

#[derive(Default)]
struct Outbox {
    /// Written but not yet committed, coalesced by row, in the order rows were first
    /// written.
    pending: Vec<Envelope<SyncEvent>>,
    /// The seq that first wrote each `pending` slot since it was last committed.
    first: Vec<u64>,
    rows: HashMap<RowKey, usize>,
    /// Not yet publishable, in seq order.
    held: VecDeque<Held>,
    /// The highest seq committed.
    committed: u64,
    /// The highest seq taken by the flush in flight.
    in_flight: u64,
    /// The highest seq dropped by a failed commit.
    lost: u64,
    /// The highest seq of a terminal event accepted.
    terminal: u64,
    /// A failed commit of this session, reported on its next call.
    failed: Option<Error>,
}

impl Outbox {
    fn push_pending(&mut self, env: Envelope<SyncEvent>, coalesced: &mut u64) {
        match row_key(&env.event) {
            Some(key) => {
                if let Some(&i) = self.rows.get(&key) {
                    self.pending[i] = env;
                    *coalesced += 1;
                } else {
                    self.rows.insert(key, self.pending.len());
                    self.first.push(env.seq);
                    self.pending.push(env);
                }
            }
            None => {
                // A remove or a session change: later writes must not move before it.
                self.rows.clear();
                self.first.push(env.seq);
                self.pending.push(env);
            }
        }
    }

    /// Takes the pending slots first written at or before `through` — a prefix, since
    /// slots are in first-write order — so every event up to `through` is committed
    /// (in its latest version). Later slots stay pending to coalesce further.
    fn take_pending(&mut self, through: u64) -> Vec<Envelope<SyncEvent>> {
        let split = self.first.partition_point(|&f| f <= through);
        let rest = self.pending.split_off(split);
        let taken = std::mem::replace(&mut self.pending, rest);
        self.first.drain(..split);
        self.rows.clear();
        for (i, env) in self.pending.iter().enumerate() {
            match row_key(&env.event) {
                Some(key) => {
                    self.rows.insert(key, i);
                }
                None => self.rows.clear(),
            }
        }
        taken
    }
}

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
            scopes: Scopes::default(),
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

    /// [`FlushMode::Manual`]: moves the event-time clock to `now_ms` (never backwards)
    /// and commits the open group if its window has passed. The group counts as
    /// committed at its deadline, as a timer would have fired then.
    ///
    /// # Errors
    /// The store's error when the group and the per-session retry fail; the failed
    /// sessions also report it on their next call.
    pub async fn advance(&self, now_ms: i64) -> Result<()> {
        let due = {
            let mut state = self.state.lock();
            state.now = state.now.max(now_ms);
            state
                .group
                .as_ref()
                .is_some_and(|g| g.deadline <= state.now)
        };
        if !due {
            return Ok(());
        }
        self.flush(Flush::Due).await.map_or(Ok(()), Err)
    }

    /// Commits and publishes the open group when `how` says so. Each failed session
    /// keeps its own error for its next call; the returned error names the first.
    async fn flush(&self, how: Flush) -> Option<Error> {
        let _flushing = self.flushing.lock().await;
        let (at, all, batches) = {
            let mut state = self.state.lock();
            let now = self.now_locked(&state);
            let deadline = match (&state.group, how) {
                (None, Flush::All) => now,
                (None, _) => return None,
                (Some(g), Flush::Due) if g.deadline > now => return None,
                (Some(g), Flush::Due) => g.deadline,
                (Some(g), Flush::All | Flush::Now) => g.deadline.min(now),
            };
            let mut members = state.group.take().map(|g| g.members).unwrap_or_default();
            if how == Flush::All {
                members = state
                    .sessions
                    .iter()
                    .filter(|(_, o)| !o.pending.is_empty() || !o.held.is_empty())
                    .map(|(k, _)| k.clone())
                    .collect();
                members.sort();
            }
            // In event time the group is stamped at its deadline, when a timer would
            // have fired.
            let at = match self.options.flush {
                FlushMode::Manual => deadline,
                FlushMode::Timer => now,
            };
            // One batch of every member's rows; each member's span of it is kept for a
            // retry on its own.
            let mut all = Vec::new();
            let mut batches = Vec::with_capacity(members.len());
            for key in members {
                if let Some(o) = state.sessions.get_mut(&key) {
                    // A group commits its sessions through their last terminal event;
                    // `sync` commits everything.
                    let through = if how == Flush::All {
                        o.pending
                            .iter()
                            .map(|e| e.seq)
                            .max()
                            .unwrap_or(0)
                            .max(o.terminal)
                    } else {
                        o.terminal
                    };
                    let start = all.len();
                    all.extend(o.take_pending(through));
                    o.in_flight = through;
                    batches.push((key, start..all.len(), through));
                }
            }
            (at, all, batches)
        };
        if batches.is_empty() {
            return None;
        }
        let rows = all.len() as u64;
        let mut first_error = None;
        if all.is_empty() || self.store.apply(&all).await.is_ok() {
            let mut state = self.state.lock();
            state.stats.commits += u64::from(!all.is_empty());
            state.stats.rows += rows;
            for (key, _, through) in &batches {
                self.committed(&mut state, key, *through, at);
            }
        } else {
            // One session's bad batch must not fail the others: retry each alone.
            for (key, span, through) in batches {
                let pending = &all[span];
                let outcome = if pending.is_empty() {
                    Ok(())
                } else {
                    self.store.apply(pending).await
                };
                let mut state = self.state.lock();
                match outcome {
                    Ok(()) => {
                        state.stats.commits += u64::from(!pending.is_empty());
                        state.stats.rows += pending.len() as u64;
                        self.committed(&mut state, &key, through, at);
                    }
                    Err(e) => {
                        if let Some(o) = state.sessions.get_mut(&key) {
                            // What was not committed must not be published; what was
                            // held behind it is dropped with it.
                            o.held.clear();
                            o.lost = o.lost.max(through);
                            if first_error.is_none() {
                                first_error = Some(Error::conflict(format!(
                                    "group commit of session {} failed: {e}",
                                    key.1
                                )));
                            }
                            o.failed = Some(e);
                        }
                    }
                }
            }
        }
        first_error
    }

    /// Records that `key` is committed through `through` and publishes what that
    /// releases, in order.
    fn committed(&self, state: &mut State, key: &SessionKey, through: u64, at: i64) {
        let State {
            sessions, stats, ..
        } = state;
        let Some(o) = sessions.get_mut(key) else {
            return;
        };
        o.committed = o.committed.max(through);
        while let Some(front) = o.held.front() {
            if front.terminal && front.event.seq > o.committed {
                break;
            }
            let Some(h) = o.held.pop_front() else { break };
            if h.terminal {
                stats.terminal_batches += 1;
                let delay = usize::try_from((at - h.arrived).max(0))
                    .unwrap_or(HISTOGRAM_MS)
                    .min(HISTOGRAM_MS);
                stats.delay_histogram[delay] += 1;
            }
            // A publish failure (a closed bus) must not undo the commit; the bus
            // reports it to its own subscribers.
            let _ = self.bus.publish(h.event);
        }
    }

    /// Publishes `event` now if nothing of its session is held, else queues it.
    fn publish_or_hold(&self, o: &mut Outbox, event: Arc<Envelope<Event>>) -> Result<()> {
        if o.held.is_empty() {
            self.bus.publish(event)
        } else {
            o.held.push_back(Held {
                event,
                terminal: false,
                arrived: 0,
            });
            Ok(())
        }
    }

    async fn wait_for(&self, key: &SessionKey, seq: u64) -> Result<()> {
        loop {
            let deadline = {
                let mut state = self.state.lock();
                let o = state.sessions.entry(key.clone()).or_default();
                if let Some(e) = o.failed.take() {
                    return Err(e);
                }
                if o.committed >= seq {
                    return Ok(());
                }
                if o.lost >= seq {
                    return Err(Error::conflict(format!(
                        "the commit of session {} holding seq {seq} failed; its error was \
                         reported to an earlier call",
                        key.1
                    )));
                }
                let in_flight = o.in_flight >= seq;
                let now = self.now_locked(&state);
                if in_flight {
                    None
                } else {
                    state.group.as_ref().map(|g| g.deadline - now)
                }
            };
            match deadline {
                Some(wait) if wait > 0 => {
                    tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
                }
                Some(_) => {
                    // Our own failure, if any, is picked up above.
                    let _ = self.flush(Flush::Due).await;
                }
                // Our batch is in a flush in flight: wait for that flush to finish.
                None => drop(self.flushing.lock().await),
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flush {
    /// The open group, if its window has passed.
    Due,
    /// The open group, now.
    Now,
    /// Everything pending in every session, now.
    All,
}

#[async_trait]
impl Projector for GroupCommitProjector {
    async fn scope(&self, tenant: &TenantId, session: &SessionId) -> Result<Scope> {
        self.scopes
            .get(self.store.as_ref(), self.bus.as_ref(), tenant, session)
            .await
    }

    async fn commit(&self, scope: &Scope, events: Vec<SyncEvent>) -> Result<u64> {
        let key = (scope.tenant.clone(), scope.session_id.clone());
        let terminal = events.iter().any(SyncEvent::is_terminal);
        let last = {
            let mut guard = self.state.lock();
            let now = self.now_locked(&guard);
            let state = &mut *guard;
            let o = state.sessions.entry(key.clone()).or_default();
            if let Some(e) = o.failed.take() {
                return Err(e);
            }
            if events.is_empty() {
                return Ok(scope.last_seq());
            }
            let mut last = 0;
            for event in events {
                let seq = scope.next_seq();
                last = seq;
                let published = Arc::new(Envelope {
                    tenant: scope.tenant.clone(),
                    session_id: scope.session_id.clone(),
                    seq,
                    event: Event::Sync(event.clone()),
                });
                o.push_pending(
                    Envelope {
                        tenant: scope.tenant.clone(),
                        session_id: scope.session_id.clone(),
                        seq,
                        event,
                    },
                    &mut state.stats.coalesced,
                );
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
                    if let Some(e) = state.sessions.get_mut(&key).and_then(|o| o.failed.take()) {
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

    fn emit(&self, scope: &Scope, event: Event) -> Result<u64> {
        let key = (scope.tenant.clone(), scope.session_id.clone());
        let mut state = self.state.lock();
        let o = state.sessions.entry(key).or_default();
        if let Some(e) = o.failed.take() {
            return Err(e);
        }
        let seq = scope.next_seq();
        self.publish_or_hold(
            o,
            Arc::new(Envelope {
                tenant: scope.tenant.clone(),
                session_id: scope.session_id.clone(),
                seq,
                event,
            }),
        )?;
        Ok(seq)
    }

    async fn sync(&self) -> Result<()> {
        self.flush(Flush::All).await.map_or(Ok(()), Err)
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }
}
