//! The conformance suite on redb, through its driver: a fresh file per case (the
//! driver's throwaway instance), reopened in place by the `reopen` property, removed
//! with the case; beside it the bus redb is deployed with, an in-process LocalBus with
//! a replay buffer (so recover after a crash can rebuild streamed text).

use forge_conformance::DriverFactory;

forge_conformance::conformance_tests!(
    DriverFactory::of(&forge_redb::DRIVER, "redb://").with_local_replay(100_000)
);
