//! `UIMessage[]`: what `useChat` renders.

use serde_json::{json, Value};

use super::{
    approval, denied, file_metadata, is_reasoning_file, metadata, object, provider_executed,
    result_metadata, string, tool_input, AiSdk, Approval,
};
use crate::model::{MessageWithParts, Part, PartBody, PartTime, ToolPart, ToolState};

/// The messages of `history` as the AI SDK's `UIMessage[]`: `{id, role, parts}`.
///
/// A user message is one UI message. The assistant messages that answer one user message
/// are one UI message (the id of the first), as `useChat` shows a turn that continued
/// after a tool approval; each stored message and each model step starts with a
/// `step-start` part. Tools are `tool-{name}` parts in the state the SDK gives them
/// (`input-streaming`, `input-available`, `approval-requested`, `approval-responded`,
/// `output-available`, `output-error`, `output-denied`); provider metadata is
/// `providerMetadata` (`callProviderMetadata` and `resultProviderMetadata` on tools).
pub fn ui_messages(history: &[MessageWithParts], sdk: AiSdk) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut assistant_open = false;
    for m in history {
        let user = m.info.is_user();
        let parts: Vec<Value> = m
            .parts
            .iter()
            .filter_map(|p| ui_part(p, user, sdk))
            .collect();
        if !user && assistant_open {
            if let Some(last) = out.last_mut().and_then(|l| l.get_mut("parts")) {
                if let Some(list) = last.as_array_mut() {
                    list.extend(parts);
                    continue;
                }
            }
        }
        assistant_open = !user;
        out.push(json!({
            "id": m.info.id.to_string(),
            "role": if user { "user" } else { "assistant" },
            "parts": parts,
        }));
    }
    out
}

/// `done` once the block was closed, `streaming` while it is open.
fn block_state(time: Option<&PartTime>) -> Option<Value> {
    match time {
        Some(t) if t.end.is_none() => string("streaming"),
        _ => string("done"),
    }
}

fn ui_part(p: &Part, user: bool, sdk: AiSdk) -> Option<Value> {
    Some(match &p.body {
        PartBody::StepStart(_) => json!({"type": "step-start"}),
        PartBody::Text(t) if t.ignored != Some(true) => object([
            ("type", string("text")),
            ("text", string(&t.text)),
            (
                "state",
                if user {
                    None
                } else {
                    block_state(t.time.as_ref())
                },
            ),
            ("providerMetadata", metadata(t.metadata.as_ref())),
            // ai 7's UI keeps a text block's citations; ai 5 and 6 have none.
            (
                "citations",
                (sdk == AiSdk::V7)
                    .then(|| t.extra.get("citations").cloned())
                    .flatten(),
            ),
        ]),
        PartBody::Reasoning(r) => object([
            ("type", string("reasoning")),
            ("text", string(&r.text)),
            ("state", block_state(Some(&r.time))),
            ("providerMetadata", metadata(r.metadata.as_ref())),
        ]),
        PartBody::File(f) => object([
            (
                "type",
                string(if is_reasoning_file(f) {
                    "reasoning-file"
                } else {
                    "file"
                }),
            ),
            ("mediaType", string(&f.mime)),
            ("filename", f.filename.as_deref().and_then(string)),
            ("url", string(&f.url)),
            ("providerMetadata", file_metadata(f)),
        ]),
        PartBody::Source(s) if s.source_type == "url" => object([
            ("type", string("source-url")),
            ("sourceId", string(&s.source_id)),
            ("url", s.url.as_deref().and_then(string)),
            ("title", s.title.as_deref().and_then(string)),
            ("providerMetadata", metadata(s.metadata.as_ref())),
        ]),
        PartBody::Source(s) => object([
            ("type", string("source-document")),
            ("sourceId", string(&s.source_id)),
            ("mediaType", s.media_type.as_deref().and_then(string)),
            ("title", s.title.as_deref().and_then(string)),
            ("filename", s.filename.as_deref().and_then(string)),
            ("providerMetadata", metadata(s.metadata.as_ref())),
        ]),
        PartBody::Tool(t) => tool_part(t, sdk),
        PartBody::Steering(s) => json!({
            "type": "steering-message",
            "id": s.steering_id,
            "parts": user_content_parts(&s.message["content"]),
        }),
        _ => return None,
    })
}

fn approval_value(a: &Approval) -> Value {
    object([
        ("id", string(&a.id)),
        ("approved", a.approved.map(Value::Bool)),
        ("reason", a.reason.as_deref().and_then(string)),
    ])
}

fn tool_part(t: &ToolPart, sdk: AiSdk) -> Value {
    let approval = approval(&t.state);
    let (state, output, error) = match &t.state {
        ToolState::Pending(_) => ("input-streaming", None, None),
        ToolState::Running(_) => match approval.as_ref().map(|a| a.approved) {
            Some(None) => ("approval-requested", None, None),
            Some(Some(_)) => ("approval-responded", None, None),
            None => ("input-available", None, None),
        },
        ToolState::Completed(c) => ("output-available", Some(c.returned()), None),
        ToolState::Error(_) if denied(&t.state) => ("output-denied", None, None),
        ToolState::Error(e) => ("output-error", None, string(&e.error)),
    };
    let meta = metadata(t.metadata.as_ref());
    // ai 6 and 7 repeat the call's metadata for its result; ai 5 has the call's only.
    let result_meta = (sdk != AiSdk::V5 && matches!(t.state, ToolState::Completed(_)))
        .then(|| result_metadata(t))
        .flatten();
    object([
        ("type", Some(Value::String(format!("tool-{}", t.tool)))),
        ("toolCallId", string(&t.call_id)),
        ("state", string(state)),
        ("input", Some(tool_input(&t.state).clone())),
        ("output", output),
        ("errorText", error),
        (
            "providerExecuted",
            provider_executed(t).then_some(Value::Bool(true)),
        ),
        ("callProviderMetadata", meta),
        ("resultProviderMetadata", result_meta),
        ("approval", approval.as_ref().map(approval_value)),
    ])
}

/// A user model message's content as UI parts: a string is one text part; text and file
/// parts map one to one (a file's base64 `data` becomes a `data:` URL).
fn user_content_parts(content: &Value) -> Vec<Value> {
    match content {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p["type"].as_str()? {
                "text" => Some(object([
                    ("type", string("text")),
                    ("text", p.get("text").cloned()),
                    ("providerMetadata", metadata(p.get("providerOptions"))),
                ])),
                "file" => {
                    let media = p["mediaType"]
                        .as_str()
                        .unwrap_or("application/octet-stream");
                    let url = match p["data"].as_str() {
                        Some(d) if d.contains(':') => d.to_owned(),
                        Some(d) => format!("data:{media};base64,{d}"),
                        None => return None,
                    };
                    Some(object([
                        ("type", string("file")),
                        ("mediaType", string(media)),
                        ("filename", p.get("filename").cloned()),
                        ("url", Some(Value::String(url))),
                    ]))
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}
