//! Opening a backend by URL.
//!
//! `redb://PATH[?durability=immediate|none]` (the embedded default), `sqlite://PATH`,
//! `postgres://…`, `redis://…` (store and durable Streams bus) and `memory://` (ephemeral: gone when the process exits). A new
//! backend is one more arm in
//! [`open_store`] and one more line in [`SCHEMES`]. Errors are one line and name the
//! URL through [`redact`], so a password never reaches a terminal or a CI log.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use forge_core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_core::{Bus, Engine, LocalBus, MemoryStore, Store};

/// The backend used when neither `--backend` nor `FORGE_BACKEND` is given.
pub const DEFAULT_URL: &str = "redb://./forge.redb";

/// The schemes this build understands, with the shape of their URLs (for errors and help).
pub const SCHEMES: &[(&str, &str)] = &[
    ("redb", "redb://PATH[?durability=immediate|none]"),
    ("sqlite", "sqlite://PATH[?synchronous=normal|full]"),
    (
        "postgres",
        "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME]",
    ),
    (
        "redis",
        "redis://HOST[:PORT][/DB][?prefix=NAME&maxlen=N] (store + Streams bus)",
    ),
    (
        "memory",
        "memory:// (in-process, gone when the command exits)",
    ),
];

/// Opens the backend `url` names and wires it to an in-process bus with a replay
/// buffer (so `recover` in the same process can rebuild streamed text from it).
///
/// # Errors
/// One line naming the redacted URL: unknown scheme, malformed URL, or the backend's
/// own error when it cannot be opened.
pub async fn open(url: &str) -> Result<Engine> {
    let fail = |e: anyhow::Error| anyhow!("cannot open backend {}: {}", redact(url), one_line(&e));
    let store = open_store(url).await.map_err(fail)?;
    let bus: Arc<dyn Bus> = if is_redis(url) {
        Arc::new(
            forge_redis::RedisBus::connect(url)
                .await
                .map_err(|e| fail(e.into()))?,
        )
    } else {
        Arc::new(LocalBus::with_replay(DEFAULT_REPLAY_PER_SESSION))
    };
    Ok(Engine::new(store, bus))
}

/// Whether `url` names a Redis server (store and durable Streams bus).
pub fn is_redis(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(s, _)| matches!(s.to_ascii_lowercase().as_str(), "redis" | "rediss"))
}

pub(crate) async fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("not a URL (expected SCHEME://…); {}", supported());
    };
    let (target, query) = match rest.split_once('?') {
        Some((t, q)) => (t, Some(q)),
        None => (rest, None),
    };
    match scheme.to_ascii_lowercase().as_str() {
        "memory" => {
            if !target.is_empty() || query.is_some() {
                bail!("memory:// takes no path or options");
            }
            Ok(Arc::new(MemoryStore::new()))
        }
        "redb" => {
            let (path, query) = (target.to_owned(), query.unwrap_or("").to_owned());
            tokio::task::spawn_blocking(move || open_redb(&path, &query)).await?
        }
        "sqlite" => Ok(Arc::new(forge_sql::SqliteStore::open(url).await?)),
        "postgres" | "postgresql" => Ok(Arc::new(forge_sql::PostgresStore::connect(url).await?)),
        "redis" | "rediss" => Ok(Arc::new(forge_redis::RedisStore::connect(url).await?)),
        other => bail!("unknown backend scheme {other:?}; {}", supported()),
    }
}

fn open_redb(path: &str, query: &str) -> Result<Arc<dyn Store>> {
    if path.is_empty() {
        bail!("redb:// needs a file path, e.g. redb://./forge.redb");
    }
    let opts = forge_redb::RedbOptions::from_query(query)?;
    Ok(Arc::new(forge_redb::RedbStore::open_with(path, opts)?))
}

fn supported() -> String {
    let list: Vec<&str> = SCHEMES.iter().map(|(_, shape)| *shape).collect();
    format!("supported: {}", list.join(", "))
}

/// An error chain on one line: causes joined by `: ` (a cause whose text the message
/// already contains is skipped — core errors include their source in their own text),
/// newlines folded.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg.split(['\n', '\r'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

pub use forge_core::url::redact;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_scheme_is_one_line_naming_the_redacted_url() {
        let err = open("mongodb://admin:pw123@h/db").await.unwrap_err();
        let msg = one_line(&err);
        assert!(msg.contains("mongodb://admin:***@h/db"), "{msg}");
        assert!(!msg.contains("pw123"), "{msg}");
        assert!(msg.contains("unknown backend scheme"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[tokio::test]
    async fn memory_opens() {
        let engine = open("memory://").await.unwrap();
        assert_eq!(engine.store.capabilities().name, "memory");
        assert!(open("memory://x").await.is_err());
    }
}
