//! `replay`: feeds a recorded stream (JSONL) through the Processor into a session.
//!
//! The format is documented in `docs/replay-format.md`. Replay lines (`session`,
//! `user`, `assistant`, `crash`) frame the conversation; every other line is an AI SDK
//! v5 stream event handled by the [`Processor`] of the open assistant message.
//!
//! Bad input stops the replay at its line: the error names the line and what is wrong,
//! what was committed before stays, and the open assistant message is finalized with
//! the error so nothing is left open — except after a `crash` marker, which stops
//! without finalize on purpose.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context, Result};
use forge_core::id::{now_ms, PartId};
use forge_core::model::{
    CompactionPart, ErrorName, JsonMap, MessageBody, MessageError, ModelRef, PartBody, TextPart,
};
use forge_core::processor::{assistant_message, user_message};
use forge_core::projector::Scope;
use forge_core::{
    Engine, Flow, MessageId, Outcome, Part, Processor, ProcessorOptions, ProcessorStats, Session,
    SessionId, TenantId,
};
use serde::Serialize;
use serde_json::Value;

mod line;

pub use line::{parse_line, AssistantLine, Line, SessionLine, UserLine};

/// The agent a user message names when its line does not.
pub const DEFAULT_AGENT: &str = "build";

/// Where a replay goes and what a new session is called.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// `--session`: continue this session, or create it with this id. Wins over the
    /// file's `session.id`.
    pub session: Option<SessionId>,
    /// Title of a new session when the file gives none.
    pub default_title: String,
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
    /// Lines read, including blank and comment lines.
    pub lines: usize,
    /// User messages written.
    pub user_messages: u64,
    /// Assistant messages started.
    pub assistant_messages: u64,
    /// Store transactions (batches).
    pub commits: u64,
    /// Rows written (sync events applied).
    pub rows: u64,
    /// JSON bytes of those rows: the bytes handed to the store.
    pub bytes: u64,
    /// `part.delta` events published on the bus (never stored).
    pub deltas: u64,
    /// Stream events accepted and deliberately not persisted (`tool-input-delta`, …).
    pub ignored_events: u64,
    /// The line of the `crash` marker, if the replay stopped at one.
    pub crash_line: Option<usize>,
    /// After a crash: what the store holds open, for `recover`.
    pub left_open: Option<LeftOpen>,
    /// The error that stopped the replay, if any.
    pub error: Option<String>,
}

/// Open rows left by a crash marker.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LeftOpen {
    /// Assistant messages without `time.completed`.
    pub messages: usize,
    /// Open text/reasoning parts and pending/running tools.
    pub parts: usize,
}

struct UserCtx {
    id: MessageId,
    agent: String,
    model: Option<ModelRef>,
}

struct Replayer<'a> {
    engine: &'a Engine,
    tenant: &'a TenantId,
    opts: ReplayOptions,
    session_line: Option<SessionLine>,
    scope: Option<Scope>,
    last_user: Option<UserCtx>,
    refs: HashMap<String, MessageId>,
    open: Option<Processor>,
    stats: ProcessorStats,
    report: ReplayReport,
}

enum Step {
    Continue,
    Crash,
}

/// Replays `text` into `engine` (whose store should be a [`forge_core::CountingStore`]
/// if the caller wants the write totals; they are filled in by the caller). Never
/// panics on input; a failure is recorded in [`ReplayReport::error`].
pub async fn replay(
    engine: &Engine,
    tenant: &TenantId,
    text: &str,
    opts: ReplayOptions,
) -> ReplayReport {
    let mut r = Replayer {
        engine,
        tenant,
        opts,
        session_line: None,
        scope: None,
        last_user: None,
        refs: HashMap::new(),
        open: None,
        stats: ProcessorStats::default(),
        report: ReplayReport::default(),
    };
    r.run(text).await;
    r.report.deltas = r.stats.deltas;
    r.report.ignored_events = r.stats.ignored;
    r.report
}

impl Replayer<'_> {
    async fn run(&mut self, text: &str) {
        let mut last = 0;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            last = n;
            self.report.lines = n;
            let step = match parse_line(raw) {
                Ok(None) => continue,
                Ok(Some((line, _t))) => self.apply(line).await,
                Err(msg) => Err(anyhow!(msg)),
            };
            match step {
                Ok(Step::Continue) => {}
                Ok(Step::Crash) => {
                    self.crash(n).await;
                    return;
                }
                Err(e) => {
                    self.fail(format!("line {n}: {}", crate::backend::one_line(&e)))
                        .await;
                    return;
                }
            }
        }
        if let Some(p) = &self.open {
            let msg = format!(
                "line {} (end of file): assistant message {} is still open; end it with \
                 finish, error or abort (or add {{\"type\":\"crash\"}} to leave it open on \
                 purpose)",
                last + 1,
                p.message().id
            );
            self.fail(msg).await;
            return;
        }
        if let Err(e) = self.ensure_session().await {
            self.report.error = Some(crate::backend::one_line(&e));
        }
    }

    async fn apply(&mut self, line: Line) -> Result<Step> {
        match line {
            Line::Session(s) => {
                if self.scope.is_some() || self.session_line.is_some() {
                    bail!("a session line must come first, and only once");
                }
                self.session_line = Some(s);
            }
            Line::User(u) => {
                self.ensure_session().await?;
                self.no_open_assistant("a user message")?;
                self.user(u).await?;
            }
            Line::Assistant(a) => {
                self.ensure_session().await?;
                self.no_open_assistant("a new assistant message")?;
                self.start_assistant(a).await?;
            }
            Line::Crash => return Ok(Step::Crash),
            Line::Stream(event) => {
                self.ensure_session().await?;
                if self.open.is_none() {
                    self.start_assistant(AssistantLine::default()).await?;
                }
                let kind = event.kind();
                let Some(p) = self.open.as_mut() else {
                    bail!("no assistant message is open");
                };
                let flow = p
                    .handle(event)
                    .await
                    .with_context(|| format!("{kind} does not fit the stream"))?;
                if flow == Flow::Done {
                    self.close_processor();
                }
            }
        }
        Ok(Step::Continue)
    }

    fn no_open_assistant(&self, what: &str) -> Result<()> {
        match &self.open {
            Some(p) => bail!(
                "{what} while assistant message {} is still open; end it with finish, error \
                 or abort first",
                p.message().id
            ),
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

    async fn crash(&mut self, n: usize) {
        // Dropped without finalize: the store keeps what the last boundary wrote.
        self.close_processor();
        self.report.crash_line = Some(n);
        if let Err(e) = self.ensure_session().await {
            self.report.error = Some(crate::backend::one_line(&e));
            return;
        }
        let Some(scope) = &self.scope else { return };
        match self
            .engine
            .store
            .open_items(self.tenant, Some(&scope.session_id))
            .await
        {
            Ok(open) => {
                self.report.left_open = Some(LeftOpen {
                    messages: open.messages.len(),
                    parts: open.parts.len(),
                });
            }
            Err(e) => self.report.error = Some(format!("reading open items: {e}")),
        }
    }

    async fn fail(&mut self, msg: String) {
        let mut msg = msg;
        if let Some(p) = self.open.as_mut() {
            let error = MessageError::new(ErrorName::Unknown, format!("replay stopped: {msg}"));
            if let Err(e) = p.finalize(Outcome::Failed(error)).await {
                msg = format!("{msg}; closing the open assistant message also failed: {e}");
            }
        }
        self.close_processor();
        self.report.error = Some(msg);
    }

    fn session_id(&self) -> Result<SessionId> {
        self.scope
            .as_ref()
            .map(|s| s.session_id.clone())
            .ok_or_else(|| anyhow!("no session yet"))
    }

    async fn ensure_session(&mut self) -> Result<()> {
        if self.scope.is_some() {
            return Ok(());
        }
        let line = self.session_line.take().unwrap_or_default();
        let wanted = match (&self.opts.session, line.id) {
            (Some(id), _) => Some(id.clone()),
            (None, Some(id)) if id.trim().is_empty() => bail!("session line: empty `id`"),
            (None, Some(id)) => Some(SessionId::from(id)),
            (None, None) => None,
        };
        let store = &self.engine.store;
        if let Some(id) = &wanted {
            if let Some(state) = store.session(self.tenant, id).await? {
                self.scope = Some(self.engine.scope(self.tenant, id).await?);
                self.report.session = Some(id.clone());
                self.report.title = state.info.title;
                self.last_user = last_user_in_store(self.engine, self.tenant, id).await?;
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
        self.scope = Some(self.engine.put_session(self.tenant, session).await?);
        Ok(())
    }

    fn resolve(&self, reference: &str) -> Result<MessageId> {
        match reference.strip_prefix('@') {
            Some(name) => self.refs.get(name).cloned().ok_or_else(|| {
                anyhow!("@{name} names no earlier line (give a user line \"ref\":\"{name}\")")
            }),
            None => Ok(MessageId::from(reference)),
        }
    }

    fn remember(&mut self, label: Option<String>, id: &MessageId) -> Result<()> {
        if let Some(name) = label {
            if self.refs.contains_key(&name) {
                bail!("ref {name:?} is already used by an earlier line");
            }
            self.refs.insert(name, id.clone());
        }
        Ok(())
    }

    async fn user(&mut self, mut u: UserLine) -> Result<()> {
        let session_id = self.session_id()?;
        let tail_start_id = u
            .compaction
            .as_ref()
            .and_then(|c| c.tail_start_id.as_deref())
            .map(|r| self.resolve(r))
            .transpose()
            .context("compaction.tailStartID")?;
        let bodies = user_part_bodies(&mut u, tail_start_id)?;
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
        self.remember(u.label, &id)?;
        let scope = self
            .scope
            .clone()
            .ok_or_else(|| anyhow!("no session yet"))?;
        self.engine.put_message(&scope, message, parts).await?;
        self.report.user_messages += 1;
        self.last_user = Some(UserCtx { id, agent, model });
        Ok(())
    }

    async fn start_assistant(&mut self, a: AssistantLine) -> Result<()> {
        let Some(user) = &self.last_user else {
            bail!(
                "no user message to answer: add a {{\"type\":\"user\",\"text\":…}} line before \
                 the model's stream"
            );
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
        let session_id = self.session_id()?;
        let mut message =
            assistant_message(session_id, user.id.clone(), &provider, &model, now_ms());
        if let Some(fields) = message.as_assistant_mut() {
            fields.agent = Some(a.agent.unwrap_or_else(|| user.agent.clone()));
            fields.summary = a.summary;
        }
        self.remember(a.label, &message.id)?;
        let scope = self
            .scope
            .clone()
            .ok_or_else(|| anyhow!("no session yet"))?;
        let p = self
            .engine
            .processor(scope, message, ProcessorOptions::default())
            .await?;
        self.report.assistant_messages += 1;
        self.open = Some(p);
        Ok(())
    }
}

/// The newest user message stored in a session, for continuing it.
/// The parts of a user line, in order: its `text`, its `parts`, then a `compaction` part
/// (with `tail_start_id`, resolved by the caller). Takes them out of `u`.
///
/// # Errors
/// A part carrying an id (replay assigns them) or no string `type`, a part that is not
/// a part, or a line with none of the three.
pub fn user_part_bodies(
    u: &mut UserLine,
    tail_start_id: Option<MessageId>,
) -> Result<Vec<PartBody>> {
    let mut parts = Vec::new();
    if let Some(text) = u.text.take() {
        parts.push(PartBody::Text(TextPart::plain(text)));
    }
    for (i, fields) in std::mem::take(&mut u.parts).into_iter().enumerate() {
        for key in ["id", "sessionID", "messageID"] {
            if fields.contains_key(key) {
                bail!("parts[{i}]: remove `{key}`; replay assigns ids");
            }
        }
        if !fields.get("type").is_some_and(Value::is_string) {
            bail!("parts[{i}]: missing a string `type`");
        }
        // A part parses with its ids; these placeholders are dropped with it.
        let mut obj = JsonMap::new();
        obj.insert("id".into(), Value::String(PartId::generate().to_string()));
        obj.insert(
            "sessionID".into(),
            Value::String(SessionId::generate().to_string()),
        );
        obj.insert(
            "messageID".into(),
            Value::String(MessageId::generate().to_string()),
        );
        obj.extend(fields);
        let p: Part =
            serde_json::from_value(Value::Object(obj)).with_context(|| format!("parts[{i}]"))?;
        parts.push(p.body);
    }
    if let Some(c) = u.compaction.take() {
        parts.push(PartBody::Compaction(CompactionPart {
            auto: c.auto,
            overflow: c.overflow,
            tail_start_id,
            extra: JsonMap::new(),
        }));
    }
    if parts.is_empty() {
        bail!("a user line needs `text`, `parts` or `compaction`");
    }
    Ok(parts)
}

async fn last_user_in_store(
    engine: &Engine,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<Option<UserCtx>> {
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
