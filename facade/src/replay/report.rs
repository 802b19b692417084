//! What a replay is told and what it reports.

use forge_core::{SessionId, WriteCounts};
use serde::Serialize;

use crate::error::Error;

/// Where a replay goes and what a new session is called.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Continue this session, or create it with this id. Wins over the input's
    /// `session.id`.
    pub session: Option<SessionId>,
    /// Title of a new session when the input gives none.
    pub default_title: String,
}

impl ReplayOptions {
    /// Options that name a new session's title.
    pub fn titled(title: impl Into<String>) -> Self {
        Self {
            default_title: title.into(),
            ..Self::default()
        }
    }

    /// Continue (or create) this session.
    #[must_use]
    pub fn session(mut self, session: SessionId) -> Self {
        self.session = Some(session);
        self
    }
}

/// What a replay did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayReport {
    /// The session written to (unset only if the replay failed before choosing one).
    pub session: Option<SessionId>,
    /// Its title.
    pub title: String,
    /// Whether the replay created the session (rather than continuing it).
    pub created: bool,
    /// Lines (or stream items) read, including blank and comment lines.
    pub lines: usize,
    /// User messages written.
    pub user_messages: u64,
    /// Assistant messages started.
    pub assistant_messages: u64,
    /// What reached the store during the replay, when the backend was opened with
    /// [`OpenOptions::count_writes`](crate::OpenOptions::count_writes).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub writes: Option<WriteCounts>,
    /// `message.part.delta` events published on the bus (never stored).
    pub deltas: u64,
    /// Stream events accepted and deliberately not persisted (`tool-input-delta`, …).
    pub ignored_events: u64,
    /// The line of the `crash` marker, if the replay stopped at one.
    pub crash_line: Option<usize>,
    /// After a crash: what the store holds open, for `recover`.
    pub left_open: Option<LeftOpen>,
}

/// Open rows left by a crash marker.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LeftOpen {
    /// Assistant messages without `time.completed`.
    pub messages: usize,
    /// Open text/reasoning parts and pending/running tools.
    pub parts: usize,
}

/// A replay that stopped on an error, with what it had done by then (which stays
/// stored).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ReplayError {
    /// What the replay did before it stopped.
    pub report: ReplayReport,
    /// Why it stopped.
    #[source]
    pub error: Error,
}

impl ReplayError {
    /// Whether the input was at fault (rather than the backend).
    pub fn is_input(&self) -> bool {
        self.error.is_input()
    }
}
