//! The `Bus` trait: live events to subscribers (SSE clients, replicas).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::Stream;

use crate::error::Result;
use crate::event::BusEvent;
use crate::id::SessionId;
use crate::tenant::TenantId;

/// What a bus can do.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BusCapabilities {
    /// Bus name (`local`, `redis`).
    pub name: &'static str,
    /// Published events can be replayed from a `seq` (within retention), so a subscriber
    /// can resume and `recover` can rebuild interrupted text.
    pub durable: bool,
    /// The bus outlives the process that publishes on it, and other processes follow it
    /// (Redis). `recover` then brings the bus up to the store (a writer killed between
    /// its commit and its publish leaves the followers behind). A process-local bus
    /// starts empty in every process, so there is nothing to bring up to date.
    pub shared: bool,
}

impl BusCapabilities {
    /// The capabilities of a bus named `name` (`durable` and `shared` as documented on
    /// the fields).
    pub fn new(name: &'static str, durable: bool, shared: bool) -> Self {
        Self {
            name,
            durable,
            shared,
        }
    }
}

/// What a subscription receives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// The events of one session.
    Session(SessionId),
    /// The events of every session of the tenant (live only).
    Tenant,
}

/// A stream of events from the bus.
pub struct Subscription {
    inner: Pin<Box<dyn Stream<Item = Result<BusEvent>> + Send>>,
}

impl Subscription {
    /// Wraps a stream.
    pub fn new(stream: impl Stream<Item = Result<BusEvent>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(stream),
        }
    }

    /// The next event; `None` when the bus is gone.
    pub async fn next(&mut self) -> Option<Result<BusEvent>> {
        futures::StreamExt::next(&mut self.inner).await
    }
}

impl Stream for Subscription {
    type Item = Result<BusEvent>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Subscription")
    }
}

/// The result of [`Bus::replay`].
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Retained events with `seq >= from`, in seq order.
    pub events: Vec<BusEvent>,
    /// Whether retention had already dropped events at or after `from`.
    pub truncated: bool,
}

/// Fans events out to subscribers.
#[async_trait]
pub trait Bus: fmt::Debug + Send + Sync + 'static {
    /// What this bus can do.
    fn capabilities(&self) -> BusCapabilities;

    /// Publishes one event. Never blocks and never touches a store.
    ///
    /// # Behavior
    /// - Subscribers of the event's session (and of its tenant) receive events in the
    ///   order they were published; callers publish in `seq` order.
    /// - A bus that does I/O queues the event and delivers queued events in order;
    ///   [`Bus::flush`] waits for the queue.
    fn publish(&self, event: BusEvent) -> Result<()>;

    /// Waits until every event published so far has been handed to the transport.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Subscribes to a session or a tenant.
    ///
    /// # Behavior
    /// - With `from_seq` (session topic, durable bus): first the retained events of the
    ///   session with `seq >= from_seq`, then live ones, with nothing missed or repeated
    ///   across the switch.
    /// - Without `from_seq`: live events published after the call returns.
    /// - Every subscriber of a session sees the same sequence.
    /// - A subscriber that falls too far behind gets [`crate::Error::Lagged`].
    async fn subscribe(
        &self,
        tenant: &TenantId,
        topic: Topic,
        from_seq: Option<u64>,
    ) -> Result<Subscription>;

    /// The retained events of a session with `seq >= from_seq`, in order.
    ///
    /// # Behavior
    /// - On a non-durable bus: [`crate::Error::Unsupported`].
    async fn replay(&self, tenant: &TenantId, session: &SessionId, from_seq: u64)
        -> Result<Replay>;

    /// The highest `seq` published for a session that the bus still knows, if any.
    async fn last_seq(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<u64>>;
}
