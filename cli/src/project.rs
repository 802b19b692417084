//! `forge-store project`: a projector worker that reads a tenant's Redis event stream
//! (consumer group, ACK after commit, claims a dead worker's pending entries) and
//! projects its sync events into any store. Events the store refused or that were
//! trimmed before they were applied are in the tenant's dead-letter stream; a run that
//! put any there fails, naming how many and the stream.

use std::io::Write;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use forge_store::redis::{ProjectorWorker, RedisOptions, WorkerOptions, WorkerStats};
use forge_store::RetryPolicy;
use forge_store::{redact, TenantId};

/// Options of the `project` command.
pub struct Options<'a> {
    /// The Redis server whose streams are read.
    pub from: &'a str,
    /// The store to project into.
    pub to: &'a str,
    /// The tenant whose stream is read.
    pub tenant: &'a TenantId,
    /// Consumer group name (one active worker per group, tenant and shard).
    pub group: &'a str,
    /// This worker's consumer name.
    pub consumer: &'a str,
    /// Stop once the stream has nothing new (instead of running until Ctrl-C).
    pub until_idle: bool,
    /// How long calls to the target store are retried; with `until_idle`, also how long
    /// failing rounds go on before the worker gives up (a worker running until Ctrl-C
    /// keeps reconnecting).
    pub retry: std::time::Duration,
    /// Serve Prometheus metrics (`GET /metrics`) on this address while it runs.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

fn print_stats(out: &mut dyn Write, stats: WorkerStats) -> Result<()> {
    writeln!(
        out,
        "projected: {} applied, {} skipped (already stored), {} dead-lettered ({} refused by \
         the store, {} trimmed before they were applied), {} entries acked, {} claimed from \
         other workers",
        stats.applied,
        stats.skipped,
        stats.dead_lettered(),
        stats.rejected,
        stats.trimmed,
        stats.acked,
        stats.claimed
    )?;
    Ok(())
}

/// Runs the worker until idle or Ctrl-C and prints what it did.
pub async fn run(opts: Options<'_>, out: &mut dyn Write) -> Result<()> {
    if !forge_store::backend::driver(opts.from).is_ok_and(|d| d.info().name == "redis") {
        bail!("--from must be a redis:// URL, got {}", redact(opts.from));
    }
    let retry = RetryPolicy::with_deadline(opts.retry);
    let store = forge_store::open_store_with(opts.to, retry).await?;
    let (_metrics_stop, store) = match opts.metrics_listen {
        Some(addr) => {
            let (stop, rx) = tokio::sync::watch::channel(false);
            let bound = forge_server::metrics::listen(addr, rx)
                .await
                .map_err(|e| anyhow!("--metrics-listen {addr}: {e}"))?;
            writeln!(out, "metrics: http://{bound}/metrics")?;
            let metered: Arc<dyn forge_store::Store> =
                Arc::new(forge_store::metrics::MeteredStore::new(store));
            (Some(stop), metered)
        }
        None => (None, store),
    };
    let from = RedisOptions::from_url(opts.from)
        .map_err(|e| anyhow!("--from {}: {e}", redact(opts.from)))?
        .with_retry(retry);
    let mut worker = ProjectorWorker::with_options(
        from,
        Arc::clone(&store),
        opts.tenant.clone(),
        opts.group,
        opts.consumer,
        WorkerOptions::default(),
    )
    .await
    .map_err(|e| anyhow!("cannot read {}: {e}", redact(opts.from)))?;
    writeln!(
        out,
        "projecting tenant {} from {} into {} (group {}, consumer {})",
        opts.tenant,
        redact(opts.from),
        redact(opts.to),
        opts.group,
        opts.consumer
    )?;
    let stats = if opts.until_idle {
        worker.run_until_idle().await
    } else {
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        worker.run_until(stop).await
    };
    let dead_letters = worker.dead_letter_key();
    drop(worker);
    // The copy's files are left complete, also after a failed run.
    let closed = store.close().await;
    let stats = stats?;
    print_stats(out, stats)?;
    closed.map_err(|e| anyhow!("closing {}: {e}", redact(opts.to)))?;
    if stats.dead_lettered() > 0 {
        bail!(
            "{} event(s) were not projected and went to the dead-letter stream {dead_letters} \
             ({} refused by the store, {} trimmed from the stream before they were applied); \
             `XRANGE {dead_letters} - +` lists them with their reasons",
            stats.dead_lettered(),
            stats.rejected,
            stats.trimmed
        );
    }
    Ok(())
}
