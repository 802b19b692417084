//! The reference backend: MemoryStore semantics and LocalBus ordering/replay.

mod common;

use forge_core::id::now_ms;
use forge_core::{
    Bus, BusEvent, Envelope, Error, Event, LocalBus, MemoryStore, Message, Part, Session,
    SessionId, Store, Subscription, SyncEvent, TenantId, Topic,
};

fn env(tenant: &TenantId, seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant.clone(),
        session_id: event.session_id().clone(),
        seq,
        epoch: None,
        event,
    }
}

fn session() -> Session {
    Session::new("s", now_ms())
}

/// The rows of session `s` of `tenant` with message `m` and its part `p`, at seqs 1 to 3.
fn session_rows(tenant: &TenantId, s: &Session, m: &Message, p: Part) -> Vec<Envelope<SyncEvent>> {
    vec![
        env(tenant, 1, SyncEvent::SessionUpdated { info: s.clone() }),
        env(tenant, 2, SyncEvent::MessageUpdated { info: m.clone() }),
        env(tenant, 3, SyncEvent::PartUpdated { part: p }),
    ]
}

/// What an [`Error::NotFound`] did not find; `None` for any other error.
fn not_found(err: &Error) -> Option<&'static str> {
    match err {
        Error::NotFound { what, .. } => Some(what),
        _ => None,
    }
}

#[tokio::test]
async fn a_failing_batch_leaves_nothing_behind() {
    let store = MemoryStore::new();
    let t = TenantId::default();
    let s = session();
    store
        .apply(&[env(&t, 1, SyncEvent::SessionUpdated { info: s.clone() })])
        .await
        .unwrap();
    let (m, p) = common::user_message(&s.id, "kept?");
    let (orphan_msg, orphan) = common::user_message(&s.id, "orphan");
    let _ = orphan_msg;
    let mut renamed = s.clone();
    renamed.title = "renamed".into();
    let err = store
        .apply(&[
            env(&t, 2, SyncEvent::SessionUpdated { info: renamed }),
            env(&t, 3, SyncEvent::MessageUpdated { info: m.clone() }),
            env(&t, 4, SyncEvent::PartUpdated { part: p }),
            env(&t, 5, SyncEvent::PartUpdated { part: orphan }),
        ])
        .await
        .unwrap_err();
    assert_eq!(not_found(&err), Some("message"), "{err:?}");
    let st = store.session(&t, &s.id).await.unwrap().unwrap();
    assert_eq!(st.info.title, "s");
    assert_eq!(st.seq, 1);
    assert!(store.message(&t, &s.id, &m.id).await.unwrap().is_none());
}

#[tokio::test]
async fn removes_cascade_and_nothing_is_resurrected() {
    let store = MemoryStore::new();
    let t = TenantId::default();
    let s = session();
    let (m, p) = common::user_message(&s.id, "x");
    let mut batch = session_rows(&t, &s, &m, p.clone());
    batch.push(env(
        &t,
        4,
        SyncEvent::MessageRemoved {
            session_id: s.id.clone(),
            message_id: m.id.clone(),
        },
    ));
    store.apply(&batch).await.unwrap();
    let err = store
        .apply(&[env(&t, 5, SyncEvent::PartUpdated { part: p.clone() })])
        .await
        .unwrap_err();
    assert!(
        not_found(&err).is_some(),
        "part for a removed message: {err:?}"
    );
    // Re-adding the message does not bring its old parts back.
    store
        .apply(&[env(&t, 6, SyncEvent::MessageUpdated { info: m.clone() })])
        .await
        .unwrap();
    assert!(store
        .message(&t, &s.id, &m.id)
        .await
        .unwrap()
        .unwrap()
        .parts
        .is_empty());
    store
        .apply(&[env(
            &t,
            7,
            SyncEvent::SessionDeleted {
                session_id: s.id.clone(),
            },
        )])
        .await
        .unwrap();
    assert!(store.session(&t, &s.id).await.unwrap().is_none());
    let err = store
        .apply(&[env(&t, 8, SyncEvent::MessageUpdated { info: m })])
        .await
        .unwrap_err();
    assert_eq!(not_found(&err), Some("session"), "{err:?}");
}

#[tokio::test]
async fn tenants_never_see_each_other() {
    let store = MemoryStore::new();
    let a = TenantId::new("a").unwrap();
    let b = TenantId::new("b").unwrap();
    let s = session();
    let (m, p) = common::user_message(&s.id, "secret");
    store.apply(&session_rows(&a, &s, &m, p)).await.unwrap();
    assert!(store.session(&b, &s.id).await.unwrap().is_none());
    assert!(store.sessions(&b).await.unwrap().is_empty());
    assert!(store.message(&b, &s.id, &m.id).await.unwrap().is_none());
    assert!(store
        .messages(&b, &s.id, None, 10)
        .await
        .unwrap()
        .messages
        .is_empty());
    // Same session id in tenant b is a different session.
    let err = store
        .apply(&[env(&b, 1, SyncEvent::MessageUpdated { info: m })])
        .await
        .unwrap_err();
    assert!(not_found(&err).is_some(), "{err:?}");
}

fn delta(tenant: &TenantId, session: &SessionId, seq: u64) -> BusEvent {
    forge_testkit::delta(tenant, session, seq, seq.to_string())
}

/// Publishes a delta of `session` at each of `seqs`.
fn publish_deltas(
    bus: &LocalBus,
    tenant: &TenantId,
    session: &SessionId,
    seqs: impl IntoIterator<Item = u64>,
) {
    for seq in seqs {
        bus.publish(delta(tenant, session, seq)).unwrap();
    }
}

/// A subscription to `session`, from `from_seq` when given.
async fn subscribe(
    bus: &LocalBus,
    tenant: &TenantId,
    session: &SessionId,
    from_seq: Option<u64>,
) -> Subscription {
    bus.subscribe(tenant, Topic::Session(session.clone()), from_seq)
        .await
        .unwrap()
}

#[tokio::test]
async fn resume_from_a_seq_replays_the_gap_then_follows_live_without_repeats() {
    let bus = LocalBus::with_replay(1000);
    assert!(bus.capabilities().durable);
    let t = TenantId::default();
    let s = SessionId::generate();
    publish_deltas(&bus, &t, &s, 1..=10);
    let mut sub = subscribe(&bus, &t, &s, Some(6)).await;
    publish_deltas(&bus, &t, &s, 11..=13);
    let got: Vec<u64> = common::drain(&mut sub)
        .await
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(got, (6..=13).collect::<Vec<_>>());
    let r = bus.replay(&t, &s, 12).await.unwrap();
    assert_eq!(r.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [12, 13]);
    assert!(!r.truncated);
    assert_eq!(bus.last_seq(&t, &s).await.unwrap(), Some(13));
}

#[tokio::test]
async fn retention_is_reported_not_hidden() {
    let bus = LocalBus::with_replay(4);
    let t = TenantId::default();
    let s = SessionId::generate();
    publish_deltas(&bus, &t, &s, 1..=10);
    let r = bus.replay(&t, &s, 1).await.unwrap();
    assert!(r.truncated);
    assert_eq!(
        r.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [7, 8, 9, 10]
    );
    let err = bus
        .subscribe(&t, Topic::Session(s), Some(3))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer retained"), "{err}");
}

#[tokio::test]
async fn a_live_only_bus_is_not_durable_and_says_so() {
    let bus = LocalBus::new();
    assert!(!bus.capabilities().durable);
    let t = TenantId::default();
    let s = SessionId::generate();
    assert!(matches!(
        bus.replay(&t, &s, 1).await,
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        bus.subscribe(&t, Topic::Session(s), Some(1)).await,
        Err(Error::Unsupported(_))
    ));
}

#[tokio::test]
async fn every_subscriber_sees_the_same_sequence_and_tenants_are_apart() {
    let bus = LocalBus::new();
    let a = TenantId::new("a").unwrap();
    let b = TenantId::new("b").unwrap();
    let s = SessionId::generate();
    let mut s1 = subscribe(&bus, &a, &s, None).await;
    let mut s2 = subscribe(&bus, &a, &s, None).await;
    let mut whole_a = bus.subscribe(&a, Topic::Tenant, None).await.unwrap();
    let mut whole_b = bus.subscribe(&b, Topic::Tenant, None).await.unwrap();
    publish_deltas(&bus, &a, &s, 1..=50);
    bus.publish(delta(&b, &s, 1)).unwrap();
    let seqs = |v: Vec<BusEvent>| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    let one = seqs(common::drain(&mut s1).await);
    assert_eq!(one, (1..=50).collect::<Vec<_>>());
    assert_eq!(seqs(common::drain(&mut s2).await), one);
    assert_eq!(seqs(common::drain(&mut whole_a).await), one);
    let other = common::drain(&mut whole_b).await;
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].tenant, b);
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_told() {
    let bus = LocalBus::new();
    let t = TenantId::default();
    let s = SessionId::generate();
    let mut sub = subscribe(&bus, &t, &s, None).await;
    for seq in 1..=(forge_core::local_bus::DEFAULT_SESSION_CHANNEL_CAPACITY as u64 + 10) {
        bus.publish(delta(&t, &s, seq)).unwrap();
    }
    let first = sub.next().await.unwrap();
    assert!(
        matches!(first, Err(Error::Lagged { missed: 10 })),
        "{first:?}"
    );
}

#[tokio::test]
async fn a_deleted_session_ends_its_subscriptions_and_frees_its_channel() {
    let bus = LocalBus::with_replay(100);
    let t = TenantId::default();
    let s = SessionId::generate();
    let mut sub = subscribe(&bus, &t, &s, None).await;
    bus.publish(delta(&t, &s, 1)).unwrap();
    bus.publish(BusEvent::new(Envelope {
        tenant: t.clone(),
        session_id: s.clone(),
        seq: 2,
        epoch: None,
        event: Event::Sync(SyncEvent::SessionDeleted {
            session_id: s.clone(),
        }),
    }))
    .unwrap();
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 1);
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 2);
    assert!(
        sub.next().await.is_none(),
        "the subscription outlived its session"
    );
    assert_eq!(bus.last_seq(&t, &s).await.unwrap(), None);
    assert!(bus.replay(&t, &s, 1).await.unwrap().events.is_empty());
}

#[tokio::test]
async fn the_replay_buffers_of_all_sessions_share_one_budget_and_report_what_they_trimmed() {
    let bus = LocalBus::with_replay_budget(100, 50);
    let t = TenantId::default();
    let sessions: Vec<SessionId> = (0..10).map(|_| SessionId::generate()).collect();
    // 10 sessions × 20 events, interleaved: 200 events for a budget of 50.
    for seq in 1..=20 {
        for s in &sessions {
            bus.publish(delta(&t, s, seq)).unwrap();
        }
    }
    assert_eq!(bus.retained_events(), 50, "the budget is not kept");
    // The oldest went first: every session keeps its last 5 events.
    for s in &sessions {
        let r = bus.replay(&t, s, 1).await.unwrap();
        assert!(r.truncated, "a trimmed buffer says so");
        assert_eq!(
            r.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (16..=20).collect::<Vec<_>>()
        );
        assert_eq!(bus.last_seq(&t, s).await.unwrap(), Some(20));
        let err = bus
            .subscribe(&t, Topic::Session(s.clone()), Some(15))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("through seq 15"), "{err}");
    }
    // A session past its own limit leaves the budget to the others: 120 events of one
    // session keep 100 of it, and what is left of the budget holds the newest others.
    let long = SessionId::generate();
    publish_deltas(&bus, &t, &long, 1..=120);
    assert!(bus.retained_events() <= 50);
    let r = bus.replay(&t, &long, 1).await.unwrap();
    assert_eq!(r.events.first().map(|e| e.seq), Some(71));
    assert_eq!(r.events.len(), 50);
}

#[tokio::test]
async fn a_session_has_a_live_channel_only_while_someone_subscribes() {
    let bus = LocalBus::with_replay(100);
    let t = TenantId::default();
    for _ in 0..1_000 {
        bus.publish(delta(&t, &SessionId::generate(), 1)).unwrap();
    }
    assert_eq!(bus.live_channels(), 0, "publishing alone opened channels");
    let s = SessionId::generate();
    let mut sub = subscribe(&bus, &t, &s, None).await;
    assert_eq!(bus.live_channels(), 1);
    bus.publish(delta(&t, &s, 1)).unwrap();
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 1);
    let second = subscribe(&bus, &t, &s, None).await;
    drop(sub);
    assert_eq!(
        bus.live_channels(),
        1,
        "the channel went with a subscriber left"
    );
    // The last subscription takes the channel with it; a new subscriber gets a new one
    // and misses nothing published after it subscribed.
    drop(second);
    assert_eq!(bus.live_channels(), 0);
    bus.publish(delta(&t, &s, 2)).unwrap();
    let mut again = subscribe(&bus, &t, &s, Some(2)).await;
    bus.publish(delta(&t, &s, 3)).unwrap();
    assert_eq!(again.next().await.unwrap().unwrap().seq, 2);
    assert_eq!(again.next().await.unwrap().unwrap().seq, 3);
}
