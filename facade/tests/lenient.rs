//! Lenient replays: a bad line is skipped and stores nothing, so a stream replayed with
//! its bad line gives exactly the history of the same stream without that line.

use std::collections::HashMap;

use forge_store::{Forge, ReplayOptions, ReplayReport, TenantId};
use serde_json::Value;

const USER: &str = r#"{"type":"user","text":"go"}"#;
const START: &str = r#"{"type":"start-step"}"#;
const FINISH_STEP: &str =
    r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":3}}"#;
const FINISH: &str = r#"{"type":"finish","finishReason":"stop"}"#;
const CALL: &str = r#"{"type":"tool-call","toolCallId":"c1","toolName":"read","input":{}}"#;
const RESULT: &str = r#"{"type":"tool-result","toolCallId":"c1","output":"ok"}"#;
const INPUT_START: &str = r#"{"type":"tool-input-start","id":"c1","toolName":"read"}"#;
const TEXT_START: &str = r#"{"type":"text-start","id":"t"}"#;
const TEXT_DELTA: &str = r#"{"type":"text-delta","id":"t","text":"hello"}"#;
const TEXT_END: &str = r#"{"type":"text-end","id":"t"}"#;

/// A stream and the index of its bad line.
struct Case {
    name: &'static str,
    lines: Vec<&'static str>,
    bad: usize,
}

fn case(name: &'static str, lines: &[&'static str], bad: usize) -> Case {
    Case {
        name,
        lines: lines.to_vec(),
        bad,
    }
}

/// Every way a line can be bad input: each of `tests/order.rs` (the Processor's
/// `InvalidInput`), the replay's own checks, and lines that do not parse.
fn cases() -> Vec<Case> {
    let delta_b = r#"{"type":"text-delta","id":"b","text":"x"}"#;
    vec![
        case(
            "two start-steps in a row",
            &[USER, START, START, FINISH_STEP, FINISH],
            2,
        ),
        case(
            "a finish-step without its start-step",
            &[USER, START, FINISH_STEP, FINISH_STEP, FINISH],
            3,
        ),
        case(
            "a call id used again while its call runs (tool-call)",
            &[USER, START, CALL, CALL, RESULT, FINISH_STEP, FINISH],
            3,
        ),
        case(
            "a call id used again while its call runs (tool-input-start)",
            &[USER, START, CALL, INPUT_START, RESULT, FINISH_STEP, FINISH],
            3,
        ),
        case(
            "a second finish",
            &[USER, START, FINISH_STEP, FINISH, FINISH],
            4,
        ),
        case(
            "a result without a call",
            &[USER, START, RESULT, FINISH_STEP, FINISH],
            2,
        ),
        case(
            "a tool error without a call",
            &[
                USER,
                START,
                r#"{"type":"tool-error","toolCallId":"c9","error":"x"}"#,
                FINISH_STEP,
                FINISH,
            ],
            2,
        ),
        case(
            "a preliminary result without a call",
            &[
                USER,
                START,
                r#"{"type":"tool-result","toolCallId":"c9","output":"1","preliminary":true}"#,
                FINISH_STEP,
                FINISH,
            ],
            2,
        ),
        case(
            "a delta without a start",
            &[USER, START, delta_b, FINISH_STEP, FINISH],
            2,
        ),
        case(
            "a reasoning delta for a text block",
            &[
                USER,
                START,
                TEXT_START,
                r#"{"type":"reasoning-delta","id":"t","text":"x"}"#,
                TEXT_DELTA,
                TEXT_END,
                FINISH_STEP,
                FINISH,
            ],
            3,
        ),
        case(
            "a text-end for a block never started",
            &[
                USER,
                START,
                r#"{"type":"text-end","id":"b"}"#,
                FINISH_STEP,
                FINISH,
            ],
            2,
        ),
        // No answer is open: the event would open one, and opening one stores it.
        case(
            "a delta after the answer finished",
            &[USER, START, FINISH_STEP, FINISH, delta_b],
            4,
        ),
        case(
            "a finish-step after the answer finished",
            &[USER, FINISH, FINISH_STEP, USER, FINISH],
            2,
        ),
        case(
            "a user line while the answer is open",
            &[
                USER,
                START,
                TEXT_START,
                USER,
                TEXT_DELTA,
                TEXT_END,
                FINISH_STEP,
                FINISH,
            ],
            3,
        ),
        case(
            "an assistant line while the answer is open",
            &[USER, START, r#"{"type":"assistant"}"#, FINISH_STEP, FINISH],
            2,
        ),
        case(
            "a stream event before any user message",
            &[TEXT_START, USER, START, FINISH_STEP, FINISH],
            0,
        ),
        case(
            "an assistant line before any user message",
            &[
                r#"{"type":"assistant","ref":"a"}"#,
                USER,
                r#"{"type":"assistant","ref":"a"}"#,
                FINISH,
            ],
            0,
        ),
        case(
            "a session line after the first line",
            &[USER, r#"{"type":"session","title":"late"}"#, FINISH],
            1,
        ),
        case(
            "a session line with a bad id",
            &[r#"{"type":"session","id":"ses\nx"}"#, USER, FINISH],
            0,
        ),
        case(
            "a user line with a part carrying an id",
            &[
                USER,
                FINISH,
                r#"{"type":"user","ref":"q","parts":[{"id":"prt_1","type":"agent","name":"a"}]}"#,
                r#"{"type":"user","ref":"q","text":"again"}"#,
                FINISH,
            ],
            2,
        ),
        case(
            "a ref used twice",
            &[
                r#"{"type":"user","ref":"q","text":"one"}"#,
                FINISH,
                r#"{"type":"user","ref":"q","text":"two"}"#,
                USER,
                FINISH,
            ],
            2,
        ),
        case(
            "a compaction naming no earlier line",
            &[
                USER,
                FINISH,
                r#"{"type":"user","compaction":{"auto":true,"tail_start_id":"@nope"}}"#,
                USER,
                FINISH,
            ],
            2,
        ),
        // An error inside a step waits for the step's finish-step and finish; a bad
        // line must not close that answer early.
        case(
            "a bad user line after an error inside a step",
            &[
                USER,
                START,
                r#"{"type":"error","error":"overloaded"}"#,
                r#"{"type":"user"}"#,
                FINISH_STEP,
                FINISH,
            ],
            3,
        ),
        case(
            "malformed JSON",
            &[USER, START, r#"{"type":"text-"#, FINISH_STEP, FINISH],
            2,
        ),
        case("not an object", &[USER, "[1,2]", FINISH], 1),
        case("no type", &[USER, r#"{"id":"t"}"#, FINISH], 1),
        case(
            "a known type with a missing field",
            &[
                USER,
                START,
                TEXT_START,
                r#"{"type":"text-delta","id":"t"}"#,
                TEXT_END,
                FINISH,
            ],
            3,
        ),
        case(
            "a known type with a field of the wrong type",
            &[
                USER,
                START,
                r#"{"type":"finish-step","usage":{"inputTokens":"3"}}"#,
                FINISH,
            ],
            2,
        ),
        case(
            "a bad event time",
            &[USER, r#"{"type":"finish","t":1.5}"#, FINISH],
            1,
        ),
        case(
            "an unknown field on a user line",
            &[USER, FINISH, r#"{"type":"user","txt":"x"}"#],
            2,
        ),
        // The input ends with the answer open either way.
        case(
            "a bad line before an early end",
            &[USER, START, TEXT_START, TEXT_DELTA, RESULT],
            4,
        ),
    ]
}

async fn replay(text: &str, opts: ReplayOptions) -> (Forge, ReplayReport) {
    let forge = forge_store::open("memory://").await.expect("memory store");
    let report = forge
        .replay_str(&TenantId::default(), text, opts)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (forge, report)
}

/// The session's history as JSON, ids numbered by first appearance and times zeroed.
async fn history(forge: &Forge, report: &ReplayReport) -> Value {
    let sid = report.session.clone().expect("a session");
    let all = forge
        .history_all(&TenantId::default(), &sid)
        .await
        .expect("history");
    let mut v = serde_json::to_value(all).expect("JSON");
    normalize(&mut v, &mut HashMap::new(), false);
    v
}

fn normalize(v: &mut Value, ids: &mut HashMap<String, usize>, in_time: bool) {
    match v {
        Value::Object(m) => {
            for (k, field) in m.iter_mut() {
                let id_field = matches!(k.as_str(), "id" | "sessionID" | "messageID" | "parentID");
                match field {
                    Value::String(s) if id_field => {
                        let n = ids.len();
                        *s = format!("#{}", ids.entry(s.clone()).or_insert(n));
                    }
                    Value::Number(_) if in_time => *field = Value::from(0),
                    other => normalize(other, ids, k == "time"),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| normalize(x, ids, false)),
        _ => {}
    }
}

#[tokio::test]
async fn a_skipped_line_stores_nothing() {
    for c in cases() {
        let with = c.lines.join("\n");
        let without: Vec<&str> = c
            .lines
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != c.bad)
            .map(|(_, l)| *l)
            .collect();
        let without = without.join("\n");
        // The bad line is bad: a replay that is not lenient stops at it.
        let forge = forge_store::open("memory://").await.expect("memory store");
        let err = forge
            .replay_str(&TenantId::default(), &with, ReplayOptions::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("{}: replays without --lenient", c.name));
        let line = format!("line {}", c.bad + 1);
        assert!(err.is_input(), "{}: {err}", c.name);
        assert!(err.to_string().starts_with(&line), "{}: {err}", c.name);

        let (lenient, report) = replay(&with, ReplayOptions::default().lenient(true)).await;
        let (plain, clean) = replay(&without, ReplayOptions::default()).await;
        assert_eq!(report.skipped.len(), 1, "{}: {:?}", c.name, report.skipped);
        assert_eq!(report.skipped[0].line, c.bad + 1, "{}", c.name);
        assert!(!report.skipped[0].message.is_empty());
        assert_eq!(
            without_ids(&err.to_string()),
            without_ids(&format!("{line}: {}", report.skipped[0].message)),
            "{}: the skipped line reports the error",
            c.name
        );
        assert_eq!(
            history(&lenient, &report).await,
            history(&plain, &clean).await,
            "{}: the history with the skipped line differs from the history without it",
            c.name
        );
        assert_eq!(
            (
                report.user_messages,
                report.assistant_messages,
                report.created
            ),
            (clean.user_messages, clean.assistant_messages, clean.created),
            "{}",
            c.name
        );
        assert_eq!(
            forge_sessions(&lenient).await,
            1,
            "{}: one session, none made by the skipped line",
            c.name
        );
    }
}

/// `text` with generated message ids (`msg_…`) replaced by `msg_`.
fn without_ids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("msg_") {
        out.push_str(&rest[..i + 4]);
        rest = rest[i + 4..].trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    }
    out.push_str(rest);
    out
}

async fn forge_sessions(forge: &Forge) -> usize {
    forge
        .sessions(&TenantId::default())
        .await
        .expect("sessions")
        .len()
}

#[tokio::test]
async fn every_skipped_line_is_reported_and_the_replay_goes_on() {
    let text = [
        USER,
        "{oops",
        START,
        START,
        TEXT_START,
        r#"{"type":"text-delta","id":"b","text":"x"}"#,
        TEXT_DELTA,
        TEXT_END,
        FINISH_STEP,
        FINISH,
        FINISH,
    ]
    .join("\n");
    let (forge, report) = replay(&text, ReplayOptions::default().lenient(true)).await;
    let lines: Vec<usize> = report.skipped.iter().map(|s| s.line).collect();
    assert_eq!(lines, [2, 4, 6, 11]);
    assert!(
        report.skipped[0].message.starts_with("malformed JSON"),
        "{:?}",
        report.skipped
    );
    assert!(report.skipped[1]
        .message
        .starts_with("start-step does not fit"));
    assert!(report.skipped[2].message.contains("which is not open"));
    assert!(report.skipped[3].message.contains("a second finish"));
    let history = history(&forge, &report).await;
    assert_eq!(history[1]["parts"][1]["text"], "hello");
    assert!(history[1]["info"]["error"].is_null(), "{history}");
}

#[tokio::test]
async fn strict_and_lenient_together_skip_bad_lines_and_stop_at_unknown_types() {
    let both = ReplayOptions::default().lenient(true).strict(true);
    let text = [USER, START, START, FINISH_STEP, FINISH].join("\n");
    let (_, report) = replay(&text, both.clone()).await;
    assert_eq!(report.skipped.len(), 1);

    let forge = forge_store::open("memory://").await.expect("memory store");
    let tenant = TenantId::default();
    let text = [
        USER,
        START,
        "{oops",
        r#"{"type":"heartbeat"}"#,
        FINISH_STEP,
        FINISH,
    ]
    .join("\n");
    let err = forge
        .replay_str(&tenant, &text, both.clone())
        .await
        .expect_err("strict");
    assert!(
        err.to_string()
            .starts_with("line 4: unknown event type \"heartbeat\""),
        "{err}"
    );
    assert_eq!(err.report.skipped.len(), 1, "line 3 was skipped before");

    let text = [USER, START, TEXT_START].join("\n");
    let err = forge
        .replay_str(&tenant, &text, both)
        .await
        .expect_err("strict");
    assert!(err.to_string().contains("the stream ended early"), "{err}");
}

#[tokio::test]
async fn a_store_failure_is_never_skipped() {
    // A Postgres-free way to make the store fail for real: another writer takes the
    // session over and deletes it behind the replay's back, so the replay's next write
    // is refused.
    let forge = forge_store::open("memory://").await.expect("memory store");
    let tenant = TenantId::default();
    let lines = vec![
        forge_store::Line::from(forge_store::UserLine::text("go")),
        forge_store::Line::from(forge_store::StreamEvent::from_json(TEXT_START).expect("event")),
    ];
    let store = forge.store().clone();
    let events = futures::StreamExt::then(futures::stream::iter(lines), move |line| {
        let store = store.clone();
        async move {
            if matches!(line, forge_store::Line::Stream(_)) {
                let tenant = TenantId::default();
                for s in store.sessions(&tenant).await.expect("sessions") {
                    let took = forge_store::ClaimRequest::new("other", forge_store::id::now_ms())
                        .mode(forge_store::ClaimMode::TakeOver);
                    let claim = store
                        .claim(&tenant, &s.info.id, &took)
                        .await
                        .expect("take over");
                    let env = forge_store::Envelope {
                        tenant: tenant.clone(),
                        session_id: s.info.id.clone(),
                        seq: s.seq + 1,
                        epoch: Some(claim.epoch),
                        event: forge_store::SyncEvent::SessionDeleted {
                            session_id: s.info.id.clone(),
                        },
                    };
                    store.apply(&[env]).await.expect("delete");
                }
            }
            line
        }
    });
    let replay = forge.replay_stream(&tenant, events, ReplayOptions::default().lenient(true));
    let err = Box::pin(replay)
        .await
        .expect_err("the store refused the answer");
    assert!(!err.is_input(), "{err}");
    assert!(err.report.skipped.is_empty());
}
