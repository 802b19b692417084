//! Runs properties: proptest glue (cases, shrinking, the printed minimal case and
//! regression test), skips for missing capabilities, declared divergences.

use std::cell::Cell;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use forge_core::Error;
use proptest::strategy::Strategy;
use proptest::test_runner::{Config as PtConfig, RngSeed, TestCaseError, TestError, TestRunner};
use serde::Serialize;

use crate::exercised::Stats;
use crate::harness::{runtime, Caps, Ctx};
use crate::report::{Outcome, PropertyResult};
use crate::{BackendFactory, Config, Property};

/// The outcome of running generated cases.
pub(crate) struct CaseRun {
    pub outcome: Outcome,
    pub cases: u32,
    /// Of `cases`, large ones.
    pub large_cases: u32,
    pub shrink_steps: u32,
    pub notes: Vec<String>,
}

impl CaseRun {
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

fn proptest_config(config: &Config, cases: u32) -> PtConfig {
    let seed = std::env::var("FORGE_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(RngSeed::Random, RngSeed::Fixed);
    PtConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: config.max_shrink_iters,
        max_shrink_time: u32::try_from(config.max_shrink_time.as_millis()).unwrap_or(u32::MAX),
        rng_seed: seed,
        ..PtConfig::default()
    }
}

/// Largest number of `#` that follows a `"` in `s`, to pick a raw-string delimiter.
fn raw_string(s: &str) -> String {
    let mut longest = 0;
    let mut run: Option<usize> = None;
    for c in s.chars() {
        run = match (c, run) {
            ('"', _) => Some(0),
            ('#', Some(n)) => Some(n + 1),
            _ => None,
        };
        if let Some(n) = run {
            longest = longest.max(n + 1);
        }
    }
    let hashes = "#".repeat(longest.max(1));
    format!("r{hashes}\"{s}\"{hashes}")
}

/// The regression test that replays `case` for `property`.
pub(crate) fn regression_test<T: Serialize>(property: Property, case: &T) -> Option<String> {
    let json = serde_json::to_string(case).ok()?;
    Some(format!(
        "#[test]\nfn {name}_regression() {{\n    let factory = /* your BackendFactory */;\n    \
         forge_conformance::assert_replay(&factory, \"{name}\", {lit});\n}}",
        name = property.name(),
        lit = raw_string(&json)
    ))
}

/// Runs `cases` generated cases of `strategy` through `test` and shrinks a failure.
pub(crate) fn run_cases<S>(
    ctx: &Ctx<'_>,
    property: Property,
    strategy: S,
    test: impl Fn(&S::Value) -> Result<(), String>,
) -> CaseRun
where
    S: Strategy,
    S::Value: Debug + Serialize,
{
    run_n(
        ctx,
        property,
        ctx.config.cases_for(property),
        strategy,
        &test,
    )
}

/// Runs the cases of `small`, then (if they all held) the large cases of `large`
/// (`Config::large_cases_for`, none at scale 0), both through `test`.
pub(crate) fn run_scaled<S, L>(
    ctx: &Ctx<'_>,
    property: Property,
    small: S,
    large: L,
    test: impl Fn(&S::Value) -> Result<(), String>,
) -> CaseRun
where
    S: Strategy,
    L: Strategy<Value = S::Value>,
    S::Value: Debug + Serialize,
{
    let mut run = run_cases(ctx, property, small, &test);
    let n = ctx.config.large_cases_for(property);
    if run.outcome.is_failure() || n == 0 {
        return run;
    }
    let big = run_n(ctx, property, n, large, &test);
    run.outcome = big.outcome;
    run.cases += big.cases;
    run.large_cases = big.cases;
    run.shrink_steps = big.shrink_steps;
    run
}

fn run_n<S>(
    ctx: &Ctx<'_>,
    property: Property,
    cases: u32,
    strategy: S,
    test: &dyn Fn(&S::Value) -> Result<(), String>,
) -> CaseRun
where
    S: Strategy,
    S::Value: Debug + Serialize,
{
    let mut runner = TestRunner::new(proptest_config(&ctx.config, cases));
    let runs = Cell::new(0u32);
    let first_failure = Cell::new(None::<u32>);
    let result = runner.run(&strategy, |value| {
        runs.set(runs.get() + 1);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&value)))
            .unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                Err(format!("panicked: {what}"))
            });
        outcome.map_err(|e| {
            if first_failure.get().is_none() {
                first_failure.set(Some(runs.get()));
            }
            TestCaseError::fail(e)
        })
    });
    let total = runs.get();
    let failed_at = first_failure.get();
    let outcome = match result {
        Ok(()) => Outcome::Passed,
        Err(TestError::Fail(reason, value)) => Outcome::Failed {
            message: reason.message().to_owned(),
            minimal: Some(format!("{value:#?}")),
            regression: regression_test(property, &value),
        },
        Err(TestError::Abort(reason)) => Outcome::Failed {
            message: format!("aborted: {}", reason.message()),
            minimal: None,
            regression: None,
        },
    };
    CaseRun {
        outcome,
        cases: failed_at.unwrap_or(total),
        large_cases: 0,
        shrink_steps: failed_at.map_or(0, |f| total - f),
        notes: Vec::new(),
    }
}

/// Opens one backend to read what it can do, and tears it down.
pub(crate) fn caps(
    rt: &tokio::runtime::Runtime,
    factory: &dyn BackendFactory,
) -> Result<Caps, Error> {
    rt.block_on(async {
        let store = factory.store().await?;
        let caps = match factory.bus().await {
            Ok(bus) => Ok(Caps {
                store: store.capabilities(),
                bus: bus.map(|b| b.capabilities()),
            }),
            Err(e) => Err(e),
        };
        // Best effort: a teardown that fails fails the cases, which say so.
        let _ = factory.teardown(store).await;
        caps
    })
}

/// Runs `f` with a context for `factory` on a fresh runtime (for replays and for
/// running a property with an injected implementation).
pub(crate) fn with_ctx<R>(
    factory: &dyn BackendFactory,
    config: &Config,
    f: impl FnOnce(&Ctx<'_>) -> R,
) -> Result<R, String> {
    let rt = runtime();
    let caps =
        caps(&rt, factory).map_err(|e| format!("the factory could not open a backend: {e}"))?;
    let ctx = Ctx::new(factory, &rt, config.clone(), caps, Arc::default());
    Ok(f(&ctx))
}

/// Runs one property: skip if it does not apply, run, apply a declared divergence.
pub(crate) fn run_property(
    rt: &tokio::runtime::Runtime,
    factory: &dyn BackendFactory,
    property: Property,
    config: &Config,
) -> PropertyResult {
    let started = Instant::now();
    let caps = caps(rt, factory);
    let stats: Arc<Stats> = Arc::default();
    let run = match caps {
        Err(e) => CaseRun {
            outcome: Outcome::Failed {
                message: format!("the factory could not open a backend: {e}"),
                minimal: None,
                regression: None,
            },
            cases: 0,
            large_cases: 0,
            shrink_steps: 0,
            notes: Vec::new(),
        },
        Ok(caps) => match crate::properties::applies(property, &caps) {
            Err(reason) => CaseRun {
                outcome: Outcome::Skipped { reason },
                cases: 0,
                large_cases: 0,
                shrink_steps: 0,
                notes: Vec::new(),
            },
            Ok(()) => {
                let ctx = Ctx::new(factory, rt, config.clone(), caps, Arc::clone(&stats));
                crate::properties::run(&ctx, property)
            }
        },
    };
    let divergence = factory
        .divergences()
        .into_iter()
        .find(|d| d.property == property);
    let outcome = match (run.outcome, divergence) {
        (Outcome::Failed { message, .. }, Some(d)) => Outcome::ExpectedDivergence {
            reason: d.reason,
            failure: message,
        },
        (Outcome::Passed, Some(d)) => Outcome::Failed {
            message: format!(
                "declared divergence ({}) no longer diverges: the property passes; remove \
                 the declaration",
                d.reason
            ),
            minimal: None,
            regression: None,
        },
        (outcome, _) => outcome,
    };
    PropertyResult {
        property,
        outcome,
        cases: run.cases,
        shrink_steps: run.shrink_steps,
        duration: started.elapsed(),
        notes: run.notes,
        exercised: stats.snapshot(run.cases, run.large_cases),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_strings_survive_hashes_and_quotes() {
        assert_eq!(raw_string("{\"a\":1}"), "r#\"{\"a\":1}\"#");
        assert_eq!(raw_string("\"#x"), "r##\"\"#x\"##");
    }
}
