//! The function way in: `run` returns a report with one line per property, skips with
//! reasons, and JUnit XML; declared divergences that pass fail the suite.

use std::sync::Arc;

use forge_conformance::{junit_xml, Config, FnFactory, Outcome, Property};
use forge_core::{LocalBus, MemoryStore};

fn memory(replay: usize) -> FnFactory {
    FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())))
        .with_bus(move || Some(Arc::new(LocalBus::with_replay(replay))))
}

#[test]
fn a_live_only_bus_skips_what_needs_durability_with_the_reason() {
    let report = forge_conformance::run(&memory(0), &Config::from_env().with_cases(4));
    println!("{report}");
    assert!(report.is_success(), "{report}");
    assert_eq!(report.results.len(), Property::ALL.len());
    for p in [Property::BusResume, Property::CrashDurableBus] {
        let r = report.result(p).unwrap();
        let Outcome::Skipped { reason } = &r.outcome else {
            panic!("{p} must be skipped on a live-only bus: {:?}", r.outcome)
        };
        assert!(reason.contains("durable"), "{reason}");
    }
    let text = report.to_string();
    assert!(text.contains("skipped"), "{text}");
    assert!(
        text.contains("summary: 15 passed, 0 failed, 3 skipped"),
        "{text}"
    );
    let xml = junit_xml(&report);
    println!("{xml}");
    assert!(xml.contains("<skipped message="), "{xml}");
    assert!(xml.contains("name=\"upsert\""), "{xml}");
}

#[test]
fn a_store_only_backend_skips_the_bus_properties() {
    let factory = FnFactory::new("memory-store-only", || Ok(Arc::new(MemoryStore::new())));
    let report =
        forge_conformance::run(&factory, &Config::from_env().with_cases(4).with_only("bus"));
    println!("{report}");
    assert_eq!(report.results.len(), 2);
    assert!(report
        .results
        .iter()
        .all(|r| matches!(r.outcome, Outcome::Skipped { .. })));
}

#[test]
fn a_declared_divergence_that_passes_fails_the_suite() {
    let factory = memory(0).with_divergence(Property::RoundTrip, "we thought it drops fields");
    let report = forge_conformance::run(
        &factory,
        &Config::from_env().with_cases(2).with_only("round_trip"),
    );
    println!("{report}");
    assert!(!report.is_success());
    let Outcome::Failed { message, .. } = &report.results[0].outcome else {
        panic!("{report}")
    };
    assert!(message.contains("remove the declaration"), "{message}");
}

#[tokio::test]
async fn run_async_works_inside_a_runtime_and_run_only_one_property() {
    let report = forge_conformance::run_async(
        Arc::new(memory(1_000)),
        Config::from_env().with_cases(2).with_only("pagination"),
    )
    .await;
    assert_eq!(report.results.len(), 1);
    assert!(report.is_success(), "{report}");
    // The blocking entry point also works from inside a runtime.
    let report = forge_conformance::run(
        &memory(0),
        &Config::from_env().with_cases(2).with_only("upsert"),
    );
    assert!(report.is_success(), "{report}");
}

#[test]
fn replay_reruns_a_case_from_json() {
    let case = r#"{"batches":[{"seq":3,"ops":[{"PutSession":{"s":0,"v":1}},{"PutMessage":{"s":0,"m":1,"kind":"User","v":0}}]}]}"#;
    forge_conformance::replay(&memory(0), "upsert", case).unwrap();
    forge_conformance::assert_replay(&memory(0), "upsert", case);
    let err = forge_conformance::replay(&memory(0), "upsert", "{").unwrap_err();
    assert!(err.contains("does not parse"), "{err}");
    let err = forge_conformance::replay(&memory(0), "nope", "{}").unwrap_err();
    assert!(err.contains("unknown property"), "{err}");
}
