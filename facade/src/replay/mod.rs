//! Replay: feeds a recorded stream through the Processor into a session.
//!
//! The file format is documented in `docs/replay-format.md`. A replay is a parser
//! ([`parse_line`], into the core's items) and the core's [`TurnDriver`], which writes
//! the session's messages and feeds stream events to the Processor of the open
//! assistant message; what is replay's own is the session line, the checks that name a
//! line, the report, and how a replay stops. Replay lines (`session`, `user`,
//! `assistant`, `crash`) frame the conversation; every other line is an AI SDK stream
//! event. The same
//! lines can come from any [`Stream`] ([`Forge::replay_stream`](crate::Forge::replay_stream)):
//! a [`forge_core::StreamEvent`] converts into a [`Line`].
//!
//! Bad input stops the replay at its line: the error names the line and what is wrong,
//! what was committed before stays, and the open assistant message is finalized with
//! the error so nothing is left open — except after a `crash` marker, which stops
//! without finalize on purpose. With [`ReplayOptions::lenient()`] a bad line is skipped
//! instead; every check that can refuse a line runs before the line writes anything,
//! so a skipped line stores nothing.
//!
//! Two things are not bad input unless [`ReplayOptions::strict()`] says so: an event of
//! a type this version does not know (counted and skipped), and an input that ends
//! while an assistant message is open (a producer whose stream threw): the message is
//! closed with an `UnknownError` saying the stream ended early.

use forge_core::model::{ErrorName, MessageError};
use forge_core::turn::{Refs, Timed, TurnDriver};
use forge_core::{Engine, Outcome, Processor, StreamEvent, TenantId};
use futures::{Stream, StreamExt};
use tracing::Instrument;

use crate::error::{classify, Error, Result};
use line::ParsedLine;

mod line;
mod probe;
mod report;
mod surrogates;
mod turns;

pub use line::{
    integer, parse_line, user_part_bodies, AssistantLine, CompactionLine, Line, SessionLine,
    UserLine, LINE_KINDS,
};
pub use report::{
    LeftOpen, LineWarning, ReplayError, ReplayOptions, ReplayReport, SkippedLine, UnknownEvents,
};

/// The agent a user message names when neither its line nor an earlier one does.
pub use forge_core::turn::DEFAULT_AGENT;

/// What an answer the input left open is closed with (as an `UnknownError`). It names
/// no line or id: the same stream gives the same stored history.
pub const ENDED_EARLY: &str = "the stream ended early: the input ended while this assistant \
     message was open; end it with finish, error or abort (or add {\"type\":\"crash\"} to \
     leave it open on purpose)";

/// Feeds lines to one session.
pub(crate) struct Replayer<'a> {
    engine: &'a Engine,
    tenant: &'a TenantId,
    opts: ReplayOptions,
    session_line: Option<SessionLine>,
    /// The session's driver, once the session is open.
    driver: Option<TurnDriver>,
    /// Lines applied (not blank, not a comment, not skipped, not of an unknown type).
    applied: usize,
    report: ReplayReport,
    /// Joins surrogate pairs split between two deltas.
    joiner: surrogates::Joiner,
}

enum Step {
    Applied,
    Unknown(String),
    Crash,
}

/// After a line: go on to the next, or stop the replay with this outcome.
enum Flow {
    Next,
    Stop(Result<()>),
}

/// Where a line came from, for errors: `line N` of a file, `event N` of a stream.
#[derive(Clone, Copy)]
pub(crate) enum Unit {
    Line,
    Event,
}

impl Unit {
    fn at(self, n: usize) -> String {
        match self {
            Self::Line => format!("line {n}"),
            Self::Event => format!("event {n}"),
        }
    }

    fn end(self, n: usize) -> String {
        match self {
            Self::Line => format!("line {n} (end of file)"),
            Self::Event => format!("event {n} (end of stream)"),
        }
    }
}

impl<'a> Replayer<'a> {
    pub(crate) fn new(engine: &'a Engine, tenant: &'a TenantId, opts: ReplayOptions) -> Self {
        Self {
            engine,
            tenant,
            opts,
            session_line: None,
            driver: None,
            applied: 0,
            report: ReplayReport::default(),
            joiner: surrogates::Joiner::default(),
        }
    }

    /// Replays the lines of `text`.
    pub(crate) async fn run_text(self, text: &str) -> Result<ReplayReport, ReplayError> {
        let items = text.lines().map(line::parse_marked);
        self.run(Unit::Line, futures::stream::iter(items)).await
    }

    /// Replays text lines as they arrive; an `Err` item is an input error at its line
    /// (a line too long, a body that broke off) and ends the replay there.
    pub(crate) async fn run_lines<S>(self, lines: S) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = std::result::Result<String, String>>,
    {
        let items = lines.map(|item| item.and_then(|raw| line::parse_marked(&raw)));
        self.run(Unit::Line, items).await
    }

    /// Replays the lines of `stream`.
    pub(crate) async fn run_stream<S>(self, stream: S) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = Line>,
    {
        let items = stream.map(|line| {
            Ok(Some(ParsedLine {
                timed: Timed {
                    t_ms: None,
                    item: line,
                },
                marked: false,
                replaced: 0,
            }))
        });
        self.run(Unit::Event, items).await
    }

    async fn run<S>(mut self, unit: Unit, items: S) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = std::result::Result<Option<ParsedLine>, String>>,
    {
        let span = tracing::info_span!("replay", tenant = %self.tenant);
        let outcome = self.lines(unit, items).instrument(span).await;
        // Every answer is closed by now (finished, failed, or dropped at a crash).
        let stats = self
            .driver
            .as_ref()
            .map(TurnDriver::stats)
            .unwrap_or_default();
        self.report.deltas = stats.deltas;
        self.report.ignored_events = stats.ignored;
        // Done with the session: the next writer (another server's upload) need not wait
        // out the claim's lease.
        if let Some(driver) = self.driver.take() {
            let scope = driver.scope().clone();
            drop(driver);
            let sid = scope.session_id.clone();
            if let Err(e) = self.engine.projector.release_scope(scope).await {
                tracing::warn!(session = %sid, error = %e, "releasing the session's claim");
            }
        }
        match outcome {
            Ok(()) => Ok(self.report),
            Err(error) => Err(ReplayError {
                report: self.report,
                error,
            }),
        }
    }

    async fn lines<S>(&mut self, unit: Unit, items: S) -> Result<()>
    where
        S: Stream<Item = std::result::Result<Option<ParsedLine>, String>>,
    {
        self.check_options()?;
        let mut items = std::pin::pin!(items);
        let mut n = 0;
        while let Some(item) = items.next().await {
            n += 1;
            self.report.lines = n;
            let at = unit.at(n);
            let read = match item {
                Ok(None) => continue,
                Ok(Some(read)) => read,
                Err(msg) => match self.settle(n, &at, Err(Error::input(&at, msg))).await {
                    Flow::Next => continue,
                    Flow::Stop(outcome) => return outcome,
                },
            };
            let surrogates::Joined {
                before,
                line,
                replaced,
            } = self.joiner.push(read.timed.item, read.marked);
            self.lone_halves(n, read.replaced + replaced);
            // Deltas of U+FFFD for halves this line shows will not be completed, then
            // the line itself (none when its delta held only a half).
            for line in before.into_iter().chain(line) {
                let step = self.apply(&at, line).await;
                if let Flow::Stop(outcome) = self.settle(n, &at, step).await {
                    return outcome;
                }
            }
        }
        let flushed = self.joiner.flush();
        if !flushed.before.is_empty() {
            self.lone_halves(n + 1, flushed.replaced);
            let at = unit.end(n + 1);
            for line in flushed.before {
                let step = self.apply(&at, line).await;
                if let Flow::Stop(outcome) = self.settle(n + 1, &at, step).await {
                    return outcome;
                }
            }
        }
        self.end(unit, n).await
    }

    /// What follows the step of line `n` (`at`, for errors).
    async fn settle(&mut self, n: usize, at: &str, step: Result<Step>) -> Flow {
        match step {
            Ok(Step::Applied) => {
                self.applied += 1;
                Flow::Next
            }
            Ok(Step::Unknown(kind)) if self.opts.strict => {
                let e = Error::input(
                    at,
                    format!(
                        "unknown event type {kind:?}: not a replay line (session, user, \
                         assistant, crash) nor an AI SDK stream event this version handles \
                         (strict mode)"
                    ),
                );
                Flow::Stop(Err(self.fail(e).await))
            }
            Ok(Step::Unknown(kind)) => {
                self.count_unknown(n, kind);
                Flow::Next
            }
            Ok(Step::Crash) => Flow::Stop(self.crash(n).await),
            Err(e) if self.opts.lenient && e.is_skippable_input() => {
                self.skip(n, e);
                Flow::Next
            }
            Err(e) => Flow::Stop(Err(self.fail(e).await)),
        }
    }

    /// `count` UTF-16 surrogate halves of line `n` were never completed and became
    /// U+FFFD: a warning.
    fn lone_halves(&mut self, n: usize, count: usize) {
        if count == 0 {
            return;
        }
        let message = format!(
            "{count} lone UTF-16 surrogate half{} (half a character, its other half in no \
             adjacent delta) became U+FFFD",
            if count == 1 { "" } else { "s" }
        );
        tracing::debug!(line = n, %message, "lone surrogate halves replaced");
        self.report.warnings.push(LineWarning { line: n, message });
    }

    /// The input ended after `n` items.
    async fn end(&mut self, unit: Unit, n: usize) -> Result<()> {
        let end = unit.end(n + 1);
        self.close_failed_answer(&end).await?;
        if let Some(p) = self.open() {
            if self.opts.strict {
                let e = Error::input(
                    &end,
                    format!(
                        "the stream ended early: assistant message {} is still open; end it \
                         with finish, error or abort (or add {{\"type\":\"crash\"}} to leave \
                         it open on purpose)",
                        p.message().id
                    ),
                );
                return Err(self.fail(e).await);
            }
            self.close_ended_early(&end).await?;
        }
        if self.applied == 0 && self.driver.is_none() {
            // Nothing to store: no session is created for an empty input.
            let unknown = self.report.unknown_count();
            let skipped = self.report.skipped.len();
            let message = if unknown == 0 && skipped == 0 {
                "the input holds no lines (only blank lines and comments, or nothing)".to_owned()
            } else {
                format!(
                    "the input holds nothing to replay: {unknown} event(s) of unknown types, \
                     {skipped} skipped line(s), and blank lines and comments"
                )
            };
            return Err(Error::input(end, message));
        }
        self.ensure_session(&unit.at(n)).await
    }

    fn check_options(&self) -> Result<()> {
        match &self.opts.session {
            Some(id) => id
                .check()
                .map_err(|e| Error::input_with("options", format!("session id: {e}"), e)),
            None => Ok(()),
        }
    }

    fn count_unknown(&mut self, n: usize, kind: String) {
        tracing::debug!(line = n, kind = %crate::text::clip(&kind), "event of an unknown type skipped");
        match self
            .report
            .unknown_events
            .iter_mut()
            .find(|u| u.kind == kind)
        {
            Some(u) => u.count += 1,
            None => self.report.unknown_events.push(UnknownEvents {
                kind,
                count: 1,
                first_line: n,
            }),
        }
    }

    fn skip(&mut self, n: usize, e: Error) {
        let message = match e {
            Error::Input { message, .. } => message,
            other => other.to_string(),
        };
        tracing::debug!(line = n, %message, "bad line skipped");
        self.report.skipped.push(SkippedLine { line: n, message });
    }

    async fn apply(&mut self, at: &str, line: Line) -> Result<Step> {
        match line {
            Line::Session(s) => self.session_line(at, s)?,
            Line::User(u) => self.user(at, u).await?,
            Line::Assistant(a) => self.assistant(at, a).await?,
            Line::Crash => return Ok(Step::Crash),
            Line::Stream(event) => self.event(at, event).await?,
            Line::Unknown { kind } => return Ok(Step::Unknown(kind)),
        }
        Ok(Step::Applied)
    }

    /// The Processor of the open assistant message.
    fn open(&self) -> Option<&Processor> {
        self.driver.as_ref().and_then(TurnDriver::open)
    }

    /// `f` of the names lines gave their messages (none before the session is open).
    fn with_refs<T>(&self, f: impl FnOnce(&Refs) -> T) -> T {
        match &self.driver {
            Some(d) => f(d.refs()),
            None => f(&Refs::default()),
        }
    }

    fn driver(&mut self, at: &str) -> Result<&mut TurnDriver> {
        self.driver
            .as_mut()
            .ok_or_else(|| Error::input(at, "no session yet"))
    }

    async fn event(&mut self, at: &str, event: StreamEvent) -> Result<()> {
        if self.open().is_none() {
            if self.driver.as_ref().is_some_and(TurnDriver::finished)
                && matches!(event, StreamEvent::Finish { .. })
            {
                // Opening a new answer only to finish it would store an empty assistant
                // message.
                return Err(Error::input(
                    at,
                    "finish does not fit: no assistant message is open (a second finish?)",
                ));
            }
            self.has_user(at).await?;
            if self.opts.lenient {
                // Opening the answer stores it: make sure the event will not be refused.
                let scope = self.scope(at)?;
                // Boxed: a Processor's futures are large, and this one is rarely needed.
                let probe = probe::fits_a_new_answer(
                    self.engine,
                    self.tenant,
                    &scope.session_id,
                    at,
                    &event,
                );
                Box::pin(probe).await?;
            }
            self.start_assistant(at, AssistantLine::default()).await?;
        }
        let kind = event.kind();
        self.driver(at)?
            .event(event)
            .await
            .map_err(|e| classify(at.to_owned(), kind, e))?;
        Ok(())
    }

    /// Closes an answer that already failed (an `error` inside a step, then no
    /// `finish`): the stream moved on, so the error is recorded as the SDK meant it.
    async fn close_failed_answer(&mut self, at: &str) -> Result<()> {
        if let Some(d) = self.driver.as_mut() {
            d.close_failed()
                .await
                .map_err(|e| Error::store(format!("{at}: closing the failed answer"), e))?;
        }
        Ok(())
    }

    /// Closes the answer the input left open with [`ENDED_EARLY`].
    async fn close_ended_early(&mut self, at: &str) -> Result<()> {
        let Some(d) = self.driver.as_mut() else {
            return Ok(());
        };
        let Some(id) = d.open().map(|p| p.message().id.clone()) else {
            return Ok(());
        };
        let error = MessageError::new(ErrorName::Unknown, ENDED_EARLY);
        d.finalize(Outcome::Failed(error)).await.map_err(|e| {
            Error::store(
                format!("{at}: closing assistant message {id}, which the stream left open"),
                e,
            )
        })?;
        tracing::info!(message_id = %id, "the stream ended early; its answer was closed");
        self.report.ended_early = Some(id);
        Ok(())
    }

    fn no_open_assistant(&self, at: &str, what: &str) -> Result<()> {
        match self.open() {
            Some(p) => Err(Error::input(
                at,
                format!(
                    "{what} while assistant message {} is still open; end it with finish, \
                     error or abort first",
                    p.message().id
                ),
            )),
            None => Ok(()),
        }
    }

    async fn crash(&mut self, n: usize) -> Result<()> {
        // Dropped without finalize: the store keeps what the last boundary wrote.
        if let Some(d) = self.driver.as_mut() {
            d.crash();
        }
        self.report.crash_line = Some(n);
        let at = format!("line {n} (crash)");
        self.ensure_session(&at).await?;
        let Some(scope) = self.driver.as_ref().map(TurnDriver::scope) else {
            return Ok(());
        };
        // Only the processor stops: what a group-commit projector holds is committed, as
        // when the command ends, so the count is what the store will hold.
        self.engine
            .projector
            .sync()
            .await
            .map_err(|e| Error::store(format!("{at}: committing what the projector holds"), e))?;
        let open = self
            .engine
            .store
            .open_items(self.tenant, Some(&scope.session_id))
            .await
            .map_err(|e| Error::store(format!("{at}: reading what is left open"), e))?;
        self.report.left_open = Some(LeftOpen {
            messages: open.messages.len(),
            parts: open.parts.len(),
        });
        Ok(())
    }

    /// Finalizes the open assistant message with `e` and returns `e` (with a note if the
    /// finalize failed too).
    async fn fail(&mut self, e: Error) -> Error {
        let mut e = e;
        if let Some(d) = self.driver.as_mut().filter(|d| d.open().is_some()) {
            let error = MessageError::new(ErrorName::Unknown, format!("replay stopped: {e}"));
            if let Err(closing) = d.finalize(Outcome::Failed(error)).await {
                tracing::warn!(error = %closing, "closing the open assistant message failed");
                e = Error::store(
                    format!("{e}; closing the open assistant message also failed"),
                    closing,
                );
            }
        }
        e
    }
}
