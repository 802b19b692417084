//! `forge-store soak`: many sessions streaming through one engine at once, in wall
//! time, for minutes; then the stored history is compared row for row with what the
//! same streams give on the in-memory reference backend.
//!
//! Each session streams W1 turns (docs/backends.md, "Workload W1") at their event
//! times (deltas 20 ms apart, tools 1 s; `--speed` compresses time), starting at a
//! random offset within the first turn, through the backend's engine as `serve` runs
//! it: its bus, its commit policy (`--commit`, `--commit-window-ms`). A subscriber per
//! session measures delta → subscriber latency. The report gives the duration,
//! sessions, turns, rows checked, the process's resident memory (VmRSS at the start and
//! the end, VmHWM as the peak, sampled every few seconds) and latency p50/p99/max. Any
//! row that differs from the reference makes the command fail, naming it.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use forge_bench::workload::{w1, Item, Script, W1_TURN_MS};
use forge_store::backend::{LocalBus, MemoryStore};
use forge_store::turn::{Answerer, EventTime, TurnDriver, TurnOptions};
use forge_store::Topic;
use forge_store::{
    read_all, Engine, Event, Forge, Outcome, Session, SessionId, StreamEvent, SyncEvent, TenantId,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

/// Event time of the soak's t = 0, Unix ms.
const EPOCH_MS: i64 = 1_700_000_000_000;
/// Event time between the end of a turn and the next user message, ms.
const THINK_MS: u64 = 1_000;
/// Latency histogram: 10 µs buckets up to 10 s.
const BUCKET_US: u64 = 10;
const BUCKETS: usize = 1_000_000;

/// `forge-store soak [--sessions N] [--turns T] [--speed X] [--seed S] [--json]`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Sessions streaming at once.
    #[arg(long, default_value_t = 1000)]
    sessions: u32,
    /// W1 turns per session.
    #[arg(long, default_value_t = 10)]
    turns: u32,
    /// Time compression: 1 streams at W1's event times (a turn takes about 15 s), 10
    /// ten times faster.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Seed of the content and of the start offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Resident memory of this process from /proc/self/status, in KiB: (VmRSS, VmHWM).
fn memory_kib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The W1 turn `turn` of session `i`: each turn is drawn on its own, so a session holds
/// one turn of content at a time.
fn turn_script(seed: u64, i: u32, turn: u32) -> Script {
    w1(
        1,
        seed.wrapping_mul(0x9E37_79B9) ^ (u64::from(i) << 20) ^ u64::from(turn),
    )
}

/// The start offset of session `i`, ms of event time in `[0, W1_TURN_MS)`.
fn offset(seed: u64, i: u32) -> u64 {
    let mut z = seed ^ u64::from(i).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 29)) % W1_TURN_MS
}

fn session_id(i: u32) -> SessionId {
    SessionId::from(format!("ses_soak{i:06}"))
}

/// Send times of a session's deltas by seq, taken by its subscriber.
type Sent = Arc<Mutex<VecDeque<(u64, Instant)>>>;

/// How one session is driven: at wall time (`pace`) or as fast as possible.
struct Pace {
    start: tokio::time::Instant,
    speed: f64,
}

/// Streams session `i` through `engine`. With `pace`, sleeps until each item's time and
/// records each delta's send time in `sent`.
async fn drive(
    engine: &Engine,
    tenant: &TenantId,
    seed: u64,
    i: u32,
    turns: u32,
    pace: Option<&Pace>,
    sent: Option<&Sent>,
) -> Result<u64> {
    let sid = session_id(i);
    let mut session = Session::new(format!("soak session {i}"), EPOCH_MS);
    session.id = sid.clone();
    let scope = engine.projector.scope(tenant, &sid).await?;
    engine
        .projector
        .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
        .await?;
    let options = TurnOptions {
        event_time: Some(EventTime {
            epoch_ms: EPOCH_MS,
            group: None,
        }),
        answerer: Answerer::fixed("soak", "w1"),
        ..TurnOptions::default()
    };
    let mut driver = TurnDriver::new(Arc::clone(&engine.projector), scope, options);
    let mut base = offset(seed, i);
    let mut deltas = 0;
    for turn in 0..turns {
        let script = turn_script(seed, i, turn);
        let mut end = 0;
        for timed in script.items {
            end = timed.t_ms.unwrap_or(end);
            let t = base + end;
            if let Some(p) = pace {
                let due = Duration::from_secs_f64(t as f64 / 1000.0 / p.speed);
                tokio::time::sleep_until(p.start + due).await;
            }
            driver.at(Some(t)).await?;
            if let Item::Stream(
                StreamEvent::TextDelta { .. } | StreamEvent::ReasoningDelta { .. },
            ) = &timed.item
            {
                deltas += 1;
                if let Some(sent) = sent {
                    let seq = driver.scope().last_seq() + 1;
                    sent.lock().push_back((seq, Instant::now()));
                }
            }
            driver
                .item(timed.item)
                .await
                .with_context(|| format!("session {sid}"))?;
        }
        base += end + THINK_MS;
    }
    driver.finalize(Outcome::Aborted).await?;
    Ok(deltas)
}

/// A latency histogram.
struct Histogram(Vec<u64>);

impl Histogram {
    fn new() -> Self {
        Self(vec![0; BUCKETS + 1])
    }

    fn add(&mut self, d: Duration) {
        let b = (d.as_micros() as u64 / BUCKET_US).min(BUCKETS as u64) as usize;
        self.0[b] += 1;
    }

    fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The `q` quantile in ms (upper edge of its bucket).
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(((b as u64 + 1) * BUCKET_US) as f64 / 1000.0);
            }
        }
        None
    }

    fn max_ms(&self) -> Option<f64> {
        let b = self.0.iter().rposition(|c| *c > 0)?;
        Some(((b as u64 + 1) * BUCKET_US) as f64 / 1000.0)
    }
}

/// A subscriber of one session: takes each delta's latency from `sent`.
async fn subscribe(
    engine: &Engine,
    tenant: &TenantId,
    i: u32,
    sent: Sent,
    histogram: Arc<Mutex<Histogram>>,
    lagged: Arc<AtomicU64>,
) -> Result<tokio::task::JoinHandle<()>> {
    let mut sub = engine
        .bus
        .subscribe(tenant, Topic::Session(session_id(i)), None)
        .await?;
    Ok(tokio::spawn(async move {
        while let Some(next) = sub.next().await {
            let e = match next {
                Ok(e) => e,
                Err(forge_store::CoreError::Lagged { missed }) => {
                    lagged.fetch_add(missed, Ordering::Relaxed);
                    continue;
                }
                Err(_) => return,
            };
            if !matches!(e.event, Event::PartDelta(_)) {
                continue;
            }
            let now = Instant::now();
            let mut q = sent.lock();
            while let Some((seq, at)) = q.front().copied() {
                if seq > e.seq {
                    break;
                }
                q.pop_front();
                if seq == e.seq {
                    histogram.lock().add(now.saturating_duration_since(at));
                }
            }
        }
    }))
}

/// Every stored row of a session with generated ids replaced by their order of first
/// appearance (the two runs generate different ids for the same rows).
fn normalized(rows: &[forge_store::MessageWithParts]) -> Result<Value> {
    fn walk(v: &mut Value, ids: &mut HashMap<String, String>) {
        match v {
            Value::String(s) if s.starts_with("msg_") || s.starts_with("prt_") => {
                let n = ids.len();
                let id = ids
                    .entry(s.clone())
                    .or_insert_with(|| format!("{}#{n}", &s[..3]));
                s.clone_from(id);
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, ids)),
            Value::Object(o) => o.values_mut().for_each(|x| walk(x, ids)),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(rows)?;
    walk(&mut v, &mut HashMap::new());
    Ok(v)
}

/// Where two JSON values first differ: a path and both sides, shortened.
fn first_difference(a: &Value, b: &Value, path: String) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if v == w => {}
                    Some(w) => return first_difference(v, w, format!("{path}.{k}")),
                    None => return format!("{path}.{k}: only in the store"),
                }
            }
            match y.keys().find(|k| !x.contains_key(*k)) {
                Some(k) => format!("{path}.{k}: only in the reference"),
                None => path,
            }
        }
        (Value::Array(x), Value::Array(y)) => match x.iter().zip(y).position(|(v, w)| v != w) {
            Some(i) => first_difference(&x[i], &y[i], format!("{path}[{i}]")),
            None if x.len() == y.len() => path,
            None => format!(
                "{path}: {} rows in the store, {} in the reference",
                x.len(),
                y.len()
            ),
        },
        _ => {
            let short = |v: &Value| {
                crate::one_line(&anyhow!("{v}"))
                    .chars()
                    .take(120)
                    .collect::<String>()
            };
            format!("{path}: store {}, reference {}", short(a), short(b))
        }
    }
}

/// Runs the soak on `forge` and prints its report.
pub async fn run(
    forge: &Forge,
    tenant: &TenantId,
    args: &SoakArgs,
    quiet: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if args.sessions == 0 || args.turns == 0 || args.speed.is_nan() || args.speed <= 0.0 {
        bail!("--sessions and --turns must be at least 1 and --speed above 0");
    }
    let engine = forge.engine().clone();
    let (rss_start, _) = memory_kib();
    let histogram = Arc::new(Mutex::new(Histogram::new()));
    let lagged = Arc::new(AtomicU64::new(0));
    let pace = Arc::new(Pace {
        start: tokio::time::Instant::now() + Duration::from_millis(500),
        speed: args.speed,
    });
    let done = Arc::new(AtomicUsize::new(0));
    let peak_rss = Arc::new(AtomicU64::new(rss_start));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.sessions as usize);
    for i in 0..args.sessions {
        let sent: Sent = Arc::default();
        let sub = subscribe(
            &engine,
            tenant,
            i,
            Arc::clone(&sent),
            Arc::clone(&histogram),
            Arc::clone(&lagged),
        )
        .await?;
        let (engine, tenant, pace, done) = (
            engine.clone(),
            tenant.clone(),
            Arc::clone(&pace),
            Arc::clone(&done),
        );
        let (seed, turns) = (args.seed, args.turns);
        tasks.push(tokio::spawn(async move {
            let r = drive(&engine, &tenant, seed, i, turns, Some(&pace), Some(&sent)).await;
            done.fetch_add(1, Ordering::Relaxed);
            (r, sub, sent)
        }));
    }
    let monitor = {
        let (done, peak, total) = (Arc::clone(&done), Arc::clone(&peak_rss), args.sessions);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let (rss, _) = memory_kib();
                peak.fetch_max(rss, Ordering::Relaxed);
                if !quiet {
                    eprintln!(
                        "soak: {:>5.0} s, {}/{total} sessions done, RSS {} MiB",
                        started.elapsed().as_secs_f64(),
                        done.load(Ordering::Relaxed),
                        rss / 1024
                    );
                }
            }
        })
    };
    let mut deltas = 0;
    let mut subscribers = Vec::new();
    for t in tasks {
        let (r, sub, sent) = t.await.context("a session task failed")?;
        deltas += r?;
        subscribers.push((sub, sent));
    }
    engine.projector.sync().await?;
    engine.bus.flush().await?;
    // Let the subscribers take what is in flight, then stop them.
    let drain = Instant::now();
    while subscribers.iter().any(|(_, s)| !s.lock().is_empty())
        && drain.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unreceived: usize = subscribers.iter().map(|(_, s)| s.lock().len()).sum();
    for (sub, _) in &subscribers {
        sub.abort();
    }
    monitor.abort();
    let duration = started.elapsed();
    let (rss_end, hwm) = memory_kib();
    let rss_peak = hwm.max(peak_rss.load(Ordering::Relaxed));
    drop(subscribers);

    // Row for row against the in-memory reference, one session at a time.
    let check_started = Instant::now();
    let mut rows = 0usize;
    let mut differing = Vec::new();
    for i in 0..args.sessions {
        let reference = Engine::direct(Arc::new(MemoryStore::new()), Arc::new(LocalBus::new()));
        drive(&reference, tenant, args.seed, i, args.turns, None, None).await?;
        let sid = session_id(i);
        let want = read_all(reference.store.as_ref(), tenant, &sid, 1000).await?;
        let have = read_all(engine.store.as_ref(), tenant, &sid, 1000).await?;
        rows += want.iter().map(|m| 1 + m.parts.len()).sum::<usize>();
        let (have, want) = (normalized(&have)?, normalized(&want)?);
        if have != want {
            let at = first_difference(&have, &want, String::new());
            differing.push(format!("{sid} at {at}"));
        }
    }
    let histogram = histogram.lock();
    let report = json!({
        "backend": forge.url(),
        "sessions": args.sessions,
        "turns": args.turns,
        "speed": args.speed,
        "seed": args.seed,
        "duration_s": duration.as_secs_f64(),
        "deltas": deltas,
        "latency_samples": histogram.count(),
        "latency_ms": {"p50": histogram.quantile_ms(0.5), "p99": histogram.quantile_ms(0.99), "max": histogram.max_ms()},
        "lagged": lagged.load(Ordering::Relaxed),
        "unreceived": unreceived,
        "rss_kib": {"start": rss_start, "end": rss_end, "peak": rss_peak},
        "rows_checked": rows,
        "sessions_differing": differing.len(),
        "check_s": check_started.elapsed().as_secs_f64(),
    });
    if args.json {
        crate::commands::print_json(out, &report)?;
    } else {
        let ms = |v: &Value| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.2}"));
        writeln!(
            out,
            "soak: {} sessions x {} turns through {} in {:.1} s; {} deltas, latency p50 {} ms \
             p99 {} ms max {} ms ({} samples, {} lagged, {} never received); RSS start {} MiB, \
             end {} MiB, peak {} MiB; {} rows checked against the reference, {} sessions differ",
            args.sessions,
            args.turns,
            forge_store::redact(forge.url()),
            duration.as_secs_f64(),
            deltas,
            ms(&report["latency_ms"]["p50"]),
            ms(&report["latency_ms"]["p99"]),
            ms(&report["latency_ms"]["max"]),
            histogram.count(),
            report["lagged"],
            unreceived,
            rss_start / 1024,
            rss_end / 1024,
            rss_peak / 1024,
            rows,
            differing.len()
        )?;
    }
    if let Some(first) = differing.first() {
        bail!(
            "{} sessions differ from the reference, first {first}",
            differing.len()
        );
    }
    if unreceived > 0 || lagged.load(Ordering::Relaxed) > 0 {
        bail!(
            "subscribers missed deltas: {unreceived} never received, {} lagged",
            lagged.load(Ordering::Relaxed)
        );
    }
    Ok(())
}
