//! The replay format's less common lines: extra user parts, refs, continuing a session,
//! and the example in docs/replay-format.md.

mod common;

use common::{open_things, parts, stderr, text_answer, Env};

#[test]
fn user_parts_are_stored_as_given_with_assigned_ids() {
    let env = Env::new();
    let file = env.jsonl(
        "parts.jsonl",
        &[
            r#"{"type":"user","text":"look at this","parts":[{"type":"file","mime":"text/plain","filename":"n.txt","url":"file:///n.txt"},{"type":"agent","name":"explore"},{"type":"future-kind","x":[1,2]}]}"#,
            r#"{"type":"abort"}"#,
        ],
    );
    let (report, sid) = env.replay(&file);
    assert_eq!(
        report["assistant_messages"], 1,
        "a stream event opens an answer implicitly"
    );
    let history = env.history(&sid);
    let user = parts(&history[0]);
    let kinds: Vec<&str> = user.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "file", "agent", "future-kind"]);
    assert_eq!(user[1]["filename"], "n.txt");
    assert_eq!(user[3]["x"], serde_json::json!([1, 2]));
    for p in user {
        assert_eq!(p["messageID"], history[0]["info"]["id"]);
        assert!(p["id"].as_str().unwrap().starts_with("prt_"));
    }
    assert_eq!(history[1]["info"]["error"]["name"], "MessageAbortedError");
    assert_eq!(open_things(&history), (0, 0));

    let bad = env.file(
        "bad.jsonl",
        r#"{"type":"user","parts":[{"id":"prt_x","type":"agent","name":"a"}]}"#,
    );
    let err = stderr(&env.run(&["replay", &bad]));
    assert!(err.contains("line 1: parts[0]: remove `id`"), "{err}");
}

#[test]
fn refs_resolve_to_earlier_message_ids() {
    let env = Env::new();
    let file = env.jsonl(
        "refs.jsonl",
        &[
            r#"{"type":"user","ref":"first","text":"one"}"#,
            r#"{"type":"finish"}"#,
            // The name earlier releases wrote is still read.
            r#"{"type":"user","compaction":{"auto":false,"tailStartID":"@first"}}"#,
            r#"{"type":"user","compaction":{"auto":true,"tail_start_id":"@nope"}}"#,
        ],
    );
    let out = env.run(&["replay", &file]);
    assert!(stderr(&out).contains("line 4: compaction.tail_start_id: @nope names no earlier line"));
    let history = env.history(&env.first_session());
    assert_eq!(
        parts(&history[2])[0]["tail_start_id"],
        history[0]["info"]["id"]
    );
}

#[test]
fn session_flag_continues_a_session_and_answers_its_last_user_message() {
    let env = Env::new();
    let first = env.file("first.jsonl", "{\"type\":\"user\",\"text\":\"question\",\"model\":{\"providerID\":\"p\",\"modelID\":\"m\"}}\n");
    let (report, sid) = env.replay(&first);
    assert_eq!(report["created"], true);
    let second = env.file("second.jsonl", &text_answer("answer"));
    let report = env.json(&["replay", &second, "--session", &sid]);
    assert_eq!(report["created"], false);
    assert_eq!(report["session"], sid.as_str());
    let history = env.history(&sid);
    assert_eq!(history.len(), 2);
    let answer = &history[1]["info"];
    assert_eq!(answer["parentID"], history[0]["info"]["id"]);
    assert_eq!(
        (answer["providerID"].as_str(), answer["modelID"].as_str()),
        (Some("p"), Some("m"))
    );
    assert_eq!(parts(&history[1])[0]["text"], "answer");

    // A new id creates the session with that id.
    let report = env.json(&["replay", &first, "--session", "ses_chosen"]);
    assert_eq!(
        (report["session"].as_str(), report["created"].as_bool()),
        (Some("ses_chosen"), Some(true))
    );
}

#[test]
fn the_documented_example_replays() {
    let doc = include_str!("../../docs/replay-format.md");
    let block = doc
        .split("```jsonl\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```jsonl block in docs/replay-format.md");
    let env = Env::new();
    let file = env.file("doc.jsonl", block);
    let (report, sid) = env.replay(&file);
    assert_eq!(report["title"], "Multi-turn session with tools");
    let history = env.history(&sid);
    assert_eq!(history.len(), 2);
    assert_eq!(history[1]["info"]["finish"], "stop");
    assert_eq!(open_things(&history), (0, 0));
}
