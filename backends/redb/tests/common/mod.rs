//! Fixtures shared by the integration tests: the differential fixtures of
//! `forge_conformance::differential` (id pools with tricky prefixes, row builders, a
//! sample history, every read compared against `MemoryStore`, random batches), the
//! checks every store backend shares (`forge_testkit::stores`) and a redb file in a
//! temp dir.

#![allow(dead_code, unused_imports)] // each test crate uses its own subset

pub use forge_conformance::differential::random as differential;
pub use forge_conformance::differential::*;
pub use forge_testkit::stores;

use forge_redb::{RedbOptions, RedbStore};

pub fn temp_store(options: RedbOptions) -> (tempfile::TempDir, RedbStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path().join("forge.redb"), options).unwrap();
    (dir, store)
}
