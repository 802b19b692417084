//! The Processor reports a turn's status on the bus as opencode does: `session.status`
//! busy when it starts; at the end `session.error` (a failed turn, not an aborted one),
//! then `session.status` idle and `session.idle`. Bus only, never stored, and a status
//! that cannot be published does not fail the turn.

mod common;

use std::sync::Arc;

use common::*;
use forge_core::model::ErrorName;
use forge_core::{BusEvent, Error, Event, LocalBus, MemoryStore, SessionId, SyncEvent};
use serde_json::{json, Value};

/// What a subscriber saw, one short label per event: the status events by type and
/// status, the others by name.
fn labels(events: &[BusEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.event {
            Event::SessionStatus(m) => format!("status:{}", m["status"]["type"].as_str().unwrap()),
            other => other.name().to_owned(),
        })
        .collect()
}

fn status_json(session: &SessionId, status: &str) -> Value {
    json!({"type": "session.status",
        "properties": {"sessionID": session.as_str(), "status": {"type": status}}})
}

#[tokio::test]
async fn a_turn_is_busy_from_start_and_idle_after_finalize_for_each_outcome() {
    let step_error = [
        r#"{"type":"start-step"}"#,
        r#"{"type":"error","error":{"message":"overloaded","statusCode":529}}"#,
        r#"{"type":"finish-step","finishReason":"error"}"#,
        r#"{"type":"finish"}"#,
    ];
    let cases: [(&[&str], Option<ErrorName>); 4] = [
        (&[r#"{"type":"finish","finishReason":"stop"}"#], None),
        (
            &[r#"{"type":"error","error":{"message":"overloaded","statusCode":529}}"#],
            Some(ErrorName::Api),
        ),
        (&step_error, Some(ErrorName::Api)),
        (&[r#"{"type":"abort"}"#], None),
    ];
    for (end, session_error) in cases {
        let h = Harness::new(false).await;
        let (mut sub, mut p) = h
            .watched_turn(&[
                r#"{"type":"text-start","id":"t"}"#,
                r#"{"type":"text-delta","id":"t","text":"a"}"#,
                r#"{"type":"text-delta","id":"t","text":"b"}"#,
            ])
            .await;
        feed(&mut p, end).await;
        assert!(p.is_done(), "{end:?}");
        let events = drain(&mut sub).await;
        let seen = labels(&events);

        // busy right after the open message is persisted, before anything streams.
        assert_eq!(seen[..2], ["message.updated", "status:busy"], "{end:?}");
        // The end: the completed message, [session.error], idle, session.idle.
        let mut tail = vec!["message.updated"];
        if session_error.is_some() {
            tail.push("session.error");
        }
        tail.extend(["status:idle", "session.idle"]);
        assert_eq!(seen[seen.len() - tail.len()..], tail, "{end:?}: {seen:?}");
        let statuses = events.iter().filter(|e| e.event.is_status()).count();
        assert_eq!(
            statuses,
            tail.len(),
            "{end:?}: busy, and the end's: {seen:?}"
        );

        let session = &h.session;
        assert_eq!(
            serde_json::to_value(&events[1].event).unwrap(),
            status_json(session, "busy")
        );
        let last = &events[events.len() - 2..];
        assert_eq!(
            serde_json::to_value(&last[0].event).unwrap(),
            status_json(session, "idle")
        );
        assert_eq!(
            serde_json::to_value(&last[1].event).unwrap(),
            json!({"type": "session.idle", "properties": {"sessionID": session.as_str()}})
        );
        if let Some(name) = &session_error {
            let stored = h.messages().await.pop().unwrap();
            let error = stored.info.as_assistant().unwrap().error.clone().unwrap();
            assert_eq!(&error.name, name);
            let e = events
                .iter()
                .find(|e| e.event.name() == "session.error")
                .unwrap();
            assert_eq!(
                serde_json::to_value(&e.event).unwrap(),
                json!({"type": "session.error", "properties": {
                    "sessionID": session.as_str(),
                    "error": serde_json::to_value(&error).unwrap(),
                }}),
                "{end:?}: the message's error"
            );
        }

        // Deltas name their session.
        let deltas: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::PartDelta(d) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.len(), 2);
        for d in deltas {
            assert_eq!(&d.session_id, session);
            assert_eq!(
                serde_json::to_value(Event::PartDelta(d.clone())).unwrap()["properties"]
                    ["sessionID"],
                session.as_str()
            );
        }
        // Never stored: the store's seq is the last sync event's.
        let last_sync = events.iter().rfind(|e| e.event.is_sync()).unwrap().seq;
        let stored = h
            .engine
            .store
            .session(&h.tenant, session)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.seq, last_sync, "{end:?}");
        assert!(events.last().unwrap().seq > last_sync);

        // Finalizing again publishes nothing more.
        p.finalize(forge_core::Outcome::Finished).await.unwrap();
        assert!(drain(&mut sub).await.is_empty(), "{end:?}");
    }
}

#[tokio::test]
async fn a_status_that_cannot_be_published_does_not_fail_the_turn() {
    // A bus that refuses every status event and passes the others on.
    let no_status = |event: &BusEvent| {
        if event.event.is_status() {
            return Err(Error::backend("test", false, "status refused"));
        }
        Ok(())
    };
    let bus = Arc::new(TapBus::new(LocalBus::new(), no_status));
    let h = Harness::with(Arc::new(MemoryStore::new()), bus).await;
    let (mut sub, p) = h
        .watched_turn(&[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"a"}"#,
            r#"{"type":"error","error":{"message":"overloaded","statusCode":529}}"#,
        ])
        .await;
    assert!(p.is_done());
    let answer = h.messages().await.pop().unwrap();
    assert!(answer.info.as_assistant().unwrap().time.completed.is_some());
    let events = drain(&mut sub).await;
    assert!(events.iter().all(|e| !e.event.is_status()));
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(Event::Sync(SyncEvent::MessageUpdated { .. }))
    ));
}
