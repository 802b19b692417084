//! `forge-store conformance`: the conformance suite against a backend URL.
//!
//! Embedded file backends (`redb://`, `sqlite://`) run every case on a fresh temporary file opened
//! with the URL's options, so the user's file is never touched. `memory://` gets a fresh
//! store per case. Server backends are opened once and shared: the suite writes only
//! under its own fresh tenants and deletes what it created.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use forge_conformance::{
    guarded, junit_xml, run_async_with_progress, BackendFactory, Config, ProgressEvent,
};
use forge_store::core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_store::core::{LocalBus, MemoryStore};
use forge_store::{redact, Bus, CoreError, Store};

use crate::progress::Progress;

/// Options of the `conformance` command.
pub struct Options<'a> {
    /// The backend URL.
    pub url: &'a str,
    /// Cases per property (default: `FORGE_PROPTEST_CASES` or the suite's default).
    pub cases: Option<u32>,
    /// Where to write a JUnit XML report.
    pub junit: Option<&'a Path>,
    /// Run only this property (or §9 group).
    pub only: Option<String>,
    /// Whether to draw progress.
    pub progress: Progress,
}

/// Where each case's store comes from.
enum Source {
    /// A fresh in-memory store per case.
    Memory,
    /// A fresh redb file per case, with the URL's options.
    Redb(forge_store::redb::RedbOptions),
    /// A fresh SQLite file per case, with the URL's query.
    Sqlite(String),
    /// The named server, opened once; the suite keeps to its own tenants.
    Shared(Arc<dyn Store>),
}

struct UrlFactory {
    name: String,
    source: Source,
    /// For `redis://`: the Streams bus the store is deployed with.
    redis_bus: Option<String>,
}

fn temp_dir(backend: &'static str) -> std::result::Result<tempfile::TempDir, CoreError> {
    tempfile::tempdir().map_err(|e| CoreError::backend(backend, false, e))
}

#[async_trait]
impl BackendFactory for UrlFactory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn store(&self) -> std::result::Result<Arc<dyn Store>, CoreError> {
        Ok(match &self.source {
            Source::Memory => Arc::new(MemoryStore::new()),
            Source::Redb(opts) => {
                let dir = temp_dir("redb")?;
                let store = forge_store::redb::RedbStore::open_with(
                    dir.path().join("conformance.redb"),
                    *opts,
                )?;
                guarded(Arc::new(store), dir)
            }
            Source::Sqlite(query) => {
                let dir = temp_dir("sqlite")?;
                let mut url = format!("sqlite://{}", dir.path().join("conformance.db").display());
                if !query.is_empty() {
                    url = format!("{url}?{query}");
                }
                let store = forge_store::sql::SqliteStore::open(&url).await?;
                guarded(Arc::new(store), dir)
            }
            Source::Shared(store) => Arc::clone(store),
        })
    }

    async fn bus(&self) -> std::result::Result<Option<Arc<dyn Bus>>, CoreError> {
        if let Some(url) = &self.redis_bus {
            return Ok(Some(Arc::new(
                forge_store::redis::RedisBus::connect(url).await?,
            )));
        }
        Ok(Some(Arc::new(LocalBus::with_replay(
            DEFAULT_REPLAY_PER_SESSION,
        ))))
    }
}

async fn factory(url: &str) -> Result<UrlFactory> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let query = url.split_once('?').map_or("", |(_, q)| q).to_owned();
    let (how, source) = match scheme.as_deref() {
        Some("memory") => ("fresh store per case", Source::Memory),
        Some("redb") => {
            let opts = forge_store::redb::RedbOptions::from_query(&query)
                .with_context(|| format!("cannot open backend {}", redact(url)))?;
            ("fresh temporary file per case", Source::Redb(opts))
        }
        Some("sqlite") => ("fresh temporary file per case", Source::Sqlite(query)),
        _ => {
            let store = forge_store::open_store(url).await?;
            (
                "shared; the suite's own tenants only",
                Source::Shared(store),
            )
        }
    };
    Ok(UrlFactory {
        name: format!("{} ({how})", redact(url)),
        source,
        redis_bus: forge_store::is_redis(url).then(|| url.to_owned()),
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
