//! Opening a backend by URL: `redb://PATH`, `sqlite://PATH`, `postgres://…`,
//! `redis://…`, `memory://`.
//!
//! Each backend is a driver in the registry ([`crate::registry`]): one cargo feature
//! each, or installed at run time. [`crate::schemes`] lists what this build supports,
//! and a URL for a backend that is compiled out is [`Error::FeatureDisabled`] naming the
//! feature. Every error and every `Debug` output shows the URL through
//! [`forge_core::url::redact`], so a password never reaches a log.

use std::sync::Arc;
use std::time::Duration;

use forge_core::driver::DriverOptions;
use forge_core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_core::url::redact;
use forge_core::{
    Bus, ClaimPolicy, CountingStore, Engine, GroupCommitOptions, LocalBus, OnHeld, RetryPolicy,
    Store,
};
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::registry::{driver, shown};
use crate::Forge;

/// The backend used when none is named: a redb file in the current directory.
pub const DEFAULT_URL: &str = "redb://./forge.redb";

/// How the store and the bus are joined: the commit policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Projection {
    /// Every boundary is its own transaction, committed before it is published
    /// (`--commit every`).
    Direct,
    /// Terminal boundaries are committed before they are published, across sessions
    /// within a window; other writes ride along (see [`forge_core::group`];
    /// `--commit terminal`). The default, with a 10 ms window.
    GroupCommit(GroupCommitOptions),
}

impl Default for Projection {
    fn default() -> Self {
        Self::GroupCommit(GroupCommitOptions::default())
    }
}

/// Options of [`open_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// The projector between store and bus.
    pub projection: Projection,
    /// Events the in-process bus keeps per session, so a subscriber can resume and
    /// `recover` can rebuild streamed text in the same process (ignored by Redis,
    /// whose bus is durable).
    pub replay_per_session: usize,
    /// Events the in-process bus keeps for replay over all sessions together (default
    /// [`forge_core::DEFAULT_REPLAY_TOTAL`]); the oldest are dropped first, so memory
    /// does not grow with the number of sessions a long-running process has seen.
    pub replay_total: usize,
    /// Count what reaches the store (commits, rows, bytes), reported by replays and
    /// imports and by [`Forge::writes`]. Each row is JSON-encoded once more to count
    /// its bytes and per-part write counts are kept: meant for tools and tests, not
    /// for a long-running service.
    pub count_writes: bool,
    /// Record commits, their latency, rows and bytes into the process's metrics
    /// recorder ([`forge_core::metrics::MeteredStore`]); each batch is measured as JSON
    /// once more. Without a recorder installed the calls do nothing.
    pub metrics: bool,
    /// How calls to a server (Postgres, Redis) ride out its restart: a call that fails
    /// with a retryable error (a lost connection, a refused connection, a server still
    /// starting) is retried with exponential backoff (50 ms doubling up to 2 s) until
    /// `retry.deadline` (default [`forge_core::DEFAULT_RETRY_DEADLINE`], 30 s) has
    /// passed since its first attempt; then it fails with an error naming the server
    /// and the last cause. A retried write commits once: batches are idempotent
    /// upserts. Embedded backends (redb, SQLite, memory) are not wrapped.
    pub retry: RetryPolicy,
    /// How the projector claims the sessions it writes ([`forge_core::fence`]): the
    /// writer's name other writers are told (default
    /// [`ClaimPolicy::holder_name`]`("forge-store")`, `role@host:pid`), the lease
    /// (default 30 s, renewed while the writer writes) and what to do when another
    /// writer holds a session: fail at once with [`forge_core::Error::Held`] naming it
    /// (the default), wait for it, or take the session over (its holder's later
    /// batches are then refused with [`forge_core::Error::Fenced`]).
    pub claims: ClaimPolicy,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            projection: Projection::default(),
            replay_per_session: DEFAULT_REPLAY_PER_SESSION,
            replay_total: forge_core::DEFAULT_REPLAY_TOTAL,
            count_writes: false,
            metrics: false,
            retry: RetryPolicy::default(),
            claims: ClaimPolicy::default(),
        }
    }
}

impl OpenOptions {
    /// The default options: group commit (terminal boundaries, 10 ms window), the
    /// default replay buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Group commits with this window (terminal boundaries of all sessions arriving
    /// within it share a transaction).
    #[must_use]
    pub fn group_commit(mut self, window: Duration) -> Self {
        self.projection = Projection::GroupCommit(GroupCommitOptions {
            window,
            ..GroupCommitOptions::default()
        });
        self
    }

    /// Record store metrics (see [`OpenOptions::metrics`]).
    #[must_use]
    pub fn metrics(mut self, yes: bool) -> Self {
        self.metrics = yes;
        self
    }

    /// Count what reaches the store (see [`OpenOptions::count_writes`]).
    #[must_use]
    pub fn count_writes(mut self, yes: bool) -> Self {
        self.count_writes = yes;
        self
    }

    /// This projection.
    #[must_use]
    pub fn projection(mut self, projection: Projection) -> Self {
        self.projection = projection;
        self
    }

    /// Retry calls to the server for at most `deadline` (see [`OpenOptions::retry`]);
    /// `Duration::ZERO` fails at the first error.
    #[must_use]
    pub fn retry_for(mut self, deadline: Duration) -> Self {
        self.retry = RetryPolicy::with_deadline(deadline);
        self
    }

    /// Claims sessions with `policy` (see [`OpenOptions::claims`]).
    #[must_use]
    pub fn claims(mut self, policy: ClaimPolicy) -> Self {
        self.claims = policy;
        self
    }

    /// Claims sessions as the writer `role@host:pid` ([`ClaimPolicy::holder_name`]),
    /// keeping the lease and what to do about a holder.
    #[must_use]
    pub fn writer(mut self, role: &str) -> Self {
        self.claims.holder = ClaimPolicy::holder_name(role);
        self
    }

    /// What to do about a session another writer holds (see [`OpenOptions::claims`]).
    #[must_use]
    pub fn on_held(mut self, on_held: OnHeld) -> Self {
        self.claims.on_held = on_held;
        self
    }
}

/// Opens `url` with the default options: the store, the bus (Redis Streams for
/// `redis://`, else an in-process bus with a replay buffer) and the group-commit
/// projector (terminal boundaries, 10 ms window).
///
/// # Errors
/// [`Error::Url`], [`Error::FeatureDisabled`] or [`Error::Open`], each naming the
/// redacted URL.
pub async fn open(url: &str) -> Result<Forge> {
    open_with(url, OpenOptions::default()).await
}

/// Opens `url` with `options`.
///
/// # Errors
/// As [`open`].
pub async fn open_with(url: &str, options: OpenOptions) -> Result<Forge> {
    let driver = driver(url)?;
    let span = tracing::info_span!("open", backend = %driver.info().name, url = %redact(url));
    let opts = DriverOptions::with_retry(options.retry);
    let (target, blobs) = split_blobs(url)?;
    let (store, bus) = async {
        let store = driver
            .open_store(&target, &opts)
            .await
            .and_then(|s| crate::blobs::wrap(s, &blobs))
            .map_err(|e| opened(url, e))?;
        let bus = driver
            .open_bus(&target, &opts)
            .await
            .map_err(|e| opened(url, e))?;
        Ok::<_, Error>((store, bus))
    }
    .instrument(span)
    .await?;
    let bus: Arc<dyn Bus> = bus.unwrap_or_else(|| {
        Arc::new(LocalBus::with_replay_budget(
            options.replay_per_session,
            options.replay_total,
        ))
    });
    let store: Arc<dyn Store> = if options.metrics {
        Arc::new(forge_core::metrics::MeteredStore::new(store))
    } else {
        store
    };
    let counting = options
        .count_writes
        .then(|| Arc::new(CountingStore::new(Arc::clone(&store))));
    let store: Arc<dyn Store> = match &counting {
        Some(c) => c.clone(),
        None => store,
    };
    let engine = match options.projection {
        Projection::Direct => Engine::direct_claiming(store, bus, options.claims),
        Projection::GroupCommit(g) => Engine::group_commit_claiming(store, bus, g, options.claims),
    };
    tracing::debug!("opened");
    Ok(Forge::from_engine(engine, redact(url), counting))
}

/// Opens only the store `url` names (e.g. the target of a projector worker), with the
/// default [`OpenOptions::retry`].
///
/// # Errors
/// As [`open`].
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    open_store_with(url, RetryPolicy::default()).await
}

/// Opens only the store `url` names, retrying calls to its server as `retry` says.
///
/// # Errors
/// As [`open`].
pub async fn open_store_with(url: &str, retry: RetryPolicy) -> Result<Arc<dyn Store>> {
    let driver = driver(url)?;
    let (target, blobs) = split_blobs(url)?;
    driver
        .open_store(&target, &DriverOptions::with_retry(retry))
        .await
        .and_then(|s| crate::blobs::wrap(s, &blobs))
        .map_err(|e| opened(url, e))
}

/// The URL without its blob keys, and where its large values go ([`crate::blobs`]).
fn split_blobs(url: &str) -> Result<(String, crate::blobs::BlobConfig)> {
    crate::blobs::split(url).map_err(|e| Error::Url {
        url: shown(url),
        reason: e.to_string(),
    })
}

fn opened(url: &str, source: forge_core::Error) -> Error {
    Error::Open {
        url: shown(url),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_scheme_names_the_redacted_url_and_what_is_supported() {
        let err = open("mongodb://admin:pw123@h/db").await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("mongodb://admin:***@h/db"), "{msg}");
        assert!(!msg.contains("pw123"), "{msg}");
        assert!(msg.contains("unknown backend scheme"), "{msg}");
        assert!(msg.contains("memory://"), "{msg}");
        assert!(matches!(err, Error::Url { .. }));
    }

    #[tokio::test]
    async fn a_huge_url_gives_a_short_error() {
        // Found by fuzzing: the error quoted the whole URL (and scheme), 140 KB.
        for url in [
            format!("r{}://x", "[".repeat(100_000)),
            format!("mongodb://h/{}", "a".repeat(100_000)),
            "x".repeat(100_000),
        ] {
            let msg = open(&url).await.unwrap_err().to_string();
            assert!(msg.len() < 2_000, "{} bytes", msg.len());
        }
    }

    #[tokio::test]
    async fn not_a_url_is_a_url_error() {
        let err = open("forge.redb").await.unwrap_err();
        assert!(err.to_string().contains("expected SCHEME://"), "{err}");
    }

    #[tokio::test]
    async fn memory_opens_and_takes_no_options() {
        let forge = open("memory://").await.unwrap();
        assert_eq!(forge.engine().store.capabilities().name, "memory");
        let err = open("memory://x").await.unwrap_err();
        assert!(
            matches!(&err, Error::Open { source, .. } if matches!(source, forge_core::Error::InvalidInput(_))),
            "{err}"
        );
    }

    /// Every scheme this build lacks must say which feature brings it in. The test
    /// exists only in builds that lack one; CI runs this crate's tests with
    /// `--no-default-features`, where all four are off.
    #[cfg(not(all(
        feature = "redb",
        feature = "sqlite",
        feature = "postgres",
        feature = "redis"
    )))]
    #[tokio::test]
    async fn a_compiled_out_backend_names_its_feature() {
        let disabled: Vec<crate::registry::Scheme> = crate::registry::known()
            .into_iter()
            .filter(|s| !s.enabled)
            .collect();
        assert!(!disabled.is_empty());
        for s in disabled {
            let url = format!("{}://user:secret@host/x", s.shape);
            let err = open(&url).await.unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(&err, Error::FeatureDisabled { feature, .. } if Some(*feature) == s.feature),
                "{msg}"
            );
            assert!(msg.contains(&format!("`{}` feature", s.name)), "{msg}");
            assert!(!msg.contains("secret"), "{msg}");
        }
    }

    #[tokio::test]
    async fn debug_never_shows_a_password() {
        let url = "postgres://app:hunter2@db/forge?password=hunter2";
        let forge = Forge::from_engine(Engine::in_memory(), redact(url), None);
        let shown = format!("{forge:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("app:***@db"), "{shown}");
    }

    #[test]
    fn group_commit_option_sets_the_window() {
        let o = OpenOptions::new().group_commit(Duration::from_millis(25));
        match o.projection {
            Projection::GroupCommit(g) => assert_eq!(g.window, Duration::from_millis(25)),
            Projection::Direct => panic!("expected group commit"),
        }
    }

    #[tokio::test]
    async fn the_engine_claims_as_the_options_say() {
        let options = OpenOptions::new()
            .projection(Projection::Direct)
            .writer("replay")
            .on_held(OnHeld::TakeOver);
        assert!(
            options.claims.holder.starts_with("replay@"),
            "{:?}",
            options.claims
        );
        let forge = open_with("memory://", options).await.unwrap();
        let tenant = forge_core::TenantId::default_tenant();
        let sid = forge_core::SessionId::from("ses_claimed");
        forge.engine().scope(&tenant, &sid).await.unwrap();
        let claim = forge.store().claimed(&tenant, &sid).await.unwrap().unwrap();
        assert!(claim.holder.starts_with("replay@"), "{claim:?}");
        assert_eq!(claim.epoch, 1);
    }
}
