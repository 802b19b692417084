//! What a caller configures ([`ProcessorOptions`]) and reads back ([`Outcome`],
//! [`ProcessorStats`], [`Flow`]).

use std::fmt;
use std::sync::Arc;

use crate::id::now_ms;
use crate::model::MessageError;

/// A clock in Unix milliseconds; replaceable so runs on recorded event times are
/// deterministic.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Post-processing applied to a text block's text at `text-end`.
pub type TextHook = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Options of a [`Processor`](super::Processor).
#[derive(Clone)]
pub struct ProcessorOptions {
    /// Source of timestamps.
    pub clock: Clock,
    /// Applied to text (not reasoning) at `text-end`.
    pub text_hook: Option<TextHook>,
    /// Also rewrite the whole part in its own commit on every delta. This is the
    /// write pattern forge-store exists to avoid; it is here so benchmarks can measure
    /// it on the same code path (`forge-store bench`, mode `per-delta`). Off by default.
    pub persist_every_delta: bool,
}

impl Default for ProcessorOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(now_ms),
            text_hook: None,
            persist_every_delta: false,
        }
    }
}

impl fmt::Debug for ProcessorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorOptions")
            .field("text_hook", &self.text_hook.is_some())
            .finish_non_exhaustive()
    }
}

/// How a turn ended, for [`Processor::finalize`](super::Processor::finalize).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The stream finished normally.
    Finished,
    /// The stream failed; the error is recorded on the message.
    Failed(MessageError),
    /// The turn was aborted; `MessageAbortedError` is recorded.
    Aborted,
}

/// What a processor did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessorStats {
    /// Store commits (batches).
    pub commits: u64,
    /// Sync events committed (rows written).
    pub rows: u64,
    /// Deltas published on the bus.
    pub deltas: u64,
    /// Events accepted but deliberately not persisted (`tool-input-delta`, `raw`, …).
    pub ignored: u64,
}

/// Whether the stream goes on after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// More events are expected.
    Continue,
    /// The turn was finalized; further events are rejected.
    Done,
}
