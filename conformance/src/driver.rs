//! The suite over a driver's throwaway instances: what `forge-store conformance URL`
//! and every backend's `tests/conformance.rs` run.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{Driver, InstanceOptions, Instances};
use forge_core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_core::{Bus, LocalBus, Result, Store};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::{BackendFactory, Divergence, Property};

/// A [`BackendFactory`] made of a driver's [`Instances`]: each case gets a fresh
/// instance; a backend without a bus of its own runs with an in-process [`LocalBus`].
///
/// The instances are set up on first use, inside the suite's runtime (a server
/// backend's pool belongs to the runtime that made it), so a backend's whole
/// conformance test is one line:
///
/// ```no_run
/// forge_conformance::conformance_tests!(forge_conformance::DriverFactory::of(
///     &forge_core::driver::MEMORY,
///     "memory://",
/// ));
/// ```
pub struct DriverFactory {
    name: String,
    driver: &'static dyn Driver,
    url: String,
    options: InstanceOptions,
    instances: OnceCell<Arc<dyn Instances>>,
    /// The bus [`Instances::fresh`] returned with the store handed out last.
    bus: Mutex<Option<Arc<dyn Bus>>>,
    /// Events the in-process bus of a backend without its own keeps per session.
    replay: usize,
    divergences: Vec<Divergence>,
}

impl DriverFactory {
    /// Throwaway instances of `driver` on what `url` names, with its options.
    pub fn of(driver: &'static dyn Driver, url: impl Into<String>) -> Self {
        let url = url.into();
        Self {
            name: driver.describe(&url),
            driver,
            url,
            options: InstanceOptions::default().purpose("conformance"),
            instances: OnceCell::new(),
            bus: Mutex::new(None),
            replay: DEFAULT_REPLAY_PER_SESSION,
            divergences: Vec::new(),
        }
    }

    /// Instances made with `options` instead (a directory for the files, a purpose).
    #[must_use]
    pub fn with_options(mut self, options: InstanceOptions) -> Self {
        self.options = options;
        self
    }

    /// The in-process bus that runs beside a backend without a bus of its own keeps
    /// `replay` events per session (default [`DEFAULT_REPLAY_PER_SESSION`]); 0 makes it
    /// live-only, as a deployment without resumable subscribers runs it.
    #[must_use]
    pub fn with_local_replay(mut self, replay: usize) -> Self {
        self.replay = replay;
        self
    }

    /// Declares a known divergence.
    #[must_use]
    pub fn with_divergence(mut self, property: Property, reason: impl Into<String>) -> Self {
        self.divergences.push(Divergence::new(property, reason));
        self
    }

    /// The instances, set up on first use.
    ///
    /// # Errors
    /// The driver's, when the URL is not one it opens or the instances cannot be set up.
    pub async fn instances(&self) -> Result<&Arc<dyn Instances>> {
        self.instances
            .get_or_try_init(|| self.driver.instances(&self.url, &self.options))
            .await
    }

    /// How the instances are isolated (`fresh temporary file per instance`), once they
    /// are set up.
    pub fn how(&self) -> Option<String> {
        self.instances.get().map(|i| i.how())
    }

    /// Ends the instances, if they were set up: drops what they shared (a schema).
    ///
    /// # Errors
    /// The driver's.
    pub async fn close(&self) -> Result<()> {
        match self.instances.get() {
            Some(instances) => instances.close().await,
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for DriverFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverFactory")
            .field("url", &self.driver.describe(&self.url))
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl BackendFactory for DriverFactory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        let backend = self.instances().await?.fresh().await?;
        *self.bus.lock() = backend.bus;
        Ok(backend.store)
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(self.bus.lock().take().unwrap_or_else(|| {
            Arc::new(LocalBus::with_replay(self.replay))
        })))
    }

    fn divergences(&self) -> Vec<Divergence> {
        self.divergences.clone()
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.instances().await?.reopen(store).await
    }

    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        self.instances().await?.reopen_bus(store).await
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        self.instances().await?.teardown(store).await
    }
}
