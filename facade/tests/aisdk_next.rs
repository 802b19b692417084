//! The next request, rebuilt from the store, against what the real AI SDK holds for the
//! same runs (`examples/streams/aisdk/v5|v6|v7/*.next.json`, written beside each stream by
//! `scripts/aisdk/record.mjs` with `ai` 5, 6 and 7):
//!
//! - the `ModelMessage[]` rebuilt from the stored session equal the SDK's own response
//!   messages (with what the app added between requests: approval answers) after the
//!   prompt, field for field;
//! - the `UIMessage[]` equal what the SDK's `readUIMessageStream` made of the same run
//!   (as `useChat` holds it), but for ids;
//! - a follow-up `streamText` of the real SDK sends the model the same prompt from the
//!   rebuilt messages as from the SDK's own continuation (`scripts/aisdk/next-prompt.mjs`;
//!   needs node and `npm ci` in `scripts/aisdk`, else skipped, and a failure under
//!   `FORGE_TEST_REQUIRE_NODE=1`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use forge_store::ai_sdk::AiSdk;
use forge_store::{ReplayOptions, TenantId};
use serde_json::{json, Value};
use std::io::Write as _;

fn root() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), ".."].iter().collect()
}

/// The recorded runs the SDK could continue: `(name, sdk, stream, next.json)`.
fn recordings() -> Vec<(String, AiSdk, String, Value)> {
    let mut out = Vec::new();
    for (tag, sdk) in [("v5", AiSdk::V5), ("v6", AiSdk::V6), ("v7", AiSdk::V7)] {
        let dir = root().join("examples/streams/aisdk").join(tag);
        for entry in std::fs::read_dir(&dir).expect("fixture dir") {
            let path = entry.expect("entry").path();
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".next.json"))
            else {
                continue;
            };
            let next = json_with_lone_halves(&std::fs::read_to_string(&path).expect("next.json"));
            let stream = std::fs::read_to_string(dir.join(format!("{stem}.jsonl")))
                .expect("the stream beside its next.json");
            out.push((format!("{tag}/{stem}"), sdk, stream, next));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Replays `stream` into a fresh store and rebuilds both message lists from its view.
async fn rebuilt(name: &str, stream: &str, sdk: AiSdk) -> (Vec<Value>, Vec<Value>) {
    let forge = forge_store::open("memory://").await.unwrap();
    let tenant = TenantId::default();
    let report = forge
        .replay_str(&tenant, stream, ReplayOptions::titled(name))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let sid = report.session.expect("session");
    let model = forge.model_messages(&tenant, &sid, sdk).await.unwrap();
    let ui = forge.ui_messages(&tenant, &sid, sdk).await.unwrap();
    (model, ui)
}

/// Runs the SDK answered with no messages of its own: an aborted request (the SDK
/// returns none), and a request that failed before any step.
fn sdk_returned_nothing(name: &str) -> bool {
    [
        "abort-mid-text",
        "abort-mid-tool",
        "provider-error",
        "provider-error-retried",
    ]
    .iter()
    .any(|s| name.ends_with(&format!("/{s}")))
}

/// JSON whose lone UTF-16 surrogate halves (the SDK keeps a half a provider never
/// completed) are read as U+FFFD, which is what the store keeps for them by design (with
/// a warning).
fn json_with_lone_halves(text: &str) -> Value {
    forge_testkit::json_with_lone_halves(text, |_| "\\ufffd".to_owned())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("json")
}

#[tokio::test]
async fn rebuilt_model_messages_equal_the_sdks_own() {
    let mut checked = 0;
    for (name, sdk, stream, next) in recordings() {
        if next["complete"] != json!(true) {
            continue; // the stream threw: the SDK has no messages to continue from
        }
        let (model, _) = rebuilt(&name, &stream, sdk).await;
        let want = next["messages"].as_array().expect("messages");
        // The prompt: the SDK's `prompt: string` is one user message of that text.
        let prompt = want[0]["content"].as_str().expect("a prompt string");
        assert_eq!(
            model.first(),
            Some(&json!({"role": "user", "content": [{"type": "text", "text": prompt}]})),
            "{name}: the prompt"
        );
        let got = Value::Array(model[1..].to_vec());
        let want = Value::Array(want[1..].to_vec());
        if sdk_returned_nothing(&name) {
            assert_eq!(want, json!([]), "{name}: the SDK's messages");
        }
        assert!(
            got == want,
            "{name}: rebuilt ModelMessage[] after the prompt\n{}\nthe SDK's\n{}",
            pretty(&got),
            pretty(&want)
        );
        checked += 1;
    }
    assert_eq!(checked, 65, "recordings checked");
}

/// Ids are left out of the comparison: the SDK's UI messages have none (`""`), the
/// store's are its message ids; a reasoning part's `id` is the provider's block id,
/// which the store does not keep.
fn without_ids(mut messages: Vec<Value>) -> Value {
    for m in &mut messages {
        if let Some(o) = m.as_object_mut() {
            o.remove("id");
        }
        for p in m["parts"].as_array_mut().into_iter().flatten() {
            if p["type"] == "reasoning" {
                if let Some(o) = p.as_object_mut() {
                    o.remove("id");
                }
            }
        }
    }
    Value::Array(messages)
}

/// Runs whose UI the SDK leaves unfinished where the store closed it: an abort or a
/// stream error leaves a block `streaming` and a call `input-available` in the SDK's UI
/// message, which finalize closes in the store (the text `done`, the call interrupted).
fn ui_left_open(name: &str) -> bool {
    sdk_returned_nothing(name) || name.ends_with("/error-part")
}

#[tokio::test]
async fn rebuilt_ui_messages_equal_what_use_chat_holds() {
    let mut checked = 0;
    for (name, sdk, stream, next) in recordings() {
        if next["complete"] != json!(true) || ui_left_open(&name) {
            continue;
        }
        let (_, ui) = rebuilt(&name, &stream, sdk).await;
        let want = next["uiMessages"].as_array().expect("uiMessages").clone();
        let got = without_ids(ui);
        let want = without_ids(want);
        assert!(
            got == want,
            "{name}: rebuilt UIMessage[]\n{}\nthe SDK's\n{}",
            pretty(&got),
            pretty(&want)
        );
        checked += 1;
    }
    assert_eq!(checked, 50, "recordings checked");
}

fn aisdk_dir() -> Option<PathBuf> {
    let dir = root().join("scripts/aisdk");
    let packages = ["ai5/package.json", "ai6/package.json", "ai7/package.json"];
    forge_testkit::node_project(&dir, &packages, "AI SDK follow-up prompt test").then_some(dir)
}

/// Runs `next-prompt.mjs` on `requests`: the prompts the SDK's mock model received.
fn prompts(dir: &Path, requests: &Value) -> Vec<Value> {
    let mut node = std::process::Command::new("node")
        .arg("next-prompt.mjs")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node starts");
    let mut stdin = node.stdin.take().expect("stdin");
    stdin
        .write_all(requests.to_string().as_bytes())
        .expect("requests written");
    drop(stdin);
    let out = node.wait_with_output().expect("node ran");
    assert!(out.status.success(), "next-prompt.mjs failed");
    json_with_lone_halves(&String::from_utf8(out.stdout).expect("UTF-8"))
        .as_array()
        .expect("an array of prompts")
        .clone()
}

#[tokio::test]
async fn a_follow_up_sends_the_model_the_same_prompt_as_the_sdks_continuation() {
    let Some(dir) = aisdk_dir() else {
        return;
    };
    let mut names = Vec::new();
    let mut requests = Vec::new();
    let mut wants = Vec::new();
    for (name, sdk, stream, next) in recordings() {
        if next["complete"] != json!(true) {
            continue;
        }
        let (model, _) = rebuilt(&name, &stream, sdk).await;
        requests.push(
            json!({"sdk": format!("v{sdk}"), "messages": model, "followUp": next["followUp"]}),
        );
        wants.push(next["nextPrompt"].clone());
        names.push(name);
    }
    let got = prompts(&dir, &Value::Array(requests));
    assert_eq!(got.len(), names.len());
    for ((name, got), want) in names.iter().zip(&got).zip(&wants) {
        assert!(
            got == want,
            "{name}: the prompt from the rebuilt messages\n{}\nfrom the SDK's own\n{}",
            pretty(got),
            pretty(want)
        );
    }
    assert_eq!(names.len(), 65, "recordings checked");
}
