//! The reference backend passes the whole suite: MemoryStore with a live-only LocalBus,
//! and with a LocalBus that keeps a replay buffer (durable within the process).

use std::sync::Arc;

use forge_conformance::FnFactory;
use forge_core::{LocalBus, MemoryStore};

fn memory(replay: usize) -> FnFactory {
    FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())))
        .with_bus(move || Some(Arc::new(LocalBus::with_replay(replay))))
}

mod live_bus {
    forge_conformance::conformance_tests!(super::memory(0));
}

mod durable_bus {
    forge_conformance::conformance_tests!(super::memory(100_000));
}
