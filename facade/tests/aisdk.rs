//! Streams recorded from the real AI SDK (`examples/streams/aisdk/v5`, `v7`; recorded by
//! `scripts/aisdk/record.mjs` with `ai` 5.0.277 and 7.0.173 and their mock models).
//!
//! Each fixture either replays, and then every text and reasoning block is stored as the
//! deltas spelled it and every tool call is a stored tool part; or it is one of the
//! listed streams this release does not take yet, and then it fails with the listed
//! error. A listed stream that starts replaying fails this test until it is removed
//! from the list (and gets checked field by field).

use std::path::PathBuf;

use forge_store::model::PartBody;
use forge_store::{ReplayOptions, TenantId};
use serde_json::Value;

/// Streams not taken yet, with the error they stop at.
const NOT_YET: &[(&str, &str)] = &[
    (
        "v5/generator-tool",
        "tool-result for call call-1, which is unknown",
    ),
    (
        "v7/generator-tool",
        "tool-result for call call-1, which is unknown",
    ),
    ("v5/file-output", "unknown event type \"file\""),
    ("v7/file-output", "unknown event type \"reasoning-file\""),
    (
        "v7/tool-approval-granted",
        "unknown event type \"tool-approval-request\"",
    ),
    (
        "v7/tool-approval-denied",
        "unknown event type \"tool-approval-request\"",
    ),
    // The SDK's fullStream rejects without an `error` part; the file just ends.
    ("v5/stream-throws", "the stream ended early"),
    ("v7/stream-throws", "the stream ended early"),
];

fn fixtures() -> Vec<(String, PathBuf)> {
    let root: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "examples",
        "streams",
        "aisdk",
    ]
    .iter()
    .collect();
    let mut out = Vec::new();
    for version in ["v5", "v7"] {
        let dir = root.join(version);
        for entry in std::fs::read_dir(&dir).expect("fixture dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|x| x == "jsonl") {
                let stem = path
                    .file_stem()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
                out.push((format!("{version}/{stem}"), path));
            }
        }
    }
    out.sort();
    out
}

/// What the stream said, per block id (a block closed by `text-end` is stored with
/// trailing whitespace trimmed; one closed by an abort as it was): text of the deltas, and the tool call ids.
fn emitted(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    // Block ids are reused from step to step (`txt-0` in each): a start opens a new one.
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut calls = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).expect("fixture line");
        let id = || v["id"].as_str().expect("id").to_owned();
        match v["type"].as_str() {
            Some("text-start" | "reasoning-start") => blocks.push((id(), String::new())),
            Some("text-delta" | "reasoning-delta") => {
                let id = id();
                let (_, block) = blocks
                    .iter_mut()
                    .rev()
                    .find(|(b, _)| *b == id)
                    .expect("a delta of a started block");
                block.push_str(v["text"].as_str().expect("text"));
            }
            Some("tool-call") => calls.push(v["toolCallId"].as_str().expect("id").to_owned()),
            _ => {}
        }
    }
    (blocks, calls)
}

#[tokio::test]
async fn recorded_ai_sdk_streams_replay_and_store_what_they_emitted() {
    let mut accepted = 0;
    for (name, path) in fixtures() {
        let text = std::fs::read_to_string(&path).expect("fixture");
        let forge = forge_store::open("memory://").await.unwrap();
        let tenant = TenantId::default();
        let outcome = forge
            .replay_str(&tenant, &text, ReplayOptions::titled(&name))
            .await;
        if let Some((_, why)) = NOT_YET.iter().find(|(n, _)| *n == name) {
            let err = outcome.err().unwrap_or_else(|| {
                panic!("{name} replays now: check it field by field and take it off NOT_YET")
            });
            assert!(err.to_string().contains(why), "{name}: {err}");
            continue;
        }
        let report = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
        let sid = report.session.expect("session");
        let history = forge.history_all(&tenant, &sid).await.unwrap();
        let (blocks, calls) = emitted(&text);
        let mut stored_text = Vec::new();
        let mut stored_calls = Vec::new();
        for m in history.iter().filter(|m| m.info.as_assistant().is_some()) {
            for p in &m.parts {
                match &p.body {
                    PartBody::Text(t) => stored_text.push(t.text.clone()),
                    PartBody::Reasoning(r) => stored_text.push(r.text.clone()),
                    PartBody::Tool(t) => stored_calls.push(t.call_id.clone()),
                    _ => {}
                }
            }
        }
        for (id, want) in &blocks {
            assert!(
                stored_text
                    .iter()
                    .any(|s| s == want || s == want.trim_end()),
                "{name}: block {id} {want:?} not stored as emitted; stored {stored_text:?}"
            );
        }
        assert_eq!(stored_calls, calls, "{name}: tool calls");
        accepted += 1;
    }
    assert_eq!(accepted, 24, "fixtures replayed and checked");
}
