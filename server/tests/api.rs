//! The HTTP API on a real redb file: tokens and tenants, opencode's read shapes and
//! paging, streaming uploads seen live, errors and their status codes, shutdown.

mod common;

use common::*;
use forge_server::{Access, ServerOptions};
use forge_store::OpenOptions;
use serde_json::{json, Value};

fn options() -> ServerOptions {
    ServerOptions::new(two_tenants())
}

/// The message of an error body, which must be of the error `name`.
fn error_message<'a>(body: &'a Value, name: &str) -> &'a str {
    assert_eq!(body["name"], name, "{body}");
    body["message"].as_str().expect("message")
}

#[tokio::test]
async fn tokens_name_the_tenant_and_other_tenants_ids_are_not_found() {
    let s = redb_server(options(), OpenOptions::new()).await;
    // No token, a wrong one, another scheme: 401 with a Bearer challenge.
    for auth in [
        None,
        Some("Bearer nope"),
        Some(&*format!("Basic {TOKEN_A}")),
    ] {
        let mut req = s.http.get(format!("{}/session", s.base));
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let r = req.send().await.expect("request");
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .map(reqwest::header::HeaderValue::as_bytes),
            Some(&b"Bearer"[..])
        );
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["name"], "Unauthorized");
    }
    s.create(TOKEN_A, "ses_shared_name").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_shared_name", ndjson(&turn("hi", 3, "a ")))
        .await;
    assert_eq!(status, 200);
    // Tenant B sees nothing of A's: not in its list, and every id is "not found".
    assert_eq!(s.json("/session", TOKEN_B, 200).await, json!([]));
    for path in [
        "/session/ses_shared_name",
        "/session/ses_shared_name/message",
        "/session/ses_shared_name/view",
        "/session/ses_shared_name/export",
        "/session/ses_shared_name/event",
    ] {
        let body = s.json(path, TOKEN_B, 404).await;
        assert_eq!(body["name"], "NotFoundError", "{path}");
    }
    sent(s.delete("/session/ses_shared_name", TOKEN_B), 404).await;
    // B may use the same id for its own session; A's is untouched.
    s.create(TOKEN_B, "ses_shared_name").await;
    let a = s
        .json("/session/ses_shared_name/message", TOKEN_A, 200)
        .await;
    let b = s
        .json("/session/ses_shared_name/message", TOKEN_B, 200)
        .await;
    assert_eq!(a.as_array().map(Vec::len), Some(2));
    assert_eq!(b, json!([]));
    s.stop().await;
}

#[tokio::test]
async fn messages_page_as_opencode_pages_them() {
    let s = session_server("ses_paged").await;
    let mut lines = Vec::new();
    for i in 0..7 {
        lines.extend(turn(&format!("question {i}"), 2, "x"));
    }
    let (status, report) = s.upload(TOKEN_A, "ses_paged", ndjson(&lines)).await;
    assert_eq!(status, 200, "{report}");
    let all = s.json("/session/ses_paged/message", TOKEN_A, 200).await;
    let all = all.as_array().expect("array").clone();
    assert_eq!(all.len(), 14);
    assert_eq!(
        s.json("/session/ses_paged/message?limit=0", TOKEN_A, 200)
            .await,
        json!(all)
    );
    // limit=3: the newest three, oldest first, and the cursor of the older ones.
    let mut seen: Vec<Value> = Vec::new();
    let mut path = "/session/ses_paged/message?limit=3".to_owned();
    let mut pages = 0;
    loop {
        let r = sent(s.get(&path, TOKEN_A), 200).await;
        let next = header(&r, "x-next-cursor");
        let link = header(&r, "link");
        let page: Vec<Value> = r.json().await.expect("json");
        assert!(page.len() <= 3);
        let mut older = page;
        older.append(&mut seen);
        seen = older;
        pages += 1;
        let Some(next) = next else {
            assert!(link.is_none());
            break;
        };
        let link = link.expect("a Link with the next page");
        assert!(
            link.ends_with(">; rel=\"next\"") && link.contains("limit=3"),
            "{link}"
        );
        // Follow the Link as a client would.
        path = link
            .trim_start_matches('<')
            .split('>')
            .next()
            .expect("target")
            .to_owned();
        assert!(path.contains(&next) || path.contains("before="), "{path}");
    }
    assert_eq!(pages, 5);
    assert_eq!(seen, all, "paging yields every message once, in order");
    // One message; its parts are those of the listing.
    let id = all[3]["info"]["id"].as_str().expect("id");
    let one = s
        .json(&format!("/session/ses_paged/message/{id}"), TOKEN_A, 200)
        .await;
    assert_eq!(one, all[3]);
    let missing = s
        .json("/session/ses_paged/message/msg_missing", TOKEN_A, 404)
        .await;
    assert_eq!(missing["name"], "NotFoundError");
    let bad = s
        .json(
            "/session/ses_paged/message?limit=2&before=nonsense",
            TOKEN_A,
            400,
        )
        .await;
    assert_eq!(bad["name"], "BadRequest");
    // The export is the library's, in opencode's shape.
    let export = s.json("/session/ses_paged/export", TOKEN_A, 200).await;
    let lib = s
        .forge
        .export(&tenant("acme"), &"ses_paged".into())
        .await
        .expect("export");
    assert_eq!(export, serde_json::to_value(&lib).expect("json"));
    assert_eq!(export["messages"], json!(all));
    s.stop().await;
}

#[tokio::test]
async fn sessions_list_newest_first_with_filters_and_pages() {
    let s = redb_server(options(), OpenOptions::new()).await;
    for id in ["ses_1", "ses_2", "ses_3"] {
        s.create(TOKEN_A, id).await;
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    sent(
        s.post("/session", TOKEN_A)
            .json(&json!({"id": "ses_child", "title": "child of 1", "parentID": "ses_1"})),
        200,
    )
    .await;
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let all = s.json("/session", TOKEN_A, 200).await;
    assert_eq!(ids(&all), ["ses_child", "ses_3", "ses_2", "ses_1"]);
    let roots = s
        .json("/session?roots=true&directory=%2Fignored", TOKEN_A, 200)
        .await;
    assert_eq!(ids(&roots), ["ses_3", "ses_2", "ses_1"]);
    let found = s.json("/session?search=CHILD", TOKEN_A, 200).await;
    assert_eq!(ids(&found), ["ses_child"]);
    let r = sent(s.get("/session?limit=3", TOKEN_A), 200).await;
    let next = header(&r, "x-next-cursor").expect("more to come");
    assert_eq!(
        ids(&r.json().await.expect("json")),
        ["ses_child", "ses_3", "ses_2"]
    );
    let rest = s
        .json(&format!("/session?limit=3&before={next}"), TOKEN_A, 200)
        .await;
    assert_eq!(ids(&rest), ["ses_1"]);
    // Conflicts, bad ids, a missing parent.
    for (body, status) in [
        (json!({"id": "ses_1"}), 409),
        (json!({"id": "bad id"}), 400),
        (json!({"parentID": "ses_nowhere"}), 404),
    ] {
        sent(s.post("/session", TOKEN_A).json(&body), status).await;
    }
    // Delete: gone from the list, its reads 404.
    sent(s.delete("/session/ses_2", TOKEN_A), 200).await;
    assert_eq!(
        ids(&s.json("/session?roots=true", TOKEN_A, 200).await),
        ["ses_3", "ses_1"]
    );
    s.json("/session/ses_2", TOKEN_A, 404).await;
    s.stop().await;
}

#[tokio::test]
async fn an_upload_is_processed_while_it_arrives() {
    let s = session_server("ses_live").await;
    let mut sse = SseReader::connected(&s, "/session/ses_live/event", TOKEN_A, None).await;
    assert_eq!(sse.status, 200);
    let lines = turn("stream it", 4, "word ");
    let (head, tail) = lines.split_at(6); // through the second delta
    let mut upload = s.upload_lines(TOKEN_A, "ses_live", 16);
    for l in head {
        upload.line(l).await;
    }
    // Both deltas reach the subscriber while the body is still open.
    let mut deltas = Vec::new();
    while deltas.len() < 2 {
        let e = sse.expect().await;
        if e.kind() == "message.part.delta" {
            deltas.push(
                e.data["properties"]["delta"]
                    .as_str()
                    .expect("delta")
                    .to_owned(),
            );
        }
    }
    assert_eq!(deltas, ["word ", "word "]);
    assert!(!upload.is_finished(), "the upload is still running");
    for l in tail {
        upload.line(l).await;
    }
    let r = upload.finish().await;
    assert_eq!(r.status().as_u16(), 200);
    let report: Value = r.json().await.expect("json");
    assert_eq!(report["deltas"], 4);
    let messages = s.json("/session/ses_live/message", TOKEN_A, 200).await;
    let text = messages[1]["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .find(|p| p["type"] == "text")
        .expect("text part")["text"]
        .clone();
    assert_eq!(text, "word word word word ", "stored as streamed");
    s.stop().await;
}

#[tokio::test]
async fn bad_input_gets_its_status_and_stores_nothing_of_the_bad_line() {
    let mut opts = options();
    opts.max_line = 200;
    opts.max_body = 4096;
    let s = server_with_session(opts, OpenOptions::new(), "ses_bad").await;
    // A malformed line: 400 naming it, the report of what was done, the answer closed.
    let mut lines = turn("q", 2, "ok ");
    lines.insert(5, "{\"type\":\"text-delta\",\"id\":\"t1\"}".to_owned());
    let (status, body) = s.upload(TOKEN_A, "ses_bad", ndjson(&lines)).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error_message(&body, "BadRequest").starts_with("line 6:"),
        "{body}"
    );
    assert_eq!(body["report"]["lines"], 6);
    let open = s
        .forge
        .store()
        .open_items(&tenant("acme"), None)
        .await
        .expect("open items");
    assert!(
        open.messages.is_empty() && open.parts.is_empty(),
        "{open:?}"
    );
    // A line over the limit: 413.
    let long = json!({"type": "user", "text": "x".repeat(300)}).to_string();
    let (status, body) = s.upload(TOKEN_A, "ses_bad", format!("{long}\n")).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["name"], "PayloadTooLarge");
    // A body over the limit: 413, for uploads and imports.
    let many = ndjson(&turn("q", 200, "0123456789"));
    let (status, body) = s.upload(TOKEN_A, "ses_bad", many).await;
    assert_eq!(status, 413, "{body}");
    sent(s.post("/import", TOKEN_A).body("x".repeat(5000)), 413).await;
    // An import that is not an export: 400, nothing stored.
    sent(s.post("/import", TOKEN_A).body("{\"info\": 3}"), 400).await;
    assert_eq!(
        s.json("/session", TOKEN_A, 200)
            .await
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    s.stop().await;
}

#[tokio::test]
async fn export_then_import_under_another_tenant_is_the_same_session() {
    let s = session_server("ses_move").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_move", ndjson(&turn("move me", 3, "b")))
        .await;
    assert_eq!(status, 200);
    let export = s.json("/session/ses_move/export", TOKEN_A, 200).await;
    sent(s.post("/import", TOKEN_B).body(export.to_string()), 200).await;
    assert_eq!(
        s.json("/session/ses_move/export", TOKEN_B, 200).await,
        export
    );
    s.stop().await;
}

#[tokio::test]
async fn shutdown_closes_the_turn_being_uploaded_and_commits_it() {
    let s = session_server("ses_down").await;
    let mut sse = SseReader::connect(&s, "/session/ses_down/event", TOKEN_A, None).await;
    sse.expect().await;
    let lines = turn("cut short", 3, "half ");
    let mut upload = s.upload_lines(TOKEN_A, "ses_down", 16);
    for l in &lines[..6] {
        upload.line(l).await;
    }
    loop {
        if sse.expect().await.kind() == "message.part.delta" {
            break;
        }
    }
    let forge = s.forge.clone();
    s.shutdown.trigger();
    let r = upload.answer().await;
    assert_eq!(r.status().as_u16(), 503);
    let body: Value = r.json().await.expect("json");
    assert!(
        error_message(&body, "BackendUnavailable").contains("shutting down"),
        "{body}"
    );
    // The SSE connection is cut, not ended: a client reconnects.
    loop {
        match sse.next().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended cleanly"),
            Err(_) => break,
        }
    }
    s.task.await.expect("task").expect("clean stop");
    drop(upload);
    // What was streamed is closed and stored: no open part or message.
    let t = tenant("acme");
    let open = forge
        .store()
        .open_items(&t, None)
        .await
        .expect("open items");
    assert!(
        open.messages.is_empty() && open.parts.is_empty(),
        "{open:?}"
    );
    let history = forge
        .history_all(&t, &"ses_down".into())
        .await
        .expect("history");
    let answer = &history[1];
    assert!(!answer.info.is_open(), "{:?}", answer.info);
    let error = serde_json::to_value(&answer.info).expect("json")["error"].clone();
    assert!(error.to_string().contains("ended early"), "{error}");
}

#[tokio::test]
async fn open_access_serves_one_tenant_without_tokens() {
    let s = redb_server(
        ServerOptions::new(Access::Open(tenant("solo"))),
        OpenOptions::new(),
    )
    .await;
    sent(
        s.http
            .post(format!("{}/session", s.base))
            .json(&json!({"id": "ses_open"})),
        200,
    )
    .await;
    let listed = s.forge.sessions(&tenant("solo")).await.expect("sessions");
    assert_eq!(listed.len(), 1);
    let health: Value = s
        .http
        .get(format!("{}/health", s.base))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(health["backend"], "redb");
    s.stop().await;
}

/// A streaming upload reads lines as replay does: a surrogate pair a provider split
/// between two deltas is joined, a half never completed becomes U+FFFD with a warning
/// in the report, and a call id used again after its call ended is a new call
/// (recordings of the real AI SDK, `examples/streams/aisdk/v7/`).
#[tokio::test]
async fn uploads_take_split_characters_and_call_ids_used_again() {
    let s = server_with_session(options(), OpenOptions::new(), "ses_split").await;
    let fixture = |name: &str| -> String {
        let path = format!(
            "{}/../examples/streams/aisdk/v7/{name}.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).expect("fixture");
        // The upload names its session: the recording's session line is left out.
        let lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.contains(r#""type":"session""#))
            .map(str::to_owned)
            .collect();
        ndjson(&lines)
    };
    let body = fixture("split-surrogate");
    let (status, report) = s.upload(TOKEN_A, "ses_split", body.clone()).await;
    assert_eq!(status, 200, "{report}");
    let half = body
        .lines()
        .position(|l| l.contains(r#""text":" half.""#))
        .expect("the line after the lone half")
        + 1;
    assert_eq!(report["warnings"][0]["line"], half, "{report}");
    assert_eq!(
        report["warnings"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let (status, report) = s
        .upload(TOKEN_A, "ses_split", fixture("call-id-reused"))
        .await;
    assert_eq!(status, 200, "{report}");

    let messages = s.json("/session/ses_split/message", TOKEN_A, 200).await;
    let parts: Vec<&Value> = messages
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["parts"].as_array().expect("parts"))
        .collect();
    let texts: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "text" || p["type"] == "reasoning")
        .filter_map(|p| p["text"].as_str())
        .collect();
    for want in [
        "Thinking \u{1F914} done.",
        "Smile \u{1F600} and a lone \u{FFFD} half.",
        "Noted \u{1F44D}",
    ] {
        assert!(texts.contains(&want), "{want:?} not in {texts:?}");
    }
    let calls: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "tool" && p["callID"] == "call_0")
        .filter_map(|p| p["state"]["status"].as_str())
        .collect();
    assert_eq!(calls, ["completed", "completed"], "{parts:?}");
    s.stop().await;
}

/// `GET /session/{id}/view?format=…`: the next request in the AI SDK's shapes, from a
/// stream recorded with the real SDK (ai 7) and uploaded; it equals the SDK's own
/// messages after the prompt (`examples/streams/aisdk/v7/*.next.json`).
#[tokio::test]
async fn the_view_is_served_as_the_ai_sdks_next_request() {
    let s = redb_server(options(), OpenOptions::new()).await;
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/streams/aisdk/v7");
    let stream = std::fs::read_to_string(root.join("provider-metadata.jsonl")).expect("stream");
    let mut body = String::new();
    for line in stream.lines().filter(|l| !l.starts_with('#')) {
        body.push_str(line);
        body.push('\n');
    }
    let (status, report) = s.upload(TOKEN_A, "ses_next", body).await;
    assert_eq!(status, 200, "{report}");
    let next: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("provider-metadata.next.json")).expect("next.json"),
    )
    .expect("next.json is JSON");
    let model = s
        .json("/session/ses_next/view?format=model-messages", TOKEN_A, 200)
        .await;
    let model = model.as_array().expect("an array");
    assert_eq!(model[0]["role"], "user");
    assert_eq!(
        Value::Array(model[1..].to_vec()),
        Value::Array(next["messages"].as_array().expect("messages")[1..].to_vec())
    );
    // ai 5's shapes on request; the UI form is one message per turn.
    let ui = s
        .json(
            "/session/ses_next/view?format=ui-messages&sdk=5",
            TOKEN_A,
            200,
        )
        .await;
    assert_eq!(ui.as_array().map(Vec::len), Some(2), "{ui}");
    assert_eq!(ui[1]["parts"][4]["type"], "tool-weather", "{ui}");
    assert!(
        ui[1]["parts"][4].get("resultProviderMetadata").is_none(),
        "{ui}"
    );
    // The plain view is unchanged; bad values are named; other tenants see nothing.
    let view = s.json("/session/ses_next/view", TOKEN_A, 200).await;
    assert_eq!(view["stored"], 2, "{view}");
    let bad = s
        .json("/session/ses_next/view?format=openai", TOKEN_A, 400)
        .await;
    assert!(
        error_message(&bad, "BadRequest").contains("\"openai\""),
        "{bad}"
    );
    let bad = s
        .json(
            "/session/ses_next/view?format=ui-messages&sdk=4",
            TOKEN_A,
            400,
        )
        .await;
    assert!(error_message(&bad, "BadRequest").contains("\"4\""), "{bad}");
    s.json("/session/ses_next/view?format=model-messages", TOKEN_B, 404)
        .await;
}

/// `GET /stats` counts the caller's tenant only; what the backend occupies is shown
/// only when the server shares it.
#[tokio::test]
async fn stats_count_the_callers_tenant_and_share_the_footprint_only_when_told() {
    for share in [false, true] {
        let mut opts = options();
        opts.share_footprint = share;
        let s = redb_server(opts, OpenOptions::new()).await;
        s.create(TOKEN_A, "ses_counted").await;
        let (status, _) = s
            .upload(TOKEN_A, "ses_counted", ndjson(&turn("hi", 3, "a ")))
            .await;
        assert_eq!(status, 200);
        let a = s.json("/stats", TOKEN_A, 200).await;
        let b = s.json("/stats", TOKEN_B, 200).await;
        assert_eq!(
            (a["sessions"].as_u64(), a["messages"].as_u64()),
            (Some(1), Some(2)),
            "{a}"
        );
        assert!(a["parts"].as_u64().unwrap() >= 2, "{a}");
        assert_eq!(a["largest"][0]["session"], "ses_counted");
        assert_eq!(a["tenant"], "acme");
        assert_eq!(
            (b["sessions"].as_u64(), b["messages"].as_u64()),
            (Some(0), Some(0)),
            "{b}"
        );
        assert!(b["largest"].as_array().unwrap().is_empty());
        if share {
            let items = a["footprint"]["items"].as_array().unwrap();
            assert!(
                items
                    .iter()
                    .any(|i| i["name"].as_str().unwrap().ends_with("serve.redb")),
                "{a}"
            );
        } else {
            assert!(a["footprint"].is_null() && b["footprint"].is_null(), "{a}");
        }
        s.stop().await;
    }
}

/// `serve`'s pruner keeps each tenant's newest sessions, and a subscriber of the tenant's
/// events sees the deletion.
#[tokio::test]
async fn the_background_pruner_deletes_what_the_policy_does_not_keep() {
    let mut opts = options();
    opts.pruning = Some(forge_server::Pruning {
        retention: forge_store::prune::Retention {
            keep: Some(1),
            ..Default::default()
        },
        every: std::time::Duration::from_millis(100),
        batch_messages: 2,
    });
    let s = redb_server(opts, OpenOptions::new()).await;
    let mut events = SseReader::connect(&s, "/event", TOKEN_A, None).await;
    s.create(TOKEN_A, "ses_old").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_old", ndjson(&turn("hi", 3, "a ")))
        .await;
    assert_eq!(status, 200);
    s.create(TOKEN_A, "ses_new").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_new", ndjson(&turn("hi", 3, "b ")))
        .await;
    assert_eq!(status, 200);
    s.create(TOKEN_B, "ses_other").await;
    // The server's own writer lets go of the sessions when its lease ends; the pruner
    // then deletes the older one.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let list = s.json("/session", TOKEN_A, 200).await;
        let ids: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        if ids == ["ses_new"] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still listed: {ids:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut deleted = false;
    while !deleted {
        let e = events.expect().await;
        deleted = e.kind() == "session.deleted";
    }
    // Tenant B has one session: within its limit.
    assert_eq!(
        s.json("/session", TOKEN_B, 200)
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    s.stop().await;
}

/// A large value (a tool's 100 KB output, read five times) is stored once, and every
/// route still serves it whole: the export, a page of messages, one message.
#[tokio::test]
async fn large_values_are_served_whole_and_counted_once() {
    let s = redb_server(options(), OpenOptions::new()).await;
    let text: String = (0..100_000u32)
        .map(|i| char::from(b'a' + u8::try_from((i * 7 + i / 13) % 26).unwrap()))
        .collect();
    let t = 1_764_670_000_000_i64;
    let mut messages = Vec::new();
    for i in 1..=5 {
        let mid = format!("msg_{i}");
        messages.push(json!({
            "info": {"id": mid, "sessionID": "ses_big", "role": "assistant",
                     "time": {"created": t + i, "completed": t + i + 1}, "parentID": "msg_0",
                     "providerID": "p", "modelID": "m", "cost": 0,
                     "tokens": {"input": 0, "output": 0, "reasoning": 0,
                                "cache": {"read": 0, "write": 0}}},
            "parts": [{"id": format!("prt_{i}"), "sessionID": "ses_big", "messageID": mid,
                       "type": "tool", "callID": format!("call_{i}"), "tool": "read",
                       "state": {"status": "completed", "input": {"filePath": "f"},
                                 "output": text, "title": "f", "metadata": {},
                                 "time": {"start": t + i, "end": t + i + 1}}}]
        }));
    }
    let doc = json!({"info": {"id": "ses_big", "title": "big", "time": {"created": t, "updated": t}},
                     "messages": messages});
    sent(s.post("/import", TOKEN_A).body(doc.to_string()), 200).await;
    let export = s.json("/session/ses_big/export", TOKEN_A, 200).await;
    assert_eq!(export["messages"], doc["messages"]);
    let page = s.json("/session/ses_big/message", TOKEN_A, 200).await;
    for m in page.as_array().unwrap() {
        assert_eq!(
            m["parts"][0]["state"]["output"].as_str(),
            Some(text.as_str())
        );
    }
    let one = s.json("/session/ses_big/message/msg_3", TOKEN_A, 200).await;
    assert_eq!(
        one["parts"][0]["state"]["output"].as_str(),
        Some(text.as_str())
    );
    let stats = s.json("/stats", TOKEN_A, 200).await;
    assert_eq!(
        (stats["blobs"].as_u64(), stats["blob_bytes"].as_u64()),
        (Some(1), Some(100_000)),
        "{stats}"
    );
    assert!(stats["logical_bytes"].as_u64().unwrap() < 10_000, "{stats}");
    s.stop().await;
}
