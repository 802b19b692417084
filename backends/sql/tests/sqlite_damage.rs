//! Damaged SQLite files: bits flipped and files cut at many random positions of a real
//! history (several sessions, parts that span pages), in the database file and in its
//! write-ahead log (`-wal`). Every difference from the original must come back as
//! `Error::Corrupted` (or "not a forge-store file"): 0 silent changes (a changed row,
//! fewer rows, a missing session, a row under another id) and 0 panics.
//!
//! Each campaign prints one line: runs, intact, reported corrupted, other errors, silent,
//! panics. `FORGE_DAMAGE_RUNS=N` sets the runs per campaign (default 100 flips, a third
//! as many cuts); e.g. `FORGE_DAMAGE_RUNS=5000` for a long run.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use forge_conformance::differential::damage::{history, runs, snapshot, Damage, Snapshot};
use forge_core::{Error, Store};
use forge_sql::SqliteStore;
use forge_testkit::stores::Campaigns;

/// Messages per page when reading back (several pages per session).
const PAGE: usize = 3;

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn wal(path: &Path) -> PathBuf {
    stores::beside(path, "-wal")
}

/// Opens `path`, reads everything and closes it.
fn read_back(path: &Path) -> Result<Snapshot, Error> {
    let rt = runtime();
    rt.block_on(async {
        let store = SqliteStore::open(&url(path)).await?;
        let got = snapshot(&store, PAGE).await;
        store.close().await;
        got
    })
}

/// Writes `db` (and `wal`) to fresh files, reads them back, and removes them.
fn try_copy(dir: &Path, db: &[u8], log: Option<&[u8]>) -> Result<Snapshot, Error> {
    let copy = dir.join("damaged.db");
    let shm = dir.join("damaged.db-shm");
    stores::read_fresh_copy(read_back, &copy, db, (&wal(&copy), log), &[&shm])
}

#[test]
fn an_empty_file_is_refused_not_opened_as_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.db");
    std::fs::write(&path, b"").unwrap();
    let err = runtime()
        .block_on(SqliteStore::open(&url(&path)))
        .unwrap_err();
    stores::assert_refused_as_empty(&path, &err);
}

/// The whole campaign in one test: the panic hook is process-wide.
#[test]
fn damaged_files_are_reported_never_read_changed_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let read = |db: &[u8], beside: Option<&[u8]>| try_copy(dir.path(), db, beside);
    let mut campaigns = Campaigns::new(&read, runs("FORGE_DAMAGE_RUNS", 100));

    // A file closed cleanly: everything checkpointed into it, no WAL.
    let path = dir.path().join("forge.db");
    runtime().block_on(async {
        let store = SqliteStore::open(&url(&path)).await.unwrap();
        for batch in history(6, 8, 6000) {
            store.apply(&batch).await.unwrap();
        }
        store.close().await;
    });
    let db = std::fs::read(&path).unwrap();
    let original = try_copy(dir.path(), &db, None).unwrap();
    assert_eq!(original.len(), 2 + 6 * 8, "the history reads back whole");
    campaigns.flips_and_cuts("sqlite file", ((&db, None), false), &original, &|_| false);

    // As a crash leaves it: the last commits only in the WAL.
    let (crash_db, crash_wal, crash_original) = crashed_copy(dir.path());
    // What cannot be told from a crash (see `forge_sql::sqlite`): a WAL cut short (a
    // power loss under synchronous=normal loses the frames not yet synced), damage in
    // its last frame (a torn last write).
    let frame = 24 + forge_sql::SQLITE_DEFAULT_PAGE_SIZE as usize;
    let last_frame = crash_wal.len() - frame..crash_wal.len();
    let torn = |d: Damage| match d {
        Damage::Flip { at, .. } => last_frame.contains(&at),
        Damage::Truncate { .. } => true,
    };
    let crashed = (&crash_db[..], Some(&crash_wal[..]));
    campaigns.flips_and_cuts("sqlite -wal", (crashed, true), &crash_original, &torn);
    campaigns.assert_clean();
}

/// The files of a store that wrote the history with a checkpoint in the middle and the
/// rest only in the WAL, copied while it is open (what a crash leaves), and what they
/// read back.
fn crashed_copy(dir: &Path) -> (Vec<u8>, Vec<u8>, Snapshot) {
    let live = dir.join("live.db");
    let rt = runtime();
    let store = rt
        .block_on(SqliteStore::open(&format!(
            "{}?wal_autocheckpoint=0",
            url(&live)
        )))
        .unwrap();
    rt.block_on(stores::apply_in_halves(
        &store,
        &history(4, 6, 3000),
        async || store.checkpoint().await.unwrap(),
    ));
    let db = std::fs::read(&live).unwrap();
    let log = std::fs::read(wal(&live)).unwrap();
    rt.block_on(store.close());
    let original = try_copy(dir, &db, Some(&log)).unwrap();
    assert_eq!(original.len(), 2 + 4 * 6, "the crash copy reads back whole");
    (db, log, original)
}
