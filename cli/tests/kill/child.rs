//! A `forge-store` child process whose stdout is read live, and SIGKILL at a chosen point.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest any child may run before the test gives up on it (and fails).
pub const CHILD_DEADLINE: Duration = Duration::from_mins(2);

/// When to kill.
#[derive(Clone, Copy, Debug)]
pub enum KillAt {
    /// This long after the start.
    Delay(Duration),
    /// This long after the child printed its `n`-th confirmation.
    After(usize, Duration),
    /// Never: let it finish (a calibration run).
    Never,
}

/// What a child printed and how it ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every `{"confirmed": …}` line read from its stdout before it died, in order.
    pub confirmed: Vec<Value>,
    /// Its other complete stdout lines.
    pub other: Vec<String>,
    /// Whether it was SIGKILLed at the kill point.
    pub killed: bool,
    /// Whether its work was done before the kill point (it exited by itself, or the work
    /// it served was finished and it was killed only then).
    pub finished: bool,
    /// Its exit status text and stderr, for failure messages.
    pub status: String,
    pub stderr: String,
    /// How long it ran.
    pub ran: Duration,
}

/// A running child; killed (SIGKILL) and reaped when dropped.
pub struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
    /// Lines read so far.
    pub seen: Vec<String>,
    /// Kill once this counter reaches this value (the work around it is done).
    until: Option<(Arc<AtomicUsize>, usize)>,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// `forge-store ARGS…` with stdout and stderr piped.
pub fn spawn(args: &[String]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(args)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("FORGE_COMMIT")
        .env_remove("FORGE_COMMIT_WINDOW_MS")
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run forge-store");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                // Only a whole line counts: one cut by the kill was not confirmed.
                Ok(n) if n > 0 && line.ends_with('\n') => {
                    if tx.send(line.trim_end().to_owned()).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    Child {
        process: child,
        lines,
        reader: Some(reader),
        stderr: Some(stderr),
        started: Instant::now(),
        seen: Vec::new(),
        until: None,
    }
}

impl Child {
    /// The next stdout line, waiting at most `wait`; `None` on timeout or end.
    pub fn line(&mut self, wait: Duration) -> Option<String> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Kill (as finished) once `counter` reaches `target`, unless the kill point comes
    /// first.
    pub fn stop_when(&mut self, counter: Arc<AtomicUsize>, target: usize) {
        self.until = Some((counter, target));
    }

    fn confirmations(&self) -> usize {
        self.seen.iter().filter(|l| is_confirmation(l)).count()
    }

    /// Runs until `at` (then SIGKILL) or until the child exits by itself; reads every
    /// line it wrote before it died.
    pub fn kill_at(mut self, at: KillAt) -> Outcome {
        let mut fire: Option<Instant> = match at {
            KillAt::Delay(d) => Some(self.started + d),
            KillAt::After(..) | KillAt::Never => None,
        };
        let mut killed = false;
        let mut finished = false;
        loop {
            assert!(
                self.started.elapsed() < CHILD_DEADLINE,
                "forge-store ran longer than {CHILD_DEADLINE:?}; lines: {:?}",
                self.seen.iter().rev().take(5).collect::<Vec<_>>()
            );
            if let KillAt::After(n, extra) = at {
                if fire.is_none() && self.confirmations() >= n {
                    fire = Some(Instant::now() + extra);
                }
            }
            if fire.is_some_and(|t| Instant::now() >= t) {
                // SIGKILL (an error: it had exited already).
                killed = self.process.kill().is_ok();
                break;
            }
            if self.process.try_wait().ok().flatten().is_some() {
                break;
            }
            if let Some((counter, target)) = &self.until {
                if counter.load(Ordering::SeqCst) >= *target {
                    finished = true;
                    let _ = self.process.kill();
                    break;
                }
            }
            let wait = fire.map_or(Duration::from_millis(5), |t| {
                t.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(5))
            });
            let _ = self.line(wait);
        }
        let status = self.process.wait().expect("reap forge-store");
        let ran = self.started.elapsed();
        // Killed only if the signal ended it (not an exit just before).
        let killed = killed && std::os::unix::process::ExitStatusExt::signal(&status) == Some(9);
        let finished = finished || !killed;
        // The pipe ends with the process: read what it wrote before it died.
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let (confirmed, other): (Vec<String>, Vec<String>) = std::mem::take(&mut self.seen)
            .into_iter()
            .partition(|l| is_confirmation(l));
        Outcome {
            confirmed: confirmed
                .iter()
                .map(|l| serde_json::from_str(l).expect("a confirmation is JSON"))
                .collect(),
            other,
            killed,
            finished,
            status: status.to_string(),
            stderr,
            ran,
        }
    }
}

fn is_confirmation(line: &str) -> bool {
    line.starts_with("{\"confirmed\":")
}

/// Runs `forge-store ARGS…` to the end; panics unless it succeeds. Returns stdout.
pub fn ok(args: &[String]) -> String {
    run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `forge-store ARGS…` to the end: its stdout, or what went wrong.
pub fn run(args: &[String]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(args)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("FORGE_COMMIT")
        .env_remove("FORGE_COMMIT_WINDOW_MS")
        .stdin(Stdio::null())
        .output()
        .expect("run forge-store");
    if !out.status.success() {
        return Err(format!(
            "forge-store {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
