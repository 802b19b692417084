//! `ProjectorWorker`: projects the sync events of a tenant's Redis stream into any
//! [`Store`], through a consumer group.
//!
//! Guarantees:
//! - At least once: entries are ACKed only after the store committed them; a worker
//!   that dies leaves them pending, and the next lease holder claims them (`XAUTOCLAIM`).
//! - In order, shared: a tenant's events are split over `shards=K` work streams by
//!   session (K = 1: the tenant stream itself), and each shard is projected by one
//!   worker of the group at a time, holding a lease key it refreshes every round and
//!   checks again right before it writes. Live workers register in a members set;
//!   each takes at most `ceil(K / live workers)` shards and releases what is above
//!   that when a worker joins, so N workers share K shards. A dead worker's leases
//!   expire and the others take its shards over, claiming what it left pending. A
//!   session's events are in one shard, so its order stays the stream order.
//! - Fenced: before it first writes a session of a shard it holds, a worker claims the
//!   session in the target store ([`Store::claim`], taking it over, as the holder named
//!   by its consumer name) and stamps the claim's epoch on every event of the session
//!   it applies. A worker that takes a shard over thereby takes over its sessions'
//!   epochs, so a worker paused for longer than its lease (a stopped VM, a debugger)
//!   between its lease check and its write has its late batch refused by the store
//!   ([`Error::Fenced`]) instead of writing older events over the new holder's. On that
//!   refusal it stops writing the shard, forgets its claims there and goes back to
//!   checking its lease; it forgets them too whenever it loses or releases a shard.
//! - Idempotent: an event whose `seq` is not above the seq the store recorded for its
//!   session was already applied and is skipped, so redelivery changes nothing.
//! - Reconnecting: a round that fails with a retryable error (Redis or the target store
//!   restarted, a connection broke) drops the worker's connections; the next round
//!   connects again and resumes from the consumer group — its own pending entries
//!   first, so nothing read before the failure is skipped. [`ProjectorWorker::run_until`]
//!   keeps retrying with bounded backoff for as long as it runs;
//!   [`ProjectorWorker::run_until_idle`] gives up after [`RedisOptions::retry`]'s
//!   deadline of failing rounds, with an error naming the server.
//! - Nothing dropped silently: an event the store refuses (`NotFound`, `Conflict`,
//!   `InvalidInput`), and an entry trimmed from a work stream before the worker applied
//!   it, is recorded in the tenant's dead-letter stream ([`Keys::dead_letters`]) with
//!   its reason, counted in [`WorkerStats`] and logged, then acknowledged, so one bad
//!   event cannot stall the tenant. A refused event is recorded and acknowledged in one
//!   server-side step. Trimmed entries are found three ways: a pending entry whose body
//!   is gone (own pending entries, and those `XAUTOCLAIM` drops when a shard is taken
//!   over), and a gap between what the group received and what the stream still holds
//!   (Redis 7's `entries-added` and `entries-read` counters, checked before every read
//!   of new entries; a gap the group has already read past is recorded once the group
//!   has caught up with the stream).
//! - Trimming: after each acknowledgement the worker trims its work stream below the
//!   lowest id some consumer group has not acknowledged (`XTRIM … MINID ~`); the tenant
//!   stream, when it is the work stream, keeps its `maxlen` newest entries for
//!   subscribers as well. So by default nothing a group has not acknowledged is
//!   trimmed; an abandoned group holds the stream until it is destroyed
//!   (`XGROUP DESTROY`). [`RedisOptions::work_maxlen`] bounds work streams instead, at
//!   the price of dead letters when a worker falls behind by more.

mod dead;
mod round;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::{ClaimRequest, Error, Result, SessionId, Store, TenantId};
use redis::Script;

use crate::config::RedisOptions;
use crate::conn::Conn;
use crate::keys::Keys;

/// What a worker has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Sync events committed to the store.
    pub applied: u64,
    /// Sync events skipped because the store already had them (redelivery).
    pub skipped: u64,
    /// Sync events the store refused (`NotFound`, `Conflict`, `InvalidInput`): each
    /// recorded in the dead-letter stream with the store's error, then acknowledged
    /// so one bad event cannot stall the tenant.
    pub rejected: u64,
    /// Work-stream entries trimmed before this worker applied them (a pending entry
    /// whose body is gone, or entries the group never received): each recorded in the
    /// dead-letter stream.
    pub trimmed: u64,
    /// Stream entries ACKed (sync and bus-only).
    pub acked: u64,
    /// Pending entries taken over from other consumers.
    pub claimed: u64,
    /// Work-stream entries this worker trimmed once every group had acknowledged them.
    pub released: u64,
}

impl WorkerStats {
    /// Events recorded in the dead-letter stream: `rejected + trimmed`. A run that
    /// dead-lettered events did not project everything; see
    /// [`ProjectorWorker::dead_letter_key`].
    pub fn dead_lettered(&self) -> u64 {
        self.rejected + self.trimmed
    }
}

/// Timing of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerOptions {
    /// How long the active worker's lease lasts without a refresh.
    pub lease: Duration,
    /// Entries read per round.
    pub count: usize,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(5),
            count: 256,
        }
    }
}

/// Projects one tenant's events from Redis into a store. See the module docs.
pub struct ProjectorWorker {
    opts: RedisOptions,
    server: String,
    conn: Conn,
    /// The connection of blocking reads; `None` after a failure, connected again on
    /// the next read.
    reader: Option<Conn>,
    keys: Keys,
    store: Arc<dyn Store>,
    tenant: TenantId,
    group: String,
    consumer: String,
    options: WorkerOptions,
    scripts: Scripts,
    group_ready: bool,
    /// The shards whose lease this worker holds.
    held: BTreeSet<usize>,
    /// The claims this worker holds in the target store, per shard and session: kept
    /// while it holds the shard, forgotten when it loses or releases it.
    claims: HashMap<usize, HashMap<SessionId, Fence>>,
    stats: WorkerStats,
}

/// A claim of a session in the target store: the epoch its events carry, and when its
/// lease runs out (Unix ms; renewed past its middle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fence {
    epoch: u64,
    expires_ms: i64,
}

impl fmt::Debug for ProjectorWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProjectorWorker")
            .field("tenant", &self.tenant)
            .field("group", &self.group)
            .field("consumer", &self.consumer)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ProjectorWorker {
    /// A worker of consumer `consumer` in group `group`, reading the stream of `tenant`
    /// on the server of `url` and applying to `store`.
    pub async fn connect(
        url: &str,
        store: Arc<dyn Store>,
        tenant: TenantId,
        group: &str,
        consumer: &str,
        options: WorkerOptions,
    ) -> Result<Self> {
        Self::with_options(
            RedisOptions::from_url(url)?,
            store,
            tenant,
            group,
            consumer,
            options,
        )
        .await
    }

    /// As [`ProjectorWorker::connect`], with parsed options (their
    /// [`RedisOptions::retry`] bounds [`ProjectorWorker::run_until_idle`]).
    pub async fn with_options(
        opts: RedisOptions,
        store: Arc<dyn Store>,
        tenant: TenantId,
        group: &str,
        consumer: &str,
        options: WorkerOptions,
    ) -> Result<Self> {
        if group.is_empty() || consumer.is_empty() {
            return Err(Error::invalid(
                "worker group and consumer names must not be empty",
            ));
        }
        // The consumer name is the holder of the worker's claims in the target store.
        ClaimRequest::new(consumer, 0)
            .validate()
            .map_err(|e| Error::invalid(format!("worker consumer name {consumer:?}: {e}")))?;
        let server = opts.server_label();
        let at = |e| forge_core::retry::at_server(e, &server, None);
        let (mut conn, keys) = opts.connect().await.map_err(at)?;
        opts.check_shards(&mut conn).await?;
        Ok(Self {
            reader: Some(opts.dedicated(&conn).await.map_err(at)?),
            conn,
            keys,
            server: server.clone(),
            opts,
            store,
            tenant,
            group: group.to_owned(),
            consumer: consumer.to_owned(),
            options,
            scripts: Scripts::new(),
            group_ready: false,
            held: BTreeSet::new(),
            claims: HashMap::new(),
            stats: WorkerStats::default(),
        })
    }

    /// What the worker has done so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Whether this worker held a lease in its last round.
    pub fn is_active(&self) -> bool {
        !self.held.is_empty()
    }

    /// The shards whose lease this worker held in its last round.
    pub fn shards_held(&self) -> Vec<usize> {
        self.held.iter().copied().collect()
    }

    /// The tenant's dead-letter stream, where refused and trimmed events are recorded
    /// (`XRANGE KEY - +` lists them; fields `reason`, `error`, `group`, `consumer`,
    /// `stream`, `entry`, `session`, `seq`, `event`, `e` (the event's JSON), and for a
    /// gap of trimmed entries `count`, `after`, `before`).
    pub fn dead_letter_key(&self) -> String {
        self.keys.dead_letters(&self.tenant)
    }

    fn stream(&self, shard: usize) -> String {
        self.keys.work_stream(&self.tenant, shard, self.opts.shards)
    }

    /// Entries the work stream keeps whatever the groups acknowledged: the tenant
    /// stream's `maxlen` retention when it is the work stream (one shard), else none.
    fn keep(&self) -> usize {
        if self.opts.shards <= 1 {
            self.opts.maxlen
        } else {
            0
        }
    }

    fn lease_key(&self, shard: usize) -> String {
        format!(
            "{}:proj:{}:lease",
            self.stream(shard),
            crate::keys::hex(&self.group)
        )
    }

    fn members_key(&self) -> String {
        format!(
            "{}:proj:{}:members",
            self.keys.tenant_stream(&self.tenant),
            crate::keys::hex(&self.group)
        )
    }

    /// Runs rounds until `stop` completes or a round fails with an error that is not
    /// retryable. Retryable failures (a restart of Redis or of the target store) are
    /// logged and retried with bounded backoff for as long as it runs: the worker
    /// reconnects and resumes from its consumer group by itself.
    pub async fn run_until(&mut self, stop: impl Future<Output = ()>) -> Result<WorkerStats> {
        tokio::pin!(stop);
        let mut backoff = self.opts.retry.first_backoff;
        loop {
            tokio::select! {
                () = &mut stop => return Ok(self.stats),
                r = self.step() => match r {
                    Ok(_) => backoff = self.opts.retry.first_backoff,
                    Err(e) if e.is_retryable() => {
                        self.log_retry(&e, backoff);
                        tokio::select! {
                            () = &mut stop => return Ok(self.stats),
                            () = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(self.opts.retry.max_backoff);
                    }
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// Runs rounds until two in a row find nothing to do, and returns what it did.
    /// Retryable failures are retried with bounded backoff until they have gone on for
    /// [`RedisOptions::retry`]'s deadline; then the last error is returned, naming the
    /// server.
    ///
    /// Events the store refused and entries trimmed before they were applied do not
    /// stop the run; they are in [`WorkerStats::dead_lettered`], which a caller that
    /// must project everything checks.
    pub async fn run_until_idle(&mut self) -> Result<WorkerStats> {
        let mut idle = 0;
        let mut failing: Option<(Instant, u32)> = None;
        let mut backoff = self.opts.retry.first_backoff;
        while idle < 2 {
            match self.step().await {
                Ok(n) => {
                    idle = if n == 0 { idle + 1 } else { 0 };
                    failing = None;
                    backoff = self.opts.retry.first_backoff;
                }
                Err(e) if e.is_retryable() => {
                    let (since, attempts) = failing.get_or_insert((Instant::now(), 0));
                    *attempts += 1;
                    if since.elapsed() + backoff >= self.opts.retry.deadline {
                        return Err(forge_core::retry::at_server(
                            strip_server(e),
                            &self.server,
                            Some((*attempts, since.elapsed())),
                        ));
                    }
                    self.log_retry(&e, backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.opts.retry.max_backoff);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(self.stats)
    }

    fn log_retry(&self, e: &Error, backoff: Duration) {
        tracing::warn!(
            tenant = %self.tenant,
            group = %self.group,
            consumer = %self.consumer,
            retry_in_ms = backoff.as_millis() as u64,
            error = e as &(dyn std::error::Error + 'static),
            "projector worker round failed; reconnecting and resuming from the consumer group",
        );
    }

    /// One round: keep (or wait for) the lease, claim what dead workers left pending,
    /// read, apply, ACK. Returns the number of stream entries handled.
    ///
    /// After a retryable failure the worker's blocking connection is dropped and the
    /// next round connects again (and checks the consumer group and the lease anew).
    pub async fn step(&mut self) -> Result<usize> {
        match self.round().await {
            Ok(n) => Ok(n),
            Err(e) => {
                if e.is_retryable() {
                    // The lease decides anew next round (and a worker that got it back
                    // after another held it claims what that one left pending).
                    self.reader = None;
                    self.group_ready = false;
                }
                Err(forge_core::retry::at_server(e, &self.server, None))
            }
        }
    }
}

/// The worker's server-side scripts.
struct Scripts {
    lease: Script,
    release: Script,
    members: Script,
    group: Script,
    gap: Script,
    claim: Script,
    ack: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            lease: Script::new(round::LEASE_SCRIPT),
            release: Script::new(round::RELEASE_SCRIPT),
            members: Script::new(round::MEMBERS_SCRIPT),
            group: Script::new(concat!(
                include_str!("common.lua"),
                include_str!("group.lua")
            )),
            gap: Script::new(concat!(include_str!("common.lua"), include_str!("gap.lua"))),
            claim: Script::new(concat!(
                include_str!("common.lua"),
                include_str!("claim.lua")
            )),
            ack: Script::new(concat!(include_str!("common.lua"), include_str!("ack.lua"))),
        }
    }
}

/// A backend error without the server it names (to name it again with the attempts).
fn strip_server(e: Error) -> Error {
    match e {
        Error::Backend {
            backend,
            retryable,
            source,
        } => match source.downcast::<forge_core::retry::ServerError>() {
            Ok(named) => Error::Backend {
                backend,
                retryable,
                source: named.into_source(),
            },
            Err(source) => Error::Backend {
                backend,
                retryable,
                source,
            },
        },
        other => other,
    }
}
