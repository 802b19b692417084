//! The driver of the in-memory reference backend, `memory://`.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Backend, Driver, DriverInfo, DriverOptions, InstanceOptions, Instances, Kind};
use crate::error::{Error, Result};
use crate::memory::MemoryStore;
use crate::store::Store;

/// The driver of [`MemoryStore`]: `memory://`, no path, no options.
pub static MEMORY: MemoryDriver = MemoryDriver;

/// See [`MEMORY`].
#[derive(Debug)]
pub struct MemoryDriver;

fn check(url: &str) -> Result<()> {
    match url.split_once("://") {
        Some((scheme, "")) if scheme.eq_ignore_ascii_case("memory") => Ok(()),
        _ => Err(Error::invalid(format!(
            "{}: memory:// takes no path or options",
            crate::url::quoted(url)
        ))),
    }
}

#[async_trait]
impl Driver for MemoryDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "memory",
            schemes: &["memory"],
            shape: "memory:// (in-process, gone when the process exits)",
            kind: Kind::Memory,
        }
    }

    async fn open_store(&self, url: &str, _: &DriverOptions) -> Result<Arc<dyn Store>> {
        check(url)?;
        Ok(Arc::new(MemoryStore::new()))
    }

    async fn instances(&self, url: &str, _: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        check(url)?;
        Ok(Arc::new(Fresh))
    }
}

/// A new [`MemoryStore`] per instance; nothing outlives the handle.
struct Fresh;

#[async_trait]
impl Instances for Fresh {
    fn how(&self) -> String {
        "fresh store per instance".to_owned()
    }

    async fn fresh(&self) -> Result<Backend> {
        Ok(Backend {
            store: Arc::new(MemoryStore::new()),
            bus: None,
        })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        drop(store);
        Ok(None)
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        drop(store);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_takes_no_path_or_options() {
        let o = DriverOptions::default();
        assert!(MEMORY.open_store("memory://", &o).await.is_ok());
        assert!(MEMORY.open_store("memory://x", &o).await.is_err());
        assert!(MEMORY.open_store("memory://?a=1", &o).await.is_err());
    }

    #[tokio::test]
    async fn every_instance_is_a_new_store() {
        let set = MEMORY
            .instances("memory://", &InstanceOptions::default())
            .await
            .unwrap();
        let a = set.fresh().await.unwrap().store;
        let b = set.fresh().await.unwrap().store;
        assert!(!std::ptr::addr_eq(Arc::as_ptr(&a), Arc::as_ptr(&b)));
        assert!(set.reopen(a).await.unwrap().is_none());
    }
}
