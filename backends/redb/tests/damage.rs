//! Damaged redb files: bits flipped and files cut at many random positions of a real
//! history (several sessions, parts that span pages), in the database file and in its
//! write-ahead journal. Every difference from the original must come back as
//! `Error::Corrupted` (or "not a forge-store file"): 0 silent changes (a changed row,
//! fewer rows, a missing session, a row under another id) and 0 panics, also caught ones.
//!
//! Each campaign prints one line: runs, intact, reported corrupted, other errors, silent,
//! panics. `FORGE_DAMAGE_RUNS=N` sets the runs per campaign (default 100 flips, a third
//! as many cuts); e.g. `FORGE_DAMAGE_RUNS=5000` for a long run.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use forge_conformance::differential::damage::{history, runs, snapshot, Damage, Snapshot};
use forge_core::{Error, Store};
use forge_redb::{RedbOptions, RedbStore};
use forge_testkit::stores::Campaigns;

/// Messages per page when reading back (several pages per session).
const PAGE: usize = 3;

fn default_runs() -> usize {
    runs("FORGE_DAMAGE_RUNS", 100)
}

/// Opens `path`, reads everything and closes it.
fn read_back(path: &Path) -> Result<Snapshot, Error> {
    let rt = runtime();
    let store = RedbStore::open(path)?;
    let got = rt.block_on(snapshot(&store, PAGE));
    rt.block_on(store.close())?;
    got
}

/// A directory with `forge.redb` holding the campaign history, closed cleanly (the
/// journal checkpointed and removed: the file is complete by itself), and what it reads.
fn clean_file() -> (tempfile::TempDir, PathBuf, Snapshot) {
    let (dir, path) = temp_path();
    let rt = runtime();
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        for batch in history(6, 8, 6000) {
            store.apply(&batch).await.unwrap();
        }
        store.close().await.unwrap();
    });
    std::fs::remove_file(journal(&path)).unwrap();
    let original = read_back(&path).unwrap();
    std::fs::remove_file(journal(&path)).ok();
    assert_eq!(original.len(), 2 + 6 * 8, "the history reads back whole");
    (dir, path, original)
}

fn journal(path: &Path) -> PathBuf {
    stores::beside(path, "-journal")
}

/// Writes `db` (and `journal`, if given) to a fresh file, reads it back, and removes it.
fn try_copy(dir: &Path, db: &[u8], jnl: Option<&[u8]>) -> Result<Snapshot, Error> {
    let copy = dir.join("damaged.redb");
    stores::read_fresh_copy(read_back, &copy, db, (&journal(&copy), jnl), &[])
}

#[test]
fn an_empty_file_is_refused_not_opened_as_an_empty_store() {
    let (_dir, path) = temp_path();
    std::fs::write(&path, b"").unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    stores::assert_refused_as_empty(&path, &err);
}

/// The whole campaign in one test: the panic hook is process-wide.
#[test]
fn damaged_files_are_reported_never_read_changed_and_never_panic() {
    let (dir, path, original) = clean_file();
    let db = std::fs::read(&path).unwrap();
    let read = |db: &[u8], beside: Option<&[u8]>| try_copy(dir.path(), db, beside);
    let mut campaigns = Campaigns::new(&read, default_runs());

    // The file as a clean close leaves it.
    campaigns.flips_and_cuts("redb file", ((&db, None), false), &original, &|_| false);

    // As a crash leaves it: the last batches only in the journal, not checkpointed.
    let (crash_db, crash_journal, crash_original, checkpoint_len) = crashed_copy(dir.path());
    // What the journal module documents as indistinguishable from a crash: damage
    // inside the last record (a torn last append), a cut beyond the journal's length at
    // the last checkpoint (appends that never reached the disk).
    let last = last_record(&crash_journal);
    let torn = |d: Damage| match d {
        Damage::Flip { at, .. } => last.contains(&at),
        Damage::Truncate { len } => len as u64 >= checkpoint_len,
    };
    let crashed = (&crash_db[..], Some(&crash_journal[..]));
    campaigns.flips_and_cuts("redb journal", (crashed, true), &crash_original, &torn);
    // The database file is judged on its own terms: the torn-record rule above is about
    // journal offsets. Damage to the file reads intact, is reported, or is silent;
    // never crash-like.
    campaigns.flips(
        "redb file beside a journal",
        campaigns.runs / 2,
        (crashed, false),
        &crash_original,
        &|_| false,
    );
    campaigns.assert_clean();
    for t in campaigns
        .tallies
        .iter()
        .filter(|t| t.name.starts_with("redb file"))
    {
        assert_eq!(
            t.crash_like, 0,
            "a database-file damage counted as a crash: {t}"
        );
    }
}

/// The files of a store that wrote the history with a checkpoint in the middle and then
/// more batches only journaled, copied while it is open (what a crash leaves), and what
/// they read back.
fn crashed_copy(dir: &Path) -> (Vec<u8>, Vec<u8>, Snapshot, u64) {
    let live = dir.join("live.redb");
    let rt = runtime();
    let options = RedbOptions {
        checkpoint_bytes: 1 << 30,
        ..RedbOptions::default()
    };
    let store = RedbStore::open_with(&live, options).unwrap();
    let mut checkpoint_len = 0;
    rt.block_on(stores::apply_in_halves(
        &store,
        &history(4, 6, 3000),
        async || {
            store.checkpoint().await.unwrap();
            checkpoint_len = std::fs::metadata(journal(&live)).unwrap().len();
        },
    ));
    let db = std::fs::read(&live).unwrap();
    let jnl = std::fs::read(journal(&live)).unwrap();
    rt.block_on(store.close()).unwrap();
    let original = try_copy(dir, &db, Some(&jnl)).unwrap();
    assert_eq!(original.len(), 2 + 4 * 6, "the crash copy reads back whole");
    (db, jnl, original, checkpoint_len)
}

/// The byte range of the last record of the journal's current generation (the
/// generation of its first record): records are a 16-byte header (u32 length, u32
/// crc32c, u64 generation) and the payload; in format 2 each record after the first
/// starts on the next 4 KiB page, in format 1 right after the one before (padded to 8).
fn last_record(jnl: &[u8]) -> std::ops::Range<usize> {
    let generation = &jnl[24..32];
    let aligned = jnl[8..12] == 2u32.to_le_bytes();
    let (mut at, mut last) = (16, 16..16);
    while at + 16 <= jnl.len() && &jnl[at + 8..at + 16] == generation {
        let len = u32::from_le_bytes(jnl[at..at + 4].try_into().unwrap()) as usize;
        let end = at + 16 + len;
        if end > jnl.len() {
            break;
        }
        last = at..end;
        at = if aligned {
            end.next_multiple_of(4096)
        } else {
            end.next_multiple_of(8)
        };
    }
    last
}
