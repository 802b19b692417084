//! Streams out of order: each is an input error naming the event, and nothing of the
//! bad event is stored.

mod common;

use common::{answer, memory, replay_events, session_of, user_turn};
use forge_store::model::PartBody;

/// Replays `events` after a user message; returns the error text and the kinds of the
/// assistant's stored parts.
async fn refused(events: &[&str]) -> (String, Vec<&'static str>) {
    let (forge, tenant) = memory().await;
    let err = replay_events(&forge, &tenant, user_turn("go", events))
        .await
        .unwrap_err();
    assert!(err.is_input(), "{err}");
    let kinds = answer(&forge, &tenant, &session_of(&err.report))
        .await
        .parts
        .iter()
        .map(|p| match &p.body {
            PartBody::StepStart(_) => "step-start",
            PartBody::StepFinish(_) => "step-finish",
            PartBody::Tool(_) => "tool",
            PartBody::Text(_) => "text",
            _ => "other",
        })
        .collect();
    (err.to_string(), kinds)
}

const CALL: &str = r#"{"type":"tool-call","toolCallId":"c1","toolName":"read","input":{}}"#;
const RESULT: &str = r#"{"type":"tool-result","toolCallId":"c1","output":"ok"}"#;
const START: &str = r#"{"type":"start-step"}"#;
const FINISH_STEP: &str = r#"{"type":"finish-step","finishReason":"stop"}"#;

#[tokio::test]
async fn two_start_steps_in_a_row() {
    let (err, kinds) = refused(&[START, START]).await;
    assert!(err.starts_with("event 3: start-step does not fit"), "{err}");
    assert_eq!(kinds, ["step-start"]);
}

#[tokio::test]
async fn a_finish_step_without_its_start_step() {
    let (err, kinds) = refused(&[START, FINISH_STEP, FINISH_STEP]).await;
    assert!(err.contains("event 4: finish-step does not fit"), "{err}");
    assert!(err.contains("without its start-step"), "{err}");
    assert_eq!(kinds, ["step-start", "step-finish"]);
}

/// A call id is refused only while a call with it is open in the message: again after
/// its call ended, it is a new call (providers number calls per step).
#[tokio::test]
async fn a_call_id_is_refused_while_its_call_is_open() {
    let (err, kinds) = refused(&[START, CALL, CALL]).await;
    assert!(err.contains("event 4: tool-call does not fit"), "{err}");
    assert!(err.contains("already running"), "{err}");
    assert_eq!(kinds, ["step-start", "tool"]);
    let input_start = r#"{"type":"tool-input-start","id":"c1","toolName":"read"}"#;
    let (err, kinds) = refused(&[START, input_start, input_start]).await;
    assert!(
        err.contains("event 4: tool-input-start does not fit"),
        "{err}"
    );
    assert!(err.contains("already open"), "{err}");
    assert_eq!(kinds, ["step-start", "tool"]);
    // Ended, the id is free again: a second call, a second part; and a result that
    // comes after both ended is refused.
    let (err, kinds) = refused(&[START, CALL, RESULT, input_start, CALL, RESULT, RESULT]).await;
    assert!(err.contains("event 8: tool-result does not fit"), "{err}");
    assert!(err.contains("has already ended"), "{err}");
    assert_eq!(kinds, ["step-start", "tool", "tool"]);
}

#[tokio::test]
async fn a_second_finish_a_result_without_a_call_and_a_delta_without_a_start() {
    let finish = r#"{"type":"finish","finishReason":"stop"}"#;
    let (err, _) = refused(&[finish, finish]).await;
    assert!(err.contains("event 3: finish does not fit"), "{err}");
    let (err, kinds) = refused(&[START, RESULT]).await;
    assert!(err.contains("event 3: tool-result does not fit"), "{err}");
    assert_eq!(kinds, ["step-start"]);
    let (err, kinds) = refused(&[START, r#"{"type":"text-delta","id":"t","text":"x"}"#]).await;
    assert!(err.contains("event 3: text-delta does not fit"), "{err}");
    assert_eq!(kinds, ["step-start"]);
}
