//! Full disks, through the command line, on redb and SQLite: `forge-store replay` runs
//! again and again until a write fails, on a 1 MiB tmpfs (ENOSPC) and under a file-size
//! limit (`ulimit -f`, SIGXFSZ ignored: EFBIG). The failing command exits non-zero with
//! one line that names the file and says "no space left" / "file too large". Once space
//! returns (the tmpfs remounted larger; the limit lifted), the store opens, every session
//! whose replay had succeeded reads back whole (as the same stream replayed on a roomy
//! disk), `recover` closes what the failed replay left open, and a second `recover`
//! changes nothing.
//!
//! The tmpfs part needs `mount` (root); without it, it says loudly that it was skipped
//! (a failure under `FORGE_TEST_REQUIRE_MOUNT=1`, as in CI).
//! Prints one line per run: replays confirmed before the failure, the error line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{example, stderr, stdout};
use serde_json::Value;

/// Runs `cmd` (the binary, or a shell that runs it) with `--backend URL ARGS…`, without
/// the environment's defaults.
fn run(mut cmd: Command, url: &str, args: &[&str]) -> Output {
    cmd.arg("--backend")
        .arg(url)
        .args(args)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run forge-store")
}

fn forge(url: &str, args: &[&str]) -> Output {
    run(Command::new(env!("CARGO_BIN_EXE_forge-store")), url, args)
}

/// `forge-store` under `ulimit -f BLOCKS` (512-byte blocks in `sh`) with SIGXFSZ ignored,
/// so a write past the limit fails with EFBIG instead of killing the process.
fn forge_limited(blocks: u64, url: &str, args: &[&str]) -> Output {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!(
            "ulimit -f {blocks}; trap '' XFSZ; exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_forge-store"));
    run(sh, url, args)
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self {
            dir,
            _parent: parent,
        })
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(ok.success(), "remount {size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// A session's history with ids and times left out: what a replay of the same stream
/// stores in any session.
fn shape(url: &str, sid: &str) -> Vec<Value> {
    let out = forge(url, &["history", sid, "--all", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page: Value = serde_json::from_str(&stdout(&out)).unwrap();
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let parts: Vec<Value> = m["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    serde_json::json!([
                        p["type"],
                        p["text"],
                        p["state"]["status"],
                        p["state"]["output"]
                    ])
                })
                .collect();
            serde_json::json!([m["info"]["role"], parts])
        })
        .collect()
}

/// Replays until one fails (at most `max`): the confirmed session ids and the failure.
fn fill(url: &str, max: usize, run: &dyn Fn(&[&str]) -> Output) -> (Vec<String>, Output) {
    let stream = example("multi-turn-tools.jsonl");
    let mut confirmed = Vec::new();
    for _ in 0..max {
        let out = run(&["replay", &stream, "--json"]);
        if !out.status.success() {
            return (confirmed, out);
        }
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        confirmed.push(report["session"].as_str().unwrap().to_owned());
    }
    panic!("{max} replays and the disk is not full: {url}");
}

/// Checks the failure line, then that the store holds every confirmed session whole and
/// recovers cleanly.
fn check_after(url: &str, file: &Path, confirmed: &[String], failed: &Output, says: &str) {
    let all = stderr(failed);
    // Warnings logged on the way may come first; the error is one line, the last.
    let err = all.lines().last().unwrap_or_default().to_owned();
    eprintln!("{url}: {} replays confirmed, then: {err}", confirmed.len());
    assert!(!confirmed.is_empty(), "nothing fit before the failure");
    assert!(err.starts_with("forge-store: "), "{all}");
    assert_eq!(
        all.matches("forge-store: ").count(),
        1,
        "one error line: {all}"
    );
    assert!(!all.contains("panic"), "{all}");
    assert!(err.to_lowercase().contains(says), "says {says:?}: {err}");
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "names {name}: {err}");
    assert!(!err.contains("panic"), "{err}");

    // The reference: the same stream replayed on a roomy disk.
    let roomy = tempfile::tempdir().unwrap();
    let scheme = url.split("://").next().unwrap();
    let reference_url = format!("{scheme}://{}", roomy.path().join(name).display());
    let out = forge(
        &reference_url,
        &["replay", &example("multi-turn-tools.jsonl"), "--json"],
    );
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let expected = shape(&reference_url, report["session"].as_str().unwrap());

    let out = forge(url, &["sessions", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    for sid in confirmed {
        assert!(
            listed.contains(sid.as_str()),
            "confirmed session {sid} is missing"
        );
        assert_eq!(shape(url, sid), expected, "session {sid} differs");
    }
    // The failed writer could not release its claims on a full disk: recover takes the
    // sessions over rather than wait out the lease.
    let first = forge(url, &["recover", "--take-over", "--json"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let again = forge(url, &["recover", "--json"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let again: Value = serde_json::from_str(&stdout(&again)).unwrap();
    eprintln!("  recover: {}; again: {again}", stdout(&first).trim());
    assert_eq!(
        again["report"]["sessions"], 0,
        "the second recover changed something"
    );
    assert_eq!(again["closed"]["parts"], serde_json::json!([]), "{again}");
    assert_eq!(
        again["closed"]["messages"],
        serde_json::json!([]),
        "{again}"
    );
}

#[test]
fn a_full_tmpfs_fails_the_write_clearly_and_keeps_everything_confirmed() {
    for (scheme, name) in [("redb", "forge.redb"), ("sqlite", "forge.db")] {
        let Some(fs) = Tmpfs::mount("1m") else {
            forge_testkit::skip_unless(
                "FORGE_TEST_REQUIRE_MOUNT",
                "a_full_tmpfs_fails_the_write_clearly",
                "`mount -t tmpfs` is not permitted here (needs root)",
            );
            return;
        };
        let file = fs.dir.join(name);
        let url = format!("{scheme}://{}", file.display());
        let (confirmed, failed) = fill(&url, 5000, &|args| forge(&url, args));
        fs.resize("64m");
        check_after(&url, &file, &confirmed, &failed, "no space left");
    }
}

#[test]
fn a_file_size_limit_fails_the_write_clearly_and_keeps_everything_confirmed() {
    for (scheme, name) in [("redb", "forge.redb"), ("sqlite", "forge.db")] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(name);
        let url = format!("{scheme}://{}", file.display());
        // 512 KiB: a few replays fit.
        let (confirmed, failed) = fill(&url, 5000, &|args| forge_limited(1024, &url, args));
        check_after(&url, &file, &confirmed, &failed, "file too large");
    }
}
