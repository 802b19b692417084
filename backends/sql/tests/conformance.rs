//! The conformance suite on both dialects, through their drivers, each beside the bus
//! the SQL backends are deployed with in one process: a LocalBus with a replay buffer,
//! so the bus properties and durable-bus recovery run too.
//!
//! SQLite: a fresh file per case, reopened by closing both pools and opening the file
//! again, removed with the case. Postgres (when `FORGE_TEST_POSTGRES_URL` is set): a
//! fresh schema per test, shared by its cases — the suite writes every case under a
//! fresh tenant, so cases do not see each other — reopened as a new pool on the same
//! schema, and dropped at the end of the test.

mod common;

use forge_conformance::DriverFactory;

const REPLAY: usize = 100_000;

mod sqlite {
    forge_conformance::conformance_tests!(super::DriverFactory::of(
        &forge_sql::SQLITE,
        "sqlite://"
    )
    .with_local_replay(super::REPLAY));
}

mod postgres {
    forge_conformance::conformance_tests!(match super::common::postgres_url("conformance") {
        Some(url) =>
            super::DriverFactory::of(&forge_sql::POSTGRES, url).with_local_replay(super::REPLAY),
        None => return,
    });
}
