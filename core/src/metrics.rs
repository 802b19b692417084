//! The metrics forge-store records, through the [`metrics`] facade: nothing is kept
//! unless a process installs a recorder (`serve`, `project` and `follow` install a
//! Prometheus one; docs/operations.md lists every metric). Metric names are the
//! constants below; labels carry no tenant or session id (a scrape is not a tenant's).
//!
//! [`MeteredStore`] times and counts what reaches a store; the group-commit projector,
//! the retry policy, the buses, `serve` and the Redis projector workers record the rest
//! where it happens. Nothing is recorded per delta.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::error::Result;
use crate::event::{Envelope, SyncEvent};
use crate::forward::Forward;
use crate::stats::json_len;
use crate::store::Store;

/// Store transactions committed (`apply` calls that succeeded), by backend.
pub const COMMITS: &str = "forge_store_commits_total";
/// Store transactions that failed, by backend and error kind.
pub const COMMIT_ERRORS: &str = "forge_store_commit_errors_total";
/// How long an `apply` took, seconds, by backend.
pub const COMMIT_SECONDS: &str = "forge_store_commit_seconds";
/// Sync events (rows written or removed) handed to the store, by backend.
pub const ROWS: &str = "forge_store_rows_total";
/// JSON bytes of the sync events handed to the store, by backend.
pub const BYTES: &str = "forge_store_bytes_total";
/// Session batches one group commit carried (the group-commit projector).
pub const GROUP_BATCHES: &str = "forge_store_group_batches";
/// From a terminal batch's arrival to its publish after the commit, seconds.
pub const PUBLISH_DELAY_SECONDS: &str = "forge_store_publish_delay_seconds";
/// Calls retried after a retryable error, by backend and cause (error kind).
pub const RETRIES: &str = "forge_store_retries_total";
/// Events a bus subscriber missed because it fell behind (`Lagged`), by bus.
pub const BUS_LAGGED: &str = "forge_store_bus_lagged_events_total";
/// SSE clients connected to `serve`.
pub const SSE_CLIENTS: &str = "forge_store_sse_clients";
/// SSE clients `serve` dropped for falling behind.
pub const SSE_DROPPED: &str = "forge_store_sse_dropped_total";
/// Stream entries a projector worker's group has not acknowledged yet, by shard.
pub const PROJECTOR_LAG: &str = "forge_store_projector_lag_events";
/// Events a projector worker sent to its dead-letter stream, by shard.
pub const DEAD_LETTERS: &str = "forge_store_dead_letters_total";
/// Sessions prune deleted.
pub const PRUNE_SESSIONS: &str = "forge_store_prune_sessions_deleted_total";
/// Sessions prune trimmed (history behind a compaction dropped).
pub const PRUNE_TRIMMED: &str = "forge_store_prune_sessions_trimmed_total";
/// Messages prune removed.
pub const PRUNE_MESSAGES: &str = "forge_store_prune_messages_removed_total";
/// Counter: large values prune removed because no row referenced them any more.
pub const PRUNE_BLOBS: &str = "forge_store_prune_blobs_removed_total";
/// Sessions prune left alone, by why (`held`, `open`, `written`).
pub const PRUNE_SKIPPED: &str = "forge_store_prune_skipped_total";
/// Prune runs finished.
pub const PRUNE_RUNS: &str = "forge_store_prune_runs_total";
/// The longest transaction of the last prune run, seconds.
pub const PRUNE_LONGEST_SECONDS: &str = "forge_store_prune_longest_transaction_seconds";

/// Histogram buckets for latencies, seconds: 0.1 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Histogram buckets for group sizes.
pub const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Describes every metric (units and help text) to the installed recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(COMMITS, "Store transactions committed");
    describe_counter!(
        COMMIT_ERRORS,
        "Store transactions that failed, by error kind"
    );
    describe_histogram!(
        COMMIT_SECONDS,
        Unit::Seconds,
        "Duration of a store transaction"
    );
    describe_counter!(
        ROWS,
        "Sync events (rows written or removed) handed to the store"
    );
    describe_counter!(
        BYTES,
        Unit::Bytes,
        "JSON bytes of the sync events handed to the store"
    );
    describe_histogram!(GROUP_BATCHES, "Session batches one group commit carried");
    describe_histogram!(
        PUBLISH_DELAY_SECONDS,
        Unit::Seconds,
        "From a terminal batch's arrival to its publish after the commit"
    );
    describe_counter!(RETRIES, "Calls retried after a retryable error, by cause");
    describe_counter!(
        BUS_LAGGED,
        "Events a bus subscriber missed by falling behind"
    );
    describe_gauge!(SSE_CLIENTS, "SSE clients connected");
    describe_counter!(SSE_DROPPED, "SSE clients dropped for falling behind");
    describe_gauge!(
        PROJECTOR_LAG,
        "Stream entries the projector group has not acknowledged"
    );
    describe_counter!(DEAD_LETTERS, "Events sent to the dead-letter stream");
    describe_counter!(PRUNE_SESSIONS, "Sessions prune deleted");
    describe_counter!(
        PRUNE_TRIMMED,
        "Sessions whose compacted history prune dropped"
    );
    describe_counter!(PRUNE_MESSAGES, "Messages prune removed");
    describe_counter!(
        PRUNE_BLOBS,
        "Large values prune removed (no row referenced them)"
    );
    describe_counter!(PRUNE_SKIPPED, "Sessions prune left alone, by why");
    describe_counter!(PRUNE_RUNS, "Prune runs finished");
    describe_gauge!(
        PRUNE_LONGEST_SECONDS,
        Unit::Seconds,
        "The longest transaction of the last prune run"
    );
}

/// A store whose `apply` is counted and timed into [`COMMITS`], [`COMMIT_ERRORS`],
/// [`COMMIT_SECONDS`], [`ROWS`] and [`BYTES`]. Each batch's events are measured as JSON
/// once more (at boundaries only: deltas never reach a store).
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: &'static str,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        let backend = inner.capabilities().name;
        Self { inner, backend }
    }
}

#[async_trait]
impl Forward for MeteredStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let start = Instant::now();
        let result = self.inner.apply(batch).await;
        let backend = self.backend;
        match &result {
            Ok(()) => {
                metrics::histogram!(COMMIT_SECONDS, "backend" => backend)
                    .record(start.elapsed().as_secs_f64());
                metrics::counter!(COMMITS, "backend" => backend).increment(1);
                metrics::counter!(ROWS, "backend" => backend).increment(batch.len() as u64);
                let bytes: u64 = batch.iter().map(|e| json_len(&e.event).unwrap_or(0)).sum();
                metrics::counter!(BYTES, "backend" => backend).increment(bytes);
            }
            Err(e) => {
                metrics::counter!(COMMIT_ERRORS, "backend" => backend, "kind" => e.kind().as_str())
                    .increment(1);
            }
        }
        result
    }
}
