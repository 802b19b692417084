//! The background pruner of `serve`: a [`Retention`] policy applied to every tenant the
//! server serves, once at start and then at an interval, until the shutdown.

use std::time::Duration;

use forge_store::prune::{PruneOptions, Retention};
use forge_store::{Forge, TenantId};
use tokio::sync::watch;

/// How `serve` prunes.
#[derive(Clone, Debug)]
pub struct Pruning {
    /// What each tenant keeps.
    pub retention: Retention,
    /// The pause between two rounds over the tenants.
    pub every: Duration,
    /// The most messages one transaction removes.
    pub batch_messages: usize,
}

/// Prunes `tenants` every `pruning.every` until `shutdown` flips, giving the space back
/// ([`Forge::reclaim`]) after a round that removed something. A round that fails for a
/// tenant is logged and tried again next round.
pub async fn run(
    forge: Forge,
    tenants: Vec<TenantId>,
    pruning: Pruning,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let mut removed = false;
        for tenant in &tenants {
            if *shutdown.borrow() {
                return;
            }
            let opts = PruneOptions {
                batch_messages: pruning.batch_messages,
                ..PruneOptions::default()
            };
            let round = forge.prune(tenant, &pruning.retention, &opts);
            let result = tokio::select! {
                r = round => r,
                _ = shutdown.wait_for(|down| *down) => return,
            };
            match result {
                Ok(r) if r.pruned.is_empty() => {
                    tracing::debug!(%tenant, examined = r.examined, "prune: nothing to remove");
                }
                Ok(r) => {
                    tracing::info!(
                    %tenant,
                    examined = r.examined,
                    deleted = r.sessions_deleted,
                    trimmed = r.sessions_trimmed,
                    messages = r.messages_removed,
                    skipped_held = r.skipped_held,
                    skipped_open = r.skipped_open,
                    skipped_written = r.skipped_written,
                    longest_transaction_us = r.longest_transaction_us,
                    "prune"
                    );
                    removed = true;
                }
                Err(e) => tracing::warn!(%tenant, error = %e, "prune failed; trying next round"),
            }
        }
        // Something was removed: the space goes back once per round.
        if removed {
            match forge.reclaim().await {
                Ok(r) => tracing::info!(action = %r.action, before = r.before, after = r.after,
                    "reclaim"),
                Err(e) => tracing::warn!(error = %e, "reclaim failed; trying next round"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pruning.every) => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
    }
}
