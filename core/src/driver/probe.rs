//! Measuring what an instance wrote where it persists.

use async_trait::async_trait;

use crate::error::Result;

/// What an instance wrote between [`WriteProbe::start`] and [`ProbeRun::finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes written where they persist, as the backend counts them; `None` when it
    /// could not be measured (the reason is in `source`).
    pub bytes: Option<u64>,
    /// What was counted: `redb storage backend writes + journal pages synced`.
    pub source: String,
    /// File syncs, where the backend tells.
    pub syncs: Option<u64>,
}

/// Measures the bytes one instance writes, the same way for every backend: start before
/// the work, finish after it.
#[async_trait]
pub trait WriteProbe: Send + Sync {
    /// Reads the counters at the start.
    async fn start(&self) -> Result<Box<dyn ProbeRun>>;
}

/// A started [`WriteProbe`].
#[async_trait]
pub trait ProbeRun: Send {
    /// Settles what is pending (a checkpoint that copies a log into the file; a pool
    /// whose connections report their syncs when they close) and reads what was written
    /// since the start. The instance is not written to afterwards.
    async fn finish(self: Box<Self>) -> Result<Written>;
}

/// An error of `backend` while measuring: `what` was being done, `source` went wrong.
pub fn probe_error(
    backend: &'static str,
    what: impl std::fmt::Display,
    source: impl Into<crate::error::BoxError>,
) -> crate::Error {
    crate::Error::backend(
        backend,
        false,
        Measuring {
            what: what.to_string(),
            source: source.into(),
        },
    )
}

/// What a probe was doing when `source` failed.
#[derive(Debug)]
struct Measuring {
    what: String,
    source: crate::error::BoxError,
}

impl std::fmt::Display for Measuring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Measuring {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
