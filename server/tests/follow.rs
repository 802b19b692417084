//! `follow` against the real opencode (the pinned `opencode-ai` of scripts/opencode,
//! driven by its mock model server): after prompts with text, reasoning, tools and an
//! abort — one session written before following starts, one prompt answered while the
//! connection is cut — forge-store's export of every session equals `opencode export`
//! of it, field by field (key order aside). Deltas reach forge-store's bus.
//!
//! Needs node and `npm ci` in scripts/opencode (`.ci/run` does it). Without them the test
//! prints `SKIPPED` — and fails under `FORGE_TEST_REQUIRE_OPENCODE=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{tenant, until_up};
use forge_server::{FollowOptions, FollowReport, Shutdown};
use forge_store::Topic;
use forge_store::{Event, Forge, OpenOptions, SessionId};
use parking_lot::Mutex;
use serde_json::{json, Value};

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/opencode")
}

fn opencode_bin() -> Option<PathBuf> {
    let bin = scripts().join("node_modules/opencode-linux-x64/bin/opencode");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if bin.is_file() && node {
        return Some(bin);
    }
    let why = if node {
        "opencode is not installed (npm ci in scripts/opencode)"
    } else {
        "node is not installed"
    };
    forge_testkit::skip_unless(
        "FORGE_TEST_REQUIRE_OPENCODE",
        "follow test against the real opencode",
        why,
    );
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `opencode serve` with the mock model, isolated in a temporary HOME.
struct Opencode {
    bin: PathBuf,
    dir: tempfile::TempDir,
    api: String,
    http: reqwest::Client,
    children: Vec<tokio::process::Child>,
}

impl Opencode {
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    fn command(&self, program: &Path) -> tokio::process::Command {
        let home = self.home();
        let mut c = tokio::process::Command::new(program);
        c.current_dir(self.project())
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env_remove("OPENCODE_CONFIG")
            .env_remove("OPENCODE_CONFIG_DIR")
            .env_remove("OPENCODE_SERVER_PASSWORD")
            .kill_on_drop(true);
        c
    }

    async fn start(bin: PathBuf) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = dir.path().join("project");
        std::fs::create_dir_all(dir.path().join("home")).expect("home");
        std::fs::create_dir_all(&project).expect("project");
        std::fs::write(project.join("hello.txt"), "hello world\nsecond line\n").expect("file");
        for args in [
            &["init", "-q", "."][..],
            &["-c", "user.email=f@x", "-c", "user.name=f", "add", "."],
            &[
                "-c",
                "user.email=f@x",
                "-c",
                "user.name=f",
                "commit",
                "-qm",
                "init",
            ],
        ] {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(&project)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "git {args:?}");
        }
        let llm_port = free_port();
        let port = free_port();
        let config = json!({
            "$schema": "https://opencode.ai/config.json",
            "provider": {"mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock",
                "options": {"baseURL": format!("http://127.0.0.1:{llm_port}/v1"), "apiKey": "mock-key"},
                "models": {"mock-1": {"name": "Mock 1", "limit": {"context": 100_000, "output": 1000},
                                      "cost": {"input": 1, "output": 2}}},
            }},
            "model": "mock/mock-1",
            "small_model": "mock/mock-1",
            "autoupdate": false,
            "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"},
        });
        std::fs::write(project.join("opencode.json"), config.to_string()).expect("config");
        let mut oc = Self {
            bin,
            dir,
            api: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            children: Vec::new(),
        };
        let llm = oc
            .command(Path::new("node"))
            .arg(scripts().join("mock-llm.mjs"))
            .arg(llm_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mock model starts");
        let serve = oc
            .command(&oc.bin)
            .args([
                "serve",
                "--port",
                &port.to_string(),
                "--hostname",
                "127.0.0.1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("opencode serve starts");
        oc.children = vec![llm, serve];
        // A connection made while the server starts may never be answered.
        until_up("opencode serve", Duration::from_mins(1), || {
            oc.http
                .get(format!("{}/session", oc.api))
                .timeout(Duration::from_secs(2))
        })
        .await;
        oc
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.api))
            .json(&body)
            .timeout(Duration::from_mins(2))
            .send()
            .await
            .expect("opencode answers");
        assert!(r.status().is_success(), "POST {path}: {}", r.status());
        r.json().await.unwrap_or(Value::Null)
    }

    async fn new_session(&self, title: &str) -> String {
        let s = self.post("/session", json!({"title": title})).await;
        s["id"].as_str().expect("session id").to_owned()
    }

    async fn say(&self, session: &str, text: &str) {
        self.post(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": text}]}),
        )
        .await;
    }

    async fn wait_idle(&self) {
        let start = Instant::now();
        loop {
            let st: Value = self
                .http
                .get(format!("{}/session/status", self.api))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .expect("status")
                .json()
                .await
                .expect("json");
            let busy = st
                .as_object()
                .is_some_and(|m| m.values().any(|v| v["type"] != "idle"));
            if !busy {
                return;
            }
            assert!(start.elapsed() < Duration::from_mins(1), "still busy: {st}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn export(&self, session: &str) -> Value {
        let out = self
            .command(&self.bin)
            .args(["export", session])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .output()
            .await
            .expect("opencode export runs");
        assert!(out.status.success(), "opencode export {session}");
        serde_json::from_slice(&out.stdout).expect("opencode export prints JSON")
    }
}

/// A TCP proxy whose connections can all be cut at once.
struct Proxy {
    addr: String,
    live: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        let live: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let conns = Arc::clone(&live);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns.lock().push(task.abort_handle());
            }
        });
        Self {
            addr,
            live,
            _accept: accept,
        }
    }

    fn cut(&self) {
        for task in self.live.lock().drain(..) {
            task.abort();
        }
    }
}

/// The JSON paths where `a` and `b` differ.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => differences(&format!("{path}.{k}"), v, w, out),
                    None => out.push(format!("{path}.{k}: only in opencode")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!("{path}.{k}: only in forge-store"));
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: {} vs {}", clip(a), clip(b))),
    }
}

fn clip(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        format!("{}…", &s[..s.floor_char_boundary(120)])
    } else {
        s
    }
}

/// Waits until forge-store's export of each session equals opencode's.
async fn exports_match(oc: &Opencode, forge: &Forge, sessions: &[String]) {
    let t = tenant("default");
    let start = Instant::now();
    loop {
        let mut diffs = Vec::new();
        for id in sessions {
            let theirs = oc.export(id).await;
            let ours = match forge.export(&t, &SessionId::from(id.as_str())).await {
                Ok(e) => serde_json::to_value(&e).expect("json"),
                Err(e) => {
                    diffs.push(format!("{id}: {e}"));
                    continue;
                }
            };
            let mut d = Vec::new();
            differences(id, &theirs, &ours, &mut d);
            diffs.extend(d);
        }
        if diffs.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "forge-store's exports differ from opencode's:\n{}",
            diffs.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn follow_stores_what_opencode_does_and_exports_the_same() {
    let Some(bin) = opencode_bin() else {
        return;
    };
    let oc = Opencode::start(bin).await;
    eprintln!("follow test: started opencode");
    let proxy = Proxy::start(oc.api.trim_start_matches("http://").to_owned()).await;
    // Written before following starts: reaches the store by the backfill.
    eprintln!("follow test: proxy up");
    let a = oc.new_session("before").await;
    oc.say(&a, "Say hello. [[text]]").await;
    eprintln!("follow test: session a answered");

    let dir = tempfile::tempdir().expect("tempdir");
    let open = |name: &str| format!("redb://{}", dir.path().join(name).display());
    let forge = forge_store::open_with(&open("all.redb"), OpenOptions::new())
        .await
        .expect("open");
    let only_b = forge_store::open_with(&open("one.redb"), OpenOptions::new())
        .await
        .expect("open");
    let t = tenant("default");
    // Deltas go to forge-store's bus.
    let deltas = Arc::new(AtomicU64::new(0));
    let mut sub = forge
        .engine()
        .bus
        .subscribe(&t, Topic::Tenant, None)
        .await
        .expect("subscribe");
    let counted = Arc::clone(&deltas);
    tokio::spawn(async move {
        while let Some(Ok(ev)) = sub.next().await {
            if matches!(ev.event, Event::PartDelta(_)) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let shutdown = Shutdown::new();
    let mut opts = FollowOptions::new(proxy.addr.clone());
    opts.reconnect_delay = Duration::from_secs(3);
    let follower = {
        let (forge, t, opts, rx) = (forge.clone(), t.clone(), opts.clone(), shutdown.subscribe());
        tokio::spawn(async move {
            let mut report = FollowReport::default();
            forge_server::follow(&forge, &t, &opts, rx, &mut report)
                .await
                .map(|()| report)
        })
    };

    // Reasoning and tools while connected.
    eprintln!("follow test: following");
    let b = oc.new_session("tools").await;
    let single = {
        let mut o = FollowOptions::new(oc.api.clone());
        o.session = Some(SessionId::from(b.as_str()));
        let (forge, t, rx) = (only_b.clone(), t.clone(), shutdown.subscribe());
        tokio::spawn(async move {
            let mut report = FollowReport::default();
            forge_server::follow(&forge, &t, &o, rx, &mut report)
                .await
                .map(|()| report)
        })
    };
    let hello = oc.project().join("hello.txt");
    oc.say(&b, "Think first, then answer briefly. [[think]]")
        .await;
    oc.say(&b, &format!("Read the file. [[read:{}]]", hello.display()))
        .await;
    // Cut: this prompt is answered while follow is disconnected; the backfill of the
    // next connection brings it.
    eprintln!("follow test: b: think + read answered");
    proxy.cut();
    oc.say(&b, "List the project. [[bash:ls]]").await;
    // An answer aborted mid-text.
    eprintln!("follow test: b: bash answered during the cut");
    let c = oc.new_session("abort").await;
    oc.post(
        &format!("/session/{c}/prompt_async"),
        json!({"parts": [{"type": "text", "text": "Write a long answer. [[slow]]"}]}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    oc.post(&format!("/session/{c}/abort"), json!({})).await;
    oc.wait_idle().await;

    eprintln!("follow test: all idle");
    let sessions = vec![a.clone(), b.clone(), c.clone()];
    exports_match(&oc, &forge, &sessions).await;
    exports_match(&oc, &only_b, std::slice::from_ref(&b)).await;
    let listed: Vec<String> = only_b
        .sessions(&t)
        .await
        .expect("sessions")
        .into_iter()
        .map(|s| s.info.id.to_string())
        .collect();
    assert_eq!(
        listed,
        std::slice::from_ref(&b),
        "--session stores that session only"
    );
    assert!(
        deltas.load(Ordering::Relaxed) > 0,
        "deltas are re-published"
    );

    shutdown.trigger();
    let report = follower.await.expect("task").expect("follow");
    single.await.expect("task").expect("follow");
    assert!(report.connections >= 2, "{report:?}");
    assert!(
        report.backfilled > 0 && report.stored > 0 && report.published > 0,
        "{report:?}"
    );
    eprintln!(
        "follow: {report:?}; {} deltas on the bus",
        deltas.load(Ordering::Relaxed)
    );
}
