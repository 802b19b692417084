//! The redb file itself: reopening, a writer process that dies after its commits, a
//! file held open by another handle, and foreign, newer or corrupted files.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use forge_core::{Error, SessionId, Store, SyncEvent};
use forge_redb::{Durability, RedbOptions, RedbStore};

// ---------------------------------------------------------------------------------------
// 2. Durability: reopen, and a writer process that dies after its commits

#[test]
fn reopening_the_file_shows_every_commit() {
    let rt = runtime();
    for durability in [Durability::Immediate, Durability::None] {
        let (_dir, path) = temp_path();
        let history = sample_history();
        rt.block_on(async {
            let store = RedbStore::open_with(
                &path,
                RedbOptions {
                    durability,
                    ..RedbOptions::default()
                },
            )
            .unwrap();
            assert_eq!(store.path(), path);
            apply_all(&store, &history).await;
        });
        // Dropped: a clean close also makes non-durable commits durable.
        rt.block_on(async {
            let store = RedbStore::open(&path).unwrap();
            assert_matches_reference(&store, &history).await;
        });
    }
}

#[test]
fn close_waits_for_a_cancelled_write_and_releases_the_file() {
    let rt = runtime();
    let (_dir, path) = temp_path();
    let mut batch = vec![
        put_session("a", "ses_1", 1),
        put_message("a", "ses_1", "msg_1", 0, 2),
    ];
    batch.extend(
        (0..20_000).map(|i| put_part("a", "ses_1", "msg_1", &format!("prt_{i}"), 0, 3 + i)),
    );
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        let mut write = Box::pin(store.apply(&batch));
        // Polled once, the write is handed to the blocking pool; dropping the future
        // then leaves it running there, holding the database.
        tokio::select! {
            biased;
            _ = &mut write => panic!("a 20,000-part write finished in one poll"),
            () = std::future::ready(()) => {}
        }
        drop(write);
        store.close().await.unwrap();
        let store = RedbStore::open(&path).expect("the file is released when close returns");
        let page = store
            .messages(&tenant("a"), &SessionId::from("ses_1"), None, 10)
            .await
            .unwrap();
        assert_eq!(
            page.messages.first().map(|m| m.parts.len()),
            Some(20_000),
            "the cancelled write had committed when close returned"
        );
        store.close().await.unwrap();
    });
}

const CHILD_ENV: &str = "FORGE_REDB_TEST_CHILD_DB";

/// The dead writer of [`another_process_reads_what_a_dead_writer_committed`]: commits,
/// then exits without closing the database, as a crash would. Started any other way
/// (without [`CHILD_ENV`]), it fails.
#[test]
#[ignore = "child-process entry point, started by \
            another_process_reads_what_a_dead_writer_committed"]
fn dead_writer_child() {
    let path = std::env::var_os(CHILD_ENV).unwrap_or_else(|| {
        panic!(
            "dead_writer_child is the child of \
             another_process_reads_what_a_dead_writer_committed and runs only with \
             {CHILD_ENV} set"
        )
    });
    let store = RedbStore::open(&path).unwrap();
    runtime().block_on(apply_all(&store, &sample_history()));
    std::mem::forget(store);
    std::process::exit(0);
}

#[test]
fn another_process_reads_what_a_dead_writer_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("child.redb");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "--ignored",
            "dead_writer_child",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let store = RedbStore::open(&path).unwrap();
    runtime().block_on(assert_matches_reference(&store, &sample_history()));
}

#[test]
fn a_second_open_of_a_held_file_is_a_retryable_backend_error() {
    let (dir, _store) = temp_store(RedbOptions::default());
    let err = RedbStore::open(dir.path().join("forge.redb")).unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("forge.redb"), "{err}");
}

// ---------------------------------------------------------------------------------------
// 4. Foreign, newer and corrupted files

/// The on-disk layout as the README documents it, written behind the store's back.
mod raw {
    use redb::TableDefinition;

    pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
    pub const SESSIONS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("sessions");
    pub const MESSAGES: TableDefinition<(&str, &str, &str), &[u8]> =
        TableDefinition::new("messages");
    pub const PARTS: TableDefinition<(&str, &str, &str, &str), &[u8]> =
        TableDefinition::new("parts");
}

/// A new store's file appears at its path only whole (created beside it, then linked),
/// so a process killed while creating it leaves no half-written file there (the kill
/// campaign, `cli/tests/kill`, kills `replay` while it creates the file). What a killed
/// creation leaves is its temporary file, which a later open ignores.
#[test]
fn a_new_file_appears_whole_and_a_killed_creation_leaves_nothing_in_the_way() {
    let rt = runtime();
    let (dir, path) = temp_path();
    // What a creation killed half-way leaves: its temporary file, half-written. Of a
    // process that still runs (pid 1), it stays; of one that is gone (a pid above any
    // pid_max), untouched for two minutes, the open removes it.
    let left = dir.path().join(".forge.redb.creating-1");
    std::fs::write(&left, vec![0u8; 73_728]).unwrap();
    let abandoned = dir.path().join(".forge.redb.creating-4194399");
    std::fs::write(&abandoned, vec![0u8; 73_728]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&abandoned)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_mins(2))
        .unwrap();
    let history = sample_history();
    on_file(&rt, &path, async |store| {
        apply_all(store, &history).await;
    });
    assert!(!abandoned.exists(), "an abandoned creation is removed");
    assert!(left.exists(), "a running process's creation is left alone");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains(&format!("creating-{}", std::process::id()))),
        "the creating file is removed: {names:?}"
    );
    on_file(&rt, &path, async |store| {
        assert_matches_reference(store, &history).await;
    });
}

fn with_raw_db(path: &Path, f: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    f(&txn);
    txn.commit().unwrap();
}

#[test]
fn a_file_of_a_newer_schema_version_is_refused_clearly() {
    let (_dir, path) = temp_path();
    drop(RedbStore::open(&path).unwrap());
    with_raw_db(&path, |txn| {
        let mut meta = txn.open_table(raw::META).unwrap();
        meta.insert("schema_version", 7).unwrap();
    });
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("schema version 7") && text.contains("newer"),
        "{text}"
    );
}

#[test]
fn a_version_1_file_gets_the_part_index_and_parts_move_in_it() {
    let (_dir, path) = temp_path();
    let rt = runtime();
    on_file(&rt, &path, async |store| {
        store
            .apply(&[
                put_session("a", "ses_1", 1),
                put_message("a", "ses_1", "msg_1", 0, 2),
                put_message("a", "ses_1", "msg_2", 0, 3),
                put_part("a", "ses_1", "msg_1", "prt_1", 0, 4),
            ])
            .await
            .unwrap();
    });
    // What version 1 wrote: no part index.
    with_raw_db(&path, |txn| {
        txn.delete_table(redb::TableDefinition::<(&str, &str, &str, &str), ()>::new(
            "part_messages",
        ))
        .unwrap();
        txn.open_table(raw::META)
            .unwrap()
            .insert("schema_version", 1)
            .unwrap();
    });
    on_file(&rt, &path, async |store| {
        let moved = put_part("a", "ses_1", "msg_2", "prt_1", 1, 5);
        store.apply(std::slice::from_ref(&moved)).await.unwrap();
        let SyncEvent::PartUpdated { part } = moved.event else {
            unreachable!()
        };
        let (t, s) = (tenant("a"), SessionId::from("ses_1"));
        stores::assert_part_moved(store, &t, &s, part).await;
    });
}

#[test]
fn foreign_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();

    let junk = dir.path().join("junk.redb");
    std::fs::write(
        &junk,
        b"this is not a redb file, just some text that is long enough",
    )
    .unwrap();
    let err = RedbStore::open(&junk).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("junk.redb"), "{err}");

    let other = dir.path().join("other.redb");
    with_raw_db(&other, |txn| {
        let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("counters");
        txn.open_table(def).unwrap().insert("x", 1).unwrap();
    });
    let err = RedbStore::open(&other).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(err.to_string().contains("counters"), "{err}");
}

#[test]
fn corrupted_values_are_codec_errors_naming_the_row() {
    let rt = runtime();
    let (_dir, path) = temp_path();
    on_file(&rt, &path, async |store| {
        apply_all(store, &sample_history()).await;
    });
    with_raw_db(&path, |txn| {
        // A valid row envelope (format 1; bincode: seq = 1, a 3-byte string) holding
        // text that is not JSON.
        txn.open_table(raw::SESSIONS)
            .unwrap()
            .insert(("a", "ses_1"), [1u8, 1, 3, b'{', b'x', b'}'].as_slice())
            .unwrap();
        // A session row cut short: its seq cannot be read.
        txn.open_table(raw::SESSIONS)
            .unwrap()
            .insert(("a", "ses_10"), [1u8, 1, 200].as_slice())
            .unwrap();
        // Bytes bincode cannot decode as a row.
        txn.open_table(raw::MESSAGES)
            .unwrap()
            .insert(("a", "ses_1", "msg_1"), [1u8, 0xff, 0xff, 0xff].as_slice())
            .unwrap();
        // A row of an unknown format version.
        txn.open_table(raw::PARTS)
            .unwrap()
            .insert(("a", "ses_1", "msg_2", "prt_2"), [9u8, 0].as_slice())
            .unwrap();
    });
    on_file(&rt, &path, async |store| {
        let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
        let codec = |r: forge_core::Result<()>, needles: &[&str]| {
            let err = r.expect_err(&format!("{needles:?}"));
            assert!(matches!(err, Error::Codec { .. }), "{err:?}");
            let text = err.to_string();
            for n in needles {
                assert!(text.contains(n), "{text} lacks {n}");
            }
        };
        codec(
            store.session(&a, &s1).await.map(drop),
            &["session row a/ses_1", "JSON"],
        );
        codec(store.sessions(&a).await.map(drop), &["session row"]);
        codec(
            store.message(&a, &s1, &"msg_1".into()).await.map(drop),
            &["message row a/ses_1/msg_1", "bincode"],
        );
        codec(
            store.messages(&a, &s1, None, 50).await.map(drop),
            &["message row a/ses_1/msg_1"],
        );
        codec(
            store.message(&a, &s1, &"msg_2".into()).await.map(drop),
            &["part row a/ses_1/msg_2/prt_2", "format version 9"],
        );
        codec(store.open_items(&a, None).await.map(drop), &["row a/ses_1"]);
        // A write that must read a corrupted session row fails cleanly, too.
        codec(
            store
                .apply(&[put_message("a", "ses_10", "msg_5", 0, 99)])
                .await,
            &["session row a/ses_10", "bincode"],
        );
        // Rows that are not corrupted stay readable.
        let b = tenant("b");
        assert_eq!(store.sessions(&b).await.unwrap().len(), 1);
        let page = store
            .messages(&a, &"ses_10".into(), None, 50)
            .await
            .unwrap();
        assert_eq!(page.messages.len(), 1);
    });
}
