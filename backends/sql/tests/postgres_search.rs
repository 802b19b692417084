//! Postgres's search index (`parts.search`, GIN) against the server of
//! `FORGE_TEST_POSTGRES_URL`, each test in a fresh schema: equal to the scan over random
//! batches and a history of overwrites, moves, removals and deletions in two tenants;
//! `search=off` keeps none and refuses to search, `search=on` builds it from the rows
//! (for a schema of version 5, with another `search_language`, and as an owner bound
//! by row-level security), the next `search=off` drops it.

mod common;
#[path = "postgres/support.rs"]
#[allow(dead_code)] // the helpers the other Postgres tests use
mod support;

use common::search::{assert_history_found, assert_index_is_the_scan, found, history, text_part};
use common::*;
use forge_core::{Envelope, ErrorKind, SearchKind, SearchQuery, Store, SyncEvent};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::PostgresStore;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sqlx::{Connection, PgConnection};
use support::*;

async fn connect(schema: &TestSchema, query: &str) -> forge_core::Result<PostgresStore> {
    let url = if query.is_empty() {
        schema.url()
    } else {
        format!("{}&{query}", schema.url())
    };
    PostgresStore::connect(&url).await
}

/// The `forge_meta` row `search` (value, note), and whether `parts.search` exists.
async fn recorded(conn: &mut PgConnection) -> (Option<(i64, Option<String>)>, bool) {
    let row = sqlx::query_as("SELECT value, note FROM forge_meta WHERE key = 'search'")
        .fetch_optional(&mut *conn)
        .await
        .unwrap();
    let column: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = \
         current_schema() AND table_name = 'parts' AND column_name = 'search')",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    (row, column)
}

fn on(config: &str) -> (Option<(i64, Option<String>)>, bool) {
    (Some((1, Some(config.to_owned()))), true)
}

#[test]
fn random_batches_leave_the_index_equal_to_the_scan() {
    if postgres_url("search_random_batches").is_none() {
        return;
    }
    let mut runner = TestRunner::new(ProptestConfig {
        cases: proptest_cases(6),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&differential::batches(), |batches| {
        let mut result = Ok(());
        runtime().block_on(with_fresh("search_random_batches", async |_, db| {
            for batch in &batches {
                let batch: Vec<Envelope<SyncEvent>> =
                    batch.iter().flat_map(differential::to_envelopes).collect();
                let _ = db.apply(&batch).await;
            }
            result = assert_index_is_the_scan(db).await;
        }));
        result
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn each_word_is_found_where_the_rows_hold_it_now() {
    runtime().block_on(with_fresh("search_history", async |_, store| {
        assert_eq!(store.capabilities().search, SearchKind::Index);
        apply_all(store, &history()).await;
        assert_history_found(store).await;
    }));
}

#[test]
fn search_off_keeps_no_index_and_the_next_search_on_builds_it() {
    runtime().block_on(with_fresh("search_on_off", async |schema, first| {
        first.close().await;
        let mut conn = raw(schema).await;
        let recorder = forge_testkit::logs::Recorder::default();
        let _logs = tracing::subscriber::set_default(recorder.clone());

        let off = connect(schema, "search=off").await.unwrap();
        assert_eq!(off.capabilities().search, SearchKind::Off);
        apply_all(&off, &history()).await;
        let err = off
            .search(&tenant("a"), &SearchQuery::new("puffin"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(err.to_string().contains("search=off"), "{err}");
        off.close().await;
        assert_eq!(recorded(&mut conn).await, (Some((0, None)), false));

        let store = connect(schema, "").await.unwrap();
        let records = recorder.take().records;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("search=on: built the search index")
                    && r.contains(" language=simple")),
            "{records:?}"
        );
        assert_eq!(recorded(&mut conn).await, on("simple"));
        assert_history_found(&store).await;
        store.close().await;

        // Another configuration rebuilds the column with it. Stems find candidates,
        // words decide: `errors` is not `error`, and the stop word `the` is still found.
        let english = connect(schema, "search_language=English").await.unwrap();
        assert_eq!(recorded(&mut conn).await, on("english"));
        assert_history_found(&english).await;
        english
            .apply(&[
                put_message("b", "ses_1", "msg_2", 0, 4),
                env(
                    "b",
                    "ses_1",
                    5,
                    SyncEvent::PartUpdated {
                        part: text_part("ses_1", "msg_2", "prt_2", "errors of the walruses"),
                    },
                ),
            ])
            .await
            .unwrap();
        assert_eq!(
            found(&english, "b", None, "error").await,
            ["ses_1/msg_1/prt_1"]
        );
        assert_eq!(
            found(&english, "b", None, "errors").await,
            ["ses_1/msg_2/prt_2"]
        );
        assert_eq!(
            found(&english, "b", None, "the").await,
            ["ses_1/msg_1/prt_1", "ses_1/msg_2/prt_2"]
        );
        english.close().await;

        let err = connect(schema, "search_language=klingon")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(
            err.to_string().contains("search_language=\"klingon\""),
            "{err}"
        );
        assert_eq!(recorded(&mut conn).await, on("english"));

        connect(schema, "search=off").await.unwrap().close().await;
        let records = recorder.take().records;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("search=off: dropped the search index")),
            "{records:?}"
        );
        assert_eq!(recorded(&mut conn).await, (Some((0, None)), false));

        let again = connect(schema, "").await.unwrap();
        assert_history_found(&again).await;
        again.close().await;
        conn.close().await.unwrap();
    }));
}

#[test]
fn a_schema_of_version_5_gets_its_parts_indexed() {
    runtime().block_on(with_fresh("search_upgrade", async |schema, store| {
        apply_all(store, &history()).await;
        store.close().await;
        // What a release of schema version 5 left: no index, no record of one.
        let mut conn = raw(schema).await;
        exec(&mut conn, "ALTER TABLE parts DROP COLUMN search").await;
        exec(&mut conn, "ALTER TABLE forge_meta DROP COLUMN note").await;
        exec(&mut conn, "DELETE FROM forge_meta WHERE key = 'search'").await;
        exec(
            &mut conn,
            "UPDATE forge_meta SET value = 5 WHERE key = 'schema_version'",
        )
        .await;

        let again = connect(schema, "").await.unwrap();
        let version: i64 =
            sqlx::query_scalar("SELECT value FROM forge_meta WHERE key = 'schema_version'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(version, forge_sql::postgres::SCHEMA_VERSION);
        assert_eq!(recorded(&mut conn).await, on("simple"));
        assert_history_found(&again).await;
        again.close().await;
        conn.close().await.unwrap();
    }));
}

#[test]
fn an_owner_bound_by_row_level_security_indexes_every_tenant() {
    let test = with_role_and_schema("search_owner", "forge_owner", async |url, role, schema| {
        let mut admin = PgConnection::connect(url).await.unwrap();
        exec_raw(
            &mut admin,
            format!(
                "CREATE ROLE \"{role}\" LOGIN; ALTER SCHEMA \"{}\" OWNER TO \"{role}\"",
                schema.name()
            ),
        )
        .await;
        let mut options = forge_sql::PostgresOptions::from_url(&schema.url()).unwrap();
        options.connect = options.connect.username(role);
        options.search = false;
        let off = PostgresStore::connect_with(options.clone()).await.unwrap();
        apply_all(&off, &history()).await;
        off.close().await;

        options.search = true;
        let store = PostgresStore::connect_with(options).await.unwrap();
        assert_eq!(store.current_role().await.unwrap(), role);
        assert_history_found(&store).await;
        store.close().await;
        // The policy binds the owner again.
        let forced: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT relforcerowsecurity FROM pg_class WHERE oid = '\"{}\".parts'::regclass",
            schema.name()
        )))
        .fetch_one(&mut admin)
        .await
        .unwrap();
        assert!(forced);
        // A privileged user connecting later adds the search function and finds the same.
        let privileged = PostgresStore::connect(&schema.url()).await.unwrap();
        assert_history_found(&privileged).await;
        privileged.close().await;
        admin.close().await.unwrap();
        schema.drop().await.unwrap();
    });
    runtime().block_on(test);
}
