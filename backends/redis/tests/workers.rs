//! Several projector worker processes share one tenant's stream (`shards=6`) and
//! project it into one Postgres store; one of three is SIGKILLed mid-stream.
//!
//! Checked: the three workers share the shards (two each) before the kill and the
//! two survivors take the dead one's over (three each); every sync event is applied
//! at most once, and each session's events in seq order, one worker at a time (from
//! the workers' apply logs, time-stamped on one clock); and at the end the Postgres
//! copy equals the Redis store, session by session, and equals the stream replayed
//! into memory.
//!
//! The workers are this test binary re-run with `FORGE_REDIS_WORKER_CHILD` set.
//! `FORGE_WORKERS_SESSIONS` sets the sessions (default 24), `FORGE_WORKERS_TURNS` the
//! turns of each (default 4).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use common::{user_message, TestPrefix};
use forge_core::id::now_ms;
use forge_core::processor::{assistant_message, Outcome};
use forge_core::{
    Bus, Engine, Envelope, Forward, MemoryStore, MessageWithParts, ProcessorOptions, Result,
    Session, SessionId, Store, SyncEvent, TenantId,
};
use forge_redis::{ProjectorWorker, RedisBus, RedisStore, WorkerOptions};
use forge_sql::postgres::testing::TestSchema;
use forge_sql::PostgresStore;

const CHILD: &str = "FORGE_REDIS_WORKER_CHILD";
const SHARDS: usize = 6;
const WORKERS: usize = 3;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A store that prints `applied <ns> <session> <seq>` for every event of every batch
/// the inner store committed. It takes 10 ms more per batch, as a store across a
/// network would, so a worker spends most of its time between reading entries and
/// acknowledging them: where a kill hurts most.
#[derive(Debug)]
struct Logged(Arc<dyn Store>);

#[async_trait]
impl Forward for Logged {
    fn inner(&self) -> &dyn Store {
        &*self.0
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.0.apply(batch).await?;
        let at = now_ns();
        let mut out = std::io::stdout().lock();
        for env in batch {
            let _ = writeln!(out, "applied {at} {} {}", env.session_id, env.seq);
        }
        let _ = out.flush();
        Ok(())
    }
}

/// A worker process: projects tenant t1 into the Postgres schema of
/// `FORGE_WORKER_PG` until killed, printing its applies and its shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry point, started by three_workers_share_a_tenant_and_survive_the_kill_of_one"]
async fn worker_child() {
    let url = std::env::var(CHILD).unwrap_or_else(|_| {
        panic!(
            "worker_child is a child process of \
             three_workers_share_a_tenant_and_survive_the_kill_of_one and runs only with \
             {CHILD} set"
        )
    });
    let pg = std::env::var("FORGE_WORKER_PG").expect("FORGE_WORKER_PG");
    let name = std::env::var("FORGE_WORKER_NAME").expect("FORGE_WORKER_NAME");
    let target: Arc<dyn Store> = Arc::new(Logged(Arc::new(
        PostgresStore::connect(&pg).await.expect("postgres"),
    )));
    let mut worker = ProjectorWorker::connect(
        &url,
        target,
        TenantId::new("t1").expect("tenant"),
        "projector",
        &name,
        WorkerOptions {
            lease: Duration::from_millis(1500),
            count: 64,
        },
    )
    .await
    .expect("worker");
    // libtest printed "test worker_child ... " without a newline: end that line.
    println!();
    let mut shown = Vec::new();
    loop {
        worker.step().await.expect("worker round");
        let held = worker.shards_held();
        if held != shown {
            println!(
                "shards {}",
                held.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let _ = std::io::stdout().flush();
            shown = held;
        }
    }
}

/// What one worker printed.
#[derive(Default)]
struct Log {
    /// `(ns, session, seq)` of every applied event.
    applied: Vec<(u128, String, u64)>,
    /// The shards it holds now.
    shards: Vec<usize>,
}

struct Worker {
    child: Child,
    log: Arc<Mutex<Log>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_worker(url: &str, pg: &str, name: &str) -> Worker {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "worker_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, url)
        .env("FORGE_WORKER_PG", pg)
        .env("FORGE_WORKER_NAME", name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("worker process");
    let out = child.stdout.take().expect("stdout");
    let log = Arc::new(Mutex::new(Log::default()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let mut log = sink.lock().expect("log");
            match fields.as_slice() {
                ["applied", ns, session, seq] => {
                    if let (Ok(ns), Ok(seq)) = (ns.parse(), seq.parse()) {
                        log.applied.push((ns, (*session).to_owned(), seq));
                    }
                }
                ["shards", list] => {
                    log.shards = list.split(',').filter_map(|s| s.parse().ok()).collect();
                }
                ["shards"] => log.shards.clear(),
                _ => {}
            }
        }
    });
    Worker { child, log }
}

/// Streams `turns` turns into `session` through `engine`: a user message, then an
/// assistant turn with reasoning, a tool call and text deltas.
async fn stream_session(engine: &Engine, tenant: &TenantId, sid: &SessionId, turns: usize) {
    let mut session = Session::new("workers", now_ms());
    session.id = sid.clone();
    let scope = engine.put_session(tenant, session).await.expect("session");
    for turn in 0..turns {
        let (user, part) = user_message(
            sid,
            &format!("msg_{turn:04}_a"),
            &format!("prt_{turn:04}_a"),
            "go on",
        );
        engine
            .put_message(&scope, user.clone(), vec![part])
            .await
            .expect("user message");
        let m = assistant_message(sid.clone(), user.id.clone(), "p", "m", now_ms());
        let mut p = engine
            .processor(scope.clone(), m, ProcessorOptions::default())
            .await
            .expect("processor");
        let mut lines = vec![
            r#"{"type":"start-step"}"#.to_owned(),
            r#"{"type":"reasoning-start","id":"r"}"#.to_owned(),
        ];
        for i in 0..10 {
            lines.push(format!(
                r#"{{"type":"reasoning-delta","id":"r","text":"thought {i} "}}"#
            ));
        }
        lines.push(r#"{"type":"reasoning-end","id":"r"}"#.to_owned());
        lines.push(format!(
            r#"{{"type":"tool-call","toolCallId":"call_{turn}","toolName":"read","input":{{"filePath":"src/{turn}.rs"}}}}"#
        ));
        lines.push(format!(
            r#"{{"type":"tool-result","toolCallId":"call_{turn}","toolName":"read","output":{{"output":"fn f{turn}() {{}}","title":"src/{turn}.rs","metadata":{{}}}}}}"#
        ));
        lines.push(r#"{"type":"text-start","id":"t"}"#.to_owned());
        for i in 0..30 {
            lines.push(format!(
                r#"{{"type":"text-delta","id":"t","text":"word{i} "}}"#
            ));
        }
        lines.push(r#"{"type":"text-end","id":"t"}"#.to_owned());
        lines.push(
            r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":10,"outputTokens":40}}"#
                .to_owned(),
        );
        for line in &lines {
            common::handle(&mut p, line).await;
            // A model's pace, roughly: the stream lasts seconds, so the kill lands
            // in its middle.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        p.finalize(Outcome::Finished).await.expect("finalize");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn snapshot(workers: &[Worker]) -> Vec<Vec<usize>> {
    workers
        .iter()
        .map(|w| w.log.lock().expect("log").shards.clone())
        .collect()
}

/// Waits until `ok(shards of each worker)` holds.
fn wait_shards(workers: &[Worker], what: &str, ok: impl Fn(&[Vec<usize>]) -> bool) {
    let start = Instant::now();
    loop {
        let now = snapshot(workers);
        if ok(&now) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: shards held {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn history(
    store: &dyn Store,
    tenant: &TenantId,
) -> BTreeMap<SessionId, (u64, Vec<MessageWithParts>)> {
    let mut out = BTreeMap::new();
    for s in store.sessions(tenant).await.expect("sessions") {
        let all = forge_core::read_all(store, tenant, &s.info.id, 100)
            .await
            .expect("history");
        out.insert(s.info.id.clone(), (s.seq, all));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_a_tenant_and_survive_the_kill_of_one() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some(p) = TestPrefix::with_query(&format!("&shards={SHARDS}")) else {
        return;
    };
    let Some(pg) = forge_testkit::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "the worker-kill test projects into Postgres",
    ) else {
        return;
    };
    let sessions = env_number("FORGE_WORKERS_SESSIONS", 24);
    let turns = env_number("FORGE_WORKERS_TURNS", 4);
    let url = &p.url;
    let schema = TestSchema::create(&pg).await.expect("schema");
    let copy = PostgresStore::connect(&schema.url())
        .await
        .expect("postgres");
    let tenant = TenantId::new("t1").expect("tenant");

    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| spawn_worker(url, &schema.url(), &format!("w{i}")))
        .collect();
    // They share: two shards each, all six held.
    wait_shards(&workers, "three workers sharing six shards", |s| {
        s.iter().all(|h| h.len() == SHARDS / WORKERS)
            && s.iter().flatten().collect::<BTreeSet<_>>().len() == SHARDS
    });
    let before_kill = snapshot(&workers);

    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(url).await.expect("store"));
    let bus: Arc<dyn Bus> = Arc::new(RedisBus::connect(url).await.expect("bus"));
    let engine = Arc::new(Engine::direct(Arc::clone(&store), Arc::clone(&bus)));
    let ids: Vec<SessionId> = (0..sessions)
        .map(|i| SessionId::from(format!("ses_{i:04}")))
        .collect();
    let started = Instant::now();
    let mut streams = Vec::new();
    for sid in ids.clone() {
        let engine = Arc::clone(&engine);
        let tenant = tenant.clone();
        streams.push(tokio::spawn(async move {
            stream_session(&engine, &tenant, &sid, turns).await;
        }));
    }
    // Mid-stream: once the victim has applied some events, SIGKILL it.
    let victim = 0;
    let wait = Instant::now();
    while workers[victim].log.lock().expect("log").applied.len() < 50 {
        assert!(
            wait.elapsed() < Duration::from_mins(1),
            "worker 0 applies nothing"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unfinished = streams.iter().filter(|h| !h.is_finished()).count();
    assert!(
        unfinished > 0,
        "the stream ended before the kill: make it longer"
    );
    workers[victim].child.kill().expect("kill");
    let _ = workers[victim].child.wait();
    let killed_at = Instant::now();
    let victim_applied = workers[victim].log.lock().expect("log").applied.len();
    let survivors = || (0..WORKERS).filter(|i| *i != victim);
    for s in streams {
        s.await.expect("stream task");
    }
    bus.flush().await.expect("flush");
    let streamed_in = started.elapsed();

    // The survivors take the dead worker's shards over: three each.
    let surviving: Vec<Worker> = workers.drain(1..).collect();
    wait_shards(&surviving, "two survivors holding all six shards", |s| {
        s.iter().all(|h| h.len() == SHARDS / (WORKERS - 1))
            && s.iter().flatten().collect::<BTreeSet<_>>().len() == SHARDS
    });
    let takeover = killed_at.elapsed();
    let after_kill = snapshot(&surviving);

    // The copy catches up with the Redis store.
    let want = history(store.as_ref(), &tenant).await;
    assert_eq!(want.len(), sessions);
    let start = Instant::now();
    loop {
        let got = history(&copy, &tenant).await;
        if got == want {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let differing: Vec<&SessionId> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, _)| k)
                .collect();
            panic!(
                "the Postgres copy differs from the Redis store in {} of {} sessions: {:?}",
                differing.len(),
                want.len(),
                differing.iter().take(5).collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let caught_up = killed_at.elapsed();

    // Nothing is left pending in the consumer group: every entry the dead worker had
    // read was claimed and acknowledged by a survivor.
    let mut redis_conn = p.conn();
    let keys = forge_redis::Keys::new(&p.prefix).expect("keys");
    for shard in 0..SHARDS {
        let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
            .arg(keys.work_stream(&tenant, shard, SHARDS))
            .arg("projector")
            .query(&mut redis_conn)
            .expect("XPENDING");
        assert_eq!(
            pending.count(),
            0,
            "shard {shard}: entries left pending: {pending:?}"
        );
    }

    // The stream replayed into memory gives the same history.
    let replayed = MemoryStore::new();
    let mut sync_events = 0;
    for sid in &ids {
        let events = bus.replay(&tenant, sid, 1).await.expect("replay").events;
        // The events carry the source's epochs; the copy in memory is never claimed.
        let sync: Vec<_> = common::sync_events(&events)
            .into_iter()
            .map(|env| env.with_epoch(None))
            .collect();
        sync_events += sync.len();
        replayed.apply(&sync).await.expect("replay into memory");
    }
    assert_eq!(
        history(&replayed, &tenant).await,
        want,
        "the stream replayed"
    );

    // At most once, in order, one worker at a time: merged on one clock, each
    // session's applied seqs rise strictly.
    let mut all: Vec<(u128, String, u64, usize)> = Vec::new();
    let logs: Vec<Arc<Mutex<Log>>> = std::iter::once(Arc::clone(&workers[victim].log))
        .chain(surviving.iter().map(|w| Arc::clone(&w.log)))
        .collect();
    for (w, log) in logs.iter().enumerate() {
        for (ns, session, seq) in &log.lock().expect("log").applied {
            all.push((*ns, session.clone(), *seq, w));
        }
    }
    all.sort();
    let mut last: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
    let mut per_worker = [0usize; WORKERS];
    for (_, session, seq, w) in &all {
        per_worker[*w] += 1;
        if let Some((prev, by)) = last.get(session.as_str()) {
            assert!(
                seq > prev,
                "session {session}: seq {seq} applied by worker {w} after seq {prev} by worker {by}"
            );
        }
        last.insert(session, (*seq, *w));
    }
    assert!(
        all.len() <= sync_events,
        "{} applies of {sync_events} sync events",
        all.len()
    );
    assert!(
        survivors().all(|w| per_worker[w] > 0),
        "a survivor applied nothing: {per_worker:?}"
    );
    eprintln!(
        "workers: {sessions} sessions x {turns} turns, {sync_events} sync events in {:.1} s; \
         shards before the kill {before_kill:?}, after {after_kill:?}; applies per worker \
         {per_worker:?} (the killed one: {victim_applied} logged before SIGKILL; events it \
         committed but did not log were skipped by the others as already stored); \
         killed with {unfinished} of {sessions} sessions still streaming; survivors held all shards {:.1} s and the copy equalled the store {:.1} s after \
         the kill",
        streamed_in.as_secs_f64(),
        takeover.as_secs_f64(),
        caught_up.as_secs_f64(),
    );
    drop(surviving);
    schema.drop().await.expect("drop schema");
}

/// A store whose first batch waits until `resume` is notified, after telling `paused`:
/// a worker stopped (a paused VM, a debugger) between its lease check and its write.
#[derive(Debug)]
struct PausedOnce {
    inner: Arc<dyn Store>,
    armed: std::sync::atomic::AtomicBool,
    paused: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

#[async_trait]
impl Forward for PausedOnce {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        if self.armed.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.paused.notify_one();
            self.resume.notified().await;
        }
        self.inner.apply(batch).await
    }
}

/// The text of the one part of the one message of `sid` in `store`.
async fn part_text(store: &dyn Store, tenant: &TenantId, sid: &SessionId) -> String {
    let all = forge_core::read_all(store, tenant, sid, 100)
        .await
        .expect("history");
    let [message] = all.as_slice() else {
        panic!("expected one message: {all:?}");
    };
    serde_json::to_value(&message.parts[0]).expect("part as JSON")["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_has_its_late_batch_refused() {
    let Some(p) = common::TestPrefix::new() else {
        return;
    };
    let tenant = TenantId::default();
    let sid = SessionId::from("ses_fenced");
    let source = common::engine(&p.url).await;
    let scope = source
        .put_session(&tenant, {
            let mut s = Session::new("fenced", now_ms());
            s.id = sid.clone();
            s
        })
        .await
        .expect("source session");
    let (message, part) = user_message(&sid, "msg_0001", "prt_0001", "first version");
    source
        .put_message(&scope, message, vec![part])
        .await
        .expect("first version");

    let target = Arc::new(MemoryStore::new());
    let opts = WorkerOptions {
        lease: Duration::from_millis(300),
        count: 256,
    };
    let paused = Arc::new(PausedOnce {
        inner: target.clone(),
        armed: std::sync::atomic::AtomicBool::new(true),
        paused: tokio::sync::Notify::new(),
        resume: tokio::sync::Notify::new(),
    });
    let connect = |store: Arc<dyn Store>, consumer: &'static str| {
        ProjectorWorker::connect(&p.url, store, tenant.clone(), "g", consumer, opts)
    };
    let mut a = connect(paused.clone(), "worker-a").await.expect("worker a");
    let mut b = connect(target.clone(), "worker-b").await.expect("worker b");

    // Worker a reads the first version, checks its lease and stops before writing it.
    let a_round = tokio::spawn(async move {
        let r = a.step().await;
        (a, r)
    });
    tokio::time::timeout(Duration::from_secs(20), paused.paused.notified())
        .await
        .expect("worker a never wrote");

    // Its lease runs out; the part changes; worker b takes the shard over and writes
    // everything, the second version last.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (message, part) = user_message(&sid, "msg_0001", "prt_0001", "second version");
    source
        .put_message(&scope, message, vec![part])
        .await
        .expect("second version");
    let stats = tokio::time::timeout(Duration::from_mins(1), b.run_until_idle())
        .await
        .expect("worker b hung")
        .expect("worker b");
    assert!(stats.applied >= 3, "{stats:?}");
    assert_eq!(
        part_text(target.as_ref(), &tenant, &sid).await,
        "second version"
    );
    let written = forge_core::read_all(target.as_ref(), &tenant, &sid, 100)
        .await
        .expect("history");

    // Worker a wakes up and writes its stale batch: the store refuses it.
    paused.resume.notify_one();
    let (a, round) = tokio::time::timeout(Duration::from_secs(20), a_round)
        .await
        .expect("worker a hung")
        .expect("worker a's task");
    assert_eq!(round.expect("a fenced round is not an error"), 0);
    assert_eq!(a.stats().applied, 0, "{:?}", a.stats());
    assert!(a.shards_held().is_empty(), "{:?}", a.shards_held());
    assert_eq!(
        part_text(target.as_ref(), &tenant, &sid).await,
        "second version"
    );
    assert_eq!(
        forge_core::read_all(target.as_ref(), &tenant, &sid, 100)
            .await
            .expect("history"),
        written
    );
    let claim = target
        .claimed(&tenant, &sid)
        .await
        .expect("claimed")
        .expect("a claim");
    assert_eq!(claim.holder, "worker-b");
}
