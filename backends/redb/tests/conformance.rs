//! The conformance suite on redb: a fresh file per case, removed with it.

use std::sync::Arc;

use forge_conformance::{guarded, FnFactory};
use forge_core::LocalBus;
use forge_redb::RedbStore;

/// redb with the bus it is deployed with: an in-process LocalBus (with a replay buffer,
/// so recover after a crash can rebuild streamed text).
fn redb() -> FnFactory {
    FnFactory::new("redb", || {
        let dir = tempfile::tempdir().map_err(|e| forge_core::Error::backend("redb", false, e))?;
        let store = RedbStore::open(dir.path().join("conformance.redb"))?;
        Ok(guarded(Arc::new(store), dir))
    })
    .with_bus(|| Some(Arc::new(LocalBus::with_replay(100_000))))
}

forge_conformance::conformance_tests!(redb());
