//! `POST /session` with an id: of concurrent creators one gets the session and every
//! other a 409 naming it, whether they call one server or two servers on one database.

mod common;

use std::sync::Arc;

use common::{start, two_tenants, TestServer, TOKEN_A};
use forge_server::ServerOptions;
use forge_store::backend::{LocalBus, MemoryStore};
use forge_store::{ClaimPolicy, Engine, Forge, OnHeld, OpenOptions, Store};
use serde_json::{json, Value};

/// Sends `n` creations of session `id`, spread over `servers`, all at once; returns
/// the statuses with their bodies.
async fn create_at_once(servers: &[&TestServer], id: &str, n: usize) -> Vec<(u16, Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let req = servers[i % servers.len()]
                .post("/session", TOKEN_A)
                .json(&json!({"id": id, "title": format!("creator {i}")}));
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let r = req.send().await.expect("request");
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.expect("JSON body"))
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

/// Exactly one creation answered 200; every other 409 with a JSON error naming `id`.
fn one_created(answers: &[(u16, Value)], id: &str) {
    let created: Vec<_> = answers.iter().filter(|(s, _)| *s == 200).collect();
    assert_eq!(created.len(), 1, "{answers:#?}");
    assert_eq!(created[0].1["id"], id);
    for (status, body) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["name"], "Conflict", "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(id), "{body}");
    }
}

/// A server writing to `store` as the writer `holder`, as a server process on the
/// same database is.
async fn server_on(store: &Arc<MemoryStore>, holder: &str, on_held: OnHeld) -> TestServer {
    let store: Arc<dyn Store> = store.clone();
    let engine = Engine::direct_claiming(
        store,
        Arc::new(LocalBus::new()),
        ClaimPolicy::holder(holder).on_held(on_held),
    );
    start(Forge::new(engine), ServerOptions::new(two_tenants())).await
}

#[tokio::test]
async fn concurrent_creators_of_one_id_get_one_session_and_409s() {
    let forge = forge_store::open_with("memory://", OpenOptions::new().writer("serve"))
        .await
        .expect("open memory");
    let s = start(forge, ServerOptions::new(two_tenants())).await;
    for round in 0..3 {
        let id = format!("ses_contended{round}");
        one_created(&create_at_once(&[&s], &id, 32).await, &id);
    }
    // A later creator is answered the same.
    let r = s
        .post("/session", TOKEN_A)
        .json(&json!({"id": "ses_contended0"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 409);
    s.stop().await;
}

#[tokio::test]
async fn two_servers_on_one_database_create_a_session_once() {
    for on_held in [OnHeld::Fail, OnHeld::TakeOver] {
        let store = Arc::new(MemoryStore::new());
        let a = server_on(&store, "serve@host-a:1", on_held).await;
        let b = server_on(&store, "serve@host-b:2", on_held).await;
        for round in 0..3 {
            let id = format!("ses_shared{round}");
            one_created(&create_at_once(&[&a, &b], &id, 32).await, &id);
        }
        a.stop().await;
        b.stop().await;
    }
}

#[tokio::test]
async fn a_session_held_by_another_server_is_a_409_naming_the_holder() {
    let store = Arc::new(MemoryStore::new());
    let a = server_on(&store, "serve@host-a:1", OnHeld::Fail).await;
    let b = server_on(&store, "serve@host-b:2", OnHeld::Fail).await;
    a.create(TOKEN_A, "ses_held").await;
    let ndjson = r#"{"type":"user","text":"hi"}"#.to_owned();
    let (status, body) = b.upload(TOKEN_A, "ses_held", ndjson).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["name"], "Conflict", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("serve@host-a:1"), "{body}");
    a.stop().await;
    b.stop().await;
}

/// Two servers on one SQLite file (or the Postgres of `FORGE_TEST_POSTGRES_URL`): the
/// claim is the database's, so one creation wins across them.
#[tokio::test]
async fn two_servers_on_one_sql_database_create_a_session_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut urls = vec![format!(
        "sqlite://{}",
        dir.path().join("serve.sqlite").display()
    )];
    if let Ok(url) = std::env::var("FORGE_TEST_POSTGRES_URL") {
        urls.push(url);
    }
    for url in urls {
        let open = |role: &str| OpenOptions::new().writer(role);
        let Ok(first) = forge_store::open_with(&url, open("serve-a")).await else {
            panic!("cannot open {url}");
        };
        let second = forge_store::open_with(&url, open("serve-b"))
            .await
            .expect("second handle");
        let a = start(first, ServerOptions::new(two_tenants())).await;
        let b = start(second, ServerOptions::new(two_tenants())).await;
        let id = format!("ses_sql{}", forge_store::id::now_ms());
        one_created(&create_at_once(&[&a, &b], &id, 16).await, &id);
        a.stop().await;
        b.stop().await;
    }
}
