//! The write-ahead journal: a process that dies between checkpoints loses nothing it was
//! told was committed, reopening replays exactly the batches the file lacks (never one
//! twice), and a torn last record ends the replay there.
//!
//! A real crash: a child process (this test binary, run again on one test) applies the
//! batches and exits without closing anything, so redb's unsynced commits are lost with
//! it and only the journal holds them.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use forge_core::{Envelope, MemoryStore, Store, SyncEvent};
use forge_redb::{RedbOptions, RedbStore};
use forge_testkit::logs::Recorder;
use forge_testkit::runtime;

const CHILD_VAR: &str = "FORGE_REDB_JOURNAL_CHILD";

/// Batch `i` of a history with removes, moves and a deleted session: enough that
/// applying a batch twice, or onto the wrong state, changes the result or fails.
fn batch(i: u64) -> Vec<Envelope<SyncEvent>> {
    let (t, s) = ("a", "ses_j");
    let seq = i + 1;
    match i {
        0 => vec![put_session(t, s, seq), put_session(t, "ses_gone", seq)],
        1 => vec![
            put_message(t, s, "msg_1", 2, seq),
            put_message(t, s, "msg_2", 2, seq),
        ],
        2 => vec![put_message(t, "ses_gone", "msg_1", 1, seq)],
        _ => {
            let p = format!("prt_{:03}", i % 7);
            match i % 6 {
                // A part under msg_1, then the same id under msg_2: it moves.
                0 | 1 => vec![put_part(t, s, "msg_1", &p, (i % 7) as u8, seq)],
                2 => vec![put_part(t, s, "msg_2", &p, 6, seq)],
                3 => vec![env(
                    t,
                    s,
                    seq,
                    SyncEvent::PartRemoved {
                        session_id: s.into(),
                        message_id: "msg_1".into(),
                        part_id: p.as_str().into(),
                    },
                )],
                4 => vec![
                    env(
                        t,
                        s,
                        seq,
                        SyncEvent::MessageRemoved {
                            session_id: s.into(),
                            message_id: "msg_2".into(),
                        },
                    ),
                    put_message(t, s, "msg_2", (i % 3) as u8, seq),
                ],
                _ => vec![
                    env(
                        t,
                        "ses_gone",
                        seq,
                        SyncEvent::SessionDeleted {
                            session_id: "ses_gone".into(),
                        },
                    ),
                    put_session(t, "ses_gone", seq),
                    put_message(t, "ses_gone", "msg_1", 1, seq),
                ],
            }
        }
    }
}

/// The reference state after batches `0..n`.
async fn expected(n: u64) -> MemoryStore {
    let mem = MemoryStore::new();
    for i in 0..n {
        mem.apply(&batch(i)).await.unwrap();
    }
    mem
}

/// Runs this binary again on [`child_process_entry`], which applies batches `0..n` with
/// `options` to `dir/forge.redb` and exits without closing.
fn run_child(dir: &Path, n: u64, query: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "--ignored",
            "child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, format!("{}|{n}|{query}", dir.display()))
        .status()
        .unwrap();
    assert!(status.success(), "child: {status}");
}

/// The child of [`run_child`]: applies the batches and leaves the process with `exit`,
/// which runs no destructor (the store is never closed or dropped). Started any other
/// way (without [`CHILD_VAR`]), it fails.
#[test]
#[ignore = "child-process entry point, started by \
            a_process_that_dies_between_checkpoints_loses_no_committed_batch and \
            a_torn_last_record_ends_the_replay_before_it"]
fn child_process_entry() {
    let spec = std::env::var(CHILD_VAR).unwrap_or_else(|_| {
        panic!(
            "child_process_entry is the crashing child of the journal tests and runs only \
             with {CHILD_VAR} set"
        )
    });
    let mut it = spec.splitn(3, '|');
    let (dir, n, query) = (
        it.next().unwrap().to_owned(),
        it.next().unwrap().parse::<u64>().unwrap(),
        it.next().unwrap_or("").to_owned(),
    );
    let rt = runtime();
    rt.block_on(async {
        let options = RedbOptions::from_query(&query).unwrap();
        let store = RedbStore::open_with(Path::new(&dir).join("forge.redb"), options).unwrap();
        for i in 0..n {
            store.apply(&batch(i)).await.unwrap();
        }
        std::process::exit(0);
    });
}

#[test]
fn a_process_that_dies_between_checkpoints_loses_no_committed_batch() {
    const N: u64 = 60;
    let rt = runtime();
    // No checkpoint at all before the exit, and one every few batches.
    for query in ["checkpoint_bytes=1000000000", "checkpoint_bytes=2000"] {
        let dir = tempfile::tempdir().unwrap();
        run_child(dir.path(), N, query);
        let journal = dir.path().join("forge.redb-journal");
        assert!(
            std::fs::metadata(&journal).unwrap().len() > 16,
            "{query}: journal empty"
        );
        rt.block_on(async {
            let mem = expected(N).await;
            if query.contains("1000000000") {
                // The file alone (without its journal) lacks the batches: the journal is
                // what kept them.
                let bare = tempfile::tempdir().unwrap();
                std::fs::copy(
                    dir.path().join("forge.redb"),
                    bare.path().join("forge.redb"),
                )
                .unwrap();
                let store = RedbStore::open(bare.path().join("forge.redb")).unwrap();
                let s = store.session(&tenant("a"), &"ses_j".into()).await.unwrap();
                assert!(
                    s.is_none(),
                    "{query}: the file held the batches without the journal"
                );
            }
            let store = RedbStore::open(dir.path().join("forge.redb")).unwrap();
            assert_same_reads(&mem, &store).await.unwrap();
            // Opening again replays nothing twice (and nothing is left to replay).
            store.close().await.unwrap();
            let store = RedbStore::open(dir.path().join("forge.redb")).unwrap();
            assert_same_reads(&mem, &store).await.unwrap();
        });
    }
}

/// Checks the search of every fixture word in the journal batches' sessions.
async fn check_searches(store: &RedbStore, what: &str) {
    for w in FIXTURE_WORDS {
        for session in [None, Some("ses_j"), Some("ses_gone")] {
            let query = forge_core::SearchQuery {
                text: (*w).to_owned(),
                limit: 0,
                session: session.map(Into::into),
            };
            check_search(store, &tenant("a"), &query)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}

#[test]
fn a_replayed_journal_leaves_the_search_index_exact_whichever_way_search_is_set() {
    const N: u64 = 60;
    let rt = runtime();
    // Batches journaled with the index and replayed with it, or reopened with
    // `search=off` (replayed with the index, then dropped); journaled without it and
    // reopened with it (replayed without, then built).
    for (written, reopened) in [("", true), ("", false), ("&search=off", true)] {
        let what = format!("written with {written:?}, reopened with search={reopened}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.redb");
        run_child(
            dir.path(),
            N,
            &format!("checkpoint_bytes=1000000000{written}"),
        );
        rt.block_on(async {
            let options = RedbOptions {
                search: reopened,
                ..RedbOptions::default()
            };
            let store = RedbStore::open_with(&path, options).unwrap();
            assert_same_reads(&expected(N).await, &store).await.unwrap();
            if reopened {
                check_searches(&store, &what).await;
            }
            store.close().await.unwrap();
            let store = RedbStore::open(&path).unwrap();
            check_searches(&store, &what).await;
        });
    }
}

#[test]
fn a_torn_last_record_ends_the_replay_before_it() {
    const N: u64 = 25;
    let rt = runtime();
    // The file runs on past its records (zeros written ahead of them): a crash tears
    // the last record in place (what it wrote of it, the rest zeros) or, on a file cut
    // short, cuts it.
    for cut in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        run_child(dir.path(), N, "checkpoint_bytes=1000000000");
        let journal = dir.path().join("forge.redb-journal");
        let mut bytes = std::fs::read(&journal).unwrap();
        // The last record ends with its payload's last non-zero byte (then padding).
        let last = bytes.iter().rposition(|&b| b != 0).unwrap();
        assert!(last + 64 < bytes.len(), "no zeros ahead of the records");
        if cut {
            bytes.truncate(last);
        } else {
            bytes[last - 8..=last].fill(0);
        }
        std::fs::write(&journal, &bytes).unwrap();
        rt.block_on(async {
            let store = RedbStore::open(dir.path().join("forge.redb")).unwrap();
            assert_same_reads(&expected(N - 1).await, &store)
                .await
                .unwrap_or_else(|e| panic!("cut {cut}: {e:?}"));
        });
    }
}

#[test]
fn a_store_dropped_without_close_is_not_replayed_onto_itself() {
    // redb may make unsynced commits durable when the database is dropped; the journal
    // position recorded with each batch keeps the replay from applying them again (a
    // part put under a message that a later batch removed would fail to apply).
    const N: u64 = 40;
    let rt = runtime();
    let (_dir, path) = temp_path();
    let gone = || {
        env(
            "a",
            "ses_base",
            2,
            SyncEvent::SessionDeleted {
                session_id: "ses_base".into(),
            },
        )
    };
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        // A session made durable by a checkpoint, then a message in it and the
        // session's delete, journaled only: replayed onto the dropped store's state the
        // message would find no session.
        store
            .apply(&[put_session("a", "ses_base", 1)])
            .await
            .unwrap();
        store.checkpoint().await.unwrap();
        store
            .apply(&[put_message("a", "ses_base", "msg_1", 1, 2)])
            .await
            .unwrap();
        store.apply(&[gone()]).await.unwrap();
        for i in 0..N {
            store.apply(&batch(i)).await.unwrap();
        }
        drop(store);
        let store = reopen(&path, "reopening after a drop").await;
        let mem = MemoryStore::new();
        mem.apply(&[put_session("a", "ses_base", 1)]).await.unwrap();
        mem.apply(&[gone()]).await.unwrap();
        for i in 0..N {
            mem.apply(&batch(i)).await.unwrap();
        }
        assert_same_reads(&mem, &store).await.unwrap();
    });
}

#[test]
fn a_file_next_to_the_database_that_is_not_a_journal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("forge.redb-journal"),
        b"{\"not\": \"a journal\"}",
    )
    .unwrap();
    let err = RedbStore::open(dir.path().join("forge.redb")).unwrap_err();
    assert!(
        matches!(err, forge_core::Error::Corrupted { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("forge.redb-journal"), "{err}");
}

#[test]
fn a_journal_moved_away_opens_as_of_the_checkpoint_and_again_after() {
    // Moving the journal away is the documented way to open a database as of its last
    // checkpoint (or to copy the file alone after a clean close). The journal created
    // in its place is shorter than the one the checkpoint recorded: the next open must
    // not take it for a cut journal.
    const N: u64 = 30;
    let rt = runtime();
    let (dir, path) = temp_path();
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        for i in 0..N {
            store.apply(&batch(i)).await.unwrap();
        }
        store.close().await.unwrap();
        std::fs::remove_file(dir.path().join("forge.redb-journal")).unwrap();
        let mem = expected(N).await;
        let recorder = Recorder::default();
        let _logs = tracing::subscriber::set_default(recorder.clone());
        for open in ["first", "second", "third"] {
            // Each use only reads, and ends as a command's does (`Store::close`, which
            // checkpoints only a journal holding batches).
            let store = reopen(&path, &format!("the {open} open without the old journal")).await;
            assert_same_reads(&mem, &store).await.unwrap();
            Store::close(&store).await.unwrap();
            // The first open says that the journal is gone; the later ones find the one
            // it made.
            let warned = recorder.take().events.iter().any(|e| e.contains(MISSING));
            assert_eq!(warned, open == "first", "{open} open: warned {warned}");
        }
    });
}

/// What opening says when the journal of a database that had batches is missing.
const MISSING: &str = "the journal is missing";

/// A database whose journal never held a batch loses nothing without it: opening it
/// says nothing.
#[test]
fn a_missing_journal_that_held_nothing_is_not_warned_about() {
    let rt = runtime();
    let (dir, path) = temp_path();
    let recorder = Recorder::default();
    let _logs = tracing::subscriber::set_default(recorder.clone());
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        store.close().await.unwrap();
        std::fs::remove_file(dir.path().join("forge.redb-journal")).unwrap();
        let store = reopen(&path, "opening without the journal").await;
        assert!(store
            .session(&forge_core::TenantId::new("a").unwrap(), &"ses_j".into())
            .await
            .unwrap()
            .is_none());
    });
    let events = recorder.take().events;
    assert!(!events.iter().any(|e| e.contains(MISSING)), "{events:?}");
}

/// A checkpoint comes once the journal holds `checkpoint_bytes` of records, so the
/// journal file (which never shrinks) stays near that size however much is written;
/// and a use that only reads writes nothing at all, not even at close.
#[test]
fn the_journal_stays_bounded_by_its_checkpoints_and_a_read_only_use_writes_nothing() {
    const N: u64 = 300;
    const EVERY: u64 = 4096;
    let rt = runtime();
    let (dir, path) = temp_path();
    let journal = dir.path().join("forge.redb-journal");
    rt.block_on(async {
        let options = RedbOptions::from_query(&format!("checkpoint_bytes={EVERY}")).unwrap();
        let (store, counters) = RedbStore::open_counted(&path, options).unwrap();
        for i in 0..N {
            store.apply(&batch(i)).await.unwrap();
        }
        let journaled = counters.snapshot().journal_write_bytes;
        let size = std::fs::metadata(&journal).unwrap().len();
        // Records of a few hundred bytes each: without checkpoints the file would hold
        // all of them.
        assert!(journaled > 25 * EVERY, "{journaled} bytes journaled");
        assert!(
            size < 3 * EVERY,
            "the journal grew to {size} bytes with a checkpoint every {EVERY}"
        );
        store.close().await.unwrap();

        let (store, counters) = RedbStore::open_counted(&path, RedbOptions::default()).unwrap();
        let before = counters.snapshot();
        assert_same_reads(&expected(N).await, &store).await.unwrap();
        Store::close(&store).await.unwrap();
        let wrote = counters.snapshot().since(before);
        assert_eq!(
            (wrote.total_write_bytes(), wrote.total_syncs()),
            (0, 0),
            "a read-only use wrote: {wrote:?}"
        );
    });
}

/// Opens `path` again once the blocking pool has finished closing the file that a
/// dropped store held (a retryable "already open" until then).
async fn reopen(path: &Path, what: &str) -> RedbStore {
    loop {
        match RedbStore::open(path) {
            Ok(s) => return s,
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}
