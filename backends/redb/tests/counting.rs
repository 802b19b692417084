//! `RedbStore::open_counted`: the counting storage backend sees every byte a commit
//! writes to the file and the journal and every sync; the journal writes far less than
//! a durable redb commit per batch, and non-durable commits less still.

mod common;

use common::*;
use forge_core::{Envelope, Part, Store, SyncEvent};
use forge_redb::{Durability, IoCounts, RedbOptions, RedbStore};
use serde_json::json;

/// A text part whose JSON is about `len` bytes, of pseudo-random bytes that zstd cannot
/// shrink much (rows are compressed).
fn big_part(s: &str, m: &str, p: &str, len: usize) -> Part {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    let text: String = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 94) as u8)
        })
        .collect();
    serde_json::from_value(json!({
        "type": "text", "text": text, "time": {"start": 1, "end": 2},
        "id": p, "sessionID": s, "messageID": m,
    }))
    .unwrap()
}

fn put(part: Part, seq: u64) -> Envelope<SyncEvent> {
    env("a", "ses_1", seq, SyncEvent::PartUpdated { part })
}

/// Applies session `ses_1` with message `msg_1`, which the parts go in.
async fn put_message_1(store: &RedbStore) {
    store
        .apply(&[
            put_session("a", "ses_1", 1),
            put_message("a", "ses_1", "msg_1", 2, 2),
        ])
        .await
        .unwrap();
}

/// Applies one session, one message, then `commits` batches of one part each; returns
/// the counts of the part batches alone.
async fn commit_parts(
    store: &RedbStore,
    counters: &forge_redb::IoCounters,
    commits: u64,
) -> IoCounts {
    put_message_1(store).await;
    let before = counters.snapshot();
    for i in 0..commits {
        let part = big_part("ses_1", "msg_1", &format!("prt_{i}"), 1_000);
        store.apply(&[put(part, 3 + i)]).await.unwrap();
    }
    counters.snapshot().since(before)
}

#[test]
fn a_durable_commit_writes_at_least_its_row_and_syncs() {
    let rt = runtime();
    let (_dir, path) = temp_path();
    rt.block_on(async {
        let (store, counters) = RedbStore::open_counted(&path, RedbOptions::default()).unwrap();
        let opened = counters.snapshot();
        assert!(opened.write_bytes > 0 && opened.syncs > 0, "{opened:?}");

        put_message_1(&store).await;
        let part = big_part("ses_1", "msg_1", "prt_1", 20_000);
        let row = serde_json::to_vec(&part).unwrap().len() as u64;
        let before = counters.snapshot();
        store.apply(&[put(part.clone(), 3)]).await.unwrap();
        let commit = counters.snapshot().since(before);
        eprintln!("one durable (journaled) commit of a {row} B row: {commit:?}");
        // The row, compressed: pseudo-random printable text keeps over 3/4 of its size.
        assert!(
            commit.journal_write_bytes >= row * 3 / 4,
            "{commit:?} < 3/4 of {row} B"
        );
        assert_eq!(commit.journal_syncs, 1, "{commit:?}");
        assert_eq!(
            commit.write_bytes, 0,
            "the file waits for the checkpoint: {commit:?}"
        );

        let got = store
            .message(&tenant("a"), &"ses_1".into(), &"msg_1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.parts, vec![part]);
    });

    // Reopening an existing file reads it through the backend, and the data is there.
    rt.block_on(async {
        let (store, counters) = RedbStore::open_counted(&path, RedbOptions::default()).unwrap();
        assert!(counters.snapshot().read_bytes > 0);
        let got = store
            .message(&tenant("a"), &"ses_1".into(), &"msg_1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.parts.len(), 1);
    });
}

#[test]
fn the_journal_writes_less_than_durable_commits_and_non_durable_ones_less_still() {
    const COMMITS: u64 = 8;
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        // Without the search index: its pages make a new file grow, and redb syncs the
        // file's length at each growth (the index's cost is `search.rs`'s business).
        let base = RedbOptions {
            search: false,
            ..RedbOptions::default()
        };
        let (durable, durable_counters) = RedbStore::open_counted(
            dir.path().join("immediate.redb"),
            RedbOptions {
                journal: false,
                ..base
            },
        )
        .unwrap();
        let immediate = commit_parts(&durable, &durable_counters, COMMITS).await;

        let (journaled, journal_counters) =
            RedbStore::open_counted(dir.path().join("journal.redb"), base).unwrap();
        let journal = commit_parts(&journaled, &journal_counters, COMMITS).await;

        let (lazy, lazy_counters) = RedbStore::open_counted(
            dir.path().join("none.redb"),
            RedbOptions {
                durability: Durability::None,
                ..base
            },
        )
        .unwrap();
        let none = commit_parts(&lazy, &lazy_counters, COMMITS).await;

        eprintln!(
            "{COMMITS} commits of ~1 KB: durable {immediate:?}, journaled {journal:?}, \
             none {none:?}"
        );
        assert!(immediate.syncs >= COMMITS, "{immediate:?}");
        assert_eq!(immediate.journal_syncs, 0, "{immediate:?}");
        // One journal sync per batch, nothing written to the file until a checkpoint
        // (redb syncs the file once, writing nothing, at its first non-durable commit).
        assert_eq!(journal.journal_syncs, COMMITS, "{journal:?}");
        assert_eq!(journal.write_bytes, 0, "{journal:?}");
        assert!(journal.syncs <= 1, "{journal:?}");
        // A record of ~1 KB a page, plus the zeros a new journal is extended with ahead
        // of its records: no more than the file's length.
        let file = std::fs::metadata(dir.path().join("journal.redb-journal"))
            .unwrap()
            .len();
        assert!(
            journal.journal_write_bytes <= COMMITS * 4096 + file
                && journal.total_write_bytes() * 3 < immediate.total_write_bytes(),
            "journaled {journal:?}, durable {immediate:?}"
        );
        assert!(
            none.total_syncs() < journal.total_syncs()
                && none.total_write_bytes() < journal.total_write_bytes(),
            "none {none:?}, journaled {journal:?}"
        );

        // A checkpoint makes the journaled batches durable in the file.
        let before = journal_counters.snapshot();
        journaled.checkpoint().await.unwrap();
        let checkpoint = journal_counters.snapshot().since(before);
        assert!(
            checkpoint.write_bytes > 0 && checkpoint.syncs > 0,
            "{checkpoint:?}"
        );

        // Non-durable commits stay in memory until a durable commit or a clean close;
        // the counters outlive the store and see the close write them.
        let before_close = lazy_counters.snapshot();
        drop(lazy);
        let closed = lazy_counters.snapshot().since(before_close);
        eprintln!("closing after {COMMITS} non-durable commits: {closed:?}");
        assert!(closed.write_bytes > 0 && closed.syncs > 0, "{closed:?}");
    });
}
