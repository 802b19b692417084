//! Concurrent processes on embedded files, with real `forge-store` processes.
//!
//! redb lets one process at a time use a file: a second process fails at once with one
//! line that names the file, the process holding it and what to do (`--wait SECS`, or
//! `forge-store serve`), and with `--wait` it waits until the first one exits, then
//! runs. SQLite: two processes replaying into one file at the same time both succeed,
//! every session lands, and "database is locked" never surfaces.
//!
//! `FORGE_CONCURRENT_REPLAYS=N` sets the replays per SQLite writer (default 8).

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{example, stderr, stdout};

fn command(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_forge-store"));
    c.arg("--backend")
        .arg(url)
        .args(args)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("RUST_BACKTRACE");
    c
}

/// A child killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit, at most `limit`; kills it after that.
fn wait_output(child: Child, limit: Duration) -> Output {
    let mut guard = Guard(child);
    let start = Instant::now();
    while guard.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < limit, "a child ran longer than {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let child = std::mem::replace(
        &mut guard.0,
        Command::new("true").spawn().expect("spawn true"),
    );
    child.wait_with_output().unwrap()
}

#[test]
fn a_second_process_on_a_redb_file_is_told_who_holds_it_and_can_wait() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("forge.redb").display());
    let first = command(
        &url,
        &["replay", &example("multi-turn-tools.jsonl"), "--json"],
    )
    .output()
    .unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    let report: serde_json::Value = serde_json::from_str(&stdout(&first)).unwrap();
    let sid = report["session"].as_str().unwrap().to_owned();
    // The holder: a server on the file, until SIGTERM. It waits for the readers below,
    // which may hold the file when it starts.
    let mut holder = Guard(
        command(
            &url,
            &[
                "--wait",
                "30",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    let pid = holder.0.id();
    // Until the holder has the file, a reader may get in first: retry until refused.
    let start = Instant::now();
    let refused = loop {
        let out = command(&url, &["sessions"]).output().unwrap();
        if !out.status.success() {
            break out;
        }
        if let Some(status) = holder.0.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut holder.0.stderr.take().unwrap(), &mut err).unwrap();
            panic!("the holder exited ({status}): {err}");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never refused");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr(&refused);
    eprintln!("second process: {}", err.trim_end());
    assert_eq!(err.lines().count(), 1, "{err}");
    for needle in [
        "forge.redb is open in another process",
        &format!("(pid {pid})"),
        "--wait SECS",
        "forge-store serve",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }

    // A waiting process runs once the holder is done.
    let waiter = command(&url, &["--wait", "60", "sessions", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let child = std::mem::replace(
        &mut holder.0,
        Command::new("true").spawn().expect("spawn true"),
    );
    let held = wait_output(child, Duration::from_mins(1));
    assert!(held.status.success(), "serve: {}", stderr(&held));
    let waited = wait_output(waiter, Duration::from_secs(90));
    assert!(waited.status.success(), "{}", stderr(&waited));
    assert!(
        stdout(&waited).contains(&sid),
        "the waiting process sees the holder's session"
    );
    eprintln!("--wait: ran after the holder exited and saw its session {sid}");
}

#[test]
fn two_sqlite_writer_processes_at_once_never_see_a_locked_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("forge.db").display());
    let replays: usize = std::env::var("FORGE_CONCURRENT_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let stream = example("multi-turn-tools.jsonl");
    // Two writers, each a shell loop of replays, started together.
    let script = format!(
        "for i in $(seq {replays}); do \"$0\" --backend '{url}' replay '{stream}' --json || exit 1; done"
    );
    let spawn = || {
        Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg(env!("CARGO_BIN_EXE_forge-store"))
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, two) = (spawn(), spawn());
    let limit = Duration::from_mins(5);
    let (one, two) = (wait_output(one, limit), wait_output(two, limit));
    let mut sessions = Vec::new();
    for out in [&one, &two] {
        let err = stderr(out);
        assert!(!err.contains("locked"), "{err}");
        assert!(out.status.success(), "{err}");
        for line in stdout(out).split("\n}\n").filter(|s| !s.trim().is_empty()) {
            let report: serde_json::Value = serde_json::from_str(&format!("{line}\n}}"))
                .or_else(|_| serde_json::from_str(line))
                .unwrap();
            sessions.push(report["session"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(sessions.len(), 2 * replays);
    let listed = command(&url, &["sessions", "--json"]).output().unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed = stdout(&listed);
    for sid in &sessions {
        assert!(listed.contains(sid.as_str()), "session {sid} is missing");
    }
    eprintln!(
        "two SQLite writer processes: {} replays each, {} sessions stored, no locked database",
        replays,
        sessions.len()
    );
}
