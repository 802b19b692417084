//! ProjectorWorker: a consumer group projecting a Redis stream into another store,
//! at least once, idempotent, with takeover of a dead worker's pending entries.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{user_message, TestPrefix};
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{
    Engine, Envelope, Error, Forward, MemoryStore, MessageWithParts, Outcome, ProcessorOptions,
    Result, Session, SessionId, Store, SyncEvent, TenantId,
};
use forge_redis::{ProjectorWorker, WorkerOptions};

const OPTS: WorkerOptions = WorkerOptions {
    lease: Duration::from_millis(400),
    count: 7, // small, so a run takes several rounds
};

/// A fresh prefix, tenant `t1`, and one finished turn and one turn interrupted
/// mid-text written through an engine on the prefix; the engine and the session.
async fn source() -> Option<(TestPrefix, TenantId, Engine, SessionId)> {
    let p = TestPrefix::new()?;
    let tenant = TenantId::new("t1").unwrap();
    let engine = common::engine(&p.url).await;
    let session = Session::new("replicated", now_ms());
    let sid = session.id.clone();
    let scope = engine.put_session(&tenant, session).await.unwrap();
    for turn in 0..2 {
        let (user, part) = user_message(&sid, &format!("msg_{turn}a"), &format!("prt_{turn}"), "q");
        engine
            .put_message(&scope, user.clone(), vec![part])
            .await
            .unwrap();
        let mut m = assistant_message(sid.clone(), user.id.clone(), "p", "m", now_ms());
        m.id = format!("msg_{turn}b").into();
        let mut p = engine
            .processor(scope.clone(), m, ProcessorOptions::default())
            .await
            .unwrap();
        for line in [
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"one "}"#,
            r#"{"type":"text-delta","id":"t","text":"two"}"#,
            r#"{"type":"text-end","id":"t"}"#,
            r#"{"type":"tool-call","toolCallId":"c","toolName":"x","input":{"a":1}}"#,
        ] {
            common::handle(&mut p, line).await;
        }
        if turn == 0 {
            p.finalize(Outcome::Finished).await.unwrap();
        }
    }
    engine.bus.flush().await.unwrap();
    Some((p, tenant, engine, sid))
}

async fn history(store: &dyn Store, t: &TenantId, s: &SessionId) -> Vec<MessageWithParts> {
    forge_core::read_all(store, t, s, 100).await.unwrap()
}

/// Steps until a round handles nothing twice in a row.
async fn drain(w: &mut ProjectorWorker) {
    let mut idle = 0;
    while idle < 2 {
        let n = tokio::time::timeout(Duration::from_secs(10), w.step())
            .await
            .expect("step hung")
            .unwrap();
        idle = if n == 0 && w.is_active() { idle + 1 } else { 0 };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_projects_the_stream_into_another_store_idempotently() {
    let Some((p, tenant, engine, sid)) = source().await else {
        return;
    };
    let url = &p.url;

    let target = Arc::new(MemoryStore::new());
    let mut w = ProjectorWorker::connect(url, target.clone(), tenant.clone(), "g", "w1", OPTS)
        .await
        .unwrap();
    drain(&mut w).await;
    let want = history(engine.store.as_ref(), &tenant, &sid).await;
    assert_eq!(want.len(), 4);
    assert_eq!(history(target.as_ref(), &tenant, &sid).await, want);
    assert_eq!(
        target.session(&tenant, &sid).await.unwrap(),
        engine.store.session(&tenant, &sid).await.unwrap()
    );
    let stats = w.stats();
    assert!(
        stats.applied > 0 && stats.skipped == 0 && stats.rejected == 0,
        "{stats:?}"
    );

    // Redeliver everything: nothing is applied twice, the store is unchanged.
    let mut conn = p.conn();
    let stream = format!("{}:t:{{t1}}:bus", p.prefix);
    let _: () = redis::cmd("XGROUP")
        .arg("SETID")
        .arg(&stream)
        .arg("g")
        .arg("0")
        .query(&mut conn)
        .unwrap();
    drain(&mut w).await;
    assert_eq!(w.stats().applied, stats.applied);
    assert_eq!(w.stats().skipped, stats.applied);
    assert_eq!(history(target.as_ref(), &tenant, &sid).await, want);
}

/// A target store whose commits fail: the worker reads, cannot commit, and dies.
#[derive(Debug)]
struct Broken(MemoryStore);

#[async_trait]
impl Forward for Broken {
    fn inner(&self) -> &dyn Store {
        &self.0
    }
    async fn apply(&self, _: &[Envelope<SyncEvent>]) -> Result<()> {
        Err(Error::backend("test", true, "target store down"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_worker_claims_what_a_dead_worker_left_pending() {
    let Some((p, tenant, engine, sid)) = source().await else {
        return;
    };
    let url = &p.url;

    let mut dead = ProjectorWorker::connect(
        url,
        Arc::new(Broken(MemoryStore::new())),
        tenant.clone(),
        "g",
        "dead",
        OPTS,
    )
    .await
    .unwrap();
    assert!(dead.step().await.is_err(), "the commit fails");
    assert!(dead.is_active());
    drop(dead); // dies holding the lease and 7 pending entries

    let target = Arc::new(MemoryStore::new());
    let mut standby =
        ProjectorWorker::connect(url, target.clone(), tenant.clone(), "g", "standby", OPTS)
            .await
            .unwrap();
    assert_eq!(standby.step().await.unwrap(), 0);
    assert!(
        !standby.is_active(),
        "the dead worker's lease has not expired yet"
    );
    drain(&mut standby).await;
    assert_eq!(standby.stats().claimed, 7, "{:?}", standby.stats());
    assert_eq!(
        history(target.as_ref(), &tenant, &sid).await,
        history(engine.store.as_ref(), &tenant, &sid).await
    );
    let mut conn = p.conn();
    let pending: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
        .arg(format!("{}:t:{{t1}}:bus", p.prefix))
        .arg("g")
        .query(&mut conn)
        .unwrap();
    assert_eq!(pending.0, 0, "everything ACKed");
}
