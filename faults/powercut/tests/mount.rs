//! The mounted file system drops what a power cut would drop, seen through the kernel.
//! Needs `/dev/fuse`; without it the tests say so and pass, unless
//! `FORGE_TEST_REQUIRE_FUSE=1` (set in CI) makes the absence a failure.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use forge_powercut::{Mounted, Rules};

/// A power-cut file system mounted on a temporary directory of its own.
struct Mount {
    // Fields drop in order: the file system is unmounted before its directory goes.
    fs: Mounted,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Mount {
    type Target = Mounted;
    fn deref(&self) -> &Mounted {
        &self.fs
    }
}

fn mounted(rules: Rules) -> Option<Mount> {
    let dir = tempfile::tempdir().unwrap();
    match Mounted::mount(dir.path(), rules) {
        Ok(fs) => Some(Mount { fs, _dir: dir }),
        Err(e) => {
            forge_testkit::skip_unless(
                "FORGE_TEST_REQUIRE_FUSE",
                "power-cut file system tests",
                &format!("the power-cut file system cannot mount here ({e})"),
            );
            None
        }
    }
}

fn sync_dir(path: &Path) {
    File::open(path).unwrap().sync_all().unwrap();
}

/// Creates `name` in `dir` holding `bytes`, syncs it and then `dir`, and returns its path
/// and the handle, still open.
fn durable_file(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, File) {
    let path = dir.join(name);
    let mut f = File::create(&path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    sync_dir(dir);
    (path, f)
}

#[test]
fn synced_bytes_survive_a_cut_and_unsynced_bytes_do_not() {
    let Some(fs) = mounted(Rules::Strict) else {
        return;
    };
    let (file, mut f) = durable_file(fs.path(), "log", b"confirmed");
    f.write_all(b" and then not").unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"confirmed and then not");
    drop(f);
    let cut = fs.cut().unwrap();
    assert_eq!(cut.dropped_bytes, 13);
    assert_eq!(fs::read(&file).unwrap(), b"confirmed", "after the cut");
    let stats = fs.stats();
    assert!(
        stats.fsyncs >= 1 && stats.fsyncdirs >= 1 && stats.cuts == 1,
        "{stats:?}"
    );
}

#[test]
fn a_synced_file_in_a_directory_never_synced_is_lost_under_strict_rules_only() {
    for (rules, survives) in [(Rules::Strict, false), (Rules::Ext4, true)] {
        let Some(fs) = mounted(rules) else {
            return;
        };
        let file = fs.path().join("journal");
        let mut f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&file)
            .unwrap();
        f.write_all(b"header").unwrap();
        f.sync_all().unwrap();
        drop(f);
        fs.cut().unwrap();
        assert_eq!(file.exists(), survives, "{rules:?}");
    }
}

#[test]
fn a_rename_holds_only_once_its_directory_is_synced_and_sync_keeps_everything() {
    let Some(fs) = mounted(Rules::Strict) else {
        return;
    };
    let (a, b) = (fs.path().join("a"), fs.path().join("b"));
    fs::write(&a, b"one").unwrap();
    File::open(&a).unwrap().sync_all().unwrap();
    sync_dir(fs.path());
    fs::rename(&a, &b).unwrap();
    fs.cut().unwrap();
    assert!(a.exists() && !b.exists(), "an unsynced rename is undone");
    fs::rename(&a, &b).unwrap();
    fs::create_dir(fs.path().join("sub")).unwrap();
    fs::write(fs.path().join("sub/c"), b"two").unwrap();
    fs.sync();
    fs.cut().unwrap();
    assert!(!a.exists() && b.exists());
    assert_eq!(fs::read(fs.path().join("sub/c")).unwrap(), b"two");
}

#[test]
fn a_process_that_outlives_the_cut_cannot_change_what_the_new_mount_holds() {
    let Some(fs) = mounted(Rules::Strict) else {
        return;
    };
    let (file, mut held) = durable_file(fs.path(), "held", b"synced");
    // The handle is still open at the cut: the old mount is detached lazily.
    let cut = fs.cut().unwrap();
    assert!(cut.lazy_unmount, "an open handle makes the unmount lazy");
    let _ = held.write_all(b" and written after the power went");
    let _ = held.sync_all();
    drop(held);
    assert_eq!(fs::read(&file).unwrap(), b"synced");
    assert!(
        !fs.cut().unwrap().lazy_unmount,
        "nothing holds the new mount"
    );
    assert_eq!(fs::read(&file).unwrap(), b"synced");
}
