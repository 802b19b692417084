//! `SqliteStore` against real files in temporary directories: equal to `MemoryStore` for
//! random batches, atomic per batch, durable across reopen, WAL with the requested
//! `synchronous`, safe under concurrent writers (also from two handles on one file),
//! refusing newer schema versions, and exact for JSON numbers and NUL-bearing ids.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use common::concurrency::hammer;
use common::scenarios::assert_scenarios_match_reference;
use common::*;
use forge_core::{Cursor, MemoryStore, MessageId, PartId, SessionId, Store, SyncEvent};
use forge_sql::{SqliteOptions, SqliteStore, Synchronous};
use proptest::prelude::*;
use sqlx::{Connection, Row, SqliteConnection};

async fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(&format!("sqlite://{}", dir.join("forge.db").display()))
        .await
        .unwrap()
}

async fn raw(dir: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", dir.join("forge.db").display()))
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Differential: SqliteStore equals MemoryStore

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn random_batches_leave_sqlite_equal_to_the_memory_reference(
        batches in differential::batches()
    ) {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let db = open(dir.path()).await;
            let result = differential::run(&db, &batches).await;
            db.close().await;
            result
        })?;
    }
}

// ---------------------------------------------------------------------------------------
// Atomicity and reopening

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let base = atomicity_base();
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    rt.block_on(async {
        let store = open(dir.path()).await;
        apply_all(&store, &base).await;
        let before = store.write_stats();
        for (batch, kind) in &failing_batches() {
            let got = outcome(&store.apply(batch).await);
            assert!(got.starts_with(kind), "{got}");
        }
        assert_eq!(store.write_stats(), before, "a failed batch committed");
        let mem = reference(&base).await;
        assert_same_reads(&mem, &store).await.unwrap();
        let state = store.session(&a, &s1).await.unwrap().unwrap();
        assert_eq!(state.seq, 3);
        let open_items = store.open_items(&a, None).await.unwrap();
        assert_eq!((open_items.messages.len(), open_items.parts.len()), (1, 1));
        store.close().await;
    });
    // Nothing of the failed batches reached the file either.
    rt.block_on(async {
        let store = open(dir.path()).await;
        assert_same_reads(&reference(&base).await, &store)
            .await
            .unwrap();
    });
}

#[test]
fn batches_see_their_own_earlier_events() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let db = open(dir.path()).await;
        assert_scenarios_match_reference(&db).await;
    });
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
            std::fs::write(&p, b"half-written").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - std::time::Duration::from_mins(2))
                .unwrap();
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
fn history_survives_closing_and_reopening_the_file() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        apply_all(&store, &sample_history()).await;
        assert_matches_reference(&store, &sample_history()).await;
        store.close().await;
        let store = open(dir.path()).await;
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
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = open(dir.path()).await;
        apply_all(&store, &sample_history()).await;
        store.close().await;
        let mut conn = raw(dir.path()).await;
        sqlx::query("UPDATE forge_meta SET value = value + 1 WHERE key = 'schema_version'")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        let err = SqliteStore::open(&format!(
            "sqlite://{}",
            dir.path().join("forge.db").display()
        ))
        .await
        .unwrap_err();
        assert!(matches!(err, forge_core::Error::Unsupported(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("schema version 4") && msg.contains("newer"),
            "{msg}"
        );

        // Someone else's database is refused too, and left alone.
        let other = tempfile::tempdir().unwrap();
        let mut conn = SqliteConnection::connect(&format!(
            "sqlite://{}?mode=rwc",
            other.path().join("forge.db").display()
        ))
        .await
        .unwrap();
        sqlx::query("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        let err = open_err(other.path()).await;
        assert!(matches!(err, forge_core::Error::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains("invoices"), "{err}");
    });
}

async fn open_err(dir: &Path) -> forge_core::Error {
    SqliteStore::open(&format!("sqlite://{}", dir.join("forge.db").display()))
        .await
        .unwrap_err()
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
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let db = open(dir.path()).await;
            let mem = MemoryStore::new();
            let t = tenant("a");
            let s = SessionId::from("ses_1");
            let new_message = |seq: u64| {
                let id = MessageId::generate();
                vec![
                    put_message("a", "ses_1", id.as_str(), 0, seq),
                    put_part("a", "ses_1", id.as_str(), PartId::generate().as_str(), 0, seq),
                ]
            };
            let mut seq = 1;
            let first = vec![put_session("a", "ses_1", seq)];
            mem.apply(&first).await.unwrap();
            db.apply(&first).await.unwrap();
            let mut want = Vec::new();
            for _ in 0..initial {
                seq += 1;
                let batch = new_message(seq);
                if let SyncEvent::MessageUpdated { info } = &batch[0].event {
                    want.push(info.id.clone());
                }
                mem.apply(&batch).await.unwrap();
                db.apply(&batch).await.unwrap();
            }
            let mut seen: Vec<Vec<MessageId>> = Vec::new();
            let mut cursor: Option<Cursor> = None;
            loop {
                let page = db.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
                let reference = mem.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
                prop_assert_eq!(&page, &reference);
                prop_assert!(page.messages.iter().all(|m| m.parts.len() == 1));
                seen.push(page.messages.iter().map(|m| m.info.id.clone()).collect());
                for _ in 0..appends_per_page {
                    seq += 1;
                    let batch = new_message(seq);
                    mem.apply(&batch).await.unwrap();
                    db.apply(&batch).await.unwrap();
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let got: Vec<MessageId> = seen.into_iter().rev().flatten().collect();
            let unique: BTreeSet<&MessageId> = got.iter().collect();
            prop_assert_eq!(unique.len(), got.len(), "a message was seen twice");
            prop_assert_eq!(got, want);
            db.close().await;
            Ok(())
        })?;
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency

#[test]
fn concurrent_writers_lose_no_update_and_never_see_a_locked_database() {
    let rt = parallel_runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let db: Arc<dyn Store> = Arc::new(open(dir.path()).await);
        hammer(&[db], 16, 25, false).await;
    });
}

#[test]
fn two_handles_on_one_file_wait_for_each_other_instead_of_failing() {
    // Two stores on one file stand for two processes: their writers contend for
    // SQLite's write lock, which `BEGIN IMMEDIATE` + the busy timeout turn into waiting.
    let rt = parallel_runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let one: Arc<dyn Store> = Arc::new(open(dir.path()).await);
        let two: Arc<dyn Store> = Arc::new(open(dir.path()).await);
        hammer(&[one, two], 8, 20, false).await;
    });
}

// ---------------------------------------------------------------------------------------
// Values

#[test]
fn json_numbers_nul_characters_and_unknown_fields_read_back_exactly() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let db = open(dir.path()).await;
        assert_exact_values_read_back(&db).await;
    });
}

#[test]
fn capabilities_are_durable_transactional_keyed_and_concurrent() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let caps = open(dir.path()).await.capabilities();
        assert_eq!(caps.name, "sqlite");
        assert!(caps.durable && caps.transactions && caps.concurrent_writers);
        assert_eq!(caps.tenancy, forge_core::Tenancy::Keyed);
    });
}

#[test]
fn w1_turn_costs_are_measured() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let db = Arc::new(open(dir.path()).await);
        let stats = {
            let db = Arc::clone(&db);
            move || db.write_stats()
        };
        let per_turn = w1::run(db, stats, 5).await.unwrap();
        w1::print("sqlite", 5, &per_turn);
        // Figures are printed, not judged; only that something was measured.
        assert!(per_turn.transactions >= 1.0 && per_turn.rows >= per_turn.transactions);
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
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    rt.block_on(async {
        let store = open(dir.path()).await;
        store.apply(&marked_batch("edit-me")).await.unwrap();
        store.close().await;
        let mut conn = raw(dir.path()).await;
        sqlx::query("UPDATE sessions SET body = replace(body, '\"ses_1\"', '\"ses_1\" ')")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("UPDATE messages SET checksum = NULL")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        let store = open(dir.path()).await;
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
