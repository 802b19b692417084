//! `LocalBus`: an in-process bus on tokio broadcast channels, with an optional bounded
//! replay buffer per session.

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

/// Events a slow subscriber may fall behind before it gets [`Error::Lagged`].
pub const DEFAULT_CHANNEL_CAPACITY: usize = 16_384;

type SharedChannel = Arc<Mutex<Channel>>;

#[derive(Debug)]
struct Channel {
    tx: broadcast::Sender<BusEvent>,
    buffer: VecDeque<BusEvent>,
    last_seq: u64,
    /// The highest seq dropped from `buffer` by retention (0: nothing dropped).
    trimmed_through: u64,
}

/// An in-process bus.
///
/// Without a replay buffer it is live-only (not durable). With one
/// ([`LocalBus::with_replay`]) it keeps the last N events of every session, so
/// subscribe-from-seq and the durable-bus path of `recover` work in one process; it then
/// reports itself durable — within that process and that retention.
///
/// A session's channel (and replay buffer) is dropped when its `session.deleted` is
/// published; channels of sessions that live on stay for the life of the bus.
#[derive(Debug)]
pub struct LocalBus {
    replay_capacity: usize,
    channel_capacity: usize,
    sessions: RwLock<HashMap<(TenantId, SessionId), SharedChannel>>,
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

    /// A bus that keeps the last `per_session` events of every session for replay.
    pub fn with_replay(per_session: usize) -> Self {
        Self {
            replay_capacity: per_session,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            sessions: RwLock::new(HashMap::new()),
            tenants: RwLock::new(HashMap::new()),
        }
    }

    fn channel(&self, tenant: &TenantId, session: &SessionId) -> Arc<Mutex<Channel>> {
        if let Some(c) = self.sessions.read().get(&(tenant.clone(), session.clone())) {
            return Arc::clone(c);
        }
        let mut w = self.sessions.write();
        Arc::clone(
            w.entry((tenant.clone(), session.clone()))
                .or_insert_with(|| {
                    Arc::new(Mutex::new(Channel {
                        tx: broadcast::channel(self.channel_capacity).0,
                        buffer: VecDeque::new(),
                        last_seq: 0,
                        trimmed_through: 0,
                    }))
                }),
        )
    }

    fn existing(&self, tenant: &TenantId, session: &SessionId) -> Option<Arc<Mutex<Channel>>> {
        self.sessions
            .read()
            .get(&(tenant.clone(), session.clone()))
            .cloned()
    }
}

fn live(rx: broadcast::Receiver<BusEvent>) -> impl futures::Stream<Item = Result<BusEvent>> {
    stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(ev) => Some((Ok(ev), rx)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                Some((Err(Error::Lagged { missed }), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

#[async_trait]
impl Bus for LocalBus {
    fn capabilities(&self) -> BusCapabilities {
        BusCapabilities {
            name: "local",
            durable: self.replay_capacity > 0,
        }
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
        let channel = self.channel(&event.tenant, &event.session_id);
        {
            let mut c = channel.lock();
            c.last_seq = c.last_seq.max(event.seq);
            if self.replay_capacity > 0 {
                if c.buffer.len() == self.replay_capacity {
                    if let Some(old) = c.buffer.pop_front() {
                        c.trimmed_through = c.trimmed_through.max(old.seq);
                    }
                }
                c.buffer.push_back(Arc::clone(&event));
            }
            // No receiver is not an error: nobody is listening.
            let _ = c.tx.send(Arc::clone(&event));
        }
        let deleted = matches!(event.event, Event::Sync(SyncEvent::SessionDeleted { .. }));
        if deleted {
            // The session is gone: drop its channel (its subscriptions end after this
            // event) so a long-running process does not keep one per deleted session.
            self.sessions
                .write()
                .remove(&(event.tenant.clone(), event.session_id.clone()));
        }
        if let Some(tx) = self.tenants.read().get(&event.tenant) {
            let _ = tx.send(event);
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
                Ok(Subscription::new(live(rx)))
            }
            Topic::Session(session) => {
                if from_seq.is_some() && self.replay_capacity == 0 {
                    return Err(Error::Unsupported(
                        "resuming from a seq needs a durable bus (LocalBus::with_replay)".into(),
                    ));
                }
                let channel = self.channel(tenant, &session);
                let c = channel.lock();
                let rx = c.tx.subscribe();
                let Some(from) = from_seq else {
                    return Ok(Subscription::new(live(rx)));
                };
                if c.trimmed_through >= from {
                    return Err(Error::invalid(format!(
                        "cannot resume session {session} from seq {from}: events through seq \
                         {} are no longer retained",
                        c.trimmed_through
                    )));
                }
                let backlog: Vec<BusEvent> =
                    c.buffer.iter().filter(|e| e.seq >= from).cloned().collect();
                let after = backlog.last().map_or(from.saturating_sub(1), |e| e.seq);
                drop(c);
                let tail = live(rx).filter(move |r| {
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
