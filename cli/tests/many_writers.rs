//! Many writer processes on one Postgres database, with real `forge-store` processes.
//!
//! `FORGE_MANY_WRITERS` (default 4) `forge-store serve` processes start at once on a
//! schema that does not exist yet (they create it together). Each runs the default
//! `--commit terminal` group-commit projector with a 10 ms window
//! (`FORGE_MANY_WRITER_WINDOW_MS`), so one transaction commits the terminal boundaries
//! of several sessions and tenants. Each process writes `FORGE_MANY_WRITER_SESSIONS`
//! (default 24) sessions of its own over three tenants, four requests at a time,
//! alternating a streamed turn (`POST /session/ID/stream`: the processor's path, as
//! `replay`) and an import (`POST /import`). Sessions of different processes interleave
//! in time. (The `replay` and `import` commands write one session at a time, so their
//! batches never hold two sessions; a server's do.)
//!
//! The contended case: a few shared sessions that every process imports at once, in
//! bursts at the start of each of three phases (each writer three times per burst, in
//! its own order: rotated, and reversed for every other writer), together with one
//! `forge-store import` process per shared session and phase. These imports write the
//! same rows at the same time; a group batch of one process holds several shared
//! sessions while another process's batch holds the same ones in another order, so
//! batches that took their locks in batch order would deadlock here, and concurrent first
//! inserts of a session would collide. A watcher samples `pg_locks` meanwhile and
//! reports how many session locks one transaction held and how often a batch waited for
//! another's.
//!
//! Afterwards:
//! - every process exited 0 (the servers after SIGTERM), and no stderr holds
//!   `deadlock`, `serializ…`, `40P01`, `40001`, `duplicate key` or an `ERROR` line (a
//!   deadlock that was retried is still a deadlock: its retry is logged, and fails the
//!   test);
//! - every request was answered 200;
//! - every tenant lists exactly its sessions;
//! - every imported session's export equals its input document; every streamed session
//!   equals the same stream uploaded alone to a `memory://` server (ids and times
//!   normalized); every `seq` equals that reference's (streams) or the import's event
//!   count (imports); a shared session's `seq` is a whole number of imports (each
//!   import's events are one batch, and no batch lowers the `seq`).
//!
//! `FORGE_MANY_WRITER_ISOLATION=serializable` (or `repeatable read`) runs the writers
//! with that `default_transaction_isolation`, as a database or role configured so would.
//!
//! Without `FORGE_TEST_POSTGRES_URL` the test prints `SKIPPED` and passes, unless
//! `FORGE_TEST_REQUIRE_SERVICES=1`, where it fails. It uses a fresh schema, dropped at
//! the end (also when a check fails).

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{env_usize, example, normalized};
use forge_store::sql::postgres::testing::TestSchema;
use forge_store::{SessionId, TenantId};
use serde_json::Value;

/// Requests each writer has in flight at once.
const CLIENTS_PER_WRITER: usize = 4;
/// Tenants the sessions are spread over.
const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
/// The streams the streamed sessions upload, in turn.
const STREAMS: [&str; 3] = [
    "multi-turn-tools.jsonl",
    "compaction.jsonl",
    "aisdk/v7/multi-step-tools.jsonl",
];
/// The title of every streamed session (the default names the session id).
const TITLE: &str = "many-writers";
/// Phases of the run (the writers start each phase together), and so how often each
/// writer imports each shared session: once at the start of every phase.
const PHASES: usize = 3;
/// How often each writer imports each shared session in the burst of a phase.
const SHARED_REPEATS: usize = 3;
/// Longest wait for one request, and for a process to start or stop.
const REQUEST_TIMEOUT: Duration = Duration::from_mins(2);
const PROCESS_TIMEOUT: Duration = Duration::from_mins(1);
/// What a writer's stderr must never hold (case-insensitive).
const FORBIDDEN: [&str; 5] = ["deadlock", "serializ", "40p01", "40001", "duplicate key"];

// ---------------------------------------------------------------------------------------
// Processes

/// A `forge-store serve` process, killed when dropped (a failing test leaves none).
struct Server {
    child: Option<Child>,
    addr: String,
    stderr_file: std::path::PathBuf,
}

impl Server {
    /// Starts `forge-store ARGS… serve SERVE_ARGS…` and waits for its address.
    fn start(args: &[String], serve_args: &[&str], dir: &Path, name: &str) -> Self {
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

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// SIGTERM (the server commits what it holds and exits), then waits for the exit.
    fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(term.success(), "kill -TERM failed");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait for serve") {
                return status;
            }
            if start.elapsed() > PROCESS_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve did not stop within {PROCESS_TIMEOUT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
fn forbidden(stderr: &str) -> bool {
    let lower = stderr.to_lowercase();
    FORBIDDEN.iter().any(|f| lower.contains(f)) || stderr.lines().any(|l| l.contains("ERROR"))
}

/// Waits for `child`, reading its pipes meanwhile; kills it (and fails) after
/// [`PROCESS_TIMEOUT`].
fn finish(mut child: Child) -> Output {
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).map(|_| v)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for forge-store") {
            break status;
        }
        if start.elapsed() > PROCESS_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("forge-store did not finish within {PROCESS_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader").expect("read stdout"),
        stderr: err.join().expect("stderr reader").expect("read stderr"),
    }
}

// ---------------------------------------------------------------------------------------
// Inputs and expectations

/// One stream uploaded alone: its normalized export and the `seq` it leaves.
struct Reference {
    /// Normalized ([`normalized`]).
    export: Value,
    /// As exported (session `ses_ref_K`).
    stored: Value,
    seq: u64,
    text: String,
}

/// What a session must hold at the end.
enum Expect {
    /// Equal to a reference upload of stream `k` (normalized), with its seq.
    Streamed(usize),
    /// Equal to this document; `importers` imports of `events` events each.
    Imported {
        doc: Value,
        events: u64,
        importers: u64,
    },
}

/// `template` (an export document of session `from`) as session `sid`, with message
/// and part ids made its own.
fn retargeted(template: &str, from: &str, sid: &str, tag: &str) -> Value {
    let text = template
        .replace(from, sid)
        .replace("\"msg_", &format!("\"msg_{tag}_"))
        .replace("\"prt_", &format!("\"prt_{tag}_"));
    serde_json::from_str(&text).expect("retargeted document")
}

/// Events one import of `doc` commits: the session, each message, each part.
fn import_events(doc: &Value) -> u64 {
    let messages = doc["messages"].as_array().expect("messages");
    let parts: usize = messages
        .iter()
        .map(|m| m["parts"].as_array().map_or(0, Vec::len))
        .sum();
    (1 + messages.len() + parts) as u64
}

/// A request of a writer.
#[derive(Clone)]
enum Job {
    Stream {
        tenant: usize,
        sid: String,
        stream: usize,
    },
    Import {
        tenant: usize,
        sid: String,
        body: Arc<String>,
    },
}

impl Job {
    fn sid(&self) -> &str {
        match self {
            Job::Stream { sid, .. } | Job::Import { sid, .. } => sid,
        }
    }
}

/// Runs `jobs` against the server at `base` with [`CLIENTS_PER_WRITER`] requests at a
/// time; returns the failures.
async fn drive(
    client: reqwest::Client,
    base: String,
    tokens: Arc<Vec<String>>,
    refs: Arc<Vec<Reference>>,
    jobs: Vec<Job>,
) -> Vec<String> {
    let queue = Arc::new(Mutex::new(VecDeque::from(jobs)));
    let mut slots = Vec::new();
    for _ in 0..CLIENTS_PER_WRITER {
        let (client, base, tokens, refs, queue) = (
            client.clone(),
            base.clone(),
            Arc::clone(&tokens),
            Arc::clone(&refs),
            Arc::clone(&queue),
        );
        slots.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            loop {
                let Some(job) = queue.lock().expect("queue").pop_front() else {
                    break;
                };
                let request = match &job {
                    Job::Stream {
                        tenant,
                        sid,
                        stream,
                    } => client
                        .post(format!("{base}/session/{sid}/stream?title={TITLE}"))
                        .bearer_auth(&tokens[*tenant])
                        .header("content-type", "application/x-ndjson")
                        .body(refs[*stream].text.clone()),
                    Job::Import { tenant, body, .. } => client
                        .post(format!("{base}/import"))
                        .bearer_auth(&tokens[*tenant])
                        .header("content-type", "application/json")
                        .body(body.as_str().to_owned()),
                };
                match request.timeout(REQUEST_TIMEOUT).send().await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => {
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        failures.push(format!("{base} {}: {status} {text}", job.sid()));
                    }
                    Err(e) => failures.push(format!("{base} {}: {e}", job.sid())),
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for s in slots {
        failures.extend(s.await.expect("client task"));
    }
    failures
}

/// Uploads every stream alone to a `memory://` server: the reference each streamed
/// session must equal.
fn references(rt: &tokio::runtime::Runtime, dir: &Path) -> Vec<Reference> {
    let mut server = Server::start(
        &["--backend".into(), "memory://".into()],
        &["--no-auth"],
        dir,
        "reference",
    );
    let client = reqwest::Client::new();
    let refs = rt.block_on(async {
        let mut refs = Vec::new();
        for (k, stream) in STREAMS.iter().enumerate() {
            let text = std::fs::read_to_string(example(stream)).expect("read the stream");
            let sid = format!("ses_ref_{k}");
            let r = client
                .post(server.url(&format!("/session/{sid}/stream?title={TITLE}")))
                .body(text.clone())
                .send()
                .await
                .expect("upload to the reference server");
            assert!(r.status().is_success(), "reference upload of {stream}");
            let r = client
                .get(server.url(&format!("/session/{sid}")))
                .send()
                .await
                .expect("read the reference session");
            let seq: u64 = r
                .headers()
                .get("x-forge-seq")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .expect("x-forge-seq");
            let export: Value = client
                .get(server.url(&format!("/session/{sid}/export")))
                .send()
                .await
                .expect("export the reference session")
                .json()
                .await
                .expect("export JSON");
            refs.push(Reference {
                export: normalized(&export),
                stored: export,
                seq,
                text,
            });
        }
        refs
    });
    let status = server.stop();
    assert!(status.success(), "reference server: {}", server.stderr());
    refs
}

// ---------------------------------------------------------------------------------------
// The test

#[test]
fn many_writer_processes_on_postgres_lose_nothing_and_never_deadlock() {
    let Some(base) = forge_conformance::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "many writer processes on one Postgres database",
    ) else {
        return;
    };
    let writers = env_usize("FORGE_MANY_WRITERS", 4).max(2);
    let per_writer = env_usize("FORGE_MANY_WRITER_SESSIONS", 24).max(2);
    let window = env_usize("FORGE_MANY_WRITER_WINDOW_MS", 10);
    let shared = (per_writer / 6).clamp(2, 8);
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    let refs = Arc::new(references(&rt, dir.path()));
    // The first stream's export, as stored, is the template of every import.
    let template = serde_json::to_string(&refs[0].stored).expect("template text");

    // Tokens: every writer serves every tenant.
    let (tokens, entries): (Vec<String>, Vec<String>) = TENANTS
        .iter()
        .map(|t| forge_server::new_token(&TenantId::new(t).expect("tenant")))
        .unzip();
    let tokens_file = dir.path().join("tokens");
    std::fs::write(&tokens_file, entries.join("\n") + "\n").expect("write tokens");
    let tokens = Arc::new(tokens);

    // The plan: own sessions (streamed and imported, alternating) and shared imports.
    let mut expect: BTreeMap<(usize, String), Expect> = BTreeMap::new();
    let mut shared_jobs = Vec::new();
    // The same documents for the `forge-store import` processes of every phase.
    let mut shared_files = Vec::new();
    for k in 0..shared {
        let sid = format!("ses_shared_{k:02}");
        let tenant = k % TENANTS.len();
        let doc = retargeted(&template, "ses_ref_0", &sid, &format!("sh{k:02}"));
        let body = Arc::new(serde_json::to_string(&doc).expect("doc text"));
        expect.insert(
            (tenant, sid.clone()),
            Expect::Imported {
                events: import_events(&doc),
                importers: ((writers * SHARED_REPEATS + 1) * PHASES) as u64,
                doc,
            },
        );
        let file = dir.path().join(format!("{sid}.json"));
        std::fs::write(&file, body.as_bytes()).expect("write a shared document");
        shared_files.push((tenant, sid.clone(), file));
        shared_jobs.push(Job::Import { tenant, sid, body });
    }
    // By writer, then phase.
    let mut plans: Vec<Vec<Vec<Job>>> = Vec::new();
    let (mut streamed, mut imported) = (0, 0);
    for w in 0..writers {
        let mut own = Vec::new();
        for j in 0..per_writer {
            let tenant = (w + j) % TENANTS.len();
            let sid = format!("ses_w{w}_{j:03}");
            if j % 2 == 0 {
                let stream = (w + j / 2) % STREAMS.len();
                expect.insert((tenant, sid.clone()), Expect::Streamed(stream));
                own.push(Job::Stream {
                    tenant,
                    sid,
                    stream,
                });
                streamed += 1;
            } else {
                let doc = retargeted(&template, "ses_ref_0", &sid, &format!("w{w}s{j:03}"));
                let body = Arc::new(serde_json::to_string(&doc).expect("doc text"));
                expect.insert(
                    (tenant, sid.clone()),
                    Expect::Imported {
                        events: import_events(&doc),
                        importers: 1,
                        doc,
                    },
                );
                own.push(Job::Import { tenant, sid, body });
                imported += 1;
            }
        }
        // Each writer imports the shared sessions in its own order (rotated, and
        // reversed for every other writer), in a burst at the start of every phase.
        let mut order = shared_jobs.clone();
        order.rotate_left(w % shared);
        if w % 2 == 1 {
            order.reverse();
        }
        let per_phase = own.len().div_ceil(PHASES);
        let mut own = own.into_iter();
        plans.push(
            (0..PHASES)
                .map(|_| {
                    let mut jobs = Vec::new();
                    for _ in 0..SHARED_REPEATS {
                        jobs.extend(order.iter().cloned());
                    }
                    jobs.extend(own.by_ref().take(per_phase));
                    jobs
                })
                .collect(),
        );
    }

    // The writers start together on a schema that does not exist yet.
    let suffix = forge_store::core::id::ascending("many").to_lowercase();
    let schema = TestSchema::to_be_made(&base, &suffix).expect("test schema");
    // The application name lets the lock watcher tell the writers' connections apart.
    let app = format!("forge_{suffix}");
    let mut url = format!("{}&application_name={app}", schema.url());
    let isolation = std::env::var("FORGE_MANY_WRITER_ISOLATION").unwrap_or_default();
    if !isolation.is_empty() {
        // The server's default isolation for every transaction of the writers, e.g.
        // `serializable`: what a database or role configured so would give them.
        url = format!(
            "{url}&options=-c%20default_transaction_isolation%3D{}",
            isolation.replace(' ', "%20")
        );
    }
    let pg = |sql: &'static str| {
        let base = base.clone();
        rt.block_on(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&base)
                .await
                .expect("connect to Postgres");
            let n: i64 = sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .expect("query Postgres");
            let _ = conn.close().await;
            n
        })
    };
    let deadlocks_sql = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()";
    let deadlocks_before = pg(deadlocks_sql);
    let start = Instant::now();
    let window = window.to_string();
    let tokens_arg = tokens_file.display().to_string();
    let launches: Vec<_> = (0..writers)
        .map(|w| {
            let args: Vec<String> = ["--backend", &url, "--commit-window-ms", &window]
                .iter()
                .map(ToString::to_string)
                .collect();
            let serve = ["--tokens".to_owned(), tokens_arg.clone()];
            let dir = dir.path().to_owned();
            std::thread::spawn(move || {
                let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
                Server::start(&args, &serve, &dir, &format!("writer{w}"))
            })
        })
        .collect();
    let mut servers: Vec<Server> = launches
        .into_iter()
        .map(|h| h.join().expect("a writer did not start"))
        .collect();
    let started = start.elapsed();

    // All writers at once, while a watcher samples their session locks.
    let client = reqwest::Client::new();
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = rt.spawn(watch_locks(base.clone(), app, Arc::clone(&watching)));
    let mut cli_imports = 0;
    let mut phases: Vec<Vec<Vec<Job>>> = (0..PHASES).map(|_| Vec::new()).collect();
    for plan in plans {
        for (phase, jobs) in phases.iter_mut().zip(plan) {
            phase.push(jobs);
        }
    }
    let mut failures = Vec::new();
    let mut bad_logs = Vec::new();
    for phase in phases {
        // With the writers' burst of shared imports, one `forge-store import` process
        // per shared session imports it too: the CLI's own group-commit path.
        let importers: Vec<(String, Child)> = shared_files
            .iter()
            .map(|(tenant, sid, file)| {
                let child = Command::new(env!("CARGO_BIN_EXE_forge-store"))
                    .args(["--backend", &url, "--tenant", TENANTS[*tenant], "import"])
                    .arg(file)
                    .current_dir(dir.path())
                    .env_remove("FORGE_BACKEND")
                    .env_remove("FORGE_TENANT")
                    .env_remove("RUST_LOG")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("run forge-store import");
                (sid.clone(), child)
            })
            .collect();
        failures.extend(rt.block_on(async {
            let runs: Vec<_> = servers
                .iter()
                .zip(phase)
                .map(|(s, jobs)| {
                    tokio::spawn(drive(
                        client.clone(),
                        s.url(""),
                        Arc::clone(&tokens),
                        Arc::clone(&refs),
                        jobs,
                    ))
                })
                .collect();
            let mut failures = Vec::new();
            for r in runs {
                failures.extend(r.await.expect("writer run"));
            }
            failures
        }));
        for (sid, child) in importers {
            let out = finish(child);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() || forbidden(&err) {
                bad_logs.push(format!("forge-store import {sid} ({}):\n{err}", out.status));
            }
            cli_imports += 1;
        }
    }
    let wrote = start.elapsed();
    watching.store(false, Ordering::SeqCst);
    let locks = rt.block_on(watcher).expect("lock watcher");
    let mut retries = 0;
    for (w, s) in servers.iter_mut().enumerate() {
        let status = s.stop();
        let err = s.stderr();
        retries += err.lines().filter(|l| l.contains("retrying")).count();
        if !status.success() || forbidden(&err) {
            bad_logs.push(format!("writer {w} ({status}):\n{err}"));
        }
    }
    let took = start.elapsed();
    let deadlocks = pg(deadlocks_sql) - deadlocks_before;
    assert!(
        failures.is_empty(),
        "{} requests failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        bad_logs.is_empty(),
        "writers failed or logged deadlocks, serialization failures or errors:\n{}",
        bad_logs.join("\n")
    );

    // The store equals what was written.
    let (checked, messages, parts) = rt.block_on(verify(&url, &expect, &refs));
    rt.block_on(schema.drop()).expect("drop the test schema");
    eprintln!(
        "many writers on Postgres: {writers} serve processes (group commit, {window} ms \
         window, {CLIENTS_PER_WRITER} requests each at a time), {} tenants; {streamed} \
         streamed + {imported} imported own sessions, {shared} shared sessions imported \
         {} times each at once (by the writers, and by {cli_imports} `forge-store import` \
         processes); {checked} sessions checked, {messages} messages and {parts} parts \
         (the boundary rows) equal to their input, every seq as expected; 0 failed \
         requests, 0 deadlock or serialization errors in stderr, {retries} retries \
         logged; server deadlock counter +{deadlocks} (whole database); session locks \
         sampled {} times: \
         up to {} held by one transaction (a group batch of that many sessions), a batch \
         waiting for another's session lock in {} samples (up to {} waiting at once); \
         default isolation {}; start {:.1} s, writes {:.1} s, total {:.1} s",
        TENANTS.len(),
        (writers * SHARED_REPEATS + 1) * PHASES,
        locks.samples,
        locks.max_held,
        locks.samples_with_waiters,
        locks.max_waiting,
        if isolation.is_empty() {
            "the server's"
        } else {
            isolation.as_str()
        },
        started.as_secs_f64(),
        wrote.saturating_sub(started).as_secs_f64(),
        took.as_secs_f64(),
    );
}

/// What [`watch_locks`] saw.
#[derive(Debug, Default)]
struct LockFigures {
    samples: u64,
    /// The most session locks one writer transaction held at once.
    max_held: i64,
    /// Samples in which a writer transaction waited for a session lock.
    samples_with_waiters: u64,
    /// The most transactions waiting for session locks at once.
    max_waiting: i64,
}

/// Samples the advisory (session) locks of the connections named `app` until
/// `watching` is cleared.
async fn watch_locks(base: String, app: String, watching: Arc<AtomicBool>) -> LockFigures {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&base)
        .await
        .expect("connect the lock watcher");
    let mut f = LockFigures::default();
    while watching.load(Ordering::SeqCst) {
        let (held, waiting): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(max(held), 0)::bigint, coalesce(sum(waiting), 0)::bigint FROM (
                 SELECT count(*) FILTER (WHERE l.granted) AS held,
                        count(*) FILTER (WHERE NOT l.granted) AS waiting
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND a.application_name = $1
                 GROUP BY l.pid) per_transaction",
        )
        .bind(&app)
        .fetch_one(&mut conn)
        .await
        .expect("sample pg_locks");
        f.samples += 1;
        f.max_held = f.max_held.max(held);
        f.max_waiting = f.max_waiting.max(waiting);
        f.samples_with_waiters += u64::from(waiting > 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let _ = conn.close().await;
    f
}

/// Reads every tenant's sessions back through the library and compares them with what
/// was written; returns sessions, messages and parts checked.
async fn verify(
    url: &str,
    expect: &BTreeMap<(usize, String), Expect>,
    refs: &[Reference],
) -> (usize, usize, usize) {
    let forge = forge_store::open(url).await.expect("open the store");
    let mut problems = Vec::new();
    let (mut messages, mut parts) = (0, 0);
    for (t, name) in TENANTS.iter().enumerate() {
        let tenant = TenantId::new(name).expect("tenant");
        let listed: BTreeMap<String, u64> = forge
            .sessions(&tenant)
            .await
            .expect("list sessions")
            .into_iter()
            .map(|s| (s.info.id.to_string(), s.seq))
            .collect();
        let wanted: BTreeSet<&String> = expect
            .keys()
            .filter(|(et, _)| *et == t)
            .map(|(_, s)| s)
            .collect();
        let got: BTreeSet<&String> = listed.keys().collect();
        if got != wanted {
            problems.push(format!(
                "{name}: sessions listed differ: missing {:?}, extra {:?}",
                wanted.difference(&got).collect::<Vec<_>>(),
                got.difference(&wanted).collect::<Vec<_>>()
            ));
        }
        for ((_, sid), want) in expect.range((t, String::new())..(t + 1, String::new())) {
            let Some(&seq) = listed.get(sid) else {
                continue;
            };
            let export = match forge.export(&tenant, &SessionId::from(sid.as_str())).await {
                Ok(e) => serde_json::to_value(e).expect("export JSON"),
                Err(e) => {
                    problems.push(format!("{name}/{sid}: export failed: {e}"));
                    continue;
                }
            };
            let ms = export["messages"].as_array().map_or(&[][..], Vec::as_slice);
            messages += ms.len();
            parts += ms
                .iter()
                .map(|m| m["parts"].as_array().map_or(0, Vec::len))
                .sum::<usize>();
            match want {
                Expect::Streamed(k) => {
                    if normalized(&export) != refs[*k].export {
                        problems.push(format!(
                            "{name}/{sid}: differs from stream {} uploaded alone",
                            STREAMS[*k]
                        ));
                    }
                    if seq != refs[*k].seq {
                        problems.push(format!(
                            "{name}/{sid}: seq {seq}, the stream alone leaves {}",
                            refs[*k].seq
                        ));
                    }
                }
                Expect::Imported {
                    doc,
                    events,
                    importers,
                } => {
                    if &export != doc {
                        problems.push(format!("{name}/{sid}: differs from its import"));
                    }
                    if seq % events != 0 || seq < *events || seq > events * importers {
                        problems.push(format!(
                            "{name}/{sid}: seq {seq} is not a whole number of imports of \
                             {events} events (1 to {importers})"
                        ));
                    }
                }
            }
        }
    }
    let _ = forge.close().await;
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    (expect.len(), messages, parts)
}
