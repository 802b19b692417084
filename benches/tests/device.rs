//! The device the benchmark measures: a loop-mounted filesystem of its own, with the
//! servers' data on it. Needs root and loop devices; without them each test skips
//! loudly (a failure under `FORGE_TEST_REQUIRE_MOUNT=1`, as in CI).

use std::io::Write as _;
use std::sync::Arc;

use forge_bench::device::{Device, Filesystem, Placement};
use forge_bench::run::{measure, Run, Target};
use forge_bench::workload::w1;
use forge_bench::{Measurement, Mode, Policy};
use forge_testkit::{runtime, skip_unless};

const REQUIRE: &str = "FORGE_TEST_REQUIRE_MOUNT";
const MIB: u64 = 1 << 20;

/// Whether a device of `fs` can be made here; a loud skip naming `test` when not.
fn can_make(fs: Filesystem, test: &str) -> bool {
    match Device::unavailable(fs) {
        None => true,
        Some(why) => {
            skip_unless(REQUIRE, test, &why);
            false
        }
    }
}

/// Writes `len` bytes to `path`, synced when `sync`.
fn write_file(path: &std::path::Path, len: usize, sync: bool) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![0x5a; len]).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

/// The device counts what reaches it: a synced file's bytes (and a little journal and
/// metadata), an unsynced file's once the device is settled, and nothing for a file
/// that only sits in the page cache between two readings taken without a sync.
#[test]
fn a_device_counts_the_bytes_its_filesystem_wrote() {
    for fs in Filesystem::ALL {
        if !can_make(
            fs,
            &format!("a_device_counts_the_bytes_its_filesystem_wrote ({fs})"),
        ) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let device = Device::create(fs, dir.path()).unwrap();
        assert_eq!(device.filesystem(), fs);

        let before = device.settle().unwrap();
        write_file(&device.path().join("synced"), 4 << 20, true);
        let after = device.settle().unwrap();
        let wrote = after - before;
        assert!(
            (4 * MIB..5 * MIB).contains(&wrote),
            "{fs}: a synced 4 MiB file: the device wrote {wrote} bytes"
        );

        // Unsynced: not on the device until settled.
        let quiet = device.written().unwrap();
        write_file(&device.path().join("cached"), 8 << 20, false);
        let unsettled = device.written().unwrap() - quiet;
        let settled = device.settle().unwrap() - quiet;
        assert!(
            unsettled < 8 * MIB && (8 * MIB..9 * MIB).contains(&settled),
            "{fs}: an unsynced 8 MiB file: {unsettled} bytes before the sync, {settled} after"
        );
        let mount = device.path().to_path_buf();
        drop(device);
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        assert!(
            !mounts.contains(mount.to_str().unwrap()),
            "{fs}: still mounted after the device was dropped"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{fs}: the image file is left"
        );
    }
}

fn one_turn(target: Target, dir: &std::path::Path, placement: &Arc<Placement>) -> Run {
    Run {
        target,
        mode: Mode::Boundary,
        policy: Policy::Terminal { window_ms: 10 },
        workload: "W1".into(),
        turns: 3,
        latency: false,
        dir: dir.to_path_buf(),
        device: Some(Arc::clone(placement)),
    }
}

/// What the disk wrote for a run is at least what the engine itself counts as synced
/// (each backend's counter measures bytes handed to the operating system that reach
/// the disk), and the run is labelled with its filesystem.
fn check(m: &Measurement, fs: Filesystem) {
    let device = m.device_bytes.expect("a run on a device has device bytes");
    let engine = m.physical.as_ref().expect("the engine's counter").bytes;
    assert_eq!(m.filesystem.as_deref(), Some(fs.name()));
    assert!(
        device >= engine && device > m.logical_bytes,
        "{} on {fs}: the device wrote {device} bytes, the engine counts {engine}, logical {}",
        m.backend,
        m.logical_bytes
    );
}

/// redb and SQLite files on the device, and a throwaway Postgres cluster and Redis
/// server with their data there: each run gets its device bytes.
#[test]
fn every_backend_runs_on_the_device_with_its_bytes_measured() {
    let fs = Filesystem::Ext4;
    if !can_make(
        fs,
        "every_backend_runs_on_the_device_with_its_bytes_measured",
    ) {
        return;
    }
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (placement, notes) = Placement::create(fs, dir.path(), true, true).await.unwrap();
        let notes = notes.join("\n");
        assert!(notes.contains("device: ext4 on /dev/loop"), "{notes}");
        let placement = Arc::new(placement);
        let files = placement.device().path().join("runs");
        std::fs::create_dir(&files).unwrap();
        let script = [w1(3, 5)];
        for url in ["redb://", "sqlite://"] {
            let run = one_turn(Target::new(url).unwrap(), &files, &placement);
            check(&measure(&run, &script).await.unwrap(), fs);
        }
        for backend in ["postgres", "redis"] {
            let Some(server) = placement.server_url(backend) else {
                // Only where the server binaries are missing, which the notes say.
                assert!(
                    notes.contains(&format!("{backend}: not on the device")),
                    "{notes}"
                );
                skip_unless(REQUIRE, "every_backend_runs_on_the_device", &notes);
                continue;
            };
            let run = one_turn(Target::new(&server).unwrap(), &files, &placement);
            let m = measure(&run, &script).await.unwrap();
            check(&m, fs);
            if backend == "postgres" {
                // The final checkpoint writes the tables and indexes: more than the WAL.
                let wal = m.physical.as_ref().unwrap().bytes;
                assert!(
                    m.device_bytes.unwrap() > wal + m.logical_bytes,
                    "postgres: device {:?}, WAL {wal}",
                    m.device_bytes
                );
            }
        }
    });
}
