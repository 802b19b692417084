//! The framing lines: the session, user messages, assistant messages, and the names
//! (`ref`) lines give each other.
//!
//! Each line is checked whole before it writes anything (a lenient replay skips a line
//! that fails a check, and the skipped line must have stored nothing): its own fields
//! first, then whether it fits (a user message while an answer is open, an answer with
//! no user message), and only then the session is created and the message written.

use std::sync::Arc;

use forge_core::id::now_ms;
use forge_core::model::MessageBody;
use forge_core::projector::Scope;
use forge_core::turn::{LastUser, TurnDriver, TurnOptions};
use forge_core::{Engine, Session, SessionId, TenantId};

use super::{user_part_bodies, AssistantLine, Replayer, SessionLine, UserLine};
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
        if self.driver.is_some() {
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
        let scope = engine.scope(self.tenant, &id).await.map_err(store_err)?;
        self.report.session = Some(id.clone());
        self.report.title = state.info.title;
        let last_user = last_user_in_store(engine, self.tenant, &id)
            .await
            .map_err(store_err)?;
        self.driver = Some(self.driver_for(scope).continuing(last_user));
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
        self.driver = Some(self.driver_for(scope));
        Ok(())
    }

    fn driver_for(&self, scope: Scope) -> TurnDriver {
        let projector = Arc::clone(&self.engine.projector);
        TurnDriver::new(projector, scope, TurnOptions::default())
    }

    /// Fails unless there is a user message to answer (in the session as stored, when
    /// it is continued). Creates no session.
    pub(super) async fn has_user(&mut self, at: &str) -> Result<()> {
        if self.find_session(at).await?
            && self
                .driver
                .as_ref()
                .is_some_and(|d| d.last_user().is_some())
        {
            return Ok(());
        }
        Err(Error::input(
            at,
            "no user message to answer: add a {\"type\":\"user\",\"text\":…} line before the \
             model's stream",
        ))
    }

    pub(super) fn scope(&self, at: &str) -> Result<Scope> {
        self.driver
            .as_ref()
            .map(|d| d.scope().clone())
            .ok_or_else(|| Error::input(at, "no session yet"))
    }

    /// Fails if `label` names an earlier line already.
    fn label_is_free(&self, at: &str, label: Option<&str>) -> Result<()> {
        self.with_refs(|refs| refs.check_free(label))
            .map_err(|e| input_at(at, e))
    }

    /// `what` (a new message) may start: no answer is open, or the open one failed and
    /// only awaits its finish (it is closed before the new message is written).
    fn may_start(&self, at: &str, what: &str) -> Result<()> {
        match self.open() {
            Some(p) if !p.awaits_finish_after_error() => self.no_open_assistant(at, what),
            _ => Ok(()),
        }
    }

    pub(super) async fn user(&mut self, at: &str, mut u: UserLine) -> Result<()> {
        let tail_start_id = u
            .compaction
            .as_ref()
            .and_then(|c| c.tail_start_id.as_deref())
            .map(|r| self.with_refs(|refs| refs.resolve(r)))
            .transpose()
            .map_err(|e| input_at(at, e))?;
        let bodies = user_part_bodies(&mut u, tail_start_id).map_err(|m| Error::input(at, m))?;
        self.label_is_free(at, u.label.as_deref())?;
        self.may_start(at, "a user message")?;
        self.ensure_session(at).await?;
        self.close_failed_answer(at).await?;
        self.driver(at)?
            .write_user(bodies, u.agent, u.model, u.label)
            .await
            .map_err(|e| classify(at.to_owned(), "the user message", e))?;
        self.report.user_messages += 1;
        Ok(())
    }

    pub(super) async fn assistant(&mut self, at: &str, a: AssistantLine) -> Result<()> {
        self.label_is_free(at, a.label.as_deref())?;
        self.may_start(at, "a new assistant message")?;
        self.has_user(at).await?;
        self.close_failed_answer(at).await?;
        self.start_assistant(at, a).await
    }

    pub(super) async fn start_assistant(&mut self, at: &str, a: AssistantLine) -> Result<()> {
        if self
            .driver
            .as_ref()
            .and_then(TurnDriver::last_user)
            .is_none()
        {
            return Err(Error::input(at, "no user message to answer"));
        }
        self.driver(at)?
            .open_assistant(a)
            .await
            .map_err(|e| classify(at.to_owned(), "the assistant message", e))?;
        self.report.assistant_messages += 1;
        Ok(())
    }
}

/// A check of the core's that refused a line, as the input error at `at`.
fn input_at(at: &str, e: forge_core::Error) -> Error {
    match e {
        forge_core::Error::InvalidInput(message) => Error::input(at, message),
        other => Error::input(at, other.to_string()),
    }
}

/// The newest user message stored in a session, for continuing it.
async fn last_user_in_store(
    engine: &Engine,
    tenant: &TenantId,
    session: &SessionId,
) -> forge_core::Result<Option<LastUser>> {
    let mut cursor = None;
    loop {
        let page = engine
            .history(tenant, session, cursor.as_ref(), 100)
            .await?;
        for m in page.messages.iter().rev() {
            if let MessageBody::User(u) = &m.info.body {
                return Ok(Some(LastUser {
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
