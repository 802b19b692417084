//! Multi-replica test with real processes: replica A (a child process) streams a turn;
//! a subscriber here (replica B) receives every event in order; A is SIGKILLed
//! mid-text; B runs `recover` and the stored text equals everything A streamed; a
//! projector worker's copy of the stream in Postgres (when `FORGE_TEST_POSTGRES_URL` is
//! set; in memory otherwise, said loudly) ends equal to the Redis store and to a
//! single-process run over the same stream up to the cut.
//!
//! The child is this test binary re-run with `FORGE_REDIS_REPLICA_CHILD` set, so no
//! extra binary is needed.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fresh_prefix, user_message, with_prefix, Cleanup};
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{
    Bus, Engine, Event, MemoryStore, ProcessorOptions, Session, SessionId, Store, StreamEvent,
    SyncEvent, TenantId, Topic,
};
use forge_redis::{ProjectorWorker, RedisBus, RedisStore, WorkerOptions};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::PostgresStore;

const CHILD: &str = "FORGE_REDIS_REPLICA_CHILD";

async fn engine(url: &str) -> Engine {
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(url).await.unwrap());
    let bus: Arc<dyn Bus> = Arc::new(RedisBus::connect(url).await.unwrap());
    Engine::direct(store, bus)
}

/// Replica A: streams text until it is killed. Started any other way than as the child
/// (without [`CHILD`]), it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry point, started by \
            a_killed_replica_is_recovered_by_another_from_the_stream"]
async fn replica_child() {
    let url = std::env::var(CHILD).unwrap_or_else(|_| {
        panic!(
            "replica_child is the child of \
             a_killed_replica_is_recovered_by_another_from_the_stream and runs only with \
             {CHILD} set"
        )
    });
    let tenant = TenantId::new("t1").unwrap();
    let sid: SessionId = std::env::var("FORGE_REDIS_REPLICA_SESSION").unwrap().into();
    let a = engine(&url).await;
    let mut session = Session::new("kill", now_ms());
    session.id = sid.clone();
    let scope = a.put_session(&tenant, session).await.unwrap();
    let (user, part) = user_message(&sid, "msg_0001", "prt_0001", "go");
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
    for i in 0u64.. {
        let line = serde_json::json!({"type": "text-delta", "id": "t", "text": format!("w{i} ")});
        p.handle(StreamEvent::from_json(&line.to_string()).unwrap())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_is_recovered_by_another_from_the_stream() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
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
    let sid: SessionId = "ses_kill".into();

    // Replica B subscribes before A exists: from seq 1, it must see everything.
    let b = engine(&url).await;
    let mut sub = b
        .bus
        .subscribe(&tenant, Topic::Session(sid.clone()), Some(1))
        .await
        .unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "replica_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &url)
        .env("FORGE_REDIS_REPLICA_SESSION", sid.as_str())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let mut received = Vec::new();
    let mut deltas = 0;
    let started = Instant::now();
    while deltas < 300 {
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "replica A too slow"
        );
        let ev = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .expect("no event from replica A")
            .unwrap()
            .unwrap();
        if matches!(ev.event, Event::PartDelta(_)) {
            deltas += 1;
        }
        received.push(ev);
    }
    child.kill().unwrap(); // SIGKILL, mid-text
    let status = child.wait().unwrap();
    assert!(!status.success());
    // Whatever A had handed to Redis before it died still arrives.
    let killed = Instant::now();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
        received.push(ev.unwrap());
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "events keep coming after the kill: repeated?"
        );
    }
    let seqs: Vec<u64> = received.iter().map(|e| e.seq).collect();
    let n = seqs.len() as u64;
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<_>>(),
        "every event, in order, once"
    );
    let replay = b.bus.replay(&tenant, &sid, 1).await.unwrap();
    assert_eq!(replay.events, received, "the stream holds what B received");

    let streamed: String = received
        .iter()
        .filter_map(|e| match &e.event {
            Event::PartDelta(d) => Some(d.delta.as_str()),
            _ => None,
        })
        .collect();
    let report = b.recover(&tenant, None).await.unwrap();
    assert_eq!(
        (report.blocks_closed, report.text_from_bus),
        (1, 1),
        "{report:?}"
    );
    let all = forge_core::read_all(b.store.as_ref(), &tenant, &sid, 100)
        .await
        .unwrap();
    let answer = all.last().unwrap();
    let text = common::text_of(&answer.parts[0]).unwrap();
    assert_eq!(text, streamed, "recovered text = everything A streamed");
    eprintln!(
        "kill test: A streamed {} events ({} deltas, {} bytes of text) before SIGKILL; \
         B recovered the text exactly",
        received.len(),
        received
            .iter()
            .filter(|e| matches!(e.event, Event::PartDelta(_)))
            .count(),
        text.len()
    );

    // A projector worker's copy (another store) ends equal to B's Redis store, and to
    // a single-process run over the same stream up to the cut.
    let (copy, schema): (Arc<dyn Store>, _) = match postgres_url() {
        Some(pg) => {
            let schema = TestSchema::create(&pg).await.unwrap();
            let store = PostgresStore::connect(&schema.url()).await.unwrap();
            (Arc::new(store), Some(schema))
        }
        None => (Arc::new(MemoryStore::new()), None),
    };
    let mut w = ProjectorWorker::connect(
        &url,
        copy.clone(),
        tenant.clone(),
        "projector",
        "w1",
        WorkerOptions::default(),
    )
    .await
    .unwrap();
    let mut idle = 0;
    while idle < 2 {
        idle = if w.step().await.unwrap() == 0 {
            idle + 1
        } else {
            0
        };
    }
    let copied = forge_core::read_all(copy.as_ref(), &tenant, &sid, 100)
        .await
        .unwrap();
    assert_eq!(
        copied, all,
        "the worker's copy differs from the Redis store"
    );

    let single = MemoryStore::new();
    let sync: Vec<_> = b
        .bus
        .replay(&tenant, &sid, 1)
        .await
        .unwrap()
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Sync(s) => Some(forge_core::Envelope {
                tenant: e.tenant.clone(),
                session_id: e.session_id.clone(),
                seq: e.seq,
                event: s.clone(),
            }),
            _ => None,
        })
        .collect::<Vec<forge_core::Envelope<SyncEvent>>>();
    for env in &sync {
        single.apply(std::slice::from_ref(env)).await.unwrap();
    }
    let single_all = forge_core::read_all(&single, &tenant, &sid, 100)
        .await
        .unwrap();
    assert_eq!(single_all, all);
    if let Some(schema) = schema {
        schema.drop().await.unwrap();
    }
}

/// The Postgres server for the worker's copy: `FORGE_TEST_POSTGRES_URL`. Unset, the copy
/// goes to memory and the test says so — unless `FORGE_TEST_REQUIRE_SERVICES=1`.
fn postgres_url() -> Option<String> {
    forge_testkit::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "the worker projects into memory instead of Postgres",
    )
}
