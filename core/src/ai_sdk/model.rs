//! `ModelMessage[]`: what `streamText({ messages })` takes.

use serde_json::{json, Value};

use super::{
    approval, denied, error_text, file_data, file_metadata, is_reasoning_file, metadata, object,
    provider_executed, result_metadata, string, tool_input, AiSdk,
};
use crate::model::{ErrorName, MessageWithParts, Part, PartBody, ToolPart, ToolState};

/// The text opencode sends for a user message that asks for a summary.
const COMPACTION_PROMPT: &str = "What did we do so far?";

/// The output opencode sends for a tool output it pruned from the model's view.
const PRUNED_OUTPUT: &str = "[Old tool result content cleared]";

/// The messages of `history` as the AI SDK's `ModelMessage[]`, in the shapes of `sdk`.
///
/// A user message is one `user` message (its text and files). An assistant message is,
/// per model step (split at its `step-start` parts), one `assistant` message with its
/// reasoning, text, files and tool calls, then a `tool` message with the results of the
/// tools the app ran. A tool that waited for the user's approval adds the request to the
/// assistant message and, once answered, a `tool` message with the answer before the one
/// with its result, as the app sends them. A steering message (a user message added to
/// the run between two steps) is that user message, before the step that received it.
/// Provider metadata becomes `providerOptions`.
///
/// A tool output pruned from the model's view (`time.compacted`, opencode's pruning) is
/// opencode's `[Old tool result content cleared]`.
///
/// Left out, as the SDK leaves them out of its response messages: an answer that was
/// aborted (the SDK returns no messages for it), sources and citations, step
/// boundaries and usage, text the model must not see (`ignored`), a call whose input was
/// still streaming, and empty text without metadata.
pub fn model_messages(history: &[MessageWithParts], sdk: AiSdk) -> Vec<Value> {
    let mut out = Vec::new();
    for m in history {
        if m.info.is_user() {
            let content = user_content(&m.parts);
            if !content.is_empty() {
                out.push(json!({"role": "user", "content": content}));
            }
            continue;
        }
        let Some(a) = m.info.as_assistant() else {
            continue;
        };
        if a.error
            .as_ref()
            .is_some_and(|e| e.name == ErrorName::Aborted)
        {
            continue;
        }
        for step in m
            .parts
            .split(|p| matches!(p.body, PartBody::StepStart(_)))
            .filter(|s| !s.is_empty())
        {
            assistant_step(step, sdk, &mut out);
        }
    }
    out
}

fn user_content(parts: &[Part]) -> Vec<Value> {
    let mut content = Vec::new();
    for p in parts {
        match &p.body {
            PartBody::Text(t) if t.ignored != Some(true) => content.push(object([
                ("type", string("text")),
                ("text", string(&t.text)),
                ("providerOptions", metadata(t.metadata.as_ref())),
            ])),
            PartBody::File(f) => content.push(object([
                ("type", string("file")),
                ("data", string(file_data(&f.url))),
                ("mediaType", string(&f.mime)),
                ("filename", f.filename.as_deref().and_then(string)),
                ("providerOptions", file_metadata(f)),
            ])),
            PartBody::Compaction(_) => {
                content.push(json!({"type": "text", "text": COMPACTION_PROMPT}));
            }
            _ => {}
        }
    }
    content
}

/// One model step: its `assistant` message, then the `tool` messages of its results.
fn assistant_step(parts: &[Part], sdk: AiSdk, out: &mut Vec<Value>) {
    let mut content = Vec::new();
    // Results of the tools the app ran, without approval.
    let mut results = Vec::new();
    // The user's answers to approval requests, and the results of the answered tools.
    let mut answers = Vec::new();
    let mut answered = Vec::new();
    // Steering messages: those that came before the step's output went to its model call
    // (the SDK streams them first); any later one goes to the next step's.
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut output_seen = false;
    for p in parts {
        if let PartBody::Steering(s) = &p.body {
            if output_seen { &mut after } else { &mut before }.push(s.message.clone());
            continue;
        }
        output_seen |= !matches!(p.body, PartBody::StepFinish(_));
        match &p.body {
            PartBody::Text(t) => {
                let meta = metadata(t.metadata.as_ref());
                if t.ignored == Some(true) || (t.text.is_empty() && meta.is_none()) {
                    continue;
                }
                content.push(object([
                    ("type", string("text")),
                    ("text", string(&t.text)),
                    ("providerOptions", meta),
                ]));
            }
            PartBody::Reasoning(r) => content.push(object([
                ("type", string("reasoning")),
                ("text", string(&r.text)),
                ("providerOptions", metadata(r.metadata.as_ref())),
            ])),
            PartBody::File(f) => content.push(object([
                (
                    "type",
                    string(if is_reasoning_file(f) {
                        "reasoning-file"
                    } else {
                        "file"
                    }),
                ),
                ("data", string(file_data(&f.url))),
                ("mediaType", string(&f.mime)),
                ("filename", f.filename.as_deref().and_then(string)),
                ("providerOptions", file_metadata(f)),
            ])),
            PartBody::Tool(t) => {
                if matches!(t.state, ToolState::Pending(_)) {
                    continue;
                }
                let by_provider = provider_executed(t);
                content.push(object([
                    ("type", string("tool-call")),
                    ("toolCallId", string(&t.call_id)),
                    ("toolName", string(&t.tool)),
                    ("input", Some(tool_input(&t.state).clone())),
                    ("providerExecuted", by_provider.then_some(Value::Bool(true))),
                    ("providerOptions", metadata(t.metadata.as_ref())),
                ]));
                let approval = approval(&t.state);
                if let Some(a) = &approval {
                    content.push(json!({
                        "type": "tool-approval-request",
                        "approvalId": a.id,
                        "toolCallId": t.call_id,
                    }));
                }
                let Some(result) = tool_result(t, sdk, by_provider) else {
                    continue;
                };
                if by_provider {
                    content.push(result);
                    continue;
                }
                match approval {
                    Some(a) if a.approved.is_some() => {
                        answers.push(object([
                            ("type", string("tool-approval-response")),
                            ("approvalId", string(&a.id)),
                            ("approved", a.approved.map(Value::Bool)),
                            ("reason", a.reason.as_deref().and_then(string)),
                        ]));
                        answered.push(result);
                    }
                    _ => results.push(result),
                }
            }
            _ => {}
        }
    }
    out.extend(before);
    for (role, content) in [
        ("assistant", content),
        ("tool", results),
        ("tool", answers),
        ("tool", answered),
    ] {
        if !content.is_empty() {
            out.push(json!({"role": role, "content": content}));
        }
    }
    out.extend(after);
}

/// The `tool-result` of a finished call; `None` while it runs or waits.
fn tool_result(t: &ToolPart, sdk: AiSdk, by_provider: bool) -> Option<Value> {
    let output = match &t.state {
        // An output pruned from the model's view (opencode's `time.compacted`).
        ToolState::Completed(c) if c.time.compacted.is_some() => {
            json!({"type": "text", "value": PRUNED_OUTPUT})
        }
        ToolState::Completed(c) => match c.returned() {
            Value::String(s) => json!({"type": "text", "value": s}),
            value => json!({"type": "json", "value": value}),
        },
        ToolState::Error(_) if denied(&t.state) => object([
            ("type", string("execution-denied")),
            (
                "reason",
                approval(&t.state).and_then(|a| a.reason).map(Value::String),
            ),
        ]),
        ToolState::Error(_) => json!({"type": "error-text", "value": error_text(&t.state, sdk)}),
        ToolState::Pending(_) | ToolState::Running(_) => return None,
    };
    Some(object([
        ("type", string("tool-result")),
        ("toolCallId", string(&t.call_id)),
        ("toolName", string(&t.tool)),
        ("output", Some(output)),
        (
            "providerExecuted",
            (by_provider && sdk == AiSdk::V5).then_some(Value::Bool(true)),
        ),
        ("providerOptions", result_metadata(t)),
    ]))
}
