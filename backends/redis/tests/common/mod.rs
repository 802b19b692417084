//! Test helpers: the Redis URL from `FORGE_TEST_REDIS_URL`, a fresh key prefix per
//! test, and cleanup of everything under it.
#![allow(dead_code)]

pub mod factory;

use forge_redis::RedisOptions;
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

/// The keys under `prefix:` on the server of `url`, and a connection to it.
fn keys_under(url: &str, prefix: &str) -> Option<(redis::Connection, Vec<String>)> {
    let server = RedisOptions::from_url(url).expect("url").server;
    let mut conn = redis::Client::open(server.as_str())
        .and_then(|c| c.get_connection())
        .ok()?;
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

/// Deletes the prefix's keys when dropped (also when the test panics).
pub struct Cleanup {
    pub url: String,
    pub prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        delete_prefix(&self.url, &self.prefix);
    }
}

use forge_core::id::now_ms;
use forge_core::{BusEvent, Message, MessageId, Part, PartId, SessionId, TenantId};

/// A delta event for `session` with `seq`.
pub fn delta(tenant: &TenantId, session: &SessionId, seq: u64) -> BusEvent {
    forge_testkit::delta(tenant, session, seq, format!("d{seq} "))
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
