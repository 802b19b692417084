#![doc = include_str!("../README.md")]

pub mod drivers;
pub mod fixtures;
pub mod logs;
pub mod process;
pub mod servers;
pub mod services;
pub mod stores;

pub use fixtures::{
    current_thread_runtime, delta, env_number, env_usize, json_with_lone_halves, normalized,
    runtime, text_of, user_message, user_message_with, wait_until, OnPublish, TapBus,
};
pub use services::{node_project, required, service_url, skip, skip_unless, REQUIRE_SERVICES};

/// A [`Store`](forge_core::Store) that wraps another and changes only some of its methods:
/// every method it does not write forwards to [`inner`](Forward::inner) (forge-core's
/// [`forge_core::Forward`], re-exported here for test stores).
///
/// # Example
///
/// A store whose `sessions` fails, everything else read and written through:
///
/// ```
/// use std::sync::Arc;
///
/// use async_trait::async_trait;
/// use forge_core::{Error, MemoryStore, Result, SessionState, Store, TenantId};
/// use forge_testkit::Forward;
///
/// #[derive(Debug)]
/// struct NoListing(Arc<dyn Store>);
///
/// #[async_trait]
/// impl Forward for NoListing {
///     fn inner(&self) -> &dyn Store {
///         &*self.0
///     }
///
///     async fn sessions(&self, _: &TenantId) -> Result<Vec<SessionState>> {
///         Err(Error::Unsupported("no listing here".into()))
///     }
/// }
///
/// let rt = forge_testkit::current_thread_runtime();
/// let store: Arc<dyn Store> = Arc::new(NoListing(Arc::new(MemoryStore::new())));
/// assert_eq!(store.capabilities().name, "memory");
/// assert!(rt.block_on(store.sessions(&TenantId::default())).is_err());
/// rt.block_on(store.apply(&[])).unwrap();
/// ```
pub use forge_core::Forward;
