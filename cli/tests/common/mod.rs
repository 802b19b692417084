//! Runs the real `forge-store` binary against a fresh redb file per test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A temp directory with a redb file the commands run against.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub url: String,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("redb://{}", dir.path().join("forge.redb").display());
        Self { dir, url }
    }

    /// `forge-store --backend URL ARGS…`.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--backend", &self.url];
        all.extend_from_slice(args);
        bare(&all, self.dir.path())
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "forge-store {args:?} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        stdout(&out)
    }

    /// Runs with `--json` appended and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"))
    }

    /// Writes `text` to a file in the temp dir and returns its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write test file");
        path.display().to_string()
    }

    /// Replays a file and returns the report and the session id.
    pub fn replay(&self, file: &str) -> (Value, String) {
        let report = self.json(&["replay", file]);
        let sid = report["session"].as_str().expect("session id").to_owned();
        (report, sid)
    }

    /// Every message of a session, oldest first.
    pub fn history(&self, sid: &str) -> Vec<Value> {
        let page = self.json(&["history", sid, "--all"]);
        page["messages"].as_array().expect("messages").clone()
    }
}

/// Runs the binary with exactly these arguments in `cwd`, without the env defaults.
pub fn bare(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(args)
        .current_dir(cwd)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("FORGE_BENCH_POSTGRES_URL")
        .env_remove("FORGE_BENCH_REDIS_URL")
        .output()
        .expect("run forge-store")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An example stream shipped in `examples/streams/`.
pub fn example(name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "examples",
        "streams",
        name,
    ]
    .iter()
    .collect();
    path.display().to_string()
}

/// The parts of a message as JSON.
pub fn parts(m: &Value) -> &Vec<Value> {
    m["parts"].as_array().expect("parts")
}

/// Whether a stored part is open (as `Part::is_open`).
pub fn is_open(p: &Value) -> bool {
    match p["type"].as_str() {
        Some("text") => p.get("time").is_some_and(|t| t.get("end").is_none()),
        Some("reasoning") => p["time"].get("end").is_none(),
        Some("tool") => matches!(p["state"]["status"].as_str(), Some("pending" | "running")),
        _ => false,
    }
}

/// Every open part and open assistant message in a history.
pub fn open_things(history: &[Value]) -> (usize, usize) {
    let messages = history
        .iter()
        .filter(|m| {
            m["info"]["role"] == "assistant" && m["info"]["time"].get("completed").is_none()
        })
        .count();
    let parts = history
        .iter()
        .flat_map(|m| parts(m).iter())
        .filter(|p| is_open(p))
        .count();
    (messages, parts)
}

#[allow(unused_imports)]
pub use forge_testkit::{env_usize, normalized};
