//! What the criterion benches share.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};

/// A benchmark group of `samples` samples, warmed up for 1 s and measured for 3 s: the
/// benches' short runs.
pub fn quick_group<'a>(
    c: &'a mut Criterion,
    name: &str,
    samples: usize,
) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group
}
