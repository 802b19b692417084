//! The properties, one module per property of the contract (docs/conformance.md, "The
//! contract"), plus `reopen`. Each module documents what it checks and exposes its case
//! type and strategy; [`crate::replay`] re-runs a case from JSON.

pub mod blobs;
pub mod bus;
pub mod concurrency;
pub mod crash;
pub mod fencing;
pub mod filter;
pub mod fork;
pub mod pagination;
pub mod prune;
pub mod reopen;
pub mod revert;
pub mod round_trip;
pub mod search;
pub mod tenant;
mod turn;
pub mod upsert;
pub mod write_discipline;

use crate::harness::{Caps, CaseRun, Ctx};
use crate::Property;

/// `Err(reason)` when `property` does not apply to a backend with `caps`.
pub(crate) fn applies(property: Property, caps: &Caps) -> Result<(), String> {
    let durable_bus = |what: &str| match &caps.bus {
        None => Err(format!(
            "{what} needs a durable bus; the backend is store-only (no bus)"
        )),
        Some(b) if !b.durable => Err(format!(
            "{what} needs a durable bus; bus `{}` is live only",
            b.name
        )),
        Some(_) => Ok(()),
    };
    match property {
        Property::Bus if caps.bus.is_none() => {
            Err("the backend is store-only (no bus to test)".to_owned())
        }
        Property::BusResume => durable_bus("resuming from a seq"),
        Property::CrashDurableBus => durable_bus("rebuilding streamed text after a crash"),
        Property::Blobs if !caps.store.blobs => Err(format!(
            "store `{}` keeps no blobs (capabilities.blobs = false)",
            caps.store.name
        )),
        Property::Search if !search::applies(caps.store.search) => Err(format!(
            "store `{}` does not search (capabilities.search = off)",
            caps.store.name
        )),
        Property::Concurrency if !caps.store.concurrent_writers => Err(format!(
            "store `{}` declares concurrent_writers = false",
            caps.store.name
        )),
        _ => Ok(()),
    }
}

/// Runs the generated cases of `property`.
pub(crate) fn run(ctx: &Ctx<'_>, property: Property) -> CaseRun {
    match property {
        Property::Upsert => upsert::run(ctx),
        Property::Pagination => pagination::run(ctx),
        Property::FilterCompacted => filter::run(ctx),
        Property::CrashBoundary => crash::run(ctx, false),
        Property::CrashDurableBus => crash::run(ctx, true),
        Property::WriteDiscipline => write_discipline::run(ctx),
        Property::Bus => bus::run(ctx),
        Property::BusResume => bus::run_resume(ctx),
        Property::TenantIsolation => tenant::run(ctx),
        Property::Concurrency => concurrency::run(ctx),
        Property::RoundTrip => round_trip::run(ctx),
        Property::Fencing => fencing::run(ctx),
        Property::Prune => prune::run(ctx),
        Property::Blobs => blobs::run(ctx),
        Property::Fork => fork::run(ctx),
        Property::Revert => revert::run(ctx),
        Property::Search => search::run(ctx),
        Property::Reopen => reopen::run(ctx),
    }
}

/// For the cases' `skip_serializing_if`: a count of zero (no large-case extras) is left out
/// of a case's JSON.
#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero(n: &u16) -> bool {
    *n == 0
}

fn parse<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| format!("the case does not parse: {e}"))
}

/// Re-runs one case of `property` given as JSON.
pub(crate) fn replay(ctx: &Ctx<'_>, property: Property, json: &str) -> Result<(), String> {
    applies(property, &ctx.caps).map_err(|r| format!("skipped: {r}"))?;
    match property {
        Property::Upsert => upsert::check(ctx, &parse(json)?),
        Property::Pagination => pagination::check(ctx, &parse(json)?),
        Property::FilterCompacted => filter::check(ctx, &parse(json)?),
        Property::CrashBoundary | Property::CrashDurableBus => crash::check(ctx, &parse(json)?),
        Property::WriteDiscipline => write_discipline::check(ctx, &parse(json)?),
        Property::Bus => bus::check(ctx, &parse(json)?),
        Property::BusResume => bus::check_resume(ctx, &parse(json)?),
        Property::TenantIsolation => tenant::check(ctx, &parse(json)?),
        Property::Concurrency => concurrency::check(ctx, &parse(json)?),
        Property::RoundTrip => round_trip::check(ctx, &parse(json)?),
        Property::Fencing => fencing::check(ctx, &parse(json)?),
        Property::Prune => prune::check(ctx, &parse(json)?),
        Property::Blobs => blobs::check(ctx, &parse(json)?),
        Property::Fork => fork::check(ctx, &parse(json)?),
        Property::Revert => revert::check(ctx, &parse(json)?),
        Property::Search => search::check(ctx, &parse(json)?),
        Property::Reopen => reopen::check(ctx, &parse(json)?),
    }
}
