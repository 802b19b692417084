//! Tool calls: `pending` → `running` → `completed` / `error`.

use serde_json::Value;

use super::Processor;
use crate::error::{Error, Result};
use crate::model::{
    JsonMap, Part, PartBody, ToolCompleted, ToolError, ToolPart, ToolRunning, ToolState, ToolTime,
    ToolTimeEnded,
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

    pub(super) async fn tool_result(&mut self, call_id: &str, output: Value) -> Result<()> {
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
}

fn ended(start: i64, end: i64) -> ToolTimeEnded {
    ToolTimeEnded {
        start,
        end,
        compacted: None,
        extra: JsonMap::new(),
    }
}
