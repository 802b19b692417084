//! Progress of a run, for a caller that draws it (a progress bar, a log line). The
//! suite itself never prints or draws.

use crate::report::PropertyResult;
use crate::Property;

/// One step of a run, in this order: one [`ProgressEvent::Planned`], then for each
/// planned property a [`ProgressEvent::Started`] followed by its
/// [`ProgressEvent::Finished`]. Properties run one at a time, in the planned order.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum ProgressEvent<'a> {
    /// The run will run these properties (those the config selects), in this order;
    /// `properties.len()` is the number of `Started` / `Finished` pairs to come. Sent
    /// before the backend is first opened.
    Planned {
        /// The properties, in the order they will run.
        properties: &'a [Property],
    },
    /// `property` starts.
    Started {
        /// Which property.
        property: Property,
        /// Its position in the plan, from 0.
        index: usize,
    },
    /// `property` ended; its result is the one the report will hold.
    Finished {
        /// Which property.
        property: Property,
        /// Its position in the plan, from 0.
        index: usize,
        /// How it ended (`result.outcome`: passed, failed, skipped or an expected
        /// divergence), with its case count and time.
        result: &'a PropertyResult,
    },
}

/// Receives a run's [`ProgressEvent`]s.
///
/// Called on the thread that runs the suite (for [`crate::run_async_with_progress`],
/// not the caller's), synchronously: the next property waits until `event` returns, so
/// it should be quick. Any `Fn(ProgressEvent<'_>) + Send + Sync` closure is a
/// `Progress`.
pub trait Progress: Send + Sync {
    /// One event of the run.
    fn event(&self, event: ProgressEvent<'_>);
}

impl<F: Fn(ProgressEvent<'_>) + Send + Sync> Progress for F {
    fn event(&self, event: ProgressEvent<'_>) {
        self(event);
    }
}

/// A [`Progress`] that ignores every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn event(&self, _: ProgressEvent<'_>) {}
}
