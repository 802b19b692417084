//! Streams recorded from the real AI SDK (`examples/streams/aisdk/v5`, `v6`, `v7`; recorded by
//! `scripts/aisdk/record.mjs` with `ai` 5.0.277, 6.0.333 and 7.0.173 and their mock models).
//!
//! Every fixture replays with no event type left unknown, and is checked field by
//! field: each text and reasoning block is stored as the deltas spelled it, each tool
//! call is a stored tool part with its final result, files and sources are parts, each
//! step's usage is kept without losing a count, and errors and aborts keep their shape.

use std::path::PathBuf;

use forge_store::model::{PartBody, ToolState};
use forge_store::{ReplayOptions, TenantId};
use serde_json::Value;

/// A stored or emitted text or reasoning block: its text, provider metadata and
/// citations.
type Block = (String, Option<Value>, Option<Value>);

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
    for version in ["v5", "v6", "v7"] {
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

/// What a stream emitted that must be stored.
#[derive(Default)]
struct Emitted {
    /// Text and reasoning blocks, in order. Block ids are reused from step to step
    /// (`txt-0` in each): a start opens a new block.
    blocks: Vec<(String, String)>,
    /// Each block's provider metadata: its start's, replaced by any later delta's or
    /// its end's that carries one (as opencode keeps it).
    block_metadata: Vec<Option<Value>>,
    /// Each block's citations (a text block's `text-end`, AI SDK 7).
    block_citations: Vec<Option<Value>>,
    /// Tool call ids, in order.
    calls: Vec<String>,
    /// Each call's provider metadata: its `tool-call`'s, else its `tool-input-start`'s.
    call_metadata: Vec<Option<Value>>,
    /// Final (not preliminary) results: call id and output.
    results: Vec<(String, Value)>,
    /// Generated files: the `data:` URL and whether it came from reasoning.
    files: Vec<(String, bool)>,
    /// Steering messages: id and the user message.
    steering: Vec<(String, Value)>,
    /// Calls the provider ran itself (`providerExecuted: true` on the `tool-call`).
    provider_executed: Vec<String>,
    /// Failed calls: id and the error as emitted (a string or an error object).
    errors: Vec<(String, Value)>,
    /// Each step's provider metadata and response, from its `finish-step`.
    steps: Vec<(Option<Value>, Option<Value>)>,
}

/// A fixture line as JSON. A lone UTF-16 surrogate half (`\ud83d` with no other half
/// beside it: a provider that split a pair between two deltas), which strict JSON
/// refuses, is read as the text `<U+D83D>`; [`halves_joined`] makes the characters of
/// a block's text out of them.
fn fixture_json(line: &str) -> Value {
    forge_testkit::json_with_lone_halves(line, |u| format!("<U+{u:04X}>"))
}

/// `text` with each `<U+high><U+low>` of [`fixture_json`] as its character, and every
/// other `<U+…>` as U+FFFD.
fn halves_joined(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    let unit = |s: &str| -> Option<u32> {
        let hex = s.strip_prefix("<U+")?.get(..4)?;
        (s.as_bytes().get(7) == Some(&b'>')).then_some(())?;
        u32::from_str_radix(hex, 16).ok()
    };
    while let Some(at) = rest.find("<U+") {
        out.push_str(&rest[..at]);
        let here = &rest[at..];
        match (unit(here), here.get(8..).and_then(unit)) {
            (Some(h @ 0xD800..=0xDBFF), Some(l @ 0xDC00..=0xDFFF)) => {
                out.push(
                    char::from_u32(0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00))
                        .expect("a character"),
                );
                rest = &here[16..];
            }
            (Some(_), _) => {
                out.push('\u{FFFD}');
                rest = &here[8..];
            }
            (None, _) => {
                out.push_str("<U+");
                rest = &here[3..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn emitted(text: &str) -> Emitted {
    let mut e = Emitted::default();
    let mut pending_call_metadata: std::collections::HashMap<String, Option<Value>> =
        std::collections::HashMap::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v = fixture_json(line);
        let id = || v["id"].as_str().expect("id").to_owned();
        let metadata = v.get("providerMetadata").filter(|m| !m.is_null()).cloned();
        match v["type"].as_str() {
            Some("text-start" | "reasoning-start") => {
                e.blocks.push((id(), String::new()));
                e.block_metadata.push(metadata);
                e.block_citations.push(None);
            }
            Some(kind @ ("text-delta" | "reasoning-delta" | "text-end" | "reasoning-end")) => {
                let id = id();
                let at = e
                    .blocks
                    .iter()
                    .rposition(|(b, _)| *b == id)
                    .expect("a delta or end of a started block");
                if kind.ends_with("-delta") {
                    e.blocks[at].1.push_str(v["text"].as_str().expect("text"));
                }
                if metadata.is_some() {
                    e.block_metadata[at] = metadata;
                }
                if let Some(c) = v.get("citations").filter(|c| !c.is_null()) {
                    e.block_citations[at] = Some(c.clone());
                }
            }
            Some("tool-input-start") => {
                pending_call_metadata.insert(id(), metadata);
            }
            Some("tool-call") => {
                let call = v["toolCallId"].as_str().expect("id").to_owned();
                let started = pending_call_metadata.remove(&call).flatten();
                e.call_metadata.push(metadata.or(started));
                if v["providerExecuted"] == true {
                    e.provider_executed.push(call.clone());
                }
                e.calls.push(call);
            }
            Some("tool-result") if v["preliminary"] != true => e.results.push((
                v["toolCallId"].as_str().expect("id").to_owned(),
                v["output"].clone(),
            )),
            Some(kind @ ("file" | "reasoning-file")) => {
                let f = &v["file"];
                let url = format!(
                    "data:{};base64,{}",
                    f["mediaType"].as_str().expect("mediaType"),
                    f["base64"].as_str().expect("base64")
                );
                e.files.push((url, kind == "reasoning-file"));
            }
            Some("finish-step") => e.steps.push((
                v.get("providerMetadata").filter(|m| !m.is_null()).cloned(),
                // less its HTTP headers, which the store leaves out
                v.get("response").filter(|r| !r.is_null()).map(|r| {
                    let mut r = r.clone();
                    if let Some(o) = r.as_object_mut() {
                        o.remove("headers");
                    }
                    r
                }),
            )),
            Some("steering-message") => e.steering.push((
                v["id"].as_str().expect("id").to_owned(),
                v["message"].clone(),
            )),
            Some("tool-error") => e.errors.push((
                v["toolCallId"].as_str().expect("id").to_owned(),
                v["error"].clone(),
            )),
            _ => {}
        }
    }
    for (_, block) in &mut e.blocks {
        *block = halves_joined(block);
    }
    e
}

/// One assistant answer of a fixture: the stream events between two replay lines.
#[derive(Default)]
struct Answer {
    /// `finish-step` events.
    steps: Vec<Value>,
    /// The `finish` event.
    finish: Option<Value>,
    /// The last `error` event's error.
    error: Option<Value>,
    /// An `abort` event.
    aborted: bool,
    /// Its reason, when it gave one.
    abort_reason: Option<String>,
    /// `source` events.
    sources: Vec<Value>,
    /// Calls the user denied.
    denied: Vec<String>,
}

fn answers(text: &str) -> Vec<Answer> {
    let mut out: Vec<Answer> = Vec::new();
    let mut current: Option<Answer> = None;
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v = fixture_json(line);
        let kind = v["type"].as_str().expect("type");
        if matches!(kind, "session" | "user" | "assistant") {
            out.extend(current.take());
            continue;
        }
        let a = current.get_or_insert_with(Answer::default);
        match kind {
            "finish-step" => a.steps.push(v),
            "finish" => a.finish = Some(v),
            "error" => a.error = Some(v["error"].clone()),
            "abort" => {
                a.aborted = true;
                a.abort_reason = v["reason"].as_str().map(str::to_owned);
            }
            "source" => a.sources.push(v),
            "tool-output-denied" => a
                .denied
                .push(v["toolCallId"].as_str().expect("id").to_owned()),
            _ => {}
        }
    }
    out.extend(current);
    out
}

/// Checks that `tokens` (opencode's shape) keeps every count of the SDK's `usage`, in
/// either the v5 or the v7 shape: nothing is lost, whichever way it is split.
fn check_tokens(name: &str, what: &str, tokens: &Value, usage: &Value) {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = n(&tokens["input"]) + n(&tokens["cache"]["read"]) + n(&tokens["cache"]["write"]);
    let completion = n(&tokens["output"]) + n(&tokens["reasoning"]);
    // A detail count: under `…TokenDetails` (v7) or beside the totals (v5).
    let detail = |details: &str, v7: &str, v5: &str| {
        usage[details][v7]
            .as_u64()
            .or(usage[v5].as_u64())
            .unwrap_or(0)
    };
    let counts = [
        ("prompt tokens", prompt, n(&usage["inputTokens"])),
        ("completion tokens", completion, n(&usage["outputTokens"])),
        (
            "cache read",
            n(&tokens["cache"]["read"]),
            detail("inputTokenDetails", "cacheReadTokens", "cachedInputTokens"),
        ),
        (
            "cache write",
            n(&tokens["cache"]["write"]),
            n(&usage["inputTokenDetails"]["cacheWriteTokens"]),
        ),
        (
            "reasoning",
            n(&tokens["reasoning"]),
            detail("outputTokenDetails", "reasoningTokens", "reasoningTokens"),
        ),
    ];
    for (count, kept, given) in counts {
        assert_eq!(kept, given, "{name}: {what}: {count}");
    }
    assert_eq!(
        tokens.get("total"),
        usage.get("totalTokens"),
        "{name}: {what}: total"
    );
}

/// Checks each assistant message against the answer its events came from: usage and
/// raw finish reasons per step, the message's tokens (the last step's), cost, total
/// usage, sources, errors and aborts, denied calls.
fn check_answers(name: &str, text: &str, history: &[forge_store::model::MessageWithParts]) {
    let want = answers(text);
    let got: Vec<_> = history
        .iter()
        .filter(|m| m.info.as_assistant().is_some())
        .collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{name}: one assistant message per answer"
    );
    for (i, (m, a)) in got.iter().zip(&want).enumerate() {
        let name = format!("{name} answer {i}");
        let info = serde_json::to_value(&m.info).expect("message json");
        let parts: Vec<Value> = m
            .parts
            .iter()
            .map(|p| serde_json::to_value(p).expect("part json"))
            .collect();
        let of = |kind: &'static str| parts.iter().filter(move |p| p["type"] == kind);
        let steps: Vec<_> = of("step-finish").collect();
        assert_eq!(steps.len(), a.steps.len(), "{name}: step-finish parts");
        for (part, step) in steps.iter().zip(&a.steps) {
            assert_eq!(part["reason"], step["finishReason"], "{name}: reason");
            assert_eq!(
                part.get("rawReason"),
                step.get("rawFinishReason"),
                "{name}: raw reason"
            );
            check_tokens(&name, "step tokens", &part["tokens"], &step["usage"]);
        }
        if let Some(last) = steps.last() {
            assert_eq!(
                info["tokens"], last["tokens"],
                "{name}: message tokens = last step's"
            );
        }
        let cost: f64 = steps
            .iter()
            .map(|p| p["cost"].as_f64().unwrap_or(0.0))
            .sum();
        assert_eq!(
            info["cost"].as_f64(),
            Some(cost),
            "{name}: cost summed over steps"
        );
        match &a.finish {
            Some(f) => {
                assert_eq!(
                    info.get("rawFinish"),
                    f.get("rawFinishReason"),
                    "{name}: raw finish"
                );
                match f.get("totalUsage") {
                    Some(total) => check_tokens(&name, "total usage", &info["totalTokens"], total),
                    None => assert!(info.get("totalTokens").is_none(), "{name}: no total"),
                }
            }
            None => assert!(
                info.get("totalTokens").is_none(),
                "{name}: no finish, no total"
            ),
        }
        let sources: Vec<_> = of("source").collect();
        assert_eq!(sources.len(), a.sources.len(), "{name}: sources");
        for (part, src) in sources.iter().zip(&a.sources) {
            assert_eq!(part["sourceType"], src["sourceType"], "{name}: source type");
            assert_eq!(part["sourceID"], src["id"], "{name}: source id");
            for key in ["url", "title", "mediaType", "filename"] {
                assert_eq!(part.get(key), src.get(key), "{name}: source {key}");
            }
            assert_eq!(
                part.get("metadata"),
                src.get("providerMetadata"),
                "{name}: metadata"
            );
        }
        let error = &info["error"];
        match (&a.error, a.aborted.then_some(&a.abort_reason)) {
            (Some(e), _) => {
                assert!(error.is_object(), "{name}: the error is recorded");
                let call = match e["errors"].as_array() {
                    Some(attempts) => attempts.last().expect("an attempt"),
                    None => e,
                };
                if let Some(status) = call.get("statusCode") {
                    let overflow = error["name"] == "ContextOverflowError";
                    assert!(
                        error["name"] == "APIError" || overflow,
                        "{name}: an API error keeps its kind: {error}"
                    );
                    if !overflow {
                        assert_eq!(&error["data"]["statusCode"], status, "{name}: status");
                        for key in ["isRetryable", "responseHeaders", "responseBody"] {
                            assert_eq!(error["data"].get(key), call.get(key), "{name}: {key}");
                        }
                    }
                }
                assert_eq!(error["data"]["message"], e["message"], "{name}: message");
            }
            (None, Some(reason)) => {
                assert_eq!(error["name"], "MessageAbortedError", "{name}: aborted");
                if let Some(reason) = reason {
                    assert_eq!(error["data"]["message"], reason.as_str(), "{name}: reason");
                }
            }
            (None, None) => {}
        }
    }
    // A denied call closes as an error that says so, wherever the call was made.
    let denied: Vec<&String> = want.iter().flat_map(|a| &a.denied).collect();
    for call in denied {
        let tool = history
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match &p.body {
                PartBody::Tool(t) if &t.call_id == call => Some(t),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{name}: denied call {call} stored"));
        let ToolState::Error(e) = &tool.state else {
            panic!("{name}: denied call {call} is {:?}", tool.state)
        };
        assert!(e.error.contains("denied"), "{name}: {}", e.error);
    }
}

#[tokio::test]
async fn recorded_ai_sdk_streams_replay_and_store_what_they_emitted() {
    let mut accepted = 0;
    for (name, path) in fixtures() {
        let text = std::fs::read_to_string(&path).expect("fixture");
        let forge = forge_store::open("memory://").await.unwrap();
        let tenant = TenantId::default();
        let opts = ReplayOptions::titled(&name);
        let outcome = forge.replay_str(&tenant, &text, opts).await;
        let report = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
        // Every event type of the SDK is known: none is merely counted.
        assert_eq!(
            report.unknown_count(),
            0,
            "{name}: {:?}",
            report.unknown_summary()
        );
        let sid = report.session.expect("session");
        // Strict mode (unknown types and an early end are errors) takes every recording
        // but the one whose stream threw: it ends with its answer open, which strict
        // mode refuses by design.
        let strict = forge_store::open("memory://").await.unwrap();
        let outcome = strict
            .replay_str(&tenant, &text, ReplayOptions::titled(&name).strict(true))
            .await;
        match (name.ends_with("/stream-throws"), outcome) {
            (false, Ok(_)) => {}
            (true, Err(e)) => assert!(e.to_string().contains("ended early"), "{name}: {e}"),
            (false, Err(e)) => panic!("{name}: strict mode: {e}"),
            (true, Ok(_)) => panic!("{name}: strict mode took a stream that ended early"),
        }
        let history = forge.history_all(&tenant, &sid).await.unwrap();
        let want = emitted(&text);
        let mut stored_text = Vec::new();
        let mut stored_blocks = Vec::new();
        let mut stored_calls = Vec::new();
        let mut stored_call_metadata = Vec::new();
        let mut stored_results = Vec::new();
        let mut stored_files = Vec::new();
        let mut stored_steering = Vec::new();
        let mut stored_provider_executed = Vec::new();
        let mut stored_errors = Vec::new();
        let mut stored_steps = Vec::new();
        for m in history.iter().filter(|m| m.info.as_assistant().is_some()) {
            for p in &m.parts {
                match &p.body {
                    PartBody::Text(t) => {
                        stored_text.push(t.text.clone());
                        stored_blocks.push((
                            t.text.clone(),
                            t.metadata.clone(),
                            t.extra.get("citations").cloned(),
                        ));
                    }
                    PartBody::Reasoning(r) => {
                        stored_text.push(r.text.clone());
                        stored_blocks.push((r.text.clone(), r.metadata.clone(), None));
                    }
                    PartBody::StepFinish(f) => stored_steps.push((
                        f.extra.get("metadata").cloned(),
                        f.extra.get("response").cloned(),
                    )),
                    PartBody::Steering(st) => {
                        stored_steering.push((st.steering_id.clone(), st.message.clone()));
                    }
                    PartBody::Tool(t) => {
                        stored_calls.push(t.call_id.clone());
                        stored_call_metadata.push(t.metadata.clone());
                        if t.extra.get("providerExecuted") == Some(&Value::Bool(true)) {
                            stored_provider_executed.push(t.call_id.clone());
                        }
                        // The error as emitted: an object kept whole, a string as itself.
                        if let ToolState::Error(e) = &t.state {
                            if e.metadata.as_ref().and_then(|m| m.get("denied")).is_none()
                                && e.metadata
                                    .as_ref()
                                    .and_then(|m| m.get("interrupted"))
                                    .is_none()
                            {
                                let object = e.metadata.as_ref().and_then(|m| m.get("error"));
                                let emitted = object
                                    .cloned()
                                    .unwrap_or_else(|| Value::String(e.error.clone()));
                                stored_errors.push((t.call_id.clone(), emitted));
                            }
                        }
                        if let ToolState::Completed(c) = &t.state {
                            stored_results.push((t.call_id.clone(), c.returned()));
                        }
                    }
                    PartBody::File(f) => stored_files.push((
                        f.url.clone(),
                        f.extra.get("reasoning") == Some(&Value::Bool(true)),
                    )),
                    _ => {}
                }
            }
        }
        for (id, block) in &want.blocks {
            assert!(
                stored_text.iter().any(|s| s == block),
                "{name}: block {id} {block:?} not stored as emitted; stored {stored_text:?}"
            );
        }
        // Each block is stored exactly as streamed (trailing whitespace too: a
        // provider's signature covers the exact text), with its provider metadata and
        // citations, in order.
        let want_blocks: Vec<Block> = want
            .blocks
            .iter()
            .zip(&want.block_metadata)
            .zip(&want.block_citations)
            .map(|(((_, text), m), c)| (text.clone(), m.clone(), c.clone()))
            .collect();
        assert_eq!(
            stored_blocks, want_blocks,
            "{name}: blocks, their metadata and citations"
        );
        assert_eq!(stored_calls, want.calls, "{name}: tool calls");
        assert_eq!(
            stored_call_metadata, want.call_metadata,
            "{name}: tool calls' metadata"
        );
        // A tool completes with its final result only, and the value it returned comes
        // back exactly (a JSON output is stored as its text, marked).
        let results = want.results;
        assert_eq!(stored_results, results, "{name}: tool results");
        assert_eq!(stored_files, want.files, "{name}: generated files");
        assert_eq!(stored_steering, want.steering, "{name}: steering messages");
        assert_eq!(
            stored_provider_executed, want.provider_executed,
            "{name}: provider-executed calls"
        );
        assert_eq!(stored_errors, want.errors, "{name}: tool errors");
        assert_eq!(
            stored_steps, want.steps,
            "{name}: each step's provider metadata and response"
        );
        check_answers(&name, &text, &history);
        if name.ends_with("/error-part") {
            // The SDK follows the error with the step's finish-step and a finish: one
            // assistant message holds all of it, with the error.
            let answers: Vec<_> = history
                .iter()
                .filter_map(|m| m.info.as_assistant())
                .collect();
            assert_eq!(answers.len(), 1, "{name}: one assistant message");
            assert!(answers[0].error.is_some(), "{name}: the error is recorded");
            let last = history.last().expect("the answer");
            assert!(
                last.parts
                    .iter()
                    .any(|p| matches!(p.body, PartBody::StepFinish(_))),
                "{name}: the step's usage is kept"
            );
        }
        if name.ends_with("/split-surrogate") {
            // Pairs split between deltas are joined (the blocks above); the one half
            // that never got its other half became U+FFFD, with a warning at its line.
            let lines: Vec<usize> = report.warnings.iter().map(|w| w.line).collect();
            let line = text
                .lines()
                .position(|l| l.contains(r#""text":" half.""#))
                .expect("the line after the lone half")
                + 1;
            assert_eq!(lines, [line], "{name}: {:?}", report.warnings);
            assert!(
                stored_text
                    .iter()
                    .any(|t| t == "Smile \u{1F600} and a lone \u{FFFD} half."),
                "{name}: {stored_text:?}"
            );
        } else {
            assert!(report.warnings.is_empty(), "{name}: {:?}", report.warnings);
        }
        if name.ends_with("/call-id-reused") {
            // `call_0` in step 1 and again in step 2: two calls, two tool parts.
            assert_eq!(stored_calls, ["call_0", "call_0"], "{name}");
        }
        if name.ends_with("/stream-throws") {
            // The SDK's fullStream rejects without an `error` part; the file just ends.
            let answer = history.last().and_then(|m| m.info.as_assistant());
            let error = answer.and_then(|a| a.error.as_ref()).expect("an error");
            assert_eq!(error.name.as_str(), "UnknownError", "{name}");
            let message = error.data.message.as_deref().unwrap_or_default();
            assert!(
                message.contains("the stream ended early"),
                "{name}: {message}"
            );
            assert_eq!(
                report.ended_early.as_ref(),
                history.last().map(|m| &m.info.id)
            );
        }
        // Export → import (into a fresh store) → export: the same document, every field
        // kept (provider metadata, citations, the marks of a tool's returned value, …;
        // compared as JSON values: the order of an object's keys may differ).
        let exported = forge.export(&tenant, &sid).await.unwrap();
        let first = serde_json::to_string(&exported).expect("export json");
        let other = forge_store::open("memory://").await.unwrap();
        other
            .import_str(&tenant, &first, &|_, _| {})
            .await
            .unwrap_or_else(|e| panic!("{name}: import: {e}"));
        let again = other.export(&tenant, &sid).await.unwrap();
        assert_eq!(
            serde_json::to_value(&exported).expect("export json"),
            serde_json::to_value(&again).expect("export json"),
            "{name}: export, import, export"
        );
        accepted += 1;
    }
    assert_eq!(accepted, 68, "fixtures replayed and checked");
}
