//! What the kill and power-cut campaigns share: seeded kill points and one writer run,
//! started, stopped at its kill point, tallied and checked.

use std::time::Duration;

use forge_conformance::strategies::scaled::Mix;

use crate::backends::{Place, RedisPrefix};
use crate::check::Figures;
use crate::child::KillAt;
use crate::kinds::{self, Kind, Run};

/// A small seeded generator (the conformance suite's splitmix64): kill points are
/// reproducible from the seed.
pub struct Rng(Mix);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(Mix::new(seed))
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.below(n)
        }
    }
}

pub use forge_testkit::env_number;

/// A seed from `var`, or one from the clock; printed so that a run can be repeated.
pub fn seed(var: &str, campaign: &str) -> u64 {
    let seed = env_number(var, (crate::backends::nanos() % 1_000_000_007) as u64);
    eprintln!("{campaign}: seed {seed} ({var}={seed} reruns the same kill points)");
    seed
}

/// Kill points of a writer that prints confirmations, drawn from its full run.
#[derive(Default)]
pub struct Points {
    /// How long the full run took.
    pub full: Duration,
    /// How many confirmations it printed.
    pub total: usize,
}

impl Points {
    /// Run 0 runs to the end (it measures the run); odd runs are killed right after a
    /// random confirmation but the last (plus 0–2 ms), so the kill lands while the
    /// writer works; even runs after a random delay within 90% of the full run.
    pub fn at(&self, i: usize, rng: &mut Rng) -> KillAt {
        if i == 0 {
            KillAt::Never
        } else if i % 2 == 1 && self.total > 1 {
            let n = 1 + rng.below(self.total as u64 - 1) as usize;
            KillAt::After(n, Duration::from_millis(rng.below(3)))
        } else {
            let within = self.full.as_millis() as u64 * 9 / 10;
            KillAt::Delay(Duration::from_millis(rng.below(within + 1)))
        }
    }

    /// Takes the measure of run 0, which must have finished (and, unless `kind` prints
    /// none, confirmed something).
    pub fn measure(&mut self, kind: Kind, r: &Run, name: &str) {
        let o = &r.outcome;
        assert!(
            o.finished,
            "{name}: the full run did not finish: {} {}",
            o.status, o.stderr
        );
        self.full = o.ran;
        self.total = o.confirmed.len();
        assert!(
            self.total > 0 || kind == Kind::Project,
            "{name}: a full run printed no confirmation: {:?} {}",
            o.other,
            o.stderr
        );
    }
}

/// Starts a `kind` writer on `place`, stops it at `at` and counts how it ended in `f`.
pub fn run(
    kind: Kind,
    place: &Place,
    source: Option<&RedisPrefix>,
    name: &str,
    at: KillAt,
    f: &mut Figures,
) -> Run {
    let r = kinds::start(kind, place, source, name, at);
    let o = &r.outcome;
    f.runs += 1;
    f.kills += usize::from(o.killed);
    f.finished += usize::from(o.finished);
    if !o.killed && !o.finished {
        f.other += 1;
        f.problem(
            name,
            format!("the writer failed: {} {}", o.status, o.stderr),
        );
    }
    r
}

/// Checks what `r` left (after `recover`) against what it confirmed; a failing run's
/// problems end with its kill point.
pub fn check(kind: Kind, r: &Run, name: &str, at: KillAt, f: &mut Figures) {
    let before = f.problems.len();
    kinds::verify(kind, r, name, f);
    if f.problems.len() > before {
        f.problem(
            name,
            format!(
                "kill point {at:?}, {} confirmations read",
                r.outcome.confirmed.len()
            ),
        );
    }
}
