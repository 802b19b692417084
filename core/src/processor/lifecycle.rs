//! The turn's start (the open assistant message is persisted) and its end (finalize:
//! everything still open is closed in one batch).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Outcome, Processor, ProcessorOptions, ProcessorStats};
use crate::close;
use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::model::{Message, MessageError, Part};
use crate::projector::{Projector, Scope};

impl Processor {
    /// Starts processing an assistant message: persists it (open) and returns the
    /// processor.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `message` is not an open assistant message of the
    /// scope's session; store errors from the first commit.
    pub async fn start(
        projector: Arc<dyn Projector>,
        scope: Scope,
        message: Message,
        opts: ProcessorOptions,
    ) -> Result<Self> {
        if !message.is_open() {
            return Err(Error::invalid(format!(
                "message {} must be an assistant message without time.completed",
                message.id
            )));
        }
        if message.session_id != scope.session_id {
            return Err(Error::invalid(format!(
                "message {} belongs to session {}, not {}",
                message.id, message.session_id, scope.session_id
            )));
        }
        let mut p = Self {
            projector,
            scope,
            message,
            blocks: HashMap::new(),
            tools: HashMap::new(),
            awaiting: HashMap::new(),
            calls: HashSet::new(),
            in_step: false,
            pending_error: None,
            opts,
            stats: ProcessorStats::default(),
            done: false,
        };
        tracing::debug!(
            tenant = %p.scope.tenant,
            session = %p.scope.session_id,
            message_id = %p.message.id,
            "processor started",
        );
        p.commit(vec![SyncEvent::MessageUpdated {
            info: p.message.clone(),
        }])
        .await?;
        p.emit_status(crate::event::Event::status(&p.scope.session_id, "busy"));
        Ok(p)
    }

    /// Closes the turn: every open text/reasoning part is persisted with the text
    /// accumulated so far and `time.end`; every `pending`/`running` tool becomes an
    /// `error` ("Tool execution aborted", `metadata.interrupted = true`) — except a call
    /// waiting for the user's approval, which stays waiting; the message gets
    /// `time.completed` (and the error of a failed or aborted turn). One batch.
    /// Calling it again does nothing.
    pub async fn finalize(&mut self, outcome: Outcome) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let now = self.now();
        let mut parts: Vec<Part> = self.blocks.drain().map(|(_, p)| p).collect();
        parts.extend(self.tools.drain().map(|(_, p)| p));
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        let mut events = Vec::with_capacity(parts.len() + 1);
        for mut part in parts {
            close::close_part(&mut part, now);
            events.push(SyncEvent::PartUpdated { part });
        }
        let ended = match &outcome {
            Outcome::Finished => "finished",
            Outcome::Failed(_) => "failed",
            Outcome::Aborted => "aborted",
        };
        let closed = events.len();
        let error = match outcome {
            Outcome::Finished => self.pending_error.take(),
            Outcome::Failed(e) => Some(e),
            Outcome::Aborted => Some(MessageError::aborted("The operation was aborted.")),
        };
        close::close_message(&mut self.message, now, error);
        events.push(SyncEvent::MessageUpdated {
            info: self.message.clone(),
        });
        self.commit(events).await?;
        self.done = true;
        tracing::debug!(
            tenant = %self.scope.tenant,
            session = %self.scope.session_id,
            message_id = %self.message.id,
            outcome = ended,
            closed,
            commits = self.stats.commits,
            rows = self.stats.rows,
            deltas = self.stats.deltas,
            "processor finalized",
        );
        let session = &self.scope.session_id;
        if let Some(error) = self.message.as_assistant().and_then(|a| a.error.as_ref()) {
            if error.name != crate::model::ErrorName::Aborted {
                self.emit_status(crate::event::Event::session_error(session, error));
            }
        }
        self.emit_status(crate::event::Event::status(session, "idle"));
        self.emit_status(crate::event::Event::SessionIdle {
            session_id: session.clone(),
        });
        Ok(())
    }

    /// Whether the turn has been finalized.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Publishes a session status event (bus only). It reports a commit that already
    /// succeeded, so a failure to publish it is logged and does not fail the call.
    fn emit_status(&self, event: crate::event::Event) {
        if let Err(e) = self.projector.emit(&self.scope, event) {
            tracing::warn!(
                tenant = %self.scope.tenant,
                session = %self.scope.session_id,
                error = &e as &(dyn std::error::Error + 'static),
                "publishing a session status failed; the turn is committed",
            );
        }
    }
}
