//! `forge-store conformance`: the conformance suite against a backend URL.
//!
//! Embedded file backends (`redb://`, `sqlite://`) run every case on a fresh temporary
//! file opened with the URL's options, so the user's file is never touched; the
//! `reopen` property closes that file and opens it again. `memory://` gets a fresh store
//! per case (and cannot reopen). `redis://` gets a fresh key prefix per case under the
//! URL's prefix (`<prefix>:conformance-<id>:c<n>`), reopened as new clients on the same
//! prefix and deleted at teardown. Other server backends (`postgres://`) are opened once
//! and shared: the suite writes only under its own fresh tenants and deletes what it
//! created; a reopen opens a new pool on the same URL.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use forge_conformance::{
    guarded, junit_xml, last_handle, run_async_with_progress, BackendFactory, Config,
    ProgressEvent, StoreMap,
};
use forge_store::core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_store::core::{LocalBus, MemoryStore};
use forge_store::redb::{RedbOptions, RedbStore};
use forge_store::redis::{RedisBus, RedisOptions, RedisStore};
use forge_store::sql::SqliteStore;
use forge_store::{redact, Bus, CoreError, Store};
use tempfile::TempDir;

use crate::progress::Progress;

/// Options of the `conformance` command.
pub struct Options<'a> {
    /// The backend URL.
    pub url: &'a str,
    /// Cases per property (default: `FORGE_PROPTEST_CASES` or the suite's default).
    pub cases: Option<u32>,
    /// Where to write a JUnit XML report.
    pub junit: Option<&'a Path>,
    /// Run only this property (or the tests of one contract property).
    pub only: Option<String>,
    /// Whether to draw progress.
    pub progress: Progress,
}

type CoreResult<T> = std::result::Result<T, CoreError>;

/// Where each case's store comes from.
enum Source {
    /// A fresh in-memory store per case.
    Memory,
    /// A fresh redb file per case, with the URL's options.
    Redb(RedbOptions),
    /// A fresh SQLite file per case, with the URL's query.
    Sqlite(String),
    /// A fresh key prefix per case, `<base>:c<n>`, with the URL's other options.
    Redis {
        options: RedisOptions,
        base: String,
        case: AtomicU64,
    },
    /// The named server, opened once; the suite keeps to its own tenants.
    Shared { url: String, store: Arc<dyn Store> },
}

/// Where a case's data lives: what opens its store again.
#[derive(Clone)]
enum Place {
    File(Arc<TempDir>),
    Redis(Arc<RedisOptions>),
}

/// The concrete store behind a handle, to close or clear it.
#[derive(Clone)]
enum Concrete {
    Redb(Arc<RedbStore>),
    Sqlite(Arc<SqliteStore>),
    Redis(Arc<RedisStore>),
}

struct UrlFactory {
    name: String,
    source: Source,
    opened: StoreMap<(Place, Concrete)>,
    /// The Redis options of the store returned last, for the bus to go with it.
    last_redis: Mutex<Option<Arc<RedisOptions>>>,
}

fn temp_dir(backend: &'static str) -> CoreResult<Place> {
    tempfile::tempdir()
        .map(|d| Place::File(Arc::new(d)))
        .map_err(|e| CoreError::backend(backend, false, e))
}

impl UrlFactory {
    /// Opens the store kept at `place` and remembers it.
    async fn open(&self, place: Place) -> CoreResult<Arc<dyn Store>> {
        let (store, concrete) = match (&self.source, &place) {
            (Source::Redb(options), Place::File(dir)) => {
                let path = dir.path().join("conformance.redb");
                let redb = Arc::new(RedbStore::open_with(path, *options)?);
                let store = guarded(Arc::clone(&redb) as Arc<dyn Store>, Arc::clone(dir));
                (store, Concrete::Redb(redb))
            }
            (Source::Sqlite(query), Place::File(dir)) => {
                let mut url = format!("sqlite://{}", dir.path().join("conformance.db").display());
                if !query.is_empty() {
                    url = format!("{url}?{query}");
                }
                let sqlite = Arc::new(SqliteStore::open(&url).await?);
                let store = guarded(Arc::clone(&sqlite) as Arc<dyn Store>, Arc::clone(dir));
                (store, Concrete::Sqlite(sqlite))
            }
            (Source::Redis { .. }, Place::Redis(options)) => {
                let redis = Arc::new(RedisStore::with_options(options).await?);
                *self
                    .last_redis
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(options));
                // A handle of its own, so that `last_handle` sees the suite's handles.
                let store = guarded(Arc::clone(&redis) as Arc<dyn Store>, ());
                (store, Concrete::Redis(redis))
            }
            _ => return Err(CoreError::invalid("a place of another backend")),
        };
        self.opened.insert(&store, (place, concrete));
        Ok(store)
    }

    /// Closes `store` and returns where its data is. To reopen (`clear == false`) it
    /// must be the last handle. At teardown (`clear`) it deletes the data too (a key
    /// prefix; a file goes with its temp dir), and a task the case aborted may still
    /// hold a handle for a moment: the file then closes when that lets go. `None` for a
    /// store it does not open (memory, a shared server).
    async fn close(&self, store: Arc<dyn Store>, clear: bool) -> CoreResult<Option<Place>> {
        let Some((place, concrete)) = self.opened.remove(&store) else {
            return Ok(None);
        };
        if !clear {
            last_handle(&store)?;
        }
        drop(store);
        match concrete {
            Concrete::Redb(redb) => {
                if let Ok(redb) = Arc::try_unwrap(redb) {
                    redb.close().await?;
                } else if !clear {
                    return Err(CoreError::invalid("the redb store is still in use"));
                }
            }
            Concrete::Sqlite(sqlite) => sqlite.close().await,
            Concrete::Redis(redis) if clear => {
                redis.clear().await?;
            }
            Concrete::Redis(_) => {}
        }
        Ok(Some(place))
    }
}

#[async_trait]
impl BackendFactory for UrlFactory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn store(&self) -> CoreResult<Arc<dyn Store>> {
        match &self.source {
            Source::Memory => Ok(Arc::new(MemoryStore::new())),
            Source::Redb(_) => self.open(temp_dir("redb")?).await,
            Source::Sqlite(_) => self.open(temp_dir("sqlite")?).await,
            Source::Redis {
                options,
                base,
                case,
            } => {
                let n = case.fetch_add(1, Ordering::Relaxed) + 1;
                let mut options = options.clone();
                options.prefix = format!("{base}:c{n}");
                self.open(Place::Redis(Arc::new(options))).await
            }
            Source::Shared { store, .. } => Ok(Arc::clone(store)),
        }
    }

    async fn bus(&self) -> CoreResult<Option<Arc<dyn Bus>>> {
        if let Source::Redis { .. } = &self.source {
            let options = self
                .last_redis
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .ok_or_else(|| CoreError::invalid("bus() before store()"))?;
            return Ok(Some(Arc::new(
                RedisBus::with_options((*options).clone()).await?,
            )));
        }
        Ok(Some(Arc::new(LocalBus::with_replay(
            DEFAULT_REPLAY_PER_SESSION,
        ))))
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> CoreResult<Option<Arc<dyn Store>>> {
        match &self.source {
            Source::Memory => Ok(None),
            Source::Shared { url, .. } => {
                drop(store);
                Ok(Some(
                    forge_store::open_store(url)
                        .await
                        .map_err(|e| CoreError::backend("conformance", true, e))?,
                ))
            }
            _ => match self.close(store, false).await? {
                Some(place) => Ok(Some(self.open(place).await?)),
                None => Err(CoreError::invalid("not a store of this factory")),
            },
        }
    }

    async fn reopen_bus(&self, store: &Arc<dyn Store>) -> CoreResult<Option<Arc<dyn Bus>>> {
        match self.opened.get(store) {
            Some((Place::Redis(options), _)) => Ok(Some(Arc::new(
                RedisBus::with_options((*options).clone()).await?,
            ))),
            _ => Ok(None),
        }
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> CoreResult<()> {
        self.close(store, true).await.map(drop)
    }
}

async fn factory(url: &str) -> Result<UrlFactory> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let query = url.split_once('?').map_or("", |(_, q)| q).to_owned();
    let (how, source) = match scheme.as_deref() {
        Some("memory") => ("fresh store per case".to_owned(), Source::Memory),
        Some("redb") => {
            let opts = RedbOptions::from_query(&query)
                .with_context(|| format!("cannot open backend {}", redact(url)))?;
            (
                "fresh temporary file per case".to_owned(),
                Source::Redb(opts),
            )
        }
        Some("sqlite") => (
            "fresh temporary file per case".to_owned(),
            Source::Sqlite(query),
        ),
        _ if forge_store::is_redis(url) => {
            let options = RedisOptions::from_url(url)
                .with_context(|| format!("cannot open backend {}", redact(url)))?;
            let base = format!(
                "{}:{}",
                options.prefix,
                forge_store::core::id::ascending("conformance")
            );
            (
                format!("fresh key prefix per case under {base}"),
                Source::Redis {
                    options,
                    base,
                    case: AtomicU64::new(0),
                },
            )
        }
        _ => {
            let store = forge_store::open_store(url).await?;
            (
                "shared; the suite's own tenants only".to_owned(),
                Source::Shared {
                    url: url.to_owned(),
                    store,
                },
            )
        }
    };
    Ok(UrlFactory {
        name: format!("{} ({how})", redact(url)),
        source,
        opened: StoreMap::new(),
        last_redis: Mutex::new(None),
    })
}

/// Runs the suite, prints the report, writes JUnit XML; fails when a property failed.
pub async fn run(opts: Options<'_>, out: &mut dyn Write) -> Result<()> {
    let mut config = Config::from_env();
    if let Some(n) = opts.cases {
        config = config.with_cases(n);
    }
    if let Some(only) = opts.only {
        config = config.with_only(only);
    }
    if let Err(e) = config.validate() {
        bail!("{e}");
    }
    let factory: Arc<dyn BackendFactory> = Arc::new(factory(opts.url).await?);
    let bar = Arc::new(opts.progress.bar(0, "conformance"));
    let shown = Arc::clone(&bar);
    let progress = move |event: ProgressEvent<'_>| match event {
        ProgressEvent::Planned { properties } => shown.set_length(properties.len() as u64),
        ProgressEvent::Started { property, .. } => shown.set_message(property.to_string()),
        ProgressEvent::Finished { .. } => shown.inc(1),
        _ => {}
    };
    let report = run_async_with_progress(factory, config, Arc::new(progress)).await;
    bar.finish_and_clear();
    write!(out, "{report}")?;
    if let Some(path) = opts.junit {
        std::fs::write(path, junit_xml(&report))
            .with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(out, "JUnit report written to {}", path.display())?;
    }
    if !report.is_success() {
        bail!("the conformance suite failed on {}", redact(opts.url));
    }
    Ok(())
}
