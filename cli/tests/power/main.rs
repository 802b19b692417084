//! Power-cut campaign: a real `forge-store` writer streams W1 with `--confirmations`
//! into a store on `forge-powercut`, a test file system that keeps every write in memory
//! until its file is synced and every new directory entry (create, link, rename,
//! unlink) until its directory is synced. The writer is SIGKILLed at a random point
//! (after a random confirmation, or after a random delay), every server process using
//! the file system is killed too (a Redis server with its process group, a Postgres
//! cluster until its postmaster is gone), and the power is cut: everything not synced
//! is dropped, as a machine that lost power would. A process still using the file
//! system at the cut fails the campaign. Then the servers start again on what is left,
//! `forge-store recover` runs in a new process, and the checks of the kill campaign run
//! (`cli/tests/kill/check.rs`): every confirmed boundary stored once in its last
//! confirmed form, nothing open, a second `recover` changing nothing.
//!
//! Backends: redb (file and journal), SQLite, a throwaway Postgres cluster whose data
//! directory is on the file system, and a throwaway Redis whose AOF directory is on it.
//! Each runs under its defaults; a check of the check runs the settings that must lose
//! (SQLite `synchronous=normal`, Postgres `synchronous_commit=off`, Redis `appendfsync
//! no`) and fails unless they do lose confirmed boundaries; Redis `appendfsync
//! everysec` is measured. Each campaign also prints what its full run wrote to the file
//! system (bytes, file and directory syncs): the cost of the setting.
//!
//! Size: `FORGE_POWER_RUNS` cuts per backend, writer and default setting (default 4);
//! `FORGE_POWER_CHECK_RUNS` per setting that must lose (default as many, up to 20);
//! `scripts/faults/power.sh N` runs a large campaign. `FORGE_POWER_SEED` reruns the
//! same kill points. Without FUSE (`/dev/fuse`, permission to mount) every test skips
//! loudly; under `FORGE_TEST_REQUIRE_FUSE=1` that is a failure. Postgres and Redis skip
//! loudly without their server binaries, and fail under `FORGE_TEST_REQUIRE_SERVICES=1`.

#[allow(dead_code)]
#[path = "../kill/backends.rs"]
mod backends;
#[allow(dead_code)]
#[path = "../kill/check.rs"]
mod check;
#[allow(dead_code)]
#[path = "../kill/child.rs"]
mod child;
#[path = "../common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../kill/kinds.rs"]
mod kinds;
#[allow(dead_code)]
#[path = "../kill/points.rs"]
mod points;

use std::time::Instant;

use backends::{Backend, Pg, Place, RedisPrefix};
use check::Figures;
use forge_powercut::{Mounted, Rules, Stats};
use forge_testkit::servers;
use kinds::Kind;
use points::{env_number, Points, Rng};

/// A power-cut file system mounted on a new directory, for one campaign at a time: a
/// cut unmounts, and two mounts cut and remounted at once have made a remount fail.
struct Power {
    fs: Mounted,
    dir: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Power {
    /// Mounts it once no other campaign holds one, or `None` after a loud skip (a
    /// failure under `FORGE_TEST_REQUIRE_FUSE=1`).
    fn mount(test: &str) -> Option<Self> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let serial = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::Builder::new()
            .prefix("forge-power-")
            .tempdir()
            .expect("temp dir");
        match Mounted::mount(dir.path(), Rules::Strict) {
            Ok(fs) => Some(Self {
                fs,
                dir,
                _serial: serial,
            }),
            Err(e) => {
                forge_testkit::skip_unless(
                    "FORGE_TEST_REQUIRE_FUSE",
                    test,
                    &format!(
                        "the power-cut file system could not be mounted ({e}); it needs \
                         /dev/fuse and fuse3"
                    ),
                );
                None
            }
        }
    }

    /// A directory for the stores, made durable (its name synced) before the first cut.
    fn stores_dir(&self) -> tempfile::TempDir {
        let dir = tempfile::Builder::new()
            .prefix("stores-")
            .tempdir_in(self.dir.path())
            .expect("a directory on the power-cut file system");
        self.fs.sync();
        dir
    }

    /// The campaigns of both writers (a replay, and one committing every boundary) on
    /// an embedded store's file under its default settings.
    fn both_writers(&self, backend: Backend, rng: &mut Rng) -> Vec<Found> {
        let place = Place::File(backend, self.stores_dir());
        [Kind::Replay, Kind::Every]
            .into_iter()
            .map(|kind| {
                let label = format!("{} {}", backend.name(), kind.name());
                campaign(
                    &label,
                    &self.fs,
                    &place,
                    &mut Server::None,
                    kind,
                    runs(),
                    rng,
                )
            })
            .collect()
    }
}

/// A server whose files are on the power-cut file system: stopped hard before the cut
/// (its process must not write after the power is gone), started again after it.
enum Server {
    None,
    Postgres(servers::Postgres),
    Redis(servers::Redis),
}

impl Server {
    fn crash(&mut self) {
        match self {
            Self::None => {}
            Self::Postgres(pg) => pg.stop(servers::PgStop::Immediate),
            Self::Redis(r) => r.stop(servers::RedisStop::Kill),
        }
    }

    fn restart(&mut self) {
        match self {
            Self::None => {}
            Self::Postgres(pg) => pg.start_again(),
            Self::Redis(r) => r.start_again(),
        }
    }
}

/// What a campaign on one backend and setting found.
struct Found {
    line: String,
    figures: Figures,
    /// Confirmed boundaries missing or older after the cut.
    lost: usize,
}

/// What the file system saw during the full (uninterrupted) run: the cost of the
/// setting in bytes written and syncs, server processes' writes included.
fn cost(before: Stats, after: Stats, confirmed: usize) -> String {
    let bytes = after.written_bytes - before.written_bytes;
    format!(
        "full run: {bytes} bytes written ({} per confirmed boundary), {} file syncs, {} \
         directory syncs",
        bytes / confirmed.max(1) as u64,
        after.fsyncs - before.fsyncs,
        after.fsyncdirs - before.fsyncdirs,
    )
}

/// Runs `runs` cuts of `kind` writers on `place`, cutting power on `fs` after each kill
/// (and after the full run that measures the kill points).
fn campaign(
    label: &str,
    fs: &Mounted,
    place: &Place,
    server: &mut Server,
    kind: Kind,
    runs: usize,
    rng: &mut Rng,
) -> Found {
    let started = Instant::now();
    let mut f = Figures::default();
    let mut measured = Points::default();
    let (mut dropped_bytes, mut cuts, mut lazy) = (0u64, 0usize, 0usize);
    let mut full_run = String::new();
    for i in 0..=runs {
        let at = measured.at(i, rng);
        let name = format!(
            "p{}{i}x{:x}",
            &kind.name()[..3],
            backends::nanos() % 0xFFFF_FFFF
        );
        let before = fs.stats();
        let r = points::run(kind, place, None, &name, at, &mut f);
        if i == 0 {
            measured.measure(kind, &r, &name);
            full_run = cost(before, fs.stats(), measured.total);
        }
        // The power goes: servers die with the machine, then what was not synced.
        server.crash();
        let cut = fs
            .cut()
            .expect("the power-cut file system mounts again after the cut");
        dropped_bytes += cut.dropped_bytes;
        cuts += 1;
        // A process still using the mount outlived the power: it keeps the old mount
        // and cannot reach the new one, but the cut was not the machine's.
        if cut.lazy_unmount {
            lazy += 1;
            f.other += 1;
            f.problem(
                &name,
                "a process still used the file system at the cut (a busy unmount)",
            );
        }
        server.restart();
        points::check(kind, &r, &name, at, &mut f);
    }
    let lost = f.lost + f.changed;
    let line = format!(
        "power {label:<28} cuts {cuts} (writer killed {}, finished first {}), confirmed \
         boundaries checked {}, lost {}, changed {}, duplicates {}, open left {}, \
         recover-idempotence failures {}, failed recovers {}, other failures {}, unsynced \
         bytes dropped by the cuts {dropped_bytes}, busy unmounts {lazy}; {full_run} ({:.1} s)",
        f.kills,
        f.finished,
        f.confirmed,
        f.lost,
        f.changed,
        f.duplicates,
        f.open_left,
        f.not_idempotent,
        f.recover_failed,
        f.other,
        started.elapsed().as_secs_f64()
    );
    eprintln!("{line}");
    Found {
        line,
        figures: f,
        lost,
    }
}

/// Cuts per default setting: `FORGE_POWER_RUNS` (default 4).
fn runs() -> usize {
    env_number("FORGE_POWER_RUNS", 4_usize)
}

/// Cuts per setting that must lose (the check of the check): `FORGE_POWER_CHECK_RUNS`,
/// by default as many as [`runs`] up to 20 (a losing setting shows its loss within a
/// few cuts; the long campaign's time goes to the defaults).
fn check_runs() -> usize {
    env_number("FORGE_POWER_CHECK_RUNS", runs().min(20))
}

fn rng(backend: Backend) -> Rng {
    let seed = points::seed("FORGE_POWER_SEED", "power");
    Rng::new(seed ^ (backend as u64).wrapping_mul(0x1000_0001))
}

/// A default setting keeps every confirmed boundary through every cut.
fn assert_kept(found: &[Found]) {
    let failed: Vec<String> = found
        .iter()
        .filter(|x| x.figures.failed())
        .map(|x| format!("{}\n  {}", x.line, x.figures.problems.join("\n  ")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A setting that must lose, lost: else the harness cannot tell synced from unsynced.
fn assert_lost(found: &Found, setting: &str) {
    assert!(
        found.lost > 0,
        "check of the check: {setting} lost nothing in {} cuts, so these cuts cannot tell \
         a synced write from an unsynced one\n{}",
        found.figures.runs,
        found.line
    );
}

#[test]
fn a_power_cut_loses_nothing_confirmed_on_redb() {
    let Some(power) = Power::mount("power cut on redb") else {
        return;
    };
    let mut rng = rng(Backend::Redb);
    assert_kept(&power.both_writers(Backend::Redb, &mut rng));
}

#[test]
fn a_power_cut_loses_nothing_confirmed_on_sqlite_and_synchronous_normal_loses() {
    let Some(power) = Power::mount("power cut on SQLite") else {
        return;
    };
    let mut rng = rng(Backend::Sqlite);
    let kept = power.both_writers(Backend::Sqlite, &mut rng);
    let normal = Place::FileWith(
        Backend::Sqlite,
        power.stores_dir(),
        "synchronous=normal".to_owned(),
    );
    let weak = campaign(
        "sqlite synchronous=normal",
        &power.fs,
        &normal,
        &mut Server::None,
        Kind::Replay,
        check_runs(),
        &mut rng,
    );
    assert_kept(&kept);
    assert_lost(&weak, "SQLite synchronous=normal");
}

#[test]
fn a_power_cut_loses_nothing_confirmed_on_postgres_and_synchronous_commit_off_loses() {
    let test = "power cut on Postgres";
    let Some(power) = Power::mount(test) else {
        return;
    };
    let (fs, parent) = (&power.fs, power.stores_dir());
    let Some(pg) = servers::Postgres::start_in(25435, test, parent.path()) else {
        return;
    };
    fs.sync(); // the new cluster (initdb --no-sync) is the machine's starting state
    let mut rng = rng(Backend::Postgres);
    let base = pg.url();
    let mut server = Server::Postgres(pg);
    let place = Place::Postgres(Pg::create(&base));
    fs.sync();
    let kept = campaign(
        "postgres replay",
        fs,
        &place,
        &mut server,
        Kind::Replay,
        runs(),
        &mut rng,
    );
    let off = Place::Postgres(Pg::create(&format!(
        "{base}?options=-c%20synchronous_commit%3Doff"
    )));
    fs.sync();
    let weak = campaign(
        "postgres synchronous_commit=off",
        fs,
        &off,
        &mut server,
        Kind::Replay,
        check_runs(),
        &mut rng,
    );
    drop((place, off));
    assert_kept(&[kept]);
    assert_lost(&weak, "Postgres synchronous_commit=off");
}

#[test]
fn a_power_cut_loses_nothing_confirmed_on_redis_always_and_appendfsync_no_loses() {
    let test = "power cut on Redis";
    let Some(power) = Power::mount(test) else {
        return;
    };
    let mut rng = rng(Backend::Redis);
    let mut found = Vec::new();
    // `always` must keep everything, `no` must lose; `everysec` is measured (it may lose
    // the last second of confirmed writes, and a cut soon after a kill often finds it).
    // The store refuses the weaker servers unless its URL accepts them (`fsync=`).
    let settings = [
        (6395, "always", "always", runs()),
        (6396, "no", "off", check_runs()),
        (6397, "everysec", "everysec", check_runs()),
    ];
    for (port, policy, accepting, cuts) in settings {
        let parent = power.stores_dir();
        let Some(r) = servers::Redis::start_in(port, policy, test, parent.path()) else {
            return;
        };
        power.fs.sync();
        let place = Place::Redis(RedisPrefix::new(&r.url(), "power").accepting(accepting));
        let mut server = Server::Redis(r);
        let label = format!("redis appendfsync {policy}");
        found.push(campaign(
            &label,
            &power.fs,
            &place,
            &mut server,
            Kind::Replay,
            cuts,
            &mut rng,
        ));
        drop(place);
    }
    // In the order of `settings`: always, no, everysec (printed, not judged).
    assert_kept(&found[..1]);
    assert_lost(&found[1], "Redis appendfsync no");
}
