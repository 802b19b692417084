//! The mounted file system drops what a power cut would drop, seen through the kernel.
//! Needs `/dev/fuse`; without it the tests say so and pass, unless
//! `FORGE_TEST_REQUIRE_FUSE=1` (set in CI) makes the absence a failure.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use forge_powercut::{Mounted, Rules};

fn mounted(dir: &Path, rules: Rules) -> Option<Mounted> {
    match Mounted::mount(dir, rules) {
        Ok(m) => Some(m),
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

#[test]
fn synced_bytes_survive_a_cut_and_unsynced_bytes_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = mounted(dir.path(), Rules::Strict) else {
        return;
    };
    let file = dir.path().join("log");
    {
        let mut f = File::create(&file).unwrap();
        f.write_all(b"confirmed").unwrap();
        f.sync_all().unwrap();
        sync_dir(dir.path());
        f.write_all(b" and then not").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"confirmed and then not");
    }
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
        let dir = tempfile::tempdir().unwrap();
        let Some(fs) = mounted(dir.path(), rules) else {
            return;
        };
        let file = dir.path().join("journal");
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
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = mounted(dir.path(), Rules::Strict) else {
        return;
    };
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    fs::write(&a, b"one").unwrap();
    File::open(&a).unwrap().sync_all().unwrap();
    sync_dir(dir.path());
    fs::rename(&a, &b).unwrap();
    fs.cut().unwrap();
    assert!(a.exists() && !b.exists(), "an unsynced rename is undone");
    fs::rename(&a, &b).unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("sub/c"), b"two").unwrap();
    fs.sync();
    fs.cut().unwrap();
    assert!(!a.exists() && b.exists());
    assert_eq!(fs::read(dir.path().join("sub/c")).unwrap(), b"two");
}

#[test]
fn a_process_that_outlives_the_cut_cannot_change_what_the_new_mount_holds() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = mounted(dir.path(), Rules::Strict) else {
        return;
    };
    let file = dir.path().join("held");
    let mut held = File::create(&file).unwrap();
    held.write_all(b"synced").unwrap();
    held.sync_all().unwrap();
    sync_dir(dir.path());
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
