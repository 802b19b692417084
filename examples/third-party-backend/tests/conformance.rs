//! The conformance suite on the JSON-files backend, through its driver and the public
//! macro: one `#[test]` per property. Each case gets a fresh instance (a temporary
//! directory, removed with its store).
//!
//! The driver also reopens an instance — drops the store and opens the same directory
//! again, as a restarted process would — so the `reopen` property runs: whatever this
//! backend keeps, it must keep in its files.

use forge_conformance::DriverFactory;
use forge_example_json_files::DRIVER;

forge_conformance::conformance_tests!(DriverFactory::of(&DRIVER, "jsonfiles://"));
