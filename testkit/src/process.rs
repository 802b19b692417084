//! Child processes of a test: waited for with a time limit, killed when dropped,
//! killed with their whole process group.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::wait_until;

/// The first `dirs/name` that is a file.
pub(crate) fn find(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Whether `name` is a file in a directory of `PATH`.
pub(crate) fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(name).is_file()))
}

/// Whether the test runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// SIGKILL to every process of the group `pgid`, then waits until none is left but the
/// leader (a zombie until its parent waits for it) and other zombies.
pub fn kill_group(pgid: u32) {
    let group = format!("-{pgid}");
    let _ = Command::new("kill")
        .args(["-KILL", "--", &group])
        .stderr(Stdio::null())
        .status();
    wait_until(
        &format!("the processes of group {pgid} exiting"),
        Duration::from_secs(30),
        || {
            group_members(pgid)
                .iter()
                .all(|&(pid, state)| pid == pgid || state == 'Z')
        },
    );
}

/// The processes of group `pgid` and their states, read from `/proc/PID/stat`
/// (`PID (COMM) STATE PPID PGRP …`).
fn group_members(pgid: u32) -> Vec<(u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?.chars().next()?;
            let group: u32 = rest.nth(1)?.parse().ok()?;
            (group == pgid).then_some((pid, state))
        })
        .collect()
}

/// A child process killed (and waited for) when dropped: a failing test leaves none
/// behind.
#[derive(Debug)]
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Takes charge of `child`.
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// The child, still running.
    pub fn child(&mut self) -> &mut Child {
        self.0
            .as_mut()
            .expect("the child is taken only by output_within")
    }

    /// [`output_within`] of the child.
    pub fn output_within(mut self, limit: Duration) -> Output {
        output_within(self.0.take().expect("a child"), limit)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` to exit; kills it and fails the test if it has not exited within
/// `limit`.
pub fn exit_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` (spawned with piped stdout and stderr), reading both pipes
/// meanwhile so that a chatty child never blocks on a full pipe; kills it and fails the
/// test if it has not exited within `limit`.
pub fn output_within(mut child: Child, limit: Duration) -> Output {
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                p.read_to_end(&mut v).map(|_| v)
            } else {
                Ok(v)
            }
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let status = exit_within(&mut child, limit);
    Output {
        status,
        stdout: out.join().expect("stdout reader").expect("read stdout"),
        stderr: err.join().expect("stderr reader").expect("read stderr"),
    }
}
