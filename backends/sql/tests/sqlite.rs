//! `SqliteStore` against real files in temporary directories: equal to `MemoryStore` for
//! random batches, atomic per batch, durable across reopen, WAL with the requested
//! `synchronous`, safe under concurrent writers (also from two handles on one file),
//! refusing newer schema versions, exact for JSON numbers and NUL-bearing ids, and
//! fencing writers (also two handles on one file, and across a reopen and an upgrade).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::scenarios::assert_scenarios_match_reference;
use common::*;
use forge_core::{MessageId, SessionId, Store, SyncEvent};
use forge_sql::{SqliteOptions, SqliteStore, Synchronous};
use proptest::prelude::*;
use sqlx::{Connection, Row, SqliteConnection};
use tokio::runtime::Runtime;

/// The URL of the test's database file in `dir`.
fn url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("forge.db").display())
}

async fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(&url(dir)).await.unwrap()
}

async fn open_err(dir: &Path) -> forge_core::Error {
    SqliteStore::open(&url(dir)).await.unwrap_err()
}

async fn raw(dir: &Path) -> SqliteConnection {
    SqliteConnection::connect(&url(dir)).await.unwrap()
}

/// Runs `sql` (one statement, no parameters) on `conn`.
async fn exec(conn: &mut SqliteConnection, sql: &'static str) {
    sqlx::query(sql).execute(conn).await.unwrap();
}

/// Runs `statements` on the database file in `dir`, behind the store's back.
async fn edit_behind(dir: &Path, statements: &[&'static str]) {
    let mut conn = raw(dir).await;
    for sql in statements {
        exec(&mut conn, sql).await;
    }
    conn.close().await.unwrap();
}

/// Runs `test` on `rt` with a store on a new file in a temporary directory (the
/// directory given too), then closes the store.
fn with_store_on(rt: &Runtime, test: impl AsyncFnOnce(&Path, &SqliteStore)) {
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        test(dir.path(), &store).await;
        store.close().await;
    });
}

/// [`with_store_on`] a current-thread runtime.
fn with_store(test: impl AsyncFnOnce(&Path, &SqliteStore)) {
    with_store_on(&runtime(), test);
}

// ---------------------------------------------------------------------------------------
// Differential: SqliteStore equals MemoryStore

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn random_batches_leave_sqlite_equal_to_the_memory_reference(
        batches in differential::batches()
    ) {
        let mut result = Ok(());
        with_store(async |_, db| result = differential::run(db, &batches).await);
        result?;
    }
}

// ---------------------------------------------------------------------------------------
// Atomicity and reopening

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    with_store(async |dir, store| {
        stores::assert_failing_batches_leave_nothing(store, || store.write_stats()).await;
        store.close().await;
        // Nothing of the failed batches reached the file either.
        let again = open(dir).await;
        stores::assert_holds_atomicity_base(&again).await;
        again.close().await;
    });
}

#[test]
fn batches_see_their_own_earlier_events() {
    with_store(async |_, db| assert_scenarios_match_reference(db).await);
}

#[test]
fn an_abandoned_creation_beside_the_file_is_removed_by_the_next_open() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    // What a creation killed half-way leaves, by a process that is gone (a pid above
    // any pid_max), untouched for two minutes: the database and its WAL.
    let left: Vec<_> = ["", "-wal"]
        .iter()
        .map(|suffix| {
            let p = dir
                .path()
                .join(format!(".forge.db.creating-4194399{suffix}"));
            stores::leave_abandoned(&p, b"half-written");
            p
        })
        .collect();
    rt.block_on(async {
        let store = open(dir.path()).await;
        apply_all(&store, &sample_history()).await;
        store.close().await;
    });
    for p in &left {
        assert!(!p.exists(), "{} is left", p.display());
    }
}

#[test]
fn after_close_the_database_file_alone_holds_everything() {
    // `Store::close` closes the connections, and the last one folds the WAL into the
    // file: the file alone, copied after a clean exit (without its `-wal`), holds the
    // whole history. Copied before the store is dropped, so only `close` can have done it.
    let rt = runtime();
    let (dir, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    rt.block_on(async {
        let store = open(dir.path()).await;
        apply_all(&store, &sample_history()).await;
        Store::close(&store).await.unwrap();
        std::fs::copy(dir.path().join("forge.db"), copy.path().join("forge.db")).unwrap();
        drop(store);
        let store = open(copy.path()).await;
        assert_matches_reference(&store, &sample_history()).await;
        store.close().await;
    });
}

#[test]
fn history_survives_closing_and_reopening_the_file() {
    with_store(async |dir, store| {
        apply_all(store, &sample_history()).await;
        assert_matches_reference(store, &sample_history()).await;
        store.close().await;
        let store = open(dir).await;
        assert_matches_reference(&store, &sample_history()).await;
        // And it keeps working after the reopen.
        store
            .apply(&[put_message("a", "ses_1", "msg_9", 2, 20)])
            .await
            .unwrap();
        let state = store
            .session(&tenant("a"), &"ses_1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state.seq, 20);
        store.close().await;
    });
}

// ---------------------------------------------------------------------------------------
// Settings

async fn pragma(store_dir: &Path, name: &str) -> i64 {
    let mut conn = raw(store_dir).await;
    let row = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("PRAGMA {name}")))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    match row.try_get::<i64, _>(0) {
        Ok(v) => v,
        Err(_) => i64::from(row.try_get::<String, _>(0).unwrap() == "wal"),
    }
}

#[test]
fn the_file_is_in_wal_mode_with_the_requested_synchronous_setting() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        assert_eq!(
            store.options().synchronous,
            Synchronous::Full,
            "the default must sync every commit (a power cut keeps what was confirmed)"
        );
        // journal_mode is persistent: a fresh connection sees WAL.
        assert_eq!(
            pragma(dir.path(), "journal_mode").await,
            1,
            "not in WAL mode"
        );
        store.close().await;

        let url = format!(
            "sqlite://{}?synchronous=normal&busy_timeout_ms=1500",
            dir.path().join("forge.db").display()
        );
        let full = SqliteStore::open(&url).await.unwrap();
        assert_eq!(full.options().synchronous, Synchronous::Normal);
        assert_eq!(
            full.options().busy_timeout,
            std::time::Duration::from_millis(1500)
        );
        full.close().await;
    });
    // The per-connection settings, read back from a connection opened the same way.
    rt.block_on(async {
        for (sync, want) in [(Synchronous::Normal, 1), (Synchronous::Full, 2)] {
            let mut options = SqliteOptions::new(dir.path().join("forge.db"));
            options.synchronous = sync;
            let store = SqliteStore::open_with(options).await.unwrap();
            let settings = store.settings().await.unwrap();
            assert_eq!(settings.journal_mode, "wal");
            assert_eq!(settings.synchronous, want);
            assert!(settings.foreign_keys);
            assert_eq!(settings.busy_timeout_ms, 5000);
            assert_eq!(settings.page_size, 1024, "new files get 1 KiB pages");
            store.close().await;
        }
    });
    // page_size applies to new files; an existing file keeps its own.
    rt.block_on(async {
        let fresh = dir.path().join("small-pages.db");
        let url = format!("sqlite://{}?page_size=512", fresh.display());
        let store = SqliteStore::open(&url).await.unwrap();
        assert_eq!(store.settings().await.unwrap().page_size, 512);
        apply_all(&store, &sample_history()).await;
        store.close().await;
        let url = format!("sqlite://{}?page_size=4096", fresh.display());
        let store = SqliteStore::open(&url).await.unwrap();
        assert_eq!(store.settings().await.unwrap().page_size, 512);
        store.close().await;
        let err = SqliteStore::open(&format!("sqlite://{}?page_size=1000", fresh.display()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("power of two"), "{err}");
    });
}

#[test]
fn a_database_of_a_newer_schema_version_is_refused() {
    with_store(async |dir, store| {
        apply_all(store, &sample_history()).await;
        store.close().await;
        edit_behind(
            dir,
            &["UPDATE forge_meta SET value = value + 1 WHERE key = 'schema_version'"],
        )
        .await;
        let err = open_err(dir).await;
        assert!(matches!(err, forge_core::Error::Unsupported(_)), "{err:?}");
        let msg = err.to_string();
        let newer = format!("schema version {}", forge_sql::sqlite::SCHEMA_VERSION + 1);
        assert!(msg.contains(&newer) && msg.contains("newer"), "{msg}");

        // Someone else's database is refused too, and left alone.
        let other = tempfile::tempdir().unwrap();
        let mut conn = SqliteConnection::connect(&format!("{}?mode=rwc", url(other.path())))
            .await
            .unwrap();
        exec(&mut conn, "CREATE TABLE invoices (id INTEGER PRIMARY KEY)").await;
        conn.close().await.unwrap();
        let err = open_err(other.path()).await;
        assert!(matches!(err, forge_core::Error::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains("invoices"), "{err}");
    });
}

// ---------------------------------------------------------------------------------------
// Paging while appending

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(8)))]

    #[test]
    fn paging_yields_every_message_exactly_once_while_appending(
        initial in 0..30usize,
        limit in 1..8usize,
        appends_per_page in 0..4usize,
    ) {
        with_store(async |_, db| {
            stores::assert_paging_while_appending(db, initial, limit, appends_per_page).await;
        });
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency

#[test]
fn concurrent_writers_lose_no_update_and_never_see_a_locked_database() {
    with_store_on(&parallel_runtime(), async |_, db| {
        stores::hammer(&[Arc::new(db.clone())], 16, 25, false).await;
    });
}

#[test]
fn two_handles_on_one_file_wait_for_each_other_instead_of_failing() {
    // Two stores on one file stand for two processes: their writers contend for
    // SQLite's write lock, which `BEGIN IMMEDIATE` + the busy timeout turn into waiting.
    with_store_on(&parallel_runtime(), async |dir, one| {
        let two = open(dir).await;
        stores::hammer(
            &[Arc::new(one.clone()), Arc::new(two.clone())],
            8,
            20,
            false,
        )
        .await;
        two.close().await;
    });
}

// ---------------------------------------------------------------------------------------
// Values

#[test]
fn json_numbers_nul_characters_and_unknown_fields_read_back_exactly() {
    with_store(async |_, db| stores::assert_exact_values_read_back(db).await);
}

#[test]
fn capabilities_are_durable_transactional_keyed_and_concurrent() {
    with_store(async |_, db| {
        stores::assert_durable_capabilities(db, "sqlite", forge_core::Tenancy::Keyed);
    });
}

#[test]
fn w1_turn_costs_are_measured() {
    with_store(async |_, db| {
        w1::assert_measured("sqlite", db, SqliteStore::write_stats).await;
    });
}

// ---------------------------------------------------------------------------------------
// Checksummed values

/// A session with one part whose JSON holds `marker`.
fn marked_batch(marker: &str) -> Vec<forge_core::Envelope<SyncEvent>> {
    let (s, m) = ("ses_1", "msg_1");
    let mut json = serde_json::to_value(part(s, m, "prt_marked", 6)).unwrap();
    json["xMarker"] = serde_json::json!(marker);
    let prt: forge_core::Part = serde_json::from_value(json).unwrap();
    vec![
        put_session("a", s, 1),
        env(
            "a",
            s,
            2,
            SyncEvent::MessageUpdated {
                info: message(s, m, 2),
            },
        ),
        env("a", s, 3, SyncEvent::PartUpdated { part: prt }),
    ]
}

#[test]
fn a_value_damaged_in_the_file_is_corrupted_naming_the_row_and_the_file() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.db");
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    rt.block_on(async {
        let store = open(dir.path()).await;
        store.apply(&marked_batch("zz-checkmark-zz")).await.unwrap();
        store.close().await; // the last connection: the WAL goes into the file
    });
    // One byte of the value changes on disk; the JSON stays valid.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(9)
        .position(|w| w == b"checkmark")
        .expect("the value is in the file");
    bytes[at + 5] = b'M';
    std::fs::write(&path, &bytes).unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        let err = store
            .message(&a, &s1, &MessageId::from("msg_1"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, forge_core::Error::Corrupted { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        for needle in ["forge.db", "parts row prt_marked", "tenant a", "checksum"] {
            assert!(msg.contains(needle), "{needle:?} not in {msg}");
        }
        // The history page and the open-items listing refuse it the same way.
        let page = store.messages(&a, &s1, None, 10).await.unwrap_err();
        assert!(
            matches!(page, forge_core::Error::Corrupted { .. }),
            "{page:?}"
        );
        // The undamaged rows still read.
        assert!(store.session(&a, &s1).await.unwrap().is_some());
        store.close().await;
    });
}

#[test]
fn a_value_edited_behind_the_store_or_without_checksum_is_corrupted() {
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    with_store(async |dir, store| {
        store.apply(&marked_batch("edit-me")).await.unwrap();
        store.close().await;
        edit_behind(
            dir,
            &[
                "UPDATE sessions SET body = replace(body, '\"ses_1\"', '\"ses_1\" ')",
                "UPDATE messages SET checksum = NULL",
            ],
        )
        .await;
        let store = open(dir).await;
        let err = store.session(&a, &s1).await.unwrap_err();
        assert!(err.to_string().contains("sessions row ses_1"), "{err}");
        assert!(err.to_string().contains("fails its checksum"), "{err}");
        // A write that would carry the damaged session row forward is refused too.
        let refused = store.apply(&marked_batch("again")).await.unwrap_err();
        assert!(
            matches!(refused, forge_core::Error::Corrupted { .. }),
            "{refused:?}"
        );
        let err = store
            .message(&a, &s1, &MessageId::from("msg_1"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("has no checksum"), "{err}");
        store.close().await;
    });
}

// ---------------------------------------------------------------------------------------
// Fencing

#[test]
fn claims_grow_by_one_and_follow_the_lease_rules() {
    with_store(async |_, db| fencing::assert_claim_rules(db).await);
}

#[test]
fn a_batch_under_a_stale_epoch_is_refused_and_writes_nothing() {
    with_store(async |_, db| fencing::assert_stale_batches_are_refused(db).await);
}

#[test]
fn a_fence_record_of_an_epoch_never_granted_reads_as_corrupted() {
    // Epochs start at 1: a record of epoch 0 (or below) was not written by a claim.
    with_store(async |dir, db| {
        edit_behind(
            dir,
            &[
                "INSERT INTO fences (tenant, session_id, epoch, holder, expires_ms) \
                 VALUES ('a', X'7365735f30', 0, 'behind', 0)",
                "INSERT INTO fences (tenant, session_id, epoch, holder, expires_ms) \
                 VALUES ('a', X'7365735f6d', -1, 'behind', 0)",
            ],
        )
        .await;
        for session in ["ses_0", "ses_m"] {
            let err = db
                .claimed(&tenant("a"), &session.into())
                .await
                .expect_err("a record of an epoch never granted");
            assert_eq!(err.kind(), forge_core::ErrorKind::Corrupted, "{err}");
            assert!(err.to_string().contains("never granted"), "{err}");
        }
    });
}

#[test]
fn a_fence_record_survives_its_sessions_deletion_and_a_reopen() {
    with_store(async |dir, db| {
        let s = fencing::claim_write_and_delete(db).await;
        db.close().await;
        let again = open(dir).await;
        fencing::assert_deleted_session_keeps_its_record(&again, &s).await;
        again.close().await;
    });
}

#[test]
fn two_handles_on_one_file_race_claims_and_the_stale_ones_batches_are_refused() {
    with_store_on(&parallel_runtime(), async |dir, one| {
        let two = open(dir).await;
        fencing::assert_handles_race(Arc::new(one.clone()), Arc::new(two.clone())).await;
        two.close().await;
    });
}

#[test]
fn claims_under_synchronous_normal_leave_the_writer_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let store = SqliteStore::open(&format!("{}?synchronous=normal", url(dir.path())))
            .await
            .unwrap();
        fencing::assert_claim_rules(&store).await;
        // Batches after claims still commit with the configured setting (1 = NORMAL).
        fencing::assert_stale_batches_are_refused(&store).await;
        assert_eq!(store.settings().await.unwrap().synchronous, 1);
        store.close().await;
    });
}

/// `db` with the sample history, closed, edited behind its back by `statements` into
/// what an older release left, and opened again (migrated).
async fn reopened_as_left_by(
    dir: &Path,
    db: &SqliteStore,
    statements: &[&'static str],
) -> SqliteStore {
    apply_all(db, &sample_history()).await;
    db.close().await;
    edit_behind(dir, statements).await;
    open(dir).await
}

#[test]
fn a_database_of_schema_version_2_gets_the_checksum_of_every_row_it_holds() {
    with_store(async |dir, db| {
        let recorder = forge_testkit::logs::Recorder::default();
        let logs = tracing::subscriber::set_default(recorder.clone());
        // What a release of schema version 2 left: no checksums, no `fences`, no blob
        // tables, no search index.
        let again = reopened_as_left_by(
            dir,
            db,
            &[
                "DROP TRIGGER parts_unindex",
                "DROP TRIGGER parts_reindex",
                "DROP TABLE search",
                "DROP TABLE search_docs",
                "DELETE FROM forge_meta WHERE key = 'search'",
                "DROP TABLE fences",
                "DROP TABLE blobs",
                "DROP TABLE blob_touched",
                "ALTER TABLE sessions DROP COLUMN checksum",
                "ALTER TABLE messages DROP COLUMN checksum",
                "ALTER TABLE parts DROP COLUMN checksum",
                "UPDATE forge_meta SET value = 2 WHERE key = 'schema_version'",
            ],
        )
        .await;
        drop(logs);
        // Every row is read back checked: one left without its checksum would be
        // refused as corrupted.
        assert_matches_reference(&again, &sample_history()).await;
        let mut conn = raw(dir).await;
        let mut filled = 0;
        for table in ["sessions", "messages", "parts"] {
            let (all, missing): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(*) FILTER (WHERE checksum IS NULL) FROM {table}"
            )))
            .fetch_one(&mut conn)
            .await
            .unwrap();
            assert!(
                all > 0 && missing == 0,
                "{table}: {missing} of {all} rows without"
            );
            filled += all;
        }
        // The upgrade says how many rows it filled in.
        let said = format!(" rows={filled}");
        let records = recorder.take().records;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("upgraded from schema version 2") && r.contains(&said)),
            "{said}: {records:?}"
        );
        conn.close().await.unwrap();
        again.close().await;
    });
}

#[test]
fn a_database_of_schema_version_3_opens_without_fence_records_and_fences() {
    with_store(async |dir, db| {
        // What a release of schema version 3 left: the same tables, no `fences` (nor
        // the blob tables of version 5, nor the search index of version 6).
        let again = reopened_as_left_by(
            dir,
            db,
            &[
                "DROP TRIGGER parts_unindex",
                "DROP TRIGGER parts_reindex",
                "DROP TABLE search",
                "DROP TABLE search_docs",
                "DELETE FROM forge_meta WHERE key = 'search'",
                "DROP TABLE fences",
                "DROP TABLE blobs",
                "DROP TABLE blob_touched",
                "UPDATE forge_meta SET value = 3 WHERE key = 'schema_version'",
            ],
        )
        .await;
        let mut conn = raw(dir).await;
        let version: i64 = sqlx::query("SELECT value FROM forge_meta WHERE key = 'schema_version'")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, forge_sql::sqlite::SCHEMA_VERSION);
        let records: i64 = sqlx::query("SELECT count(*) FROM fences")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get(0);
        assert_eq!(records, 0);
        conn.close().await.unwrap();

        assert_matches_reference(&again, &sample_history()).await;
        let (a, s) = (tenant("a"), SessionId::from("ses_1"));
        assert_eq!(again.claimed(&a, &s).await.unwrap(), None);
        // Never claimed: unfenced writers go on writing, until a claim.
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
    });
}
