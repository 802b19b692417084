//! The conformance suite on the JSON-files backend, through the public macro: one
//! `#[test]` per property. Each case gets a fresh directory, removed with its store.

use std::sync::Arc;

use forge_conformance::{guarded, FnFactory};
use forge_example_json_files::JsonFilesStore;

fn json_files() -> FnFactory {
    FnFactory::new("json-files", || {
        let dir =
            tempfile::tempdir().map_err(|e| forge_core::Error::backend("json-files", false, e))?;
        let store = JsonFilesStore::open(dir.path())?;
        Ok(guarded(Arc::new(store), dir))
    })
}

forge_conformance::conformance_tests!(json_files());
