//! Tool approval (AI SDK 6+): a call waiting for the user's approval is not work a crash
//! left open (docs/design.md §4). finalize and recover leave it waiting; a later
//! `tool-result` completes it even from another message; a denial closes it as an
//! error that says so.

mod common;

use common::*;
use forge_core::model::{Part, PartBody, ToolPart, ToolState};
use forge_core::{Error, Outcome, Processor};

const CALL: &[&str] = &[
    r#"{"type":"start-step"}"#,
    r#"{"type":"tool-input-start","id":"c1","toolName":"shell"}"#,
    r#"{"type":"tool-call","toolCallId":"c1","toolName":"shell","input":{"command":"rm -rf build"}}"#,
    r#"{"type":"tool-approval-request","approvalId":"ap-1","toolCall":{"type":"tool-call","toolCallId":"c1","toolName":"shell","input":{}}}"#,
    r#"{"type":"finish-step","finishReason":"tool-calls","usage":{"inputTokens":3,"outputTokens":2}}"#,
];

fn tool<'a>(parts: &'a [Part], call: &str) -> (&'a Part, &'a ToolPart) {
    parts
        .iter()
        .find_map(|p| match &p.body {
            PartBody::Tool(t) if t.call_id == call => Some((p, t)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("call {call} is stored"))
}

fn approval_status(t: &ToolPart) -> Option<String> {
    let meta = match &t.state {
        ToolState::Running(r) => r.metadata.as_ref(),
        ToolState::Completed(c) => Some(&c.metadata),
        ToolState::Error(e) => e.metadata.as_ref(),
        ToolState::Pending(_) => None,
    }?;
    meta["approval"]["status"].as_str().map(str::to_owned)
}

/// A first answer that asks for approval of call `c1` and finishes.
async fn asked(h: &Harness) -> forge_core::Message {
    let mut p = h.answer("delete the build directory").await;
    feed(&mut p, CALL).await;
    feed(
        &mut p,
        &[r#"{"type":"finish","finishReason":"tool-calls"}"#],
    )
    .await;
    p.message().clone()
}

#[tokio::test]
async fn finalize_and_recover_leave_a_call_waiting_for_approval_as_it_is() {
    let h = Harness::new(true).await;
    let first = asked(&h).await;
    let parts = h.parts().await;
    let (part, t) = tool(&parts, "c1");
    assert!(t.awaits_approval(), "the call waits: {:?}", t.state);
    assert_eq!(approval_status(t).as_deref(), Some("requested"));
    assert!(!part.is_open(), "a waiting call is not open work");
    let msgs = h.messages().await;
    let answer = msgs.iter().find(|m| m.info.id == first.id).unwrap();
    assert!(!answer.info.is_open(), "the answer itself is closed");

    let open = h.engine.store.open_items(&h.tenant, None).await.unwrap();
    assert!(open.is_empty(), "nothing open: {open:?}");
    let report = h.engine.recover(&h.tenant, None).await.unwrap();
    assert!(report.is_empty(), "recover closes nothing: {report:?}");
    let after = h.parts().await;
    assert_eq!(
        tool(&after, "c1").0,
        part,
        "recover left the call unchanged"
    );
}

#[tokio::test]
async fn a_crash_after_the_request_closes_the_answer_but_not_the_waiting_call() {
    let h = Harness::new(false).await;
    let mut p = h.answer("delete the build directory").await;
    feed(&mut p, CALL).await;
    feed(&mut p, &[r#"{"type":"text-start","id":"t"}"#]).await;
    drop(p); // the process dies before finish
    let report = h.engine.recover(&h.tenant, None).await.unwrap();
    assert_eq!(report.messages_closed, 1, "{report:?}");
    let parts = h.parts().await;
    let (_, t) = tool(&parts, "c1");
    assert!(t.awaits_approval(), "still waiting: {:?}", t.state);
    assert!(parts.iter().all(|p| !p.is_open()), "the text was closed");
}

/// A harness whose first answer asked for approval of call `c1` (returned), and a
/// second answer, to user message `text`, fed `lines`.
async fn answered(text: &str, lines: &[&str]) -> (Harness, forge_core::Message, Processor) {
    let h = Harness::new(false).await;
    let first = asked(&h).await;
    let mut p = h.answer(text).await;
    feed(&mut p, lines).await;
    (h, first, p)
}

#[tokio::test]
async fn a_later_result_completes_the_call_in_the_message_that_made_it() {
    let (h, first, mut p) = answered(
        "approved",
        &[r#"{"type":"tool-result","toolCallId":"c1","toolName":"shell","output":"done"}"#],
    )
    .await;
    // The call is finished: a second result for it is an error, and stores nothing.
    let before = h.parts().await;
    let again = p
        .handle(ev(
            r#"{"type":"tool-result","toolCallId":"c1","toolName":"shell","output":"twice"}"#,
        ))
        .await;
    assert!(matches!(again, Err(Error::InvalidInput(_))), "{again:?}");
    assert_eq!(h.parts().await, before);
    p.finalize(Outcome::Finished).await.unwrap();

    let parts = h.parts().await;
    let (part, t) = tool(&parts, "c1");
    assert_eq!(part.message_id, first.id, "the part stays in its message");
    let ToolState::Completed(c) = &t.state else {
        panic!("completed: {:?}", t.state)
    };
    assert_eq!(c.output, "done");
    assert_eq!(c.input["command"], "rm -rf build", "the input is kept");
    assert_eq!(approval_status(t).as_deref(), Some("approved"));
}

#[tokio::test]
async fn a_denial_closes_the_call_as_an_error_that_says_so() {
    let (h, _, mut p) = answered(
        "no",
        &[
            r#"{"type":"tool-approval-response","approvalId":"ap-1","approved":false,"reason":"not now","toolCall":{"toolCallId":"c1","toolName":"shell"}}"#,
            r#"{"type":"tool-output-denied","toolCallId":"c1","toolName":"shell"}"#,
        ],
    )
    .await;
    p.finalize(Outcome::Finished).await.unwrap();
    let parts = h.parts().await;
    let (_, t) = tool(&parts, "c1");
    let ToolState::Error(e) = &t.state else {
        panic!("error: {:?}", t.state)
    };
    assert_eq!(e.error, "The user denied this tool call: not now");
    let meta = e.metadata.as_ref().unwrap();
    assert_eq!(meta["denied"], true);
    assert_eq!(meta["approval"]["id"], "ap-1");
    assert!(
        meta.get("interrupted").is_none(),
        "a denial is not an interruption"
    );
}

#[tokio::test]
async fn an_approved_call_that_never_ran_is_closed_as_interrupted() {
    let (h, _, mut p) = answered(
        "yes",
        &[r#"{"type":"tool-approval-response","approvalId":"ap-1","approved":true,"toolCall":{"toolCallId":"c1"}}"#],
    )
    .await;
    let parts = h.parts().await;
    let (part, t) = tool(&parts, "c1");
    assert_eq!(approval_status(t).as_deref(), Some("approved"));
    assert!(part.is_open(), "approved, the call is work in progress");
    p.finalize(Outcome::Aborted).await.unwrap();
    let parts = h.parts().await;
    let (_, t) = tool(&parts, "c1");
    let ToolState::Error(e) = &t.state else {
        panic!("error: {:?}", t.state)
    };
    assert_eq!(e.error, forge_core::close::TOOL_ABORTED);
}

#[tokio::test]
async fn approval_events_that_do_not_fit_are_errors_that_store_nothing() {
    let h = Harness::new(false).await;
    let mut p = h.turn(&CALL[..1]).await;
    let before = h.parts().await;
    for (line, says) in [
        (
            r#"{"type":"tool-approval-request","approvalId":"a","toolCall":{"toolCallId":"nope"}}"#,
            "not running",
        ),
        (
            r#"{"type":"tool-approval-response","approvalId":"a","approved":true}"#,
            "no call waiting",
        ),
        (
            r#"{"type":"tool-output-denied","toolCallId":"nope"}"#,
            "unknown",
        ),
        (
            r#"{"type":"tool-result","toolCallId":"nope","output":"x"}"#,
            "unknown",
        ),
    ] {
        let err = p.handle(ev(line)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{line}: {err:?}");
        assert!(err.to_string().contains(says), "{line}: {err}");
        assert_eq!(h.parts().await, before, "{line} stored something");
    }
}
