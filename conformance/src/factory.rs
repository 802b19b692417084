//! How the suite gets backends: a factory that hands out fresh, isolated instances.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{
    Bus, Capabilities, Cursor, Envelope, MessageId, MessageWithParts, OpenItems, Page, Result,
    SessionId, SessionState, Store, SyncEvent, TenantId,
};

use crate::Property;

/// A known divergence: the backend does not keep `property`, for `reason`.
///
/// A declared divergence turns that property's failure into
/// [`crate::Outcome::ExpectedDivergence`]. If the property passes, the suite fails until
/// the declaration is removed, so declarations cannot outlive the bug.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The property the backend does not keep.
    pub property: Property,
    /// Why, for the report.
    pub reason: String,
}

impl Divergence {
    /// A divergence on `property`.
    pub fn new(property: Property, reason: impl Into<String>) -> Self {
        Self {
            property,
            reason: reason.into(),
        }
    }
}

/// Builds the backend under test.
///
/// Every call of [`BackendFactory::store`] must return a fresh, isolated store (a new
/// temp file, schema or key prefix): the suite calls it once per generated case. The
/// suite also writes under a fresh tenant per case, so a factory that cannot isolate
/// (an existing database) still does not mix its cases with each other or with the
/// data already there.
///
/// What the suite runs depends on [`Store::capabilities`] and [`Bus::capabilities`]:
/// bus properties need a bus, resume and durable-bus recovery need a durable one,
/// concurrency needs `concurrent_writers`.
#[async_trait]
pub trait BackendFactory: Send + Sync {
    /// The backend's name, for the report.
    fn name(&self) -> &str;

    /// A fresh, isolated store.
    async fn store(&self) -> Result<Arc<dyn Store>>;

    /// A fresh bus to run with the store returned just before, or `None` for a
    /// store-only backend (the suite then drives processors over an in-process,
    /// live-only `LocalBus` and skips the bus properties).
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(None)
    }

    /// Known divergences, each with its reason.
    fn divergences(&self) -> Vec<Divergence> {
        Vec::new()
    }
}

#[async_trait]
impl<F: BackendFactory + ?Sized> BackendFactory for Arc<F> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn store(&self) -> Result<Arc<dyn Store>> {
        (**self).store().await
    }
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        (**self).bus().await
    }
    fn divergences(&self) -> Vec<Divergence> {
        (**self).divergences()
    }
}

type StoreFn = dyn Fn() -> Result<Arc<dyn Store>> + Send + Sync;
type BusFn = dyn Fn() -> Option<Arc<dyn Bus>> + Send + Sync;

/// A factory made of closures, for backends that open synchronously.
///
/// ```
/// use std::sync::Arc;
/// use forge_conformance::FnFactory;
/// use forge_core::{LocalBus, MemoryStore};
///
/// let factory = FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())))
///     .with_bus(|| Some(Arc::new(LocalBus::with_replay(10_000))));
/// # let _ = factory;
/// ```
pub struct FnFactory {
    name: String,
    store: Box<StoreFn>,
    bus: Box<BusFn>,
    divergences: Vec<Divergence>,
}

impl FnFactory {
    /// A store-only factory.
    pub fn new<F>(name: impl Into<String>, store: F) -> Self
    where
        F: Fn() -> Result<Arc<dyn Store>> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            store: Box::new(store),
            bus: Box::new(|| None),
            divergences: Vec::new(),
        }
    }

    /// Adds a bus, built fresh for every store.
    #[must_use]
    pub fn with_bus<F>(mut self, bus: F) -> Self
    where
        F: Fn() -> Option<Arc<dyn Bus>> + Send + Sync + 'static,
    {
        self.bus = Box::new(bus);
        self
    }

    /// Declares a known divergence.
    #[must_use]
    pub fn with_divergence(mut self, property: Property, reason: impl Into<String>) -> Self {
        self.divergences.push(Divergence::new(property, reason));
        self
    }
}

impl fmt::Debug for FnFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnFactory")
            .field("name", &self.name)
            .field("divergences", &self.divergences)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl BackendFactory for FnFactory {
    fn name(&self) -> &str {
        &self.name
    }
    async fn store(&self) -> Result<Arc<dyn Store>> {
        (self.store)()
    }
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok((self.bus)())
    }
    fn divergences(&self) -> Vec<Divergence> {
        self.divergences.clone()
    }
}

/// Wraps `store` so that `guard` lives exactly as long as the store and is dropped after
/// it: a temp dir removed when the suite is done with a case.
///
/// ```
/// # use std::sync::Arc;
/// # use forge_core::MemoryStore;
/// struct Cleanup;
/// let store = forge_conformance::guarded(Arc::new(MemoryStore::new()), Cleanup);
/// # let _ = store;
/// ```
pub fn guarded<G: Send + Sync + 'static>(store: Arc<dyn Store>, guard: G) -> Arc<dyn Store> {
    Arc::new(Guarded {
        store,
        _guard: Box::new(guard),
    })
}

/// A store that owns something to drop after it. Fields drop in order: store first.
struct Guarded {
    store: Arc<dyn Store>,
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl fmt::Debug for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.store, f)
    }
}

#[async_trait]
impl Store for Guarded {
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        self.store.apply(batch).await
    }
    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        self.store.session(tenant, id).await
    }
    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        self.store.sessions(tenant).await
    }
    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.store.message(tenant, session, id).await
    }
    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.store.messages(tenant, session, before, limit).await
    }
    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        self.store.open_items(tenant, session).await
    }
}
