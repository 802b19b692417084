//! Server restarts in the middle of a stream, against throwaway servers each test
//! starts and stops itself (Postgres on 25432–25434 by `initdb` + `pg_ctl`, Redis on
//! 6390–6394 with AOF on):
//!
//! - a writer streaming turns rides out `pg_ctl stop -m fast` / `-m immediate` and a
//!   Redis SIGKILL / `SHUTDOWN` plus restart: every turn it confirmed is stored exactly
//!   once, none is missing, none doubled; a read issued while the server is down
//!   returns once it is back;
//! - a server down past the retry deadline makes the stream fail with a store error
//!   naming the server and the cause (never an input error, never a hang), and the
//!   command line says so in one line;
//! - the projector worker reconnects after Redis restarts and resumes from its
//!   consumer group: its copy ends equal to the Redis original;
//! - a `replay` process SIGKILLed on Redis after its first confirmed message, then
//!   `recover`, then `project --until-idle` into Postgres: every run's Postgres copy
//!   holds messages and equals the Redis original (export compare);
//! - the Redis durability window: turns confirmed before a SIGKILL of the server that
//!   are gone after its restart, per `appendfsync` policy (none allowed with `always`).
//!
//! Sizes: small by default (CI). Larger runs: `FORGE_RESTART_TURNS` (turns per writer
//! test, default 24), `FORGE_RESTART_KILLS` (writer kills of the recover test, default
//! 3), `FORGE_DURABILITY_KILLS` (server kills per policy, default 3). Every test prints
//! a one-line summary of what it did and checked. Without the server binaries the tests
//! skip loudly; with `FORGE_TEST_REQUIRE_SERVICES=1` that is a failure.

#[path = "common/servers.rs"]
mod servers;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_store::model::{PartBody, ToolState};
use forge_store::{Forge, OpenOptions, ReplayOptions, SessionId, TenantId};
use servers::{wait_until, PgStop, Postgres, Redis, RedisStop};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A number in `0..n`, different from run to run (no test depends on its value).
fn random_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos.wrapping_mul(2_654_435_761)) % n
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn tenant() -> TenantId {
    TenantId::new("t1").unwrap()
}

/// One turn: a user message `q{i}`, an answer with a text block of `deltas` deltas, a
/// tool call and its result, two steps.
fn turn(i: usize, deltas: usize) -> String {
    let mut lines = vec![
        format!(r#"{{"type":"user","text":"q{i}"}}"#),
        r#"{"type":"start"}"#.to_owned(),
        r#"{"type":"start-step"}"#.to_owned(),
        format!(r#"{{"type":"tool-input-start","id":"c{i}","toolName":"bash"}}"#),
        format!(
            r#"{{"type":"tool-call","toolCallId":"c{i}","toolName":"bash","input":{{"command":"echo {i}"}}}}"#
        ),
        format!(
            r#"{{"type":"tool-result","toolCallId":"c{i}","toolName":"bash","output":{{"output":"out {i}","title":"echo","metadata":{{}}}}}}"#
        ),
        r#"{"type":"finish-step","finishReason":"tool-calls","usage":{"inputTokens":10,"outputTokens":5}}"#.to_owned(),
        r#"{"type":"start-step"}"#.to_owned(),
        format!(r#"{{"type":"text-start","id":"t{i}"}}"#),
    ];
    for k in 0..deltas {
        lines.push(format!(
            r#"{{"type":"text-delta","id":"t{i}","text":"w{i}-{k} "}}"#
        ));
    }
    lines.push(format!(r#"{{"type":"text-end","id":"t{i}"}}"#));
    lines.push(r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":10,"outputTokens":5}}"#.to_owned());
    lines.push(r#"{"type":"finish","finishReason":"stop"}"#.to_owned());
    lines.join("\n")
}

fn answer_text(i: usize, deltas: usize) -> String {
    (0..deltas)
        .map(|k| format!("w{i}-{k}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a stored session holds of the turns: per turn index, how many complete copies
/// (user `q{i}` followed by its full answer); and how many parts are open.
struct Found {
    copies: Vec<usize>,
    open: usize,
    messages: usize,
}

async fn found(forge: &Forge, sid: &SessionId, turns: usize, deltas: usize) -> Found {
    let history = forge.history_all(&tenant(), sid).await.unwrap();
    let mut copies = vec![0; turns];
    let mut open = 0;
    for (n, m) in history.iter().enumerate() {
        open += m.parts.iter().filter(|p| p.is_open()).count();
        let user = m.parts.iter().find_map(|p| match &p.body {
            PartBody::Text(t) => t.text.strip_prefix('q')?.parse::<usize>().ok(),
            _ => None,
        });
        let Some(i) = user.filter(|i| *i < turns) else {
            continue;
        };
        let Some(answer) = history.get(n + 1) else {
            continue;
        };
        let text_ok = answer
            .parts
            .iter()
            .any(|p| matches!(&p.body, PartBody::Text(t) if t.text == answer_text(i, deltas)));
        let tool_ok = answer.parts.iter().any(
            |p| matches!(&p.body, PartBody::Tool(t) if matches!(t.state, ToolState::Completed(_))),
        );
        if text_ok && tool_ok {
            copies[i] += 1;
        }
    }
    Found {
        copies,
        open,
        messages: history.len(),
    }
}

/// Streams `turns` turns into `sid`, one replay per turn; `confirmed` counts the turns
/// whose replay returned (committed). Stops at the first error.
async fn write_turns(
    forge: Forge,
    sid: SessionId,
    turns: usize,
    deltas: usize,
    confirmed: Arc<AtomicUsize>,
) -> Result<Duration, (usize, forge_store::Error)> {
    let mut longest = Duration::ZERO;
    for i in 0..turns {
        let start = Instant::now();
        forge
            .replay_str(
                &tenant(),
                &turn(i, deltas),
                ReplayOptions::default().session(sid.clone()),
            )
            .await
            .map_err(|e| (i, e.error))?;
        longest = longest.max(start.elapsed());
        confirmed.store(i + 1, Ordering::SeqCst);
    }
    Ok(longest)
}

fn wait_confirmed(confirmed: &AtomicUsize, at_least: usize) {
    wait_until(
        &format!("the writer confirming {at_least} turns"),
        Duration::from_mins(2),
        || confirmed.load(Ordering::SeqCst) >= at_least,
    );
}

/// A writer on `url` streams turns; `restart` stops and restarts its server twice.
/// Every turn is confirmed once and stored exactly once. Returns the summary line.
fn writer_rides_out_restarts(
    url: &str,
    name: &str,
    mut restart: impl FnMut(usize),
    rt: &tokio::runtime::Runtime,
) -> String {
    let turns = env_usize("FORGE_RESTART_TURNS", 24).max(6);
    let deltas = 20;
    let forge = rt
        .block_on(forge_store::open_with(
            url,
            OpenOptions::new().retry_for(Duration::from_mins(1)),
        ))
        .unwrap();
    let sid = SessionId::from(format!("ses_restart_{name}"));
    let confirmed = Arc::new(AtomicUsize::new(0));
    let writer = rt.spawn(write_turns(
        forge.clone(),
        sid.clone(),
        turns,
        deltas,
        Arc::clone(&confirmed),
    ));
    let mut reads = 0;
    for (k, at) in [turns / 3, 2 * turns / 3].into_iter().enumerate() {
        wait_confirmed(&confirmed, at);
        restart(k);
        reads += 1;
    }
    let longest = rt
        .block_on(async { tokio::time::timeout(Duration::from_mins(3), writer).await })
        .expect("the writer must not hang")
        .unwrap()
        .unwrap_or_else(|(i, e)| panic!("{name}: turn {i} failed across a restart: {e}"));
    assert_eq!(confirmed.load(Ordering::SeqCst), turns);
    let f = rt.block_on(found(&forge, &sid, turns, deltas));
    let missing = f.copies.iter().filter(|c| **c == 0).count();
    let doubled = f.copies.iter().filter(|c| **c > 1).count();
    assert_eq!(
        (missing, doubled, f.open, f.messages),
        (0, 0, 0, 2 * turns),
        "{name}: every confirmed turn exactly once, nothing open"
    );
    format!(
        "{name}: {turns} turns confirmed across 2 restarts ({reads} reads while down returned), \
         0 missing, 0 doubled, 0 open; longest turn {:.1} s",
        longest.as_secs_f64()
    )
}

/// Reads the session while the server is down (through `reader`, opened before);
/// the read must return once the server is back.
fn read_while_down(
    rt: &tokio::runtime::Runtime,
    reader: &Forge,
    sid: &SessionId,
) -> tokio::task::JoinHandle<forge_store::Result<usize>> {
    let reader = reader.clone();
    let sid = sid.clone();
    rt.spawn(async move { Ok(reader.history_all(&tenant(), &sid).await?.len()) })
}

fn open_reader(rt: &tokio::runtime::Runtime, url: &str) -> Forge {
    rt.block_on(forge_store::open_with(
        url,
        OpenOptions::new().retry_for(Duration::from_mins(1)),
    ))
    .unwrap()
}

#[test]
fn a_postgres_restart_mid_stream_loses_and_doubles_nothing() {
    let test = "a_postgres_restart_mid_stream_loses_and_doubles_nothing";
    let Some(mut pg) = Postgres::start(25432, test) else {
        return;
    };
    let rt = runtime();
    let url = pg.url();
    let sid = SessionId::from("ses_restart_postgres");
    let reader = open_reader(&rt, &url);
    let mut reads = Vec::new();
    let summary = writer_rides_out_restarts(
        &url,
        "postgres",
        |k| {
            let how = if k == 0 {
                PgStop::Fast
            } else {
                PgStop::Immediate
            };
            pg.stop(how);
            reads.push(read_while_down(&rt, &reader, &sid));
            std::thread::sleep(Duration::from_millis(1500));
            pg.start_again();
        },
        &rt,
    );
    for r in reads {
        let n = rt
            .block_on(r)
            .unwrap()
            .expect("a read across a restart returns");
        assert!(n > 0);
    }
    eprintln!("restart: {summary} (stop -m fast, then -m immediate)");
}

#[test]
fn a_redis_restart_mid_stream_loses_nothing_and_the_worker_resumes() {
    let test = "a_redis_restart_mid_stream_loses_nothing_and_the_worker_resumes";
    let Some(mut redis) = Redis::start(6390, "always", test) else {
        return;
    };
    let rt = runtime();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let copy_url = format!("sqlite://{}", dir.path().join("copy.db").display());
    // The worker projects the stream into a SQLite copy while Redis restarts.
    let copy = rt.block_on(forge_store::open_store(&copy_url)).unwrap();
    let mut worker = rt
        .block_on(forge_store::redis::ProjectorWorker::connect(
            &url,
            Arc::clone(&copy),
            tenant(),
            "copy",
            "w1",
            forge_store::redis::WorkerOptions::default(),
        ))
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = rt.spawn(async move {
        let stats = worker
            .run_until(async {
                let _ = stop_rx.await;
            })
            .await;
        (stats, worker)
    });
    let sid = SessionId::from("ses_restart_redis");
    let reader = open_reader(&rt, &url);
    let mut reads = Vec::new();
    let summary = writer_rides_out_restarts(
        &url,
        "redis",
        |k| {
            let how = if k == 0 {
                RedisStop::Kill
            } else {
                RedisStop::Shutdown
            };
            redis.stop(how);
            reads.push(read_while_down(&rt, &reader, &sid));
            std::thread::sleep(Duration::from_millis(1500));
            redis.start_again();
        },
        &rt,
    );
    for r in reads {
        let n = rt
            .block_on(r)
            .unwrap()
            .expect("a read across a restart returns");
        assert!(n > 0);
    }
    // The worker's copy catches up with the original.
    let original = rt.block_on(forge_store::open(&url)).unwrap();
    let want = rt.block_on(original.export(&tenant(), &sid)).unwrap();
    let copy_forge = rt.block_on(forge_store::open(&copy_url)).unwrap();
    wait_until(
        "the worker's copy equal to the Redis original",
        Duration::from_mins(2),
        || {
            rt.block_on(copy_forge.export(&tenant(), &sid))
                .is_ok_and(|got| {
                    serde_json::to_value(&got).unwrap() == serde_json::to_value(&want).unwrap()
                })
        },
    );
    let _ = stop_tx.send(());
    let (stats, _worker) = rt.block_on(worker).unwrap();
    let stats = stats.expect("the worker ran through both restarts");
    eprintln!(
        "restart: {summary} (SIGKILL, then SHUTDOWN); worker reconnected and resumed: \
         {} applied, {} skipped as already stored, copy equals original",
        stats.applied, stats.skipped
    );
}

/// The retry deadline of the past-the-deadline test: longer than the Postgres pool's
/// 5 s wait for a connection, so an attempt completes and its cause is named.
const DEADLINE: Duration = Duration::from_secs(7);

/// The error of a stream whose server stays down past the deadline.
async fn fail_past_deadline(url: &str, stop: impl FnOnce()) -> (forge_store::Error, Duration) {
    let forge = forge_store::open_with(url, OpenOptions::new().retry_for(DEADLINE))
        .await
        .unwrap();
    let sid = SessionId::from("ses_deadline");
    forge
        .replay_str(
            &tenant(),
            &turn(0, 3),
            ReplayOptions::default().session(sid.clone()),
        )
        .await
        .unwrap();
    stop();
    let start = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_mins(1),
        forge.replay_str(
            &tenant(),
            &turn(1, 3),
            ReplayOptions::default().session(sid),
        ),
    )
    .await
    .expect("a stream whose server is gone must fail, not hang")
    .expect_err("the server is down");
    (err.error, start.elapsed())
}

#[test]
fn a_server_down_past_the_deadline_fails_naming_the_server() {
    let test = "a_server_down_past_the_deadline_fails_naming_the_server";
    let Some(mut pg) = Postgres::start(25433, test) else {
        return;
    };
    let Some(mut redis) = Redis::start(6393, "always", test) else {
        return;
    };
    let rt = runtime();
    let mut lines = Vec::new();
    for (url, port) in [(pg.url(), pg.port()), (redis.url(), redis.port())] {
        let is_pg = url.starts_with("postgres");
        let (err, took) = rt.block_on(fail_past_deadline(&url, || {
            if is_pg {
                pg.stop(PgStop::Fast);
            } else {
                redis.stop(RedisStop::Kill);
            }
        }));
        let text = err.to_string();
        let server = format!("server 127.0.0.1:{port}");
        assert!(
            !err.is_input(),
            "a backend failure is no input error: {text}"
        );
        assert!(err.is_retryable(), "{text}");
        assert!(!text.contains("does not fit"), "{text}");
        assert!(text.contains(&server), "names the server: {text}");
        assert!(text.contains("refused"), "names the cause: {text}");
        assert!(text.contains("gave up after"), "{text}");
        // The command line, with the server still down: one line naming the server.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("turn.jsonl");
        std::fs::write(&file, turn(0, 3)).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_forge-store"))
            .args(["--backend", &url, "--retry-for", "1", "replay"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(&server), "{stderr}");
        assert!(!stderr.contains("does not fit"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        lines.push(format!(
            "{} failed after {:.1} s (deadline {} s): {text}",
            if is_pg { "postgres" } else { "redis" },
            took.as_secs_f64(),
            DEADLINE.as_secs()
        ));
    }
    eprintln!(
        "restart: server down past the deadline: {}",
        lines.join(" | ")
    );
}

/// A `forge-store` command on `url`, expected to succeed; returns stdout.
fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(["--backend", url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "forge-store {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn after_a_writer_kill_and_recover_on_redis_the_projected_postgres_copy_equals_redis() {
    let test = "after_a_writer_kill_and_recover_on_redis_the_projected_postgres_copy_equals_redis";
    let Some(redis) = Redis::start(6391, "always", test) else {
        return;
    };
    let Some(pg) = Postgres::start(25434, test) else {
        return;
    };
    let kills = env_usize("FORGE_RESTART_KILLS", 3);
    assert!(kills > 0, "FORGE_RESTART_KILLS=0 would compare nothing");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("turns.jsonl");
    let text: Vec<String> = (0..40).map(|i| turn(i, 40)).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    let mut interrupted = 0;
    let mut republished = 0;
    let (mut compared, mut messages) = (0, 0);
    for k in 0..kills {
        let from = format!("{}?prefix=kill{k}", redis.url());
        let to = format!("{}?schema=copy{k}", pg.url());
        let sid = format!("ses_kill_{k}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_forge-store"))
            .args([
                "--backend",
                &from,
                "--confirmations",
                "replay",
                "--session",
                &sid,
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
            text
        });
        // The kill lands after the first confirmed message, so the session exists with a
        // message and every run has a copy to compare. The rest of stdout is drained so
        // the writer never blocks on a full pipe.
        let (first, confirmed) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("\"confirmed\"") && line.contains("\"message.updated\"") {
                    let _ = first.send(());
                }
            }
        });
        if confirmed.recv_timeout(Duration::from_mins(1)).is_err() {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "run {k}: the replay exited or confirmed no message within a minute ({status}): {}",
                errors.join().unwrap_or_default()
            );
        }
        let delay = random_below(400);
        std::thread::sleep(Duration::from_millis(delay));
        if child.try_wait().unwrap().is_none() {
            interrupted += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        let recovered: serde_json::Value =
            serde_json::from_str(&cli(&from, &["recover", "--json"])).unwrap();
        republished += recovered["report"]["events_republished"]
            .as_u64()
            .unwrap_or(0);
        cli(
            &from,
            &["project", "--from", &from, "--to", &to, "--until-idle"],
        );
        let sessions = cli(&from, &["sessions", "--json"]);
        assert!(
            sessions.contains(&sid),
            "run {k}: the session of a confirmed boundary is missing: {sessions}"
        );
        let original = cli(&from, &["export", &sid]);
        let copy = cli(&to, &["export", &sid]);
        assert_eq!(
            copy, original,
            "run {k} (killed {delay} ms after the first confirmed message): the Postgres copy \
             differs from Redis"
        );
        let doc: serde_json::Value = serde_json::from_str(&copy).unwrap();
        let n = doc["messages"].as_array().map_or(0, Vec::len);
        assert!(n > 0, "run {k}: the copy has no message: {copy}");
        compared += 1;
        messages += n;
    }
    assert_eq!(compared, kills, "every run compared a copy");
    eprintln!(
        "restart: {kills} replay processes SIGKILLed on Redis ({interrupted} mid-stream), \
         recover ({republished} committed events republished to the bus), project into \
         Postgres: {compared} copies ({messages} messages) compared, each equal to the \
         Redis original"
    );
}

/// Writers streaming at once into the durability test's server.
const DURABILITY_WRITERS: usize = 4;

/// Streams turns into session `sid` of `url` until a write fails; `confirmed` counts
/// the turns confirmed.
async fn write_until_failure(url: String, sid: SessionId, confirmed: Arc<AtomicUsize>) {
    // No retries (the first failure ends the run) and no group-commit window (as
    // many confirmed writes as possible right before the kill).
    let options = OpenOptions::new()
        .retry_for(Duration::ZERO)
        .group_commit(Duration::ZERO);
    let Ok(forge) = forge_store::open_with(&url, options).await else {
        return;
    };
    for i in 0.. {
        let done = forge
            .replay_str(
                &tenant(),
                &turn(i, 5),
                ReplayOptions::default().session(sid.clone()),
            )
            .await;
        if done.is_err() {
            return;
        }
        confirmed.store(i + 1, Ordering::SeqCst);
    }
}

/// Measures what a SIGKILL of the Redis server loses of what it confirmed, per
/// `appendfsync` policy; prints the figures. `always` must lose nothing; `everysec`
/// may lose up to about a second of writes (its documented window), reported only.
#[test]
fn redis_durability_window_per_appendfsync_policy() {
    let test = "redis_durability_window_per_appendfsync_policy";
    let kills = env_usize("FORGE_DURABILITY_KILLS", 3);
    let rt = runtime();
    let mut lines = Vec::new();
    for (policy, port) in [("always", 6394), ("everysec", 6392)] {
        let Some(mut redis) = Redis::start(port, policy, test) else {
            return;
        };
        let (mut confirmed_total, mut lost_total, mut runs_losing) = (0, 0, 0);
        for k in 0..kills {
            // The store refuses an everysec server unless its URL accepts one.
            let url = format!("{}?prefix=dur{k}&fsync={policy}", redis.url());
            let sids: Vec<SessionId> = (0..DURABILITY_WRITERS)
                .map(|w| SessionId::from(format!("ses_durability_{w}")))
                .collect();
            let counts: Vec<Arc<AtomicUsize>> =
                sids.iter().map(|_| Arc::new(AtomicUsize::new(0))).collect();
            let writers: Vec<_> = sids
                .iter()
                .zip(&counts)
                .map(|(sid, c)| {
                    rt.spawn(write_until_failure(url.clone(), sid.clone(), Arc::clone(c)))
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300 + random_below(900)));
            redis.stop(RedisStop::Kill);
            let acked: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            for writer in writers {
                rt.block_on(async { tokio::time::timeout(Duration::from_mins(1), writer).await })
                    .expect("the writer stops when the server is gone")
                    .unwrap();
            }
            redis.start_again();
            let forge = rt.block_on(forge_store::open(&url)).unwrap();
            let mut f = Vec::new();
            for (sid, &n) in sids.iter().zip(&acked) {
                f.extend(rt.block_on(async {
                    match forge.session(&tenant(), sid).await {
                        Ok(_) => found(&forge, sid, n, 5).await.copies,
                        Err(_) => vec![0; n],
                    }
                }));
            }
            let acked: usize = acked.iter().sum();
            let lost = f.iter().filter(|c| **c == 0).count();
            confirmed_total += acked;
            lost_total += lost;
            runs_losing += usize::from(lost > 0);
            if policy == "always" {
                assert_eq!(
                    lost, 0,
                    "appendfsync always lost {lost} of {acked} confirmed turns"
                );
            }
        }
        lines.push(format!(
            "appendfsync {policy}: {kills} kills, {confirmed_total} turns confirmed, \
             {lost_total} lost ({runs_losing} kills lost some)"
        ));
    }
    eprintln!("durability: {}", lines.join(" | "));
}
