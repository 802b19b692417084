//! `--confirmations`: one JSON line on stdout per terminal boundary, printed once the
//! store has committed it.
//!
//! The lines come from a subscription to the tenant's events on the engine's own bus.
//! Every projector commits a terminal event (see [`SyncEvent::is_terminal`]: a closed
//! block, a finished tool or step, a completed message, a user message, a session row,
//! a removal) to the store before it publishes it, so a terminal event seen on the bus
//! is durable under the backend's durability: a process killed after it printed a line
//! keeps that boundary. Non-terminal events and deltas are not printed (with
//! `--commit terminal` they may reach the bus before the store).
//!
//! Each line is `{"confirmed": SEQ, "session": ID, "event": {"type", "properties"}}`,
//! written and flushed on its own. A subscriber that falls behind the bus (lagged)
//! misses lines: a warning on stderr says how many events it missed, and later lines
//! stay correct.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use forge_store::Topic;
use forge_store::{BusEvent, CoreError, Event, Forge, TenantId};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long the printer keeps reading after the command finished, for events still
/// on their way through the bus.
const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// A running printer of confirmations.
pub struct Printer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Printer {
    /// Subscribes to `tenant`'s events on `forge`'s bus and prints every terminal one.
    pub async fn start(forge: &Forge, tenant: &TenantId) -> Result<Self> {
        let mut sub = forge
            .engine()
            .bus
            .subscribe(tenant, Topic::Tenant, None)
            .await
            .context("--confirmations: subscribing to the tenant's events")?;
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = sub.next() => next,
                    _ = &mut stopped => break,
                };
                if !print(next) {
                    return;
                }
            }
            // The command is done: print what is still arriving, until the bus is quiet.
            while let Ok(next) = tokio::time::timeout(DRAIN_IDLE, sub.next()).await {
                if !print(next) {
                    return;
                }
            }
        });
        Ok(Self { stop, task })
    }

    /// Prints what is still arriving, then stops.
    pub async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Prints one bus item if it is a terminal sync event; false when the stream ended or
/// stdout is gone.
fn print(next: Option<Result<BusEvent, CoreError>>) -> bool {
    let env = match next {
        None => return false,
        Some(Err(e)) => {
            eprintln!("forge-store: warning: --confirmations: {e}");
            return true;
        }
        Some(Ok(env)) => env,
    };
    let Event::Sync(sync) = &env.event else {
        return true;
    };
    if !sync.is_terminal() {
        return true;
    }
    let line = serde_json::json!({
        "confirmed": env.seq,
        "session": env.session_id,
        "event": env.event,
    });
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_ok()
}
