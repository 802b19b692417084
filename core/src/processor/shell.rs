//! The async shell: [`Processor`] feeds the [`Machine`] and applies its effects
//! through the [`Projector`], in the order the machine gives them.

use std::fmt;
use std::sync::Arc;

use super::machine::{Effect, Machine};
use super::{waiting_call, Flow, Outcome, ProcessorOptions, ProcessorStats};
use crate::error::Result;
use crate::event::Event;
use crate::model::{Message, Part};
use crate::projector::{Projector, Scope};
use crate::stream::StreamEvent;

/// Consumes one assistant message's stream.
pub struct Processor {
    projector: Arc<dyn Projector>,
    scope: Scope,
    machine: Machine,
    /// Commits, rows and deltas done; `ignored` is the machine's.
    stats: ProcessorStats,
}

impl fmt::Debug for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("scope", &self.scope)
            .field("machine", &self.machine)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Processor {
    /// Starts processing an assistant message: persists it (open) and returns the
    /// processor.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) if `message` is not an open
    /// assistant message of the scope's session; store errors from the first commit.
    pub async fn start(
        projector: Arc<dyn Projector>,
        scope: Scope,
        message: Message,
        opts: ProcessorOptions,
    ) -> Result<Self> {
        let machine = Machine::new(scope.session_id.clone(), message, opts)?;
        let mut p = Self {
            projector,
            scope,
            machine,
            stats: ProcessorStats::default(),
        };
        tracing::debug!(
            tenant = %p.scope.tenant,
            session = %p.scope.session_id,
            message_id = %p.machine.message().id,
            "processor started",
        );
        p.apply().await?;
        Ok(p)
    }

    /// Handles one stream event.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an event that does not
    /// fit the stream so far (a delta for a block that is not open, a result for a tool
    /// that is not running, anything after the turn was finalized); store errors from
    /// commits. Nothing committed before is affected; call [`Processor::finalize`] to
    /// close the turn.
    pub async fn handle(&mut self, event: StreamEvent) -> Result<Flow> {
        let waiting = match self.machine.lookup(&event) {
            Some(call_id) => self.find_waiting(call_id).await?,
            None => None,
        };
        self.machine.handle(event, waiting)?;
        self.apply().await?;
        Ok(if self.machine.is_done() {
            Flow::Done
        } else {
            Flow::Continue
        })
    }

    /// Closes the turn: every open text/reasoning part is persisted with the text
    /// accumulated so far and `time.end`; every `pending`/`running` tool becomes an
    /// `error` ("Tool execution aborted", `metadata.interrupted = true`) — except a call
    /// waiting for the user's approval, which stays waiting; the message gets
    /// `time.completed` (and the error of a failed or aborted turn). One batch.
    /// Calling it again does nothing.
    pub async fn finalize(&mut self, outcome: Outcome) -> Result<()> {
        self.machine.finalize(outcome);
        self.apply().await
    }

    /// Whether the turn has been finalized.
    pub fn is_done(&self) -> bool {
        self.machine.is_done()
    }

    /// Whether the stream reported an `error` inside a step and only its `finish-step`
    /// / `finish` may follow: a caller whose stream moves on (a new message, the end of
    /// the input) closes the answer with `finalize(Outcome::Finished)`, which records
    /// that error.
    pub fn awaits_finish_after_error(&self) -> bool {
        self.machine.awaits_finish_after_error()
    }

    /// The assistant message as last persisted.
    pub fn message(&self) -> &Message {
        self.machine.message()
    }

    /// What this processor has done so far.
    pub fn stats(&self) -> ProcessorStats {
        ProcessorStats {
            ignored: self.machine.ignored(),
            ..self.stats
        }
    }

    /// The session scope it writes to.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The machine's question answered from the store, once everything the projector
    /// accepted is committed.
    async fn find_waiting(&self, call_id: &str) -> Result<Option<Part>> {
        self.projector.sync().await?;
        let store = self.projector.store();
        waiting_call(
            &**store,
            &self.scope.tenant,
            &self.scope.session_id,
            call_id,
        )
        .await
    }

    /// Applies the last input's effects in order; stops at the first that fails.
    async fn apply(&mut self) -> Result<()> {
        loop {
            // Only the rows are held across the commit's await, not a whole effect.
            let rows = match self.machine.poll() {
                None => return Ok(()),
                Some(Effect::Commit(rows)) => rows,
                Some(Effect::Delta(delta)) => {
                    self.projector.emit(&self.scope, Event::PartDelta(delta))?;
                    self.stats.deltas += 1;
                    continue;
                }
                Some(Effect::Status(event)) => {
                    self.emit_status(event);
                    continue;
                }
            };
            let n = rows.len() as u64;
            self.projector.commit(&self.scope, rows).await?;
            self.stats.commits += 1;
            self.stats.rows += n;
            if let Some(ended) = self.machine.committed() {
                tracing::debug!(
                    tenant = %self.scope.tenant,
                    session = %self.scope.session_id,
                    message_id = %self.machine.message().id,
                    outcome = ended.outcome,
                    closed = ended.closed,
                    commits = self.stats.commits,
                    rows = self.stats.rows,
                    deltas = self.stats.deltas,
                    "processor finalized",
                );
            }
        }
    }

    /// Publishes a session status event (bus only). It reports a commit that already
    /// succeeded, so a failure to publish it is logged and does not fail the call.
    fn emit_status(&self, event: Event) {
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
