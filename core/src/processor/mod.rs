//! The Processor: turns the model's stream into boundary writes and bus deltas.
//!
//! | stream event | what happens |
//! |---|---|
//! | `text-start`, `reasoning-start` | create an empty part, persist it |
//! | `text-delta`, `reasoning-delta` | bus only (`message.part.delta`) |
//! | `text-end`, `reasoning-end` | persist the whole part: trailing whitespace trimmed, hook applied (text), `time.end` set |
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
//! | `start`, `tool-input-delta`, `tool-input-end`, `raw`, `custom`, `ping`, `steering-message` | counted in [`ProcessorStats::ignored`] |
//! | `start-step` | persist a step-start part |
//! | `finish-step` | persist step-finish, patch and the message's usage in one batch |
//! | `finish`, `error`, `abort` | [`Processor::finalize`] |
//!
//! Around the turn it publishes the session's status, bus only, as opencode does:
//! `session.status` busy once [`Processor::start`] committed the open message; after
//! finalize committed, `session.error` (a failed turn, not an aborted one), then
//! `session.status` idle and `session.idle`.
//!
//! Inside, one file per concern: options and stats, the turn's start and finalize, text
//! and reasoning blocks (the delta path), tools, steps, and the messages around a turn.

mod blocks;
mod files;
mod lifecycle;
mod messages;
mod options;
mod steps;
mod tools;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::id::PartId;
use crate::model::{
    JsonMap, Message, Part, PartBody, PartTime, ReasoningPart, StepStartPart, TextPart, ToolPart,
    ToolPending, ToolState,
};
use crate::projector::{Projector, Scope};
use crate::stream::StreamEvent;

pub use messages::{assistant_message, message_error_from, user_message};
pub use options::{Clock, Flow, Outcome, ProcessorOptions, ProcessorStats, TextHook};

/// Consumes one assistant message's stream.
pub struct Processor {
    projector: Arc<dyn Projector>,
    scope: Scope,
    message: Message,
    /// Open text/reasoning blocks by stream block id; the part accumulates the text.
    blocks: HashMap<String, Part>,
    /// Tool calls not yet completed, by call id.
    tools: HashMap<String, Part>,
    /// Tool calls of this message waiting for the user's approval, by call id: not open
    /// work, so finalize leaves them as they are.
    awaiting: HashMap<String, Part>,
    /// Every call id this message has seen: a call id is used once per message.
    calls: HashSet<String>,
    /// A `start-step` is open (its `finish-step` has not come).
    in_step: bool,
    /// An `error` inside a step, recorded on the message when `finish` closes it.
    pending_error: Option<crate::model::MessageError>,
    opts: ProcessorOptions,
    stats: ProcessorStats,
    done: bool,
}

impl fmt::Debug for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("scope", &self.scope)
            .field("message", &self.message.id)
            .field("open_blocks", &self.blocks.len())
            .field("open_tools", &self.tools.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Processor {
    /// Records a new call id, or refuses one this message has used already.
    fn new_call(&mut self, id: &str, what: &str) -> Result<()> {
        if self.calls.contains(id) {
            return Err(Error::invalid(format!(
                "{what} for call {id}, a call id this message has used already"
            )));
        }
        self.calls.insert(id.to_owned());
        Ok(())
    }

    /// Whether the stream reported an `error` inside a step and only its `finish-step`
    /// / `finish` may follow: a caller whose stream moves on (a new message, the end of
    /// the input) closes the answer with `finalize(Outcome::Finished)`, which records
    /// that error.
    pub fn awaits_finish_after_error(&self) -> bool {
        self.pending_error.is_some()
    }

    /// The assistant message as last persisted.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// What this processor has done so far.
    pub fn stats(&self) -> ProcessorStats {
        self.stats
    }

    /// The session scope it writes to.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn now(&self) -> i64 {
        (self.opts.clock)()
    }

    async fn commit(&mut self, events: Vec<SyncEvent>) -> Result<()> {
        let n = events.len() as u64;
        self.projector.commit(&self.scope, events).await?;
        self.stats.commits += 1;
        self.stats.rows += n;
        Ok(())
    }

    fn new_part(&self, body: PartBody) -> Part {
        Part {
            id: PartId::generate(),
            session_id: self.scope.session_id.clone(),
            message_id: self.message.id.clone(),
            body,
        }
    }

    async fn commit_part(&mut self, part: Part) -> Result<()> {
        self.commit(vec![SyncEvent::PartUpdated { part }]).await
    }

    /// Handles one stream event.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an event that does not fit the stream so far (a delta
    /// for a block that is not open, a result for a tool that is not running, anything
    /// after the turn was finalized); store errors from commits. Nothing committed before
    /// is affected; call [`Processor::finalize`] to close the turn.
    pub async fn handle(&mut self, event: StreamEvent) -> Result<Flow> {
        if self.done {
            return Err(Error::invalid(format!(
                "{} after the turn was finalized",
                event.kind()
            )));
        }
        match event {
            StreamEvent::TextDelta { id, text } => {
                self.delta(&id, text, "text")?;
                self.persist_delta(&id).await?;
            }
            StreamEvent::ReasoningDelta { id, text } => {
                self.delta(&id, text, "reasoning")?;
                self.persist_delta(&id).await?;
            }
            StreamEvent::TextStart { id } => {
                let now = self.now();
                self.open_block(
                    id,
                    PartBody::Text(TextPart {
                        text: String::new(),
                        synthetic: None,
                        ignored: None,
                        time: Some(PartTime::open(now)),
                        metadata: None,
                        extra: JsonMap::new(),
                    }),
                )
                .await?;
            }
            StreamEvent::ReasoningStart { id } => {
                let now = self.now();
                self.open_block(
                    id,
                    PartBody::Reasoning(ReasoningPart {
                        text: String::new(),
                        metadata: None,
                        time: PartTime::open(now),
                        extra: JsonMap::new(),
                    }),
                )
                .await?;
            }
            StreamEvent::TextEnd { id } => self.end_block(&id, "text").await?,
            StreamEvent::ReasoningEnd { id } => self.end_block(&id, "reasoning").await?,
            StreamEvent::ToolInputStart { id, tool_name } => {
                if self.tools.contains_key(&id) {
                    return Err(Error::invalid(format!(
                        "tool-input-start for call {id}, which is already open"
                    )));
                }
                self.new_call(&id, "tool-input-start")?;
                let part = self.new_part(PartBody::Tool(ToolPart {
                    call_id: id.clone(),
                    tool: tool_name,
                    state: ToolState::Pending(ToolPending {
                        input: Value::Object(JsonMap::new()),
                        raw: String::new(),
                        extra: JsonMap::new(),
                    }),
                    metadata: None,
                    extra: JsonMap::new(),
                }));
                self.tools.insert(id, part.clone());
                self.commit_part(part).await?;
            }
            StreamEvent::ToolInputDelta { .. }
            | StreamEvent::ToolInputEnd { .. }
            | StreamEvent::Start {}
            | StreamEvent::Raw {}
            | StreamEvent::Custom { .. }
            | StreamEvent::Ping {}
            | StreamEvent::SteeringMessage {} => self.stats.ignored += 1,
            StreamEvent::Source(source) => self.source(source).await?,
            StreamEvent::ToolApprovalRequest {
                approval_id,
                tool_call,
                reason,
            } => {
                self.approval_request(&tool_call.tool_call_id, &approval_id, reason.as_deref())
                    .await?;
            }
            StreamEvent::ToolApprovalResponse {
                approval_id,
                approved,
                tool_call,
                reason,
            } => {
                let call = tool_call.as_ref().map(|c| c.tool_call_id.as_str());
                self.approval_response(&approval_id, call, approved, reason.as_deref())
                    .await?;
            }
            StreamEvent::ToolOutputDenied { tool_call_id, .. } => {
                self.output_denied(&tool_call_id).await?;
            }
            StreamEvent::File { file } => self.file(file, false).await?,
            StreamEvent::ReasoningFile { file } => self.file(file, true).await?,
            StreamEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
            } => self.tool_call(tool_call_id, tool_name, input).await?,
            StreamEvent::ToolResult {
                tool_call_id,
                output,
                preliminary: true,
                ..
            } => self.tool_progress(&tool_call_id, output).await?,
            StreamEvent::ToolResult {
                tool_call_id,
                output,
                ..
            } => self.tool_result(&tool_call_id, output).await?,
            StreamEvent::ToolError {
                tool_call_id,
                error,
                ..
            } => self.tool_error(&tool_call_id, &error).await?,
            StreamEvent::StartStep {} => {
                if self.in_step {
                    return Err(Error::invalid(
                        "start-step while the previous step is open (no finish-step between \
                         two start-steps)",
                    ));
                }
                self.in_step = true;
                let part = self.new_part(PartBody::StepStart(StepStartPart {
                    snapshot: None,
                    extra: JsonMap::new(),
                }));
                self.commit_part(part).await?;
            }
            StreamEvent::FinishStep {
                finish_reason,
                raw_finish_reason,
                usage,
                cost,
                snapshot,
                patch,
            } => {
                if !self.in_step {
                    return Err(Error::invalid("finish-step without its start-step"));
                }
                self.in_step = false;
                self.finish_step(
                    finish_reason,
                    raw_finish_reason,
                    &usage,
                    cost.unwrap_or(0.0),
                    snapshot,
                    patch,
                )
                .await?;
            }
            StreamEvent::Finish {
                finish_reason,
                raw_finish_reason,
                total_usage,
            } => {
                if let Some(a) = self.message.as_assistant_mut() {
                    if let Some(reason) = finish_reason {
                        a.finish.get_or_insert(reason);
                    }
                    if let Some(raw) = raw_finish_reason {
                        a.extra.insert("rawFinish".into(), Value::String(raw));
                    }
                    if let Some(total) = total_usage {
                        let tokens =
                            serde_json::to_value(total.tokens()).map_err(Error::invalid)?;
                        a.extra.insert("totalTokens".into(), tokens);
                    }
                }
                let outcome = match self.pending_error.take() {
                    Some(error) => Outcome::Failed(error),
                    None => Outcome::Finished,
                };
                self.finalize(outcome).await?;
            }
            StreamEvent::Error { error } => {
                let mut error = message_error_from(&error);
                if error.name == crate::model::ErrorName::Auth {
                    if let Some(a) = self.message.as_assistant() {
                        error
                            .data
                            .extra
                            .entry("providerID")
                            .or_insert_with(|| Value::String(a.provider_id.clone()));
                    }
                }
                if self.in_step {
                    // The SDK follows an error inside a step with that step's
                    // `finish-step` and a `finish`: they belong to this message, which
                    // `finish` closes with the error.
                    self.pending_error = Some(error);
                } else {
                    self.finalize(Outcome::Failed(error)).await?;
                }
            }
            StreamEvent::Abort { reason } => {
                let outcome = match reason {
                    Some(reason) => Outcome::Failed(crate::model::MessageError::aborted(reason)),
                    None => Outcome::Aborted,
                };
                self.finalize(outcome).await?;
            }
        }
        Ok(if self.done {
            Flow::Done
        } else {
            Flow::Continue
        })
    }
}
