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
