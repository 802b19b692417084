//! The machine alone: what each input queues, in which order, with no store and no
//! bus.

use std::sync::Arc;

use serde_json::Value;

use super::{assistant_message, Effect, Machine, ProcessorOptions};
use crate::error::Error;
use crate::event::{Event, SyncEvent};
use crate::id::{MessageId, SessionId};
use crate::model::{Part, PartBody, ToolPart, ToolRunning, ToolState, ToolTime};
use crate::stream::StreamEvent;

fn ev(json: &str) -> StreamEvent {
    StreamEvent::from_json(json).unwrap()
}

fn machine() -> Machine {
    machine_with(ProcessorOptions::default())
}

/// A machine whose clock always says 7.
fn machine_with(opts: ProcessorOptions) -> Machine {
    let session = SessionId::generate();
    let message = assistant_message(session.clone(), MessageId::generate(), "p", "m", 1);
    let opts = ProcessorOptions {
        clock: Arc::new(|| 7),
        ..opts
    };
    Machine::new(session, message, opts).unwrap()
}

/// A part of an earlier message: call `c1` running and waiting for approval `a1`.
fn waiting_in_earlier_message(m: &Machine, earlier: &MessageId) -> Part {
    let mut running = ToolRunning {
        input: Value::Null,
        title: None,
        metadata: None,
        time: ToolTime {
            start: 3,
            extra: crate::model::JsonMap::new(),
        },
        extra: crate::model::JsonMap::new(),
    };
    running.request_approval("a1", None);
    Part {
        id: crate::id::PartId::generate(),
        session_id: m.session_id().clone(),
        message_id: earlier.clone(),
        body: PartBody::Tool(ToolPart {
            call_id: "c1".into(),
            tool: "bash".into(),
            state: ToolState::Running(running),
            metadata: None,
            extra: crate::model::JsonMap::new(),
        }),
    }
}

/// The queued effects, each as a short label: `commit <row names>`, `delta <text>`,
/// `session.status <type>` or the status event's name.
fn effects(m: &mut Machine) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(effect) = m.poll() {
        out.push(match effect {
            Effect::Commit(rows) => {
                let names: Vec<&str> = rows.iter().map(SyncEvent::name).collect();
                format!("commit {}", names.join(","))
            }
            Effect::Delta(d) => format!("delta {}", d.delta),
            Effect::Status(Event::SessionStatus(m)) => {
                format!(
                    "session.status {}",
                    m["status"]["type"].as_str().unwrap_or("")
                )
            }
            Effect::Status(e) => e.name().to_owned(),
        });
    }
    out
}

/// Takes an input's effects as the shell does when every commit succeeds.
fn applied(m: &mut Machine) -> Vec<String> {
    let out = effects(m);
    if out.iter().any(|e| e.starts_with("commit")) {
        m.committed();
    }
    out
}

/// The parts of the next effect, if it is a commit.
fn committed_parts(m: &mut Machine) -> Vec<Part> {
    match m.poll() {
        Some(Effect::Commit(rows)) => rows
            .into_iter()
            .filter_map(|r| match r {
                SyncEvent::PartUpdated { part } => Some(part),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A machine past `start` with text block `t` open.
fn with_open_text() -> Machine {
    let mut m = machine();
    applied(&mut m);
    m.handle(ev(r#"{"type":"text-start","id":"t"}"#), None)
        .unwrap();
    applied(&mut m);
    m
}

#[test]
fn start_commits_the_open_message_before_reporting_busy() {
    let mut m = machine();
    assert_eq!(
        effects(&mut m),
        ["commit message.updated", "session.status busy"]
    );
}

#[test]
fn a_text_delta_is_a_publish_and_no_commit() {
    let mut m = with_open_text();
    m.handle(ev(r#"{"type":"text-delta","id":"t","text":"hi"}"#), None)
        .unwrap();
    assert_eq!(effects(&mut m), ["delta hi"]);
}

#[test]
fn persisting_every_delta_publishes_it_before_committing_the_part() {
    let mut m = machine_with(ProcessorOptions {
        persist_every_delta: true,
        ..ProcessorOptions::default()
    });
    applied(&mut m);
    m.handle(ev(r#"{"type":"text-start","id":"t"}"#), None)
        .unwrap();
    applied(&mut m);
    m.handle(ev(r#"{"type":"text-delta","id":"t","text":"hi"}"#), None)
        .unwrap();
    assert_eq!(effects(&mut m), ["delta hi", "commit message.part.updated"]);
}

#[test]
fn an_approval_response_for_an_earlier_call_asks_the_store_once() {
    let mut m = machine();
    applied(&mut m);
    let earlier = MessageId::generate();
    let response = ev(
        r#"{"type":"tool-approval-response","approvalId":"a1","approved":true,
        "toolCall":{"toolCallId":"c1"}}"#,
    );
    assert_eq!(m.lookup(&response), Some("c1"));
    let waiting = waiting_in_earlier_message(&m, &earlier);
    m.handle(response, Some(waiting)).unwrap();
    let parts = committed_parts(&mut m);
    assert_eq!(parts.len(), 1);
    let json = serde_json::to_value(&parts[0]).unwrap();
    assert_eq!(json["state"]["status"], "running");
    assert_eq!(json["state"]["metadata"]["approval"]["status"], "approved");
    // The call is this turn's open work now: its result needs no store.
    let result = ev(r#"{"type":"tool-result","toolCallId":"c1","output":"ok"}"#);
    assert_eq!(m.lookup(&result), None);
    m.handle(result, None).unwrap();
    let parts = committed_parts(&mut m);
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].message_id, earlier);
}

#[test]
fn a_block_whose_start_never_committed_is_not_open() {
    let mut m = machine();
    applied(&mut m);
    m.handle(ev(r#"{"type":"text-start","id":"t"}"#), None)
        .unwrap();
    assert_eq!(effects(&mut m), ["commit message.part.updated"]);
    // The commit was never reported as done: the block did not open.
    let err = m
        .handle(ev(r#"{"type":"text-delta","id":"t","text":"x"}"#), None)
        .unwrap_err();
    assert!(err.to_string().contains("which is not open"), "{err}");
}

#[test]
fn finalize_commits_before_the_error_and_idle_reports() {
    let mut m = with_open_text();
    m.handle(ev(r#"{"type":"error","error":"boom"}"#), None)
        .unwrap();
    assert!(!m.is_done(), "done only once the batch committed");
    assert_eq!(
        effects(&mut m),
        [
            "commit message.part.updated,message.updated",
            "session.error",
            "session.status idle",
            "session.idle",
        ]
    );
    let ended = m.committed().unwrap();
    assert_eq!((ended.outcome, ended.closed), ("failed", 1));
    assert!(m.is_done());
    let late = m.handle(ev(r#"{"type":"finish"}"#), None).unwrap_err();
    assert!(late.to_string().contains("after the turn was finalized"));
}

#[test]
fn an_abort_reports_no_session_error() {
    let mut m = machine();
    applied(&mut m);
    m.handle(ev(r#"{"type":"abort"}"#), None).unwrap();
    assert_eq!(
        effects(&mut m),
        [
            "commit message.updated",
            "session.status idle",
            "session.idle"
        ]
    );
}

#[test]
fn a_result_for_an_unknown_call_is_invalid_input_naming_the_call() {
    let mut m = machine();
    applied(&mut m);
    let event = ev(r#"{"type":"tool-result","toolCallId":"c9","output":"ok"}"#);
    // Only the store could know the call: the machine asks for it.
    assert_eq!(m.lookup(&event), Some("c9"));
    // The store had none.
    let err = m.handle(event, None).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(msg) if msg.contains("call c9")),
        "{err}"
    );
    assert!(effects(&mut m).is_empty());
}

#[test]
fn a_result_completes_the_earlier_call_the_lookup_found() {
    let mut m = machine();
    applied(&mut m);
    let earlier = MessageId::generate();
    let waiting = waiting_in_earlier_message(&m, &earlier);
    let event = ev(r#"{"type":"tool-result","toolCallId":"c1","output":"done"}"#);
    assert_eq!(m.lookup(&event), Some("c1"));
    m.handle(event, Some(waiting)).unwrap();
    let parts = committed_parts(&mut m);
    assert_eq!(parts.len(), 1);
    assert_eq!(
        parts[0].message_id, earlier,
        "the part stays in its message"
    );
    let json = serde_json::to_value(&parts[0]).unwrap();
    assert_eq!(json["state"]["status"], "completed");
    assert_eq!(json["state"]["output"], "done");
    assert_eq!(json["state"]["time"]["start"], 3);
    assert_eq!(json["state"]["time"]["end"], 7);
    assert_eq!(json["state"]["metadata"]["approval"]["status"], "approved");
}

#[test]
fn finalize_leaves_a_call_waiting_for_approval_and_closes_a_running_one() {
    let mut m = machine();
    applied(&mut m);
    for line in [
        r#"{"type":"tool-call","toolCallId":"w","toolName":"bash","input":{}}"#,
        r#"{"type":"tool-approval-request","approvalId":"a","toolCall":{"toolCallId":"w"}}"#,
        r#"{"type":"tool-call","toolCallId":"r","toolName":"bash","input":{}}"#,
    ] {
        m.handle(ev(line), None).unwrap();
        applied(&mut m);
    }
    m.finalize(super::Outcome::Finished);
    let closed: Vec<String> = committed_parts(&mut m)
        .into_iter()
        .filter_map(|part| match part.body {
            PartBody::Tool(t) => Some(t.call_id),
            _ => None,
        })
        .collect();
    assert_eq!(closed, ["r"]);
}

/// The provider's metadata is kept on the part, as opencode keeps it: a block's from
/// its start, replaced by a delta's or its end's when they carry one (Anthropic sends
/// the thinking signature on a delta, with no text); a tool's from its input start or
/// its call; a file's on the file part. A delta with metadata is still only a publish.
#[test]
fn provider_metadata_is_kept_on_every_part_kind() {
    let mut m = machine();
    applied(&mut m);
    let meta = |v: &str| serde_json::json!({ "anthropic": { "signature": v } });
    m.handle(
        ev(r#"{"type":"reasoning-start","id":"r","providerMetadata":{"anthropic":{"signature":"s0"}}}"#),
        None,
    )
    .unwrap();
    let started = committed_parts(&mut m);
    m.committed();
    let PartBody::Reasoning(r) = &started[0].body else {
        panic!("{started:?}")
    };
    assert_eq!(r.metadata, Some(meta("s0")), "the start's metadata");
    m.handle(
        ev(r#"{"type":"reasoning-delta","id":"r","text":"think"}"#),
        None,
    )
    .unwrap();
    m.handle(
        ev(r#"{"type":"reasoning-delta","id":"r","text":"","providerMetadata":{"anthropic":{"signature":"s1"}}}"#),
        None,
    )
    .unwrap();
    assert_eq!(
        effects(&mut m),
        ["delta "],
        "a delta with metadata stays a publish"
    );
    m.handle(ev(r#"{"type":"reasoning-end","id":"r"}"#), None)
        .unwrap();
    let ended = committed_parts(&mut m);
    let PartBody::Reasoning(r) = &ended[0].body else {
        panic!("{ended:?}")
    };
    assert_eq!(
        r.metadata,
        Some(meta("s1")),
        "the delta's replaced the start's"
    );
    assert_eq!(r.text, "think");

    m.handle(ev(r#"{"type":"text-start","id":"t"}"#), None)
        .unwrap();
    applied(&mut m);
    m.handle(
        ev(r#"{"type":"text-end","id":"t","providerMetadata":{"openai":{"itemId":"msg_1"}}}"#),
        None,
    )
    .unwrap();
    let PartBody::Text(t) = &committed_parts(&mut m)[0].body else {
        panic!("not text")
    };
    assert_eq!(
        t.metadata,
        Some(serde_json::json!({"openai": {"itemId": "msg_1"}}))
    );

    m.handle(
        ev(r#"{"type":"tool-input-start","id":"c1","toolName":"read","providerMetadata":{"p":1}}"#),
        None,
    )
    .unwrap();
    let PartBody::Tool(pending) = &committed_parts(&mut m)[0].body else {
        panic!("not a tool")
    };
    assert_eq!(pending.metadata, Some(serde_json::json!({"p": 1})));
    m.handle(
        ev(r#"{"type":"tool-call","toolCallId":"c1","toolName":"read","input":{},"providerMetadata":{"p":2}}"#),
        None,
    )
    .unwrap();
    let PartBody::Tool(running) = &committed_parts(&mut m)[0].body else {
        panic!("not a tool")
    };
    assert_eq!(running.metadata, Some(serde_json::json!({"p": 2})));
    // A tool result keeps the call's metadata.
    m.handle(
        ev(r#"{"type":"tool-result","toolCallId":"c1","output":"ok"}"#),
        None,
    )
    .unwrap();
    let PartBody::Tool(done) = &committed_parts(&mut m)[0].body else {
        panic!("not a tool")
    };
    assert_eq!(done.metadata, Some(serde_json::json!({"p": 2})));

    m.handle(
        ev(r#"{"type":"file","file":{"mediaType":"image/png","base64":"AA=="},"providerMetadata":{"f":true}}"#),
        None,
    )
    .unwrap();
    let PartBody::File(f) = &committed_parts(&mut m)[0].body else {
        panic!("not a file")
    };
    assert_eq!(
        f.extra.get("metadata"),
        Some(&serde_json::json!({"f": true}))
    );
}

/// A call cut off while its input streams keeps what streamed: whole JSON as its input,
/// a fragment as `metadata.raw` (the input stays `{}`); the deltas themselves are
/// neither committed nor published.
#[test]
fn an_aborted_pending_call_keeps_the_input_that_streamed() {
    for (deltas, input, raw) in [
        (
            vec![r#"{"path":"/tm"#],
            serde_json::json!({}),
            Some(r#"{"path":"/tm"#),
        ),
        (
            vec![r#"{"path":"#, r#""/tmp"}"#],
            serde_json::json!({"path": "/tmp"}),
            None,
        ),
    ] {
        let mut m = machine();
        applied(&mut m);
        m.handle(
            ev(r#"{"type":"tool-input-start","id":"c1","toolName":"read"}"#),
            None,
        )
        .unwrap();
        applied(&mut m);
        for d in &deltas {
            let line = serde_json::json!({"type": "tool-input-delta", "id": "c1", "delta": d});
            m.handle(ev(&line.to_string()), None).unwrap();
            assert!(
                effects(&mut m).is_empty(),
                "an input delta is neither stored nor sent"
            );
        }
        m.finalize(super::Outcome::Aborted);
        let closed = committed_parts(&mut m);
        let PartBody::Tool(t) = &closed[0].body else {
            panic!("{closed:?}")
        };
        let ToolState::Error(e) = &t.state else {
            panic!("{:?}", t.state)
        };
        assert_eq!(e.input, input, "{deltas:?}");
        let kept = e
            .metadata
            .as_ref()
            .and_then(|m| m.get("raw"))
            .and_then(Value::as_str);
        assert_eq!(kept, raw, "{deltas:?}");
    }
}
