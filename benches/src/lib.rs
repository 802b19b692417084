//! forge-bench: how many bytes each backend writes for each byte the model streams.
//!
//! - [`workload`]: the W1 workload (docs/backends.md, "Workload W1"; seeded, with event
//!   times) and W1×N (N sessions at once, interleaved in event time).
//! - [`run`]: drives a workload through the Processor on one backend, in one mode and
//!   commit policy, in event time, and measures it.
//! - [`device`]: what the disk wrote: a filesystem on a loop device made for the run,
//!   with throwaway Postgres and Redis servers whose data lives there.
//! - [`probe`]: what each engine physically wrote (process I/O counters, redb's
//!   counting storage backend, SQLite's writer thread, Postgres WAL, Redis memory/AOF).
//! - [`report`]: the terminal table, JSON and the SVG charts.

pub mod device;
pub mod forked;
pub mod large;
pub mod listing;
pub mod probe;
pub mod report;
pub mod run;
pub mod scale;
pub mod search;
pub mod steady;
pub mod suite;
pub mod workload;

use serde::{Deserialize, Serialize};

/// How the stream is persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The Processor as designed: deltas on the bus only, whole blocks at boundaries.
    Boundary,
    /// The common alternative: every delta rewrites its whole part in its own
    /// transaction.
    PerDelta,
}

impl Mode {
    /// `boundary` / `per-delta`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Boundary => "boundary",
            Self::PerDelta => "per-delta",
        }
    }
}

/// Which boundary writes share a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum Policy {
    /// Every boundary commits on its own before it is published
    /// (`DirectProjector`).
    EveryBoundary,
    /// Terminal boundaries commit before they are published; other writes ride along
    /// with their session's next commit; terminal boundaries of many sessions arriving
    /// within `window_ms` share one transaction (`GroupCommitProjector`).
    Terminal {
        /// Group-commit window in event-time milliseconds.
        window_ms: u64,
    },
}

impl Policy {
    /// `every-boundary`, `terminal/0ms`, `terminal/10ms`, …
    pub fn label(self) -> String {
        match self {
            Self::EveryBoundary => "every-boundary".to_owned(),
            Self::Terminal { window_ms } => format!("terminal/{window_ms}ms"),
        }
    }
}

/// p50 / p99 / max of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
    /// Sample size.
    pub n: u64,
}

impl Percentiles {
    /// Percentiles of `values` (sorted in place); `None` when empty.
    pub fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((values.len() as f64 - 1.0) * q).round() as usize;
            values[i.min(values.len() - 1)]
        };
        Some(Self {
            p50: at(0.50),
            p99: at(0.99),
            max: values[values.len() - 1],
            n: values.len() as u64,
        })
    }
}

/// What the engine physically wrote, and how that was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Physical {
    /// Bytes.
    pub bytes: u64,
    /// What was counted, e.g. `redb storage backend writes`, `sqlite writer thread
    /// wchar`, `postgres WAL (pg_wal_lsn_diff of the insert LSN)`, `redis MEMORY USAGE`.
    pub source: String,
}

/// One measured run: a backend, a mode and policy, a workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// `memory`, `redb`, `sqlite`, `postgres`, `redis`.
    pub backend: String,
    /// Boundary or per-delta.
    pub mode: Mode,
    /// Commit policy.
    pub policy: Policy,
    /// `W1`, `W1x64`, `W1x1000`, or `input:FILE`.
    pub workload: String,
    /// Sessions streaming.
    pub sessions: u32,
    /// Turns per session.
    pub turns: u32,
    /// Content bytes the model streamed and the user typed.
    pub logical_bytes: u64,
    /// JSON bytes of the sync events handed to the store.
    pub handed_bytes: u64,
    /// Rows written (sync events applied).
    pub rows: u64,
    /// Store transactions.
    pub commits: u64,
    /// fsyncs, where the engine tells.
    pub fsyncs: Option<u64>,
    /// What the engine physically wrote.
    pub physical: Option<Physical>,
    /// The process's `write_bytes` from /proc/self/io over the run (block layer).
    pub process_write_bytes: Option<u64>,
    /// Deltas streamed.
    pub deltas: u64,
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Delta → subscriber latency, microseconds (wall clock).
    pub latency_us: Option<Percentiles>,
    /// Event-time delay a terminal boundary waited for its group commit, ms.
    pub publish_delay_ms: Option<Percentiles>,
    /// The backend's URL options of the run (`journal=off`, `page_size=4096`, …);
    /// empty for the backend's defaults.
    #[serde(default)]
    pub options: String,
    /// The filesystem of the device the run's files were on (`ext4`, `xfs`); `None`
    /// when the device was not measured.
    #[serde(default)]
    pub filesystem: Option<String>,
    /// Bytes the device wrote over the run: from a sync before the first write to a
    /// sync after the last, the engine's final checkpoint included.
    #[serde(default)]
    pub device_bytes: Option<u64>,
}

/// The group-commit window of the default path (`Engine::new`, `open()`), ms.
pub const DEFAULT_WINDOW_MS: u64 = 10;

impl Measurement {
    /// Whether this run measured what a user gets by default: boundary projection with
    /// the group-commit projector's default policy (terminal boundaries, 10 ms window)
    /// and the backend's default options.
    pub fn is_default(&self) -> bool {
        self.mode == Mode::Boundary
            && self.policy
                == (Policy::Terminal {
                    window_ms: DEFAULT_WINDOW_MS,
                })
            && self.options.is_empty()
    }

    /// Device bytes / logical bytes.
    pub fn device_amplification(&self) -> Option<f64> {
        let bytes = self.device_bytes?;
        (self.logical_bytes > 0).then(|| bytes as f64 / self.logical_bytes as f64)
    }

    /// Engine (physical) bytes / logical bytes.
    pub fn amplification(&self) -> Option<f64> {
        let p = self.physical.as_ref()?;
        (self.logical_bytes > 0).then(|| p.bytes as f64 / self.logical_bytes as f64)
    }

    /// Bytes handed to the backend / logical bytes.
    pub fn handed_amplification(&self) -> f64 {
        if self.logical_bytes == 0 {
            0.0
        } else {
            self.handed_bytes as f64 / self.logical_bytes as f64
        }
    }

    /// Deltas per second of wall time.
    pub fn deltas_per_s(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.deltas as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}
