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
//!   The lease is not a fence: a worker paused for longer than its lease between
//!   that last check and its write (a stopped VM, a debugger) could still write an
//!   older batch after the new holder wrote newer events of the same sessions. Keep
//!   the lease well above the longest store write (the default is 5 s).
//! - Idempotent: an event whose `seq` is not above the seq the store recorded for its
//!   session was already applied and is skipped, so redelivery changes nothing.
//! - Reconnecting: a round that fails with a retryable error (Redis or the target store
//!   restarted, a connection broke) drops the worker's connections; the next round
//!   connects again and resumes from the consumer group — its own pending entries
//!   first, so nothing read before the failure is skipped. [`ProjectorWorker::run_until`]
//!   keeps retrying with bounded backoff for as long as it runs;
//!   [`ProjectorWorker::run_until_idle`] gives up after [`RedisOptions::retry`]'s
//!   deadline of failing rounds, with an error naming the server.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::{Envelope, Error, Event, Result, SessionId, Store, TenantId};
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::Script;
use tracing::Instrument;

use crate::bus::decode_entry;
use crate::config::RedisOptions;
use crate::conn::Conn;
use crate::error::map;
use crate::keys::Keys;

const LEASE_SCRIPT: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0";

/// Drops the lease of KEYS[1] if ARGV[1] holds it.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0";

/// Marks ARGV[1] live now (server time) in the zset KEYS[1], forgets members silent
/// for ARGV[2] ms, and returns how many are live.
const MEMBERS_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
return redis.call('ZCARD', KEYS[1])";

/// What a worker has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Sync events committed to the store.
    pub applied: u64,
    /// Sync events skipped because the store already had them (redelivery).
    pub skipped: u64,
    /// Sync events the store refused (`NotFound` / `InvalidInput`), ACKed anyway so
    /// one bad event cannot stall the tenant.
    pub rejected: u64,
    /// Stream entries ACKed (sync and bus-only).
    pub acked: u64,
    /// Pending entries taken over from other consumers.
    pub claimed: u64,
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
    lease: Script,
    release: Script,
    members: Script,
    group_ready: bool,
    /// The shards whose lease this worker holds.
    held: BTreeSet<usize>,
    stats: WorkerStats,
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
            lease: Script::new(LEASE_SCRIPT),
            release: Script::new(RELEASE_SCRIPT),
            members: Script::new(MEMBERS_SCRIPT),
            group_ready: false,
            held: BTreeSet::new(),
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

    fn stream(&self, shard: usize) -> String {
        self.keys.work_stream(&self.tenant, shard, self.opts.shards)
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

    /// Takes or refreshes the lease of `shard`; whether this worker holds it.
    async fn lease(&mut self, shard: usize) -> Result<bool> {
        let held: i64 = self
            .lease
            .key(self.lease_key(shard))
            .arg(&self.consumer)
            .arg(self.options.lease.as_millis() as u64)
            .invoke_async(&mut self.conn)
            .await
            .map_err(map)?;
        Ok(held == 1)
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

    async fn round(&mut self) -> Result<usize> {
        let shards = self.opts.shards;
        if !self.group_ready {
            for shard in 0..shards {
                let created: redis::RedisResult<()> = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(self.stream(shard))
                    .arg(&self.group)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut self.conn)
                    .await;
                match created {
                    Ok(()) => {}
                    Err(e) if e.code() == Some("BUSYGROUP") => {}
                    Err(e) => return Err(map(e)),
                }
            }
            self.group_ready = true;
        }
        self.balance().await?;
        if self.held.is_empty() {
            tokio::time::sleep(self.options.lease / 4).await;
            return Ok(0);
        }
        let lease_ms = self.options.lease.as_millis() as u64;
        let streams: Vec<(usize, String)> =
            self.held.iter().map(|k| (*k, self.stream(*k))).collect();
        // Own pending entries first (left by a failed round or just claimed), then new.
        let mut read = self.read(&streams, "0", None).await?;
        if read.iter().all(|(_, e)| e.is_empty()) {
            read = self.read(&streams, ">", Some(lease_ms / 3)).await?;
        }
        let mut handled = 0;
        for (shard, entries) in read {
            if entries.is_empty() {
                continue;
            }
            // The lease is checked again right before the store is written: a worker
            // that lost it (paused past its lease) leaves the entries to the holder.
            if !self.lease(shard).await? {
                self.lost(shard);
                continue;
            }
            let span = tracing::debug_span!(
                "worker_batch",
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                entries = entries.len(),
            );
            let key = self.stream(shard);
            self.apply_and_ack(&key, &entries).instrument(span).await?;
            handled += entries.len();
        }
        Ok(handled)
    }

    fn lost(&mut self, shard: usize) {
        if self.held.remove(&shard) {
            tracing::info!(
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                "projector worker lost a shard's lease; another worker has it",
            );
        }
    }

    /// Keeps this worker's share of the shards: refreshes its leases, releases what is
    /// above its share (`ceil(shards / live workers)`), and takes free shards up to it,
    /// claiming what their previous holder left pending.
    async fn balance(&mut self) -> Result<()> {
        let shards = self.opts.shards;
        let lease_ms = self.options.lease.as_millis() as u64;
        let live: i64 = self
            .members
            .key(self.members_key())
            .arg(&self.consumer)
            .arg(lease_ms)
            .invoke_async(&mut self.conn)
            .await
            .map_err(map)?;
        let share = shards.div_ceil(usize::try_from(live.max(1)).unwrap_or(1));
        for shard in self.held.clone() {
            if !self.lease(shard).await? {
                self.lost(shard);
            }
        }
        while self.held.len() > share {
            let Some(shard) = self.held.pop_last() else {
                break;
            };
            let () = self
                .release
                .key(self.lease_key(shard))
                .arg(&self.consumer)
                .invoke_async(&mut self.conn)
                .await
                .map_err(map)?;
            tracing::info!(
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                share,
                "projector worker released a shard for a new worker",
            );
        }
        // Start looking at a place of this worker's own, so workers starting together
        // do not all race for shard 0.
        let start = crate::keys::shard_of(&SessionId::from(self.consumer.as_str()), shards);
        for i in 0..shards {
            if self.held.len() >= share {
                break;
            }
            let shard = (start + i) % shards;
            if self.held.contains(&shard) || !self.lease(shard).await? {
                continue;
            }
            let span = tracing::info_span!(
                "worker_claim",
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                claimed = tracing::field::Empty,
            );
            let before = self.stats.claimed;
            self.claim_all(&self.stream(shard))
                .instrument(span.clone())
                .await?;
            let claimed = self.stats.claimed - before;
            span.record("claimed", claimed);
            span.in_scope(|| {
                tracing::info!(claimed, "projector worker took a shard's lease");
            });
            self.held.insert(shard);
        }
        Ok(())
    }

    /// Applies `entries` to the store, then ACKs them.
    async fn apply_and_ack(&mut self, key: &str, entries: &[StreamId]) -> Result<()> {
        self.apply(entries).await?;
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let acked: u64 = redis::cmd("XACK")
            .arg(key)
            .arg(&self.group)
            .arg(&ids)
            .query_async(&mut self.conn)
            .await
            .map_err(map)?;
        self.stats.acked += acked;
        Ok(())
    }

    async fn claim_all(&mut self, key: &str) -> Result<()> {
        let mut start = "0-0".to_owned();
        loop {
            let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(key)
                .arg(&self.group)
                .arg(&self.consumer)
                .arg(0)
                .arg(&start)
                .arg("COUNT")
                .arg(1000)
                .arg("JUSTID")
                .query_async(&mut self.conn)
                .await
                .map_err(map)?;
            self.stats.claimed += reply.claimed.len() as u64;
            if reply.next_stream_id == "0-0" {
                return Ok(());
            }
            start = reply.next_stream_id;
        }
    }

    /// One `XREADGROUP` over the streams of the held shards (one slot: they share
    /// the tenant's hash tag). Returns each shard's entries.
    async fn read(
        &mut self,
        streams: &[(usize, String)],
        from: &str,
        block_ms: Option<u64>,
    ) -> Result<Vec<(usize, Vec<StreamId>)>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.options.count);
        if let Some(ms) = block_ms {
            cmd.arg("BLOCK").arg(ms.max(1));
        }
        cmd.arg("STREAMS");
        for (_, key) in streams {
            cmd.arg(key);
        }
        for _ in streams {
            cmd.arg(from);
        }
        let reply: Option<StreamReadReply> = if block_ms.is_some() {
            if self.reader.is_none() {
                self.reader = Some(self.opts.dedicated(&self.conn).await?);
            }
            let conn = self.reader.as_mut().ok_or_else(|| {
                Error::backend(crate::error::BACKEND, true, "no connection for reading")
            })?;
            cmd.query_async(conn).await.map_err(map)?
        } else {
            // Non-blocking: the shared connection is fine.
            cmd.query_async(&mut self.conn).await.map_err(map)?
        };
        let mut out: Vec<(usize, Vec<StreamId>)> =
            streams.iter().map(|(k, _)| (*k, Vec::new())).collect();
        for stream in reply.into_iter().flat_map(|r| r.keys) {
            if let Some(i) = streams.iter().position(|(_, key)| *key == stream.key) {
                out[i].1 = stream.ids;
            }
        }
        Ok(out)
    }

    async fn apply(&mut self, entries: &[StreamId]) -> Result<()> {
        let mut batch = Vec::new();
        for entry in entries {
            if entry.map.is_empty() {
                continue; // trimmed away while pending
            }
            let env = decode_entry(entry)?;
            if let Event::Sync(event) = &env.event {
                batch.push(Envelope {
                    tenant: env.tenant.clone(),
                    session_id: env.session_id.clone(),
                    seq: env.seq,
                    event: event.clone(),
                });
            }
        }
        // Skip what the store already has: at or below its recorded seq.
        let mut stored: HashMap<SessionId, u64> = HashMap::new();
        for env in &batch {
            if !stored.contains_key(&env.session_id) {
                let seq = self
                    .store
                    .session(&env.tenant, &env.session_id)
                    .await?
                    .map_or(0, |s| s.seq);
                stored.insert(env.session_id.clone(), seq);
            }
        }
        let before = batch.len();
        batch.retain(|e| e.seq > stored[&e.session_id]);
        self.stats.skipped += (before - batch.len()) as u64;
        if batch.is_empty() {
            return Ok(());
        }
        match self.store.apply(&batch).await {
            Ok(()) => self.stats.applied += batch.len() as u64,
            Err(e @ (Error::NotFound { .. } | Error::InvalidInput(_))) => {
                // Apply one by one so only the refused events are dropped.
                tracing::debug!(
                    events = batch.len(),
                    error = &e as &(dyn std::error::Error + 'static),
                    "store refused the batch; applying one event at a time",
                );
                for env in &batch {
                    match self.store.apply(std::slice::from_ref(env)).await {
                        Ok(()) => self.stats.applied += 1,
                        Err(e @ (Error::NotFound { .. } | Error::InvalidInput(_))) => {
                            tracing::warn!(
                                tenant = %env.tenant,
                                session = %env.session_id,
                                seq = env.seq,
                                event = env.event.name(),
                                error = &e as &(dyn std::error::Error + 'static),
                                "store refused an event; acknowledged without applying it",
                            );
                            self.stats.rejected += 1;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
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
