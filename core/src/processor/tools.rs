//! Tool calls: `pending` → `running` → `completed` / `error`, and the wait for the
//! user's approval in between.

use serde_json::Value;

use super::inflight::{Call, CallState, ToolHead};
use super::machine::Machine;
use crate::error::{Error, Result};
use crate::id::PartId;
use crate::model::{
    split_output, JsonMap, Part, ToolCompleted, ToolError, ToolPending, ToolRunning, ToolState,
    ToolTime, ToolTimeEnded, APPROVAL_REQUESTED,
};

impl Machine {
    fn new_call_head(&self, call_id: String, tool: String) -> ToolHead {
        ToolHead {
            id: PartId::generate(),
            session_id: self.session_id.clone(),
            message_id: self.message.id.clone(),
            call_id,
            tool,
            metadata: None,
            extra: JsonMap::new(),
        }
    }

    /// Starts tracking a call of this message in `state` and commits its part.
    fn add_call(
        &mut self,
        call_id: String,
        tool: String,
        metadata: Option<Value>,
        extra: JsonMap,
        state: CallState,
    ) {
        let mut head = self.new_call_head(call_id.clone(), tool);
        head.metadata = metadata;
        head.extra.extend(extra);
        let call = Call { head, state };
        let part = call.to_part();
        self.tools.insert(call_id, call);
        self.commit_part(part);
    }

    /// `tool-input-start`: the call is `pending`; the provider's metadata is the
    /// part's.
    pub(super) fn tool_input_start(
        &mut self,
        id: String,
        tool: String,
        provider_metadata: Option<Value>,
    ) -> Result<()> {
        if self.tools.get(&id).is_some_and(|c| c.state.is_open()) {
            return Err(Error::invalid(format!(
                "tool-input-start for call {id}, which is already open"
            )));
        }
        self.new_call(&id, "tool-input-start")?;
        let pending = CallState::Pending(ToolPending {
            input: Value::Object(JsonMap::new()),
            raw: String::new(),
            extra: JsonMap::new(),
        });
        self.add_call(id, tool, provider_metadata, JsonMap::new(), pending);
        Ok(())
    }

    /// `tool-input-delta`: the input text of a pending call grows (in memory: nothing
    /// is committed or published). A delta for a call that is not pending is ignored,
    /// as the stream's input deltas always were.
    pub(super) fn tool_input_delta(&mut self, id: &str, delta: &str) {
        if let Some(Call {
            state: CallState::Pending(p),
            ..
        }) = self.tools.get_mut(id)
        {
            p.raw.push_str(delta);
        }
    }

    /// `tool-call`: a pending call of this message, or a new one, is `running`; the
    /// provider's metadata, when given, is the part's.
    pub(super) fn tool_call(
        &mut self,
        call_id: String,
        tool: String,
        input: Value,
        provider_metadata: Option<Value>,
        provider_executed: bool,
    ) -> Result<()> {
        let now = self.now();
        let running = ToolRunning {
            input,
            title: None,
            metadata: None,
            time: ToolTime {
                start: now,
                extra: JsonMap::new(),
            },
            extra: JsonMap::new(),
        };
        match self.tools.get_mut(&call_id) {
            Some(call) if matches!(call.state, CallState::Pending(_)) => {
                call.state = CallState::Running(running);
                if provider_metadata.is_some() {
                    call.head.metadata = provider_metadata;
                }
                if provider_executed {
                    call.head
                        .extra
                        .insert(PROVIDER_EXECUTED.into(), Value::Bool(true));
                }
                let part = call.to_part();
                self.commit_part(part);
                return Ok(());
            }
            Some(call) if matches!(call.state, CallState::Running(_)) => {
                return Err(Error::invalid(format!(
                    "tool-call for call {call_id}, which is already running"
                )));
            }
            // A call waiting for approval is open: `new_call` refuses its id.
            _ => {}
        }
        self.new_call(&call_id, "tool-call")?;
        let mut extra = JsonMap::new();
        if provider_executed {
            extra.insert(PROVIDER_EXECUTED.into(), Value::Bool(true));
        }
        self.add_call(
            call_id,
            tool,
            provider_metadata,
            extra,
            CallState::Running(running),
        );
        Ok(())
    }

    /// Takes a call that may finish now out of the machine: a running call of this
    /// message, or one waiting for approval, in this message or (`waiting`, the
    /// store's answer to [`Machine::lookup`]) in an earlier one. Explains why when
    /// there is none.
    fn take_running(&mut self, call_id: &str, what: &str, waiting: Option<Part>) -> Result<Taken> {
        let found = match self.tools.remove(call_id) {
            Some(Call {
                head,
                state: CallState::Running(r) | CallState::Awaiting(r),
            }) => Some((head, r)),
            Some(pending) => {
                self.tools.insert(call_id.to_owned(), pending);
                return Err(Error::invalid(format!(
                    "{what} for call {call_id}, which is not running"
                )));
            }
            None if self.calls.contains(call_id) => {
                return Err(Error::invalid(format!(
                    "{what} for call {call_id}, which has already ended"
                )))
            }
            None => waiting
                .and_then(ToolHead::waiting)
                .filter(|(head, _)| head.call_id == call_id),
        };
        let Some((head, running)) = found else {
            return Err(Error::invalid(format!(
                "{what} for call {call_id}, which is unknown (no call in this message, and \
                 none waiting for approval in this session)"
            )));
        };
        Ok(Taken::new(head, running))
    }

    /// Finishes a call [`take_running`](Self::take_running) finds: commits its part in
    /// the state `close` makes of its input, its approval record and its times (ended
    /// now).
    fn finish_call(
        &mut self,
        call_id: &str,
        what: &str,
        waiting: Option<Part>,
        result_metadata: Option<Value>,
        close: impl FnOnce(Value, Option<Value>, ToolTimeEnded) -> ToolState,
    ) -> Result<()> {
        let Taken {
            mut head,
            input,
            start,
            approval,
        } = self.take_running(call_id, what, waiting)?;
        // The result's provider metadata, where it is not the call's (the SDK repeats
        // the call's on the result of a tool the app ran).
        if let Some(m) =
            result_metadata.filter(|m| !m.is_null() && Some(m) != head.metadata.as_ref())
        {
            head.extra.insert(RESULT_METADATA.into(), m);
        }
        let time = ended(start, self.now());
        self.commit_part(head.into_part(close(input, approval, time)));
        Ok(())
    }

    /// `tool-output-denied`: the call closes as an error that says it was denied.
    pub(super) fn output_denied(&mut self, call_id: &str, waiting: Option<Part>) -> Result<()> {
        self.finish_call(
            call_id,
            "tool-output-denied",
            waiting,
            None,
            |input, approval, time| {
                let mut approval = match approval {
                    Some(Value::Object(m)) => m,
                    _ => JsonMap::new(),
                };
                approval.insert("status".into(), Value::String("denied".into()));
                let error = match approval.get("reason").and_then(Value::as_str) {
                    Some(reason) => format!("{TOOL_DENIED}: {reason}"),
                    None => TOOL_DENIED.to_owned(),
                };
                let mut metadata = JsonMap::new();
                metadata.insert("denied".into(), Value::Bool(true));
                metadata.insert("approval".into(), Value::Object(approval));
                tool_error(input, error, Some(Value::Object(metadata)), time)
            },
        )
    }

    /// `tool-result`: the call is `completed`.
    pub(super) fn tool_result(
        &mut self,
        call_id: &str,
        output: Value,
        provider_metadata: Option<Value>,
        waiting: Option<Part>,
    ) -> Result<()> {
        let (output, title, metadata, marks) = split_output(output);
        let result = provider_metadata;
        self.finish_call(
            call_id,
            "tool-result",
            waiting,
            result,
            |input, approval, time| {
                ToolState::Completed(ToolCompleted {
                    input,
                    output,
                    title,
                    metadata: with_approval(metadata, approval),
                    time,
                    attachments: None,
                    extra: marks,
                })
            },
        )
    }

    /// A preliminary result: the tool stays running, its latest progress value in
    /// `metadata.preliminary`, written and published so subscribers see it.
    pub(super) fn tool_progress(&mut self, call_id: &str, output: Value) -> Result<()> {
        let Some(call) = self.tools.get_mut(call_id) else {
            return Err(unknown_progress(call_id));
        };
        let running = match &mut call.state {
            CallState::Running(r) => r,
            CallState::Pending(_) => {
                return Err(Error::invalid(format!(
                    "preliminary tool-result for call {call_id}, which is not running"
                )))
            }
            // A call waiting for approval is not running work of this message.
            CallState::Awaiting(_) => return Err(unknown_progress(call_id)),
        };
        let mut metadata = match running.metadata.take() {
            Some(Value::Object(m)) => m,
            _ => JsonMap::new(),
        };
        metadata.insert("preliminary".into(), output);
        running.metadata = Some(Value::Object(metadata));
        let part = call.to_part();
        self.commit_part(part);
        Ok(())
    }

    /// `tool-error`: the call is `error`.
    pub(super) fn tool_error(
        &mut self,
        call_id: &str,
        error: &Value,
        provider_metadata: Option<Value>,
        waiting: Option<Part>,
    ) -> Result<()> {
        // An error object (`{name, message, …}`) is kept whole in `metadata.error`: its
        // message is the state's `error`, and a rebuilt request can render it as the
        // producer did (`Error: …`).
        let (text, object) = match error {
            Value::String(s) => (s.clone(), None),
            Value::Object(m) => (
                m.get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_owned),
                Some(error.clone()),
            ),
            other => (other.to_string(), None),
        };
        let result = provider_metadata;
        self.finish_call(
            call_id,
            "tool-error",
            waiting,
            result,
            |input, approval, time| {
                let mut metadata = approval
                    .map(|a| with_approval(Value::Object(JsonMap::new()), Some(a)))
                    .or_else(|| object.is_some().then(|| Value::Object(JsonMap::new())));
                if let (Some(Value::Object(m)), Some(object)) = (metadata.as_mut(), object) {
                    m.insert(TOOL_ERROR_OBJECT.into(), object);
                }
                tool_error(input, text, metadata, time)
            },
        )
    }
}

/// The `error` state of a call.
fn tool_error(
    input: Value,
    error: String,
    metadata: Option<Value>,
    time: ToolTimeEnded,
) -> ToolState {
    ToolState::Error(ToolError {
        input,
        error,
        metadata,
        time,
        extra: JsonMap::new(),
    })
}

fn unknown_progress(call_id: &str) -> Error {
    Error::invalid(format!(
        "preliminary tool-result for call {call_id}, which is unknown"
    ))
}

/// `providerExecuted`: on a tool part whose tool the provider ran itself.
pub const PROVIDER_EXECUTED: &str = "providerExecuted";

/// `resultMetadata`: on a tool part whose result carried provider metadata other than
/// its call's (a provider-executed tool's result).
pub const RESULT_METADATA: &str = "resultMetadata";

/// `metadata.error` of an `error` state: the producer's error object, whole.
pub const TOOL_ERROR_OBJECT: &str = "error";

/// The error of a tool the user denied.
pub const TOOL_DENIED: &str = "The user denied this tool call";

/// A call taken out of the machine to be finished.
struct Taken {
    head: ToolHead,
    input: Value,
    start: i64,
    /// `metadata.approval` of a call that waited for approval.
    approval: Option<Value>,
}

impl Taken {
    fn new(head: ToolHead, mut running: ToolRunning) -> Self {
        let approval = running
            .metadata
            .as_mut()
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove("approval"));
        Self {
            head,
            input: running.input,
            start: running.time.start,
            approval,
        }
    }
}

/// `metadata` with the approval record of a call that waited for approval, marked
/// approved unless it says otherwise.
fn with_approval(metadata: Value, approval: Option<Value>) -> Value {
    let Some(Value::Object(mut approval)) = approval else {
        return metadata;
    };
    if approval.get("status").and_then(Value::as_str) == Some(APPROVAL_REQUESTED) {
        approval.insert("status".into(), Value::String("approved".into()));
    }
    match metadata {
        Value::Object(mut m) => {
            m.insert("approval".into(), Value::Object(approval));
            Value::Object(m)
        }
        other => other,
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
