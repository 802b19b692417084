//! Peers: the systems a team would run instead of forge-store, measured at the device
//! by the scripts of `scripts/peers/` on the same workloads, read from their JSON so
//! the chart can draw them beside forge-store's default path.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

/// One peer run: a system on one workload and T, its storage on a loop device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerMeasurement {
    /// The system and its storage, with its version: `OpenAI Agents SDK 0.24.0,
    /// SQLiteSession`.
    pub system: String,
    /// `W1` / `W2`.
    pub workload: String,
    /// Sessions (threads) streaming.
    pub sessions: u32,
    /// Turns per session.
    pub turns: u32,
    /// The filesystem of the loop device (`ext4`, `xfs`).
    pub filesystem: String,
    /// Content bytes of the workload, counted as `forge-store bench` counts them.
    pub logical_bytes: u64,
    /// Bytes the device wrote from a sync before the first turn to one after the last.
    pub device_bytes: u64,
    /// The script and arguments that measured it.
    #[serde(default)]
    pub command: String,
}

impl PeerMeasurement {
    /// Device bytes / logical bytes.
    pub fn device_amplification(&self) -> f64 {
        self.device_bytes as f64 / self.logical_bytes as f64
    }
}

/// Reads the JSON array the peer scripts write (`--json FILE`). A row without logical
/// bytes, turns or a name is refused, naming the row.
pub fn read_peers(path: &Path) -> anyhow::Result<Vec<PeerMeasurement>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<PeerMeasurement> = serde_json::from_str(&text).with_context(|| {
        format!(
            "parsing {} as a JSON array of peer measurements",
            path.display()
        )
    })?;
    for (i, p) in rows.iter().enumerate() {
        let what = if p.system.trim().is_empty() {
            Some("an empty `system`")
        } else if p.workload.trim().is_empty() {
            Some("an empty `workload`")
        } else if p.turns == 0 || p.sessions == 0 {
            Some("no turns or no sessions")
        } else if p.logical_bytes == 0 {
            Some("no logical bytes")
        } else {
            None
        };
        if let Some(what) = what {
            bail!(
                "{}: peer row {i} ({:?}) has {what}",
                path.display(),
                p.system
            );
        }
    }
    Ok(rows)
}
