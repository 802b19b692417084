//! `forge-store conformance`: the conformance suite against a backend URL.
//!
//! The suite runs on the throwaway instances of the URL's driver (see the registry in
//! `forge_store::registry`), never on the data the URL points at: embedded file
//! backends (`redb://`, `sqlite://`) run every case on a fresh temporary file opened
//! with the URL's options, which the `reopen` property closes and opens again;
//! `memory://` gets a fresh store per case (and cannot reopen); `redis://` a fresh key
//! prefix per case under the URL's prefix, deleted at teardown; `postgres://` a fresh
//! schema for the run (or the schema the URL names), shared by the cases, each writing
//! under tenants of its own, and dropped at the end.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use forge_conformance::{
    junit_xml, run_async_with_progress, BackendFactory, Config, DriverFactory, ProgressEvent,
};
use forge_store::redact;

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
    let driver = forge_store::backend::driver(opts.url)?;
    let factory = Arc::new(DriverFactory::of(driver, opts.url));
    factory
        .instances()
        .await
        .with_context(|| format!("cannot open backend {}", redact(opts.url)))?;
    let suite: Arc<dyn BackendFactory> = Arc::clone(&factory) as Arc<dyn BackendFactory>;
    let bar = Arc::new(opts.progress.bar(0, "conformance"));
    let shown = Arc::clone(&bar);
    let progress = move |event: ProgressEvent<'_>| match event {
        ProgressEvent::Planned { properties } => shown.set_length(properties.len() as u64),
        ProgressEvent::Started { property, .. } => shown.set_message(property.to_string()),
        ProgressEvent::Finished { .. } => shown.inc(1),
        _ => {}
    };
    let report = run_async_with_progress(suite, config, Arc::new(progress)).await;
    bar.finish_and_clear();
    let how = factory.how();
    factory
        .close()
        .await
        .with_context(|| format!("cleaning up after the suite on {}", redact(opts.url)))?;
    write!(out, "{report}")?;
    if let Some(how) = how {
        writeln!(out, "instances: {how}")?;
    }
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
