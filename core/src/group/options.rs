//! Options and stats of a [`GroupCommitProjector`](super::GroupCommitProjector).

use std::time::Duration;

/// The default group-commit window: 10 ms.
///
/// Measured on W1×1000 (`forge-store bench`): 10 ms is where most of the gain of
/// grouping is had; a longer window saves little more and delays every terminal
/// boundary by up to the window.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(10);

/// Who decides when a group's window has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// Wall clock: a terminal `commit` waits for its group and returns after the
    /// commit and publish.
    Timer,
    /// Event time: `commit` returns at once; [`GroupCommitProjector::advance`](super::GroupCommitProjector::advance) commits
    /// groups whose window has passed, [`Projector::sync`](crate::projector::Projector::sync) commits everything.
    Manual,
}

/// Options of a [`GroupCommitProjector`](super::GroupCommitProjector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// How long the first terminal batch of a group waits for others.
    pub window: Duration,
    /// Wall-clock timer or event time.
    pub flush: FlushMode,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            flush: FlushMode::Timer,
        }
    }
}

/// What a [`GroupCommitProjector`](super::GroupCommitProjector) did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupCommitStats {
    /// Store transactions (one per group, plus per-session retries after a failure).
    pub commits: u64,
    /// Sync events committed, after coalescing.
    pub rows: u64,
    /// Sync events written to a pending row that was overwritten before its commit.
    pub coalesced: u64,
    /// Terminal batches committed.
    pub terminal_batches: u64,
    /// How long terminal batches waited between arrival and publish, in ms: a
    /// histogram with one bucket per millisecond (the last bucket holds everything
    /// longer).
    pub delay_histogram: Vec<u64>,
}

/// Delays of [`HISTOGRAM_MS`] or more land in the last bucket.
pub(super) const HISTOGRAM_MS: usize = 10_000;

impl GroupCommitStats {
    /// The `q` quantile (0.0–1.0) of the publish delay in ms; `None` before the first
    /// terminal commit.
    pub fn delay_quantile(&self, q: f64) -> Option<u64> {
        let n: u64 = self.delay_histogram.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0;
        for (ms, count) in self.delay_histogram.iter().enumerate() {
            seen += count;
            if seen > rank {
                return Some(ms as u64);
            }
        }
        None
    }

    /// The longest publish delay in ms (capped at the histogram's range).
    pub fn delay_max(&self) -> Option<u64> {
        self.delay_histogram
            .iter()
            .rposition(|&c| c > 0)
            .map(|i| i as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_quantiles_read_the_histogram() {
        let mut stats = GroupCommitStats {
            delay_histogram: vec![0; HISTOGRAM_MS + 1],
            ..GroupCommitStats::default()
        };
        assert_eq!(stats.delay_quantile(0.5), None);
        assert_eq!(stats.delay_max(), None);
        stats.delay_histogram[2] = 3;
        stats.delay_histogram[7] = 1;
        assert_eq!(stats.delay_quantile(0.0), Some(2));
        assert_eq!(stats.delay_quantile(0.5), Some(2));
        assert_eq!(stats.delay_quantile(1.0), Some(7));
        assert_eq!(stats.delay_max(), Some(7));
    }
}
