//! SQLite's search index (FTS5) against real files: equal to the scan over random
//! batches and a history of overwrites, moves, removals and deletions in two tenants;
//! `search=off` keeps none and refuses to search, `search=on` builds it from the rows
//! (also for a database of schema version 5), and the next `search=off` drops it.

mod common;

use std::path::Path;

use common::search::{assert_history_found, assert_index_is_the_scan, history};
use common::*;
use forge_core::{Envelope, ErrorKind, SearchKind, SearchQuery, Store, SyncEvent};
use forge_sql::SqliteStore;
use proptest::prelude::*;
use sqlx::{Connection, SqliteConnection};

fn url(dir: &Path, query: &str) -> String {
    let url = format!("sqlite://{}", dir.join("forge.db").display());
    if query.is_empty() {
        url
    } else {
        format!("{url}?{query}")
    }
}

async fn open(dir: &Path, query: &str) -> SqliteStore {
    SqliteStore::open(&url(dir, query)).await.unwrap()
}

/// `SELECT <sql>` (one integer) on the file, behind the store's back.
async fn count(dir: &Path, sql: &'static str) -> i64 {
    let mut conn = SqliteConnection::connect(&url(dir, "")).await.unwrap();
    let n: i64 = sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    n
}

/// Rows of `search_docs`, and documents of the FTS5 index (its `docsize` table).
async fn entries(dir: &Path) -> (i64, i64) {
    (
        count(dir, "SELECT count(*) FROM search_docs").await,
        count(dir, "SELECT count(*) FROM search_docsize").await,
    )
}

async fn recorded(dir: &Path) -> i64 {
    count(dir, "SELECT value FROM forge_meta WHERE key = 'search'").await
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(16)))]

    #[test]
    fn random_batches_leave_the_index_equal_to_the_scan(batches in differential::batches()) {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let store = open(dir.path(), "").await;
            for (i, batch) in batches.iter().enumerate() {
                let batch: Vec<Envelope<SyncEvent>> =
                    batch.iter().flat_map(differential::to_envelopes).collect();
                // A batch may fail (a missing parent): it leaves nothing, the index included.
                let _ = store.apply(&batch).await;
                if i % 4 == 3 {
                    assert_index_is_the_scan(&store).await?;
                }
            }
            assert_index_is_the_scan(&store).await?;
            store.close().await;
            Ok::<_, TestCaseError>(())
        })?;
    }
}

#[test]
fn each_word_is_found_where_the_rows_hold_it_now() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let store = open(dir.path(), "").await;
        assert_eq!(store.capabilities().search, SearchKind::Index);
        apply_all(&store, &history()).await;
        assert_history_found(&store).await;
        store.close().await;
        // One entry per part that holds words, none left by a removal.
        assert_eq!(entries(dir.path()).await, (5, 5));
        let again = open(dir.path(), "").await;
        assert_history_found(&again).await;
        again.close().await;
    });
}

#[test]
fn search_off_keeps_no_index_and_the_next_search_on_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let recorder = forge_testkit::logs::Recorder::default();
        let _logs = tracing::subscriber::set_default(recorder.clone());

        let off = open(dir.path(), "search=off").await;
        assert_eq!(off.capabilities().search, SearchKind::Off);
        apply_all(&off, &history()).await;
        let err = off
            .search(&tenant("a"), &SearchQuery::new("puffin"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(err.to_string().contains("search=off"), "{err}");
        off.close().await;
        assert_eq!(
            (entries(dir.path()).await, recorded(dir.path()).await),
            ((0, 0), 0)
        );

        let on = open(dir.path(), "search=on").await;
        let records = recorder.take().records;
        assert!(
            records.iter().any(
                |r| r.starts_with("search=on: built the search index") && r.contains(" parts=")
            ),
            "{records:?}"
        );
        assert_history_found(&on).await;
        on.close().await;
        assert_eq!(entries(dir.path()).await, (5, 5));
        assert_eq!(recorded(dir.path()).await, 1);

        // Reopened as it is: nothing to do, nothing said.
        open(dir.path(), "").await.close().await;
        assert!(recorder
            .take()
            .records
            .iter()
            .all(|r| !r.contains("search")));

        let off = open(dir.path(), "search=off").await;
        off.close().await;
        let records = recorder.take().records;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("search=off: dropped the search index")),
            "{records:?}"
        );
        assert_eq!(
            (entries(dir.path()).await, recorded(dir.path()).await),
            ((0, 0), 0)
        );

        let on = open(dir.path(), "").await;
        assert_history_found(&on).await;
        on.close().await;
    });
}

#[test]
fn a_database_of_schema_version_5_gets_its_parts_indexed() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let store = open(dir.path(), "").await;
        apply_all(&store, &history()).await;
        store.close().await;
        // What a release of schema version 5 left: no index, no record of one.
        let mut conn = SqliteConnection::connect(&url(dir.path(), ""))
            .await
            .unwrap();
        for sql in [
            "DROP TRIGGER parts_unindex",
            "DROP TRIGGER parts_reindex",
            "DROP TABLE search",
            "DROP TABLE search_docs",
            "DELETE FROM forge_meta WHERE key = 'search'",
            "UPDATE forge_meta SET value = 5 WHERE key = 'schema_version'",
        ] {
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();

        let recorder = forge_testkit::logs::Recorder::default();
        let logs = tracing::subscriber::set_default(recorder.clone());
        let again = open(dir.path(), "").await;
        drop(logs);
        let records = recorder.take().records;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("search=on: built the search index")),
            "{records:?}"
        );
        assert_eq!(
            count(
                dir.path(),
                "SELECT value FROM forge_meta WHERE key = 'schema_version'"
            )
            .await,
            forge_sql::sqlite::SCHEMA_VERSION
        );
        assert_history_found(&again).await;
        again.close().await;
    });
}
