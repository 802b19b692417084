//! `recover` in a fresh process rebuilds interrupted text from the Redis stream.

mod common;

use std::sync::Arc;

use common::{fresh_prefix, text_of, user_message, with_prefix, Cleanup};
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{Bus, Engine, ProcessorOptions, Session, Store, StreamEvent, TenantId, Topic};
use forge_redis::{RedisBus, RedisStore};

async fn engine(url: &str) -> Engine {
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(url).await.unwrap());
    let bus: Arc<dyn Bus> = Arc::new(RedisBus::connect(url).await.unwrap());
    Engine::direct(store, bus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_in_a_fresh_engine_rebuilds_interrupted_text_from_the_stream() {
    let Some(server) = common::redis_url() else {
        return;
    };
    let prefix = fresh_prefix();
    let _cleanup = Cleanup {
        url: server.clone(),
        prefix: prefix.clone(),
    };
    let url = with_prefix(&server, &prefix, "");
    let tenant = TenantId::new("t1").unwrap();
    let session = Session::new("crash", now_ms());
    let sid = session.id.clone();
    let streamed = ["Hello", ", ", "wor", "ld ", "and more"];

    // "Process A": streams text and dies without finalize.
    let a = engine(&url).await;
    let scope = a.put_session(&tenant, session).await.unwrap();
    let (user, part) = user_message(&sid, "msg_0001", "prt_0001", "hi");
    a.put_message(&scope, user.clone(), vec![part])
        .await
        .unwrap();
    let m = assistant_message(sid.clone(), user.id.clone(), "p", "m", now_ms());
    let mut p = a
        .processor(scope, m, ProcessorOptions::default())
        .await
        .unwrap();
    p.handle(StreamEvent::from_json(r#"{"type":"text-start","id":"t"}"#).unwrap())
        .await
        .unwrap();
    for d in streamed {
        let line = serde_json::json!({"type": "text-delta", "id": "t", "text": d});
        p.handle(StreamEvent::from_json(&line.to_string()).unwrap())
            .await
            .unwrap();
    }
    a.bus.flush().await.unwrap();
    drop(p);
    drop(a);

    // "Process B": new connections, nothing shared in memory.
    let b = engine(&url).await;
    let open = b.store.open_items(&tenant, None).await.unwrap();
    assert_eq!((open.messages.len(), open.parts.len()), (1, 1));
    let stored_before = text_of(&open.parts[0]).unwrap().to_owned();
    assert_ne!(stored_before, streamed.concat(), "deltas are bus-only");
    let last = b.bus.last_seq(&tenant, &sid).await.unwrap().unwrap();
    let mut sub = b
        .bus
        .subscribe(&tenant, Topic::Session(sid.clone()), Some(last + 1))
        .await
        .unwrap();

    let report = b.recover(&tenant, None).await.unwrap();
    assert_eq!(report.blocks_closed, 1);
    assert_eq!(report.text_from_bus, 1, "{report:?}");
    assert_eq!(report.messages_closed, 1);
    let all = forge_core::read_all(b.store.as_ref(), &tenant, &sid, 100)
        .await
        .unwrap();
    let answer = all.last().unwrap();
    assert_eq!(text_of(&answer.parts[0]), Some(streamed.concat().as_str()));
    assert!(!answer.parts[0].is_open() && !answer.info.is_open());
    assert!(b.store.open_items(&tenant, None).await.unwrap().is_empty());

    // B's writes continue the seqs A left on the stream.
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.seq, last + 1);
    assert!(
        b.recover(&tenant, None).await.unwrap().is_empty(),
        "idempotent"
    );
}
