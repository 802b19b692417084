//! Large values stored once, measured at the device: sessions that read the same
//! 100 KB file ten times each, with every value in its row (`blobs=off`) and with large
//! values stored once (the default), on every backend, side by side.
//!
//! A session is four W1 turns (twelve tool calls) whose first ten tool results are the
//! same 100 KB file, a different file per session (so what is saved is the repeats
//! within a session, not sharing across sessions). Sessions are replayed one after the
//! other through the engine (group commit, as `replay` runs them). Per backend and mode:
//! the bytes the device wrote (from a settled device before to a settled device after
//! the store was closed), the logical bytes of the rows with whole values (the
//! `blobs=off` run's [`forge_store::Store::stats`]), and what the run added to what the
//! backend occupies ([`crate::steady::disk_bytes`]; a Redis server's is the whole
//! server's, the bus's streams included).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use forge_store::{open, ReplayOptions, StreamEvent, TenantId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::device::{Filesystem, Placement};
use crate::steady::{disk_bytes, with_param};
use crate::workload::{w1, write_jsonl, Item, Script};

/// Bytes of the file every session reads.
pub const FILE_BYTES: usize = 100_000;
/// How often a session reads it.
pub const READS: usize = 10;

/// One backend in one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LargeRow {
    /// `redb`, `sqlite`, `postgres`, `redis`.
    pub backend: String,
    /// `in rows` or `stored once`.
    pub mode: String,
    /// Sessions written.
    pub sessions: u32,
    /// Logical bytes of the rows with whole values.
    pub logical_bytes: u64,
    /// What the device wrote.
    pub device_bytes: u64,
    /// `device_bytes / logical_bytes`.
    pub amplification: f64,
    /// What the run added to what the backend occupies (its files, relations or
    /// server memory, [`crate::steady::disk_bytes`]).
    pub disk_bytes: u64,
    /// Of what kind.
    pub disk_kind: String,
}

/// A session of the workload: W1's four turns with its first ten tool results
/// replaced by the same [`FILE_BYTES`] file, drawn from `seed`.
pub fn session(seed: u64) -> Script {
    let mut script = w1(4, seed);
    let file = file(seed);
    let mut reads = 0;
    for timed in &mut script.items {
        if let Item::Stream(StreamEvent::ToolResult { output, .. }) = &mut timed.item {
            if reads < READS {
                *output = Value::String(file.clone());
                reads += 1;
            }
        }
    }
    script
}

/// A file's text: letters drawn from `seed` (which no engine compresses much).
fn file(seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..FILE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + u8::try_from(x % 26).unwrap_or(0))
        })
        .collect()
}

/// Runs the workload on every backend the device can host (redb, SQLite, and a
/// throwaway Postgres and Redis on it), in both modes; `each` sees every row as it is
/// measured. Returns the rows and notes saying what was made or left out.
///
/// # Errors
/// When the device cannot be made, a server fails to start, or a write fails.
pub async fn run(
    fs: Filesystem,
    dir: &Path,
    sessions: u32,
    seed: u64,
    each: impl FnMut(&LargeRow),
) -> Result<(Vec<LargeRow>, Vec<String>)> {
    let mut texts = Vec::new();
    for s in 0..sessions {
        let mut text = Vec::new();
        write_jsonl(&session(seed ^ u64::from(s)), &mut text)?;
        texts.push(String::from_utf8(text).context("the workload is UTF-8")?);
    }
    let modes = [
        Mode {
            name: "in rows",
            tag: "off",
            param: Some(("blobs", "off")),
            logical: true,
        },
        Mode {
            name: "stored once",
            tag: "once",
            param: None,
            logical: false,
        },
    ];
    compare(fs, dir, &texts, &modes, each).await
}

/// One way of opening the backends in [`compare`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mode {
    /// Its name in the rows.
    pub name: &'static str,
    /// A short tag for the files and databases of the run.
    pub tag: &'static str,
    /// The URL parameter that sets the mode, if any.
    pub param: Option<(&'static str, &'static str)>,
    /// The rows' logical bytes are measured in this mode (the last such one counts).
    pub logical: bool,
}

/// Replays `texts` (JSONL sessions) on every backend the device can host, once per
/// mode, measuring what the device wrote and what the backend occupies.
pub(crate) async fn compare(
    fs: Filesystem,
    dir: &Path,
    texts: &[String],
    modes: &[Mode],
    mut each: impl FnMut(&LargeRow),
) -> Result<(Vec<LargeRow>, Vec<String>)> {
    let (placement, notes) = Placement::create(fs, dir, true, true).await?;
    let sessions = u32::try_from(texts.len()).unwrap_or(u32::MAX);
    let mut rows = Vec::new();
    for backend in ["redb", "sqlite", "postgres", "redis"] {
        let mut logical = 0;
        let first = rows.len();
        for mode in modes {
            let Some(base) = placement.url(backend, &format!("{}_{}", mode.tag, sessions)) else {
                continue;
            };
            let url = match mode.param {
                Some((k, v)) => with_param(&base, k, v),
                None => base,
            };
            let before = placement.settle(backend).await?;
            let forge = open(&url)
                .await
                .map_err(|e| anyhow!("opening {backend}: {e}"))?;
            let tenant = TenantId::default();
            // A server's footprint is the whole server's (every mode's keys, the bus):
            // what the run added is the difference.
            let (disk_before, _) = disk_bytes(&forge).await?;
            for (s, text) in texts.iter().enumerate() {
                forge
                    .replay_str(&tenant, text, ReplayOptions::default())
                    .await
                    .map_err(|e| anyhow!("{backend} {}, session {s}: {e}", mode.name))?;
            }
            forge.flush().await?;
            if mode.logical {
                logical = forge.stats(&tenant).await?.stored.logical_bytes;
            }
            let (disk, kind) = disk_bytes(&forge).await?;
            forge.close().await?;
            let after = placement.settle(backend).await?;
            rows.push(LargeRow {
                backend: backend.to_owned(),
                mode: mode.name.to_owned(),
                sessions,
                logical_bytes: 0,
                device_bytes: after.saturating_sub(before),
                amplification: 0.0,
                disk_bytes: disk.saturating_sub(disk_before),
                disk_kind: kind.to_owned(),
            });
        }
        for row in &mut rows[first..] {
            row.logical_bytes = logical;
            row.amplification = if logical > 0 {
                row.device_bytes as f64 / logical as f64
            } else {
                0.0
            };
            each(row);
        }
    }
    Ok((rows, notes))
}

/// The rows as a table, with the ratio of the two modes per backend.
pub fn table(rows: &[LargeRow]) -> String {
    table_of(rows, "values")
}

/// The rows as a table whose mode column is headed `mode`.
pub(crate) fn table_of(rows: &[LargeRow], mode: &str) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut out = format!(
        "| backend | {mode} | logical MiB | device MiB | amplification | added on disk MiB |\n\
         |---|---|---:|---:|---:|---:|\n"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} ({}) |",
            r.backend,
            r.mode,
            mib(r.logical_bytes),
            mib(r.device_bytes),
            r.amplification,
            mib(r.disk_bytes),
            r.disk_kind
        );
    }
    out
}
