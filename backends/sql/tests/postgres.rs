//! `PostgresStore` against the server of `FORGE_TEST_POSTGRES_URL`, each test in a fresh
//! schema that it drops: equal to `MemoryStore` for random batches, atomic per batch,
//! safe under concurrent writers, refusing newer schema versions, exact for JSON values,
//! tenant isolation enforced by the database under the application role (fence records
//! included), and fencing writers (also two pools on one schema, and across an upgrade).
//!
//! Without the variable every test prints `SKIPPED: FORGE_TEST_POSTGRES_URL not set` and
//! passes, unless `FORGE_TEST_REQUIRE_SERVICES=1`, where it fails.

mod common;
#[path = "postgres/support.rs"]
mod support;

use std::sync::Arc;

use common::scenarios::assert_scenarios_match_reference;
use common::*;
use forge_core::Store;
use forge_sql::postgres::testing::TestSchema;
use forge_sql::{PostgresStore, DEFAULT_APP_ROLE};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sqlx::{Connection, PgConnection, Row};
use support::*;

// ---------------------------------------------------------------------------------------
// Differential: PostgresStore equals MemoryStore

#[test]
fn random_batches_leave_postgres_equal_to_the_memory_reference() {
    // Checked once, not per case: without a server there is nothing to generate for.
    if postgres_url("random_batches").is_none() {
        return;
    }
    let mut runner = TestRunner::new(ProptestConfig {
        cases: proptest_cases(8),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&differential::batches(), |batches| {
        let mut result = Ok(());
        runtime().block_on(with_fresh("random_batches", async |_, db| {
            result = differential::run(db, &batches).await;
        }));
        result
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// Atomicity

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    runtime().block_on(with_fresh("a_failing_batch", async |schema, store| {
        stores::assert_failing_batches_leave_nothing(store, || store.write_stats()).await;
        // A new connection (a new pool) sees the same: nothing was left half-written.
        let again = PostgresStore::connect(&schema.url()).await.unwrap();
        stores::assert_holds_atomicity_base(&again).await;
        again.close().await;
    }));
}

#[test]
fn batches_see_their_own_earlier_events() {
    runtime().block_on(with_fresh("in_batch_scenarios", async |_, store| {
        assert_scenarios_match_reference(store).await;
    }));
}

// ---------------------------------------------------------------------------------------
// Schema versions

#[test]
fn a_schema_of_a_newer_version_is_refused() {
    runtime().block_on(with_fresh("newer_schema_version", async |schema, store| {
        apply_all(store, &sample_history()).await;
        store.close().await;
        // Opening again at the current version is fine and changes nothing.
        let again = PostgresStore::connect(&schema.url()).await.unwrap();
        assert_matches_reference(&again, &sample_history()).await;
        again.close().await;

        let mut conn = raw(schema).await;
        exec(
            &mut conn,
            "UPDATE forge_meta SET value = value + 1 WHERE key = 'schema_version'",
        )
        .await;
        let err = PostgresStore::connect(&schema.url()).await.unwrap_err();
        assert!(matches!(err, forge_core::Error::Unsupported(_)), "{err:?}");
        let msg = err.to_string();
        let newer = format!("schema version {}", forge_sql::postgres::SCHEMA_VERSION + 1);
        assert!(msg.contains(&newer) && msg.contains("newer"), "{msg}");

        // A schema of someone else's tables is refused and left alone.
        exec(
            &mut conn,
            "DROP TABLE forge_meta, fences, parts, messages, sessions",
        )
        .await;
        exec(&mut conn, "CREATE TABLE invoices (id int PRIMARY KEY)").await;
        let err = PostgresStore::connect(&schema.url()).await.unwrap_err();
        assert!(matches!(err, forge_core::Error::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains("invoices"), "{err}");
        conn.close().await.unwrap();
    }));
}

// ---------------------------------------------------------------------------------------
// Tenant isolation by row-level security

#[test]
fn row_level_security_hides_other_tenants_from_the_application_role() {
    runtime().block_on(with_fresh("row_level_security", async |schema, store| {
        apply_all(store, &sample_history()).await;
        // Fence records in both tenants, of a session both have.
        assert_eq!(fencing::take_over(store, "a", "ses_1", "wa").await, 1);
        assert_eq!(fencing::take_over(store, "b", "ses_1", "wb").await, 1);
        assert_eq!(fencing::take_over(store, "b", "ses_1", "wb").await, 2);
        // The store itself runs as the application role, not as the URL's superuser.
        assert_eq!(store.current_role().await.unwrap(), DEFAULT_APP_ROLE);

        let mut conn = raw(schema).await;
        // The URL's user bypasses RLS: it sees both tenants (so the rows exist).
        let all = count_rows(&mut conn, None).await;
        assert!(all.iter().any(|(k, _)| k.ends_with("/a")), "{all:?}");
        assert!(all.iter().any(|(k, _)| k.ends_with("/b")), "{all:?}");
        assert!(all.contains(&("fences/a".into(), 1)), "{all:?}");
        assert!(all.contains(&("fences/b".into(), 1)), "{all:?}");

        // Plain SQL as the application role.
        exec_raw(&mut conn, format!("SET ROLE {DEFAULT_APP_ROLE}")).await;
        let who = sqlx::query(
            "SELECT current_user::text, rolsuper, rolbypassrls FROM pg_roles \
             WHERE rolname = current_user",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(who.get::<String, _>(0), DEFAULT_APP_ROLE);
        assert!(
            !who.get::<bool, _>(1) && !who.get::<bool, _>(2),
            "role bypasses RLS"
        );

        // Without the setting no row is visible.
        assert_eq!(count_rows(&mut conn, None).await, vec![]);
        // With tenant a's setting, only tenant a's rows.
        let a = count_rows(&mut conn, Some("a")).await;
        assert!(
            !a.is_empty() && a.iter().all(|(k, _)| k.ends_with("/a")),
            "{a:?}"
        );
        assert_eq!(
            a,
            all.iter()
                .filter(|(k, _)| k.ends_with("/a"))
                .cloned()
                .collect::<Vec<_>>()
        );
        let b = count_rows(&mut conn, Some("b")).await;
        assert!(
            !b.is_empty() && b.iter().all(|(k, _)| k.ends_with("/b")),
            "{b:?}"
        );

        // Nor can tenant a's setting write or change tenant b's rows.
        let mut tx = conn.begin().await.unwrap();
        exec(&mut tx, "SELECT set_config('forge.tenant', 'a', true)").await;
        let touched = exec(
            &mut tx,
            "UPDATE sessions SET seq = seq + 100 WHERE tenant = 'b'",
        )
        .await;
        assert_eq!(touched, 0);
        let denied = sqlx::query(
            "INSERT INTO sessions (tenant, id, seq, body) VALUES ('b', 'x'::bytea, 1, '{}')",
        )
        .execute(&mut *tx)
        .await
        .unwrap_err();
        assert!(
            denied.to_string().contains("row-level security"),
            "{denied}"
        );
        tx.rollback().await.unwrap();
        // Fence records alike: tenant b's cannot be moved back or forged from tenant a.
        let mut tx = conn.begin().await.unwrap();
        exec(&mut tx, "SELECT set_config('forge.tenant', 'a', true)").await;
        let touched = exec(&mut tx, "UPDATE fences SET epoch = 1 WHERE tenant = 'b'").await;
        assert_eq!(touched, 0);
        let denied = sqlx::query(
            "INSERT INTO fences (tenant, session_id, epoch, holder, expires_ms) \
             VALUES ('b', 'ses_9'::bytea, 1, 'x', 0)",
        )
        .execute(&mut *tx)
        .await
        .unwrap_err();
        assert!(
            denied.to_string().contains("row-level security"),
            "{denied}"
        );
        tx.rollback().await.unwrap();
        let b_claim = store
            .claimed(&tenant("b"), &"ses_1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((b_claim.epoch, b_claim.holder.as_str()), (2, "wb"));

        // The store agrees: every read of tenant b is what the reference says.
        assert_matches_reference(store, &sample_history()).await;
        conn.close().await.unwrap();
    }));
}

#[test]
fn a_plain_owner_role_is_bound_by_row_level_security_too() {
    // A deployment whose URL user is an ordinary role owning the schema: no SET ROLE,
    // the tables belong to that user, and FORCE makes the policies bind their owner.
    let test = with_role_and_schema("plain_owner", "forge_owner", async |url, role, schema| {
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
        let store = PostgresStore::connect_with(options.clone()).await.unwrap();
        assert_eq!(store.current_role().await.unwrap(), role);
        apply_all(&store, &sample_history()).await;
        assert_matches_reference(&store, &sample_history()).await;
        assert_eq!(fencing::take_over(&store, "a", "ses_1", "w").await, 1);
        assert_eq!(fencing::take_over(&store, "b", "ses_1", "w").await, 1);

        let mut conn = PgConnection::connect_with(&options.connect).await.unwrap();
        exec_raw(
            &mut conn,
            format!("SET search_path TO \"{}\"", schema.name()),
        )
        .await;
        assert_eq!(count_rows(&mut conn, None).await, vec![]);
        let a = count_rows(&mut conn, Some("a")).await;
        assert!(
            !a.is_empty() && a.iter().all(|(k, _)| k.ends_with("/a")),
            "{a:?}"
        );
        assert!(a.contains(&("fences/a".into(), 1)), "{a:?}");
        conn.close().await.unwrap();

        store.close().await;
        admin.close().await.unwrap();
        schema.drop().await.unwrap();
    });
    runtime().block_on(test);
}

// ---------------------------------------------------------------------------------------
// Concurrency

#[test]
fn concurrent_writers_lose_no_update() {
    parallel_runtime().block_on(with_fresh("concurrent_writers", async |_, store| {
        stores::hammer(&[Arc::new(store.clone())], 12, 15, true).await;
    }));
}

#[test]
fn a_batch_that_waited_for_its_session_sees_the_holders_commit_under_a_serializable_default() {
    parallel_runtime().block_on(async {
        let Some(url) = postgres_url("serializable_default_write") else {
            return;
        };
        let schema = TestSchema::create(&url).await.unwrap();
        let store = PostgresStore::connect(&serializable_by_default(&schema.url()))
            .await
            .unwrap();
        store.apply(&[put_session("a", "ses_1", 1)]).await.unwrap();

        // Another writer's batch on the session holds its lock…
        let key = forge_sql::postgres::testing::session_lock_key(
            schema.name(),
            &tenant("a"),
            &"ses_1".into(),
        );
        let mut holder = raw(&schema).await;
        let mut tx = holder.begin().await.unwrap();
        advisory_lock(&mut tx, key).await;
        // …while ours waits for it.
        let store = Arc::new(store);
        let waiting = tokio::spawn({
            let store = Arc::clone(&store);
            async move {
                store
                    .apply(&[put_message("a", "ses_1", "msg_1", 0, 2)])
                    .await
            }
        });
        let mut watch = raw(&schema).await;
        wait_for_waiters(&mut watch, ADVISORY_KEY, key, 1).await;
        // The holder's batch moves the session to seq 5 and commits.
        sqlx::query("UPDATE sessions SET seq = 5 WHERE tenant = 'a' AND id = $1")
            .bind(b"ses_1".as_slice())
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        // Ours then reads seq 5, not the seq of before its wait: no serialization
        // failure, and the seq is not lowered.
        waiting
            .await
            .unwrap()
            .expect("a batch that waited for its session lock fails");
        let a = tenant("a");
        let state = store.session(&a, &"ses_1".into()).await.unwrap().unwrap();
        assert_eq!(state.seq, 5);
        assert!(store
            .message(&a, &"ses_1".into(), &"msg_1".into())
            .await
            .unwrap()
            .is_some());
        watch.close().await.unwrap();
        holder.close().await.unwrap();
        let store = Arc::into_inner(store).unwrap();
        done(schema, store).await;
    });
}

#[test]
fn connects_that_waited_for_a_migration_see_its_schema_under_a_serializable_default() {
    parallel_runtime().block_on(async {
        let Some(url) = postgres_url("serializable_default_migration") else {
            return;
        };
        let suffix = forge_core::id::ascending("mig").to_lowercase();
        let schema = TestSchema::to_be_made(&url, &suffix).unwrap();
        let target = serializable_by_default(&schema.url());
        // A migration in progress: it holds the migration lock…
        let key = forge_sql::postgres::testing::migration_lock_key();
        let mut holder = PgConnection::connect(&url).await.unwrap();
        let mut tx = holder.begin().await.unwrap();
        advisory_lock(&mut tx, key).await;
        // …while three processes start on the schema that does not exist yet.
        let connects: Vec<_> = (0..3)
            .map(|_| {
                let target = target.clone();
                tokio::spawn(async move { PostgresStore::connect(&target).await })
            })
            .collect();
        let mut watch = PgConnection::connect(&url).await.unwrap();
        wait_for_waiters(&mut watch, ADVISORY_KEY, key, 3).await;
        tx.commit().await.unwrap();
        // The first creates the schema; the others, having waited, find it.
        for c in connects {
            let store = c
                .await
                .unwrap()
                .expect("a connect that waited for another's migration fails");
            store.apply(&[put_session("a", "ses_1", 1)]).await.unwrap();
            store.close().await;
        }
        watch.close().await.unwrap();
        holder.close().await.unwrap();
        schema.drop().await.unwrap();
    });
}

#[test]
fn an_application_role_created_at_the_same_time_by_another_database_is_used() {
    let test = with_role_and_schema("app_role_race", "forge_app", async |url, role, schema| {
        // A migration of another database of the server creating the same application
        // role, not committed yet (the migration lock is per database, so it does not
        // hold this one back).
        let mut other = PgConnection::connect(url).await.unwrap();
        let mut tx = other.begin().await.unwrap();
        exec_raw(&mut tx, format!("CREATE ROLE \"{role}\" NOLOGIN")).await;
        let xid: String = sqlx::query_scalar("SELECT pg_current_xact_id()::text")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        let target = format!("{}&app_role={role}", schema.url());
        let connect = tokio::spawn(async move { PostgresStore::connect(&target).await });
        // Ours finds no role, creates it, and waits for the other's commit.
        let mut watch = PgConnection::connect(url).await.unwrap();
        let xid: i64 = xid.parse().unwrap();
        wait_for_waiters(
            &mut watch,
            "locktype = 'transactionid' AND transactionid::text::bigint = $1",
            xid,
            1,
        )
        .await;
        tx.commit().await.unwrap();
        let store = connect
            .await
            .unwrap()
            .expect("a role created at the same time elsewhere fails the connect");
        assert_eq!(store.current_role().await.unwrap(), role);
        store.apply(&[put_session("a", "ses_1", 1)]).await.unwrap();
        watch.close().await.unwrap();
        other.close().await.unwrap();
        done(schema, store).await;
    });
    parallel_runtime().block_on(test);
}

// ---------------------------------------------------------------------------------------
// Values

#[test]
fn json_numbers_nul_characters_and_unknown_fields_read_back_exactly() {
    runtime().block_on(with_fresh("exact_values", async |_, store| {
        stores::assert_exact_values_read_back(store).await;
    }));
}

#[test]
fn capabilities_report_row_level_security() {
    runtime().block_on(with_fresh("capabilities", async |_, store| {
        stores::assert_durable_capabilities(
            store,
            "postgres",
            forge_core::Tenancy::RowLevelSecurity,
        );
    }));
}

#[test]
fn w1_turn_costs_are_measured() {
    runtime().block_on(with_fresh("w1", async |_, store| {
        w1::assert_measured("postgres", store, PostgresStore::write_stats).await;
    }));
}

#[test]
fn a_value_edited_behind_the_store_is_corrupted_and_a_row_without_checksum_reads() {
    runtime().block_on(with_fresh("value_checksums", async |schema, store| {
        let (a, s1) = (tenant("a"), forge_core::SessionId::from("ses_1"));
        let m1 = forge_core::MessageId::from("msg_1");
        let batch = vec![
            put_session("a", "ses_1", 1),
            env(
                "a",
                "ses_1",
                2,
                forge_core::SyncEvent::MessageUpdated {
                    info: message("ses_1", "msg_1", 2),
                },
            ),
        ];
        store.apply(&batch).await.unwrap();
        // The URL's user owns the tables and is a superuser here: it bypasses the
        // row-level security an application connection is held to.
        let mut conn = raw(schema).await;
        exec(
            &mut conn,
            "UPDATE messages SET body = (body::text || ' ')::json",
        )
        .await;
        let err = store.message(&a, &s1, &m1).await.unwrap_err();
        assert!(
            matches!(err, forge_core::Error::Corrupted { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        for needle in [schema.name(), "messages row msg_1", "tenant a", "checksum"] {
            assert!(msg.contains(needle), "{needle:?} not in {msg}");
        }
        // A row from before schema version 3 has no checksum and is read unverified.
        exec(&mut conn, "UPDATE messages SET checksum = NULL").await;
        let got = store.message(&a, &s1, &m1).await.unwrap().unwrap();
        assert_eq!(got.info, message("ses_1", "msg_1", 2));
        conn.close().await.unwrap();
    }));
}

/// An instance opens by its URL (its schema) from another connection, and the schema
/// is gone once the set is closed.
#[test]
fn an_instance_opens_by_its_url() {
    let Some(server) = postgres_url("an_instance_opens_by_its_url") else {
        return;
    };
    parallel_runtime().block_on(forge_testkit::drivers::assert_instance_opens_by_url(
        &forge_sql::POSTGRES,
        &server,
    ));
}

// ---------------------------------------------------------------------------------------
// Fencing

#[test]
fn claims_grow_by_one_and_follow_the_lease_rules() {
    runtime().block_on(with_fresh("claim_rules", async |_, store| {
        fencing::assert_claim_rules(store).await;
    }));
}

#[test]
fn a_batch_under_a_stale_epoch_is_refused_and_writes_nothing() {
    runtime().block_on(with_fresh("stale_batches", async |_, store| {
        fencing::assert_stale_batches_are_refused(store).await;
    }));
}

#[test]
fn a_fence_record_survives_its_sessions_deletion_and_a_new_pool() {
    runtime().block_on(with_fresh("fence_survives", async |schema, store| {
        let s = fencing::claim_write_and_delete(store).await;
        let again = PostgresStore::connect(&schema.url()).await.unwrap();
        fencing::assert_deleted_session_keeps_its_record(&again, &s).await;
        again.close().await;
    }));
}

#[test]
fn two_pools_on_one_schema_race_claims_and_the_stale_ones_batches_are_refused() {
    parallel_runtime().block_on(with_fresh("claim_race", async |schema, one| {
        let two = PostgresStore::connect(&schema.url()).await.unwrap();
        fencing::assert_handles_race(Arc::new(one.clone()), Arc::new(two.clone())).await;
        two.close().await;
    }));
}

/// Inserts the fence record `epoch` of `session` of tenant `a` as the URL's user.
async fn insert_fence(conn: &mut PgConnection, session: &str, epoch: i64) {
    sqlx::query(
        "INSERT INTO fences (tenant, session_id, epoch, holder, expires_ms) \
         VALUES ('a', $1, $2, 'behind', 0)",
    )
    .bind(session.as_bytes())
    .bind(epoch)
    .execute(conn)
    .await
    .unwrap();
}

#[test]
fn claims_and_batches_wait_for_the_sessions_lock_and_see_what_its_holder_committed() {
    // A transaction holding a session's lock stands for a claim in progress: a batch
    // and a claim of the session wait for it, and both see the record it commits (a
    // batch that read the record before the claim committed would let a stale write in).
    parallel_runtime().block_on(with_fresh("fence_lock", async |schema, store| {
        let key = |s: &str| {
            forge_sql::postgres::testing::session_lock_key(schema.name(), &tenant("a"), &s.into())
        };
        let mut watcher = raw(schema).await;
        let mut holder = raw(schema).await;

        // A batch, unfenced on a session never claimed when it started.
        let mut tx = holder.begin().await.unwrap();
        advisory_lock(&mut tx, key("ses_b")).await;
        let batch = {
            let store = store.clone();
            tokio::spawn(async move { store.apply(&[put_session("a", "ses_b", 1)]).await })
        };
        wait_for_waiters(&mut watcher, ADVISORY_KEY, key("ses_b"), 1).await;
        insert_fence(&mut tx, "ses_b", 5).await;
        tx.commit().await.unwrap();
        let err = batch.await.unwrap().unwrap_err();
        fencing::assert_fenced(&err, "ses_b", None, 5);
        assert_eq!(
            store.session(&tenant("a"), &"ses_b".into()).await.unwrap(),
            None
        );

        // A claim of a session with no record when it started.
        let mut tx = holder.begin().await.unwrap();
        advisory_lock(&mut tx, key("ses_c")).await;
        let claim = {
            let store = store.clone();
            tokio::spawn(async move { fencing::take_over(&store, "a", "ses_c", "w").await })
        };
        wait_for_waiters(&mut watcher, ADVISORY_KEY, key("ses_c"), 1).await;
        insert_fence(&mut tx, "ses_c", 8).await;
        tx.commit().await.unwrap();
        assert_eq!(claim.await.unwrap(), 9);

        // The batch's lock is the claim's: a claim waits for a batch in progress too.
        let mut tx = holder.begin().await.unwrap();
        advisory_lock(&mut tx, key("ses_c")).await;
        let (claim, batch) = {
            let (one, two) = (store.clone(), store.clone());
            let batch = fencing::under(Some(9), vec![put_session("a", "ses_c", 1)]);
            (
                tokio::spawn(async move { fencing::take_over(&one, "a", "ses_c", "w2").await }),
                tokio::spawn(async move { two.apply(&batch).await }),
            )
        };
        wait_for_waiters(&mut watcher, ADVISORY_KEY, key("ses_c"), 2).await;
        tx.commit().await.unwrap();
        assert_eq!(claim.await.unwrap(), 10);
        // Whichever went first, the record and the session agree: the batch landed
        // only if it ran before the take-over.
        match batch.await.unwrap() {
            Ok(()) => assert!(store
                .session(&tenant("a"), &"ses_c".into())
                .await
                .unwrap()
                .is_some()),
            Err(e) => {
                fencing::assert_fenced(&e, "ses_c", Some(9), 10);
                assert_eq!(
                    store.session(&tenant("a"), &"ses_c".into()).await.unwrap(),
                    None
                );
            }
        }
        watcher.close().await.unwrap();
        holder.close().await.unwrap();
    }));
}

#[test]
fn claims_work_where_synchronous_commit_is_off_by_default() {
    // A claim raises `synchronous_commit` for its own transaction (whether its commit
    // then waited for the flush cannot be seen from here): the statement that does so
    // must work for the application role under such a default.
    let test = async {
        let Some(url) = postgres_url("claim_synchronous_commit") else {
            return;
        };
        let schema = TestSchema::create(&url).await.unwrap();
        let sep = if schema.url().contains('?') { '&' } else { '?' };
        let off = format!("{}{sep}options=-c%20synchronous_commit%3Doff", schema.url());
        let store = PostgresStore::connect(&off).await.unwrap();
        fencing::assert_claim_rules(&store).await;
        fencing::assert_stale_batches_are_refused(&store).await;
        store.close().await;
        schema.drop().await.unwrap();
    };
    runtime().block_on(test);
}

#[test]
fn a_schema_of_version_3_opens_without_fence_records_and_fences() {
    runtime().block_on(with_fresh("upgrade_to_fences", async |schema, store| {
        apply_all(store, &sample_history()).await;
        store.close().await;
        // What a release of schema version 3 left: the same tables, no `fences` (nor
        // the blob tables of version 5, nor the search index of version 6).
        let mut conn = raw(schema).await;
        exec(&mut conn, "ALTER TABLE parts DROP COLUMN search").await;
        exec(&mut conn, "ALTER TABLE forge_meta DROP COLUMN note").await;
        exec(&mut conn, "DELETE FROM forge_meta WHERE key = 'search'").await;
        exec(&mut conn, "DROP TABLE fences").await;
        exec(&mut conn, "DROP TABLE blobs").await;
        exec(&mut conn, "DROP TABLE blob_touched").await;
        exec(
            &mut conn,
            "UPDATE forge_meta SET value = 3 WHERE key = 'schema_version'",
        )
        .await;

        let again = PostgresStore::connect(&schema.url()).await.unwrap();
        let version: i64 =
            sqlx::query_scalar("SELECT value FROM forge_meta WHERE key = 'schema_version'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(version, forge_sql::postgres::SCHEMA_VERSION);
        let records: i64 = sqlx::query_scalar("SELECT count(*) FROM fences")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(records, 0);
        let policies: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_policies WHERE schemaname = current_schema() \
             AND tablename = 'fences' AND policyname = 'tenant_isolation'",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(policies, 1);

        assert_matches_reference(&again, &sample_history()).await;
        let (a, s) = (tenant("a"), forge_core::SessionId::from("ses_1"));
        assert_eq!(again.claimed(&a, &s).await.unwrap(), None);
        again
            .apply(&[put_message("a", "ses_1", "msg_up", 0, 20)])
            .await
            .unwrap();
        assert_eq!(fencing::take_over(&again, "a", "ses_1", "w").await, 1);
        let err = again
            .apply(&[put_message("a", "ses_1", "msg_late", 0, 21)])
            .await
            .unwrap_err();
        fencing::assert_fenced(&err, "ses_1", None, 1);
        again
            .apply(&fencing::under(
                Some(1),
                vec![put_message("a", "ses_1", "msg_late", 0, 21)],
            ))
            .await
            .unwrap();
        again.close().await;
        conn.close().await.unwrap();
    }));
}
