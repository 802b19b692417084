//! [`TurnDriver`]: one session's items fed to the Processor (rules in [`super`]).

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::id::{MessageId, PartId};
use crate::model::{Message, MessageBody, ModelRef, Part, PartBody};
use crate::processor::{
    assistant_message, user_message, Flow, Outcome, Processor, ProcessorOptions, ProcessorStats,
};
use crate::projector::{Projector, Scope};
use crate::stream::StreamEvent;

use super::item::{AssistantItem, Item, Refs, Timed, UserItem};
use super::{Answerer, Applied, EventTime, LastUser, TurnOptions, DEFAULT_AGENT};

/// Feeds one session's items to the Processor of its open assistant message.
pub struct TurnDriver {
    projector: Arc<dyn Projector>,
    scope: Scope,
    processor: ProcessorOptions,
    /// The event-time clock, when event times are honoured.
    clock: Option<(Arc<AtomicI64>, EventTime)>,
    answerer: Answerer,
    open: Option<Processor>,
    last_user: Option<LastUser>,
    refs: Refs,
    finished: bool,
    closed: ProcessorStats,
}

impl fmt::Debug for TurnDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnDriver")
            .field("session", &self.scope.session_id)
            .field("open", &self.open.as_ref().map(|p| &p.message().id))
            .field("last_user", &self.last_user)
            .finish_non_exhaustive()
    }
}

impl TurnDriver {
    /// A driver for the session of `scope` (which must exist), writing through
    /// `projector`.
    pub fn new(projector: Arc<dyn Projector>, scope: Scope, options: TurnOptions) -> Self {
        let mut processor = options.processor;
        let clock = options.event_time.map(|et| {
            let now = Arc::new(AtomicI64::new(et.epoch_ms));
            let tick = Arc::clone(&now);
            processor.clock = Arc::new(move || tick.load(Ordering::Relaxed));
            (now, et)
        });
        Self {
            projector,
            scope,
            processor,
            clock,
            answerer: options.answerer,
            open: None,
            last_user: None,
            refs: Refs::default(),
            finished: false,
            closed: ProcessorStats::default(),
        }
    }

    /// Continues a session whose newest user message is `last` (what the next answer
    /// answers).
    #[must_use]
    pub fn continuing(mut self, last: Option<LastUser>) -> Self {
        self.last_user = last;
        self
    }

    /// The session's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The Processor of the open assistant message.
    pub fn open(&self) -> Option<&Processor> {
        self.open.as_ref()
    }

    /// The user message the next answer answers.
    pub fn last_user(&self) -> Option<&LastUser> {
        self.last_user.as_ref()
    }

    /// The names (`ref`) its messages were given.
    pub fn refs(&self) -> &Refs {
        &self.refs
    }

    /// The last stream event finished an answer, and nothing opened another since.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// What the Processors closed so far did, summed (the open one not included).
    pub fn stats(&self) -> ProcessorStats {
        self.closed
    }

    /// Event time: sets the clock to `t_ms` and moves the group-commit projector there,
    /// when event times are honoured and `t_ms` is given; otherwise nothing.
    pub async fn at(&mut self, t_ms: Option<u64>) -> Result<()> {
        let (Some((clock, et)), Some(t)) = (&self.clock, t_ms) else {
            return Ok(());
        };
        let now = et
            .epoch_ms
            .saturating_add(i64::try_from(t).unwrap_or(i64::MAX));
        clock.store(now, Ordering::Relaxed);
        if let Some(g) = &et.group {
            g.advance(now).await?;
        }
        Ok(())
    }

    /// [`at`](Self::at) the item's time, then [`item`](Self::item).
    pub async fn apply(&mut self, timed: Timed) -> Result<Applied> {
        self.at(timed.t_ms).await?;
        self.item(timed.item).await
    }

    /// Does what `item` says, by the rules of the module docs.
    pub async fn item(&mut self, item: Item) -> Result<Applied> {
        Ok(match item {
            Item::Session(_) | Item::Unknown { .. } => Applied::Nothing,
            Item::User(u) => Applied::User(self.user(u).await?),
            Item::Assistant(a) => Applied::Opened(self.assistant(a).await?),
            Item::Stream(event) => Applied::Event(self.event(event).await?),
            Item::Crash => {
                self.crash();
                Applied::Crash
            }
        })
    }

    /// Writes a user message: its compaction tail (`@ref`) resolved, its parts checked,
    /// its `ref` new; an answer still open is closed first.
    ///
    /// # Errors
    /// `InvalidInput` for an unknown `@ref`, bad parts or a `ref` used twice (nothing is
    /// written); the store's error.
    pub async fn user(&mut self, mut u: UserItem) -> Result<MessageId> {
        let tail = u.compaction.as_ref().and_then(|c| c.tail_start_id.clone());
        let tail = match tail {
            Some(r) => Some(self.refs.resolve(&r)?),
            None => None,
        };
        let parts = u.take_part_bodies(tail).map_err(Error::invalid)?;
        self.refs.check_free(u.label.as_deref())?;
        self.close_for_new_message().await?;
        self.write_user(parts, u.agent, u.model, u.label).await
    }

    /// The events that commit the session's revert ([`crate::revert`]), if it has one:
    /// one read of the session row per user message, and of the history when marked.
    async fn revert_commit(&self) -> Result<Vec<SyncEvent>> {
        let store = self.projector.store();
        let (tenant, session) = (&self.scope.tenant, &self.scope.session_id);
        let Some(state) = store.session(tenant, session).await? else {
            return Ok(Vec::new());
        };
        let Some(mark) = crate::revert::mark(&state.info) else {
            return Ok(Vec::new());
        };
        let history = crate::read::read_all(store.as_ref(), tenant, session, 1000).await?;
        Ok(crate::revert::commit(&state.info, &history, &mark))
    }

    /// Writes a user message of `parts` in one batch, as it is: no check, nothing
    /// closed; a revert of the session is committed first, in the batch. `agent` and `model` default to the previous user message's (the first:
    /// [`DEFAULT_AGENT`], no model); `label` names it for later `@ref`s.
    pub async fn write_user(
        &mut self,
        parts: Vec<PartBody>,
        agent: Option<String>,
        model: Option<ModelRef>,
        label: Option<String>,
    ) -> Result<MessageId> {
        let previous = self.last_user.as_ref();
        let agent = agent
            .or_else(|| previous.map(|p| p.agent.clone()))
            .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
        let model = model.or_else(|| previous.and_then(|p| p.model.clone()));
        let session = &self.scope.session_id;
        let mut message = user_message(session.clone(), &agent, (self.processor.clock)());
        if let MessageBody::User(m) = &mut message.body {
            m.model.clone_from(&model);
        }
        let id = message.id.clone();
        // A reverted session drops what the revert hides first, in the same batch.
        let mut events = self.revert_commit().await?;
        events.reserve(parts.len() + 1);
        events.push(SyncEvent::MessageUpdated { info: message });
        events.extend(parts.into_iter().map(|body| SyncEvent::PartUpdated {
            part: Part {
                id: PartId::generate(),
                session_id: session.clone(),
                message_id: id.clone(),
                body,
            },
        }));
        self.projector.commit(&self.scope, events).await?;
        self.refs.remember(label, &id);
        self.finished = false;
        self.last_user = Some(LastUser {
            id: id.clone(),
            agent,
            model,
        });
        Ok(id)
    }

    /// Opens an assistant message answering the last user message; an answer still
    /// open is closed first.
    ///
    /// # Errors
    /// `InvalidInput` when there is no user message to answer or the `ref` is used
    /// already; the store's error.
    pub async fn assistant(&mut self, a: AssistantItem) -> Result<MessageId> {
        self.refs.check_free(a.label.as_deref())?;
        if self.last_user.is_none() {
            return Err(Error::invalid("no user message to answer"));
        }
        self.close_for_new_message().await?;
        self.open_assistant(a).await
    }

    /// Opens an assistant message answering the last user message, with nothing closed
    /// first (an open answer is replaced without finalize).
    ///
    /// # Errors
    /// `InvalidInput` when there is no user message to answer; the store's error.
    pub async fn open_assistant(&mut self, a: AssistantItem) -> Result<MessageId> {
        let Some(user) = &self.last_user else {
            return Err(Error::invalid("no user message to answer"));
        };
        let (provider, model, agent) = match &self.answerer {
            Answerer::User => {
                let (p, m) = match (a.provider_id, a.model_id, &user.model) {
                    (Some(p), Some(m), _) => (p, m),
                    (p, m, Some(u)) => (
                        p.unwrap_or_else(|| u.provider_id.clone()),
                        m.unwrap_or_else(|| u.model_id.clone()),
                    ),
                    (p, m, None) => (
                        p.unwrap_or_else(|| "unknown".to_owned()),
                        m.unwrap_or_else(|| "unknown".to_owned()),
                    ),
                };
                (p, m, Some(a.agent.unwrap_or_else(|| user.agent.clone())))
            }
            Answerer::Fixed {
                provider_id,
                model_id,
            } => (
                a.provider_id.unwrap_or_else(|| provider_id.clone()),
                a.model_id.unwrap_or_else(|| model_id.clone()),
                a.agent,
            ),
        };
        let mut message = assistant_message(
            self.scope.session_id.clone(),
            user.id.clone(),
            &provider,
            &model,
            (self.processor.clock)(),
        );
        if let Some(fields) = message.as_assistant_mut() {
            fields.agent = agent;
            fields.summary = a.summary;
        }
        let id = self.open_message(message).await?;
        self.refs.remember(a.label, &id);
        Ok(id)
    }

    /// Opens `message`, an open assistant message the caller made (its id, parent and
    /// fields as given), with nothing closed first. Its id.
    ///
    /// # Errors
    /// The store's error, or the Processor's refusal of the message.
    pub async fn open_message(&mut self, message: Message) -> Result<MessageId> {
        let id = message.id.clone();
        let p = Processor::start(
            Arc::clone(&self.projector),
            self.scope.clone(),
            message,
            self.processor.clone(),
        )
        .await?;
        self.open = Some(p);
        self.finished = false;
        Ok(id)
    }

    /// Hands `event` to the open answer's Processor, opening an answer (as an
    /// `assistant` item with no fields) when none is open.
    ///
    /// # Errors
    /// `InvalidInput`: a `finish` right after a finished answer (it would store an empty
    /// one), no user message to answer, or the Processor's refusal; the store's error.
    pub async fn event(&mut self, event: StreamEvent) -> Result<Flow> {
        if self.open.is_none() {
            if self.finished && matches!(event, StreamEvent::Finish { .. }) {
                return Err(Error::invalid(
                    "finish does not fit: no assistant message is open (a second finish?)",
                ));
            }
            self.open_assistant(AssistantItem::default()).await?;
        }
        let Some(p) = self.open.as_mut() else {
            return Err(Error::invalid("no assistant message is open"));
        };
        let flow = p.handle(event).await?;
        if flow == Flow::Done {
            self.take_open();
            self.finished = true;
        }
        Ok(flow)
    }

    /// Closes an answer that failed inside a step and waits for its `finish` (see
    /// [`Processor::awaits_finish_after_error`]) as the stream meant it. Whether one
    /// was closed; on a store error it stays open.
    pub async fn close_failed(&mut self) -> Result<bool> {
        let Some(p) = self.open.as_mut() else {
            return Ok(false);
        };
        if !p.awaits_finish_after_error() {
            return Ok(false);
        }
        p.finalize(Outcome::Finished).await?;
        self.take_open();
        Ok(true)
    }

    /// Finalizes the open answer with `outcome`; its id, `None` when none was open. The
    /// answer is closed even when finalize fails.
    pub async fn finalize(&mut self, outcome: Outcome) -> Result<Option<MessageId>> {
        let Some(p) = self.open.as_mut() else {
            return Ok(None);
        };
        let id = p.message().id.clone();
        let done = p.finalize(outcome).await;
        self.take_open();
        done.map(|()| Some(id))
    }

    /// Drops the open answer without finalize: the store keeps what its last boundary
    /// wrote, as after a process crash.
    pub fn crash(&mut self) {
        self.take_open();
    }

    /// Before a new message: a failed answer is closed as the stream meant it, any
    /// other open answer as aborted.
    async fn close_for_new_message(&mut self) -> Result<()> {
        if !self.close_failed().await? {
            self.finalize(Outcome::Aborted).await?;
        }
        Ok(())
    }

    fn take_open(&mut self) {
        if let Some(p) = self.open.take() {
            let s = p.stats();
            self.closed.commits += s.commits;
            self.closed.rows += s.rows;
            self.closed.deltas += s.deltas;
            self.closed.ignored += s.ignored;
        }
    }
}
