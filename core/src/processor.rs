//! The Processor: turns the model's stream into boundary writes and bus deltas.
//!
//! | stream event | what happens |
//! |---|---|
//! | `text-start`, `reasoning-start` | create an empty part, persist it |
//! | `text-delta`, `reasoning-delta` | bus only (`part.delta`) |
//! | `text-end`, `reasoning-end` | persist the whole part: trailing whitespace trimmed, hook applied (text), `time.end` set |
//! | `tool-input-start` | persist the tool `pending` |
//! | `tool-input-delta`, `tool-input-end` | nothing |
//! | `tool-call` | persist `running` |
//! | `tool-result` / `tool-error` | persist `completed` / `error` (only from `running`) |
//! | `start-step` | persist a step-start part |
//! | `finish-step` | persist step-finish, patch and the message's usage in one batch |
//! | `finish`, `error`, `abort` | [`Processor::finalize`] |

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::close;
use crate::error::{Error, Result};
use crate::event::{Event, PartDelta, SyncEvent};
use crate::id::{now_ms, PartId};
use crate::model::{
    JsonMap, Message, MessageBody, MessageError, Part, PartBody, PartTime, PatchPart,
    ReasoningPart, StepFinishPart, StepStartPart, TextPart, Tokens, ToolCompleted, ToolError,
    ToolPart, ToolPending, ToolRunning, ToolState, ToolTime, ToolTimeEnded,
};
use crate::projector::{Projector, Scope};
use crate::stream::{StepPatch, StreamEvent, Usage};

/// A clock in Unix milliseconds; replaceable so runs on recorded event times are
/// deterministic.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Post-processing applied to a text block's text at `text-end`, after trimming.
pub type TextHook = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Options of a [`Processor`].
#[derive(Clone)]
pub struct ProcessorOptions {
    /// Source of timestamps.
    pub clock: Clock,
    /// Applied to text (not reasoning) at `text-end`.
    pub text_hook: Option<TextHook>,
    /// Also rewrite the whole part in its own commit on every delta. This is the
    /// write pattern forge-store exists to avoid; it is here so benchmarks can measure
    /// it on the same code path (`forge-store bench`, mode `per-delta`). Off by default.
    pub persist_every_delta: bool,
}

impl Default for ProcessorOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(now_ms),
            text_hook: None,
            persist_every_delta: false,
        }
    }
}

impl fmt::Debug for ProcessorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorOptions")
            .field("text_hook", &self.text_hook.is_some())
            .finish_non_exhaustive()
    }
}

/// How a turn ended, for [`Processor::finalize`].
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The stream finished normally.
    Finished,
    /// The stream failed; the error is recorded on the message.
    Failed(MessageError),
    /// The turn was aborted; `MessageAbortedError` is recorded.
    Aborted,
}

/// What a processor did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessorStats {
    /// Store commits (batches).
    pub commits: u64,
    /// Sync events committed (rows written).
    pub rows: u64,
    /// Deltas published on the bus.
    pub deltas: u64,
    /// Events accepted but deliberately not persisted (`tool-input-delta`, `raw`, …).
    pub ignored: u64,
}

/// Whether the stream goes on after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// More events are expected.
    Continue,
    /// The turn was finalized; further events are rejected.
    Done,
}

/// Consumes one assistant message's stream.
pub struct Processor {
    projector: Arc<dyn Projector>,
    scope: Scope,
    message: Message,
    /// Open text/reasoning blocks by stream block id; the part accumulates the text.
    blocks: HashMap<String, Part>,
    /// Tool calls not yet completed, by call id.
    tools: HashMap<String, Part>,
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

fn text_of(part: &mut Part) -> Option<&mut String> {
    match &mut part.body {
        PartBody::Text(t) => Some(&mut t.text),
        PartBody::Reasoning(r) => Some(&mut r.text),
        _ => None,
    }
}

fn trim_end_in_place(s: &mut String) {
    let len = s.trim_end().len();
    s.truncate(len);
}

fn tokens_from(usage: &Usage) -> Tokens {
    let mut t = Tokens {
        input: usage.input_tokens.unwrap_or(0),
        output: usage.output_tokens.unwrap_or(0),
        reasoning: usage.reasoning_tokens.unwrap_or(0),
        ..Tokens::default()
    };
    t.cache.read = usage.cached_input_tokens.unwrap_or(0);
    t
}

/// Turns a stream `error` value into a message error.
pub fn message_error_from(value: &Value) -> MessageError {
    if value.get("name").is_some() && value.get("data").is_some() {
        if let Ok(e) = serde_json::from_value::<MessageError>(value.clone()) {
            return e;
        }
    }
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
        Value::Null => "unknown error".to_owned(),
        other => other.to_string(),
    };
    let kind = if value.get("statusCode").is_some() {
        crate::model::ErrorName::Api
    } else {
        crate::model::ErrorName::Unknown
    };
    MessageError::new(kind, text)
}

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
            opts,
            stats: ProcessorStats::default(),
            done: false,
        };
        p.commit(vec![SyncEvent::MessageUpdated {
            info: p.message.clone(),
        }])
        .await?;
        Ok(p)
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
            | StreamEvent::Source {} => self.stats.ignored += 1,
            StreamEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
            } => self.tool_call(tool_call_id, tool_name, input).await?,
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
                let part = self.new_part(PartBody::StepStart(StepStartPart {
                    snapshot: None,
                    extra: JsonMap::new(),
                }));
                self.commit_part(part).await?;
            }
            StreamEvent::FinishStep {
                finish_reason,
                usage,
                cost,
                snapshot,
                patch,
            } => {
                self.finish_step(finish_reason, &usage, cost.unwrap_or(0.0), snapshot, patch)
                    .await?;
            }
            StreamEvent::Finish { finish_reason } => {
                if let (Some(reason), Some(a)) = (finish_reason, self.message.as_assistant_mut()) {
                    a.finish.get_or_insert(reason);
                }
                self.finalize(Outcome::Finished).await?;
            }
            StreamEvent::Error { error } => {
                self.finalize(Outcome::Failed(message_error_from(&error)))
                    .await?;
            }
            StreamEvent::Abort {} => self.finalize(Outcome::Aborted).await?,
        }
        Ok(if self.done {
            Flow::Done
        } else {
            Flow::Continue
        })
    }

    /// The delta path: append to the open block and publish; no store I/O.
    fn delta(&mut self, id: &str, text: String, kind: &'static str) -> Result<()> {
        let Some(part) = self.blocks.get_mut(id) else {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is not open"
            )));
        };
        if part.kind() != kind {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is a {} block",
                part.kind()
            )));
        }
        if let Some(buf) = text_of(part) {
            buf.push_str(&text);
        }
        let delta = PartDelta {
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            field: Cow::Borrowed("text"),
            delta: text,
        };
        self.projector.emit(&self.scope, Event::PartDelta(delta))?;
        self.stats.deltas += 1;
        Ok(())
    }

    /// With [`ProcessorOptions::persist_every_delta`]: rewrites the block's part.
    async fn persist_delta(&mut self, id: &str) -> Result<()> {
        if !self.opts.persist_every_delta {
            return Ok(());
        }
        match self.blocks.get(id) {
            Some(part) => {
                let part = part.clone();
                self.commit_part(part).await
            }
            None => Ok(()),
        }
    }

    async fn open_block(&mut self, id: String, body: PartBody) -> Result<()> {
        if self.blocks.contains_key(&id) {
            return Err(Error::invalid(format!(
                "{}-start for block {id:?}, which is already open",
                body.kind()
            )));
        }
        let part = self.new_part(body);
        self.commit_part(part.clone()).await?;
        self.blocks.insert(id, part);
        Ok(())
    }

    async fn end_block(&mut self, id: &str, kind: &str) -> Result<()> {
        match self.blocks.get(id) {
            None => {
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is not open"
                )))
            }
            Some(p) if p.kind() != kind => {
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is a {} block",
                    p.kind()
                )))
            }
            Some(_) => {}
        }
        let Some(mut part) = self.blocks.remove(id) else {
            unreachable!("checked above")
        };
        let now = self.now();
        if let Some(text) = text_of(&mut part) {
            trim_end_in_place(text);
            if let (PartBody::Text(_), Some(hook)) = (&part.body, &self.opts.text_hook) {
                let hook = Arc::clone(hook);
                if let Some(text) = text_of(&mut part) {
                    hook(text);
                }
            }
        }
        close::close_block(&mut part, now, None);
        self.commit_part(part).await
    }

    async fn tool_call(&mut self, call_id: String, tool: String, input: Value) -> Result<()> {
        let now = self.now();
        let running = ToolState::Running(ToolRunning {
            input,
            title: None,
            metadata: None,
            time: ToolTime {
                start: now,
                extra: JsonMap::new(),
            },
            extra: JsonMap::new(),
        });
        let part = match self.tools.get_mut(&call_id) {
            Some(part) => {
                let PartBody::Tool(t) = &mut part.body else {
                    unreachable!("tools map holds tool parts only")
                };
                if !matches!(t.state, ToolState::Pending(_)) {
                    return Err(Error::invalid(format!(
                        "tool-call for call {call_id}, which is already running"
                    )));
                }
                t.state = running;
                part.clone()
            }
            None => {
                let part = self.new_part(PartBody::Tool(ToolPart {
                    call_id: call_id.clone(),
                    tool,
                    state: running,
                    metadata: None,
                    extra: JsonMap::new(),
                }));
                self.tools.insert(call_id, part.clone());
                part
            }
        };
        self.commit_part(part).await
    }

    /// Takes a running tool out of the open set, or explains why it cannot.
    fn take_running(&mut self, call_id: &str, what: &str) -> Result<(Part, Value, i64)> {
        let state = match self.tools.get(call_id).map(|p| &p.body) {
            Some(PartBody::Tool(t)) => &t.state,
            _ => {
                return Err(Error::invalid(format!(
                    "{what} for call {call_id}, which is unknown"
                )))
            }
        };
        if !matches!(state, ToolState::Running(_)) {
            return Err(Error::invalid(format!(
                "{what} for call {call_id}, which is not running"
            )));
        }
        let Some(mut part) = self.tools.remove(call_id) else {
            unreachable!("checked above")
        };
        let PartBody::Tool(t) = &mut part.body else {
            unreachable!("tools map holds tool parts only")
        };
        let ToolState::Running(r) = &mut t.state else {
            unreachable!("checked above")
        };
        let input = std::mem::take(&mut r.input);
        let start = r.time.start;
        Ok((part, input, start))
    }

    async fn tool_result(&mut self, call_id: &str, output: Value) -> Result<()> {
        let (mut part, input, start) = self.take_running(call_id, "tool-result")?;
        let now = self.now();
        let (output, title, metadata) = match output {
            Value::String(s) => (s, String::new(), Value::Object(JsonMap::new())),
            Value::Object(mut m) if m.get("output").is_some_and(Value::is_string) => {
                let output = match m.remove("output") {
                    Some(Value::String(s)) => s,
                    _ => String::new(),
                };
                let title = match m.remove("title") {
                    Some(Value::String(s)) => s,
                    _ => String::new(),
                };
                let metadata = m
                    .remove("metadata")
                    .unwrap_or_else(|| Value::Object(JsonMap::new()));
                (output, title, metadata)
            }
            other => (
                other.to_string(),
                String::new(),
                Value::Object(JsonMap::new()),
            ),
        };
        if let PartBody::Tool(t) = &mut part.body {
            t.state = ToolState::Completed(ToolCompleted {
                input,
                output,
                title,
                metadata,
                time: ended(start, now),
                attachments: None,
                extra: JsonMap::new(),
            });
        }
        self.commit_part(part).await
    }

    async fn tool_error(&mut self, call_id: &str, error: &Value) -> Result<()> {
        let (mut part, input, start) = self.take_running(call_id, "tool-error")?;
        let now = self.now();
        let error = match error {
            Value::String(s) => s.clone(),
            Value::Object(m) => m
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned),
            other => other.to_string(),
        };
        if let PartBody::Tool(t) = &mut part.body {
            t.state = ToolState::Error(ToolError {
                input,
                error,
                metadata: None,
                time: ended(start, now),
                extra: JsonMap::new(),
            });
        }
        self.commit_part(part).await
    }

    async fn finish_step(
        &mut self,
        reason: String,
        usage: &Usage,
        cost: f64,
        snapshot: Option<String>,
        patch: Option<StepPatch>,
    ) -> Result<()> {
        let tokens = tokens_from(usage);
        let mut events = vec![SyncEvent::PartUpdated {
            part: self.new_part(PartBody::StepFinish(StepFinishPart {
                reason: reason.clone(),
                snapshot,
                cost,
                tokens: tokens.clone(),
                extra: JsonMap::new(),
            })),
        }];
        if let Some(p) = patch {
            events.push(SyncEvent::PartUpdated {
                part: self.new_part(PartBody::Patch(PatchPart {
                    hash: p.hash,
                    files: p.files,
                    extra: JsonMap::new(),
                })),
            });
        }
        if let Some(a) = self.message.as_assistant_mut() {
            a.tokens = tokens;
            a.cost += cost;
            a.finish = Some(reason);
        }
        events.push(SyncEvent::MessageUpdated {
            info: self.message.clone(),
        });
        self.commit(events).await
    }

    /// Closes the turn: every open text/reasoning part is persisted with the text
    /// accumulated so far and `time.end`; every `pending`/`running` tool becomes an
    /// `error` ("Tool execution aborted", `metadata.interrupted = true`); the message
    /// gets `time.completed` (and the error of a failed or aborted turn). One batch.
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
        let error = match outcome {
            Outcome::Finished => None,
            Outcome::Failed(e) => Some(e),
            Outcome::Aborted => Some(MessageError::aborted("The operation was aborted.")),
        };
        close::close_message(&mut self.message, now, error);
        events.push(SyncEvent::MessageUpdated {
            info: self.message.clone(),
        });
        self.commit(events).await?;
        self.done = true;
        Ok(())
    }

    /// Whether the turn has been finalized.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

fn ended(start: i64, end: i64) -> ToolTimeEnded {
    ToolTimeEnded {
        start,
        end,
        compacted: None,
        extra: JsonMap::new(),
    }
}

/// A new user message of `agent`, with no model, system prompt or tools set.
pub fn user_message(session_id: crate::id::SessionId, agent: &str, now: i64) -> Message {
    Message {
        id: crate::id::MessageId::generate(),
        session_id,
        body: MessageBody::User(crate::model::UserMessage {
            time: crate::model::UserTime {
                created: now,
                extra: JsonMap::new(),
            },
            agent: agent.to_owned(),
            model: None,
            system: None,
            tools: None,
            extra: JsonMap::new(),
        }),
    }
}

/// A new open assistant message answering `parent`.
pub fn assistant_message(
    session_id: crate::id::SessionId,
    parent: crate::id::MessageId,
    provider_id: &str,
    model_id: &str,
    now: i64,
) -> Message {
    Message {
        id: crate::id::MessageId::generate(),
        session_id,
        body: MessageBody::Assistant(crate::model::AssistantMessage {
            time: crate::model::AssistantTime {
                created: now,
                completed: None,
                extra: JsonMap::new(),
            },
            error: None,
            parent_id: parent,
            model_id: model_id.to_owned(),
            provider_id: provider_id.to_owned(),
            agent: None,
            path: None,
            summary: None,
            cost: 0.0,
            tokens: Tokens::default(),
            finish: None,
            extra: JsonMap::new(),
        }),
    }
}
