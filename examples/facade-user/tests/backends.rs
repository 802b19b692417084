//! The facade tour on every backend this crate's features enable. Postgres and Redis
//! run when `FORGE_TEST_POSTGRES_URL` / `FORGE_TEST_REDIS_URL` are set; otherwise they
//! print `SKIPPED` (and fail under `FORGE_TEST_REQUIRE_SERVICES=1`).

use forge_example_facade_user::{open_error, tour, Seen};
use forge_store::TenantId;

fn tenant() -> TenantId {
    TenantId::new("facade-tour").expect("tenant")
}

fn check(backend: &str, seen: &Seen) {
    assert_eq!(
        seen.first_answer, "Two files: main.rs and lib.rs.",
        "{backend}"
    );
    // Three user messages and three answers (the third cut off, then recovered).
    assert_eq!(seen.messages, 6, "{backend}: {seen:?}");
    assert_eq!(seen.view, 4, "{backend}: the view before the third turn");
    assert_eq!(seen.imported, 4, "{backend}");
    assert!(seen.round_trip_equal, "{backend}: export → import → export");
    assert_eq!(seen.recovered_parts, 1, "{backend}: the half-written text");
    assert_eq!(seen.recovered_again, 0, "{backend}: recover is idempotent");
}

/// A service URL from the environment, or `None` after saying the test is skipped.
fn service(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("FORGE_TEST_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{var} is required (FORGE_TEST_REQUIRE_SERVICES=1)"
            );
            eprintln!("SKIPPED: {test}: set {var} to run it");
            None
        }
    }
}

#[tokio::test]
async fn memory() {
    check("memory", &tour("memory://", &tenant()).await.expect("tour"));
}

/// The tour on a file backend (`scheme`), in a fresh file `name` of a temporary
/// directory.
#[cfg(any(feature = "redb", feature = "sqlite"))]
async fn file_tour(scheme: &str, name: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("{scheme}://{}", dir.path().join(name).display());
    check(scheme, &tour(&url, &tenant()).await.expect("tour"));
}

#[cfg(feature = "redb")]
#[tokio::test]
async fn redb() {
    file_tour("redb", "forge.redb").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite() {
    file_tour("sqlite", "forge.db").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres() {
    use forge_store::sql::postgres::testing::TestSchema;
    let Some(base) = service("FORGE_TEST_POSTGRES_URL", "postgres") else {
        return;
    };
    let schema = TestSchema::create(&base).await.expect("schema");
    let seen = tour(&schema.url(), &tenant()).await;
    schema.drop().await.expect("drop schema");
    check("postgres", &seen.expect("tour"));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis() {
    let Some(base) = service("FORGE_TEST_REDIS_URL", "redis") else {
        return;
    };
    let prefix = format!("forge-facade-{}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}prefix={prefix}");
    let seen = tour(&url, &tenant()).await;
    delete_prefix(&base, &prefix).await;
    check("redis", &seen.expect("tour"));
}

#[cfg(feature = "redis")]
async fn delete_prefix(url: &str, prefix: &str) {
    use futures::StreamExt;
    use redis::AsyncCommands;
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let keys: Vec<String> = {
        let mut scan = conn
            .scan_match::<_, String>(format!("{prefix}:*"))
            .await
            .expect("scan");
        let mut keys = Vec::new();
        while let Some(k) = scan.next().await {
            keys.push(k.expect("scan"));
        }
        keys
    };
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .expect("del");
    }
}

#[tokio::test]
async fn errors_name_the_url_without_its_password() {
    let msg = open_error("postgres://app:hunter2@127.0.0.1:1/forge").await;
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(msg.contains("app:***@127.0.0.1:1"), "{msg}");
    let msg = open_error("mysql://root:hunter2@db/x").await;
    assert!(
        msg.contains("unknown backend scheme") && !msg.contains("hunter2"),
        "{msg}"
    );
}
