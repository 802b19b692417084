//! The Processor's write rules (docs/design.md §3), proven by counting store writes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use forge_core::model::{ErrorName, PartBody, ToolState};
use forge_core::{BusEvent, Error, Event, LocalBus, MemoryStore, Store, SyncEvent};

#[tokio::test]
async fn deltas_never_reach_the_store_and_a_text_part_is_written_twice() {
    let h = Harness::new(false).await;
    let (mut sub, mut p) = h.watched_turn(&[]).await;
    let before = h.counting.totals();
    p.handle(ev(r#"{"type":"text-start","id":"t"}"#))
        .await
        .unwrap();
    let after_start = h.counting.totals();
    assert_eq!(
        after_start.commits - before.commits,
        1,
        "text-start persists the empty part"
    );
    for i in 0..200 {
        p.handle(ev(&format!(
            r#"{{"type":"text-delta","id":"t","text":"w{i} "}}"#
        )))
        .await
        .unwrap();
    }
    assert_eq!(
        h.counting.totals(),
        after_start,
        "200 deltas caused store writes"
    );
    p.handle(ev(r#"{"type":"text-end","id":"t"}"#))
        .await
        .unwrap();
    let parts = h.parts().await;
    let text = parts
        .iter()
        .find(|part| part.kind() == "text" && part.message_id == p.message().id)
        .unwrap();
    assert_eq!(h.counting.part_writes(&text.id), 2, "start and end only");
    let expected = (0..200).fold(String::new(), |mut s, i| {
        use std::fmt::Write;
        let _ = write!(s, "w{i} ");
        s
    });
    assert_eq!(text_of(text).unwrap(), expected, "stored as streamed");
    assert_eq!(p.stats().deltas, 200);

    let events = drain(&mut sub).await;
    let deltas = events
        .iter()
        .filter(|e| matches!(e.event, Event::PartDelta(_)))
        .count();
    assert_eq!(deltas, 200, "every delta is published");
}

#[tokio::test]
async fn text_end_keeps_the_text_as_streamed_and_runs_the_hook_on_text_only() {
    let h = Harness::new(false).await;
    let user = h.user("hi").await;
    let m =
        forge_core::processor::assistant_message(h.session.clone(), user.id.clone(), "p", "m", 1);
    let mut opts = options();
    opts.text_hook = Some(Arc::new(|s: &mut String| s.push_str(" [post]")));
    let mut p = h.engine.processor(h.scope.clone(), m, opts).await.unwrap();
    feed(
        &mut p,
        &[
            r#"{"type":"reasoning-start","id":"r"}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"think \n\t "}"#,
            r#"{"type":"reasoning-end","id":"r"}"#,
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"  answer  \n"}"#,
            r#"{"type":"text-end","id":"t"}"#,
        ],
    )
    .await;
    let parts = h.parts().await;
    let reasoning = parts.iter().find(|p| p.kind() == "reasoning").unwrap();
    // Trailing whitespace is kept: a provider's signature covers the exact text.
    assert_eq!(text_of(reasoning), Some("think \n\t "));
    let text = parts.iter().rfind(|p| p.kind() == "text").unwrap();
    assert_eq!(text_of(text), Some("  answer  \n [post]"));
    for part in [reasoning, text] {
        assert!(!part.is_open(), "time.end set at the boundary: {part:?}");
    }
}

#[tokio::test]
async fn a_tool_is_persisted_at_each_transition_and_input_deltas_are_dropped() {
    let h = Harness::new(false).await;
    let (mut sub, mut p) = h.watched_turn(&[]).await;
    let c0 = h.counting.totals();
    feed(
        &mut p,
        &[
            r#"{"type":"tool-input-start","id":"c1","toolName":"bash"}"#,
            r#"{"type":"tool-input-delta","id":"c1","delta":"{\"cmd\":"}"#,
            r#"{"type":"tool-input-delta","id":"c1","delta":"\"ls\"}"}"#,
            r#"{"type":"tool-input-end","id":"c1"}"#,
            r#"{"type":"tool-call","toolCallId":"c1","toolName":"bash","input":{"cmd":"ls"}}"#,
            r#"{"type":"tool-result","toolCallId":"c1","toolName":"bash","output":{"output":"a b","title":"ls","metadata":{"exit":0}}}"#,
        ],
    )
    .await;
    assert_eq!(
        h.counting.totals().commits - c0.commits,
        3,
        "pending, running, completed"
    );
    let parts = h.parts().await;
    let tool = parts.iter().find(|p| p.kind() == "tool").unwrap();
    assert_eq!(h.counting.part_writes(&tool.id), 3);
    let PartBody::Tool(t) = &tool.body else {
        unreachable!()
    };
    let ToolState::Completed(c) = &t.state else {
        panic!("not completed: {:?}", t.state)
    };
    assert_eq!(c.output, "a b");
    assert_eq!(c.title, "ls");
    assert_eq!(c.input["cmd"], "ls");
    assert_eq!(c.metadata["exit"], 0);
    assert_eq!(p.stats().ignored, 3);
    let events = drain(&mut sub).await;
    assert!(
        events
            .iter()
            .all(|e| !matches!(e.event, Event::PartDelta(_))),
        "tool input deltas are not broadcast"
    );
}

#[tokio::test]
async fn tool_result_and_error_are_accepted_only_from_running() {
    let h = Harness::new(false).await;
    let mut p = h
        .turn(&[r#"{"type":"tool-input-start","id":"c1","toolName":"bash"}"#])
        .await;
    for (line, needle) in [
        (
            r#"{"type":"tool-result","toolCallId":"c1","output":"x"}"#,
            "not running",
        ),
        (
            r#"{"type":"tool-error","toolCallId":"nope","error":"x"}"#,
            "unknown",
        ),
    ] {
        let err = p.handle(ev(line)).await.unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
    }
    // A tool-call without tool-input-start goes straight to running.
    feed(
        &mut p,
        &[
            r#"{"type":"tool-call","toolCallId":"c2","toolName":"read","input":{"p":1}}"#,
            r#"{"type":"tool-error","toolCallId":"c2","toolName":"read","error":{"message":"denied"}}"#,
        ],
    )
    .await;
    let parts = h.parts().await;
    let c2 = parts
        .iter()
        .find_map(|p| match &p.body {
            PartBody::Tool(t) if t.call_id == "c2" => Some(t),
            _ => None,
        })
        .unwrap();
    assert!(matches!(&c2.state, ToolState::Error(e) if e.error == "denied"));
}

#[tokio::test]
async fn a_step_finish_writes_step_patch_and_message_usage_in_one_batch() {
    let h = Harness::new(false).await;
    let mut p = h.turn(&[r#"{"type":"start-step","request":{}}"#]).await;
    let c0 = h.counting.totals();
    feed(
        &mut p,
        &[r#"{"type":"finish-step","finishReason":"tool-calls","usage":{"inputTokens":100,"outputTokens":20,"reasoningTokens":5,"cachedInputTokens":7},"cost":0.25,"patch":{"hash":"abc","files":["src/a.rs"]}}"#],
    )
    .await;
    let c1 = h.counting.totals();
    assert_eq!(
        c1.commits - c0.commits,
        1,
        "one transaction for the step boundary"
    );
    assert_eq!(c1.rows - c0.rows, 3, "step-finish, patch, message");
    let msgs = h.messages().await;
    let answer = msgs.last().unwrap();
    let kinds: Vec<&str> = answer.parts.iter().map(forge_core::Part::kind).collect();
    assert_eq!(kinds, ["step-start", "step-finish", "patch"]);
    let a = answer.info.as_assistant().unwrap();
    // opencode's split: input without the cached prompt, output without the reasoning.
    assert_eq!(a.tokens.input, 93);
    assert_eq!(a.tokens.cache.read, 7);
    assert_eq!((a.tokens.output, a.tokens.reasoning), (15, 5));
    assert!((a.cost - 0.25).abs() < f64::EPSILON);
    assert_eq!(a.finish.as_deref(), Some("tool-calls"));
}

#[tokio::test]
async fn a_sync_event_is_published_only_after_its_commit() {
    let memory = Arc::new(MemoryStore::new());
    let violations = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let checked = Arc::new(AtomicUsize::new(0));
    // When a part is published, the store already holds it.
    let check = {
        let (store, violations, checked) = (memory.clone(), violations.clone(), checked.clone());
        move |event: &BusEvent| {
            if let Event::Sync(SyncEvent::PartUpdated { part }) = &event.event {
                let stored = futures::executor::block_on(store.message(
                    &event.tenant,
                    &event.session_id,
                    &part.message_id,
                ))
                .unwrap();
                let found = stored.is_some_and(|m| m.parts.iter().any(|p| p == part));
                if !found {
                    violations
                        .lock()
                        .push(format!("{} published before commit", part.id));
                }
                checked.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    };
    let bus = Arc::new(TapBus::new(LocalBus::new(), check));
    let h = Harness::with(memory, bus).await;
    h.turn(&[
        r#"{"type":"start-step"}"#,
        r#"{"type":"text-start","id":"t"}"#,
        r#"{"type":"text-delta","id":"t","text":"x"}"#,
        r#"{"type":"text-end","id":"t"}"#,
        r#"{"type":"tool-call","toolCallId":"c","toolName":"x","input":{}}"#,
        r#"{"type":"tool-result","toolCallId":"c","output":"ok"}"#,
        r#"{"type":"finish-step","finishReason":"stop"}"#,
        r#"{"type":"finish"}"#,
    ])
    .await;
    assert!(checked.load(Ordering::Relaxed) >= 6);
    assert_eq!(*violations.lock(), Vec::<String>::new());
}

#[tokio::test]
async fn no_delta_reaches_a_subscriber_before_its_part_and_seqs_increase() {
    let h = Harness::new(false).await;
    let (mut sub, _p) = h
        .watched_turn(&[
            r#"{"type":"reasoning-start","id":"r"}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"a"}"#,
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"b"}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"c"}"#,
            r#"{"type":"reasoning-end","id":"r"}"#,
            r#"{"type":"text-end","id":"t"}"#,
            r#"{"type":"finish"}"#,
        ])
        .await;
    let events = drain(&mut sub).await;
    let mut known = std::collections::HashSet::new();
    let mut last = 0;
    for e in &events {
        assert!(e.seq > last, "seq {} after {}", e.seq, last);
        last = e.seq;
        match &e.event {
            Event::Sync(SyncEvent::PartUpdated { part }) => {
                known.insert(part.id.clone());
            }
            Event::PartDelta(d) => assert!(known.contains(&d.part_id), "delta before part"),
            _ => {}
        }
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.event, Event::PartDelta(_)))
            .count(),
        3
    );
}

#[tokio::test]
async fn events_that_do_not_fit_the_stream_are_clear_errors() {
    let h = Harness::new(false).await;
    let mut p = h.turn(&[]).await;
    let cases = [
        (r#"{"type":"text-delta","id":"x","text":"a"}"#, "not open"),
        (r#"{"type":"text-end","id":"x"}"#, "not open"),
        (r#"{"type":"reasoning-end","id":"x"}"#, "not open"),
    ];
    for (line, needle) in cases {
        let err = p.handle(ev(line)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains(needle), "{err}");
    }
    feed(&mut p, &[r#"{"type":"text-start","id":"x"}"#]).await;
    let err = p
        .handle(ev(r#"{"type":"text-start","id":"x"}"#))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already open"), "{err}");
    for line in [
        r#"{"type":"reasoning-delta","id":"x","text":"a"}"#,
        r#"{"type":"reasoning-end","id":"x"}"#,
    ] {
        let err = p.handle(ev(line)).await.unwrap_err();
        assert!(err.to_string().contains("which is a text block"), "{err}");
    }
    feed(&mut p, &[r#"{"type":"finish"}"#]).await;
    let err = p
        .handle(ev(r#"{"type":"text-start","id":"y"}"#))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("after the turn was finalized"),
        "{err}"
    );
}

#[tokio::test]
async fn finalize_closes_everything_in_one_batch_for_each_outcome() {
    for (end, expect_error) in [
        (r#"{"type":"finish","finishReason":"stop"}"#, None),
        (
            r#"{"type":"error","error":{"message":"overloaded","statusCode":529}}"#,
            Some(ErrorName::Api),
        ),
        (r#"{"type":"abort"}"#, Some(ErrorName::Aborted)),
    ] {
        let h = Harness::new(false).await;
        let mut p = h
            .turn(&[
                r#"{"type":"text-start","id":"t"}"#,
                r#"{"type":"text-delta","id":"t","text":"partial  "}"#,
                r#"{"type":"reasoning-start","id":"r"}"#,
                r#"{"type":"reasoning-delta","id":"r","text":"hmm"}"#,
                r#"{"type":"tool-input-start","id":"c1","toolName":"a"}"#,
                r#"{"type":"tool-call","toolCallId":"c2","toolName":"b","input":{"x":1}}"#,
            ])
            .await;
        let c0 = h.counting.totals();
        p.handle(ev(end)).await.unwrap();
        assert!(p.is_done());
        assert_eq!(
            h.counting.totals().commits - c0.commits,
            1,
            "{end}: one batch"
        );
        let open = h.engine.store.open_items(&h.tenant, None).await.unwrap();
        assert!(open.is_empty(), "{end}: still open {open:?}");
        let msgs = h.messages().await;
        let answer = msgs.last().unwrap();
        let a = answer.info.as_assistant().unwrap();
        assert!(a.time.completed.is_some());
        assert_eq!(
            a.error.as_ref().map(|e| e.name.clone()),
            expect_error,
            "{end}"
        );
        let texts: Vec<&str> = answer.parts.iter().filter_map(text_of).collect();
        assert_eq!(
            texts,
            ["partial  ", "hmm"],
            "accumulated text kept as streamed"
        );
        for part in &answer.parts {
            if let PartBody::Tool(t) = &part.body {
                let ToolState::Error(e) = &t.state else {
                    panic!("{end}: tool not closed: {:?}", t.state)
                };
                assert_eq!(e.error, forge_core::close::TOOL_ABORTED);
                assert_eq!(e.metadata.as_ref().unwrap()["interrupted"], true);
            }
        }
        // Finalizing again changes nothing.
        let c1 = h.counting.totals();
        p.finalize(forge_core::Outcome::Aborted).await.unwrap();
        assert_eq!(h.counting.totals(), c1);
    }
}

#[tokio::test]
async fn persist_every_delta_rewrites_the_part_once_per_delta() {
    // The benchmark baseline: same Processor, every delta its own commit of the part.
    let h = Harness::new(false).await;
    let user = h.user("q").await;
    let m = forge_core::processor::assistant_message(
        h.session.clone(),
        user.id.clone(),
        "p",
        "m",
        forge_core::id::now_ms(),
    );
    let mut opts = options();
    opts.persist_every_delta = true;
    let mut p = h.engine.processor(h.scope.clone(), m, opts).await.unwrap();
    let before = h.counting.totals().commits;
    feed(
        &mut p,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"a"}"#,
            r#"{"type":"text-delta","id":"t","text":"b"}"#,
            r#"{"type":"text-delta","id":"t","text":"c"}"#,
            r#"{"type":"text-end","id":"t"}"#,
        ],
    )
    .await;
    // start + 3 deltas + end.
    assert_eq!(h.counting.totals().commits - before, 5);
    let parts = h.parts().await;
    let text = parts.last().unwrap();
    assert_eq!(h.counting.part_writes(&text.id), 5);
    assert_eq!(text_of(text), Some("abc"));
}
