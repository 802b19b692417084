//! `ProjectorWorker`: projects the sync events of a tenant's Redis stream into any
//! [`Store`], through a consumer group.
//!
//! Guarantees:
//! - At least once: entries are ACKed only after the store committed them; a worker
//!   that dies leaves them pending, and the next lease holder claims them (`XAUTOCLAIM`).
//! - In order: one worker per (tenant, group) is active at a time, holding a lease key
//!   it refreshes every round; standby workers take over when it expires. Per-session
//!   order therefore stays the stream order even with several replicas running workers.
//! - Idempotent: an event whose `seq` is not above the seq the store recorded for its
//!   session was already applied and is skipped, so redelivery changes nothing.
//! - Reconnecting: a round that fails with a retryable error (Redis or the target store
//!   restarted, a connection broke) drops the worker's connections; the next round
//!   connects again and resumes from the consumer group — its own pending entries
//!   first, so nothing read before the failure is skipped. [`ProjectorWorker::run_until`]
//!   keeps retrying with bounded backoff for as long as it runs;
//!   [`ProjectorWorker::run_until_idle`] gives up after [`RedisOptions::retry`]'s
//!   deadline of failing rounds, with an error naming the server.

use std::collections::HashMap;
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
    group_ready: bool,
    holding: bool,
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
        let (conn, keys) = opts.connect().await.map_err(at)?;
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
            group_ready: false,
            holding: false,
            stats: WorkerStats::default(),
        })
    }

    /// What the worker has done so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Whether this worker held the lease in its last round.
    pub fn is_active(&self) -> bool {
        self.holding
    }

    fn stream(&self) -> String {
        self.keys.tenant_stream(&self.tenant)
    }

    fn lease_key(&self) -> String {
        format!(
            "{}:proj:{}:lease",
            self.stream(),
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
        let key = self.stream();
        if !self.group_ready {
            let created: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&key)
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
            self.group_ready = true;
        }
        let lease_ms = self.options.lease.as_millis() as u64;
        let held: i64 = self
            .lease
            .key(self.lease_key())
            .arg(&self.consumer)
            .arg(lease_ms)
            .invoke_async(&mut self.conn)
            .await
            .map_err(map)?;
        if held == 0 {
            if self.holding {
                tracing::info!(
                    tenant = %self.tenant,
                    group = %self.group,
                    consumer = %self.consumer,
                    "projector worker lost its lease; standing by",
                );
            }
            self.holding = false;
            tokio::time::sleep(self.options.lease / 4).await;
            return Ok(0);
        }
        if !self.holding {
            // Newly active: whoever held the lease before is gone; take its pending.
            let span = tracing::info_span!(
                "worker_claim",
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                claimed = tracing::field::Empty,
            );
            let before = self.stats.claimed;
            self.claim_all(&key).instrument(span.clone()).await?;
            let claimed = self.stats.claimed - before;
            span.record("claimed", claimed);
            span.in_scope(|| {
                tracing::info!(claimed, "projector worker took the lease");
            });
            self.holding = true;
        }
        // Own pending entries first (left by a failed round or just claimed), then new.
        let mut entries = self.read(&key, "0", None).await?;
        if entries.is_empty() {
            entries = self.read(&key, ">", Some(lease_ms / 3)).await?;
        }
        if entries.is_empty() {
            return Ok(0);
        }
        let span = tracing::debug_span!(
            "worker_batch",
            tenant = %self.tenant,
            group = %self.group,
            consumer = %self.consumer,
            entries = entries.len(),
        );
        self.apply_and_ack(&key, &entries).instrument(span).await?;
        Ok(entries.len())
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

    async fn read(
        &mut self,
        key: &str,
        from: &str,
        block_ms: Option<u64>,
    ) -> Result<Vec<StreamId>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.options.count);
        if let Some(ms) = block_ms {
            cmd.arg("BLOCK").arg(ms.max(1));
        }
        cmd.arg("STREAMS").arg(key).arg(from);
        let conn = if block_ms.is_some() {
            if self.reader.is_none() {
                self.reader = Some(self.opts.dedicated(&self.conn).await?);
            }
            self.reader.as_mut().ok_or_else(|| {
                Error::backend(crate::error::BACKEND, true, "no connection for reading")
            })?
        } else {
            // Non-blocking: the shared connection is fine.
            let reply: Option<StreamReadReply> =
                cmd.query_async(&mut self.conn).await.map_err(map)?;
            return Ok(flatten(reply));
        };
        let reply: Option<StreamReadReply> = cmd.query_async(conn).await.map_err(map)?;
        Ok(flatten(reply))
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

fn flatten(reply: Option<StreamReadReply>) -> Vec<StreamId> {
    reply
        .into_iter()
        .flat_map(|r| r.keys)
        .flat_map(|k| k.ids)
        .collect()
}
