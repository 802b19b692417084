//! `follow` stops at a session another writer holds, naming the holder, instead of
//! reconnecting for ever; taking over, it stores the session. Against a stand-in for
//! opencode's API that lists one session and sends no events.

use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use forge_server::{FollowOptions, FollowReport};
use forge_store::backend::{LocalBus, MemoryStore};
use forge_store::model::Session;
use forge_store::{ClaimPolicy, Engine, ErrorKind, Forge, OnHeld, SessionId, Store, TenantId};
use serde_json::json;

/// A stand-in for `opencode serve`: `GET /session` lists `session`, its messages are
/// none, and `/event` stays open without events.
async fn opencode(session: Session) -> String {
    let listed = serde_json::to_value(vec![session]).expect("session as JSON");
    let app = Router::new()
        .route("/session", get(move || async move { Json(listed) }))
        .route("/session/{id}/message", get(|| async { Json(json!([])) }))
        .route(
            "/event",
            get(|| async {
                let body = axum::body::Body::from_stream(futures::stream::pending::<
                    Result<Vec<u8>, std::io::Error>,
                >());
                ([("content-type", "text/event-stream")], body).into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn writer(store: &Arc<MemoryStore>, holder: &str, on_held: OnHeld) -> Forge {
    let store: Arc<dyn Store> = store.clone();
    Forge::new(Engine::direct_claiming(
        store,
        Arc::new(LocalBus::new()),
        ClaimPolicy::holder(holder).on_held(on_held),
    ))
}

#[tokio::test]
async fn follow_stops_at_a_held_session_naming_its_holder_or_takes_it_over() {
    let store = Arc::new(MemoryStore::new());
    let tenant = TenantId::default();
    let mut session = Session::new("followed", 1);
    session.id = SessionId::from("ses_followed");
    let url = opencode(session.clone()).await;
    let holder = writer(&store, "serve@host:1", OnHeld::Fail);
    holder
        .engine()
        .scope(&tenant, &session.id)
        .await
        .expect("the server claims it");

    let follower = writer(&store, "follow@host:2", OnHeld::Fail);
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let mut report = FollowReport::default();
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        forge_server::follow(
            &follower,
            &tenant,
            &FollowOptions::new(&url),
            stopped.clone(),
            &mut report,
        ),
    )
    .await
    .expect("follow kept reconnecting instead of stopping")
    .expect_err("the session is held");
    assert!(err.to_string().contains("serve@host:1"), "{err}");
    assert!(err.to_string().contains("ses_followed"), "{err}");
    assert!(store.session(&tenant, &session.id).await.unwrap().is_none());

    // Taking over, it stores the session; the holder's next write is refused.
    let taker = writer(&store, "follow@host:3", OnHeld::TakeOver);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let following = {
        let (taker, tenant) = (taker.clone(), tenant.clone());
        tokio::spawn(async move {
            let mut report = FollowReport::default();
            forge_server::follow(
                &taker,
                &tenant,
                &FollowOptions::new(&url),
                stopped,
                &mut report,
            )
            .await
            .map(|()| report)
        })
    };
    let mut stored = None;
    for _ in 0..200 {
        stored = store.session(&tenant, &session.id).await.unwrap();
        if stored.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stored.is_some(), "the session was not stored");
    stop.send(true).expect("stop");
    let report = following.await.expect("task").expect("follow");
    assert_eq!(report.backfilled, 0, "{report:?}");
    let err = holder
        .delete_session(&tenant, &session.id)
        .await
        .expect_err("the holder was taken over");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
}
