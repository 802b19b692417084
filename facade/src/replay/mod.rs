//! Replay: feeds a recorded stream through the Processor into a session.
//!
//! The file format is documented in `docs/replay-format.md`. Replay lines (`session`,
//! `user`, `assistant`, `crash`) frame the conversation; every other line is an AI SDK
//! stream event handled by the [`Processor`] of the open assistant message. The same
//! lines can come from any [`Stream`] ([`Forge::replay_stream`](crate::Forge::replay_stream)):
//! a [`forge_core::StreamEvent`] converts into a [`Line`].
//!
//! Bad input stops the replay at its line: the error names the line and what is wrong,
//! what was committed before stays, and the open assistant message is finalized with
//! the error so nothing is left open — except after a `crash` marker, which stops
//! without finalize on purpose.

use std::collections::HashMap;

use forge_core::id::{now_ms, PartId};
use forge_core::model::{ErrorName, MessageBody, MessageError, ModelRef};
use forge_core::processor::{assistant_message, user_message};
use forge_core::projector::Scope;
use forge_core::{
    Engine, Flow, MessageId, Outcome, Part, Processor, ProcessorOptions, ProcessorStats, Session,
    SessionId, StreamEvent, TenantId,
};
use futures::{Stream, StreamExt};
use tracing::Instrument;

use crate::error::{classify, Error, Result};

mod line;
mod report;

pub use line::{
    parse_line, user_part_bodies, AssistantLine, CompactionLine, Line, SessionLine, UserLine,
};
pub use report::{LeftOpen, ReplayError, ReplayOptions, ReplayReport};

/// The agent a user message names when its line does not.
pub const DEFAULT_AGENT: &str = "build";

struct UserCtx {
    id: MessageId,
    agent: String,
    model: Option<ModelRef>,
}

/// Feeds lines to one session.
pub(crate) struct Replayer<'a> {
    engine: &'a Engine,
    tenant: &'a TenantId,
    opts: ReplayOptions,
    session_line: Option<SessionLine>,
    scope: Option<Scope>,
    last_user: Option<UserCtx>,
    refs: HashMap<String, MessageId>,
    open: Option<Processor>,
    /// The last stream event finished an answer (and nothing opened another since).
    finished: bool,
    stats: ProcessorStats,
    report: ReplayReport,
}

enum Step {
    Continue,
    Crash,
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
            scope: None,
            last_user: None,
            refs: HashMap::new(),
            open: None,
            finished: false,
            stats: ProcessorStats::default(),
            report: ReplayReport::default(),
        }
    }

    /// Replays the lines of `text`.
    pub(crate) async fn run_text(self, text: &str) -> Result<ReplayReport, ReplayError> {
        let items = text
            .lines()
            .map(|raw| parse_line(raw).map(|l| l.map(|(line, _t)| line)));
        self.run(Unit::Line, futures::stream::iter(items)).await
    }

    /// Replays the lines of `stream`.
    pub(crate) async fn run_stream<S>(self, stream: S) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = Line>,
    {
        self.run(Unit::Event, stream.map(|l| Ok(Some(l)))).await
    }

    async fn run<S>(mut self, unit: Unit, items: S) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = std::result::Result<Option<Line>, String>>,
    {
        let span = tracing::info_span!("replay", tenant = %self.tenant);
        let outcome = self.lines(unit, items).instrument(span).await;
        self.report.deltas = self.stats.deltas;
        self.report.ignored_events = self.stats.ignored;
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
        S: Stream<Item = std::result::Result<Option<Line>, String>>,
    {
        let mut items = std::pin::pin!(items);
        let mut n = 0;
        let mut seen = 0;
        while let Some(item) = items.next().await {
            n += 1;
            self.report.lines = n;
            let at = unit.at(n);
            let step = match item {
                Ok(None) => continue,
                Ok(Some(line)) => {
                    seen += 1;
                    self.apply(&at, line).await
                }
                Err(msg) => Err(Error::input(at, msg)),
            };
            match step {
                Ok(Step::Continue) => {}
                Ok(Step::Crash) => return self.crash(n).await,
                Err(e) => return Err(self.fail(e).await),
            }
        }
        self.close_failed_answer(&unit.end(n + 1)).await?;
        if let Some(p) = &self.open {
            let e = Error::input(
                unit.end(n + 1),
                format!(
                    "the stream ended early: assistant message {} is still open; end it with \
                     finish, error or abort (or add {{\"type\":\"crash\"}} to leave it open \
                     on purpose)",
                    p.message().id
                ),
            );
            return Err(self.fail(e).await);
        }
        if seen == 0 {
            // Nothing to store: no session is created for an empty input.
            return Err(Error::input(
                unit.end(n + 1),
                "the input holds no lines (only blank lines and comments, or nothing)",
            ));
        }
        self.ensure_session(&unit.at(n)).await
    }

    async fn apply(&mut self, at: &str, line: Line) -> Result<Step> {
        match line {
            Line::Session(s) => {
                if self.scope.is_some() || self.session_line.is_some() {
                    return Err(Error::input(
                        at,
                        "a session line must come first, and only once",
                    ));
                }
                self.session_line = Some(s);
            }
            Line::User(u) => {
                self.ensure_session(at).await?;
                self.close_failed_answer(at).await?;
                self.no_open_assistant(at, "a user message")?;
                self.user(at, u).await?;
            }
            Line::Assistant(a) => {
                self.ensure_session(at).await?;
                self.close_failed_answer(at).await?;
                self.no_open_assistant(at, "a new assistant message")?;
                self.start_assistant(at, a).await?;
            }
            Line::Crash => return Ok(Step::Crash),
            Line::Stream(event) => {
                self.ensure_session(at).await?;
                if self.open.is_none() {
                    if self.finished && matches!(event, StreamEvent::Finish { .. }) {
                        // Opening a new answer only to finish it would store an empty
                        // assistant message.
                        return Err(Error::input(
                            at,
                            "finish does not fit: no assistant message is open (a second \
                             finish?)",
                        ));
                    }
                    self.start_assistant(at, AssistantLine::default()).await?;
                }
                let kind = event.kind();
                let Some(p) = self.open.as_mut() else {
                    return Err(Error::input(at, "no assistant message is open"));
                };
                let flow = p
                    .handle(event)
                    .await
                    .map_err(|e| classify(at.to_owned(), kind, e))?;
                if flow == Flow::Done {
                    self.close_processor();
                    self.finished = true;
                }
            }
        }
        Ok(Step::Continue)
    }

    /// Closes an answer that already failed (an `error` inside a step, then no
    /// `finish`): the stream moved on, so the error is recorded as the SDK meant it.
    async fn close_failed_answer(&mut self, at: &str) -> Result<()> {
        let Some(p) = self.open.as_mut() else {
            return Ok(());
        };
        if !p.awaits_finish_after_error() {
            return Ok(());
        }
        p.finalize(Outcome::Finished)
            .await
            .map_err(|e| Error::store(format!("{at}: closing the failed answer"), e))?;
        self.close_processor();
        Ok(())
    }

    fn no_open_assistant(&self, at: &str, what: &str) -> Result<()> {
        match &self.open {
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

    fn close_processor(&mut self) {
        if let Some(p) = self.open.take() {
            let s = p.stats();
            self.stats.commits += s.commits;
            self.stats.rows += s.rows;
            self.stats.deltas += s.deltas;
            self.stats.ignored += s.ignored;
        }
    }

    async fn crash(&mut self, n: usize) -> Result<()> {
        // Dropped without finalize: the store keeps what the last boundary wrote.
        self.close_processor();
        self.report.crash_line = Some(n);
        let at = format!("line {n} (crash)");
        self.ensure_session(&at).await?;
        let Some(scope) = &self.scope else {
            return Ok(());
        };
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
        if let Some(p) = self.open.as_mut() {
            let error = MessageError::new(ErrorName::Unknown, format!("replay stopped: {e}"));
            if let Err(closing) = p.finalize(Outcome::Failed(error)).await {
                tracing::warn!(error = %closing, "closing the open assistant message failed");
                e = Error::store(
                    format!("{e}; closing the open assistant message also failed"),
                    closing,
                );
            }
        }
        self.close_processor();
        e
    }

    fn scope(&self, at: &str) -> Result<Scope> {
        self.scope
            .clone()
            .ok_or_else(|| Error::input(at, "no session yet"))
    }

    async fn ensure_session(&mut self, at: &str) -> Result<()> {
        if self.scope.is_some() {
            return Ok(());
        }
        let line = self.session_line.take().unwrap_or_default();
        let wanted = match (&self.opts.session, line.id) {
            (Some(id), _) => Some(id.clone()),
            (None, Some(id)) if id.trim().is_empty() => {
                return Err(Error::input(at, "session line: empty `id`"))
            }
            (None, Some(id)) => Some(SessionId::from(id)),
            (None, None) => None,
        };
        if let Some(id) = &wanted {
            id.check().map_err(|e| Error::Input {
                at: at.to_owned(),
                message: format!("session id: {e}"),
                source: Some(Box::new(e)),
            })?;
        }
        let engine = self.engine;
        let store_err = |e| Error::store(format!("{at}: opening the session"), e);
        if let Some(id) = &wanted {
            if let Some(state) = engine
                .store
                .session(self.tenant, id)
                .await
                .map_err(store_err)?
            {
                self.scope = Some(engine.scope(self.tenant, id).await.map_err(store_err)?);
                self.report.session = Some(id.clone());
                self.report.title = state.info.title;
                self.last_user = last_user_in_store(engine, self.tenant, id)
                    .await
                    .map_err(store_err)?;
                return Ok(());
            }
        }
        let title = line
            .title
            .unwrap_or_else(|| self.opts.default_title.clone());
        let mut session = Session::new(title, now_ms());
        if let Some(id) = wanted {
            session.id = id;
        }
        self.report.session = Some(session.id.clone());
        self.report.title.clone_from(&session.title);
        self.report.created = true;
        let scope = engine
            .put_session(self.tenant, session)
            .await
            .map_err(|e| classify(at.to_owned(), "the session line", e))?;
        self.scope = Some(scope);
        Ok(())
    }

    fn resolve(&self, at: &str, reference: &str) -> Result<MessageId> {
        match reference.strip_prefix('@') {
            Some(name) => self.refs.get(name).cloned().ok_or_else(|| {
                Error::input(
                    at,
                    format!(
                        "compaction.tail_start_id: @{name} names no earlier line (give a user \
                         line \"ref\":\"{name}\")"
                    ),
                )
            }),
            None => Ok(MessageId::from(reference)),
        }
    }

    fn remember(&mut self, at: &str, label: Option<String>, id: &MessageId) -> Result<()> {
        if let Some(name) = label {
            if self.refs.contains_key(&name) {
                return Err(Error::input(
                    at,
                    format!("ref {name:?} is already used by an earlier line"),
                ));
            }
            self.refs.insert(name, id.clone());
        }
        Ok(())
    }

    async fn user(&mut self, at: &str, mut u: UserLine) -> Result<()> {
        let scope = self.scope(at)?;
        let session_id = scope.session_id.clone();
        let tail_start_id = u
            .compaction
            .as_ref()
            .and_then(|c| c.tail_start_id.as_deref())
            .map(|r| self.resolve(at, r))
            .transpose()?;
        let bodies = user_part_bodies(&mut u, tail_start_id).map_err(|m| Error::input(at, m))?;
        let previous = self.last_user.as_ref();
        let agent = u
            .agent
            .or_else(|| previous.map(|p| p.agent.clone()))
            .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
        let model = u.model.or_else(|| previous.and_then(|p| p.model.clone()));
        let mut message = user_message(session_id.clone(), &agent, now_ms());
        if let MessageBody::User(m) = &mut message.body {
            m.model.clone_from(&model);
        }
        let id = message.id.clone();
        let parts = bodies
            .into_iter()
            .map(|body| Part {
                id: PartId::generate(),
                session_id: session_id.clone(),
                message_id: id.clone(),
                body,
            })
            .collect();
        self.remember(at, u.label, &id)?;
        self.engine
            .put_message(&scope, message, parts)
            .await
            .map_err(|e| classify(at.to_owned(), "the user message", e))?;
        self.report.user_messages += 1;
        self.finished = false;
        self.last_user = Some(UserCtx { id, agent, model });
        Ok(())
    }

    async fn start_assistant(&mut self, at: &str, a: AssistantLine) -> Result<()> {
        let Some(user) = &self.last_user else {
            return Err(Error::input(
                at,
                "no user message to answer: add a {\"type\":\"user\",\"text\":…} line before \
                 the model's stream",
            ));
        };
        let (provider, model) = match (&a.provider_id, &a.model_id, &user.model) {
            (Some(p), Some(m), _) => (p.clone(), m.clone()),
            (p, m, Some(u)) => (
                p.clone().unwrap_or_else(|| u.provider_id.clone()),
                m.clone().unwrap_or_else(|| u.model_id.clone()),
            ),
            (p, m, None) => (
                p.clone().unwrap_or_else(|| "unknown".to_owned()),
                m.clone().unwrap_or_else(|| "unknown".to_owned()),
            ),
        };
        let scope = self.scope(at)?;
        let mut message = assistant_message(
            scope.session_id.clone(),
            user.id.clone(),
            &provider,
            &model,
            now_ms(),
        );
        if let Some(fields) = message.as_assistant_mut() {
            fields.agent = Some(a.agent.unwrap_or_else(|| user.agent.clone()));
            fields.summary = a.summary;
        }
        self.remember(at, a.label, &message.id)?;
        let p = self
            .engine
            .processor(scope, message, ProcessorOptions::default())
            .await
            .map_err(|e| classify(at.to_owned(), "the assistant message", e))?;
        self.report.assistant_messages += 1;
        self.open = Some(p);
        self.finished = false;
        Ok(())
    }
}

/// The newest user message stored in a session, for continuing it.
async fn last_user_in_store(
    engine: &Engine,
    tenant: &TenantId,
    session: &SessionId,
) -> forge_core::Result<Option<UserCtx>> {
    let mut cursor = None;
    loop {
        let page = engine
            .history(tenant, session, cursor.as_ref(), 100)
            .await?;
        for m in page.messages.iter().rev() {
            if let MessageBody::User(u) = &m.info.body {
                return Ok(Some(UserCtx {
                    id: m.info.id.clone(),
                    agent: u.agent.clone(),
                    model: u.model.clone(),
                }));
            }
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => return Ok(None),
        }
    }
}
