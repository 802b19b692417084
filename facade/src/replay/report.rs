//! What a replay is told and what it reports.

use std::fmt::Write as _;

use forge_core::{MessageId, SessionId, WriteCounts};
use serde::Serialize;

use crate::clip::clip;
use crate::error::Error;

/// Where a replay goes, what a new session is called, and what the replay forgives.
///
/// `strict` and `lenient` answer different questions and combine: `strict` is about
/// input this version does not understand (an unknown event type) or that is
/// incomplete (the stream ended with its answer open), `lenient` about lines that are
/// wrong. Both together: unknown types and an early end stop the replay, bad lines are
/// skipped.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Continue this session, or create it with this id. Wins over the input's
    /// `session.id`.
    pub session: Option<SessionId>,
    /// Title of a new session when the input gives none.
    pub default_title: String,
    /// Stop at an event of an unknown type, and at an input that ends while an
    /// assistant message is open, with an [`Error::Input`] naming the line. Off: the
    /// unknown event is counted in [`ReplayReport::unknown_events`], and the open
    /// message is closed with an `UnknownError` saying the stream ended early
    /// ([`ReplayReport::ended_early`]).
    pub strict: bool,
    /// Skip a line that is bad input — malformed JSON, a known type with bad fields, an
    /// event that does not fit the stream (the Processor's `InvalidInput`: a delta for
    /// a block never started, a second finish, a result for an unknown call, …) — and
    /// go on; each is listed in [`ReplayReport::skipped`]. A skipped line stores
    /// nothing. A store failure, and a conflict with what the store holds, still stop
    /// the replay.
    pub lenient: bool,
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

    /// Unknown event types and an input that ends with its answer open are errors
    /// (see [`ReplayOptions::strict`](#structfield.strict)).
    #[must_use]
    pub fn strict(mut self, yes: bool) -> Self {
        self.strict = yes;
        self
    }

    /// Bad lines are skipped and reported (see
    /// [`ReplayOptions::lenient`](#structfield.lenient)).
    #[must_use]
    pub fn lenient(mut self, yes: bool) -> Self {
        self.lenient = yes;
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
    /// Events of types this version does not know, skipped: one entry per type, in the
    /// order they first appeared.
    pub unknown_events: Vec<UnknownEvents>,
    /// Lines skipped as bad input ([`ReplayOptions::lenient()`]), in order.
    pub skipped: Vec<SkippedLine>,
    /// Lines stored with something replaced, in order: UTF-16 surrogate halves that
    /// were never completed (a pair split between two deltas is joined; a half with no
    /// other half becomes U+FFFD).
    pub warnings: Vec<LineWarning>,
    /// The assistant message that was still open when the input ended (no `finish`,
    /// `error` or `abort`, no `crash` marker): what a producer whose stream threw
    /// leaves. It was closed with an `UnknownError` saying the stream ended early.
    pub ended_early: Option<MessageId>,
}

impl ReplayReport {
    /// Events of unknown types, all types together.
    pub fn unknown_count(&self) -> u64 {
        self.unknown_events.iter().map(|u| u.count).sum()
    }

    /// One line summing up the unknown event types, e.g. `3 events of types this
    /// version does not know were skipped: "tool-approval-request" ×2 (first at line
    /// 12), "custom" ×1 (first at line 20)`; `None` when there were none. Names are
    /// clipped, and at most five types are listed.
    pub fn unknown_summary(&self) -> Option<String> {
        const LISTED: usize = 5;
        const NAME_MAX: usize = 60;
        if self.unknown_events.is_empty() {
            return None;
        }
        let n = self.unknown_count();
        let mut text = format!(
            "{n} event{} of {} this version does not know {} skipped:",
            if n == 1 { "" } else { "s" },
            if self.unknown_events.len() == 1 {
                "a type"
            } else {
                "types"
            },
            if n == 1 { "was" } else { "were" },
        );
        for (i, u) in self.unknown_events.iter().take(LISTED).enumerate() {
            let name = match u.kind.char_indices().nth(NAME_MAX) {
                Some((end, _)) => format!("{}…", &u.kind[..end]),
                None => u.kind.clone(),
            };
            text.push_str(if i == 0 { " " } else { ", " });
            text.push_str(&clip(&format!(
                "{name:?} ×{} (first at line {})",
                u.count, u.first_line
            )));
        }
        if self.unknown_events.len() > LISTED {
            let more = self.unknown_events.len() - LISTED;
            let _ = write!(text, ", and {more} more types");
        }
        Some(text)
    }
}

/// The events of one unknown type.
#[derive(Clone, Debug, Serialize)]
pub struct UnknownEvents {
    /// The `type`, as given.
    pub kind: String,
    /// How many events had it.
    pub count: u64,
    /// The line (or, for a stream, the event) number of the first.
    pub first_line: usize,
}

/// A line a lenient replay skipped.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedLine {
    /// Its number (of the event, for a stream).
    pub line: usize,
    /// What was wrong with it (clipped, one line).
    pub message: String,
}

/// A line stored with something replaced.
#[derive(Clone, Debug, Serialize)]
pub struct LineWarning {
    /// Its number (of the event, for a stream; the one after the last at the end).
    pub line: usize,
    /// What was replaced.
    pub message: String,
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
