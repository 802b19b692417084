//! A real client written by someone else: opencode's `@opencode-ai/sdk` (pinned in
//! `tests/sdk/package.json`) reads sessions and messages from the server and consumes
//! `/event`; a proxy cuts its connection mid-turn, the SDK reconnects with
//! `Last-Event-ID`, and every delta arrives exactly once.
//!
//! Needs `node` and `npm ci` in `server/tests/sdk` (`.ci/run` does it). Without them the
//! test prints `SKIPPED` — and fails under `FORGE_TEST_REQUIRE_NODE=1`.

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

fn sdk_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk");
    let packages = ["@opencode-ai/sdk/package.json"];
    forge_testkit::node_project(&dir, &packages, "opencode SDK client test").then_some(dir)
}

const DELTAS: usize = 60;

#[tokio::test]
async fn the_opencode_sdk_reads_the_api_and_resumes_events_after_a_cut() {
    let Some(dir) = sdk_dir() else {
        return;
    };
    let s = session_server("ses_sdk").await;
    s.create(TOKEN_B, "ses_elsewhere").await;
    let mut node = tokio::process::Command::new("node")
        .arg("client.mjs")
        .current_dir(&dir)
        .env("FORGE_URL", &s.base)
        .env("TOKEN", TOKEN_A)
        .env("SESSION", "ses_sdk")
        .env("DELTAS", DELTAS.to_string())
        .env("CUT_AFTER", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let mut out = BufReader::new(node.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .expect("the client subscribes within 30 s")
        .expect("stdout")
        .expect("a line");
    assert_eq!(
        serde_json::from_str::<Value>(&ready).expect("json"),
        json!({"ready": true})
    );

    // A turn with distinct deltas, paced so that some are published while the client
    // is cut off; another tenant streams at the same time.
    let mut lines = vec![
        json!({"type": "user", "text": "count"}).to_string(),
        r#"{"type":"start-step"}"#.to_owned(),
        r#"{"type":"text-start","id":"t"}"#.to_owned(),
    ];
    let expected: String = (0..DELTAS).fold(String::new(), |mut s, i| {
        let _ = write!(s, "d{i};");
        s
    });
    for i in 0..DELTAS {
        lines.push(json!({"type": "text-delta", "id": "t", "text": format!("d{i};")}).to_string());
    }
    lines.push(r#"{"type":"text-end","id":"t"}"#.to_owned());
    lines.push(r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":1,"outputTokens":60}}"#.to_owned());
    lines.push(r#"{"type":"finish","finishReason":"stop"}"#.to_owned());
    let (status, _) = s
        .upload(TOKEN_B, "ses_elsewhere", ndjson(&turn("noise", 5, "n")))
        .await;
    assert_eq!(status, 200);
    let mut upload = s.upload_lines(TOKEN_A, "ses_sdk", 4);
    for l in &lines {
        upload.line(l).await;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let r = upload.finish().await;
    assert_eq!(r.status().as_u16(), 200);

    let result = tokio::time::timeout(Duration::from_mins(1), out.next_line())
        .await
        .expect("the client finishes within 60 s")
        .expect("stdout")
        .expect("a result line");
    let status = node.wait().await.expect("node exits");
    assert!(status.success(), "{status}");
    let r: Value = serde_json::from_str(&result).expect("json result");
    assert_eq!(r["sessions"], json!(["ses_sdk"]), "{r}");
    assert_eq!(r["title"], "ses_sdk");
    assert_eq!(r["missing"]["status"], 404);
    assert_eq!(r["missing"]["error"]["name"], "NotFoundError");
    assert_eq!(r["deltas"], DELTAS, "{r}");
    assert_eq!(r["text"], expected, "every delta once, in order");
    assert_eq!(r["reloads"], 0, "the gap was replayed, not announced: {r}");
    assert_eq!(
        r["otherSessions"], 0,
        "another tenant's events never reach the client"
    );
    let ids = r["lastEventIds"].as_array().expect("ids");
    assert!(ids.len() >= 2, "the client reconnected: {r}");
    assert_eq!(
        ids[0],
        Value::Null,
        "the first connection has no Last-Event-ID"
    );
    assert!(
        ids[1].as_str().is_some_and(|id| id.contains('-')),
        "the reconnection sent the id it last saw: {r}"
    );
    assert_eq!(
        r["messages"],
        json!([
            {"role": "user", "parts": ["text"]},
            {"role": "assistant", "parts": ["step-start", "text", "step-finish"]},
        ])
    );
    // The SDK's fork: everything before the last message, copied under new ids, the
    // source named.
    let fork = &r["fork"];
    assert_eq!(fork["parentID"], "ses_sdk", "{r}");
    assert_eq!(fork["title"], "ses_sdk (fork)");
    let source = fork["source"].as_array().expect("source");
    assert!(source.len() >= 2, "{r}");
    assert_eq!(fork["copied"], json!(source[..source.len() - 1]), "{r}");
    assert_eq!(fork["sameIds"], false, "copies get their own ids");
    // The SDK's revert and unrevert: the last message hidden, then shown again.
    let revert = &r["revert"];
    let total = revert["total"].as_u64().expect("total");
    assert!(revert["mark"]["messageID"].as_str().is_some(), "{r}");
    assert_eq!(revert["whileReverted"].as_u64(), Some(total - 1), "{r}");
    assert_eq!(revert["cleared"], Value::Null, "{r}");
    assert_eq!(revert["afterRestore"].as_u64(), Some(total), "{r}");
    // opencode's v2 revert routes through the SDK's v2 client: stage hides the last
    // message, clear shows it, an unknown message is 404, commit removes it.
    let v2 = &r["v2revert"];
    assert_eq!(v2["staged"]["messageID"], v2["last"], "{r}");
    assert_eq!(v2["whileStaged"].as_u64(), Some(total - 1), "{r}");
    assert_eq!(v2["clearStatus"], 204, "{r}");
    assert_eq!(v2["afterClear"].as_u64(), Some(total), "{r}");
    assert_eq!(v2["missingStatus"], 404, "{r}");
    assert_eq!(v2["commitStatus"], 204, "{r}");
    assert_eq!(v2["afterCommit"].as_u64(), Some(total - 1), "{r}");
    assert!(
        !v2["afterCommitIds"]
            .as_array()
            .expect("ids")
            .contains(&v2["last"]),
        "{r}"
    );
    assert_eq!(v2["markAfterCommit"], Value::Null, "{r}");
    s.stop().await;
}
