//! Kill campaign: SIGKILL of a real `forge-store` writer process at random points, on
//! every backend, for every kind of writer — `replay` of a W1 stream (under the
//! default commit policy and under `--commit every`), `import` of
//! several sessions, `serve` with several uploads at once under a 10 ms group-commit
//! window (the group flush across sessions), the `project` worker, `serve` in the
//! middle of an upload's body, and `replay` into a new redb or SQLite file, or a new
//! Postgres schema, killed while it creates it (`create`: kill points swept over its
//! first 80 ms; 400 ms on Postgres, whose first migration follows a connection).
//!
//! A writer runs with `--confirmations`: it prints one JSON line per terminal boundary
//! once the store has committed it (see `cli/src/confirm.rs`). The test reads that
//! pipe live, so every whole line read before the kill was printed — and committed —
//! before it. For `serve` the confirmation is the server's own: the terminal events its
//! bus published, the ones `/event` delivers to SSE clients as closed blocks.
//!
//! After each kill the store is opened again and `forge-store recover` runs in a new
//! process; then the test checks:
//! - (a) every confirmed part and message is stored exactly once, equal to its last
//!   confirmed form; no id is stored twice and no long content appears twice in a
//!   session (a duplicated message or part);
//! - (b) no part and no assistant message is left open;
//! - (c) a second `recover` closes nothing and changes nothing (every session exported
//!   before and after is equal);
//! - the store opens and `recover` succeeds after every kill (counted as failed
//!   recovers otherwise: a file a killed creation left half-written);
//! - per kind: a replayed or uploaded session holds whole turns in order (user,
//!   assistant, …); an imported session is all there or absent (its batch is one
//!   transaction); the projector worker, restarted with the same group and consumer,
//!   ends with a copy equal to the Redis source.
//!
//! Kill points are seeded. The first run of each backend × kind runs to the end (it
//! measures the run's length and its confirmations, and is checked like the others);
//! then odd runs are killed right after a random confirmation but the last (plus 0–2
//! ms), even runs after a random delay within 90% of the measured length. The project
//! worker, which prints no confirmations, is killed after a random delay within its
//! first 1.2 s (the figures count the restarts that found unacknowledged work left by
//! the kill); creation kills sweep the first 80 ms in 4 × `FORGE_KILL_RUNS` steps. The
//! seed is printed; `FORGE_KILL_SEED=N` reruns the same kill points.
//!
//! Size: `FORGE_KILL_RUNS` kills per backend × kind (default 3, about a minute for the
//! four backends); `scripts/faults/kill.sh` runs a large campaign;
//! `FORGE_KILL_KINDS=replay,serve` runs only those kinds. Each backend is a
//! test; Postgres and Redis (and the projector worker, which reads Redis) are skipped
//! loudly without `FORGE_TEST_POSTGRES_URL` / `FORGE_TEST_REDIS_URL`, and fail under
//! `FORGE_TEST_REQUIRE_SERVICES=1`. Each prints one summary line per kind.

mod backends;
mod check;
mod child;
mod kinds;

use std::time::{Duration, Instant};

use backends::{Backend, Place};
use check::Figures;
use child::KillAt;
use kinds::{Kind, KINDS};

/// The span of a project run's kill points, ms after its start.
const PROJECT_WORK_MS: u64 = 1_200;

/// Creation kills: runs per kill asked for, and the span their kill points sweep (the
/// store file is created within the first milliseconds of a run; a Postgres schema
/// after a connection, in the migration's transaction).
const CREATE_SWEEP: usize = 4;
const CREATE_SPAN_MS: u64 = 80;
const CREATE_SPAN_POSTGRES_MS: u64 = 400;

/// A small seeded generator (splitmix64): kill points are reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}")),
        Err(_) => default,
    }
}

fn seed() -> u64 {
    let seed = env_number(
        "FORGE_KILL_SEED",
        (backends::nanos() % 1_000_000_007) as u64,
    );
    eprintln!("kill: seed {seed} (FORGE_KILL_SEED={seed} reruns the same kill points)");
    seed
}

/// The kill campaign on one backend: every kind, `FORGE_KILL_RUNS` kills each.
fn campaign(backend: Backend) {
    let Some(place) = Place::new(backend, &format!("the kill campaign on {}", backend.name()))
    else {
        return;
    };
    let kills = env_number("FORGE_KILL_RUNS", 3) as usize;
    let seed = seed() ^ (backend as u64).wrapping_mul(0x1000_0001);
    let mut rng = Rng(seed);
    let mut failed = Vec::new();
    let only = std::env::var("FORGE_KILL_KINDS").unwrap_or_default();
    for kind in KINDS {
        if !only.is_empty() && !only.split(',').any(|k| k.trim() == kind.name()) {
            continue;
        }
        let source = if kind == Kind::Project {
            let Some(source) = kinds::project_source() else {
                continue;
            };
            Some(source)
        } else {
            None
        };
        let started = Instant::now();
        let mut f = Figures::default();
        let (mut full, mut total) = (Duration::ZERO, 0usize);
        if kind == Kind::Create && backend == Backend::Redis {
            continue; // a key prefix has nothing to set up
        }
        // The project worker's kill points do not need a measured full run; creation
        // kills sweep the first milliseconds, CREATE_SWEEP runs per kill asked for.
        let first = usize::from(matches!(kind, Kind::Project | Kind::Create));
        let last = if kind == Kind::Create {
            kills * CREATE_SWEEP
        } else {
            kills
        };
        for i in first..=last {
            let at = if i == 0 {
                KillAt::Never
            } else if kind == Kind::Create {
                let span = if backend == Backend::Postgres {
                    CREATE_SPAN_POSTGRES_MS
                } else {
                    CREATE_SPAN_MS
                };
                let step = span / last as u64;
                KillAt::Delay(Duration::from_millis(
                    step * (i as u64 - 1) + rng.below(step + 1),
                ))
            } else if kind == Kind::Project {
                // The worker prints no confirmations; it applies the stream within about a
                // second, then waits for more (idle rounds).
                KillAt::Delay(Duration::from_millis(rng.below(PROJECT_WORK_MS)))
            } else if i % 2 == 1 && total > 1 {
                // Before the last confirmation: the kill lands while the writer works.
                let n = 1 + rng.below(total as u64 - 1) as usize;
                KillAt::After(n, Duration::from_millis(rng.below(3)))
            } else {
                let within = full.as_millis() as u64 * 9 / 10;
                KillAt::Delay(Duration::from_millis(rng.below(within + 1)))
            };
            let name = format!("k{}{i}x{}", &kind.name()[..3], nanos_tag());
            let r = kinds::start(kind, &place, source.as_ref(), &name, at);
            let o = &r.outcome;
            if i == 0 {
                assert!(
                    o.finished,
                    "{name}: the full run did not finish: {} {}",
                    o.status, o.stderr
                );
                full = o.ran;
                total = o.confirmed.len();
                assert!(
                    total > 0 || kind == Kind::Project,
                    "{name}: a full run printed no confirmation: {:?} {}",
                    o.other,
                    o.stderr
                );
            }
            f.runs += 1;
            f.kills += usize::from(o.killed);
            f.finished += usize::from(o.finished);
            if !o.killed && !o.finished {
                f.other += 1;
                f.problem(
                    &name,
                    format!("the writer failed: {} {}", o.status, o.stderr),
                );
            }
            let before = f.problems.len();
            kinds::verify(kind, &r, &name, &mut f);
            if f.problems.len() > before {
                f.problem(
                    &name,
                    format!(
                        "kill point {at:?}, {} confirmations read",
                        o.confirmed.len()
                    ),
                );
            }
        }
        let line = f.line(backend.name(), kind.name(), started.elapsed().as_secs_f64());
        eprintln!("{line}");
        if f.failed() {
            failed.push(format!("{line}\n  {}", f.problems.join("\n  ")));
        }
    }
    assert!(failed.is_empty(), "seed {seed}:\n{}", failed.join("\n"));
}

/// A short tag that keeps run names (tenants, files) unique across test processes.
fn nanos_tag() -> String {
    format!("{:x}", backends::nanos() % 0xFFFF_FFFF)
}

#[test]
fn killed_writers_on_redb_lose_nothing_confirmed() {
    campaign(Backend::Redb);
}

#[test]
fn killed_writers_on_sqlite_lose_nothing_confirmed() {
    campaign(Backend::Sqlite);
}

#[test]
fn killed_writers_on_postgres_lose_nothing_confirmed() {
    campaign(Backend::Postgres);
}

#[test]
fn killed_writers_on_redis_lose_nothing_confirmed() {
    campaign(Backend::Redis);
}
