//! The SSE frames of one delta for N subscribers: the event's JSON encoded per frame
//! (`encode_per_frame`, what a server does without a kept encoding) against the bus
//! event's JSON, encoded at most once and shared ([`BusEvent::event_json`],
//! `encode_once`). A fresh bus event per iteration, so `encode_once` pays its one
//! encoding each time; building it is outside the timed part.
//!
//! Groups (criterion ids): `fanout/{encode_per_frame,encode_once}/{1,8,64}`.
//!
//! Run: `cargo bench -p forge-bench --bench fanout`

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use forge_core::{BusEvent, SessionId, TenantId};

/// A typical delta: a few words of text.
const DELTA: &str = "the quick brown fox jumps ";

fn event() -> BusEvent {
    forge_testkit::delta(
        &TenantId::default(),
        &SessionId::from("ses_fanout"),
        42,
        DELTA,
    )
}

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    for subscribers in [1_u64, 8, 64] {
        group.throughput(Throughput::Elements(subscribers));
        group.bench_with_input(
            BenchmarkId::new("encode_per_frame", subscribers),
            &subscribers,
            |b, &n| {
                b.iter_batched(
                    event,
                    |ev| {
                        for _ in 0..n {
                            let text = serde_json::to_string(&ev.event).expect("encodes");
                            black_box(text);
                        }
                    },
                    BatchSize::SmallInput,
                );
            },
        );
        group.bench_with_input(
            BenchmarkId::new("encode_once", subscribers),
            &subscribers,
            |b, &n| {
                b.iter_batched(
                    event,
                    |ev| {
                        for _ in 0..n {
                            // What each subscriber's frame copies out of the shared text.
                            let text = ev.event_json().expect("encodes").to_owned();
                            black_box(text);
                        }
                    },
                    BatchSize::SmallInput,
                );
            },
        );
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    fanout(&mut c);
    c.final_summary();
}
