//! Test helpers: the Redis URL from `FORGE_TEST_REDIS_URL`, a fresh key prefix per
//! test ([`TestPrefix`]), and cleanup of everything under it.
#![allow(dead_code)]

use std::sync::Arc;

use forge_core::id::now_ms;
use forge_core::processor::{assistant_message, Processor};
use forge_core::{
    Bus, BusEvent, Engine, Envelope, Message, MessageId, Part, PartId, ProcessorOptions, Session,
    SessionId, Store, StreamEvent, SyncEvent, TenantId,
};
use forge_redis::{RedisBus, RedisOptions, RedisStore};
use redis::Commands as _;

/// The server URL, or `None` (after a loud skip notice) when it is not set.
///
/// With `FORGE_TEST_REQUIRE_SERVICES=1` a missing URL or an unreachable server fails.
pub fn redis_url() -> Option<String> {
    let url = forge_testkit::service_url("FORGE_TEST_REDIS_URL", "forge-redis tests")?;
    let reachable = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_secs(3)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    if let Err(e) = reachable {
        panic!("FORGE_TEST_REDIS_URL={url} is not reachable: {e}");
    }
    Some(url)
}

/// A fresh `forge-test-…` prefix.
pub fn fresh_prefix() -> String {
    format!("forge-test-{:016x}", rand::random::<u64>())
}

/// `url` with `prefix` (and any extra query parameters) added.
pub fn with_prefix(url: &str, prefix: &str, extra: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}prefix={prefix}{extra}")
}

/// A plain connection to the server of `url` (its query, the prefix included, left out).
fn try_connection(url: &str) -> Option<redis::Connection> {
    let server = RedisOptions::from_url(url).ok()?.server;
    redis::Client::open(server.as_str())
        .and_then(|c| c.get_connection())
        .ok()
}

/// [`try_connection`], panicking when the server cannot be reached.
pub fn connection(url: &str) -> redis::Connection {
    try_connection(url).unwrap_or_else(|| panic!("cannot connect to {url}"))
}

/// The keys under `prefix:` on the server of `url`, and a connection to it.
fn keys_under(url: &str, prefix: &str) -> Option<(redis::Connection, Vec<String>)> {
    let mut conn = try_connection(url)?;
    let keys: Vec<String> = conn
        .scan_match::<_, String>(format!("{prefix}:*"))
        .ok()?
        .filter_map(Result::ok)
        .collect();
    Some((conn, keys))
}

/// Deletes every key under `prefix:` (SCAN + DEL), synchronously. On a cluster node
/// this reaches the node's own keys: call it for every node.
pub fn delete_prefix(url: &str, prefix: &str) -> usize {
    let Some((mut conn, keys)) = keys_under(url, prefix) else {
        return 0;
    };
    // One key per DEL: a cluster node refuses a DEL whose keys span slots.
    for key in &keys {
        let _ = redis::cmd("DEL").arg(key).query::<()>(&mut conn);
    }
    keys.len()
}

/// Counts the keys under `prefix:` (on a cluster node: its own keys).
pub fn count_prefix(url: &str, prefix: &str) -> usize {
    keys_under(url, prefix).expect("connect and scan").1.len()
}

/// A fresh key prefix on the test server (or a cluster), and the URL that opens it;
/// every key under it is deleted when this is dropped (also when the test panics).
pub struct TestPrefix {
    /// The server's URL, without the prefix.
    pub server: String,
    pub prefix: String,
    /// `server` with the prefix and the extra query parameters.
    pub url: String,
    /// Where keys under the prefix can live: the server, or every cluster node.
    nodes: Vec<String>,
}

impl TestPrefix {
    /// A fresh prefix on `FORGE_TEST_REDIS_URL`, or `None` (after a skip notice).
    pub fn new() -> Option<Self> {
        Self::with_query("")
    }

    /// [`TestPrefix::new`] with extra query parameters (`&maxlen=10`) on its URL.
    pub fn with_query(extra: &str) -> Option<Self> {
        Some(Self::on(redis_url()?, extra))
    }

    /// A fresh prefix on `server`.
    pub fn on(server: String, extra: &str) -> Self {
        let nodes = vec![server.clone()];
        Self::on_nodes(server, nodes, extra)
    }

    /// A fresh prefix on a cluster: opened through its first node, its keys looked
    /// for on every node.
    pub fn on_cluster(cluster: &forge_testkit::servers::Cluster, extra: &str) -> Self {
        Self::on_nodes(cluster.url(), cluster.node_urls(), extra)
    }

    fn on_nodes(server: String, nodes: Vec<String>, extra: &str) -> Self {
        let prefix = fresh_prefix();
        let url = with_prefix(&server, &prefix, extra);
        Self {
            server,
            prefix,
            url,
            nodes,
        }
    }

    /// How many keys are under the prefix, over every node.
    pub fn left(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| count_prefix(n, &self.prefix))
            .sum()
    }

    /// A plain connection to the server.
    pub fn conn(&self) -> redis::Connection {
        connection(&self.server)
    }

    /// A store on the prefix.
    pub async fn store(&self) -> RedisStore {
        RedisStore::connect(&self.url).await.expect("store")
    }

    /// A bus on the prefix.
    pub async fn bus(&self) -> RedisBus {
        RedisBus::connect(&self.url).await.expect("bus")
    }
}

impl Drop for TestPrefix {
    fn drop(&mut self) {
        for node in &self.nodes {
            delete_prefix(node, &self.prefix);
        }
    }
}

/// An engine on a store and a bus of their own on `url`.
pub async fn engine(url: &str) -> Engine {
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(url).await.expect("store"));
    let bus: Arc<dyn Bus> = Arc::new(RedisBus::connect(url).await.expect("bus"));
    Engine::direct(store, bus)
}

/// A delta event for `session` with `seq`.
pub fn delta(tenant: &TenantId, session: &SessionId, seq: u64) -> BusEvent {
    forge_testkit::delta(tenant, session, seq, format!("d{seq} "))
}

/// A delta event for `session` with `seq`, of part `prt_0` or `prt_1` by the seq's
/// parity: deltas published together never share a run (one stream entry each), so
/// `maxlen` counts them one by one.
#[allow(dead_code)]
pub fn lone_delta(tenant: &TenantId, session: &SessionId, seq: u64) -> BusEvent {
    let mut env: forge_core::Envelope<forge_core::Event> = (*delta(tenant, session, seq)).clone();
    if let forge_core::Event::PartDelta(d) = &mut env.event {
        d.part_id = format!("prt_{}", seq % 2).into();
    }
    BusEvent::new(env)
}

#[allow(unused_imports)]
pub use forge_testkit::text_of;

/// A user message made now with these ids and one text part.
pub fn user_message(session: &SessionId, id: &str, part: &str, text: &str) -> (Message, Part) {
    forge_testkit::user_message_with(
        session,
        MessageId::from(id),
        PartId::from(part),
        text,
        now_ms(),
    )
}

/// `event` of `tenant` at `seq`, in the session it names.
pub fn env(tenant: &TenantId, seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant.clone(),
        session_id: event.session_id().clone(),
        seq,
        epoch: None,
        event,
    }
}

/// Session `id`'s info.
pub fn session(id: &str) -> Session {
    let mut s = Session::new("t", 1);
    s.id = id.into();
    s
}

/// Session `id` opened with one message and its part: seqs 1 to 3.
pub fn opening(
    tenant: &TenantId,
    id: &str,
    message: Message,
    part: Part,
) -> Vec<Envelope<SyncEvent>> {
    vec![
        env(tenant, 1, SyncEvent::SessionUpdated { info: session(id) }),
        env(tenant, 2, SyncEvent::MessageUpdated { info: message }),
        env(tenant, 3, SyncEvent::PartUpdated { part }),
    ]
}

/// The sync events among `events`, as the batches a store applies.
pub fn sync_events(events: &[BusEvent]) -> Vec<Envelope<SyncEvent>> {
    events.iter().filter_map(BusEvent::sync).collect()
}

/// `env` as the bus carries it.
pub fn bus_event(env: &Envelope<SyncEvent>) -> BusEvent {
    env.clone().into()
}

/// Puts `session` in `tenant` with a user message (`msg_0001`, `question`) and starts
/// the assistant's answer to it, with its text block `t` open.
pub async fn start_answer(
    engine: &Engine,
    tenant: &TenantId,
    session: Session,
    question: &str,
) -> Processor {
    let sid = session.id.clone();
    let scope = engine.put_session(tenant, session).await.expect("session");
    let (user, part) = user_message(&sid, "msg_0001", "prt_0001", question);
    engine
        .put_message(&scope, user.clone(), vec![part])
        .await
        .expect("user message");
    let m = assistant_message(sid, user.id, "p", "m", now_ms());
    let mut p = engine
        .processor(scope, m, ProcessorOptions::default())
        .await
        .expect("processor");
    handle(&mut p, r#"{"type":"text-start","id":"t"}"#).await;
    p
}

/// Hands `p` one model stream event, given as its JSON line.
pub async fn handle(p: &mut Processor, line: &str) {
    let event = StreamEvent::from_json(line).expect("stream event");
    p.handle(event).await.expect("handle");
}

/// Streams `text` into the open text block `t` of `p`.
pub async fn stream_text(p: &mut Processor, text: &str) {
    let line = serde_json::json!({"type": "text-delta", "id": "t", "text": text});
    handle(p, &line.to_string()).await;
}
