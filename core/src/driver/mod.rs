//! Backend drivers: how a backend describes itself once, so that every caller opens it
//! the same way.
//!
//! A backend crate exports one [`Driver`] (a `static`): its name, URL schemes and URL
//! shape ([`DriverInfo`]), how to open the store and the backend's own bus from a URL,
//! and how to make throwaway instances ([`Instances`]) for tests, the conformance suite
//! and the benchmark. The facade (`forge-store`) keeps the registry: the drivers compiled
//! in by feature plus any installed at run time, found by URL scheme. Nothing else in
//! the workspace names a backend's concrete types to open it.
//!
//! The model is sqlx's `AnyDriver` and OpenDAL's scheme → builder registration: one
//! description per backend, every caller going through it.

mod handles;
mod memory;
mod probe;
pub mod proc_io;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::bus::Bus;
use crate::error::{Error, Result};
use crate::retry::RetryPolicy;
use crate::store::Store;

pub use handles::{guarded, last_handle, temp_dir, StoreMap};
pub use memory::MEMORY;
pub use probe::{probe_error, ProbeRun, WriteProbe, Written};

/// Where a backend keeps its data, which decides how it is isolated and whether calls
/// to it are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// In the process; gone when it exits.
    Memory,
    /// In files on this machine (embedded): a throwaway instance is a temporary file.
    File,
    /// On a server reached over the network: calls ride out its restart
    /// ([`RetryPolicy`]); a throwaway instance is a fresh namespace (schema, key prefix)
    /// on it.
    Server,
}

/// What a driver says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverInfo {
    /// The backend's name, as stores report it in [`crate::Capabilities::name`] and
    /// reports print it: `redb`, `sqlite`.
    pub name: &'static str,
    /// The URL schemes it opens, lower case, the canonical one first (`postgres`,
    /// `postgresql`).
    pub schemes: &'static [&'static str],
    /// The URL's shape with its options, for help texts and errors.
    pub shape: &'static str,
    /// Where it keeps its data.
    pub kind: Kind,
}

impl DriverInfo {
    /// Whether this driver opens URLs of `scheme` (compared case-insensitively).
    pub fn opens(&self, scheme: &str) -> bool {
        self.schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme))
    }
}

/// How a driver opens a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DriverOptions {
    /// How calls to a server ride out its restart. A server driver wraps its store in
    /// [`crate::RetryStore`] with it and gives it to its bus; embedded drivers ignore it.
    pub retry: RetryPolicy,
}

impl DriverOptions {
    /// Options retrying calls as `retry` says.
    pub fn with_retry(retry: RetryPolicy) -> Self {
        Self { retry }
    }
}

/// What a driver opened: the store, and the backend's own bus when it has one.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The backend's own bus (Redis Streams), or `None`: the caller runs an in-process
    /// bus beside the store.
    pub bus: Option<Arc<dyn Bus>>,
}

/// Where throwaway instances are made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceOptions {
    /// The directory temporary files go in (a file backend's instances); `None`: the
    /// system's temporary directory.
    pub dir: Option<PathBuf>,
    /// A name part for the namespace of server instances (`conformance`, `bench`), so an
    /// operator can tell whose schema or key prefix is left after a crash.
    pub purpose: Option<String>,
    /// Use the namespace the URL names (its schema, its key prefix) as it is: every
    /// instance shares it and nothing is deleted, for several processes that meet in
    /// one namespace. `false` (the default): instances live in fresh namespaces under
    /// it, removed when they are done.
    pub in_place: bool,
}

impl InstanceOptions {
    /// Temporary files go in `dir`.
    #[must_use]
    pub fn in_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Namespaces on a server are named after `purpose`.
    #[must_use]
    pub fn purpose(mut self, purpose: impl Into<String>) -> Self {
        self.purpose = Some(purpose.into());
        self
    }

    /// Instances live in the namespace the URL names (see [`InstanceOptions::in_place`]).
    #[must_use]
    pub fn in_place(mut self, yes: bool) -> Self {
        self.in_place = yes;
        self
    }

    /// The purpose, `throwaway` when none was given, reduced to `[a-z0-9_]`.
    pub fn purpose_name(&self) -> String {
        let raw = self.purpose.as_deref().unwrap_or("throwaway");
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(32)
            .collect()
    }
}

/// A backend: how it is named, opened, and made afresh for a test.
///
/// # Behavior
/// - [`Driver::open_store`] and [`Driver::open_bus`] accept every URL whose scheme is in
///   [`DriverInfo::schemes`]; any other URL, or an option the backend does not know, is
///   [`Error::InvalidInput`] naming what was wrong. No error or `Debug` output shows a
///   password ([`crate::url::redact`]).
/// - [`Driver::instances`] makes throwaway instances on what the URL names, with the URL's
///   options; it never writes to the data the URL itself points at (a file backend makes
///   temporary files instead, a server backend a fresh namespace).
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// The driver's name, schemes, URL shape and kind.
    fn info(&self) -> DriverInfo;

    /// Opens the store `url` names.
    async fn open_store(&self, url: &str, options: &DriverOptions) -> Result<Arc<dyn Store>>;

    /// Opens the backend's own bus for `url`, or `Ok(None)` when it has none (the
    /// default): the caller then runs an in-process bus.
    async fn open_bus(&self, url: &str, options: &DriverOptions) -> Result<Option<Arc<dyn Bus>>> {
        let _ = (url, options);
        Ok(None)
    }

    /// Throwaway instances on what `url` names, with its options.
    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>>;

    /// `url` as logs and reports may show it: the password hidden.
    fn describe(&self, url: &str) -> String {
        crate::url::redact(url)
    }
}

impl std::fmt::Debug for dyn Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("info", &self.info())
            .finish()
    }
}

/// Fresh, isolated instances of a backend, for tests, the conformance suite and the
/// benchmark.
///
/// The life of an instance: [`Instances::fresh`] makes it; its user may close it and open
/// the same storage again ([`Instances::reopen`], as a restarted process would), may
/// measure what it wrote ([`Instances::probe`]), and hands the store it ends with to
/// [`Instances::teardown`], also when the user failed. [`Instances::close`] ends the
/// whole set (a server namespace shared by all instances is dropped there).
#[async_trait]
pub trait Instances: Send + Sync {
    /// How instances are isolated, for reports: `fresh temporary file per instance`.
    fn how(&self) -> String;

    /// A fresh, isolated instance: a store, and the backend's own bus on it if it has
    /// one. Instances of one set on a server may share its namespace (a schema), each
    /// user writing under tenants of its own.
    async fn fresh(&self) -> Result<Backend>;

    /// Closes `store` (an instance's store) and opens its storage again. `Ok(None)` when
    /// nothing outlives the handle (memory). The caller holds no other handle on
    /// `store`. On `Ok(None)` or an error, `store` needs no teardown any more.
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>>;

    /// A new handle on the bus of `store` (just returned by [`Instances::reopen`]) when
    /// the backend's bus outlives a restart; `Ok(None)` (the default) when the bus lives
    /// in the process.
    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> Result<Option<Arc<dyn Bus>>> {
        let _ = store;
        Ok(None)
    }

    /// A URL that opens the storage of `store` (an instance of this set) from another
    /// process: its schema or key prefix on the server. `None` (the default) where
    /// instances are not reachable that way (memory; a file one process holds) or
    /// `store` is not an instance of this set. Closing the set still removes what it
    /// made, whoever wrote there.
    fn url(&self, store: &Arc<dyn Store>) -> Option<String> {
        let _ = store;
        None
    }

    /// What measures the bytes `store` writes where they persist, if the backend can
    /// tell (the default: it cannot). A probe may hold the instance's store (to
    /// checkpoint it, or close its pool, before reading): drop it before
    /// [`Instances::reopen`], which needs the last handle.
    fn probe(&self, store: &Arc<dyn Store>) -> Option<Box<dyn WriteProbe>> {
        let _ = store;
        None
    }

    /// Cleans up after one instance: deletes what it left behind (a key prefix; a file
    /// goes with its temporary directory). Another task may still hold a handle on
    /// `store` for a moment; teardown must not require the last one.
    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()>;

    /// Ends the set: drops what all its instances shared (a schema). The default does
    /// nothing.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// The store a server driver opens: `connect` (to the server `url` names) wrapped in a
/// [`crate::RetryStore`] so its calls ride out a restart of the server as `retry` says;
/// an error connecting names the server.
///
/// # Errors
/// `connect`'s, naming the server.
pub async fn on_server<S, F>(url: &str, retry: RetryPolicy, connect: F) -> Result<Arc<dyn Store>>
where
    S: Store + 'static,
    F: std::future::Future<Output = Result<S>>,
{
    let server = crate::url::server_label(url);
    let store = connect
        .await
        .map_err(|e| crate::retry::at_server(e, &server, None))?;
    Ok(Arc::new(crate::RetryStore::new(
        Arc::new(store),
        server,
        retry,
    )))
}

/// The driver of `url` among `drivers`, by scheme.
///
/// # Errors
/// [`Error::InvalidInput`] when `url` is not `SCHEME://…` or no driver opens its scheme.
pub fn find<'a>(drivers: &[&'a dyn Driver], url: &str) -> Result<&'a dyn Driver> {
    let scheme = scheme(url)?;
    drivers
        .iter()
        .copied()
        .find(|d| d.info().opens(scheme))
        .ok_or_else(|| Error::invalid(format!("no driver opens {}", crate::url::quoted(url))))
}

/// The scheme of `url` (`redb` of `redb://x`).
///
/// # Errors
/// [`Error::InvalidInput`] when `url` has no `SCHEME://`.
pub fn scheme(url: &str) -> Result<&str> {
    match url.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() => Ok(scheme),
        _ => Err(Error::invalid(format!(
            "{} is not a URL (expected SCHEME://…)",
            crate::url::quoted(url)
        ))),
    }
}

/// The parts of `SCHEME://TARGET?QUERY`: the scheme, the target (a path, a host and
/// database) and the query without its `?`; each may be empty but the scheme.
///
/// # Errors
/// [`Error::InvalidInput`] when `url` has no `SCHEME://`.
pub fn parts(url: &str) -> Result<(&str, &str, &str)> {
    let scheme = scheme(url)?;
    let rest = &url[scheme.len() + 3..];
    let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
    Ok((scheme, target, query))
}

/// `url` with `key=value` appended to its query.
pub fn with_query(url: &str, pair: &str) -> String {
    if url.contains('?') {
        format!("{url}&{pair}")
    } else {
        format!("{url}?{pair}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_scheme_is_refused() {
        assert!(scheme("forge.redb").is_err());
        assert!(scheme("://x").is_err());
        assert_eq!(scheme("redb://x").ok(), Some("redb"));
    }

    #[test]
    fn find_goes_by_scheme_case_insensitively() {
        let drivers: [&dyn Driver; 1] = [&MEMORY];
        assert_eq!(
            find(&drivers, "MEMORY://").map(|d| d.info().name).ok(),
            Some("memory")
        );
        let err = find(&drivers, "redb://u:pw@x").unwrap_err().to_string();
        assert!(err.contains("no driver opens"), "{err}");
        assert!(!err.contains("pw"), "{err}");
    }

    #[test]
    fn purpose_names_are_safe_in_a_schema_name() {
        let o = InstanceOptions::default().purpose("My Bench; DROP");
        assert_eq!(o.purpose_name(), "my_bench__drop");
        assert_eq!(InstanceOptions::default().purpose_name(), "throwaway");
    }

    #[test]
    fn parts_split_scheme_target_and_query() {
        assert_eq!(parts("redb://a/b?x=1").ok(), Some(("redb", "a/b", "x=1")));
        assert_eq!(parts("redb://?x=1").ok(), Some(("redb", "", "x=1")));
        assert_eq!(parts("memory://").ok(), Some(("memory", "", "")));
    }

    #[test]
    fn a_pair_is_appended_to_the_query() {
        assert_eq!(with_query("redis://h", "a=1"), "redis://h?a=1");
        assert_eq!(with_query("redis://h?b=2", "a=1"), "redis://h?b=2&a=1");
    }
}
