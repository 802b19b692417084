//! The conformance suite on the JSON-files backend, through the public macro: one
//! `#[test]` per property. Each case gets a fresh directory, removed with its store.
//!
//! `FnFactory::in_temp_dir` also lets the suite reopen a store — drop it and open the
//! same directory again, as a restarted process would — so the `reopen` property runs:
//! whatever this backend keeps, it must keep in its files.

use std::sync::Arc;

use forge_conformance::FnFactory;
use forge_example_json_files::JsonFilesStore;

fn json_files() -> FnFactory {
    FnFactory::in_temp_dir("json-files", |dir| Ok(Arc::new(JsonFilesStore::open(dir)?)))
}

forge_conformance::conformance_tests!(json_files());
