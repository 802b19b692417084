//! The suite over a driver's throwaway instances: what `forge-store conformance URL`
//! and every backend's `tests/conformance.rs` run.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{Driver, InstanceOptions, Instances};
use forge_core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_core::{Bus, LocalBus, Result, Store};
use parking_lot::Mutex;

use crate::{BackendFactory, Divergence, Property};

/// A [`BackendFactory`] made of a driver's [`Instances`]: each case gets a fresh
/// instance; a backend without a bus of its own runs with an in-process [`LocalBus`].
pub struct DriverFactory {
    name: String,
    instances: Arc<dyn Instances>,
    /// The bus [`Instances::fresh`] returned with the store handed out last.
    bus: Mutex<Option<Arc<dyn Bus>>>,
    divergences: Vec<Divergence>,
}

impl DriverFactory {
    /// Instances of `driver` on what `url` names, with its options.
    ///
    /// # Errors
    /// The driver's, when `url` is not one it opens or the instances cannot be set up.
    pub async fn new(driver: &dyn Driver, url: &str) -> Result<Self> {
        let options = InstanceOptions::default().purpose("conformance");
        let instances = driver.instances(url, &options).await?;
        Ok(Self::from_instances(
            format!("{} ({})", driver.describe(url), instances.how()),
            instances,
        ))
    }

    /// A factory named `name` over `instances`.
    pub fn from_instances(name: impl Into<String>, instances: Arc<dyn Instances>) -> Self {
        Self {
            name: name.into(),
            instances,
            bus: Mutex::new(None),
            divergences: Vec::new(),
        }
    }

    /// Declares a known divergence.
    #[must_use]
    pub fn with_divergence(mut self, property: Property, reason: impl Into<String>) -> Self {
        self.divergences.push(Divergence::new(property, reason));
        self
    }

    /// The instances it hands out: [`Instances::close`] them when the suite is done.
    pub fn instances(&self) -> &Arc<dyn Instances> {
        &self.instances
    }
}

impl std::fmt::Debug for DriverFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverFactory")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl BackendFactory for DriverFactory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let backend = self.instances.fresh().await?;
        *self.bus.lock() = backend.bus;
        Ok(backend.store)
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(self.bus.lock().take().unwrap_or_else(|| {
            Arc::new(LocalBus::with_replay(DEFAULT_REPLAY_PER_SESSION))
        })))
    }

    fn divergences(&self) -> Vec<Divergence> {
        self.divergences.clone()
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.instances.reopen(store).await
    }

    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        self.instances.reopen_bus(store).await
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        self.instances.teardown(store).await
    }
}
