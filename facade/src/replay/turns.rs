//! The framing lines: the session, user messages, assistant messages, and the names
//! (`ref`) lines give each other.
//!
//! Each line is checked whole before it writes anything (a lenient replay skips a line
//! that fails a check, and the skipped line must have stored nothing): its own fields
//! first, then whether it fits (a user message while an answer is open, an answer with
//! no user message), and only then the session is created and the message written.

use forge_core::id::{now_ms, PartId};
use forge_core::model::MessageBody;
use forge_core::processor::{assistant_message, user_message};
use forge_core::projector::Scope;
use forge_core::{Engine, MessageId, Part, ProcessorOptions, Session, SessionId, TenantId};

use super::{
    user_part_bodies, AssistantLine, Replayer, SessionLine, UserCtx, UserLine, DEFAULT_AGENT,
};
use crate::error::{classify, Error, Result};

impl Replayer<'_> {
    pub(super) fn session_line(&mut self, at: &str, s: SessionLine) -> Result<()> {
        // Lines skipped or of unknown types before it do not count: the session line is
        // the first line applied.
        if self.applied > 0 || self.session_line.is_some() {
            return Err(Error::input(
                at,
                "a session line must come first, and only once",
            ));
        }
        if self.opts.session.is_none() {
            match &s.id {
                Some(id) if id.trim().is_empty() => {
                    return Err(Error::input(at, "session line: empty `id`"))
                }
                Some(id) => SessionId::from(id.as_str())
                    .check()
                    .map_err(|e| Error::input_with(at, format!("session id: {e}"), e))?,
                None => {}
            }
        }
        self.session_line = Some(s);
        Ok(())
    }

    /// The session the replay writes to, by id: the options', else the session line's.
    fn wanted_session(&self) -> Option<SessionId> {
        self.opts.session.clone().or_else(|| {
            self.session_line
                .as_ref()
                .and_then(|l| l.id.as_deref())
                .map(SessionId::from)
        })
    }

    /// Opens the session if it exists already (reading its last user message); creates
    /// nothing. Whether a session is open now.
    async fn find_session(&mut self, at: &str) -> Result<bool> {
        if self.scope.is_some() {
            return Ok(true);
        }
        let Some(id) = self.wanted_session() else {
            return Ok(false);
        };
        let engine = self.engine;
        let store_err = |e| Error::store(format!("{at}: opening the session"), e);
        let Some(state) = engine
            .store
            .session(self.tenant, &id)
            .await
            .map_err(store_err)?
        else {
            return Ok(false);
        };
        self.scope = Some(engine.scope(self.tenant, &id).await.map_err(store_err)?);
        self.report.session = Some(id.clone());
        self.report.title = state.info.title;
        self.last_user = last_user_in_store(engine, self.tenant, &id)
            .await
            .map_err(store_err)?;
        Ok(true)
    }

    /// Opens the session, creating it if needed.
    pub(super) async fn ensure_session(&mut self, at: &str) -> Result<()> {
        if self.find_session(at).await? {
            return Ok(());
        }
        let line = self.session_line.take().unwrap_or_default();
        let title = line
            .title
            .unwrap_or_else(|| self.opts.default_title.clone());
        let mut session = Session::new(title, now_ms());
        if let Some(id) = self.wanted_session().or(line.id.map(SessionId::from)) {
            session.id = id;
        }
        let id = session.id.clone();
        let title = session.title.clone();
        let scope = self
            .engine
            .put_session(self.tenant, session)
            .await
            .map_err(|e| classify(at.to_owned(), "the session line", e))?;
        self.report.session = Some(id);
        self.report.title = title;
        self.report.created = true;
        self.scope = Some(scope);
        Ok(())
    }

    /// Fails unless there is a user message to answer (in the session as stored, when
    /// it is continued). Creates no session.
    pub(super) async fn has_user(&mut self, at: &str) -> Result<()> {
        if self.find_session(at).await? && self.last_user.is_some() {
            return Ok(());
        }
        Err(Error::input(
            at,
            "no user message to answer: add a {\"type\":\"user\",\"text\":…} line before the \
             model's stream",
        ))
    }

    pub(super) fn scope(&self, at: &str) -> Result<Scope> {
        self.scope
            .clone()
            .ok_or_else(|| Error::input(at, "no session yet"))
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

    /// Fails if `label` names an earlier line already.
    fn label_is_free(&self, at: &str, label: Option<&str>) -> Result<()> {
        match label {
            Some(name) if self.refs.contains_key(name) => Err(Error::input(
                at,
                format!("ref {name:?} is already used by an earlier line"),
            )),
            _ => Ok(()),
        }
    }

    fn remember(&mut self, label: Option<String>, id: &MessageId) {
        if let Some(name) = label {
            self.refs.insert(name, id.clone());
        }
    }

    pub(super) async fn user(&mut self, at: &str, mut u: UserLine) -> Result<()> {
        let tail_start_id = u
            .compaction
            .as_ref()
            .and_then(|c| c.tail_start_id.as_deref())
            .map(|r| self.resolve(at, r))
            .transpose()?;
        let bodies = user_part_bodies(&mut u, tail_start_id).map_err(|m| Error::input(at, m))?;
        self.label_is_free(at, u.label.as_deref())?;
        if let Some(p) = &self.open {
            if !p.awaits_finish_after_error() {
                self.no_open_assistant(at, "a user message")?;
            }
        }
        self.ensure_session(at).await?;
        self.close_failed_answer(at).await?;
        let scope = self.scope(at)?;
        let session_id = scope.session_id.clone();
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
        self.engine
            .put_message(&scope, message, parts)
            .await
            .map_err(|e| classify(at.to_owned(), "the user message", e))?;
        self.remember(u.label, &id);
        self.report.user_messages += 1;
        self.finished = false;
        self.last_user = Some(UserCtx { id, agent, model });
        Ok(())
    }

    pub(super) async fn assistant(&mut self, at: &str, a: AssistantLine) -> Result<()> {
        self.label_is_free(at, a.label.as_deref())?;
        if let Some(p) = &self.open {
            if !p.awaits_finish_after_error() {
                self.no_open_assistant(at, "a new assistant message")?;
            }
        }
        self.has_user(at).await?;
        self.close_failed_answer(at).await?;
        self.start_assistant(at, a).await
    }

    pub(super) async fn start_assistant(&mut self, at: &str, a: AssistantLine) -> Result<()> {
        let Some(user) = &self.last_user else {
            return Err(Error::input(at, "no user message to answer"));
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
        let id = message.id.clone();
        let p = self
            .engine
            .processor(scope, message, ProcessorOptions::default())
            .await
            .map_err(|e| classify(at.to_owned(), "the assistant message", e))?;
        self.remember(a.label, &id);
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
