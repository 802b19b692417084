//! Progress events agree with the report: one plan, then a start and a finish per
//! planned property, in order, each finish carrying the outcome the report holds.

use std::sync::Arc;

use forge_conformance::{Config, FnFactory, Outcome, Progress, ProgressEvent, Property, Report};
use forge_core::{LocalBus, MemoryStore};
use parking_lot::Mutex;

fn memory(replay: usize) -> FnFactory {
    FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())))
        .with_bus(move || Some(Arc::new(LocalBus::with_replay(replay))))
}

/// An event with what it borrowed copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Planned(Vec<Property>),
    Started(Property, usize),
    Finished(Property, usize, Outcome),
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl Progress for Recorder {
    fn event(&self, event: ProgressEvent<'_>) {
        let seen = match event {
            ProgressEvent::Planned { properties } => Seen::Planned(properties.to_vec()),
            ProgressEvent::Started { property, index } => Seen::Started(property, index),
            ProgressEvent::Finished {
                property,
                index,
                result,
            } => {
                assert_eq!(result.property, property);
                Seen::Finished(property, index, result.outcome.clone())
            }
            other => panic!("an event this test does not know: {other:?}"),
        };
        self.0.lock().push(seen);
    }
}

/// Asserts that `events` are exactly: the plan of `report`'s properties, then start and
/// finish of each in order with the report's outcome.
fn consistent(events: &[Seen], report: &Report) {
    let planned: Vec<Property> = report.results.iter().map(|r| r.property).collect();
    let mut expected = vec![Seen::Planned(planned)];
    for (i, r) in report.results.iter().enumerate() {
        expected.push(Seen::Started(r.property, i));
        expected.push(Seen::Finished(r.property, i, r.outcome.clone()));
    }
    assert_eq!(events, expected.as_slice(), "{report}");
}

#[test]
fn events_follow_the_run_and_match_the_report() {
    let recorder = Recorder::default();
    let report = forge_conformance::run_with_progress(
        &memory(0),
        &Config::from_env().with_cases(2),
        &recorder,
    );
    let events = recorder.0.into_inner();
    consistent(&events, &report);
    // Every property was planned, started and finished once; the live-only bus
    // skips two of them, a store that cannot reopen one more, and the events say so.
    assert_eq!(report.results.len(), Property::ALL.len());
    let skipped = events
        .iter()
        .filter(|e| matches!(e, Seen::Finished(_, _, Outcome::Skipped { .. })))
        .count();
    assert_eq!(skipped, 3, "{events:?}");
    assert!(report.is_success(), "{report}");
}

#[test]
fn a_failure_is_reported_as_failed_and_only_selected_properties_are_planned() {
    let factory = memory(0).with_divergence(Property::RoundTrip, "we thought it drops fields");
    let recorder = Recorder::default();
    let report = forge_conformance::run_with_progress(
        &factory,
        &Config::from_env().with_cases(2).with_only("round_trip"),
        &recorder,
    );
    let events = recorder.0.into_inner();
    consistent(&events, &report);
    assert_eq!(events.len(), 3);
    assert!(
        matches!(&events[2], Seen::Finished(Property::RoundTrip, 0, o) if o.is_failure()),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_async_entry_point_sends_the_same_events_to_a_closure() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let progress = move |event: ProgressEvent<'_>| {
        let line = match event {
            ProgressEvent::Planned { properties } => format!("planned {}", properties.len()),
            ProgressEvent::Started { property, .. } => format!("started {property}"),
            ProgressEvent::Finished {
                property, result, ..
            } => format!("finished {property} {}", result.outcome.label()),
            _ => "other".to_owned(),
        };
        sink.lock().push(line);
    };
    let report = forge_conformance::run_async_with_progress(
        Arc::new(memory(1_000)),
        Config::from_env().with_cases(2).with_only("bus"),
        Arc::new(progress),
    )
    .await;
    assert!(report.is_success(), "{report}");
    assert_eq!(
        *seen.lock(),
        [
            "planned 2",
            "started bus",
            "finished bus passed",
            "started bus_resume",
            "finished bus_resume passed",
        ]
    );
}
