//! What a fork costs, at the device: one W1 session of `turns` turns, then a fork of
//! all of it, on every backend; the bytes the device wrote for the fork alone, per
//! message copied.
//!
//! The session is replayed and the store closed; the store is opened again, the device
//! settled, the session forked ([`forge_store::Forge::fork`]) and the store closed
//! (redb's journal checkpointed, SQLite's WAL folded), and the device settled again.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use forge_store::fork::ForkPoint;
use forge_store::{open, ReplayOptions, TenantId};
use serde::{Deserialize, Serialize};

use crate::device::{Filesystem, Placement};
use crate::workload::{w1, write_jsonl};

/// One backend's fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRow {
    /// `redb`, `sqlite`, `postgres`, `redis`.
    pub backend: String,
    /// Messages copied.
    pub messages: u64,
    /// Parts copied.
    pub parts: u64,
    /// Logical bytes the fork added (its rows' JSON, [`forge_store::Store::stats`]).
    pub logical_bytes: u64,
    /// What the device wrote for the fork.
    pub device_bytes: u64,
}

impl ForkRow {
    /// Device bytes per message copied.
    pub fn per_message(&self) -> f64 {
        if self.messages == 0 {
            0.0
        } else {
            self.device_bytes as f64 / self.messages as f64
        }
    }
}

/// Runs it on every backend the device can host; `each` sees every row as measured.
///
/// # Errors
/// When the device cannot be made, a server fails to start, or a write fails.
pub async fn run(
    fs: Filesystem,
    dir: &Path,
    turns: u32,
    seed: u64,
    mut each: impl FnMut(&ForkRow),
) -> Result<(Vec<ForkRow>, Vec<String>)> {
    let (placement, notes) = Placement::create(fs, dir, true, true).await?;
    let mut text = Vec::new();
    write_jsonl(&w1(turns, seed), &mut text)?;
    let text = String::from_utf8(text).context("the workload is UTF-8")?;
    let tenant = TenantId::default();
    let mut rows = Vec::new();
    for backend in ["redb", "sqlite", "postgres", "redis"] {
        let Some(url) = placement.url(backend, "fork") else {
            continue;
        };
        let forge = open(&url)
            .await
            .map_err(|e| anyhow!("opening {backend}: {e}"))?;
        let report = forge
            .replay_str(&tenant, &text, ReplayOptions::default())
            .await
            .map_err(|e| anyhow!("{backend}: {e}"))?;
        let source = report
            .session
            .ok_or_else(|| anyhow!("{backend}: the replay wrote no session"))?;
        forge.close().await?;
        drop(forge);
        let forge = open(&url)
            .await
            .map_err(|e| anyhow!("opening {backend} again: {e}"))?;
        let logical_before = forge.stats(&tenant).await?.stored.logical_bytes;
        let before = placement.settle(backend).await?;
        let forked = forge
            .fork(&tenant, &source, &ForkPoint::All)
            .await
            .map_err(|e| anyhow!("{backend}: forking: {e}"))?;
        let logical = forge
            .stats(&tenant)
            .await?
            .stored
            .logical_bytes
            .saturating_sub(logical_before);
        forge.close().await?;
        drop(forge);
        let after = placement.settle(backend).await?;
        let row = ForkRow {
            backend: backend.to_owned(),
            messages: forked.messages,
            parts: forked.parts,
            logical_bytes: logical,
            device_bytes: after.saturating_sub(before),
        };
        each(&row);
        rows.push(row);
    }
    Ok((rows, notes))
}

/// The rows as a table.
pub fn table(rows: &[ForkRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "| backend | messages | parts | logical KiB | device KiB | device bytes per message |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} | {:.0} |",
            r.backend,
            r.messages,
            r.parts,
            r.logical_bytes as f64 / 1024.0,
            r.device_bytes as f64 / 1024.0,
            r.per_message()
        );
    }
    out
}
