//! The JSON shape (docs/design.md §1): opencode's exported sessions load and re-serialize
//! without losing a field, including unknown kinds and unknown fields.

use forge_core::model::{MessageBody, PartBody, ToolState, KNOWN_PART_KINDS};
use forge_core::{Message, Part, Session};
use serde_json::{json, Value};

const FIXTURE: &str = include_str!("fixtures/opencode-session.json");

#[test]
fn an_opencode_export_round_trips_unchanged() {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    let info: Session = serde_json::from_value(doc["info"].clone()).unwrap();
    assert_eq!(serde_json::to_value(&info).unwrap(), doc["info"]);
    let mut kinds = std::collections::BTreeSet::new();
    for m in doc["messages"].as_array().unwrap() {
        let msg: Message = serde_json::from_value(m["info"].clone()).unwrap();
        assert!(!matches!(msg.body, MessageBody::Unknown { .. }));
        assert_eq!(
            serde_json::to_value(&msg).unwrap(),
            m["info"],
            "message {}",
            msg.id
        );
        for p in m["parts"].as_array().unwrap() {
            let part: Part = serde_json::from_value(p.clone()).unwrap();
            kinds.insert(part.kind().to_owned());
            assert_eq!(serde_json::to_value(&part).unwrap(), *p, "part {}", part.id);
        }
    }
    for k in KNOWN_PART_KINDS {
        assert!(kinds.contains(*k), "fixture lacks a {k} part");
    }
    assert!(kinds.contains("future-kind"));
}

#[test]
fn unknown_part_kinds_and_fields_survive_a_read_modify_write() {
    let raw = json!({
        "id": "prt_1", "sessionID": "ses_1", "messageID": "msg_1",
        "type": "text", "text": "hello", "time": {"start": 1, "end": 2, "precision": "ms"},
        "newField": {"deep": [1, 2]}
    });
    let mut part: Part = serde_json::from_value(raw.clone()).unwrap();
    let PartBody::Text(t) = &mut part.body else {
        panic!("not text")
    };
    t.text.push('!');
    let out = serde_json::to_value(&part).unwrap();
    let mut expected = raw;
    expected["text"] = json!("hello!");
    assert_eq!(out, expected);

    let raw = json!({"id": "prt_2", "sessionID": "ses_1", "messageID": "msg_1", "type": "hologram", "x": 1});
    let part: Part = serde_json::from_value(raw.clone()).unwrap();
    assert!(matches!(&part.body, PartBody::Unknown { kind, .. } if kind == "hologram"));
    assert_eq!(serde_json::to_value(&part).unwrap(), raw);

    let raw = json!({"id": "msg_2", "sessionID": "ses_1", "role": "system", "time": {"created": 5}, "x": [1]});
    let msg: Message = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(msg.role(), "system");
    assert_eq!(msg.created(), Some(5));
    assert_eq!(serde_json::to_value(&msg).unwrap(), raw);
}

#[test]
fn tool_states_are_tagged_by_status() {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    let parts = doc["messages"][1]["parts"].as_array().unwrap();
    let statuses: Vec<&str> = parts
        .iter()
        .filter_map(|p| serde_json::from_value::<Part>(p.clone()).ok())
        .filter_map(|p| match p.body {
            PartBody::Tool(t) => Some(match t.state {
                ToolState::Pending(_) => "pending",
                ToolState::Running(_) => "running",
                ToolState::Completed(_) => "completed",
                ToolState::Error(_) => "error",
            }),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, ["completed", "error", "pending", "running"]);
}

#[test]
fn malformed_rows_name_what_is_wrong() {
    let cases = [
        (
            json!({"sessionID": "s", "messageID": "m", "type": "text"}),
            "missing field `id`",
        ),
        (
            json!({"id": "p", "sessionID": "s", "messageID": "m", "type": "text"}),
            "part p (type text)",
        ),
        (
            json!({"id": "p", "sessionID": 3, "messageID": "m", "type": "text", "text": ""}),
            "`sessionID` must be a string",
        ),
        (
            json!({"id": "p", "sessionID": "s", "messageID": "m", "type": "tool", "callID": "c", "tool": "t", "state": {"status": "exploded"}}),
            "exploded",
        ),
    ];
    for (v, needle) in cases {
        let err = serde_json::from_value::<Part>(v).unwrap_err().to_string();
        assert!(err.contains(needle), "expected {needle:?} in {err}");
    }
    let err = serde_json::from_value::<Message>(
        json!({"id": "m", "sessionID": "s", "role": "assistant", "time": {"created": 1}}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("message m (assistant)") && err.contains("parentID"),
        "{err}"
    );
}

#[test]
fn whole_number_costs_are_written_as_integers_like_javascript() {
    let raw = json!({"id": "prt_3", "sessionID": "s", "messageID": "m", "type": "step-finish", "reason": "stop", "cost": 2, "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache": {"read": 0, "write": 0}}});
    let part: Part = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(
        serde_json::to_string(&part).unwrap(),
        serde_json::to_string(&raw).unwrap()
    );
}

#[test]
fn the_compaction_tail_is_opencodes_snake_case_and_the_old_name_is_still_read() {
    let old = json!({"id": "prt_1", "sessionID": "ses_1", "messageID": "msg_2",
                     "type": "compaction", "auto": true, "tailStartID": "msg_1"});
    let part: Part = serde_json::from_value(old).unwrap();
    match &part.body {
        PartBody::Compaction(c) => {
            assert_eq!(
                c.tail_start_id.as_ref().map(forge_core::MessageId::as_str),
                Some("msg_1")
            );
            assert!(
                c.extra.is_empty(),
                "the old name is not kept as an unknown field"
            );
        }
        other => panic!("not a compaction part: {other:?}"),
    }
    let written = serde_json::to_value(&part).unwrap();
    assert_eq!(written["tail_start_id"], "msg_1");
    assert!(written.get("tailStartID").is_none(), "{written}");
}
