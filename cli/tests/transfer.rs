//! import / export through the real binary: the opencode export shape and JSONL, with
//! ids, times, unknown fields and unknown part kinds kept as they are.

mod common;

use common::{stderr, Env};
use serde_json::{json, Value};

const SES: &str = "ses_7d1c0a4b2ffeA1b2C3d4E5f6G7";
const U1: &str = "msg_7d1c0a4b3001Qw3rTy8uIo9pAs";
const A1: &str = "msg_7d1c0a4b3002Zx5cVb6nM7kL8j";

/// A session as the opencode agent exports it, with fields forge-store does not model.
fn opencode_session() -> Value {
    json!({
        "info": {
            "id": SES,
            "projectID": "4f0e2c8d",
            "directory": "/home/dev/forge",
            "title": "Fix the failing finalize test",
            "version": "0.15.3",
            "time": {"created": 1_733_140_000_000_i64, "updated": 1_733_140_090_500_i64},
            "share": {"url": "https://example.invalid/s/abc"}
        },
        "messages": [
            {
                "info": {
                    "id": U1, "sessionID": SES, "role": "user",
                    "time": {"created": 1_733_140_000_100_i64},
                    "agent": "build",
                    "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4"},
                    "summary": {"title": "Fix test", "diffs": []}
                },
                "parts": [
                    {"id": "prt_7d1c0a4b3003aaaaaaaaaa", "sessionID": SES, "messageID": U1,
                     "type": "text", "text": "Run the tests and fix the failing one."},
                    {"id": "prt_7d1c0a4b3004bbbbbbbbbb", "sessionID": SES, "messageID": U1,
                     "type": "file", "mime": "text/plain", "filename": "notes.txt",
                     "url": "file:///home/dev/forge/notes.txt",
                     "source": {"type": "file", "path": "notes.txt", "text": {"value": "@notes.txt", "start": 0, "end": 10}}}
                ]
            },
            {
                "info": {
                    "id": A1, "sessionID": SES, "role": "assistant",
                    "time": {"created": 1_733_140_000_200_i64, "completed": 1_733_140_090_400_i64},
                    "parentID": U1, "modelID": "claude-sonnet-4", "providerID": "anthropic",
                    "mode": "build", "agent": "build",
                    "path": {"cwd": "/home/dev/forge", "root": "/home/dev/forge"},
                    "system": ["You are a coding agent."],
                    "cost": 0.0123,
                    "tokens": {"input": 1630, "output": 95, "reasoning": 12, "cache": {"read": 1400, "write": 0}},
                    "finish": "stop"
                },
                "parts": [
                    {"id": "prt_7d1c0a4b3005cccccccccc", "sessionID": SES, "messageID": A1,
                     "type": "step-start", "snapshot": "9f1e2d3c"},
                    {"id": "prt_7d1c0a4b3006dddddddddd", "sessionID": SES, "messageID": A1,
                     "type": "reasoning", "text": "Run the suite first.",
                     "time": {"start": 1_733_140_000_300_i64, "end": 1_733_140_000_900_i64},
                     "metadata": {"anthropic": {"signature": "sig=="}}},
                    {"id": "prt_7d1c0a4b3007eeeeeeeeee", "sessionID": SES, "messageID": A1,
                     "type": "tool", "callID": "toolu_01", "tool": "bash",
                     "state": {"status": "completed",
                               "input": {"command": "cargo test", "description": "Run tests"},
                               "output": "test result: ok. 42 passed", "title": "cargo test",
                               "metadata": {"exit": 0, "truncated": false},
                               "time": {"start": 1_733_140_001_000_i64, "end": 1_733_140_031_000_i64},
                               "futureStateField": [1, 2, 3]}},
                    {"id": "prt_7d1c0a4b3008ffffffffff", "sessionID": SES, "messageID": A1,
                     "type": "tool", "callID": "toolu_02", "tool": "edit",
                     "state": {"status": "error", "input": {"filePath": "src/engine.rs"},
                               "error": "oldString not found",
                               "time": {"start": 1_733_140_032_000_i64, "end": 1_733_140_032_100_i64}}},
                    {"id": "prt_7d1c0a4b3009gggggggggg", "sessionID": SES, "messageID": A1,
                     "type": "text", "text": "All 42 tests pass.",
                     "time": {"start": 1_733_140_090_000_i64, "end": 1_733_140_090_300_i64},
                     "futureTextField": {"nested": true}},
                    {"id": "prt_7d1c0a4b3010hhhhhhhhhh", "sessionID": SES, "messageID": A1,
                     "type": "hologram", "frames": 3, "payload": {"x": [1.5, null, "y"]}},
                    {"id": "prt_7d1c0a4b3011iiiiiiiiii", "sessionID": SES, "messageID": A1,
                     "type": "step-finish", "reason": "stop", "snapshot": "a0b1c2d3", "cost": 0.0123,
                     "tokens": {"input": 1630, "output": 95, "reasoning": 12, "cache": {"read": 1400, "write": 0}}},
                    {"id": "prt_7d1c0a4b3012jjjjjjjjjj", "sessionID": SES, "messageID": A1,
                     "type": "patch", "hash": "a0b1c2d3", "files": ["src/engine.rs"]}
                ]
            }
        ]
    })
}

#[test]
fn export_of_an_imported_session_equals_the_input() {
    let env = Env::new();
    let input = opencode_session();
    let file = env.file(
        "session.json",
        &serde_json::to_string_pretty(&input).unwrap(),
    );
    let report = env.json(&["import", &file]);
    assert_eq!(report["sessions"][0]["id"], SES);
    assert_eq!(report["sessions"][0]["messages"], 2);
    assert_eq!(report["sessions"][0]["parts"], 10);
    assert_eq!(
        report["commits"], 1,
        "one batch: session.updated and every message with its parts"
    );
    assert_eq!(report["sessions"][0]["replaced"], 0);

    let out = env.dir.path().join("out.json");
    let printed = env.ok(&["export", SES, "--out", &out.display().to_string()]);
    assert!(printed.contains("2 messages, 10 parts"), "{printed}");
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(exported, input);

    let stdout: Value = serde_json::from_str(&env.ok(&["export", SES])).unwrap();
    assert_eq!(stdout, input);

    // The imported history reads like any other: the unknown kind is shown, not dropped.
    let human = env.ok(&["history", SES]);
    assert!(human.contains("hologram"), "{human}");
    assert!(human.contains("(unknown kind, kept as is"), "{human}");
}

#[test]
fn jsonl_import_creates_the_session_from_the_messages() {
    let env = Env::new();
    let input = opencode_session();
    let lines: Vec<String> = input["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    let file = env.file("session.jsonl", &(lines.join("\n") + "\n"));
    let report = env.json(&["import", &file]);
    assert_eq!(report["sessions"][0]["session_written"], true);

    let exported: Value = serde_json::from_str(&env.ok(&["export", SES])).unwrap();
    assert_eq!(exported["messages"], input["messages"]);
    assert_eq!(exported["info"]["id"], SES);
    assert_eq!(exported["info"]["title"], "");
    assert_eq!(exported["info"]["time"]["created"], 1_733_140_000_100_i64);
    assert_eq!(exported["info"]["time"]["updated"], 1_733_140_090_400_i64);

    // Importing again into the now existing session keeps the session as it is.
    let again = env.json(&["import", &file]);
    assert_eq!(again["sessions"][0]["session_written"], false);
    let sessions = env.json(&["sessions"]);
    assert_eq!(sessions.as_array().unwrap().len(), 1);
}

#[test]
fn import_errors_name_the_line_and_write_nothing_after_it() {
    let env = Env::new();
    let input = opencode_session();
    let first = input["messages"][0].to_string();
    let file = env.file(
        "bad.jsonl",
        &format!("{first}\n{{\"info\": {{\"id\": 1}}\n"),
    );
    let out = env.run(&["import", &file]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("line 2: malformed JSON"), "{err}");
    assert!(
        env.json(&["sessions"]).as_array().unwrap().is_empty(),
        "parse before writing"
    );

    let doc = json!({"info": input["info"], "messages": [{"info": {"id": "m", "role": "user"}, "parts": []}]});
    let file = env.file("bad.json", &doc.to_string());
    let err = stderr(&env.run(&["import", &file]));
    assert!(
        err.contains("messages[0]") && err.contains("sessionID"),
        "{err}"
    );
}

#[test]
fn export_of_a_missing_session_is_a_clear_error() {
    let env = Env::new();
    let out = env.run(&["export", "ses_missing"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("session ses_missing not found in tenant default"));
}
