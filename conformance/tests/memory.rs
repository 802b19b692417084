//! The reference backend passes the whole suite through its driver: MemoryStore with a
//! live-only LocalBus, and with a LocalBus that keeps a replay buffer (durable within
//! the process).

use forge_conformance::DriverFactory;
use forge_core::driver::MEMORY;

fn memory(replay: usize) -> DriverFactory {
    DriverFactory::of(&MEMORY, "memory://").with_local_replay(replay)
}

mod live_bus {
    forge_conformance::conformance_tests!(super::memory(0));
}

mod durable_bus {
    forge_conformance::conformance_tests!(super::memory(100_000));
}
