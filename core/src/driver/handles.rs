//! Keeping track of the stores a set of instances handed out: what opens each again,
//! what must outlive it.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::Result;
use crate::forward::Forward;
use crate::store::Store;

/// What a factory remembers about each store it handed out — the path or URL to open
/// it again, what must outlive it — found again from the store itself (by identity) in
/// [`Instances::reopen`](super::Instances::reopen) and [`Instances::teardown`](super::Instances::teardown).
///
/// ```
/// use std::sync::Arc;
/// use forge_core::driver::StoreMap;
/// use forge_core::{MemoryStore, Store};
///
/// let paths = StoreMap::new();
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// paths.insert(&store, "/tmp/a".to_owned());
/// assert_eq!(paths.remove(&store).as_deref(), Some("/tmp/a"));
/// assert_eq!(paths.remove(&store), None);
/// ```
pub struct StoreMap<V> {
    entries: Mutex<Vec<(Weak<dyn Store>, V)>>,
}

impl<V> StoreMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// Remembers `value` for `store`, and forgets the values of stores that are gone.
    pub fn insert(&self, store: &Arc<dyn Store>, value: V) {
        let mut entries = self.entries.lock();
        entries.retain(|(s, _)| s.strong_count() > 0);
        entries.push((Arc::downgrade(store), value));
    }

    /// Forgets `store` and returns its value, if it was inserted (and not removed).
    pub fn remove(&self, store: &Arc<dyn Store>) -> Option<V> {
        let mut entries = self.entries.lock();
        let at = entries
            .iter()
            .position(|(s, _)| s.strong_count() > 0 && same_store(s, store))?;
        Some(entries.swap_remove(at).1)
    }

    /// The value of `store`, if it was inserted (and not removed).
    pub fn get(&self, store: &Arc<dyn Store>) -> Option<V>
    where
        V: Clone,
    {
        self.entries
            .lock()
            .iter()
            .find(|(s, _)| s.strong_count() > 0 && same_store(s, store))
            .map(|(_, v)| v.clone())
    }

    /// How many live stores it remembers.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .iter()
            .filter(|(s, _)| s.strong_count() > 0)
            .count()
    }

    /// Whether it remembers no live store.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `weak` points at the store `store` points at (the data address; vtables of
/// one type may differ between codegen units).
fn same_store(weak: &Weak<dyn Store>, store: &Arc<dyn Store>) -> bool {
    std::ptr::addr_eq(weak.as_ptr(), Arc::as_ptr(store))
}

impl<V> Default for StoreMap<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> fmt::Debug for StoreMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreMap")
            .field("stores", &self.len())
            .finish()
    }
}

/// Checks that `store` is the last handle, so dropping it closes the backend.
///
/// # Errors
/// [`crate::Error::InvalidInput`] naming how many other handles are alive (a bug in
/// the caller, which must drop them first).
pub fn last_handle(store: &Arc<dyn Store>) -> Result<()> {
    match Arc::strong_count(store) {
        1 => Ok(()),
        n => Err(crate::Error::invalid(format!(
            "cannot close the store to reopen it: {} other handle(s) on it are alive",
            n - 1
        ))),
    }
}

/// Wraps `store` so that `guard` lives exactly as long as the store and is dropped after
/// it: a temp dir removed when the suite is done with a case.
///
/// ```
/// # use std::sync::Arc;
/// # use forge_core::MemoryStore;
/// struct Cleanup;
/// let store = forge_core::driver::guarded(Arc::new(MemoryStore::new()), Cleanup);
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

impl Forward for Guarded {
    fn inner(&self) -> &dyn Store {
        &*self.store
    }
}

/// A fresh temporary directory for one instance of `backend`, in `dir` or the system's
/// temporary directory. It is removed when the last `Arc` on it is dropped: give the
/// store it holds to [`guarded`] with it.
///
/// # Errors
/// [`crate::Error::Backend`] of `backend` when the directory cannot be created.
pub fn temp_dir(backend: &'static str, dir: Option<&Path>) -> Result<Arc<tempfile::TempDir>> {
    let made = match dir {
        Some(dir) => tempfile::Builder::new().prefix("forge-").tempdir_in(dir),
        None => tempfile::Builder::new().prefix("forge-").tempdir(),
    };
    made.map(Arc::new)
        .map_err(|e| crate::Error::backend(backend, false, e))
}
