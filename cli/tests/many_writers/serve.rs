//! The writer processes: `forge-store serve`, and what their stderr must not hold.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use forge_testkit::process::exit_within;

use crate::{FORBIDDEN, PROCESS_TIMEOUT};

/// A `forge-store serve` process, killed when dropped (a failing test leaves none).
pub(crate) struct Server {
    child: Option<Child>,
    addr: String,
    stderr_file: std::path::PathBuf,
}

impl Server {
    /// Starts `forge-store ARGS… serve SERVE_ARGS…` and waits for its address.
    pub(crate) fn start(args: &[String], serve_args: &[&str], dir: &Path, name: &str) -> Self {
        let stderr_file = dir.join(format!("{name}.stderr"));
        let err = std::fs::File::create(&stderr_file).expect("create a stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_forge-store"));
        cmd.args(args)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(serve_args)
            .current_dir(dir)
            .env_remove("FORGE_BACKEND")
            .env_remove("FORGE_TENANT")
            .env_remove("FORGE_TOKENS_FILE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        let mut child = cmd.spawn().expect("run forge-store serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads stdout to its end, so the process never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(addr);
                }
            }
        });
        let mut server = Self {
            child: Some(child),
            addr: String::new(),
            stderr_file,
        };
        match rx.recv_timeout(PROCESS_TIMEOUT) {
            Ok(addr) => server.addr = addr,
            Err(e) => panic!(
                "{name} printed no address ({e}; waited up to {PROCESS_TIMEOUT:?}): {}",
                server.stderr()
            ),
        }
        server
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// SIGTERM (the server commits what it holds and exits), then waits for the exit.
    pub(crate) fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(term.success(), "kill -TERM failed");
        exit_within(&mut child, PROCESS_TIMEOUT)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether a process's stderr holds a deadlock, a serialization failure, a unique
/// violation or an `ERROR` line.
pub(crate) fn forbidden(stderr: &str) -> bool {
    let lower = stderr.to_lowercase();
    FORBIDDEN.iter().any(|f| lower.contains(f)) || stderr.lines().any(|l| l.contains("ERROR"))
}
