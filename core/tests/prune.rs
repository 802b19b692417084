//! Retention (`forge_core::prune`) on the in-memory store and bus: deletions are
//! published, a writer's session is left alone, open sessions are kept, a dry run
//! changes nothing. The conformance suite's `prune` property runs it on every backend
//! with concurrent writers.

mod common;

use std::time::Duration;

use common::*;
use forge_core::id::now_ms;
use forge_core::prune::{prune, PruneOptions, Reason, Retention};
use forge_core::{Event, SyncEvent, Topic};

const DAY: Duration = Duration::from_hours(24);

fn idle_day() -> Retention {
    Retention {
        idle: Some(DAY),
        ..Retention::default()
    }
}

/// Options whose "now" is two days ahead: the harness's session is idle for a day.
fn later(batch: usize) -> PruneOptions {
    PruneOptions {
        batch_messages: batch,
        pause: Duration::ZERO,
        now_ms: now_ms() + 2 * 86_400_000,
        ..PruneOptions::default()
    }
}

#[tokio::test]
async fn a_session_a_writer_holds_is_skipped_and_deleted_once_released() {
    let h = Harness::new(false).await;
    h.user("one").await;
    let (store, bus) = (&h.engine.store, &h.engine.bus);
    // The harness's projector claimed the session when it wrote it; its lease runs.
    let held = prune(store, bus, &h.tenant, &idle_day(), &later(64))
        .await
        .unwrap();
    assert_eq!(
        (held.skipped_held, held.sessions_deleted),
        (1, 0),
        "{held:?}"
    );
    assert!(store
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .is_some());

    h.engine.projector.release().await.unwrap();
    let done = prune(store, bus, &h.tenant, &idle_day(), &later(64))
        .await
        .unwrap();
    assert_eq!(done.sessions_deleted, 1, "{done:?}");
    assert!(store
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn deletions_are_published_in_batches_oldest_first_then_the_session() {
    let h = Harness::new(true).await;
    for text in ["one", "two", "three", "four", "five"] {
        h.user(text).await;
    }
    let ids: Vec<_> = h.messages().await.into_iter().map(|m| m.info.id).collect();
    let last_seq = h
        .engine
        .store
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .unwrap()
        .seq;
    h.engine.projector.release().await.unwrap();
    let mut sub = h
        .engine
        .bus
        .subscribe(&h.tenant, Topic::Tenant, None)
        .await
        .unwrap();
    let report = prune(
        &h.engine.store,
        &h.engine.bus,
        &h.tenant,
        &idle_day(),
        &later(2),
    )
    .await
    .unwrap();
    // 5 messages in batches of 2, then the session: 4 transactions.
    assert_eq!(report.transactions, 4, "{report:?}");
    assert_eq!(report.messages_removed, 5);
    assert_eq!(report.parts_removed, 5);
    assert_eq!(report.pruned[0].reason, Reason::Idle);
    let events = drain(&mut sub).await;
    let mut removed = Vec::new();
    let mut seqs = Vec::new();
    for e in &events {
        seqs.push(e.seq);
        match &e.event {
            Event::Sync(SyncEvent::MessageRemoved { message_id, .. }) => {
                removed.push(message_id.clone());
            }
            Event::Sync(SyncEvent::SessionDeleted { session_id }) => {
                assert_eq!(session_id, &h.session);
                assert_eq!(
                    removed, ids,
                    "every message is removed, oldest first, before the session"
                );
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(events.len(), 6, "{events:?}");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]) && seqs[0] > last_seq,
        "{seqs:?} after {last_seq}"
    );
}

#[tokio::test]
async fn an_open_answer_keeps_its_session_and_a_dry_run_changes_nothing() {
    let h = Harness::new(false).await;
    let p = h.turn(&[r#"{"type":"text-start","id":"t"}"#]).await;
    drop(p); // the turn is left open, as by a crash
    h.engine.projector.release().await.unwrap();
    let (store, bus) = (&h.engine.store, &h.engine.bus);
    let before = h.messages().await;
    let dry = prune(
        store,
        bus,
        &h.tenant,
        &idle_day(),
        &PruneOptions {
            dry_run: true,
            ..later(64)
        },
    )
    .await
    .unwrap();
    assert_eq!((dry.skipped_open, dry.sessions_deleted), (1, 0), "{dry:?}");
    let open = prune(store, bus, &h.tenant, &idle_day(), &later(64))
        .await
        .unwrap();
    assert_eq!(
        (open.skipped_open, open.sessions_deleted),
        (1, 0),
        "{open:?}"
    );
    assert_eq!(h.messages().await, before);

    // Recovered (closed), it goes; a dry run first names it and removes nothing.
    h.engine.recover(&h.tenant, None).await.unwrap();
    h.engine.projector.release().await.unwrap();
    let dry = prune(
        store,
        bus,
        &h.tenant,
        &idle_day(),
        &PruneOptions {
            dry_run: true,
            ..later(64)
        },
    )
    .await
    .unwrap();
    assert_eq!(dry.sessions_deleted, 1, "{dry:?}");
    assert_eq!(dry.transactions, 0);
    assert!(store
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .is_some());
    let done = prune(store, bus, &h.tenant, &idle_day(), &later(64))
        .await
        .unwrap();
    assert_eq!(done.pruned, dry.pruned);
    assert!(store
        .session(&h.tenant, &h.session)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn keep_n_keeps_the_most_recently_active() {
    let h = Harness::new(false).await;
    let (store, bus) = (&h.engine.store, &h.engine.bus);
    // Three more sessions; the first (the harness's) gets a message last, so it is the
    // most recently active although it was created first.
    let mut ids = vec![h.session.clone()];
    for i in 0..3 {
        let s = forge_core::Session::new(format!("s{i}"), now_ms() - 10_000 * (3 - i));
        ids.push(s.id.clone());
        h.engine.put_session(&h.tenant, s).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    h.user("latest").await;
    h.engine.projector.release().await.unwrap();
    let keep = Retention {
        keep: Some(2),
        ..Retention::default()
    };
    let r = prune(store, bus, &h.tenant, &keep, &later(64))
        .await
        .unwrap();
    assert_eq!(r.sessions_deleted, 2, "{r:?}");
    let left: Vec<_> = store
        .sessions(&h.tenant)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.info.id)
        .collect();
    let mut want = vec![h.session.clone(), ids[3].clone()];
    want.sort();
    assert_eq!(left, want);
}
