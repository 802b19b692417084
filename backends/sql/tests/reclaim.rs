//! `Store::reclaim` on SQLite (incremental vacuum; an older file without it is
//! converted on open) and Postgres (`VACUUM` as the URL's privileged user): nothing kept
//! changes.

use std::sync::Arc;

use forge_core::Store;
use forge_sql::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gives_its_free_pages_back_in_steps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reclaim.db");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap(),
    );
    let r = forge_testkit::stores::assert_reclaim_keeps_what_is_stored(Arc::clone(&store)).await;
    assert!(
        r.reclaimed.action.starts_with("incremental_vacuum: "),
        "{r:?}"
    );
    let (full, after) = r.item("reclaim.db");
    assert!(
        after * 3 < full,
        "the file went from {full} to {after} bytes"
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_file_made_without_auto_vacuum_is_converted_when_opened() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url).await.unwrap();
    let t = forge_core::TenantId::default();
    let session = forge_core::Session::new("kept", 1_700_000_000_000);
    let id = session.id.clone();
    store
        .apply(&[forge_core::Envelope {
            tenant: t.clone(),
            session_id: id.clone(),
            seq: 1,
            epoch: None,
            event: forge_core::SyncEvent::SessionUpdated { info: session },
        }])
        .await
        .unwrap();
    Store::close(&store).await.unwrap();
    drop(store);
    // As a file of an earlier release: no auto-vacuum.
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for sql in ["PRAGMA auto_vacuum = NONE", "VACUUM"] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, 0);
    conn.close().await.unwrap();

    let store = SqliteStore::open(&url).await.unwrap();
    assert!(store.session(&t, &id).await.unwrap().is_some());
    Store::close(&store).await.unwrap();
    drop(store);
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, 2, "opened once, the file is incremental");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_vacuums_and_keeps_every_kept_row() {
    let Some(url) = forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", "Postgres") else {
        return;
    };
    let schema = forge_sql::postgres::testing::TestSchema::create_for(&url, "reclaim")
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(
        forge_sql::PostgresStore::connect(&schema.url())
            .await
            .unwrap(),
    );
    let r = forge_testkit::stores::assert_reclaim_keeps_what_is_stored(Arc::clone(&store)).await;
    // Opened by a superuser (the test server's): it vacuums as that user.
    assert!(r.reclaimed.action.starts_with("VACUUM: "), "{r:?}");
    store.close().await.unwrap();
    drop(store);
    schema.drop().await.unwrap();
}
