//! `recover` in a fresh process rebuilds interrupted text from the Redis stream.

mod common;

use common::{engine, start_answer, stream_text, text_of, TestPrefix};
use forge_core::id::now_ms;
use forge_core::{Session, TenantId, Topic};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_in_a_fresh_engine_rebuilds_interrupted_text_from_the_stream() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let url = &p.url;
    let tenant = TenantId::new("t1").unwrap();
    let session = Session::new("crash", now_ms());
    let sid = session.id.clone();
    let streamed = ["Hello", ", ", "wor", "ld ", "and more"];

    // "Process A": streams text and dies without finalize.
    let a = engine(url).await;
    let mut p = start_answer(&a, &tenant, session, "hi").await;
    for d in streamed {
        stream_text(&mut p, d).await;
    }
    a.bus.flush().await.unwrap();
    drop(p);
    drop(a);

    // "Process B": new connections, nothing shared in memory.
    let b = engine(url).await;
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
