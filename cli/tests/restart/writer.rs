//! A writer streaming turns rides out server restarts (Postgres `stop -m fast` /
//! `-m immediate`, Redis SIGKILL / `SHUTDOWN`); the Redis projector worker resumes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use forge_store::{Forge, OpenOptions, SessionId};
use forge_testkit::servers::{PgStop, Postgres, Redis, RedisStop};
use forge_testkit::{env_usize, runtime, wait_until};

use crate::{found, tenant, write_turns};

fn wait_confirmed(confirmed: &AtomicUsize, at_least: usize) {
    wait_until(
        &format!("the writer confirming {at_least} turns"),
        Duration::from_mins(2),
        || confirmed.load(Ordering::SeqCst) >= at_least,
    );
}

/// A throwaway server the writer test stops and starts again.
enum Restart<'a> {
    Postgres(&'a mut Postgres),
    Redis(&'a mut Redis),
}

impl Restart<'_> {
    /// Stops the server the `k`th time (0 or 1): Postgres `-m fast`, then `-m
    /// immediate`; Redis SIGKILL, then `SHUTDOWN`.
    fn stop_nth(&mut self, k: usize) {
        match self {
            Self::Postgres(pg) => pg.stop([PgStop::Fast, PgStop::Immediate][k]),
            Self::Redis(r) => r.stop([RedisStop::Kill, RedisStop::Shutdown][k]),
        }
    }

    /// Starts it again.
    fn start(&mut self) {
        match self {
            Self::Postgres(pg) => pg.start_again(),
            Self::Redis(r) => r.start_again(),
        }
    }
}

/// A writer on `url` streams turns into `ses_restart_{name}`; `server` is stopped and
/// started again twice, a read issued while it is down (through a reader opened
/// before) must return once it is back. Every turn is confirmed once and stored
/// exactly once. Returns the summary line.
fn writer_rides_out_restarts(
    url: &str,
    name: &str,
    mut server: Restart<'_>,
    rt: &tokio::runtime::Runtime,
) -> String {
    let reader = open_reader(rt, url);
    let mut pending = Vec::new();
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
        server.stop_nth(k);
        pending.push(read_while_down(rt, &reader, &sid));
        std::thread::sleep(Duration::from_millis(1500));
        server.start();
        reads += 1;
    }
    let longest = rt
        .block_on(async { tokio::time::timeout(Duration::from_mins(3), writer).await })
        .expect("the writer must not hang")
        .unwrap()
        .unwrap_or_else(|(i, e)| panic!("{name}: turn {i} failed across a restart: {e}"));
    assert_eq!(confirmed.load(Ordering::SeqCst), turns);
    for r in pending {
        let n = rt
            .block_on(r)
            .unwrap()
            .expect("a read across a restart returns");
        assert!(n > 0);
    }
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
    let summary = writer_rides_out_restarts(&url, "postgres", Restart::Postgres(&mut pg), &rt);
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
    let summary = writer_rides_out_restarts(&url, "redis", Restart::Redis(&mut redis), &rt);
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
