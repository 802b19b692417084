//! The rules the recorded runs do not reach: mixed approvals in one step, steering before
//! a step's output, calls still streaming, error texts per major, compaction requests.

use serde_json::{json, Value};

use super::{model_messages, ui_messages, AiSdk};
use crate::model::MessageWithParts;

/// A message from its info's role-specific fields and its parts' kind-specific fields.
fn message(n: usize, info: Value, parts: &[Value]) -> MessageWithParts {
    let mut info = info;
    info["id"] = json!(format!("msg_{n:02}"));
    info["sessionID"] = json!("ses_1");
    let parts = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut p = p.clone();
            p["id"] = json!(format!("prt_{n:02}{i:02}"));
            p["sessionID"] = json!("ses_1");
            p["messageID"] = json!(format!("msg_{n:02}"));
            serde_json::from_value(p).expect("part")
        })
        .collect();
    MessageWithParts {
        info: serde_json::from_value(info).expect("message"),
        parts,
    }
}

fn user(n: usize, parts: &[Value]) -> MessageWithParts {
    message(n, json!({"role": "user", "time": {"created": 1}}), parts)
}

fn assistant(n: usize, extra: Value, parts: &[Value]) -> MessageWithParts {
    let mut info = json!({
        "role": "assistant", "time": {"created": 1, "completed": 2}, "parentID": "msg_00",
        "modelID": "m", "providerID": "p", "mode": "build", "path": {"cwd": "/", "root": "/"},
        "cost": 0, "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    });
    if let Value::Object(fields) = extra {
        for (k, v) in fields {
            info[k.as_str()] = v;
        }
    }
    message(n, info, parts)
}

fn completed(call: &str, output: &str, metadata: &Value) -> Value {
    json!({"type": "tool", "callID": call, "tool": "sh", "state": {
        "status": "completed", "input": {"c": call}, "output": output, "title": "",
        "metadata": metadata.clone(), "time": {"start": 1, "end": 2}}})
}

#[test]
fn a_step_with_an_answered_approval_sends_results_then_answers_then_the_answered_results() {
    let approved = json!({"approval": {"id": "ap-1", "status": "approved"}});
    let history = [
        user(0, &[json!({"type": "text", "text": "go"})]),
        assistant(
            1,
            json!({}),
            &[
                json!({"type": "step-start"}),
                completed("c1", "plain", &json!({})),
                completed("c2", "approved", &approved),
            ],
        ),
    ];
    let roles: Vec<Value> = model_messages(&history, AiSdk::V7)
        .iter()
        .map(|m| {
            json!([
                m["role"],
                m["content"]
                    .as_array()
                    .map(|c| c.iter().map(|p| p["type"].clone()).collect::<Vec<_>>())
            ])
        })
        .collect();
    assert_eq!(
        roles,
        [
            json!(["user", ["text"]]),
            json!([
                "assistant",
                ["tool-call", "tool-call", "tool-approval-request"]
            ]),
            json!(["tool", ["tool-result"]]),
            json!(["tool", ["tool-approval-response"]]),
            json!(["tool", ["tool-result"]]),
        ]
    );
}

#[test]
fn steering_goes_before_the_step_that_received_it() {
    let steer = |text: &str| json!({"type": "steering-message", "steeringID": text, "message": {"role": "user", "content": text}});
    let history = [
        user(0, &[json!({"type": "text", "text": "go"})]),
        assistant(
            1,
            json!({}),
            &[
                json!({"type": "step-start"}),
                steer("before"),
                json!({"type": "text", "text": "one"}),
                json!({"type": "step-finish", "reason": "stop", "cost": 0, "tokens": {}}),
                steer("between"),
                json!({"type": "step-start"}),
                json!({"type": "text", "text": "two"}),
            ],
        ),
    ];
    let messages = model_messages(&history, AiSdk::V7);
    let order: Vec<&Value> = messages
        .iter()
        .map(|m| {
            if m["role"] == "user" {
                &m["content"]
            } else {
                &m["content"][0]["text"]
            }
        })
        .collect();
    assert_eq!(
        order,
        [
            &json!([{"type": "text", "text": "go"}]),
            &json!("before"),
            &json!("one"),
            &json!("between"),
            &json!("two")
        ]
    );
    let ui = ui_messages(&history, AiSdk::V7);
    assert_eq!(ui[1]["parts"][1]["type"], "steering-message");
    assert_eq!(
        ui[1]["parts"][1]["parts"],
        json!([{"type": "text", "text": "before"}])
    );
}

#[test]
fn a_call_still_streaming_is_left_out_and_a_running_one_has_no_result() {
    let history = [assistant(
        1,
        json!({}),
        &[
            json!({"type": "tool", "callID": "c1", "tool": "sh", "state": {"status": "pending", "input": {}, "raw": "{\"c"}}),
            json!({"type": "tool", "callID": "c2", "tool": "sh", "state": {"status": "running", "input": {"c": 2}, "time": {"start": 1}}}),
        ],
    )];
    let messages = model_messages(&history, AiSdk::V7);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "tool-call", "toolCallId": "c2", "toolName": "sh", "input": {"c": 2}}])
    );
    let ui = ui_messages(&history, AiSdk::V7);
    let states: Vec<&Value> = ui[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["state"])
        .collect();
    assert_eq!(
        states,
        [&json!("input-streaming"), &json!("input-available")]
    );
}

#[test]
fn a_tool_error_is_the_message_before_ai_7_and_errors_to_string_in_it() {
    let failed = |error: Value| {
        assistant(
            1,
            json!({}),
            &[
                json!({"type": "tool", "callID": "c1", "tool": "sh", "state": {
                "status": "error", "input": {}, "error": "boom", "metadata": {"error": error},
                "time": {"start": 1, "end": 2}}}),
            ],
        )
    };
    let text = |m: &MessageWithParts, sdk| {
        model_messages(std::slice::from_ref(m), sdk)[1]["content"][0]["output"]["value"].clone()
    };
    let named = failed(json!({"name": "TypeError", "message": "boom"}));
    assert_eq!(text(&named, AiSdk::V5), "boom");
    assert_eq!(text(&named, AiSdk::V6), "boom");
    assert_eq!(text(&named, AiSdk::V7), "TypeError: boom");
    // JavaScript's Error#toString: an empty message gives the name alone.
    let empty = failed(json!({"name": "AbortError", "message": ""}));
    assert_eq!(text(&empty, AiSdk::V7), "AbortError");
}

#[test]
fn an_aborted_answer_is_left_out_and_a_compaction_request_is_opencodes_question() {
    let history = [
        user(0, &[json!({"type": "compaction", "auto": true})]),
        assistant(
            1,
            json!({"error": {"name": "MessageAbortedError", "data": {"message": "aborted"}}}),
            &[json!({"type": "text", "text": "partial"})],
        ),
    ];
    assert_eq!(
        model_messages(&history, AiSdk::V7),
        [json!({"role": "user", "content": [{"type": "text", "text": "What did we do so far?"}]})]
    );
}

#[test]
fn a_pruned_tool_output_is_opencodes_placeholder() {
    let mut part = completed("c1", "a very long listing", &json!({}));
    part["state"]["time"]["compacted"] = json!(3);
    let history = [assistant(1, json!({}), &[part])];
    assert_eq!(
        model_messages(&history, AiSdk::V7)[1]["content"][0]["output"],
        json!({"type": "text", "value": "[Old tool result content cleared]"})
    );
}
