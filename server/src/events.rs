//! Live events over SSE: `GET /event` (the tenant) and `GET /session/{id}/event` (one
//! session), both resumable with `Last-Event-ID`.
//!
//! **One session.** Each SSE event's `id:` is the event's `seq`. A client that connects
//! with `Last-Event-ID: N` receives exactly the events with `seq > N`: from the bus's
//! retained events when it keeps them (Redis streams, the in-process bus's replay
//! buffer). Without `Last-Event-ID` the stream starts after the `seq` the store holds
//! (the one `GET /session/{id}` and `GET /session/{id}/message` report in
//! `x-forge-seq`): read a snapshot, then connect with its seq, and nothing is missed or
//! seen twice. When the events after `N` are no longer retained, the first event is
//! `session.reload {sessionID, seq, reason}`: read the snapshot again; the events after
//! it continue from `seq`.
//!
//! **The tenant.** Seqs are per session, so `GET /event` numbers what it sends itself:
//! ids are `HUB-N`, N counting the tenant's events since this server began listening to
//! them; the last `event_replay` events are kept for clients that reconnect. A
//! `Last-Event-ID` this server cannot continue (another server, a restart, too old)
//! gets `server.reload {reason}` first: read what you show again.
//!
//! Both send `server.connected` first and a `server.heartbeat` when idle. A client that
//! falls too far behind (its buffer of events not yet sent is full) is dropped with a
//! logged reason; it never slows the writer or other clients, and reconnects with its
//! `Last-Event-ID`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as Sse_, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use forge_store::Topic;
use forge_store::{Bus, BusEvent, CoreError, SessionId, TenantId};
use futures::stream::{self, BoxStream, StreamExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use crate::api::{session_id, Tenant};
use crate::error::{from_core, ApiError};
use crate::{shutting_down, AppState};

/// An SSE body. An `Err` item aborts the connection (rather than ending it cleanly),
/// which is what makes EventSource-style clients, the opencode SDK's among them,
/// reconnect with their `Last-Event-ID`.
type SseStream = BoxStream<'static, Result<Sse_, std::io::Error>>;

fn drop_client(reason: String) -> Result<Sse_, std::io::Error> {
    Err(std::io::Error::other(reason))
}

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/event", get(tenant_events))
        .route("/session/{id}/event", get(session_events))
}

fn data(event: &serde_json::Value) -> Sse_ {
    Sse_::default().data(event.to_string())
}

/// The frame of a bus event: its JSON as the bus event holds it, encoded once for every
/// subscriber (or kept from the durable bus entry it was read from).
fn bus_data(event: &BusEvent) -> Sse_ {
    match event.event_json() {
        Ok(text) => Sse_::default().data(text),
        // Events are serializable by construction; say so rather than drop one silently.
        Err(e) => data(&json!({"type": "server.error", "properties": {"message": e.to_string()}})),
    }
}

fn connected() -> Sse_ {
    data(&json!({"type": "server.connected", "properties": {}}))
}

/// One SSE client in [`forge_store::metrics::SSE_CLIENTS`], from its connection until
/// its stream is dropped.
struct Client;

impl Client {
    fn connected() -> Self {
        metrics::gauge!(forge_store::metrics::SSE_CLIENTS).increment(1.0);
        Self
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        metrics::gauge!(forge_store::metrics::SSE_CLIENTS).decrement(1.0);
    }
}

fn sse(st: &AppState, events: SseStream) -> Response {
    // At shutdown the connection is cut, not ended: clients reconnect (to the server
    // that comes back) with their Last-Event-ID. The stream also stops after the first
    // error it yields.
    let down = Box::pin(shutting_down(st.shutdown.clone()));
    let client = Client::connected();
    let events = stream::unfold(
        (events, down, false, client),
        |(mut events, mut down, done, client)| async move {
            if done {
                return None;
            }
            tokio::select! {
                item = events.next() => match item {
                    Some(Ok(e)) => Some((Ok(e), (events, down, false, client))),
                    Some(Err(e)) => Some((Err(e), (events, down, true, client))),
                    None => None,
                },
                () = &mut down => Some((
                    drop_client("the server is shutting down".to_owned()),
                    (events, down, true, client),
                )),
            }
        },
    )
    .boxed();
    Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(st.options.heartbeat)
                .event(data(&json!({"type": "server.heartbeat", "properties": {}}))),
        )
        .into_response()
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .map(|s| s.trim().to_owned())
                .map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))
        })
        .transpose()
        .map(|v| v.filter(|s| !s.is_empty()))
}

fn store_error(action: &str, e: &CoreError) -> ApiError {
    from_core(e, format!("{action}: {e}"))
}

/// `GET /session/{id}/event`.
async fn session_events(
    State(st): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let sid = session_id(&id)?;
    let last = last_event_id(&headers)?
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "Last-Event-ID of a session stream is a seq (a whole number): {}",
                    forge_store::text::clip(&v)
                ))
            })
        })
        .transpose()?;
    let stored = st.forge.session(&tenant, &sid).await?;
    let bus = Arc::clone(&st.forge.engine().bus);
    let after = last.unwrap_or(stored.seq);
    let (first, sub, after) = if bus.capabilities().durable {
        match bus
            .subscribe(&tenant, Topic::Session(sid.clone()), Some(after + 1))
            .await
        {
            Ok(sub) => (None, sub, after),
            // Retention dropped what the client missed.
            Err(CoreError::InvalidInput(reason)) => {
                reload(&st, &bus, &tenant, &sid, reason).await?
            }
            Err(e) => return Err(store_error("subscribing to the session", &e)),
        }
    } else if last.is_some_and(|l| l != stored.seq) {
        let reason = "this server's bus keeps no events to resume from".to_owned();
        reload(&st, &bus, &tenant, &sid, reason).await?
    } else {
        let sub = bus
            .subscribe(&tenant, Topic::Session(sid.clone()), None)
            .await
            .map_err(|e| store_error("subscribing to the session", &e))?;
        // Read after subscribing: what is published between the two is not missed.
        let now = st.forge.session(&tenant, &sid).await?.seq;
        match last {
            // The store moved past the client's seq before the subscription started:
            // what came in between is gone from this bus.
            Some(l) if now != l => {
                let reason = "the session changed while the stream was resuming, and this \
                              server's bus keeps no events to resume from"
                    .to_owned();
                (Some(reload_event(&sid, now, &reason)), sub, now)
            }
            _ => (None, sub, now.max(after)),
        }
    };
    let head = stream::iter(std::iter::once(connected()).chain(first).map(Ok));
    let tenant_name = tenant.clone();
    let live = sub
        .scan(after, move |after, item| {
            let out = match item {
                Ok(ev) if ev.seq <= *after => Some(None),
                Ok(ev) => {
                    *after = ev.seq;
                    Some(Some(Ok(bus_data(&ev).id(ev.seq.to_string()))))
                }
                Err(CoreError::Lagged { missed }) => {
                    let reason = format!("the client fell {missed} events behind");
                    metrics::counter!(forge_store::metrics::SSE_DROPPED).increment(1);
                    tracing::warn!(tenant = %tenant_name, session = %sid, missed,
                        "SSE client dropped: {reason}");
                    Some(Some(drop_client(reason)))
                }
                Err(e) => {
                    tracing::warn!(tenant = %tenant_name, session = %sid, error = %e,
                        "SSE stream cut: the bus failed");
                    Some(Some(drop_client(format!("the bus failed: {e}"))))
                }
            };
            futures::future::ready(out)
        })
        .filter_map(futures::future::ready);
    Ok(sse(&st, head.chain(live).boxed()))
}

/// The stream after a gap that cannot be replayed: a `session.reload` event with the
/// seq the store holds now, and the live events after it.
async fn reload(
    st: &AppState,
    bus: &Arc<dyn Bus>,
    tenant: &TenantId,
    sid: &SessionId,
    reason: String,
) -> Result<(Option<Sse_>, forge_store::Subscription, u64), ApiError> {
    let sub = bus
        .subscribe(tenant, Topic::Session(sid.clone()), None)
        .await
        .map_err(|e| store_error("subscribing to the session", &e))?;
    let now = st.forge.session(tenant, sid).await?.seq;
    Ok((Some(reload_event(sid, now, &reason)), sub, now))
}

/// A `session.reload` event: the client reloads the session, which the store holds at
/// `seq`, and the stream goes on after it.
fn reload_event(sid: &SessionId, seq: u64, reason: &str) -> Sse_ {
    data(&json!({
        "type": "session.reload",
        "properties": {"sessionID": sid, "seq": seq, "reason": reason},
    }))
    .id(seq.to_string())
}

/// `GET /event`.
async fn tenant_events(
    State(st): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let last = last_event_id(&headers)?;
    let hub = st.hubs.get(&tenant, st.shutdown.clone()).await?;
    let attached = hub.attach(last.as_deref())?;
    let mut head = vec![connected()];
    if let Some(reason) = attached.reload {
        head.push(data(
            &json!({"type": "server.reload", "properties": {"reason": reason}}),
        ));
    }
    head.extend(attached.backlog.iter().map(|i| i.sse(&hub.id)));
    let hub_id = hub.id.clone();
    let tenant_name = tenant.clone();
    let live = stream::unfold((attached.rx, attached.after), move |(mut rx, after)| {
        let hub_id = hub_id.clone();
        let tenant_name = tenant_name.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(item) if item.n <= after => {}
                    Ok(item) => return Some((Ok(item.sse(&hub_id)), (rx, item.n))),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        let reason = format!("the client fell {missed} events behind");
                        metrics::counter!(forge_store::metrics::SSE_DROPPED).increment(1);
                        tracing::warn!(tenant = %tenant_name, missed,
                                "SSE client of /event dropped: {reason}");
                        return Some((drop_client(reason), (rx, after)));
                    }
                    // The hub stopped listening (its last item told the client to
                    // reload): the stream ends cleanly, so that item is delivered, and
                    // the client's reconnect gets a new hub.
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    Ok(sse(
        &st,
        stream::iter(head.into_iter().map(Ok)).chain(live).boxed(),
    ))
}

/// The tenants' event hubs: each listens to its tenant's events on the bus once, numbers
/// them and keeps the last ones for clients that reconnect.
pub(crate) struct Hubs {
    bus: Arc<dyn Bus>,
    capacity: usize,
    client_buffer: usize,
    /// Distinguishes this server's hubs from another's (and a restarted one's).
    epoch: String,
    made: AtomicU64,
    map: tokio::sync::Mutex<HashMap<TenantId, Arc<Hub>>>,
}

impl Hubs {
    pub(crate) fn new(bus: Arc<dyn Bus>, capacity: usize, client_buffer: usize) -> Self {
        let now = forge_store::id::now_ms();
        Self {
            bus,
            capacity: capacity.max(1),
            client_buffer: client_buffer.max(1),
            epoch: format!("{now:x}{:04x}", rand::random::<u16>()),
            made: AtomicU64::new(0),
            map: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn get(
        &self,
        tenant: &TenantId,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<Hub>, ApiError> {
        let mut map = self.map.lock().await;
        if let Some(hub) = map.get(tenant).filter(|h| !h.is_closed()) {
            return Ok(Arc::clone(hub));
        }
        let sub = self
            .bus
            .subscribe(tenant, Topic::Tenant, None)
            .await
            .map_err(|e| store_error("subscribing to the tenant's events", &e))?;
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let hub = Arc::new(Hub {
            id: format!("{}.{n}", self.epoch),
            ring: Mutex::new(Ring {
                items: VecDeque::new(),
                next: 1,
                dropped_through: 0,
                closed: false,
            }),
            tx: Mutex::new(Some(broadcast::channel(self.client_buffer).0)),
            capacity: self.capacity,
        });
        map.insert(tenant.clone(), Arc::clone(&hub));
        tokio::spawn(Arc::clone(&hub).run(tenant.clone(), sub, shutdown));
        Ok(hub)
    }
}

pub(crate) struct Hub {
    id: String,
    ring: Mutex<Ring>,
    /// Dropped when the hub stops listening: its clients' streams end.
    tx: Mutex<Option<broadcast::Sender<Arc<Item>>>>,
    capacity: usize,
}

struct Ring {
    items: VecDeque<Arc<Item>>,
    /// The number of the next item.
    next: u64,
    /// The highest number dropped from `items` (0: none).
    dropped_through: u64,
    /// The hub stopped listening (the bus ended or failed).
    closed: bool,
}

struct Item {
    n: u64,
    kind: ItemKind,
}

enum ItemKind {
    Event(BusEvent),
    /// The hub itself fell behind the bus or lost it: clients must reload.
    Gap(String),
}

impl Item {
    fn sse(&self, hub: &str) -> Sse_ {
        let event = match &self.kind {
            ItemKind::Event(ev) => bus_data(ev),
            ItemKind::Gap(reason) => {
                data(&json!({"type": "server.reload", "properties": {"reason": reason}}))
            }
        };
        event.id(format!("{hub}-{}", self.n))
    }
}

struct Attached {
    reload: Option<String>,
    backlog: Vec<Arc<Item>>,
    rx: broadcast::Receiver<Arc<Item>>,
    after: u64,
}

impl Hub {
    fn is_closed(&self) -> bool {
        self.ring.lock().closed
    }

    /// Joins a client: what it missed since `last` (or a reason to reload), and the
    /// live items after that.
    fn attach(&self, last: Option<&str>) -> Result<Attached, ApiError> {
        let ring = self.ring.lock();
        // Subscribed under the lock: nothing is pushed between the backlog and the
        // live items.
        let rx = self
            .tx
            .lock()
            .as_ref()
            .map(broadcast::Sender::subscribe)
            .ok_or_else(|| {
                ApiError::unavailable("the tenant's event stream just ended; connect again")
            })?;
        let now = ring.next - 1;
        let Some(last) = last else {
            return Ok(Attached {
                reload: None,
                backlog: Vec::new(),
                rx,
                after: now,
            });
        };
        let resumable = last
            .rsplit_once('-')
            .filter(|(hub, _)| *hub == self.id)
            .and_then(|(_, n)| n.parse::<u64>().ok())
            .filter(|n| *n <= now);
        Ok(match resumable {
            Some(n) if n >= ring.dropped_through => Attached {
                reload: None,
                backlog: ring.items.iter().filter(|i| i.n > n).cloned().collect(),
                rx,
                after: now,
            },
            Some(n) => Attached {
                reload: Some(format!(
                    "events after {last} are no longer kept (this server keeps the last {} \
                     of the tenant; {} were dropped after it)",
                    self.capacity,
                    ring.dropped_through - n
                )),
                backlog: Vec::new(),
                rx,
                after: now,
            },
            None => Attached {
                reload: Some(format!(
                    "Last-Event-ID {} is not an event of this server's current stream (a \
                     restarted or another server)",
                    forge_store::text::clip(last)
                )),
                backlog: Vec::new(),
                rx,
                after: now,
            },
        })
    }

    fn push(&self, kind: ItemKind) {
        let mut ring = self.ring.lock();
        let item = Arc::new(Item { n: ring.next, kind });
        ring.next += 1;
        if ring.items.len() == self.capacity {
            if let Some(old) = ring.items.pop_front() {
                ring.dropped_through = old.n;
            }
        }
        ring.items.push_back(Arc::clone(&item));
        if let Some(tx) = self.tx.lock().as_ref() {
            // No receiver is fine: nobody is connected.
            let _ = tx.send(item);
        }
    }

    async fn run(
        self: Arc<Self>,
        tenant: TenantId,
        mut sub: forge_store::Subscription,
        shutdown: watch::Receiver<bool>,
    ) {
        let down = shutting_down(shutdown);
        tokio::pin!(down);
        loop {
            let next = tokio::select! {
                next = sub.next() => next,
                () = &mut down => break,
            };
            match next {
                Some(Ok(ev)) => self.push(ItemKind::Event(ev)),
                Some(Err(CoreError::Lagged { missed })) => {
                    tracing::warn!(%tenant, missed, "the /event hub fell behind the bus");
                    self.push(ItemKind::Gap(format!(
                        "the server fell {missed} events behind the bus"
                    )));
                }
                Some(Err(e)) => {
                    tracing::warn!(%tenant, error = %e, "the /event hub lost the bus");
                    self.push(ItemKind::Gap(format!("the server lost the bus: {e}")));
                    break;
                }
                None => break,
            }
        }
        self.ring.lock().closed = true;
        self.tx.lock().take();
    }
}
