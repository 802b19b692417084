//! Runs the real `forge-store` binary against a fresh redb file per test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

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

    /// On a server: its URL `base` with `key=value` added to the query (a prefix or a
    /// schema of the test's own).
    pub fn on(base: &str, key: &str, value: &str) -> Self {
        let mut env = Self::new();
        env.url = with_param(base, key, value);
        env
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

    /// Runs and expects a failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        failed(&self.run(args))
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

    /// Writes `lines` to a file in the temp dir, each ended by a newline, and returns its
    /// path.
    pub fn jsonl(&self, name: &str, lines: &[&str]) -> String {
        let mut text = lines.join("\n");
        text.push('\n');
        self.file(name, &text)
    }

    /// Replays a file and returns the report and the session id.
    pub fn replay(&self, file: &str) -> (Value, String) {
        let report = self.json(&["replay", file]);
        let sid = report["session"].as_str().expect("session id").to_owned();
        (report, sid)
    }

    /// The id of the session `sessions` lists first (the only one, in most tests).
    pub fn first_session(&self) -> String {
        self.json(&["sessions"])[0]["info"]["id"]
            .as_str()
            .expect("a session id")
            .to_owned()
    }

    /// Every message of a session, oldest first.
    pub fn history(&self, sid: &str) -> Vec<Value> {
        let page = self.json(&["history", sid, "--all"]);
        page["messages"].as_array().expect("messages").clone()
    }
}

/// The binary with exactly these arguments in `cwd`, without the env defaults.
pub fn command(args: &[&str], cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_forge-store"));
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .env_remove("FORGE_BENCH_POSTGRES_URL")
        .env_remove("FORGE_BENCH_REDIS_URL");
    cmd
}

/// Runs the binary with exactly these arguments in `cwd`, without the env defaults.
pub fn bare(args: &[&str], cwd: &Path) -> Output {
    command(args, cwd).output().expect("run forge-store")
}

/// Starts `cmd` with no stdin and its stdout and stderr piped.
pub fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run forge-store")
}

/// Expects `out` to be a failed run; returns its stderr.
pub fn failed(out: &Output) -> String {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "expected a failure, got {}: {err}\n{}",
        out.status,
        stdout(out)
    );
    err
}

/// `base` with `key=value` added to its query.
pub fn with_param(base: &str, key: &str, value: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{key}={value}")
}

/// `FORGE_TEST_POSTGRES_URL`, or `None` after `test` is reported skipped.
pub fn postgres_url(test: &str) -> Option<String> {
    forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", test)
}

/// `FORGE_TEST_REDIS_URL`, or `None` after `test` is reported skipped.
pub fn redis_url(test: &str) -> Option<String> {
    forge_testkit::service_url("FORGE_TEST_REDIS_URL", test)
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

/// Deletes every key under `prefix` on the Redis server at `url`, as far as it can (a
/// test's cleanup).
pub fn delete_keys(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_connection() else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap_or_default();
    for chunk in keys.chunks(500) {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(chunk).query(&mut conn);
    }
}

/// An environment on the Redis server under a key prefix of the test's own, every
/// key of which is deleted when it is dropped.
pub struct OnRedis {
    pub env: Env,
    pub base: String,
    pub prefix: String,
}

impl OnRedis {
    /// Under the prefix `forge-cli-{name}-PID`; `None` when no server is configured.
    pub fn new(name: &str) -> Option<Self> {
        let base = redis_url("the CLI's Redis test")?;
        let prefix = format!("forge-cli-{name}-{}", std::process::id());
        let env = Env::on(&base, "prefix", &prefix);
        Some(Self { env, base, prefix })
    }
}

impl Drop for OnRedis {
    fn drop(&mut self) {
        delete_keys(&self.base, &self.prefix);
    }
}

/// Replay lines that answer with one text block saying `text`, then finish.
pub fn text_answer(text: &str) -> String {
    let text = Value::from(text);
    [
        r#"{"type":"text-start","id":"t"}"#.to_owned(),
        format!(r#"{{"type":"text-delta","id":"t","text":{text}}}"#),
        r#"{"type":"text-end","id":"t"}"#.to_owned(),
        r#"{"type":"finish"}"#.to_owned(),
    ]
    .map(|line| line + "\n")
    .concat()
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
