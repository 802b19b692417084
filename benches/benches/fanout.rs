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

/// How a subscriber's frame text is made from the bus event.
type Frame = fn(&BusEvent) -> String;

/// One subscriber's frame text, encoded for it alone.
fn per_frame(ev: &BusEvent) -> String {
    serde_json::to_string(&ev.event).expect("encodes")
}

/// One subscriber's frame text, copied out of the event's shared JSON.
fn once(ev: &BusEvent) -> String {
    ev.event_json().expect("encodes").to_owned()
}

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    let ways: [(&str, Frame); 2] = [("encode_per_frame", per_frame), ("encode_once", once)];
    for subscribers in [1_u64, 8, 64] {
        group.throughput(Throughput::Elements(subscribers));
        for (name, frame) in ways {
            group.bench_with_input(
                BenchmarkId::new(name, subscribers),
                &subscribers,
                |b, &n| {
                    b.iter_batched(
                        event,
                        |ev| {
                            for _ in 0..n {
                                black_box(frame(&ev));
                            }
                        },
                        BatchSize::SmallInput,
                    );
                },
            );
        }
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    fanout(&mut c);
    c.final_summary();
}
