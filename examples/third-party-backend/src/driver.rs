//! The backend's driver: how forge-store opens it by URL (`jsonfiles://DIR`) and how the
//! conformance suite and the benchmark make throwaway instances of it.
//!
//! A program installs it once (`forge_store::install(&DRIVER)`); from then on every door
//! that takes a URL — `forge_store::open`, the conformance suite — opens it like a
//! built-in backend.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{
    guarded, last_handle, parts, temp_dir, Backend, Driver, DriverInfo, DriverOptions,
    InstanceOptions, Instances, Kind, StoreMap,
};
use forge_core::{Error, Result, Store};

use crate::JsonFilesStore;

/// The driver of [`JsonFilesStore`].
pub static DRIVER: JsonFilesDriver = JsonFilesDriver;

/// See [`DRIVER`].
#[derive(Debug)]
pub struct JsonFilesDriver;

/// The directory of a `jsonfiles://DIR` URL, which takes no options.
fn dir_of(url: &str) -> Result<PathBuf> {
    let (scheme, dir, query) = parts(url)?;
    if !scheme.eq_ignore_ascii_case("jsonfiles") {
        return Err(Error::invalid(format!(
            "{} is not a jsonfiles:// URL",
            forge_core::url::quoted(url)
        )));
    }
    if !query.is_empty() {
        return Err(Error::invalid(format!(
            "jsonfiles:// takes no options, got {query:?}"
        )));
    }
    Ok(PathBuf::from(dir))
}

#[async_trait]
impl Driver for JsonFilesDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "json-files",
            schemes: &["jsonfiles"],
            shape: "jsonfiles://DIR (one JSON file per session; an example backend)",
            kind: Kind::File,
        }
    }

    async fn open_store(&self, url: &str, _: &DriverOptions) -> Result<Arc<dyn Store>> {
        let dir = dir_of(url)?;
        if dir.as_os_str().is_empty() {
            return Err(Error::invalid("jsonfiles:// needs a directory"));
        }
        Ok(Arc::new(JsonFilesStore::open(dir)?))
    }

    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        dir_of(url)?;
        Ok(Arc::new(TempDirs {
            dir: options.dir.clone(),
            opened: StoreMap::new(),
        }))
    }
}

/// A fresh temporary directory per instance, removed with its store.
struct TempDirs {
    dir: Option<PathBuf>,
    opened: StoreMap<Arc<tempfile::TempDir>>,
}

impl TempDirs {
    fn open(&self, dir: Arc<tempfile::TempDir>) -> Result<Arc<dyn Store>> {
        let store = JsonFilesStore::open(dir.path())?;
        let store = guarded(Arc::new(store), Arc::clone(&dir));
        self.opened.insert(&store, dir);
        Ok(store)
    }
}

#[async_trait]
impl Instances for TempDirs {
    fn how(&self) -> String {
        "fresh temporary directory per instance".to_owned()
    }

    async fn fresh(&self) -> Result<Backend> {
        let dir = temp_dir("json-files", self.dir.as_deref())?;
        Ok(Backend {
            store: self.open(dir)?,
            bus: None,
        })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let dir = self
            .opened
            .remove(&store)
            .ok_or_else(|| Error::invalid("reopen: not a store of these instances"))?;
        last_handle(&store)?;
        drop(store);
        self.open(dir).map(Some)
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        // The store holds its directory: both go when the last handle does.
        self.opened.remove(&store);
        Ok(())
    }
}
