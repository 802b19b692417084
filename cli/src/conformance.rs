//! `forge-store conformance`: the conformance suite against a backend URL.
//!
//! Embedded file backends (`redb://`) run every case on a fresh temporary file opened
//! with the URL's options, so the user's file is never touched. `memory://` gets a fresh
//! store per case. Server backends are opened once and shared: the suite writes only
//! under its own fresh tenants and deletes what it created.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use forge_conformance::{junit_xml, run_async, BackendFactory, Config, FnFactory};
use forge_core::engine::DEFAULT_REPLAY_PER_SESSION;
use forge_core::{Bus, LocalBus, MemoryStore, Store};

use crate::backend::{self, redact};

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
}

/// The bus the CLI deploys with: in-process, with a replay buffer.
fn bus() -> Arc<dyn Bus> {
    Arc::new(LocalBus::with_replay(DEFAULT_REPLAY_PER_SESSION))
}

async fn factory(url: &str) -> Result<FnFactory> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let name = format!("{} ", redact(url));
    Ok(match scheme.as_deref() {
        Some("memory") => FnFactory::new(name + "(fresh store per case)", || {
            Ok(Arc::new(MemoryStore::new()) as Arc<dyn Store>)
        }),
        Some("redb") => {
            let query = url.split_once('?').map_or("", |(_, q)| q).to_owned();
            let opts = forge_redb::RedbOptions::from_query(&query)
                .with_context(|| format!("cannot open backend {}", redact(url)))?;
            FnFactory::new(name + "(fresh temporary file per case)", move || {
                let dir = tempfile::tempdir()
                    .map_err(|e| forge_core::Error::backend("redb", false, e))?;
                let store =
                    forge_redb::RedbStore::open_with(dir.path().join("conformance.redb"), opts)?;
                Ok(forge_conformance::guarded(Arc::new(store), dir))
            })
        }
        _ => {
            let store = backend::open_store(url)
                .await
                .with_context(|| format!("cannot open backend {}", redact(url)))?;
            FnFactory::new(name + "(shared; suite tenants only)", move || {
                Ok(Arc::clone(&store))
            })
        }
    }
    .with_bus(|| Some(bus())))
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
    let report = run_async(factory, config).await;
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
