//! The suite proves it can fail: each deliberately broken wrapper of the in-memory
//! backend is run through the whole suite, and the property meant to catch its bug must
//! fail, for the right reason. Every test prints a `CAUGHT` line (wrapper, property
//! meant, every property that failed): run with `--nocapture` to get the table.

#[path = "broken/bus.rs"]
mod bus;
#[path = "broken/store.rs"]
mod store;

use std::sync::Arc;
use std::time::Duration;

use bus::{Broken, Wrapper};
use forge_conformance::properties::filter::run_with_filter;
use forge_conformance::{Config, FnFactory, Outcome, Property};
use forge_core::{
    filter_compacted_reference, read_all, CompactedView, LocalBus, MemoryStore, SessionId, Store,
    TenantId,
};
use futures::future::LocalBoxFuture;
use store::StoreBug;

fn config() -> Config {
    let mut c = Config::from_env();
    // Catching a bug is probabilistic: run half again the default at least, so a
    // property that catches its bug in one case of five misses it about once in 50,000
    // runs.
    c.cases = c.cases.max(forge_conformance::DEFAULT_CASES * 3 / 2);
    c.max_shrink_iters = 400;
    c.max_shrink_time = Duration::from_secs(10);
    c
}

/// Runs the whole suite on `wrapper`; `meant` must fail with a message containing one
/// of `because`.
fn caught(wrapper: Wrapper, meant: Property, because: &[&str]) {
    let report = forge_conformance::run(&Broken::new(wrapper), &config());
    let failed: Vec<&str> = report
        .results
        .iter()
        .filter(|r| r.outcome.is_failure())
        .map(|r| r.property.name())
        .collect();
    println!(
        "CAUGHT | {wrapper:?} | meant: {meant} | failed: {}",
        failed.join(", ")
    );
    let result = report.result(meant).expect("the property ran");
    let text = result.failure_text();
    println!("{text}\n");
    assert!(
        result.outcome.is_failure(),
        "{meant} did not catch {wrapper:?}:\n{report}"
    );
    assert!(
        because.iter().any(|b| text.contains(b)),
        "{meant} failed on {wrapper:?}, but not because {because:?}:\n{text}"
    );
    assert!(
        text.contains("forge_conformance::assert_replay(&factory"),
        "no regression test printed:\n{text}"
    );
}

#[test]
fn upsert_catches_a_store_that_keeps_the_first_write() {
    caught(
        Wrapper::Store(StoreBug::KeepsFirstWrite),
        Property::Upsert,
        &["expected:"],
    );
}

#[test]
fn upsert_catches_a_remove_that_does_not_cascade() {
    caught(
        Wrapper::Store(StoreBug::NoCascade),
        Property::Upsert,
        &["expected:"],
    );
}

#[test]
fn upsert_catches_a_failing_batch_that_is_half_applied() {
    caught(
        Wrapper::Store(StoreBug::NotAtomic),
        Property::Upsert,
        &["expected:"],
    );
}

#[test]
fn upsert_catches_a_part_keyed_per_message_that_stays_when_moved() {
    caught(
        Wrapper::Store(StoreBug::PartKeyedPerMessage),
        Property::Upsert,
        &["expected:"],
    );
}

#[test]
fn pagination_catches_pages_that_skip_their_first_item() {
    caught(
        Wrapper::Store(StoreBug::SkipsFirstOfLaterPages),
        Property::Pagination,
        &["paging yielded", "page"],
    );
}

#[test]
fn tenant_isolation_catches_a_tenant_leak() {
    caught(
        Wrapper::Store(StoreBug::TenantLeak),
        Property::TenantIsolation,
        &["tenant"],
    );
}

#[test]
fn crash_boundary_catches_a_recover_that_leaves_a_tool_running() {
    caught(
        Wrapper::Store(StoreBug::HidesTools),
        Property::CrashBoundary,
        &["interrupted tools become errors"],
    );
}

#[test]
fn filter_compacted_catches_pages_that_make_a_failed_summary_a_boundary() {
    caught(
        Wrapper::Store(StoreBug::FailedSummaryLooksFinished),
        Property::FilterCompacted,
        &["missing from the store"],
    );
}

#[test]
fn round_trip_catches_a_store_that_drops_unknown_fields() {
    caught(
        Wrapper::Store(StoreBug::DropsUnknownFields),
        Property::RoundTrip,
        &["write → read"],
    );
}

#[test]
fn concurrency_catches_database_is_locked() {
    caught(
        Wrapper::Store(StoreBug::LockedUnderConcurrency),
        Property::Concurrency,
        &["database is locked"],
    );
}

#[test]
fn write_discipline_catches_a_write_behind_store() {
    caught(
        Wrapper::Store(StoreBug::WriteBehind),
        Property::WriteDiscipline,
        &["not visible", "did not find it in the store"],
    );
}

#[test]
fn write_discipline_catches_a_store_that_receives_deltas() {
    caught(
        Wrapper::DeltaPersistingBus,
        Property::WriteDiscipline,
        &["reached the store"],
    );
}

#[test]
fn bus_catches_a_bus_that_reorders_two_events() {
    caught(Wrapper::ReorderingBus, Property::Bus, &["wrong sequence"]);
}

/// A `filter_compacted` that treats a failed summary (error, or no finish) as a
/// successful one, so it cuts the view there.
fn cuts_at_failed_summary<'a>(
    store: &'a dyn Store,
    tenant: &'a TenantId,
    session: &'a SessionId,
    page: usize,
) -> LocalBoxFuture<'a, forge_core::Result<CompactedView>> {
    Box::pin(async move {
        let all = read_all(store, tenant, session, page).await?;
        let mut lenient = all.clone();
        for m in &mut lenient {
            if let Some(a) = m.info.as_assistant_mut() {
                if a.summary == Some(true) {
                    a.error = None;
                    a.finish.get_or_insert_with(|| "stop".into());
                }
            }
        }
        let view = filter_compacted_reference(&lenient);
        let stored = |id| all.iter().find(|m| &m.info.id == id).cloned();
        Ok(CompactedView {
            messages: view
                .messages
                .iter()
                .filter_map(|v| stored(&v.info.id))
                .collect(),
            boundary: view.boundary,
            tail: view.tail,
        })
    })
}

#[test]
fn filter_compacted_catches_a_filter_that_cuts_at_a_failed_summary() {
    let memory = FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())))
        .with_bus(|| Some(Arc::new(LocalBus::new())));
    let outcome = run_with_filter(&memory, &config(), cuts_at_failed_summary);
    println!("CAUGHT | injected filter that cuts at a failed summary | meant: filter_compacted | failed: filter_compacted");
    let Outcome::Failed {
        message, minimal, ..
    } = &outcome
    else {
        panic!("filter_compacted did not catch a filter that cuts at a failed summary")
    };
    println!("{message}\n{}", minimal.as_deref().unwrap_or(""));
    assert!(message.contains("hidden by the view"), "{message}");
}
