//! The facade's calls as a library user makes them.

mod common;

use std::time::Duration;

use common::{answer, memory, replay_events, session_of, user_turn};
use forge_store::{Error, Line, OpenOptions, ReplayOptions, SessionId, TenantId};

const TURN: &str = r#"{"type":"user","text":"hi"}
{"type":"text-start","id":"t"}
{"type":"text-delta","id":"t","text":"hel"}
{"type":"text-delta","id":"t","text":"lo"}
{"type":"text-end","id":"t"}
{"type":"finish","finishReason":"stop"}"#;

#[tokio::test]
async fn group_commit_replay_is_committed_and_counted_when_it_returns() {
    let options = OpenOptions::new()
        .group_commit(Duration::from_millis(10))
        .count_writes(true);
    let forge = forge_store::open_with("memory://", options).await.unwrap();
    let tenant = TenantId::default();
    let report = forge
        .replay_str(&tenant, TURN, ReplayOptions::titled("t"))
        .await
        .unwrap();
    let writes = report.writes.expect("counted");
    assert!(writes.commits > 0 && writes.rows >= 4, "{writes:?}");
    let sid = report.session.unwrap();
    let all = forge.history_all(&tenant, &sid).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(forge.writes().map(|w| w.rows), Some(writes.rows));

    // A second replay into the same session reports only its own writes: the same
    // rows but the session's.
    let again = forge
        .replay_str(&tenant, TURN, ReplayOptions::default().session(sid.clone()))
        .await
        .unwrap();
    assert_eq!(again.writes.map(|w| w.rows + 1), Some(writes.rows));
}

#[tokio::test]
async fn a_stream_out_of_order_is_an_input_error_naming_the_event() {
    let (forge, tenant) = memory().await;
    let lines = user_turn(
        "hi",
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"nope","text":"x"}"#,
        ],
    );
    let err = replay_events(&forge, &tenant, lines).await.unwrap_err();
    assert!(err.is_input(), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with("event 3: text-delta does not fit"), "{msg}");
    // What was committed stays, and the open answer was closed with the error.
    let sid = session_of(&err.report);
    let open = forge.recover(&tenant, Some(&sid)).await.unwrap();
    assert!(open.open_before.is_empty(), "{:?}", open.open_before);
}

#[tokio::test]
async fn an_unknown_session_is_not_found_not_empty() {
    let (forge, tenant) = memory().await;
    let sid = SessionId::from("ses_missing".to_owned());
    for err in [
        forge.history(&tenant, &sid, None, 10).await.unwrap_err(),
        forge.view(&tenant, &sid).await.unwrap_err(),
        forge.export(&tenant, &sid).await.map(|_| ()).unwrap_err(),
        forge
            .recover(&tenant, Some(&sid))
            .await
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    }
}

#[tokio::test]
async fn a_missing_file_is_an_io_error_naming_it() {
    let forge = forge_store::open("memory://").await.unwrap();
    let err = forge
        .replay_file(
            &TenantId::default(),
            "/nonexistent/turn.jsonl".as_ref(),
            ReplayOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err.error, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/turn.jsonl"), "{err}");
}

#[tokio::test]
async fn an_empty_input_is_an_error_and_creates_no_session() {
    let (forge, tenant) = memory().await;
    for text in ["", "\n\n", "# only a comment\n"] {
        let err = forge
            .replay_str(&tenant, text, ReplayOptions::titled("empty"))
            .await
            .unwrap_err();
        assert!(err.is_input(), "{err}");
        assert!(err.to_string().contains("holds no lines"), "{err}");
    }
    let empty = replay_events(&forge, &tenant, Vec::<Line>::new())
        .await
        .unwrap_err();
    assert!(
        empty.to_string().starts_with("event 1 (end of stream)"),
        "{empty}"
    );
    assert!(forge.sessions(&tenant).await.unwrap().is_empty());
}

#[tokio::test]
async fn imports_with_bad_or_repeated_ids_are_refused_whole() {
    let (forge, tenant) = memory().await;
    let message = |id: &str, part: &str| {
        serde_json::json!({
            "info": {"id": id, "sessionID": "ses_1", "role": "user",
                     "time": {"created": 1}, "agent": "build"},
            "parts": [{"id": part, "sessionID": "ses_1", "messageID": id,
                       "type": "text", "text": "hi"}]
        })
        .to_string()
    };
    let cases = [
        (
            vec![message("msg_1", "prt_1"), message("msg_1", "prt_2")],
            "appears twice",
        ),
        (
            vec![message("msg_1", "prt_1"), message("msg_2", "prt_1")],
            "appears twice",
        ),
        (
            vec![message("msg_1", "prt_1"), message("msg\n2", "prt_2")],
            "printable",
        ),
        (
            vec![message("msg_1", "prt_1"), message("msg_2", "prt\u{0}")],
            "printable",
        ),
    ];
    for (lines, why) in cases {
        let err = forge
            .import_str(&tenant, &lines.join("\n"), &|_, _| {})
            .await
            .unwrap_err();
        assert!(err.is_input() && err.to_string().contains(why), "{err}");
        assert!(
            forge.sessions(&tenant).await.unwrap().is_empty(),
            "nothing of a refused import is stored ({err})"
        );
    }
    let err = forge
        .replay_str(
            &tenant,
            "{\"type\":\"session\",\"id\":\"ses\\u0000x\"}\n{\"type\":\"user\",\"text\":\"hi\"}",
            ReplayOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.is_input() && err.to_string().contains("printable"),
        "{err}"
    );
}

#[tokio::test]
async fn a_preliminary_result_keeps_the_tool_running_and_is_no_result_for_an_unknown_call() {
    let (forge, tenant) = memory().await;
    let lines = user_turn(
        "search",
        &[
            r#"{"type":"tool-call","toolCallId":"c1","toolName":"search","input":{}}"#,
            r#"{"type":"tool-result","toolCallId":"c1","output":"10%","preliminary":true}"#,
            r#"{"type":"tool-result","toolCallId":"c9","output":"x","preliminary":true}"#,
        ],
    );
    let err = replay_events(&forge, &tenant, lines).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("event 4: tool-result does not fit: invalid input: preliminary tool-result for call c9, which is unknown"),
        "{err}"
    );
    let tool = answer(&forge, &tenant, &session_of(&err.report))
        .await
        .parts
        .iter()
        .find_map(|p| match &p.body {
            forge_store::model::PartBody::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .expect("the tool part");
    // The failed replay finalized the turn: the tool was still running (not completed
    // by its preliminary result), so it is closed as interrupted.
    assert!(
        matches!(tool.state, forge_store::model::ToolState::Error(_)),
        "{:?}",
        tool.state
    );
}
