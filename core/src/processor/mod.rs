//! The Processor: turns the model's stream into boundary writes and bus deltas.
//!
//! | stream event | what happens |
//! |---|---|
//! | `text-start`, `reasoning-start` | create an empty part, persist it |
//! | `text-delta`, `reasoning-delta` | bus only (`message.part.delta`) |
//! | `text-end`, `reasoning-end` | persist the whole part as streamed (hook applied to text), `time.end` set |
//! | `tool-input-start` | persist the tool `pending` |
//! | `tool-input-delta`, `tool-input-end` | nothing |
//! | `tool-call` | persist `running` |
//! | `tool-result` / `tool-error` | persist `completed` / `error` (only from `running`, or a call waiting for approval, also in an earlier message) |
//! | `tool-result` with `preliminary: true` | persist the running tool with the progress in `metadata.preliminary` |
//! | `tool-approval-request` | persist the running tool with `metadata.approval` `requested`: waiting, not open |
//! | `tool-approval-response` | record the decision; the call is open again |
//! | `tool-output-denied` | persist `error` "The user denied this tool call" |
//! | `file`, `reasoning-file` | persist a closed `file` part (data URL) |
//! | `source` | persist a closed `source` part |
//! | `start`, `tool-input-delta`, `tool-input-end`, `raw`, `custom`, `ping` | counted in [`ProcessorStats::ignored`] |
//! | `steering-message` | persist a closed `steering-message` part holding the user message |
//! | `start-step` | persist a step-start part |
//! | `finish-step` | persist step-finish, patch and the message's usage in one batch |
//! | `finish`, `error`, `abort` | [`Processor::finalize`] |
//!
//! Around the turn it publishes the session's status, bus only, as opencode does:
//! `session.status` busy once [`Processor::start`] committed the open message; after
//! finalize committed, `session.error` (a failed turn, not an aborted one), then
//! `session.status` idle and `session.idle`.
//!
//! # Decisions apart from effects
//!
//! The decisions are a state machine, [`Machine`]: it takes one input at a time (the
//! open message, a stream event, finalize), changes its state and queues
//! [`Effect`]s: rows to commit as one batch, deltas to publish, statuses to publish.
//! It does no I/O; its only clock is the injected [`ProcessorOptions::clock`]. The
//! one store read a decision needs (a result or an approval response addressing a
//! call of an earlier message that waits for approval) is a question,
//! [`Machine::lookup`], whose answer comes back as an input with the event.
//! [`Processor`] is the async shell: it answers that question from the store
//! ([`waiting_call`]) and applies the effects through the
//! [`Projector`](crate::projector::Projector).
//!
//! The effects of one input are applied in the order [`Machine::poll`] gives them,
//! and that order is the contract:
//!
//! - An input queues at most one [`Effect::Commit`]. What follows it waits for it:
//!   if the commit fails, nothing after it is done and the input fails with the
//!   store's error; once it succeeded, the shell calls [`Machine::committed`] (a
//!   finalized turn is done from then on) and goes on. What an input did that hangs
//!   on a commit never confirmed, the next input undoes (a block opened by a
//!   `text-start` whose part was not committed is not open).
//! - `start`: the open message's commit, then `session.status` busy.
//! - A text or reasoning delta: its [`Effect::Delta`] alone, no commit (with
//!   [`ProcessorOptions::persist_every_delta`], the delta, then the part's commit).
//! - Finalize (also `finish`, `error` outside a step, `abort`): the batch's commit,
//!   then `session.error` when the message's error is not an abort, then
//!   `session.status` idle, then `session.idle`.
//! - A delta publish that fails fails the input; a status publish reports a commit
//!   that already succeeded, so its failure is logged and does not.
//!
//! In-flight state is typed: an open block is a text or a reasoning body, a call
//! that has not ended is pending, running or waiting for approval.
//!
//! Inside, one file per concern: the machine and its effects, the typed in-flight
//! state, options and stats, text and reasoning blocks (the delta path), tools and
//! approvals, files and sources, steps, the turn's end, the messages around a turn,
//! and the shell with its store lookup.

mod approval;
mod blocks;
mod files;
mod inflight;
mod lifecycle;
mod lookup;
mod machine;
mod messages;
mod options;
mod shell;
mod steps;
#[cfg(test)]
mod tests;
mod tools;

use crate::error::{Error, Result};
use crate::model::{JsonMap, Part, PartTime, ReasoningPart, TextPart};
use crate::stream::StreamEvent;
use serde_json::Value;

use inflight::BlockBody;

pub use lookup::{waiting_call, APPROVAL_SEARCH_MESSAGES};
pub use machine::{Effect, Ended, Machine};
pub use messages::{assistant_message, message_error_from, user_message};
pub use options::{Clock, Flow, Outcome, ProcessorOptions, ProcessorStats, TextHook};
pub use shell::Processor;
pub use tools::{PROVIDER_EXECUTED, RESULT_METADATA, TOOL_DENIED, TOOL_ERROR_OBJECT};

impl Machine {
    /// Handles one stream event: changes the turn's state and queues its effects.
    /// `waiting` answers [`Machine::lookup`] for this event (the part of the earlier
    /// message's call waiting for approval, if the session has one); pass `None` when
    /// it asked nothing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an event that does not fit the stream so far (a
    /// delta for a block that is not open, a result for a tool that is not running,
    /// anything after the turn was finalized). Effects queued by earlier inputs are
    /// not affected.
    pub fn handle(&mut self, event: StreamEvent, waiting: Option<Part>) -> Result<()> {
        self.begin();
        if self.done {
            return Err(Error::invalid(format!(
                "{} after the turn was finalized",
                event.kind()
            )));
        }
        match event {
            StreamEvent::TextDelta {
                id,
                text,
                provider_metadata,
            } => self.block_delta(&id, text, provider_metadata, "text")?,
            StreamEvent::ReasoningDelta {
                id,
                text,
                provider_metadata,
            } => {
                self.block_delta(&id, text, provider_metadata, "reasoning")?;
            }
            StreamEvent::TextStart {
                id,
                provider_metadata,
            } => {
                let now = self.now();
                self.open_block(
                    id,
                    BlockBody::Text(TextPart {
                        time: Some(PartTime::open(now)),
                        metadata: provider_metadata,
                        ..TextPart::plain("")
                    }),
                )?;
            }
            StreamEvent::ReasoningStart {
                id,
                provider_metadata,
            } => {
                let now = self.now();
                self.open_block(
                    id,
                    BlockBody::Reasoning(ReasoningPart {
                        text: String::new(),
                        metadata: provider_metadata,
                        time: PartTime::open(now),
                        extra: JsonMap::new(),
                    }),
                )?;
            }
            StreamEvent::TextEnd {
                id,
                provider_metadata,
                citations,
            } => self.end_block(&id, provider_metadata, citations, "text")?,
            StreamEvent::ReasoningEnd {
                id,
                provider_metadata,
            } => self.end_block(&id, provider_metadata, None, "reasoning")?,
            StreamEvent::ToolInputStart {
                id,
                tool_name,
                provider_metadata,
            } => {
                self.tool_input_start(id, tool_name, provider_metadata)?;
            }
            StreamEvent::ToolInputDelta { id, delta } => {
                // Kept in memory only: a call aborted before its `tool-call` closes
                // with the input streamed so far.
                self.tool_input_delta(&id, &delta);
                self.ignored += 1;
            }
            StreamEvent::ToolInputEnd { .. }
            | StreamEvent::Start {}
            | StreamEvent::Raw {}
            | StreamEvent::Custom { .. }
            | StreamEvent::Ping {} => self.ignored += 1,
            StreamEvent::SteeringMessage {
                id,
                message,
                step_number,
            } => self.steering(id, message, step_number)?,
            StreamEvent::Source(source) => self.source(source),
            StreamEvent::ToolApprovalRequest {
                approval_id,
                tool_call,
                reason,
            } => {
                self.approval_request(&tool_call.tool_call_id, &approval_id, reason.as_deref())?;
            }
            StreamEvent::ToolApprovalResponse {
                approval_id,
                approved,
                tool_call,
                reason,
            } => {
                let call = tool_call.as_ref().map(|c| c.tool_call_id.as_str());
                self.approval_response(&approval_id, call, approved, reason.as_deref(), waiting)?;
            }
            StreamEvent::ToolOutputDenied { tool_call_id, .. } => {
                self.output_denied(&tool_call_id, waiting)?;
            }
            StreamEvent::File {
                file,
                provider_metadata,
            } => self.file(file, provider_metadata, false),
            StreamEvent::ReasoningFile {
                file,
                provider_metadata,
            } => self.file(file, provider_metadata, true),
            StreamEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
                provider_metadata,
                provider_executed,
            } => self.tool_call(
                tool_call_id,
                tool_name,
                input,
                provider_metadata,
                provider_executed,
            )?,
            StreamEvent::ToolResult {
                tool_call_id,
                output,
                preliminary: true,
                ..
            } => self.tool_progress(&tool_call_id, output)?,
            StreamEvent::ToolResult {
                tool_call_id,
                output,
                provider_metadata,
                ..
            } => self.tool_result(&tool_call_id, output, provider_metadata, waiting)?,
            StreamEvent::ToolError {
                tool_call_id,
                error,
                provider_metadata,
                ..
            } => self.tool_error(&tool_call_id, &error, provider_metadata, waiting)?,
            StreamEvent::StartStep {} => self.start_step()?,
            StreamEvent::FinishStep {
                finish_reason,
                raw_finish_reason,
                usage,
                cost,
                snapshot,
                patch,
                provider_metadata,
                response,
            } => {
                if !self.in_step {
                    return Err(Error::invalid("finish-step without its start-step"));
                }
                self.in_step = false;
                // What the step-finish part keeps beside opencode's fields.
                let mut kept = JsonMap::new();
                let fields = [
                    ("rawReason", raw_finish_reason.map(Value::String)),
                    ("metadata", provider_metadata.filter(|m| !m.is_null())),
                    ("response", response.and_then(step_response)),
                ];
                for (key, value) in fields {
                    if let Some(value) = value {
                        kept.insert(key.into(), value);
                    }
                }
                self.finish_step(
                    finish_reason,
                    kept,
                    &usage,
                    cost.unwrap_or(0.0),
                    snapshot,
                    patch,
                );
            }
            StreamEvent::Finish {
                finish_reason,
                raw_finish_reason,
                total_usage,
            } => self.finish(finish_reason, raw_finish_reason, total_usage)?,
            StreamEvent::Error { error } => self.error(&error),
            StreamEvent::Abort { reason } => self.abort(reason),
        }
        Ok(())
    }
}

/// What a step-finish part keeps of the step's `response`: all but its HTTP `headers`
/// (transport, not conversation: a provider's rate-limit and tracing headers would be
/// most of the step's bytes) and any `body`.
fn step_response(response: Value) -> Option<Value> {
    match response {
        Value::Object(mut m) => {
            m.remove("headers");
            m.remove("body");
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Null => None,
        other => Some(other),
    }
}
