//! The driver's own rules.

use std::sync::Arc;
use std::time::Duration;

use crate::group::{FlushMode, GroupCommitOptions, GroupCommitProjector};
use crate::model::{ErrorName, MessageBody, PartBody};
use crate::processor::ProcessorOptions;
use crate::projector::{DirectProjector, Projector};
use crate::{
    ErrorKind, Flow, LocalBus, MemoryStore, Message, MessageId, Session, Store, StreamEvent,
    SyncEvent, TenantId,
};

use super::{
    Answerer, Applied, AssistantItem, EventTime, Item, Timed, TurnDriver, TurnOptions, UserItem,
};

const EPOCH: i64 = 1_700_000_000_000;

async fn driver_on(projector: Arc<dyn Projector>, options: TurnOptions) -> TurnDriver {
    let session = Session::new("t", EPOCH);
    let scope = projector
        .scope(&TenantId::default(), &session.id)
        .await
        .unwrap();
    projector
        .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
        .await
        .unwrap();
    TurnDriver::new(projector, scope, options)
}

async fn driver(options: TurnOptions) -> (Arc<MemoryStore>, TurnDriver) {
    let store = Arc::new(MemoryStore::new());
    let projector = Arc::new(DirectProjector::new(
        store.clone(),
        Arc::new(LocalBus::new()),
    ));
    let d = driver_on(projector, options).await;
    (store, d)
}

async fn stored(store: &MemoryStore, d: &TurnDriver, id: &MessageId) -> Message {
    store
        .message(&TenantId::default(), &d.scope().session_id, id)
        .await
        .unwrap()
        .expect("stored")
        .info
}

fn event(json: &str) -> Item {
    Item::Stream(StreamEvent::from_json(json).unwrap())
}

#[tokio::test]
async fn a_stream_event_with_no_open_answer_opens_one_for_the_last_user_message() {
    let (store, mut d) = driver(TurnOptions::default()).await;
    let e = d.item(event(r#"{"type":"start-step"}"#)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(d.open().is_none());
    let Applied::User(user) = d.item(UserItem::text("hi").into()).await.unwrap() else {
        panic!("a user message")
    };
    assert!(d.open().is_none());
    let applied = d.item(event(r#"{"type":"start-step"}"#)).await.unwrap();
    assert_eq!(applied, Applied::Event(Flow::Continue));
    let open = d.open().expect("opened").message().clone();
    let a = open.as_assistant().expect("an assistant message");
    assert_eq!(a.parent_id, user);
    assert_eq!(a.agent.as_deref(), Some("build"));
    assert_eq!(
        (a.provider_id.as_str(), a.model_id.as_str()),
        ("unknown", "unknown")
    );
    assert!(stored(&store, &d, &open.id).await.is_open());
}

#[tokio::test]
async fn a_new_message_aborts_the_open_answer() {
    let (store, mut d) = driver(TurnOptions::default()).await;
    d.item(UserItem::text("one").into()).await.unwrap();
    let Applied::Opened(first) = d.item(AssistantItem::default().into()).await.unwrap() else {
        panic!("opened")
    };
    d.item(UserItem::text("two").into()).await.unwrap();
    assert!(d.open().is_none());
    let m = stored(&store, &d, &first).await;
    let a = m.as_assistant().unwrap();
    assert!(!m.is_open());
    assert_eq!(
        a.error.as_ref().map(|e| e.name.clone()),
        Some(ErrorName::Aborted)
    );
}

#[tokio::test]
async fn a_finish_after_a_finished_answer_is_refused_and_stores_nothing() {
    let (store, mut d) = driver(TurnOptions::default()).await;
    d.item(UserItem::text("hi").into()).await.unwrap();
    let finish = r#"{"type":"finish","finishReason":"stop"}"#;
    assert_eq!(
        d.item(event(finish)).await.unwrap(),
        Applied::Event(Flow::Done)
    );
    assert!(d.finished());
    let e = d.item(event(finish)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(d.open().is_none());
    let page = crate::read_all(
        store.as_ref(),
        &TenantId::default(),
        &d.scope().session_id,
        100,
    )
    .await
    .unwrap();
    assert_eq!(page.len(), 2, "the user message and one answer");
}

#[tokio::test]
async fn a_crash_leaves_the_answer_open() {
    let (store, mut d) = driver(TurnOptions::default()).await;
    d.item(UserItem::text("hi").into()).await.unwrap();
    d.item(event(r#"{"type":"text-start","id":"t"}"#))
        .await
        .unwrap();
    let id = d.open().unwrap().message().id.clone();
    assert_eq!(d.item(Item::Crash).await.unwrap(), Applied::Crash);
    assert!(d.open().is_none());
    assert!(stored(&store, &d, &id).await.is_open());
}

#[tokio::test]
async fn event_times_set_the_clock_only_when_the_option_is_on() {
    let fixed = ProcessorOptions {
        clock: Arc::new(|| 42),
        ..ProcessorOptions::default()
    };
    let off = TurnOptions {
        processor: fixed.clone(),
        ..TurnOptions::default()
    };
    let on = TurnOptions {
        processor: fixed,
        event_time: Some(EventTime {
            epoch_ms: EPOCH,
            group: None,
        }),
        ..TurnOptions::default()
    };
    for (options, want) in [(off, 42), (on, EPOCH + 1_250)] {
        let (store, mut d) = driver(options).await;
        let Applied::User(id) = d
            .apply(Timed::at(1_250, UserItem::text("hi")))
            .await
            .unwrap()
        else {
            panic!("a user message")
        };
        let MessageBody::User(u) = stored(&store, &d, &id).await.body else {
            panic!("a user message")
        };
        assert_eq!(u.time.created, want);
    }
}

#[tokio::test]
async fn event_times_advance_the_group_commit_clock() {
    let store = Arc::new(MemoryStore::new());
    let group = Arc::new(GroupCommitProjector::new(
        store.clone(),
        Arc::new(LocalBus::new()),
        GroupCommitOptions {
            window: Duration::from_millis(10),
            flush: FlushMode::Manual,
        },
    ));
    let options = TurnOptions {
        event_time: Some(EventTime {
            epoch_ms: EPOCH,
            group: Some(Arc::clone(&group)),
        }),
        ..TurnOptions::default()
    };
    let mut d = driver_on(group.clone(), options).await;
    group.sync().await.unwrap();
    let before = group.stats().terminal_batches;
    d.apply(Timed::at(0, UserItem::text("hi"))).await.unwrap();
    assert_eq!(
        group.stats().terminal_batches,
        before,
        "held for its window"
    );
    d.at(Some(20)).await.unwrap();
    assert!(
        group.stats().terminal_batches > before,
        "committed on event time"
    );
}

#[tokio::test]
async fn a_fixed_answerer_names_no_agent_and_the_item_wins() {
    let options = TurnOptions {
        answerer: Answerer::fixed("bench", "w1"),
        ..TurnOptions::default()
    };
    let (_store, mut d) = driver(options).await;
    d.item(UserItem::text("hi").into()).await.unwrap();
    d.item(AssistantItem::summary(true).into()).await.unwrap();
    let m = d.open().unwrap().message().clone();
    let a = m.as_assistant().unwrap();
    assert_eq!(
        (a.provider_id.as_str(), a.model_id.as_str()),
        ("bench", "w1")
    );
    assert_eq!((a.agent.as_deref(), a.summary), (None, Some(true)));
    let named = AssistantItem {
        model_id: Some("other".into()),
        ..AssistantItem::default()
    };
    d.item(named.into()).await.unwrap();
    assert_eq!(
        d.open().unwrap().message().as_assistant().unwrap().model_id,
        "other"
    );
}

#[tokio::test]
async fn refs_name_messages_once_and_resolve_compaction_tails() {
    let (store, mut d) = driver(TurnOptions::default()).await;
    let u = UserItem {
        label: Some("q".into()),
        ..UserItem::text("hi")
    };
    let Applied::User(q) = d.item(u.clone().into()).await.unwrap() else {
        panic!("a user message")
    };
    let e = d.item(u.into()).await.unwrap_err();
    assert!(e.to_string().contains("ref \"q\" is already used"), "{e}");
    let compaction: UserItem = serde_json::from_value(
        serde_json::json!({"compaction": {"auto": true, "tail_start_id": "@q"}}),
    )
    .unwrap();
    let Applied::User(c) = d.item(compaction.into()).await.unwrap() else {
        panic!("a user message")
    };
    let parts = store
        .message(&TenantId::default(), &d.scope().session_id, &c)
        .await
        .unwrap()
        .unwrap()
        .parts;
    assert!(
        matches!(&parts[0].body, PartBody::Compaction(p) if p.tail_start_id.as_ref() == Some(&q))
    );
    let unknown: UserItem = serde_json::from_value(
        serde_json::json!({"compaction": {"auto": true, "tail_start_id": "@nope"}}),
    )
    .unwrap();
    let e = d.item(unknown.into()).await.unwrap_err();
    assert!(e.to_string().contains("@nope names no earlier line"), "{e}");
}
