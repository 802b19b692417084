//! The runner: what each mode and policy writes for one W1 turn, on real backends.
//!
//! Counts are exact (they follow from the Processor's write table); physical bytes are
//! checked only for their order of magnitude, which is what the benchmark reports on.

use forge_bench::run::{measure, Run, Target};
use forge_bench::suite::{Plan, ProgressEvent, Workload};
use forge_bench::workload::{w1, w1xn, Content, W1_TURN_BYTES, W1_TURN_DELTAS};
use forge_bench::{Measurement, Mode, Policy};

fn run(target: Target, mode: Mode, policy: Policy, dir: &std::path::Path) -> Run {
    Run {
        target,
        mode,
        policy,
        workload: "W1".into(),
        turns: 1,
        latency: false,
        dir: dir.to_path_buf(),
        device: None,
    }
}

const TERMINAL: Policy = Policy::Terminal { window_ms: 10 };

async fn three(target: &Target, dir: &std::path::Path) -> [Measurement; 3] {
    let script = [w1(1, 7)];
    let mut out = Vec::new();
    for (mode, policy) in [
        (Mode::Boundary, Policy::EveryBoundary),
        (Mode::Boundary, TERMINAL),
        (Mode::PerDelta, Policy::EveryBoundary),
    ] {
        out.push(
            measure(&run(target.clone(), mode, policy, dir), &script)
                .await
                .unwrap(),
        );
    }
    out.try_into().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_costs_what_the_write_table_says_in_each_mode() {
    let dir = tempfile::tempdir().unwrap();
    let [every, terminal, per_delta] = three(&Target::new("memory://").unwrap(), dir.path()).await;
    for m in [&every, &terminal, &per_delta] {
        assert_eq!(m.logical_bytes, W1_TURN_BYTES);
        assert_eq!(m.deltas, W1_TURN_DELTAS);
        assert!(m.physical.is_none(), "memory writes nothing physical");
    }
    // One transaction per boundary: user message, message start, 2 step-starts, 3 block
    // starts and ends, 3 tools × 3 states, 2 step-finishes, finalize.
    assert_eq!((every.commits, every.rows), (22, 25));
    // Terminal boundaries only: user message, 3 block ends, 3 tool results,
    // 2 step-finishes, finalize; every part written once.
    assert_eq!((terminal.commits, terminal.rows), (10, 16));
    assert!(terminal.handed_bytes < every.handed_bytes);
    // Per-delta: every delta one more transaction rewriting its part.
    assert_eq!(per_delta.commits, every.commits + W1_TURN_DELTAS);
    assert!(per_delta.handed_bytes > 10 * every.handed_bytes);
    let delay = terminal.publish_delay_ms.unwrap();
    assert_eq!(
        (delay.p50, delay.max),
        (10.0, 10.0),
        "one session waits the window"
    );
    assert!(every.publish_delay_ms.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_backends_report_physical_bytes_and_per_delta_costs_far_more() {
    let dir = tempfile::tempdir().unwrap();
    for target in [
        Target::new("redb://").unwrap(),
        Target::new("sqlite://").unwrap(),
    ] {
        let [every, terminal, per_delta] = three(&target, dir.path()).await;
        let wa = |m: &Measurement| m.amplification().unwrap();
        // Physical bytes include the pages around the rows: above the logical bytes.
        assert!(wa(&terminal) > 1.0, "{target:?}: {terminal:?}");
        assert!(
            wa(&terminal) < wa(&every),
            "{target:?}: terminal vs every boundary"
        );
        assert!(wa(&per_delta) > 10.0 * wa(&every), "{target:?}: per-delta");
        if target == Target::new("redb://").unwrap() {
            assert_eq!(every.fsyncs.map(|f| f >= every.commits), Some(true));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_groups_sessions_into_fewer_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = w1xn(64, 1, 3);
    let mut commits = Vec::new();
    for window_ms in [0, 100] {
        let mut r = run(
            Target::new("memory://").unwrap(),
            Mode::Boundary,
            Policy::Terminal { window_ms },
            dir.path(),
        );
        r.workload = "W1x64".into();
        let m = measure(&r, &scripts).await.unwrap();
        assert_eq!(m.logical_bytes, 64 * W1_TURN_BYTES);
        commits.push(m.commits);
    }
    // 64 sessions × 10 terminal boundaries; a 100 ms window shares transactions.
    assert!(
        commits[0] <= 640 && commits[1] < commits[0] / 2,
        "{commits:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_measured_when_their_urls_are_given() {
    let dir = tempfile::tempdir().unwrap();
    let mut targets = Vec::new();
    if let Some(url) = forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", "Postgres") {
        targets.push(Target::new(&url).unwrap());
    }
    if let Some(url) = forge_testkit::service_url("FORGE_TEST_REDIS_URL", "Redis") {
        targets.push(Target::new(&url).unwrap());
    }
    for target in targets {
        let m = measure(
            &run(target.clone(), Mode::Boundary, TERMINAL, dir.path()),
            &[w1(1, 5)],
        )
        .await
        .unwrap();
        assert_eq!((m.commits, m.rows), (10, 16), "{target:?}");
        let physical = m.physical.unwrap();
        assert!(physical.bytes > 0, "{target:?}: {physical:?}");
    }
}

#[test]
fn the_quick_plan_measures_both_modes_and_skips_per_delta_beyond_its_limit() {
    let mut plan = Plan::quick(
        vec![Target::new("memory://").unwrap()],
        std::env::temp_dir(),
    );
    plan.turns = vec![10, 20];
    let runs = plan.runs();
    let per_delta: Vec<_> = runs
        .iter()
        .filter(|(r, _)| r.mode == Mode::PerDelta)
        .map(|(_, w)| w.clone())
        .collect();
    assert_eq!(
        per_delta,
        [
            Workload::Single(Content::Letters, 10),
            Workload::Single(Content::Real, 10),
            Workload::Many(Content::Letters, 64, 1),
            Workload::Many(Content::Real, 64, 1),
        ]
    );
    assert!(runs
        .iter()
        .any(|(r, _)| r.latency && r.workload == "W1-paced"));
    let windows: Vec<_> = runs
        .iter()
        .filter(|(r, _)| r.workload == "W1x64")
        .map(|(r, _)| r.policy)
        .collect();
    for w in [0, 10, 100] {
        assert!(windows.contains(&Policy::Terminal { window_ms: w }));
    }
}

/// An owned copy of a [`ProgressEvent`], to compare after the execution.
#[derive(Debug, PartialEq)]
enum Seen {
    Planned(usize),
    Started(usize, String),
    Finished(usize, String),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_plans_then_starts_and_finishes_every_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // The quick plan, smaller: every kind of run it has, in a second or two.
    let mut plan = Plan::quick(
        vec![Target::new("memory://").unwrap()],
        dir.path().to_path_buf(),
    );
    plan.turns = vec![2];
    plan.sessions = vec![4];
    plan.windows = vec![10];
    let labels: Vec<String> = plan.runs().iter().map(|(r, _)| r.label()).collect();
    let mut seen = Vec::new();
    let mut finished = Vec::new();
    let results = plan
        .execute_with_progress(|event| match event {
            ProgressEvent::Planned { total } => seen.push(Seen::Planned(total)),
            ProgressEvent::Started { index, run } => seen.push(Seen::Started(index, run.label())),
            ProgressEvent::Finished {
                index,
                run,
                measurement,
            } => {
                seen.push(Seen::Finished(index, run.label()));
                finished.push(measurement.clone());
            }
            _ => {}
        })
        .await
        .unwrap();

    assert!(labels.len() > 1, "{labels:?}");
    let mut expected = vec![Seen::Planned(labels.len())];
    for (i, label) in labels.iter().enumerate() {
        expected.push(Seen::Started(i, label.clone()));
        expected.push(Seen::Finished(i, label.clone()));
    }
    assert_eq!(seen, expected);
    assert_eq!(finished, results);
    assert_eq!(labels[0], "W1 memory boundary every-boundary T=2");
}
