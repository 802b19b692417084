//! How the suite gets backends: a factory that hands out fresh, isolated instances,
//! opens them again after closing them, and cleans up after each case.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{Bus, Result, Store};

pub use forge_core::driver::{guarded, last_handle, StoreMap};

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
/// concurrency needs `concurrent_writers`, and the `reopen` property needs
/// [`BackendFactory::reopen`].
///
/// The life of a store the suite gets from [`BackendFactory::store`]: one case uses it
/// (and the bus [`BackendFactory::bus`] returned with it), may close it and open the same
/// storage again through [`BackendFactory::reopen`], and then hands the store it ends
/// with to [`BackendFactory::teardown`] — also when the case failed or panicked.
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

    /// Closes `store` — a store this factory returned — and opens the storage it was
    /// opened on again (the same file, schema or key prefix), as a restarted process
    /// would. `Ok(None)` when the backend keeps nothing beyond the handle (an in-memory
    /// store): the `reopen` property is then reported as skipped.
    ///
    /// # Behavior
    /// - The suite holds no other handle on `store` when it calls this; the store is to
    ///   be closed (dropped, or closed explicitly) before the storage is opened again.
    /// - The store returned replaces `store`: the suite later hands it to
    ///   [`BackendFactory::teardown`] instead.
    /// - On `Ok(None)` and on an error, `store` needs no teardown any more. The default
    ///   tears it down and returns `Ok(None)`.
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.teardown(store).await?;
        Ok(None)
    }

    /// The bus to run with `store`, which [`BackendFactory::reopen`] just returned, when
    /// the deployment's bus outlives a restart (Redis Streams): a new handle on the same
    /// streams, which the `reopen` property then checks still knows every seq published
    /// before.
    ///
    /// `Ok(None)` (the default): the bus lives in the process, and the suite continues
    /// with a fresh one from [`BackendFactory::bus`], as a restarted process would.
    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        let _ = store;
        Ok(None)
    }

    /// Cleans up after one case: called once for every store the suite obtained from
    /// [`BackendFactory::store`] or [`BackendFactory::reopen`], after the case is done
    /// with it and with its bus (passed or failed), and for the stores the suite opens
    /// to read capabilities. A factory whose stores leave something behind (a key
    /// prefix, a schema, a pool to close) removes it here. The default drops the store.
    ///
    /// A task the case aborted (a subscriber reading the store) may still hold a handle
    /// on `store` for a moment: unlike `reopen`, teardown must not require the last one.
    ///
    /// An error fails the case it followed.
    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        drop(store);
        Ok(())
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
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        (**self).reopen(store).await
    }
    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        (**self).reopen_bus(store).await
    }
    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        (**self).teardown(store).await
    }
}

type StoreFn = dyn Fn() -> Result<Arc<dyn Store>> + Send + Sync;
type DirFn = dyn Fn(&Path) -> Result<Arc<dyn Store>> + Send + Sync;
type BusFn = dyn Fn() -> Option<Arc<dyn Bus>> + Send + Sync;

/// How an [`FnFactory`] opens stores.
enum Opener {
    /// A closure returning a fresh store; no reopen.
    Fresh(Box<StoreFn>),
    /// A closure opening the store kept in a directory; each store gets a fresh
    /// temporary one, remembered so it can be opened again.
    InDir {
        open: Box<DirFn>,
        dirs: StoreMap<Arc<tempfile::TempDir>>,
    },
}

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
///
/// A backend that keeps its data in files uses [`FnFactory::in_temp_dir`], which also
/// reopens them.
pub struct FnFactory {
    name: String,
    store: Opener,
    bus: Box<BusFn>,
    divergences: Vec<Divergence>,
}

impl FnFactory {
    /// A store-only factory. It cannot reopen a store: the `reopen` property is skipped.
    pub fn new<F>(name: impl Into<String>, store: F) -> Self
    where
        F: Fn() -> Result<Arc<dyn Store>> + Send + Sync + 'static,
    {
        Self::with_opener(name, Opener::Fresh(Box::new(store)))
    }

    /// A store-only factory for a backend kept in a directory: every store is `open`ed
    /// on a fresh temporary directory, removed when the suite is done with the store.
    /// [`BackendFactory::reopen`] drops the store (which must close it: release file
    /// locks, flush) and calls `open` on the same directory again.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use forge_core::MemoryStore;
    /// use forge_conformance::FnFactory;
    /// # struct FileStore;
    /// # impl FileStore { fn open(_: &std::path::Path) -> forge_core::Result<MemoryStore> { Ok(MemoryStore::new()) } }
    ///
    /// let factory = FnFactory::in_temp_dir("files", |dir| Ok(Arc::new(FileStore::open(dir)?)));
    /// # let _ = factory;
    /// ```
    pub fn in_temp_dir<F>(name: impl Into<String>, open: F) -> Self
    where
        F: Fn(&Path) -> Result<Arc<dyn Store>> + Send + Sync + 'static,
    {
        Self::with_opener(
            name,
            Opener::InDir {
                open: Box::new(open),
                dirs: StoreMap::new(),
            },
        )
    }

    fn with_opener(name: impl Into<String>, store: Opener) -> Self {
        Self {
            name: name.into(),
            store,
            bus: Box::new(|| None),
            divergences: Vec::new(),
        }
    }

    /// Adds a bus, built fresh for every store (and for every reopened one: a bus built
    /// by a closure lives in the process).
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

/// Opens the store kept in `dir`; the store keeps the directory alive.
fn open_in(open: &DirFn, dir: &Arc<tempfile::TempDir>) -> Result<Arc<dyn Store>> {
    Ok(guarded(open(dir.path())?, Arc::clone(dir)))
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
        match &self.store {
            Opener::Fresh(store) => store(),
            Opener::InDir { open, dirs } => {
                let dir = tempfile::tempdir()
                    .map_err(|e| forge_core::Error::backend("temp dir", false, e))?;
                let dir = Arc::new(dir);
                let store = open_in(open.as_ref(), &dir)?;
                dirs.insert(&store, dir);
                Ok(store)
            }
        }
    }
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok((self.bus)())
    }
    fn divergences(&self) -> Vec<Divergence> {
        self.divergences.clone()
    }
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let Opener::InDir { open, dirs } = &self.store else {
            return Ok(None);
        };
        let dir = dirs
            .remove(&store)
            .ok_or_else(|| forge_core::Error::invalid("reopen: not a store this factory opened"))?;
        last_handle(&store)?;
        drop(store);
        let store = open_in(open.as_ref(), &dir)?;
        dirs.insert(&store, dir);
        Ok(Some(store))
    }
    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        if let Opener::InDir { dirs, .. } = &self.store {
            // The store holds the directory too: it goes when the store does.
            dirs.remove(&store);
        }
        Ok(())
    }
}
