//! Tool calls: `pending` → `running` → `completed` / `error`.

use serde_json::Value;

use super::Processor;
use crate::error::{Error, Result};
use crate::model::{
    JsonMap, Part, PartBody, ToolCompleted, ToolError, ToolPart, ToolRunning, ToolState, ToolTime,
    ToolTimeEnded, APPROVAL_REQUESTED,
};

impl Processor {
    pub(super) async fn tool_call(
        &mut self,
        call_id: String,
        tool: String,
        input: Value,
    ) -> Result<()> {
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
                self.new_call(&call_id, "tool-call")?;
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

    /// Takes a call that may finish now out of the processor: a running tool of this
    /// message, or one waiting for approval — in this message or, found in the store, in
    /// an earlier message of the session. Explains why when there is none.
    async fn take_running(&mut self, call_id: &str, what: &str) -> Result<Taken> {
        let mut part = match self.tools.get(call_id).map(|p| &p.body) {
            Some(PartBody::Tool(t)) if matches!(t.state, ToolState::Running(_)) => {
                self.tools.remove(call_id)
            }
            Some(_) => {
                return Err(Error::invalid(format!(
                    "{what} for call {call_id}, which is not running"
                )))
            }
            None => match self.awaiting.remove(call_id) {
                Some(p) => Some(p),
                None if self.calls.contains(call_id) => {
                    return Err(Error::invalid(format!(
                        "{what} for call {call_id}, which has already ended"
                    )))
                }
                None => self.find_waiting(call_id).await?,
            },
        }
        .ok_or_else(|| {
            Error::invalid(format!(
                "{what} for call {call_id}, which is unknown (no call in this message, and \
                 none waiting for approval in this session)"
            ))
        })?;
        let PartBody::Tool(t) = &mut part.body else {
            unreachable!("tools map holds tool parts only")
        };
        let ToolState::Running(r) = &mut t.state else {
            unreachable!("checked above")
        };
        let input = std::mem::take(&mut r.input);
        let start = r.time.start;
        let approval = r
            .metadata
            .as_mut()
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove("approval"));
        Ok(Taken {
            part,
            input,
            start,
            approval,
        })
    }

    /// The tool of an earlier message of this session that waits for approval with
    /// `call_id`: the newest such call, searched from the newest message back, at most
    /// [`APPROVAL_SEARCH_MESSAGES`] messages deep.
    async fn find_waiting(&self, call_id: &str) -> Result<Option<Part>> {
        self.projector.sync().await?;
        let store = self.projector.store();
        let mut cursor = None;
        let mut seen = 0;
        while seen < APPROVAL_SEARCH_MESSAGES {
            let page = store
                .messages(
                    &self.scope.tenant,
                    &self.scope.session_id,
                    cursor.as_ref(),
                    100,
                )
                .await?;
            seen += page.messages.len();
            for m in page.messages.iter().rev() {
                let found = m.parts.iter().find(|p| match &p.body {
                    PartBody::Tool(t) => t.call_id == call_id && t.awaits_approval(),
                    _ => false,
                });
                if let Some(p) = found {
                    return Ok(Some(p.clone()));
                }
            }
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        Ok(None)
    }

    /// `tool-approval-request`: the running call waits for the user. It leaves the open
    /// set, so finalize does not close it; [`Part::is_open`] is false for it, so recover
    /// does not either.
    pub(super) async fn approval_request(
        &mut self,
        call_id: &str,
        approval_id: &str,
        reason: Option<&str>,
    ) -> Result<()> {
        let Some(mut part) = self.tools.remove(call_id) else {
            return Err(Error::invalid(format!(
                "tool-approval-request for call {call_id}, which is not running in this \
                 message"
            )));
        };
        let PartBody::Tool(t) = &mut part.body else {
            unreachable!("tools map holds tool parts only")
        };
        if !t.request_approval(approval_id, reason) {
            let state = part_status(&part);
            self.tools.insert(call_id.to_owned(), part);
            return Err(Error::invalid(format!(
                "tool-approval-request for call {call_id}, which is {state}, not running"
            )));
        }
        self.awaiting.insert(call_id.to_owned(), part.clone());
        self.commit_part(part).await
    }

    /// `tool-approval-response`: the decision is recorded on the waiting call. Approved,
    /// the call is open work again (it runs next); denied, it stays open until its
    /// `tool-output-denied`. Either way finalize and recover close it if nothing follows.
    pub(super) async fn approval_response(
        &mut self,
        approval_id: &str,
        call_id: Option<&str>,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<()> {
        let by_approval = |p: &Part| match &p.body {
            PartBody::Tool(t) => t
                .approval()
                .and_then(|a| a.get("id"))
                .and_then(Value::as_str)
                .is_some_and(|id| id == approval_id),
            _ => false,
        };
        let local = self
            .awaiting
            .iter()
            .find(|(id, p)| call_id.is_none_or(|c| *id == c) && by_approval(p))
            .map(|(id, _)| id.clone());
        let found = match (local, call_id) {
            (Some(id), _) => self.awaiting.remove(&id),
            (None, Some(c)) if !self.calls.contains(c) => {
                self.find_waiting(c).await?.filter(by_approval)
            }
            _ => None,
        };
        let Some(mut part) = found else {
            return Err(Error::invalid(format!(
                "tool-approval-response for approval {approval_id}, which no call waiting \
                 for approval has"
            )));
        };
        let PartBody::Tool(t) = &mut part.body else {
            unreachable!("found tool parts only")
        };
        let ToolState::Running(r) = &mut t.state else {
            unreachable!("a call waiting for approval is running")
        };
        if let Some(a) = r
            .metadata
            .as_mut()
            .and_then(|m| m.get_mut("approval"))
            .and_then(Value::as_object_mut)
        {
            let status = if approved { "approved" } else { "denied" };
            a.insert("status".into(), Value::String(status.into()));
            if let Some(reason) = reason {
                a.insert("reason".into(), Value::String(reason.to_owned()));
            }
        }
        self.calls.insert(t.call_id.clone());
        self.tools.insert(t.call_id.clone(), part.clone());
        self.commit_part(part).await
    }

    /// `tool-output-denied`: the call closes as an error that says it was denied.
    pub(super) async fn output_denied(&mut self, call_id: &str) -> Result<()> {
        let Taken {
            mut part,
            input,
            start,
            approval,
        } = self.take_running(call_id, "tool-output-denied").await?;
        let now = self.now();
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
        if let PartBody::Tool(t) = &mut part.body {
            t.state = ToolState::Error(ToolError {
                input,
                error,
                metadata: Some(Value::Object(metadata)),
                time: ended(start, now),
                extra: JsonMap::new(),
            });
        }
        self.commit_part(part).await
    }

    pub(super) async fn tool_result(&mut self, call_id: &str, output: Value) -> Result<()> {
        let Taken {
            mut part,
            input,
            start,
            approval,
        } = self.take_running(call_id, "tool-result").await?;
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
        let metadata = with_approval(metadata, approval);
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

    /// A preliminary result: the tool stays running, its latest progress value in
    /// `metadata.preliminary`, written and published so subscribers see it.
    pub(super) async fn tool_progress(&mut self, call_id: &str, output: Value) -> Result<()> {
        let Some(part) = self.tools.get_mut(call_id) else {
            return Err(Error::invalid(format!(
                "preliminary tool-result for call {call_id}, which is unknown"
            )));
        };
        let PartBody::Tool(t) = &mut part.body else {
            unreachable!("tools map holds tool parts only")
        };
        let ToolState::Running(r) = &mut t.state else {
            return Err(Error::invalid(format!(
                "preliminary tool-result for call {call_id}, which is not running"
            )));
        };
        let mut metadata = match r.metadata.take() {
            Some(Value::Object(m)) => m,
            _ => JsonMap::new(),
        };
        metadata.insert("preliminary".into(), output);
        r.metadata = Some(Value::Object(metadata));
        let part = part.clone();
        self.commit_part(part).await
    }

    pub(super) async fn tool_error(&mut self, call_id: &str, error: &Value) -> Result<()> {
        let Taken {
            mut part,
            input,
            start,
            approval,
        } = self.take_running(call_id, "tool-error").await?;
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
                metadata: approval.map(|a| with_approval(Value::Object(JsonMap::new()), Some(a))),
                time: ended(start, now),
                extra: JsonMap::new(),
            });
        }
        self.commit_part(part).await
    }
}

/// How deep [`Processor::find_waiting`] looks for a call waiting for approval.
pub const APPROVAL_SEARCH_MESSAGES: usize = 1000;

/// The error of a tool the user denied.
pub const TOOL_DENIED: &str = "The user denied this tool call";

/// A call taken out of the processor to be finished.
struct Taken {
    part: Part,
    input: Value,
    start: i64,
    /// `metadata.approval` of a call that waited for approval.
    approval: Option<Value>,
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

fn part_status(part: &Part) -> &'static str {
    match &part.body {
        PartBody::Tool(t) => match t.state {
            ToolState::Pending(_) => "pending",
            ToolState::Running(_) => "running",
            ToolState::Completed(_) => "completed",
            ToolState::Error(_) => "error",
        },
        _ => "not a tool",
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
