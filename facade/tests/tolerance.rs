//! What a replay takes that is not wrong: events of types this version does not know,
//! and a stream that simply ends; and what `strict` makes of them.

mod common;

use common::{answer, answer_error, event, memory, replay_events, session_of};
use forge_store::model::{ErrorName, PartBody};
use forge_store::replay::ENDED_EARLY;
use forge_store::{Forge, Line, ReplayError, ReplayOptions, TenantId, UserLine};

const TURN_WITH_UNKNOWN_TYPES: &str = r#"{"type":"user","text":"go"}
{"type":"start-step"}
{"type":"tool-call","toolCallId":"c1","toolName":"shell","input":{}}
{"type":"tool-input-available","approvalId":"a1","toolCall":{"toolCallId":"c1"}}
{"type":"data-progress","kind":"x","t":-1}
{"type":"tool-result","toolCallId":"c1","output":"ok"}
{"type":"tool-input-available","approvalId":"a2"}
{"type":"heartbeat"}
{"type":"finish-step","finishReason":"stop"}
{"type":"finish"}"#;

#[tokio::test]
async fn unknown_types_are_counted_per_type_and_skipped() {
    let (forge, tenant) = memory().await;
    // `custom` carries a bad `t`: the event time is checked on every line.
    let text = TURN_WITH_UNKNOWN_TYPES.replace(r#","t":-1"#, "");
    let report = forge
        .replay_str(&tenant, &text, ReplayOptions::default())
        .await
        .unwrap();
    let seen: Vec<(&str, u64, usize)> = report
        .unknown_events
        .iter()
        .map(|u| (u.kind.as_str(), u.count, u.first_line))
        .collect();
    assert_eq!(
        seen,
        [
            ("tool-input-available", 2, 4),
            ("data-progress", 1, 5),
            ("heartbeat", 1, 8)
        ]
    );
    assert_eq!(report.unknown_count(), 4);
    assert_eq!(
        report.unknown_summary().as_deref(),
        Some(
            "4 events of types this version does not know were skipped: \
             \"tool-input-available\" ×2 (first at line 4), \"data-progress\" ×1 (first at line 5), \
             \"heartbeat\" ×1 (first at line 8)"
        )
    );
    let answer = answer(&forge, &tenant, &session_of(&report)).await;
    assert!(answer.info.as_assistant().unwrap().error.is_none());
    assert!(answer
        .parts
        .iter()
        .any(|p| matches!(p.body, PartBody::Tool(_))));

    let err = forge
        .replay_str(&tenant, TURN_WITH_UNKNOWN_TYPES, ReplayOptions::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("line 5: `t` (event time in ms)"),
        "{err}"
    );
}

/// Replays `text` strictly: it must fail with an input error that starts with `starts`.
async fn refused_strictly(
    forge: &Forge,
    tenant: &TenantId,
    text: &str,
    starts: &str,
) -> ReplayError {
    let err = forge
        .replay_str(tenant, text, ReplayOptions::default().strict(true))
        .await
        .unwrap_err();
    assert!(err.is_input());
    assert!(err.to_string().starts_with(starts), "{err}");
    err
}

#[tokio::test]
async fn strict_makes_an_unknown_type_an_error_naming_the_line() {
    let (forge, tenant) = memory().await;
    let text = TURN_WITH_UNKNOWN_TYPES.replace(r#","t":-1"#, "");
    let err = refused_strictly(
        &forge,
        &tenant,
        &text,
        "line 4: unknown event type \"tool-input-available\"",
    )
    .await;
    assert!(err.report.unknown_events.is_empty());
    // The answer is closed with the error, as for any bad line.
    let error = answer_error(&forge, &tenant, &session_of(&err.report)).await;
    assert!(
        error
            .data
            .message
            .unwrap()
            .contains("line 4: unknown event type"),
        "the stored error names the line"
    );
}

#[tokio::test]
async fn a_stream_of_lines_counts_unknown_events_by_event_number() {
    let (forge, tenant) = memory().await;
    let lines = vec![
        Line::from(UserLine::text("go")),
        Line::Unknown {
            kind: "heartbeat".into(),
        },
        event(r#"{"type":"finish"}"#),
        Line::Unknown {
            kind: "heartbeat".into(),
        },
    ];
    let report = replay_events(&forge, &tenant, lines).await.unwrap();
    assert_eq!(report.unknown_events.len(), 1);
    assert_eq!(
        (
            report.unknown_events[0].count,
            report.unknown_events[0].first_line
        ),
        (2, 2)
    );
}

#[tokio::test]
async fn a_summary_of_unknown_types_is_one_short_line() {
    let (forge, tenant) = memory().await;
    let long = format!("a\\n{}", "k".repeat(10 * 1024));
    let mut lines = vec![r#"{"type":"user","text":"go"}"#.to_owned()];
    lines.push(format!(r#"{{"type":"{long}"}}"#));
    lines.extend((0..7).map(|i| format!(r#"{{"type":"kind-{i}"}}"#)));
    lines.push(r#"{"type":"finish"}"#.to_owned());
    let text = lines.join("\n");
    let report = forge
        .replay_str(&tenant, &text, ReplayOptions::default())
        .await
        .unwrap();
    assert_eq!(report.unknown_events.len(), 8);
    assert_eq!(
        report.unknown_events[0].kind.len(),
        10 * 1024 + 2,
        "kept whole"
    );
    let summary = report.unknown_summary().unwrap();
    assert!(summary.len() < 400, "{} bytes: {summary}", summary.len());
    assert!(!summary.contains('\n'), "{summary}");
    assert!(summary.contains(r#""a\nkkk"#), "{summary}");
    assert!(summary.ends_with("and 3 more types"), "{summary}");
}

const THROWN: &str = r#"{"type":"user","text":"Tell me a story."}
{"type":"start"}
{"type":"start-step"}
{"type":"text-start","id":"txt-0"}
{"type":"text-delta","id":"txt-0","text":"Once upon"}
# the producer's stream threw here"#;

#[tokio::test]
async fn an_input_that_ends_with_its_answer_open_is_closed_as_ended_early() {
    let (forge, tenant) = memory().await;
    let report = forge
        .replay_str(&tenant, THROWN, ReplayOptions::default())
        .await
        .unwrap();
    let sid = session_of(&report);
    let answer = answer(&forge, &tenant, &sid).await;
    assert_eq!(report.ended_early.as_ref(), Some(&answer.info.id));
    let info = answer.info.as_assistant().unwrap();
    let error = info.error.clone().expect("the ended-early error");
    assert_eq!(error.name, ErrorName::Unknown);
    assert_eq!(error.data.message.as_deref(), Some(ENDED_EARLY));
    assert!(info.time.completed.is_some());
    let text = answer.parts.iter().find_map(|p| match &p.body {
        PartBody::Text(t) => Some(t),
        _ => None,
    });
    let text = text.expect("the text so far");
    assert_eq!(text.text, "Once upon");
    let open = forge.store().open_items(&tenant, Some(&sid)).await.unwrap();
    assert!(open.is_empty(), "nothing is left open: {open:?}");

    // The same from a stream of events.
    let lines: Vec<Line> = THROWN
        .lines()
        .filter_map(|l| forge_store::replay::parse_line(l).unwrap())
        .map(|timed| timed.item)
        .collect();
    let report = replay_events(&forge, &tenant, lines).await.unwrap();
    assert!(report.ended_early.is_some());
}

#[tokio::test]
async fn strict_makes_an_early_end_an_error() {
    let (forge, tenant) = memory().await;
    let err = refused_strictly(
        &forge,
        &tenant,
        THROWN,
        "line 7 (end of file): the stream ended early: assistant message",
    )
    .await;
    assert!(err.report.ended_early.is_none());
    let error = answer_error(&forge, &tenant, &session_of(&err.report)).await;
    assert!(error
        .data
        .message
        .unwrap()
        .starts_with("replay stopped: line 7"));
}

#[tokio::test]
async fn an_answer_that_failed_inside_a_step_did_not_end_early() {
    let (forge, tenant) = memory().await;
    let text = r#"{"type":"user","text":"go"}
{"type":"start-step"}
{"type":"error","error":"overloaded"}"#;
    let report = forge
        .replay_str(&tenant, text, ReplayOptions::default().strict(true))
        .await
        .unwrap();
    assert!(report.ended_early.is_none());
    let error = answer_error(&forge, &tenant, &session_of(&report)).await;
    assert_eq!(error.data.message.as_deref(), Some("overloaded"));
}
