//! What a processor must have persisted after any prefix of a model stream: a small
//! reference processor (docs/design.md §3) the crash-boundary properties compare with.

use std::collections::HashMap;

use forge_core::StreamEvent;
use serde_json::Value;

use super::stream::StreamEnd;

/// What a part must look like, in creation (= id) order.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// A text or reasoning block.
    Block {
        /// Reasoning rather than text.
        reasoning: bool,
        /// Every delta fed so far, concatenated.
        streamed: String,
        /// After `*-end`: the persisted text (trailing whitespace trimmed).
        closed: Option<String>,
    },
    /// A tool call.
    Tool {
        /// Call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// Its state as last persisted.
        state: ExpectedTool,
    },
    /// `step-start`.
    StepStart,
    /// `step-finish` with its reason.
    StepFinish(String),
    /// `patch` with its hash.
    Patch(String),
}

/// A tool's persisted state.
#[derive(Clone, Debug, PartialEq)]
pub enum ExpectedTool {
    /// `pending` (input `{}`).
    Pending,
    /// `running` with the call's input.
    Running(Value),
    /// `completed` with output and title.
    Completed(String, String),
    /// `error` with the tool's error.
    Error(String),
}

/// What a processor persisted after a prefix of a stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fed {
    /// Parts in creation order.
    pub parts: Vec<Expected>,
    /// The stream's own end, when it was among the fed events.
    pub ended: Option<StreamEnd>,
    /// Deltas fed.
    pub deltas: usize,
}

/// Plays `events` the way the Processor (docs/design.md §3) must.
pub fn feed(events: &[StreamEvent]) -> Fed {
    let mut fed = Fed::default();
    let mut blocks: HashMap<String, usize> = HashMap::new();
    let mut tools: HashMap<String, usize> = HashMap::new();
    for e in events {
        match e {
            StreamEvent::TextStart { id, .. } | StreamEvent::ReasoningStart { id, .. } => {
                blocks.insert(id.clone(), fed.parts.len());
                fed.parts.push(Expected::Block {
                    reasoning: matches!(e, StreamEvent::ReasoningStart { .. }),
                    streamed: String::new(),
                    closed: None,
                });
            }
            StreamEvent::TextDelta { id, text, .. }
            | StreamEvent::ReasoningDelta { id, text, .. } => {
                fed.deltas += 1;
                if let Some(Expected::Block { streamed, .. }) =
                    blocks.get(id).and_then(|&i| fed.parts.get_mut(i))
                {
                    streamed.push_str(text);
                }
            }
            StreamEvent::TextEnd { id, .. } | StreamEvent::ReasoningEnd { id, .. } => {
                if let Some(Expected::Block {
                    streamed, closed, ..
                }) = blocks.remove(id).and_then(|i| fed.parts.get_mut(i))
                {
                    *closed = Some(streamed.clone());
                }
            }
            StreamEvent::ToolInputStart { id, tool_name, .. } => {
                tools.insert(id.clone(), fed.parts.len());
                fed.parts.push(Expected::Tool {
                    call_id: id.clone(),
                    tool: tool_name.clone(),
                    state: ExpectedTool::Pending,
                });
            }
            StreamEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
                ..
            } => {
                let running = ExpectedTool::Running(input.clone());
                match tools.get(tool_call_id).and_then(|&i| fed.parts.get_mut(i)) {
                    Some(Expected::Tool { state, .. }) => *state = running,
                    _ => {
                        tools.insert(tool_call_id.clone(), fed.parts.len());
                        fed.parts.push(Expected::Tool {
                            call_id: tool_call_id.clone(),
                            tool: tool_name.clone(),
                            state: running,
                        });
                    }
                }
            }
            StreamEvent::ToolResult {
                tool_call_id,
                output,
                ..
            } => {
                let done = match output {
                    Value::String(s) => ExpectedTool::Completed(s.clone(), String::new()),
                    v => ExpectedTool::Completed(
                        v["output"].as_str().unwrap_or_default().to_owned(),
                        v["title"].as_str().unwrap_or_default().to_owned(),
                    ),
                };
                if let Some(Expected::Tool { state, .. }) = tools
                    .remove(tool_call_id)
                    .and_then(|i| fed.parts.get_mut(i))
                {
                    *state = done;
                }
            }
            StreamEvent::ToolError {
                tool_call_id,
                error,
                ..
            } => {
                if let Some(Expected::Tool { state, .. }) = tools
                    .remove(tool_call_id)
                    .and_then(|i| fed.parts.get_mut(i))
                {
                    *state = ExpectedTool::Error(error.as_str().unwrap_or_default().to_owned());
                }
            }
            StreamEvent::StartStep {} => fed.parts.push(Expected::StepStart),
            StreamEvent::FinishStep {
                finish_reason,
                patch,
                ..
            } => {
                fed.parts.push(Expected::StepFinish(finish_reason.clone()));
                if let Some(p) = patch {
                    fed.parts.push(Expected::Patch(p.hash.clone()));
                }
            }
            StreamEvent::Finish { .. } => fed.ended = Some(StreamEnd::Finish),
            StreamEvent::Error { error } => {
                fed.ended = Some(StreamEnd::Error(error.as_str().unwrap_or_default().into()));
            }
            StreamEvent::Abort { .. } => fed.ended = Some(StreamEnd::Abort),
            _ => {}
        }
        if fed.ended.is_some() {
            break;
        }
    }
    fed
}
