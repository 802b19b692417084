//! Writers claim the sessions they write: one writer per session, creators of one id
//! answered once, claims released on close.

use std::sync::Arc;
use std::time::Duration;

use forge_store::backend::{LocalBus, MemoryStore};
use forge_store::model::Session;
use forge_store::{
    ClaimPolicy, Engine, ErrorKind, Forge, OnHeld, OpenOptions, ReplayOptions, SessionId, Store,
    TenantId,
};

const TURN: &str = r#"{"type":"user","text":"hi"}
{"type":"text-start","id":"t"}
{"type":"text-delta","id":"t","text":"hello"}
{"type":"text-end","id":"t"}
{"type":"finish","finishReason":"stop"}"#;

/// A writer named `holder` on `store`, as another process on the same database is.
fn writer(store: &Arc<MemoryStore>, holder: &str, on_held: OnHeld) -> Forge {
    let policy = ClaimPolicy::holder(holder).on_held(on_held);
    let store: Arc<dyn Store> = store.clone();
    Forge::new(Engine::direct_claiming(
        store,
        Arc::new(LocalBus::new()),
        policy,
    ))
}

fn session(id: &str) -> Session {
    let mut s = Session::new("created", 1);
    s.id = SessionId::from(id);
    s
}

#[tokio::test]
async fn of_concurrent_creators_of_one_id_in_one_process_one_succeeds() {
    let forge = forge_store::open_with("memory://", OpenOptions::new())
        .await
        .unwrap();
    let tenant = TenantId::default();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (forge, tenant) = (forge.clone(), tenant.clone());
            tokio::spawn(async move { forge.create_session(&tenant, session("ses_once")).await })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                assert!(e.to_string().contains("ses_once"), "{e}");
            }
        }
    }
    assert_eq!(created, 1);
}

#[tokio::test]
async fn of_concurrent_creators_in_two_processes_one_succeeds() {
    let tenant = TenantId::default();
    for (round, on_held) in [OnHeld::Fail, OnHeld::TakeOver].into_iter().enumerate() {
        let store = Arc::new(MemoryStore::new());
        let a = writer(&store, "a@test:1", on_held);
        let b = writer(&store, "b@test:2", on_held);
        let id = format!("ses_race{round}");
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let forge = if i % 2 == 0 { a.clone() } else { b.clone() };
                let (tenant, id) = (tenant.clone(), id.clone());
                tokio::spawn(async move { forge.create_session(&tenant, session(&id)).await })
            })
            .collect();
        let mut created = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => created += 1,
                Err(e) => assert!(
                    matches!(
                        e.kind(),
                        ErrorKind::Conflict | ErrorKind::Held | ErrorKind::Fenced
                    ),
                    "{on_held:?}: {e}"
                ),
            }
        }
        assert_eq!(created, 1, "{on_held:?}");
    }
}

#[tokio::test]
async fn a_held_session_names_its_holder_until_it_is_released_on_close() {
    let store = Arc::new(MemoryStore::new());
    let tenant = TenantId::default();
    let first = writer(&store, "serve@test:1", OnHeld::Fail);
    let sid = SessionId::from("ses_held");
    first
        .create_session(&tenant, session("ses_held"))
        .await
        .unwrap();

    let second = writer(&store, "replay@test:2", OnHeld::Fail);
    let opts = ReplayOptions::default().session(sid.clone());
    let err = second
        .replay_str(&tenant, TURN, opts.clone())
        .await
        .unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Held, "{}", err.error);
    assert!(
        err.error.to_string().contains("serve@test:1"),
        "{}",
        err.error
    );

    first.close().await.unwrap();
    let claim = store.claimed(&tenant, &sid).await.unwrap().unwrap();
    assert_eq!(claim.expires_ms, 0, "close released the claim: {claim:?}");
    second.replay_str(&tenant, TURN, opts).await.unwrap();
    assert_eq!(second.history_all(&tenant, &sid).await.unwrap().len(), 2);
    // A replay lets go of its session when it ends: the next writer need not wait.
    let claim = store.claimed(&tenant, &sid).await.unwrap().unwrap();
    assert_eq!(
        (claim.holder.as_str(), claim.expires_ms),
        ("replay@test:2", 0),
        "{claim:?}"
    );
}

#[tokio::test]
async fn a_waiting_writer_gets_the_session_once_its_holder_closes() {
    let store = Arc::new(MemoryStore::new());
    let tenant = TenantId::default();
    let first = writer(&store, "import@test:1", OnHeld::Fail);
    let sid = SessionId::from("ses_wait");
    first
        .create_session(&tenant, session("ses_wait"))
        .await
        .unwrap();
    let second = writer(
        &store,
        "import@test:2",
        OnHeld::Wait(Duration::from_secs(10)),
    );
    let closing = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        first.close().await
    });
    let opts = ReplayOptions::default().session(sid.clone());
    second.replay_str(&tenant, TURN, opts).await.unwrap();
    closing.await.unwrap().unwrap();
    let claim = store.claimed(&tenant, &sid).await.unwrap().unwrap();
    assert_eq!(claim.holder, "import@test:2");

    // Waiting is bounded: a holder that stays is reported after the wait.
    let stays = writer(&store, "serve@test:4", OnHeld::Fail);
    stays
        .create_session(&tenant, session("ses_stays"))
        .await
        .unwrap();
    let third = writer(
        &store,
        "import@test:3",
        OnHeld::Wait(Duration::from_millis(300)),
    );
    let started = std::time::Instant::now();
    let opts = ReplayOptions::default().session(SessionId::from("ses_stays"));
    let err = third.replay_str(&tenant, TURN, opts).await.unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Held, "{}", err.error);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_writer_taken_over_is_refused_and_writes_nothing() {
    let store = Arc::new(MemoryStore::new());
    let tenant = TenantId::default();
    let first = writer(&store, "serve@test:1", OnHeld::Fail);
    let sid = SessionId::from("ses_taken");
    first
        .create_session(&tenant, session("ses_taken"))
        .await
        .unwrap();
    let second = writer(&store, "recover@test:2", OnHeld::TakeOver);
    let opts = ReplayOptions::default().session(sid.clone());
    second
        .replay_str(&tenant, TURN, opts.clone())
        .await
        .unwrap();
    let before = second.history_all(&tenant, &sid).await.unwrap();

    let err = first.replay_str(&tenant, TURN, opts).await.unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Fenced, "{}", err.error);
    assert!(
        err.error.to_string().contains("recover@test:2"),
        "{}",
        err.error
    );
    assert_eq!(first.history_all(&tenant, &sid).await.unwrap(), before);
}
