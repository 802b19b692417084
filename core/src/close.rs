//! Closing what a turn left open: shared by `finalize` (process alive) and `recover`
//! (after a crash), so both close parts the same way.

use serde_json::Value;

use crate::model::{
    JsonMap, Message, MessageError, Part, PartBody, ToolError, ToolState, ToolTimeEnded,
};

/// The error recorded on a tool closed while `pending` or `running`.
pub const TOOL_ABORTED: &str = "Tool execution aborted";

/// Closes an open text or reasoning part at `now`, optionally replacing its text.
/// Returns whether anything changed.
pub fn close_block(part: &mut Part, now: i64, text: Option<String>) -> bool {
    let (slot, time) = match &mut part.body {
        PartBody::Text(t) => match t.time.as_mut() {
            Some(time) if time.end.is_none() => (&mut t.text, time),
            _ => return false,
        },
        PartBody::Reasoning(r) if r.time.end.is_none() => (&mut r.text, &mut r.time),
        _ => return false,
    };
    if let Some(text) = text {
        *slot = text;
    }
    time.end = Some(now);
    true
}

/// Moves a `pending`/`running` tool to `error` with [`TOOL_ABORTED`] and
/// `metadata.interrupted = true` on the error state
/// (keeping a running tool's progress metadata). A pending tool keeps the input that
/// streamed before it was cut off: as its `input` when that text is whole JSON, else
/// as `metadata.raw`. Returns whether anything changed.
pub fn close_tool(part: &mut Part, now: i64) -> bool {
    let PartBody::Tool(tool) = &mut part.body else {
        return false;
    };
    let mut partial = None;
    let (input, start, previous) = match &mut tool.state {
        ToolState::Pending(p) => {
            let mut input = std::mem::take(&mut p.input);
            let raw = std::mem::take(&mut p.raw);
            let empty = input.is_null() || input.as_object().is_some_and(JsonMap::is_empty);
            if !raw.is_empty() {
                match serde_json::from_str::<Value>(&raw) {
                    Ok(whole) if empty => input = whole,
                    Ok(_) => {}
                    Err(_) => partial = Some(raw),
                }
            }
            (input, now, None)
        }
        ToolState::Running(r) => (
            std::mem::take(&mut r.input),
            r.time.start,
            r.metadata.take(),
        ),
        _ => return false,
    };
    let mut meta = match previous {
        Some(Value::Object(m)) => m,
        Some(other) => {
            let mut m = JsonMap::new();
            m.insert("previous".into(), other);
            m
        }
        None => JsonMap::new(),
    };
    meta.insert("interrupted".into(), Value::Bool(true));
    if let Some(raw) = partial {
        meta.insert("raw".into(), Value::String(raw));
    }
    tool.state = ToolState::Error(ToolError {
        input,
        error: TOOL_ABORTED.to_owned(),
        metadata: Some(Value::Object(meta)),
        time: ToolTimeEnded {
            start,
            end: now,
            compacted: None,
            extra: JsonMap::new(),
        },
        extra: JsonMap::new(),
    });
    true
}

/// Sets `time.completed` on an open assistant message and records `error` unless the
/// message already has one. Returns whether anything changed.
pub fn close_message(message: &mut Message, now: i64, error: Option<MessageError>) -> bool {
    let Some(a) = message.as_assistant_mut() else {
        return false;
    };
    if a.time.completed.is_some() {
        return false;
    }
    a.time.completed = Some(now);
    if a.error.is_none() {
        a.error = error;
    }
    true
}

/// Closes any open part the way finalize does; returns whether it changed.
pub fn close_part(part: &mut Part, now: i64) -> bool {
    close_block(part, now, None) || close_tool(part, now)
}
