//! `forge-store project`: a projector worker that reads a tenant's Redis event stream
//! (consumer group, ACK after commit, claims a dead worker's pending entries) and
//! projects its sync events into any store.

use std::io::Write;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use forge_store::redis::{ProjectorWorker, WorkerOptions, WorkerStats};
use forge_store::{redact, TenantId};

/// Options of the `project` command.
pub struct Options<'a> {
    /// The Redis server whose streams are read.
    pub from: &'a str,
    /// The store to project into.
    pub to: &'a str,
    /// The tenant whose stream is read.
    pub tenant: &'a TenantId,
    /// Consumer group name (one active worker per group and tenant).
    pub group: &'a str,
    /// This worker's consumer name.
    pub consumer: &'a str,
    /// Stop once the stream has nothing new (instead of running until Ctrl-C).
    pub until_idle: bool,
}

fn print_stats(out: &mut dyn Write, stats: WorkerStats) -> Result<()> {
    writeln!(
        out,
        "projected: {} applied, {} skipped (already stored), {} rejected, {} entries acked, \
         {} claimed from other workers",
        stats.applied, stats.skipped, stats.rejected, stats.acked, stats.claimed
    )?;
    Ok(())
}

/// Runs the worker until idle or Ctrl-C and prints what it did.
pub async fn run(opts: Options<'_>, out: &mut dyn Write) -> Result<()> {
    if !forge_store::is_redis(opts.from) {
        bail!("--from must be a redis:// URL, got {}", redact(opts.from));
    }
    let store = forge_store::open_store(opts.to).await?;
    let mut worker = ProjectorWorker::connect(
        opts.from,
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
        let mut idle = 0;
        while idle < 2 {
            idle = if worker.step().await? == 0 {
                idle + 1
            } else {
                0
            };
        }
        worker.stats()
    } else {
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        worker.run_until(stop).await?
    };
    print_stats(out, stats)
}
