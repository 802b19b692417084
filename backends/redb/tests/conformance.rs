//! The conformance suite on redb: a fresh file per case, reopened in place by the
//! `reopen` property, removed with the case.

use std::sync::Arc;

use forge_conformance::FnFactory;
use forge_core::LocalBus;
use forge_redb::RedbStore;

/// redb with the bus it is deployed with: an in-process LocalBus (with a replay buffer,
/// so recover after a crash can rebuild streamed text).
fn redb() -> FnFactory {
    FnFactory::in_temp_dir("redb", |dir| {
        Ok(Arc::new(RedbStore::open(dir.join("conformance.redb"))?))
    })
    .with_bus(|| Some(Arc::new(LocalBus::with_replay(100_000))))
}

forge_conformance::conformance_tests!(redb());
