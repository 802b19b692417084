//! The crash boundary (docs/design.md §4): a processor dropped without finalize, then
//! `recover`.

mod common;

use std::sync::Arc;

use common::*;
use forge_core::model::{PartBody, ToolState};
use forge_core::{Bus, Engine, LocalBus, MemoryStore, Store};

async fn crashed_mid_stream(durable: bool, lines: &[&str]) -> Harness {
    let h = Harness::new(durable).await;
    let p = h.turn(lines).await;
    drop(p); // the process dies: no finalize
    h
}

fn answer_parts(msgs: &[forge_core::MessageWithParts]) -> &[forge_core::Part] {
    &msgs.last().unwrap().parts
}

#[tokio::test]
async fn crash_mid_text_on_a_durable_bus_keeps_the_streamed_text() {
    let h = crashed_mid_stream(
        true,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"Hello, "}"#,
            r#"{"type":"text-delta","id":"t","text":"wor"}"#,
        ],
    )
    .await;
    let open = h.engine.store.open_items(&h.tenant, None).await.unwrap();
    assert_eq!((open.messages.len(), open.parts.len()), (1, 1));
    let report = h.engine.recover(&h.tenant, None).await.unwrap();
    assert_eq!(report.blocks_closed, 1);
    assert_eq!(report.text_from_bus, 1);
    assert_eq!(report.messages_closed, 1);
    let msgs = h.messages().await;
    let parts = answer_parts(&msgs);
    assert_eq!(text_of(&parts[0]), Some("Hello, wor"));
    assert!(!parts[0].is_open());
    let a = msgs.last().unwrap().info.as_assistant().unwrap();
    assert!(a.time.completed.is_some());
    assert_eq!(
        a.error.as_ref().unwrap().name,
        forge_core::model::ErrorName::Aborted
    );
}

#[tokio::test]
async fn crash_mid_reasoning_on_a_live_only_bus_keeps_what_the_store_has() {
    let h = crashed_mid_stream(
        false,
        &[
            r#"{"type":"reasoning-start","id":"r"}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"lost on a live bus"}"#,
        ],
    )
    .await;
    let report = h.engine.recover(&h.tenant, Some(&h.session)).await.unwrap();
    assert_eq!(report.blocks_closed, 1);
    assert_eq!(report.text_from_bus, 0);
    let msgs = h.messages().await;
    let parts = answer_parts(&msgs);
    assert_eq!(parts[0].kind(), "reasoning");
    assert_eq!(text_of(&parts[0]), Some(""));
    assert!(!parts[0].is_open());
}

#[tokio::test]
async fn crash_mid_reasoning_on_a_durable_bus_rebuilds_it() {
    let h = crashed_mid_stream(
        true,
        &[
            r#"{"type":"reasoning-start","id":"r"}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"step one; "}"#,
            r#"{"type":"reasoning-delta","id":"r","text":"step two"}"#,
        ],
    )
    .await;
    h.engine.recover(&h.tenant, None).await.unwrap();
    let msgs = h.messages().await;
    assert_eq!(text_of(&answer_parts(&msgs)[0]), Some("step one; step two"));
}

#[tokio::test]
async fn crash_with_tools_pending_and_running_closes_them_as_errors() {
    let h = crashed_mid_stream(
        true,
        &[
            r#"{"type":"tool-input-start","id":"c1","toolName":"edit"}"#,
            r#"{"type":"tool-call","toolCallId":"c2","toolName":"bash","input":{"cmd":"make"}}"#,
        ],
    )
    .await;
    let report = h.engine.recover(&h.tenant, None).await.unwrap();
    assert_eq!(report.tools_closed, 2);
    let msgs = h.messages().await;
    for part in answer_parts(&msgs) {
        let PartBody::Tool(t) = &part.body else {
            continue;
        };
        let ToolState::Error(e) = &t.state else {
            panic!("tool {} still {:?}", t.call_id, t.state)
        };
        assert_eq!(e.error, "Tool execution aborted");
        assert_eq!(e.metadata.as_ref().unwrap()["interrupted"], true);
        if t.call_id == "c2" {
            assert_eq!(e.input["cmd"], "make", "the running tool's input is kept");
        }
    }
}

#[tokio::test]
async fn crash_right_after_a_boundary_keeps_the_completed_block_exactly() {
    let h = crashed_mid_stream(
        true,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"done. "}"#,
            r#"{"type":"text-end","id":"t"}"#,
        ],
    )
    .await;
    let before = h.messages().await;
    let report = h.engine.recover(&h.tenant, None).await.unwrap();
    assert_eq!(report.blocks_closed, 0);
    assert_eq!(report.messages_closed, 1);
    let after = h.messages().await;
    assert_eq!(
        answer_parts(&before),
        answer_parts(&after),
        "the closed block is untouched"
    );
    assert_eq!(text_of(&answer_parts(&after)[0]), Some("done. "));
}

#[tokio::test]
async fn recover_twice_changes_nothing_the_second_time() {
    let h = crashed_mid_stream(
        true,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"abc"}"#,
            r#"{"type":"tool-call","toolCallId":"c","toolName":"x","input":{}}"#,
        ],
    )
    .await;
    let first = h.engine.recover(&h.tenant, None).await.unwrap();
    assert!(!first.is_empty());
    let snapshot = h.messages().await;
    let writes = h.counting.totals();
    let second = h.engine.recover(&h.tenant, None).await.unwrap();
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(h.counting.totals(), writes, "second recover wrote");
    assert_eq!(h.messages().await, snapshot);
}

#[tokio::test]
async fn recover_after_restart_uses_the_surviving_bus_and_continues_seqs() {
    // The store and the durable bus outlive the process; the projector does not.
    let memory = Arc::new(MemoryStore::new());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::with_replay(10_000));
    let h = Harness::with(memory.clone(), bus.clone()).await;
    let p = h
        .turn(&[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"sur"}"#,
            r#"{"type":"text-delta","id":"t","text":"vi"}"#,
            r#"{"type":"text-delta","id":"t","text":"v"}"#,
            r#"{"type":"text-delta","id":"t","text":"es"}"#,
        ])
        .await;
    drop(p);
    let last_published = bus.last_seq(&h.tenant, &h.session).await.unwrap().unwrap();
    let stored_seq = memory
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .unwrap()
        .seq;
    assert!(
        last_published > stored_seq,
        "the delta took a seq the store never saw"
    );

    let restarted = Engine::direct(memory.clone(), bus.clone());
    let mut sub = bus
        .subscribe(
            &h.tenant,
            forge_core::Topic::Session(h.session.clone()),
            None,
        )
        .await
        .unwrap();
    let report = restarted.recover(&h.tenant, None).await.unwrap();
    assert_eq!(report.text_from_bus, 1);
    let seen = drain(&mut sub).await;
    assert!(!seen.is_empty());
    for e in &seen {
        assert!(
            e.seq > last_published,
            "recover reused seq {} <= {last_published}",
            e.seq
        );
    }
    let msgs = forge_core::read_all(memory.as_ref(), &h.tenant, &h.session, 10)
        .await
        .unwrap();
    assert_eq!(text_of(&answer_parts(&msgs)[0]), Some("survives"));
}

#[tokio::test]
async fn recover_is_limited_to_the_tenant_and_session_asked_for() {
    let h = crashed_mid_stream(true, &[r#"{"type":"text-start","id":"t"}"#]).await;
    let other = forge_core::TenantId::new("other").unwrap();
    assert!(h.engine.recover(&other, None).await.unwrap().is_empty());
    let elsewhere = forge_core::SessionId::generate();
    assert!(h
        .engine
        .recover(&h.tenant, Some(&elsewhere))
        .await
        .unwrap()
        .is_empty());
    assert!(!h
        .engine
        .store
        .open_items(&h.tenant, None)
        .await
        .unwrap()
        .is_empty());
}
