#![doc = include_str!("../README.md")]

mod config;
pub mod differential;
mod driver;
mod exercised;
mod factory;
mod harness;
mod junit;
mod progress;
pub mod properties;
pub mod reference;
mod report;
mod runner;
mod services;
pub mod strategies;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

pub use config::{Config, DEFAULT_CASES, DEFAULT_SCALE};
pub use driver::DriverFactory;
pub use exercised::Exercised;
pub use factory::{guarded, last_handle, BackendFactory, Divergence, FnFactory, StoreMap};
pub use junit::junit_xml;
pub use progress::{NoProgress, Progress, ProgressEvent};
pub use report::{Outcome, PropertyResult, Report};
pub use services::{service_url, REQUIRE_SERVICES};

/// One property of the contract (docs/conformance.md, "The contract"). Each is its own
/// test.
///
/// Two of the nine properties are split where part of them needs a capability, so that
/// the part that does not apply is reported as skipped instead of silently passing:
/// [`Property::CrashDurableBus`] (crash boundary on a durable bus) and
/// [`Property::BusResume`] (resume from a seq).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Property {
    /// Contract property 1: upsert/remove sequences leave the store equal to the
    /// reference model.
    Upsert,
    /// Contract property 2: paging yields every message exactly once in order, also
    /// with appends.
    Pagination,
    /// Contract property 3: `filter_compacted` through the backend equals the reference
    /// function.
    FilterCompacted,
    /// Contract property 4: finalize / recover close everything and keep completed
    /// blocks exactly.
    CrashBoundary,
    /// Contract property 4 on a durable bus: recover rebuilds streamed text from the
    /// bus.
    CrashDurableBus,
    /// Contract property 5: deltas never reach the store, a text part is written at
    /// most twice, a sync event is published only after its commit.
    WriteDiscipline,
    /// Contract property 6: per-session order, every subscriber sees the same sequence.
    Bus,
    /// Contract property 6 on a durable bus: replay / subscribe from a seq returns
    /// exactly the later events.
    BusResume,
    /// Contract property 7: nothing done in one tenant is visible in another; hostile
    /// ids are rejected or contained.
    TenantIsolation,
    /// Contract property 8: concurrent writers lose no update and surface no error.
    Concurrency,
    /// Contract property 9: every kind, including unknown kinds and fields, survives
    /// write → read.
    RoundTrip,
    /// Contract property 10: one writer per session: claims grant growing epochs, a
    /// batch of a stale epoch never lands, racing writers lose nothing confirmed.
    Fencing,
    /// Contract property 11: retention removes what its policy says, nothing half, and
    /// never a session written while it runs.
    Prune,
    /// Contract property 12: large values stored once per tenant read back whole, are
    /// kept once, stay in their tenant, and a sweep removes exactly the unreferenced
    /// ones. Needs a backend that keeps blobs.
    Blobs,
    /// Contract property 13: a fork holds a copy of its source's history up to the
    /// point, and afterwards writing either never changes the other.
    Fork,
    /// Contract property 14: a revert hides what follows its point from the history and
    /// the view, a restore shows it again, and a new message drops what is hidden.
    Revert,
    /// Contract property 15: a search finds exactly the parts holding every word asked
    /// for, as the rows are now, in its tenant only, best first.
    Search,
    /// Durability across a restart: after the store is closed and opened again it
    /// equals the reference model, per-session seqs continue without reuse, and recover
    /// behaves as on a store that was never closed. Needs [`BackendFactory::reopen`].
    Reopen,
}

impl Property {
    /// Every property, in the order the suite runs them.
    pub const ALL: [Property; 18] = [
        Property::Upsert,
        Property::Pagination,
        Property::FilterCompacted,
        Property::CrashBoundary,
        Property::CrashDurableBus,
        Property::WriteDiscipline,
        Property::Bus,
        Property::BusResume,
        Property::TenantIsolation,
        Property::Concurrency,
        Property::RoundTrip,
        Property::Fencing,
        Property::Prune,
        Property::Blobs,
        Property::Fork,
        Property::Revert,
        Property::Search,
        Property::Reopen,
    ];

    /// The name used in reports, test names and `Config::only`.
    pub fn name(self) -> &'static str {
        match self {
            Property::Upsert => "upsert",
            Property::Pagination => "pagination",
            Property::FilterCompacted => "filter_compacted",
            Property::CrashBoundary => "crash_boundary",
            Property::CrashDurableBus => "crash_durable_bus",
            Property::WriteDiscipline => "write_discipline",
            Property::Bus => "bus",
            Property::BusResume => "bus_resume",
            Property::TenantIsolation => "tenant_isolation",
            Property::Concurrency => "concurrency",
            Property::RoundTrip => "round_trip",
            Property::Fencing => "fencing",
            Property::Prune => "prune",
            Property::Blobs => "blobs",
            Property::Fork => "fork",
            Property::Revert => "revert",
            Property::Search => "search",
            Property::Reopen => "reopen",
        }
    }

    /// The contract property this test belongs to (`crash_durable_bus` belongs to
    /// `crash_boundary`, `bus_resume` to `bus`); `Config::only` accepts either.
    pub fn group(self) -> &'static str {
        match self {
            Property::CrashDurableBus => Property::CrashBoundary.name(),
            Property::BusResume => Property::Bus.name(),
            other => other.name(),
        }
    }

    /// One line saying what the property checks.
    pub fn description(self) -> &'static str {
        match self {
            Property::Upsert => {
                "any sequence of upserts and removes (ids repeating, cascades, invalid \
                 upserts rejected atomically) leaves the store equal to the reference model"
            }
            Property::Pagination => {
                "for any history and page size, paging to the end yields every message \
                 exactly once in order, also with appends between page reads"
            }
            Property::FilterCompacted => {
                "the compacted view read through the backend equals the reference \
                 filter_compacted over the full history"
            }
            Property::CrashBoundary => {
                "for any model stream cut at any point, finalize / recover leave nothing \
                 open, keep completed blocks exactly, close tools as errors, idempotently"
            }
            Property::CrashDurableBus => {
                "after a crash, recover on a durable bus persists every delta-confirmed text"
            }
            Property::WriteDiscipline => {
                "deltas never reach the store, a text part is written at most twice, a sync \
                 event is published only after its commit"
            }
            Property::Bus => {
                "per-session order; every subscriber of a session sees the same sequence"
            }
            Property::BusResume => {
                "replay / subscribe from a seq returns exactly the later events, in order"
            }
            Property::TenantIsolation => {
                "nothing done in tenant A is visible in tenant B; hostile tenant, session \
                 and message ids are rejected or contained"
            }
            Property::Concurrency => {
                "concurrent writers on many sessions and on one session lose no update and \
                 surface no error"
            }
            Property::RoundTrip => {
                "every message and part kind, including unknown kinds and fields, survives \
                 write -> read (and read-modify-write) unchanged"
            }
            Property::Fencing => {
                "claims grant growing epochs per session and tenant, a batch of a stale \
                 epoch never lands (also racing a claim), racing writers lose nothing \
                 confirmed"
            }
            Property::Prune => {
                "prune (idle, session limit, compacted history) removes exactly what the \
                 policy says, concurrently with writers: nothing written meanwhile is lost, \
                 nothing deleted is left half, the compacted view does not change"
            }
            Property::Blobs => {
                "large values stored once read back whole, are kept once per tenant and \
                 only there, and a sweep removes exactly the blobs no row references"
            }
            Property::Fork => {
                "a fork holds its source's history up to the point under new ids, names its \
                 source, and afterwards writing either session never changes the other"
            }
            Property::Revert => {
                "revert -> restore -> revert -> new message: the history and the view hide \
                 what follows the point, show it again, and the new message drops it"
            }
            Property::Search => {
                "a search finds exactly the parts whose text holds every word asked for, \
                 as the rows are now (overwritten, moved, removed), in its tenant only, best \
                 first, each hit with its ids and a snippet"
            }
            Property::Reopen => {
                "closed and opened again, the store equals the reference model, seqs \
                 continue without reuse, and recover works as on a store never closed"
            }
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Property {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Property::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown property {s:?}; known: {}",
                    Property::ALL.map(Property::name).join(", ")
                )
            })
    }
}

/// Runs the suite (or `config.only`) against a backend and returns the report.
///
/// Builds its own tokio runtime. Called from inside a runtime it runs on a separate
/// thread and blocks the caller until done; async callers should prefer [`run_async`].
pub fn run(factory: &dyn BackendFactory, config: &Config) -> Report {
    run_with_progress(factory, config, &NoProgress)
}

/// [`run`], telling `progress` what it plans, and when each property starts and ends.
pub fn run_with_progress(
    factory: &dyn BackendFactory,
    config: &Config,
    progress: &dyn Progress,
) -> Report {
    outside_runtime(|| run_here(factory, config, progress))
}

/// [`run`] for async callers: runs the suite on its own thread and runtime.
pub async fn run_async(factory: Arc<dyn BackendFactory>, config: Config) -> Report {
    run_async_with_progress(factory, config, Arc::new(NoProgress)).await
}

/// [`run_async`] with progress events (see [`run_with_progress`]). `progress` is called
/// on the suite's thread.
pub async fn run_async_with_progress(
    factory: Arc<dyn BackendFactory>,
    config: Config,
    progress: Arc<dyn Progress>,
) -> Report {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("forge-conformance".into())
        .stack_size(SUITE_STACK)
        .spawn(move || {
            let _ = tx.send(run_here(factory.as_ref(), &config, progress.as_ref()));
        })
        .unwrap_or_else(|e| panic!("cannot start the conformance suite thread: {e}"));
    rx.await
        .unwrap_or_else(|_| panic!("the conformance suite thread panicked"))
}

fn run_here(factory: &dyn BackendFactory, config: &Config, progress: &dyn Progress) -> Report {
    let started = Instant::now();
    let planned: Vec<Property> = Property::ALL
        .into_iter()
        .filter(|p| config.selects(*p))
        .collect();
    progress.event(ProgressEvent::Planned {
        properties: &planned,
    });
    let rt = harness::runtime();
    let (store_caps, bus_caps) = harness::probe(&rt, factory);
    let mut results = Vec::with_capacity(planned.len());
    for (index, &property) in planned.iter().enumerate() {
        progress.event(ProgressEvent::Started { property, index });
        let result = runner::run_property(&rt, factory, property, config);
        progress.event(ProgressEvent::Finished {
            property,
            index,
            result: &result,
        });
        results.push(result);
    }
    Report {
        backend: factory.name().to_owned(),
        store: store_caps,
        bus: bus_caps,
        cases: config.cases,
        results,
        duration: started.elapsed(),
    }
}

/// Runs one property; used by [`conformance_tests!`].
pub fn run_property(
    factory: &dyn BackendFactory,
    property: Property,
    config: &Config,
) -> PropertyResult {
    let only = Config {
        only: Some(property.name().to_owned()),
        ..config.clone()
    };
    run(factory, &only)
        .results
        .into_iter()
        .next()
        .unwrap_or_else(|| unreachable!("the property selects itself"))
}

/// Runs one property with [`Config::from_env`] and panics with the failure (and its
/// minimal case) if it fails. A skipped property or an expected divergence prints why
/// and returns. The body of every test [`conformance_tests!`] generates.
pub fn assert_property(factory: &dyn BackendFactory, property: Property) {
    let result = run_property(factory, property, &Config::from_env());
    match &result.outcome {
        Outcome::Passed => {}
        Outcome::Skipped { reason } => {
            eprintln!("SKIPPED {}: {reason}", property.name());
        }
        Outcome::ExpectedDivergence { reason, .. } => {
            eprintln!("EXPECTED DIVERGENCE {}: {reason}", property.name());
        }
        Outcome::Failed { .. } => panic!("{}", result.failure_text()),
    }
}

/// Re-runs one case of a property from its JSON form, as printed in a failure report.
///
/// A failure report prints a regression test calling [`assert_replay`], which wraps
/// this.
///
/// # Errors
/// The property's failure message, or a message naming an unknown property or a case
/// that does not parse.
pub fn replay(factory: &dyn BackendFactory, property: &str, case_json: &str) -> Result<(), String> {
    let property: Property = property.parse()?;
    outside_runtime(|| {
        runner::with_ctx(factory, &Config::from_env(), |ctx| {
            properties::replay(ctx, property, case_json)
        })?
    })
}

/// [`replay`] that panics with the failure (for regression tests).
///
/// # Panics
/// When the case fails, with the property's failure message.
pub fn assert_replay(factory: &dyn BackendFactory, property: &str, case_json: &str) {
    if let Err(failure) = replay(factory, property, case_json) {
        panic!("property `{property}` fails on the replayed case: {failure}");
    }
}

/// The stack of the suite's thread. The strategies of the richer properties build
/// deeply nested values; a debug build needs more than a test thread's 2 MiB for them.
const SUITE_STACK: usize = 256 << 20;

/// Runs `f` on a scoped thread with a large stack, outside any tokio runtime (the suite
/// blocks on its own runtime, which cannot nest).
fn outside_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("forge-conformance".into())
            .stack_size(SUITE_STACK)
            .spawn_scoped(s, f)
            .unwrap_or_else(|e| panic!("cannot start the conformance suite thread: {e}"))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Expands to one `#[test]` per property, each running that property against the
/// backend the factory expression builds (evaluated once per test).
///
/// ```ignore
/// forge_conformance::conformance_tests!(my_backend::factory());
/// ```
///
/// Case counts come from `FORGE_PROPTEST_CASES`. Use it once per module; wrap several
/// invocations in separate modules.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@tests $factory;
            upsert => Upsert,
            pagination => Pagination,
            filter_compacted => FilterCompacted,
            crash_boundary => CrashBoundary,
            crash_durable_bus => CrashDurableBus,
            write_discipline => WriteDiscipline,
            bus => Bus,
            bus_resume => BusResume,
            tenant_isolation => TenantIsolation,
            concurrency => Concurrency,
            round_trip => RoundTrip,
            fencing => Fencing,
            prune => Prune,
            blobs => Blobs,
            fork => Fork,
            revert => Revert,
            search => Search,
            reopen => Reopen,
        );
    };
    (@tests $factory:expr; $($name:ident => $variant:ident,)*) => {
        $(
            #[test]
            fn $name() {
                let factory = $factory;
                $crate::assert_property(&factory, $crate::Property::$variant);
            }
        )*
    };
}
