//! The turn's end: `finish`, `error` and `abort` decide how it ended, and finalize
//! closes everything still open in one batch, then reports the session's status.

use std::collections::HashMap;

use serde_json::Value;

use super::inflight::Call;
use super::machine::{Ended, Machine, OnCommit};
use super::{message_error_from, Outcome};
use crate::close;
use crate::error::{Error, Result};
use crate::event::{Event, SyncEvent};
use crate::model::{ErrorName, MessageError, Part};
use crate::stream::Usage;

impl Machine {
    /// Closes the turn: every open text/reasoning part with the text accumulated so
    /// far and `time.end`; every `pending`/`running` tool as an `error` ("Tool
    /// execution aborted", `metadata.interrupted = true`), except a call waiting for
    /// the user's approval, which stays waiting; the message gets `time.completed`
    /// (and the error of a failed or aborted turn). Queues that batch, then
    /// `session.error` (unless the turn was aborted or has no error), `session.status`
    /// idle and `session.idle`; the turn is done once the batch committed. Does
    /// nothing once the turn is done.
    pub fn finalize(&mut self, outcome: Outcome) {
        self.begin();
        if self.done {
            return;
        }
        self.close(outcome);
    }

    fn close(&mut self, outcome: Outcome) {
        let now = self.now();
        let mut parts: Vec<Part> = self
            .blocks
            .drain()
            .map(|(_, b)| b.into_part(&self.session_id, &self.message.id))
            .collect();
        let (open, waiting): (HashMap<_, _>, HashMap<_, _>) = std::mem::take(&mut self.tools)
            .into_iter()
            .partition(|(_, c)| c.state.is_open());
        self.tools = waiting;
        parts.extend(open.into_values().map(Call::into_part));
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        let mut rows = Vec::with_capacity(parts.len() + 1);
        for mut part in parts {
            close::close_part(&mut part, now);
            rows.push(SyncEvent::PartUpdated { part });
        }
        let ended = Ended {
            outcome: match &outcome {
                Outcome::Finished => "finished",
                Outcome::Failed(_) => "failed",
                Outcome::Aborted => "aborted",
            },
            closed: rows.len(),
        };
        let error = match outcome {
            Outcome::Finished => self.pending_error.take(),
            Outcome::Failed(e) => Some(e),
            Outcome::Aborted => Some(MessageError::aborted("The operation was aborted.")),
        };
        close::close_message(&mut self.message, now, error);
        rows.push(SyncEvent::MessageUpdated {
            info: self.message.clone(),
        });
        self.commit(rows);
        self.on_commit = Some(OnCommit::Finalized(ended));
        let session = &self.session_id;
        let failed = self
            .message
            .as_assistant()
            .and_then(|a| a.error.as_ref())
            .filter(|e| e.name != ErrorName::Aborted)
            .map(|e| Event::session_error(session, e));
        let idle = Event::status(session, "idle");
        let session_idle = Event::SessionIdle {
            session_id: session.clone(),
        };
        if let Some(failed) = failed {
            self.status(failed);
        }
        self.status(idle);
        self.status(session_idle);
    }

    /// `finish`: the totals are kept on the message, and the turn ends with the error
    /// an `error` inside the last step left, if any.
    pub(super) fn finish(
        &mut self,
        reason: Option<String>,
        raw_reason: Option<String>,
        total: Option<Usage>,
    ) -> Result<()> {
        if let Some(a) = self.message.as_assistant_mut() {
            if let Some(reason) = reason {
                a.finish.get_or_insert(reason);
            }
            if let Some(raw) = raw_reason {
                a.extra.insert("rawFinish".into(), Value::String(raw));
            }
            if let Some(total) = total {
                let tokens = serde_json::to_value(total.tokens()).map_err(Error::invalid)?;
                a.extra.insert("totalTokens".into(), tokens);
            }
        }
        let outcome = match self.pending_error.take() {
            Some(error) => Outcome::Failed(error),
            None => Outcome::Finished,
        };
        self.close(outcome);
        Ok(())
    }

    /// `error`: inside a step it waits for the step's `finish`; outside one it ends
    /// the turn.
    pub(super) fn error(&mut self, error: &Value) {
        let mut error = message_error_from(error);
        if error.name == ErrorName::Auth {
            if let Some(a) = self.message.as_assistant() {
                error
                    .data
                    .extra
                    .entry("providerID")
                    .or_insert_with(|| Value::String(a.provider_id.clone()));
            }
        }
        if self.in_step {
            // The SDK follows an error inside a step with that step's `finish-step`
            // and a `finish`: they belong to this message, which `finish` closes with
            // the error.
            self.pending_error = Some(error);
        } else {
            self.close(Outcome::Failed(error));
        }
    }

    /// `abort`: the turn ends, failed with the reason when one is given.
    pub(super) fn abort(&mut self, reason: Option<String>) {
        let outcome = match reason {
            Some(reason) => Outcome::Failed(MessageError::aborted(reason)),
            None => Outcome::Aborted,
        };
        self.close(outcome);
    }
}
