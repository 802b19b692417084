//! Reports of a benchmark run: a terminal table, a markdown table, JSON, and one SVG
//! with two charts (write amplification per backend, physical bytes against turns).
//!
//! Rows are ordered by workload (fewest sessions first), backend (`memory`, `redb`,
//! `sqlite`, `postgres`, `redis`, then others by name), turns, mode and policy, so the
//! same measurements always give the same report.

mod chart;
mod format;
mod peers;
mod table;

use std::fs;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use crate::{Measurement, Mode, Policy};

pub use chart::{svg, svg_with_peers, write_svg, write_svg_with_peers};
pub use format::{human_bytes, human_rate};
pub use peers::{read_peers, PeerMeasurement};
pub use table::{markdown, table};

/// Title of the write-amplification chart; the chosen workload and T follow it.
pub const WA_CHART_TITLE: &str = "Write amplification by backend";
/// Title of the physical-bytes chart.
pub const BYTES_CHART_TITLE: &str = "Bytes written vs turns (W1, one session)";
/// Title of the chart of forge-store's default path beside the peers.
pub const PEERS_CHART_TITLE: &str =
    "Device bytes / logical bytes vs turns: forge-store (default path) beside the systems users run instead";

/// Backends in report order; unknown backends follow, by name.
const BACKEND_ORDER: [&str; 5] = ["memory", "redb", "sqlite", "postgres", "redis"];
const NONE: &str = "–";
const EMPTY: &str = "no measurements";

// ---------------------------------------------------------------------------
// Ordering

fn backend_rank(backend: &str) -> usize {
    BACKEND_ORDER
        .iter()
        .position(|b| *b == backend)
        .unwrap_or(BACKEND_ORDER.len())
}

fn mode_rank(mode: Mode) -> u8 {
    match mode {
        Mode::Boundary => 0,
        Mode::PerDelta => 1,
    }
}

fn policy_key(policy: Policy) -> (u8, u64) {
    match policy {
        Policy::EveryBoundary => (0, 0),
        Policy::Terminal { window_ms } => (1, window_ms),
    }
}

/// `(mode, policy)` in report order.
type SeriesKey = (u8, (u8, u64));

fn series_key(m: &Measurement) -> SeriesKey {
    (mode_rank(m.mode), policy_key(m.policy))
}

/// `boundary, terminal/10ms`: what distinguishes runs of one backend on one workload.
fn series_label(m: &Measurement) -> String {
    format!("{}, {}", m.mode.as_str(), m.policy.label())
}

fn backend_key(backend: &str) -> (usize, &str) {
    (backend_rank(backend), backend)
}

/// Measurements sorted by workload, filesystem, backend, T, mode, policy.
fn sorted(ms: &[Measurement]) -> Vec<&Measurement> {
    let mut out: Vec<&Measurement> = ms.iter().collect();
    out.sort_by(|a, b| {
        (
            a.sessions,
            &a.workload,
            &a.filesystem,
            backend_key(&a.backend),
            a.turns,
            series_key(a),
        )
            .cmp(&(
                b.sessions,
                &b.workload,
                &b.filesystem,
                backend_key(&b.backend),
                b.turns,
                series_key(b),
            ))
    });
    out
}

// ---------------------------------------------------------------------------
// JSON

/// A measurement as written to JSON, with its write amplification computed.
#[derive(Serialize)]
struct JsonRow<'a> {
    #[serde(flatten)]
    measurement: &'a Measurement,
    write_amplification: Option<f64>,
    device_wa: Option<f64>,
    /// Measured on the default path ([`Measurement::is_default`]).
    default: bool,
    /// Turns per session (the same as `turns`, under the name the docs use).
    #[serde(rename = "T")]
    t: u32,
}

/// Writes the measurements as a pretty JSON array; each object carries the extra
/// computed fields `write_amplification` (engine bytes / logical, `null` when
/// unknown), `device_wa` (`device_bytes` / logical, `null` when the device was not
/// measured),
/// `default` (measured on the default path) and `T` (turns per session).
pub fn write_json(ms: &[Measurement], path: &Path) -> anyhow::Result<()> {
    let rows: Vec<JsonRow<'_>> = ms
        .iter()
        .map(|m| JsonRow {
            measurement: m,
            write_amplification: m.amplification(),
            device_wa: m.device_amplification(),
            default: m.is_default(),
            t: m.turns,
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&rows).context("serializing measurements")?;
    text.push('\n');
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Reads measurements written by [`write_json`]; computed fields are ignored.
pub fn read_json(path: &Path) -> anyhow::Result<Vec<Measurement>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("parsing {} as a JSON array of measurements", path.display()))
}
