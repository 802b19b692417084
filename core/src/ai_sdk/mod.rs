//! The next request, rebuilt from the store, in the AI SDK's shapes.
//!
//! - [`model_messages`]: the messages `streamText({ messages })` takes (`ModelMessage[]`),
//!   as the SDK itself accumulates them across steps (`result.responseMessages` in ai 7,
//!   `result.response.messages` in ai 5 and 6): per model step one `assistant` message
//!   and, for tools the app ran, one `tool` message with their results.
//! - [`ui_messages`]: what `useChat` renders (`UIMessage[]`): one message per user turn,
//!   its parts in stream order with `step-start` between steps.
//!
//! Both read the messages they are given, usually the compacted view
//! ([`crate::read::CompactedView`]): what the model is sent next turn. The shapes, and
//! where the three SDK majors differ, are in `docs/next-request.md`.

mod model;
mod ui;

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::model::{FilePart, ToolPart, ToolState};

pub use model::model_messages;
pub use ui::ui_messages;

/// The AI SDK major whose shapes are written. They differ in details only: how a tool's
/// error reaches the model (ai 7 writes the error as `Error: message`), and whether a
/// provider-executed tool's result says so (ai 5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AiSdk {
    /// `ai@5`.
    V5,
    /// `ai@6`.
    V6,
    /// `ai@7`, the current major.
    #[default]
    V7,
}

impl FromStr for AiSdk {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim_start_matches('v') {
            "5" => Ok(Self::V5),
            "6" => Ok(Self::V6),
            "7" => Ok(Self::V7),
            _ => Err(format!("AI SDK version {s:?}: expected 5, 6 or 7")),
        }
    }
}

impl fmt::Display for AiSdk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V5 => "5",
            Self::V6 => "6",
            Self::V7 => "7",
        })
    }
}

/// A JSON object from `(key, value)` pairs, leaving out the `None`s.
fn object<const N: usize>(fields: [(&str, Option<Value>); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    }
    Value::Object(m)
}

/// A string field of [`object`] (whose fields are `Option`s: `None` leaves one out).
#[allow(clippy::unnecessary_wraps)]
fn string(s: &str) -> Option<Value> {
    Some(Value::String(s.to_owned()))
}

/// Provider metadata as stored (`null` counts as none).
fn metadata(m: Option<&Value>) -> Option<Value> {
    m.filter(|v| !v.is_null()).cloned()
}

/// A file part's provider metadata (kept in its `metadata` field).
fn file_metadata(f: &FilePart) -> Option<Value> {
    metadata(f.extra.get("metadata"))
}

/// Whether a file part was generated inside reasoning (`reasoning-file`).
fn is_reasoning_file(f: &FilePart) -> bool {
    f.extra.get("reasoning") == Some(&Value::Bool(true))
}

/// Whether the provider ran the tool itself.
fn provider_executed(t: &ToolPart) -> bool {
    t.extra.get(crate::processor::PROVIDER_EXECUTED) == Some(&Value::Bool(true))
}

/// The provider metadata of a tool's result: its own where it had one other than the
/// call's, else the call's (the SDK repeats the call's on the result).
fn result_metadata(t: &ToolPart) -> Option<Value> {
    metadata(t.extra.get(crate::processor::RESULT_METADATA))
        .or_else(|| metadata(t.metadata.as_ref()))
}

/// The metadata of a tool's state.
fn state_metadata(state: &ToolState) -> Option<&Value> {
    match state {
        ToolState::Pending(_) => None,
        ToolState::Running(r) => r.metadata.as_ref(),
        ToolState::Completed(c) => Some(&c.metadata),
        ToolState::Error(e) => e.metadata.as_ref(),
    }
}

/// A tool's approval as the SDK has it: the request's id, the answer once given.
struct Approval {
    id: String,
    /// `None` while the user has not answered.
    approved: Option<bool>,
    reason: Option<String>,
}

fn approval(state: &ToolState) -> Option<Approval> {
    let a = state_metadata(state)?.get("approval")?;
    let id = a.get("id")?.as_str()?.to_owned();
    let approved = match a.get("status").and_then(Value::as_str) {
        Some("approved") => Some(true),
        Some("denied") => Some(false),
        _ => None,
    };
    let reason = a.get("reason").and_then(Value::as_str).map(str::to_owned);
    Some(Approval {
        id,
        approved,
        reason,
    })
}

/// Whether an `error` state is the user's denial.
fn denied(state: &ToolState) -> bool {
    matches!(state, ToolState::Error(e) if e.metadata.as_ref()
        .and_then(|m| m.get("denied")) == Some(&Value::Bool(true)))
}

/// A tool call's input: what was parsed so far while it streams.
fn tool_input(state: &ToolState) -> &Value {
    match state {
        ToolState::Pending(p) => &p.input,
        ToolState::Running(r) => &r.input,
        ToolState::Completed(c) => &c.input,
        ToolState::Error(e) => &e.input,
    }
}

/// A `data:` URL's base64 payload, or the URL itself.
fn file_data(url: &str) -> &str {
    url.strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .map_or(url, |(_, data)| data)
}

/// The error text the model is sent for a failed tool: the SDK's `getErrorMessage`. ai 7
/// writes an error object as JavaScript's `Error#toString` does (`name: message`); ai 5
/// and 6 write its message.
fn error_text(state: &ToolState, sdk: AiSdk) -> String {
    let ToolState::Error(e) = state else {
        return String::new();
    };
    let object = e
        .metadata
        .as_ref()
        .and_then(|m| m.get(crate::processor::TOOL_ERROR_OBJECT))
        .and_then(Value::as_object);
    match (sdk, object) {
        (AiSdk::V7, Some(o)) => match o.get("name").and_then(Value::as_str) {
            Some(name) => {
                let message = o.get("message").and_then(Value::as_str).unwrap_or("");
                match (name.is_empty(), message.is_empty()) {
                    (true, _) => message.to_owned(),
                    (false, true) => name.to_owned(),
                    (false, false) => format!("{name}: {message}"),
                }
            }
            None => e.error.clone(),
        },
        _ => e.error.clone(),
    }
}

#[cfg(test)]
mod tests;
