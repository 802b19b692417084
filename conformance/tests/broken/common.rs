//! What the tests that run the suite on a broken backend share (`broken.rs`,
//! `broken_reopen.rs`).

use std::time::Duration;

use forge_conformance::{Config, Property, Report};

/// [`Config::from_env`] for catching a bug: catching is probabilistic, so it runs half
/// again the default cases at least; shrinking (which only makes the printed case
/// shorter) stops after `shrink_iters` steps or `shrink_time`.
pub fn catching_config(shrink_iters: u32, shrink_time: Duration) -> Config {
    let mut c = Config::from_env();
    c.cases = c.cases.max(forge_conformance::DEFAULT_CASES * 3 / 2);
    c.max_shrink_iters = shrink_iters;
    c.max_shrink_time = shrink_time;
    c
}

/// The properties that failed in `report`.
pub fn failed(report: &Report) -> Vec<&'static str> {
    report
        .results
        .iter()
        .filter(|r| r.outcome.is_failure())
        .map(|r| r.property.name())
        .collect()
}

/// The failure `text` (of `failure`, e.g. "upsert failed on …") says one of `because`.
#[track_caller]
pub fn assert_because(text: &str, failure: &str, because: &[&str]) {
    assert!(
        because.iter().any(|b| text.contains(b)),
        "{failure}, but not because {because:?}:\n{text}"
    );
}

/// The failure `text` prints a regression test of `property`.
#[track_caller]
pub fn assert_regression_printed(text: &str, property: Property) {
    let call = format!(
        "forge_conformance::assert_replay(&factory, \"{}\"",
        property.name()
    );
    assert!(text.contains(&call), "no regression test printed:\n{text}");
}
