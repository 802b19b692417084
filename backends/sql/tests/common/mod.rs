//! Fixtures shared by the integration tests: the differential fixtures of
//! `forge_conformance::differential` (id pools, row builders, read comparison against
//! `MemoryStore`, random batches), the checks every store backend shares
//! (`forge_testkit::stores`), plus the Postgres test-service switch.

#![allow(dead_code, unused_imports)] // each test crate uses its own subset

pub mod fencing;
pub mod scenarios;
pub mod search;
pub mod w1;

pub use forge_conformance::differential::random as differential;
pub use forge_conformance::differential::*;
pub use forge_testkit::stores;

/// A multi-threaded runtime, for tests where tasks must really run in parallel.
pub fn parallel_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Services

/// The Postgres server to test against: `FORGE_TEST_POSTGRES_URL`.
///
/// Unset, the test says loudly that it was skipped and returns `None` — unless
/// `FORGE_TEST_REQUIRE_SERVICES=1`, where a missing service is a failure. A set URL
/// whose server cannot be reached fails the test either way (when the test connects).
pub fn postgres_url(test: &str) -> Option<String> {
    forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", test)
}
