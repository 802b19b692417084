//! `LocalBus`: an in-process bus on tokio broadcast channels, with an optional bounded
//! replay buffer.
//!
//! Memory is bounded by what is live, not by how many sessions the bus has seen: a
//! session's broadcast channel exists only while someone subscribes to it, and the
//! replay buffers of all sessions together hold at most a bus-wide budget of events
//! (the oldest go first). What stays per session seen is a small record (its last `seq`
//! and how far retention has trimmed it), so a resume from a trimmed `seq` is refused
//! rather than silently incomplete.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use parking_lot::{Mutex, RwLock};
use tokio::sync::broadcast;

use crate::bus::{Bus, BusCapabilities, Replay, Subscription, Topic};
use crate::error::{Error, Result};
use crate::event::{BusEvent, Event, SyncEvent};
use crate::id::SessionId;
use crate::tenant::TenantId;

/// Events a slow subscriber of a tenant may fall behind before it gets
/// [`Error::Lagged`].
pub const DEFAULT_CHANNEL_CAPACITY: usize = 16_384;

/// Events a slow subscriber of one session may fall behind before it gets
/// [`Error::Lagged`] (about seven W1 turns; a resume from the replay buffer covers what
/// it missed). A session's channel allocates its slots while it has subscribers.
pub const DEFAULT_SESSION_CHANNEL_CAPACITY: usize = 4_096;

/// Events the replay buffers of all sessions hold together, by default
/// ([`LocalBus::with_replay`]).
pub const DEFAULT_REPLAY_TOTAL: usize = 262_144;

type SharedChannel = Arc<Mutex<Channel>>;

#[derive(Debug, Default)]
struct Channel {
    /// The live channel, while the session has subscribers (a tokio broadcast channel
    /// allocates all its slots up front).
    tx: Option<broadcast::Sender<BusEvent>>,
    buffer: VecDeque<BusEvent>,
    last_seq: u64,
    /// The highest seq dropped from `buffer` by retention (0: nothing dropped).
    trimmed_through: u64,
}

impl Channel {
    /// Drops the front of `buffer`, noting its seq as trimmed.
    fn trim_front(&mut self) {
        if let Some(old) = self.buffer.pop_front() {
            self.trimmed_through = self.trimmed_through.max(old.seq);
        }
        if self.buffer.is_empty() {
            // Give back what a long turn grew.
            self.buffer = VecDeque::new();
        }
    }
}

/// An in-process bus.
///
/// Without a replay buffer it is live-only (not durable). With one
/// ([`LocalBus::with_replay`]) it keeps the last events of every session — at most
/// `per_session` of one session, at most [`DEFAULT_REPLAY_TOTAL`] (or the budget given
/// to [`LocalBus::with_replay_budget`]) of all sessions together, the oldest dropped
/// first — so subscribe-from-seq and the durable-bus path of `recover` work in one
/// process; it then reports itself durable — within that process and that retention.
/// It is not shared: another process, or this one after a restart, sees none of it.
///
/// A session's broadcast channel exists while it has subscribers; its replay buffer is
/// dropped when its `session.deleted` is published.
#[derive(Debug)]
pub struct LocalBus {
    replay_capacity: usize,
    replay_total: usize,
    channel_capacity: usize,
    session_channel_capacity: usize,
    sessions: RwLock<HashMap<(TenantId, SessionId), SharedChannel>>,
    /// Every event in a replay buffer, in publish order, with its session's channel. An
    /// entry whose event a session's own limit (or its deletion) already dropped stays
    /// until its turn, so the buffers together never hold more than `replay_total`.
    /// Publishing takes this lock before a channel's, and so does trimming.
    retained: Mutex<VecDeque<(SharedChannel, BusEvent)>>,
    tenants: RwLock<HashMap<TenantId, broadcast::Sender<BusEvent>>>,
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalBus {
    /// A live-only bus.
    pub fn new() -> Self {
        Self::with_replay(0)
    }

    /// A bus that keeps the last `per_session` events of every session for replay,
    /// within the bus-wide budget [`DEFAULT_REPLAY_TOTAL`].
    pub fn with_replay(per_session: usize) -> Self {
        Self::with_replay_budget(per_session, DEFAULT_REPLAY_TOTAL)
    }

    /// A bus that keeps the last `per_session` events of every session for replay, and
    /// at most `total` events of all sessions together (the oldest are dropped first).
    pub fn with_replay_budget(per_session: usize, total: usize) -> Self {
        Self {
            replay_capacity: per_session.min(total),
            replay_total: total,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            session_channel_capacity: DEFAULT_SESSION_CHANNEL_CAPACITY,
            sessions: RwLock::new(HashMap::new()),
            retained: Mutex::new(VecDeque::new()),
            tenants: RwLock::new(HashMap::new()),
        }
    }

    /// Events held in replay buffers now, over all sessions.
    pub fn retained_events(&self) -> usize {
        self.sessions
            .read()
            .values()
            .map(|c| c.lock().buffer.len())
            .sum()
    }

    /// Sessions with a live channel now: at least one subscription to the session is
    /// open.
    pub fn live_channels(&self) -> usize {
        self.sessions
            .read()
            .values()
            .filter(|c| c.lock().tx.is_some())
            .count()
    }

    fn channel(&self, tenant: &TenantId, session: &SessionId) -> SharedChannel {
        if let Some(c) = self.sessions.read().get(&(tenant.clone(), session.clone())) {
            return Arc::clone(c);
        }
        let mut w = self.sessions.write();
        Arc::clone(w.entry((tenant.clone(), session.clone())).or_default())
    }

    fn existing(&self, tenant: &TenantId, session: &SessionId) -> Option<SharedChannel> {
        self.sessions
            .read()
            .get(&(tenant.clone(), session.clone()))
            .cloned()
    }

    /// Records `event` in its session's channel `c`: its seq, its place in the replay
    /// buffer (the whole buffer goes when the session is `deleted`), and the live send.
    fn publish_to(&self, c: &mut Channel, event: &BusEvent, deleted: bool) {
        c.last_seq = c.last_seq.max(event.seq);
        if self.replay_capacity > 0 {
            if deleted {
                c.buffer = VecDeque::new();
            } else {
                if c.buffer.len() >= self.replay_capacity {
                    c.trim_front();
                }
                c.buffer.push_back(event.clone());
            }
        }
        if let Some(tx) = &c.tx {
            if deleted || !Self::send(tx, event) {
                if deleted {
                    let _ = tx.send(event.clone());
                }
                // Dropping the sender ends the subscriptions (after `session.deleted`).
                c.tx = None;
            }
        }
    }

    /// Sends `event` on the live channel `tx`, if it still has receivers. Returns
    /// whether the channel should be kept.
    fn send(tx: &broadcast::Sender<BusEvent>, event: &BusEvent) -> bool {
        if tx.receiver_count() == 0 {
            return false;
        }
        // A receiver dropped since the count is not an error: nobody is listening.
        let _ = tx.send(event.clone());
        true
    }
}

/// A subscription's receiver. A session subscription also holds its session's channel:
/// when the last receiver goes, the channel's sender goes with it, and with it the
/// channel's slots.
struct Receiving {
    rx: Option<broadcast::Receiver<BusEvent>>,
    channel: Option<SharedChannel>,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        // The receiver goes first, so the count below no longer includes it.
        drop(self.rx.take());
        if let Some(channel) = self.channel.take() {
            let mut c = channel.lock();
            if c.tx.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
                c.tx = None;
            }
        }
    }
}

fn live(
    rx: broadcast::Receiver<BusEvent>,
    channel: Option<SharedChannel>,
) -> impl futures::Stream<Item = Result<BusEvent>> {
    let state = Receiving {
        rx: Some(rx),
        channel,
    };
    stream::unfold(state, |mut r| async move {
        let next = r.rx.as_mut()?.recv().await;
        match next {
            Ok(ev) => Some((Ok(ev), r)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                metrics::counter!(crate::metrics::BUS_LAGGED, "bus" => "local").increment(missed);
                Some((Err(Error::Lagged { missed }), r))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

#[async_trait]
impl Bus for LocalBus {
    fn capabilities(&self) -> BusCapabilities {
        BusCapabilities::new("local", self.replay_capacity > 0, false)
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
        let channel = self.channel(&event.tenant, &event.session_id);
        let deleted = matches!(event.event, Event::Sync(SyncEvent::SessionDeleted { .. }));
        if self.replay_capacity > 0 {
            let mut retained = self.retained.lock();
            {
                let mut c = channel.lock();
                self.publish_to(&mut c, &event, deleted);
            }
            if !deleted {
                retained.push_back((Arc::clone(&channel), event.clone()));
            }
            while retained.len() > self.replay_total {
                let Some((c, old)) = retained.pop_front() else {
                    break;
                };
                let mut c = c.lock();
                // The session's buffer is in publish order too: its oldest event is
                // this one, unless its own limit or its deletion dropped it already.
                if c.buffer.front().is_some_and(|f| BusEvent::ptr_eq(f, &old)) {
                    c.trim_front();
                }
            }
        } else {
            self.publish_to(&mut channel.lock(), &event, deleted);
        }
        if deleted {
            // The session is gone: drop its record (its subscriptions end after this
            // event) so a long-running process does not keep one per deleted session.
            self.sessions
                .write()
                .remove(&(event.tenant.clone(), event.session_id.clone()));
        }
        let mut idle = false;
        if let Some(tx) = self.tenants.read().get(&event.tenant) {
            idle = !Self::send(tx, &event);
        }
        if idle {
            let mut tenants = self.tenants.write();
            if tenants
                .get(&event.tenant)
                .is_some_and(|tx| tx.receiver_count() == 0)
            {
                tenants.remove(&event.tenant);
            }
        }
        Ok(())
    }
    async fn subscribe(
        &self,
        tenant: &TenantId,
        topic: Topic,
        from_seq: Option<u64>,
    ) -> Result<Subscription> {
        match topic {
            Topic::Tenant => {
                if from_seq.is_some() {
                    return Err(Error::invalid(
                        "a tenant subscription cannot resume from a seq (seqs are per session)",
                    ));
                }
                let rx = self
                    .tenants
                    .write()
                    .entry(tenant.clone())
                    .or_insert_with(|| broadcast::channel(self.channel_capacity).0)
                    .subscribe();
                Ok(Subscription::new(live(rx, None)))
            }
            Topic::Session(session) => {
                if from_seq.is_some() && self.replay_capacity == 0 {
                    return Err(Error::Unsupported(
                        "resuming from a seq needs a durable bus (LocalBus::with_replay)".into(),
                    ));
                }
                let channel = self.channel(tenant, &session);
                let mut c = channel.lock();
                if let Some(from) = from_seq.filter(|&from| c.trimmed_through >= from) {
                    return Err(Error::invalid(format!(
                        "cannot resume session {session} from seq {from}: events through seq \
                         {} are no longer retained",
                        c.trimmed_through
                    )));
                }
                let capacity = self.session_channel_capacity;
                let rx =
                    c.tx.get_or_insert_with(|| broadcast::channel(capacity).0)
                        .subscribe();
                let Some(from) = from_seq else {
                    return Ok(Subscription::new(live(rx, Some(Arc::clone(&channel)))));
                };
                let backlog: Vec<BusEvent> =
                    c.buffer.iter().filter(|e| e.seq >= from).cloned().collect();
                let after = backlog.last().map_or(from.saturating_sub(1), |e| e.seq);
                drop(c);
                let tail = live(rx, Some(Arc::clone(&channel))).filter(move |r| {
                    let keep = r.as_ref().map_or(true, |e| e.seq > after);
                    async move { keep }
                });
                Ok(Subscription::new(
                    stream::iter(backlog.into_iter().map(Ok)).chain(tail),
                ))
            }
        }
    }

    async fn replay(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Replay> {
        if self.replay_capacity == 0 {
            return Err(Error::Unsupported(
                "replay needs a durable bus (LocalBus::with_replay)".into(),
            ));
        }
        let Some(channel) = self.existing(tenant, session) else {
            return Ok(Replay::default());
        };
        let c = channel.lock();
        Ok(Replay {
            events: c
                .buffer
                .iter()
                .filter(|e| e.seq >= from_seq)
                .cloned()
                .collect(),
            truncated: c.trimmed_through >= from_seq,
        })
    }

    async fn last_seq(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<u64>> {
        Ok(self
            .existing(tenant, session)
            .map(|c| c.lock().last_seq)
            .filter(|s| *s > 0))
    }
}
