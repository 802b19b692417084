//! Riding out a server restart: retrying a call that failed with a retryable error
//! (a lost connection, a server still starting) with bounded exponential backoff, up to
//! a deadline, and naming the server when giving up.
//!
//! [`RetryStore`] wraps a networked [`Store`] (Postgres, Redis) so that every call —
//! `apply` included — rides out a restart of its server. Retrying `apply` is safe
//! because a batch is idempotent: every event upserts by id or removes by id, and a
//! session's recorded `seq` never goes down, so a batch whose first attempt did commit
//! (the connection broke before the answer arrived) commits the same rows again and
//! duplicates nothing.
//!
//! Past the deadline the call fails with an [`Error::Backend`] whose message names the
//! server, the number of attempts, the time spent and the last cause, e.g.
//! `postgres backend error: server 127.0.0.1:55432: error communicating with database:
//! Connection refused (os error 111) (gave up after 9 attempts in 30.0 s)`. An attempt
//! that hangs is cut off at the deadline too, so a call never waits much longer than
//! the deadline. Errors that are not retryable (a refused write, bad input, corrupted
//! data) are returned at once, with the server named when they are backend errors.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::blob::{BlobEntry, BlobId, BlobSweep, BlobValue};
use crate::error::{BoxError, Error, Result};
use crate::event::{Envelope, SyncEvent};
use crate::fence::{Claim, ClaimRequest};
use crate::id::{MessageId, SessionId};
use crate::model::MessageWithParts;
use crate::store::{
    Capabilities, Cursor, Footprint, OpenItems, Page, Reclaimed, SessionPage, SessionState, Store,
    TenantStats,
};
use crate::tenant::TenantId;

/// How long a call keeps retrying by default before it fails.
pub const DEFAULT_RETRY_DEADLINE: Duration = Duration::from_secs(30);

/// How a failed call is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How long after the first attempt started a call gives up (no retry starts later,
    /// and an attempt in flight is cut off then). `Duration::ZERO`: one attempt, never
    /// retried.
    pub deadline: Duration,
    /// The pause before the first retry; it doubles after each failed attempt.
    pub first_backoff: Duration,
    /// The longest pause between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_RETRY_DEADLINE,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The default backoff with this deadline.
    pub fn with_deadline(deadline: Duration) -> Self {
        Self {
            deadline,
            ..Self::default()
        }
    }

    /// Runs `attempt` until it succeeds, fails with an error that is not retryable, or
    /// the deadline passes; `backend` is the backend's name (`postgres`), `server`
    /// names where it failed (`server 127.0.0.1:5432`), `what` what was being done (for
    /// the log).
    ///
    /// # Errors
    /// The last error; a backend error names `server`, and, after retries, how many
    /// attempts were made in how long.
    pub async fn run<T, F, Fut>(
        &self,
        backend: &'static str,
        server: &str,
        what: &str,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let deadline = start + self.deadline;
        let mut backoff = self.first_backoff;
        let mut attempts = 0u32;
        // The last error an attempt returned: what is reported when the final attempt
        // is cut off by the deadline (a timeout says less than "connection refused").
        let mut last: Option<Error> = None;
        loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = if attempts == 1 && self.deadline.is_zero() {
                attempt().await
            } else {
                let limit = left.max(Duration::from_millis(1));
                match tokio::time::timeout(limit, attempt()).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(last
                        .take()
                        .unwrap_or_else(|| Error::backend(backend, true, TimedOut(limit)))),
                }
            };
            let e = match outcome {
                Ok(v) => {
                    if attempts > 1 {
                        tracing::info!(
                            server,
                            what,
                            attempts,
                            waited_ms = start.elapsed().as_millis() as u64,
                            "the server answered again; the call succeeded after retries",
                        );
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let now = Instant::now();
            if !e.is_retryable() || now + backoff >= deadline {
                let gave_up = (e.is_retryable() && attempts > 1)
                    .then(|| (attempts, now.duration_since(start)));
                return Err(at_server(e, server, gave_up));
            }
            metrics::counter!(
                crate::metrics::RETRIES,
                "backend" => backend,
                "cause" => e.kind().as_str()
            )
            .increment(1);
            tracing::warn!(
                backend,
                server,
                what,
                attempt = attempts,
                retry_in_ms = backoff.as_millis() as u64,
                error = &e as &(dyn std::error::Error + 'static),
                "call failed with a retryable error; retrying",
            );
            last = Some(e);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.max_backoff);
        }
    }
}

/// An attempt that did not finish before the deadline.
#[derive(Debug)]
struct TimedOut(Duration);

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no answer within {:.1} s (the retry deadline)",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for TimedOut {}

/// The source of a backend error, naming the server it came from and, after retries,
/// how long they went on. Displays as `SERVER: CAUSE[ (gave up after N attempts in
/// S s)]`; its source is the backend's own error.
#[derive(Debug)]
pub struct ServerError {
    /// `server HOST:PORT`.
    pub server: String,
    /// Attempts made and time spent, when the call was retried.
    pub gave_up: Option<(u32, Duration)>,
    source: BoxError,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.server, self.source)?;
        if let Some((attempts, waited)) = self.gave_up {
            write!(
                f,
                " (gave up after {attempts} attempts in {:.1} s)",
                waited.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

impl ServerError {
    /// The backend's own error.
    pub fn into_source(self) -> BoxError {
        self.source
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// `e` with `server` named in it when it is a backend error (once: an error that
/// names a server already is returned as it is).
pub fn at_server(e: Error, server: &str, gave_up: Option<(u32, Duration)>) -> Error {
    match e {
        Error::Backend {
            backend,
            retryable,
            source,
        } if !source.is::<ServerError>() => Error::Backend {
            backend,
            retryable,
            source: Box::new(ServerError {
                server: server.to_owned(),
                gave_up,
                source,
            }),
        },
        other => other,
    }
}

/// A [`Store`] whose calls ride out restarts of the server under it: see the [module
/// docs](self).
#[derive(Debug)]
pub struct RetryStore {
    server: String,
    policy: RetryPolicy,
    inner: Arc<dyn Store>,
}

impl RetryStore {
    /// Wraps `inner`, whose server is named `server` in errors (e.g. `server
    /// 127.0.0.1:5432`; never with a password).
    pub fn new(inner: Arc<dyn Store>, server: impl Into<String>, policy: RetryPolicy) -> Self {
        Self {
            inner,
            server: server.into(),
            policy,
        }
    }

    /// The store it wraps.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// How it retries.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The server it names in errors.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `attempt` (the call `what` on the inner store), retried as the policy says.
    async fn retried<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.policy
            .run(self.inner.capabilities().name, &self.server, what, attempt)
            .await
    }
}

#[async_trait]
impl Store for RetryStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        self.retried("apply", || self.inner.apply(batch)).await
    }

    /// Retried like every call: a claim whose reply was lost and that is tried again
    /// gets the next epoch (the same holder claims freely), and the lost one is never used.
    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        self.retried("claim", || self.inner.claim(tenant, session, request))
            .await
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        self.retried("release", || self.inner.release(tenant, session, epoch))
            .await
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        self.retried("claimed", || self.inner.claimed(tenant, session))
            .await
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        self.retried("session", || self.inner.session(tenant, id))
            .await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        self.retried("sessions", || self.inner.sessions(tenant))
            .await
    }

    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        self.retried("sessions_after", || {
            self.inner.sessions_after(tenant, after, limit)
        })
        .await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<TenantStats> {
        self.retried("stats", || self.inner.stats(tenant)).await
    }

    async fn footprint(&self) -> Result<Footprint> {
        self.retried("footprint", || self.inner.footprint()).await
    }

    async fn reclaim(&self) -> Result<Reclaimed> {
        self.retried("reclaim", || self.inner.reclaim()).await
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.retried("message", || self.inner.message(tenant, session, id))
            .await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.retried("messages", || {
            self.inner.messages(tenant, session, before, limit)
        })
        .await
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        self.retried("open_items", || self.inner.open_items(tenant, session))
            .await
    }

    /// Not retried: closing is the last call, and a server that is down has nothing of
    /// ours to settle.
    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        self.retried("put_blobs", || {
            self.inner
                .put_blobs(tenant, blobs, now_ms, refresh_before_ms)
        })
        .await
    }

    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        self.retried("blobs", || self.inner.blobs(tenant, ids))
            .await
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        self.retried("blob_list", || self.inner.blob_list(tenant))
            .await
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.retried("delete_blobs", || {
            self.inner.delete_blobs(tenant, ids, touched_before_ms)
        })
        .await
    }

    async fn sweep_blobs(&self, tenant: &TenantId) -> Result<BlobSweep> {
        self.retried("sweep_blobs", || self.inner.sweep_blobs(tenant))
            .await
    }

    async fn search(
        &self,
        tenant: &TenantId,
        query: &crate::search::SearchQuery,
    ) -> Result<Vec<crate::search::SearchHit>> {
        self.retried("search", || self.inner.search(tenant, query))
            .await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn refused() -> Error {
        Error::backend(
            "postgres",
            true,
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
        )
    }

    fn fast(deadline_ms: u64) -> RetryPolicy {
        RetryPolicy {
            deadline: Duration::from_millis(deadline_ms),
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
        }
    }

    #[tokio::test]
    async fn a_retryable_failure_is_retried_until_it_succeeds() {
        let calls = AtomicU32::new(0);
        let got = fast(5_000)
            .run("postgres", "server h:1", "t", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                    Err(refused())
                } else {
                    Ok(7)
                }
            })
            .await
            .unwrap();
        assert_eq!((got, calls.load(Ordering::SeqCst)), (7, 4));
    }

    /// A call to `server` that fails with `error` every time, run under `fast(deadline_ms)`:
    /// its final error, and how many attempts were made.
    async fn always_failing(deadline_ms: u64, server: &str, error: fn() -> Error) -> (Error, u32) {
        let calls = AtomicU32::new(0);
        let e = fast(deadline_ms)
            .run("postgres", server, "t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(error())
            })
            .await
            .unwrap_err();
        (e, calls.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn past_the_deadline_the_error_names_the_server_attempts_and_cause() {
        let (e, calls) = always_failing(40, "server 127.0.0.1:55432", refused).await;
        let text = e.to_string();
        assert!(
            text.starts_with(
                "postgres backend error: server 127.0.0.1:55432: connection refused (gave up after"
            ),
            "{text}"
        );
        assert!(e.is_retryable());
        assert!(calls > 1);
        let cause = std::error::Error::source(&e)
            .and_then(std::error::Error::source)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the native error stays in the chain");
        assert_eq!(cause.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    #[tokio::test]
    async fn a_permanent_failure_is_not_retried() {
        let (e, calls) = always_failing(5_000, "s", || Error::invalid("bad")).await;
        assert_eq!(calls, 1);
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn a_last_attempt_cut_off_reports_the_cause_seen_before() {
        let calls = AtomicU32::new(0);
        let e = fast(60)
            .run("postgres", "server h:1", "t", || async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(refused())
                } else {
                    std::future::pending::<Result<()>>().await
                }
            })
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("server h:1: connection refused (gave up after 2 attempts"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_attempt_that_hangs_is_cut_off_at_the_deadline() {
        let e = fast(30)
            .run("redis", "server h:6390", "t", || async {
                std::future::pending::<Result<()>>().await
            })
            .await
            .unwrap_err();
        assert!(e.is_retryable());
        let text = e.to_string();
        assert!(
            text.starts_with("redis backend error: server h:6390: no answer within"),
            "{text}"
        );
    }
}
