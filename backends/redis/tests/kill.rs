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

use common::{engine, start_answer, stream_text, TestPrefix};
use forge_core::id::now_ms;
use forge_core::{Event, MemoryStore, Session, SessionId, Store, TenantId, Topic};
use forge_redis::{ProjectorWorker, WorkerOptions};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::PostgresStore;

const CHILD: &str = "FORGE_REDIS_REPLICA_CHILD";

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
    session.id = sid;
    let mut p = start_answer(&a, &tenant, session, "go").await;
    for i in 0u64.. {
        stream_text(&mut p, &format!("w{i} ")).await;
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_is_recovered_by_another_from_the_stream() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let url = &p.url;
    let tenant = TenantId::new("t1").unwrap();
    let sid: SessionId = "ses_kill".into();

    // Replica B subscribes before A exists: from seq 1, it must see everything. It
    // recovers what A left while A's claim still runs, so it takes the session over.
    let b = {
        let e = engine(url).await;
        let policy =
            forge_core::ClaimPolicy::holder("replica-b").on_held(forge_core::OnHeld::TakeOver);
        forge_core::Engine::direct_claiming(e.store, e.bus, policy)
    };
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
        .env(CHILD, url)
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
        url,
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
    let replay = b.bus.replay(&tenant, &sid, 1).await.unwrap();
    // Into a store of its own, which no writer claimed: unfenced.
    for env in common::sync_events(&replay.events) {
        single.apply(&[env.with_epoch(None)]).await.unwrap();
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
