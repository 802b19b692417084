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
//! Every process waits for a session another one holds (`--wait`): a session has one
//! writer at a time, so the imports of a shared session take turns on its claim.
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

mod check;
#[path = "../common/mod.rs"]
mod common;
mod plan;
mod serve;

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use check::{verify, watch_locks};
use common::{command, env_usize, postgres_url, spawn_piped};
use forge_store::sql::postgres::testing::TestSchema;
use forge_store::TenantId;
use forge_testkit::process::output_within;
use plan::{drive, import_events, references, retargeted, Expect, Job};
use serve::{forbidden, Server};

/// Requests each writer has in flight at once.
pub(crate) const CLIENTS_PER_WRITER: usize = 4;
/// Tenants the sessions are spread over.
pub(crate) const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
/// The streams the streamed sessions upload, in turn.
pub(crate) const STREAMS: [&str; 3] = [
    "multi-turn-tools.jsonl",
    "compaction.jsonl",
    "aisdk/v7/multi-step-tools.jsonl",
];
/// The title of every streamed session (the default names the session id).
pub(crate) const TITLE: &str = "many-writers";
/// Phases of the run (the writers start each phase together), and so how often each
/// writer imports each shared session: once at the start of every phase.
pub(crate) const PHASES: usize = 3;
/// How often each writer imports each shared session in the burst of a phase.
pub(crate) const SHARED_REPEATS: usize = 3;
/// Longest wait for one request, and for a process to start or stop.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_mins(2);
pub(crate) const PROCESS_TIMEOUT: Duration = Duration::from_mins(1);
/// What a writer's stderr must never hold (case-insensitive).
pub(crate) const FORBIDDEN: [&str; 5] = ["deadlock", "serializ", "40p01", "40001", "duplicate key"];

/// Plans an import of the template retargeted to `sid` (its ids tagged `tag`), which
/// `importers` imports write; returns the body they send.
fn plan_import(
    expect: &mut BTreeMap<(usize, String), Expect>,
    template: &str,
    tenant: usize,
    sid: &str,
    tag: &str,
    importers: u64,
) -> Arc<String> {
    let doc = retargeted(template, "ses_ref_0", sid, tag);
    let body = Arc::new(serde_json::to_string(&doc).expect("doc text"));
    let events = import_events(&doc);
    expect.insert(
        (tenant, sid.to_owned()),
        Expect::Imported {
            events,
            importers,
            doc,
        },
    );
    body
}

#[test]
fn many_writer_processes_on_postgres_lose_nothing_and_never_deadlock() {
    let Some(base) = postgres_url("many writer processes on one Postgres database") else {
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
        let importers = ((writers * SHARED_REPEATS + 1) * PHASES) as u64;
        let body = plan_import(
            &mut expect,
            &template,
            tenant,
            &sid,
            &format!("sh{k:02}"),
            importers,
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
                let tag = format!("w{w}s{j:03}");
                let body = plan_import(&mut expect, &template, tenant, &sid, &tag, 1);
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
    let suffix = forge_store::id::ascending("many").to_lowercase();
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
            // A shared session is written by one process at a time: the others wait for
            // its claim (`--wait`) and take turns.
            let args: Vec<String> = [
                "--backend",
                &url,
                "--commit-window-ms",
                &window,
                "--wait",
                "120s",
            ]
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
                let args = [
                    "--backend",
                    &url,
                    "--tenant",
                    TENANTS[*tenant],
                    "--wait",
                    "120s",
                    "import",
                ];
                let mut import = command(&args, dir.path());
                import.arg(file).env_remove("RUST_LOG");
                (sid.clone(), spawn_piped(&mut import))
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
            let out = output_within(child, PROCESS_TIMEOUT);
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
