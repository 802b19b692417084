//! The shipped example streams, replayed through the real binary into a redb file and
//! read back with history / view / recover.

mod common;

use common::{example, open_things, parts, Env};
use serde_json::Value;

fn tool_statuses(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .flat_map(|m| parts(m).iter())
        .filter(|p| p["type"] == "tool")
        .map(|p| p["state"]["status"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn multi_turn_example_stores_closed_turns_with_tools_and_usage() {
    let env = Env::new();
    let (report, sid) = env.replay(&example("multi-turn-tools.jsonl"));
    assert_eq!(report["user_messages"], 3);
    assert_eq!(report["assistant_messages"], 3);
    assert_eq!(
        report["deltas"], 10,
        "every text/reasoning delta is published"
    );
    assert!(report["rows"].as_u64().unwrap() > report["commits"].as_u64().unwrap() / 2);
    assert!(report["bytes"].as_u64().unwrap() > 0);
    assert!(report["error"].is_null() && report["crash_line"].is_null());

    let history = env.history(&sid);
    let roles: Vec<&str> = history
        .iter()
        .map(|m| m["info"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(open_things(&history), (0, 0));
    assert_eq!(
        tool_statuses(&history),
        [
            "completed",
            "completed",
            "error",
            "completed",
            "completed",
            "completed"
        ]
    );
    let first = &history[1];
    assert_eq!(first["info"]["parentID"], history[0]["info"]["id"]);
    assert_eq!(first["info"]["finish"], "stop");
    // The last step's usage, split as opencode does: 1310 prompt tokens of which 1200
    // were read from the cache.
    assert_eq!(first["info"]["tokens"]["input"], 110);
    assert_eq!(first["info"]["tokens"]["cache"]["read"], 1200);
    let kinds: Vec<&str> = parts(first)
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "step-start",
            "reasoning",
            "tool",
            "step-finish",
            "step-start",
            "text",
            "step-finish"
        ]
    );
    let text = &parts(first)[5];
    assert_eq!(
        text["text"], "It exports two modules, `engine` and `store`, and re-exports `Engine`.\n\n",
        "text-end keeps the text as streamed, trailing whitespace too"
    );
    let edit_error = parts(&history[3])
        .iter()
        .find(|p| p["state"]["status"] == "error")
        .unwrap();
    assert_eq!(
        edit_error["state"]["error"],
        "oldString not found in src/engine.rs"
    );
    assert!(parts(&history[3]).iter().any(|p| p["type"] == "patch"));

    let view = env.json(&["view", &sid]);
    assert!(view["boundary"].is_null());
    assert_eq!(view["hidden"], 0);
    assert_eq!(view["messages"].as_array().unwrap().len(), 6);

    let recovered = env.json(&["recover", &sid]);
    assert_eq!(recovered["report"]["sessions"], 0, "nothing was left open");
}

#[test]
fn compaction_view_starts_at_the_successful_compaction_not_the_failed_one() {
    let env = Env::new();
    let (_, sid) = env.replay(&example("compaction.jsonl"));
    let history = env.history(&sid);
    assert_eq!(history.len(), 12);
    let compactions: Vec<&Value> = history
        .iter()
        .filter(|m| parts(m).iter().any(|p| p["type"] == "compaction"))
        .collect();
    assert_eq!(compactions.len(), 2);
    let (good, failed) = (compactions[0], compactions[1]);

    let view = env.json(&["view", &sid]);
    let msgs = view["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["info"]["id"], good["info"]["id"]);
    assert_eq!(view["boundary"], good["info"]["id"]);
    assert_ne!(msgs[0]["info"]["id"], failed["info"]["id"]);
    assert_eq!(
        (view["stored"].as_u64(), view["hidden"].as_u64()),
        (Some(12), Some(2))
    );
    assert_eq!(view["tail"], 2, "tail_start_id keeps the second turn");

    let summary = &msgs[1]["info"];
    assert_eq!(
        (summary["summary"].as_bool(), summary["finish"].as_str()),
        (Some(true), Some("stop"))
    );
    assert_eq!(summary["parentID"], good["info"]["id"]);
    // The kept tail comes right after the summary: the second question and its answer.
    assert_eq!(msgs[2]["info"]["id"], history[2]["info"]["id"]);
    assert_eq!(msgs[3]["info"]["id"], history[3]["info"]["id"]);
    // The failed summary is in the view, closed with its error, and is no boundary.
    let failed_summary = msgs
        .iter()
        .find(|m| m["info"]["parentID"] == failed["info"]["id"])
        .expect("failed summary in view");
    assert_eq!(
        failed_summary["info"]["error"]["name"],
        "ContextOverflowError"
    );
    assert!(failed_summary["info"]["finish"].is_null());
    assert_eq!(
        parts(failed_summary)[1]["text"],
        "Summary: so far we ",
        "finalize keeps the text streamed so far"
    );
    assert_eq!(open_things(&history), (0, 0));

    let human = env.ok(&["view", &sid]);
    assert!(human.contains("hidden by compaction: 2"), "{human}");
    assert!(
        human.contains("failed summaries (not boundaries)"),
        "{human}"
    );
}

#[test]
fn crash_example_leaves_open_parts_and_recover_closes_them_exactly_once() {
    let env = Env::new();
    let (report, sid) = env.replay(&example("crash.jsonl"));
    assert_eq!(report["crash_line"], 21);
    assert_eq!(report["left_open"]["messages"], 1);
    assert_eq!(report["left_open"]["parts"], 3);

    let before = env.history(&sid);
    assert_eq!(open_things(&before), (1, 3));
    let open_text = parts(&before[1])
        .iter()
        .find(|p| p["type"] == "text")
        .unwrap();
    assert_eq!(open_text["text"], "", "deltas never reach the store");
    assert_eq!(tool_statuses(&before), ["completed", "running", "pending"]);

    let first = env.json(&["recover", &sid]);
    let r = &first["report"];
    assert_eq!(
        (
            r["sessions"].as_u64(),
            r["blocks_closed"].as_u64(),
            r["tools_closed"].as_u64(),
            r["messages_closed"].as_u64()
        ),
        (Some(1), Some(1), Some(2), Some(1))
    );
    assert_eq!(
        r["text_from_bus"], 0,
        "a new process has no deltas to replay"
    );
    let was: Vec<&str> = first["closed"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["was"].as_str().unwrap())
        .collect();
    assert_eq!(was, ["open", "running", "pending"]);

    let after = env.history(&sid);
    assert_eq!(open_things(&after), (0, 0));
    assert_eq!(tool_statuses(&after), ["completed", "error", "error"]);
    for p in parts(&after[1])
        .iter()
        .filter(|p| p["state"]["status"] == "error")
    {
        assert_eq!(p["state"]["error"], "Tool execution aborted");
        assert_eq!(p["state"]["metadata"]["interrupted"], true);
    }
    assert_eq!(after[1]["info"]["error"]["name"], "MessageAbortedError");

    let second = env.json(&["recover", &sid]);
    assert_eq!(second["report"]["sessions"], 0);
    assert!(second["closed"]["parts"].as_array().unwrap().is_empty());
    assert_eq!(env.history(&sid), after, "a second recover changes nothing");
}

#[test]
fn history_pages_back_with_the_printed_cursor() {
    let env = Env::new();
    let (_, sid) = env.replay(&example("compaction.jsonl"));
    let all: Vec<Value> = env
        .history(&sid)
        .iter()
        .map(|m| m["info"]["id"].clone())
        .collect();
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["history", sid.as_str(), "--limit", "5"];
        if let Some(c) = &before {
            args.extend(["--before", c.as_str()]);
        }
        let page = env.json(&args);
        let ids: Vec<Value> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["info"]["id"].clone())
            .collect();
        assert!(ids.len() <= 5);
        seen.splice(0..0, ids);
        match page["next"].as_str() {
            Some(c) => before = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, all);
    let human = env.ok(&["history", &sid, "--limit", "5"]);
    assert!(human.contains("--before c1."), "{human}");
}

#[test]
fn demo_replays_every_example_into_the_default_redb_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::bare(&["demo"], dir.path());
    let text = common::stdout(&out);
    assert!(out.status.success(), "{}\n{text}", common::stderr(&out));
    assert!(
        dir.path().join("forge.redb").exists(),
        "default backend is ./forge.redb"
    );
    for needle in [
        "=== multi-turn-tools.jsonl ===",
        "=== compaction.jsonl ===",
        "=== crash.jsonl ===",
        "deltas published",
        "hidden by compaction: 2",
        "summary FAILED (not a boundary)",
        "crash marker at line 21",
        "2 tool(s) as errors",
        "second run: recover: nothing was open; nothing changed",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let sessions = common::bare(&["sessions", "--json"], dir.path());
    let list: Value = serde_json::from_slice(&sessions.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
}

/// `view --format model-messages|ui-messages`: a run recorded with the real AI SDK (ai 6,
/// tools and provider metadata) gives the SDK's own messages after the prompt
/// (`provider-metadata.next.json`); bad values are named.
#[test]
fn view_prints_the_next_request_in_the_ai_sdks_shapes() {
    let env = Env::new();
    let (_, sid) = env.replay(&example("aisdk/v6/provider-metadata.jsonl"));
    let parsed = |args: &[&str]| -> Value { serde_json::from_str(&env.ok(args)).unwrap() };
    let model = parsed(&["view", &sid, "--format", "model-messages", "--ai-sdk", "6"]);
    let next: Value = serde_json::from_str(
        &std::fs::read_to_string(example("aisdk/v6/provider-metadata.next.json")).unwrap(),
    )
    .unwrap();
    let model = model.as_array().unwrap();
    assert_eq!(
        model[0]["content"][0]["text"],
        next["messages"][0]["content"]
    );
    assert_eq!(
        model[1..],
        next["messages"].as_array().unwrap()[1..],
        "the SDK's messages after the prompt"
    );
    let ui = parsed(&["view", &sid, "--format", "ui-messages"]);
    assert_eq!(ui.as_array().map(Vec::len), Some(2), "{ui}");
    assert_eq!(ui[1]["id"], model_id(&env, &sid), "the answer's message id");
    let bad = env.fails(&["view", &sid, "--format", "ui-messages", "--ai-sdk", "4"]);
    assert!(bad.contains("expected 5, 6 or 7"), "{bad}");
    let bad = env.fails(&["view", &sid, "--format", "openai"]);
    assert!(bad.contains("openai"), "{bad}");
}

/// The id of the session's assistant message.
fn model_id(env: &Env, sid: &str) -> Value {
    env.history(sid)
        .iter()
        .find(|m| m["info"]["role"] == "assistant")
        .map(|m| m["info"]["id"].clone())
        .unwrap()
}
