//! Fixtures shared by the integration tests: the differential fixtures of
//! `forge_conformance::differential` (id pools with tricky prefixes, row builders, a
//! sample history, every read compared against `MemoryStore`, random batches), the
//! checks every store backend shares (`forge_testkit::stores`) and a redb file in a
//! temp dir.

#![allow(dead_code, unused_imports)] // each test crate uses its own subset

pub use forge_conformance::differential::random as differential;
pub use forge_conformance::differential::*;
pub use forge_testkit::stores;

use std::path::{Path, PathBuf};

use forge_redb::{RedbOptions, RedbStore};

/// A temporary directory and the path of a store file in it, not created yet.
pub fn temp_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    (dir, path)
}

/// Opens the store at `path` on `rt`, runs `test` on it, and drops it (a clean close).
pub fn on_file(rt: &tokio::runtime::Runtime, path: &Path, test: impl AsyncFnOnce(&RedbStore)) {
    rt.block_on(async {
        let store = RedbStore::open(path).unwrap();
        test(&store).await;
    });
}

pub fn temp_store(options: RedbOptions) -> (tempfile::TempDir, RedbStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path().join("forge.redb"), options).unwrap();
    (dir, store)
}

/// Words the differential fixtures' parts hold (`done 7`, `typed by the user`, a `bash`
/// call of `ls` printing `a` and `b`), and one they never hold.
pub const FIXTURE_WORDS: &[&str] = &[
    "done", "stream", "typed", "user", "hm", "bash", "ls", "a", "b", "7", "missing",
];

/// Checks `store.search` against `forge_core::search::scan` on the same store, which is
/// the reference: over the whole tenant the answers are equal (hits, scores, order and
/// snippets: both score by BM25 over the tenant's documents); within one session (where
/// the scan's statistics are the session's) the same hits. When the scan fills the
/// limit, the scores must be the same (ties may pick other parts).
pub async fn check_search(
    store: &dyn forge_core::Store,
    t: &forge_core::TenantId,
    query: &forge_core::SearchQuery,
) -> Result<(), String> {
    use forge_core::SearchHit;
    let got = store
        .search(t, query)
        .await
        .map_err(|e| format!("{t} {query:?}: {e}"))?;
    let want = forge_core::search::scan(store, t, query)
        .await
        .map_err(|e| format!("scan {t} {query:?}: {e}"))?;
    let filled = want.len() >= query.limit();
    let scores = |hits: &[SearchHit]| hits.iter().map(|h| h.score).collect::<Vec<_>>();
    let place = |h: &SearchHit| {
        (
            h.session_id.clone(),
            h.message_id.clone(),
            h.part_id.clone(),
            h.kind.clone(),
            h.snippet.clone(),
            h.highlights.clone(),
        )
    };
    let same = match (query.session.is_some(), filled) {
        (false, false) => got == want,
        (false, true) => scores(&got) == scores(&want),
        (true, false) => {
            let mut a: Vec<_> = got.iter().map(place).collect();
            let mut b: Vec<_> = want.iter().map(place).collect();
            a.sort();
            b.sort();
            a == b
        }
        (true, true) => got.len() == want.len(),
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "{t} {query:?}: the index found\n{got:#?}\nthe scan\n{want:#?}"
        ))
    }
}
