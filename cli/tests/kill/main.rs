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
#[path = "../common/mod.rs"]
mod common;
mod kinds;
mod points;

use std::time::{Duration, Instant};

use backends::{Backend, Place};
use check::Figures;
use child::KillAt;
use kinds::{Kind, KINDS};
use points::{env_number, Points, Rng};

/// The span of a project run's kill points, ms after its start.
const PROJECT_WORK_MS: u64 = 1_200;

/// Creation kills: runs per kill asked for, and the span their kill points sweep (the
/// store file is created within the first milliseconds of a run; a Postgres schema
/// after a connection, in the migration's transaction).
const CREATE_SWEEP: usize = 4;
const CREATE_SPAN_MS: u64 = 80;
const CREATE_SPAN_POSTGRES_MS: u64 = 400;

/// The kill campaign on one backend: every kind, `FORGE_KILL_RUNS` kills each.
fn campaign(backend: Backend) {
    let Some(place) = Place::new(backend, &format!("the kill campaign on {}", backend.name()))
    else {
        return;
    };
    let kills = env_number("FORGE_KILL_RUNS", 3_usize);
    let seed = points::seed("FORGE_KILL_SEED", "kill") ^ (backend as u64).wrapping_mul(0x1000_0001);
    let mut rng = Rng::new(seed);
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
        let mut measured = Points::default();
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
            let at = if kind == Kind::Create {
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
            } else {
                measured.at(i, &mut rng)
            };
            let name = format!("k{}{i}x{}", &kind.name()[..3], nanos_tag());
            let r = points::run(kind, &place, source.as_ref(), &name, at, &mut f);
            if i == 0 {
                measured.measure(kind, &r, &name);
            }
            points::check(kind, &r, &name, at, &mut f);
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

/// One test per backend, each a whole campaign on it.
macro_rules! campaigns {
    ($($name:ident: $backend:ident;)+) => {$(
        #[test]
        fn $name() {
            campaign(Backend::$backend);
        }
    )+};
}

campaigns! {
    killed_writers_on_redb_lose_nothing_confirmed: Redb;
    killed_writers_on_sqlite_lose_nothing_confirmed: Sqlite;
    killed_writers_on_postgres_lose_nothing_confirmed: Postgres;
    killed_writers_on_redis_lose_nothing_confirmed: Redis;
}
