//! Drives a workload through the Processor on one backend, in one mode and commit
//! policy, in event time, and measures what it wrote.
//!
//! Event time, not wall time: before each item the runner sets the Processor's clock to
//! the item's time and moves a [`GroupCommitProjector`]'s clock there
//! ([`GroupCommitProjector::advance`]), so a group-commit window is judged on the
//! workload's own timing and the run never sleeps. Both modes use the same Processor,
//! projector and backend code; per-delta only switches on
//! [`ProcessorOptions::persist_every_delta`] under the direct projector.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use forge_core::id::PartId;
use forge_core::processor::assistant_message;
use forge_core::{
    Bus, CountingStore, DirectProjector, Event, Flow, FlushMode, GroupCommitOptions,
    GroupCommitProjector, LocalBus, MemoryStore, Message, MessageId, Part, Processor,
    ProcessorOptions, Projector, Scope, Session, SessionId, Store, SyncEvent, TenantId, Topic,
};
use parking_lot::Mutex;

use crate::probe::{Probe, ProcIo};
use crate::workload::{logical_bytes, merge, Item, Script};
use crate::{Measurement, Mode, Percentiles, Policy};

/// Wall time between deltas in a latency run.
pub const PACE: std::time::Duration = std::time::Duration::from_millis(2);

/// Event time of the workload's t = 0, Unix ms.
const EPOCH_MS: i64 = 1_700_000_000_000;

/// A backend to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `MemoryStore` and `LocalBus`: the reference, nothing physical.
    Memory,
    /// A fresh redb file under the run directory, opened with these URL options
    /// (`key=value&…`, empty for the defaults: durable, journaled).
    Redb(String),
    /// A fresh SQLite file (WAL, `synchronous=normal`) under the run directory, opened
    /// with these URL options (`key=value&…`, empty for the defaults).
    Sqlite(String),
    /// A fresh schema on this Postgres server, dropped afterwards.
    Postgres(String),
    /// A fresh key prefix on this Redis server (store and Streams bus), deleted
    /// afterwards.
    Redis(String),
}

impl Target {
    /// `memory`, `redb`, `sqlite`, `postgres`, `redis`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redb(_) => "redb",
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
            Self::Redis(_) => "redis",
        }
    }
}

/// One run to measure.
#[derive(Clone, Debug)]
pub struct Run {
    /// The backend.
    pub target: Target,
    /// Boundary or per-delta.
    pub mode: Mode,
    /// Commit policy (per-delta always commits every write on its own).
    pub policy: Policy,
    /// Name in the report: `W1`, `W1x64`, `input:FILE`.
    pub workload: String,
    /// Turns per session, for the report.
    pub turns: u32,
    /// Measure delta → subscriber latency: subscribes to every session and paces the
    /// deltas [`PACE`] apart in wall time, so the figure is the latency of a live
    /// stream, not of a queue filled as fast as the driver can.
    pub latency: bool,
    /// Where files are created.
    pub dir: PathBuf,
}

impl Run {
    /// What a progress line shows: `W1 redb boundary terminal/10ms T=10`.
    pub fn label(&self) -> String {
        format!(
            "{} {} {} {} T={}",
            self.workload,
            self.target.name(),
            self.mode.as_str(),
            self.policy.label(),
            self.turns
        )
    }
}

/// A backend opened for one run.
struct Opened {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    probe: Probe,
    cleanup: Cleanup,
}

enum Cleanup {
    None,
    Redb(Arc<forge_redb::RedbStore>),
    Sqlite(Arc<forge_sql::SqliteStore>),
    Postgres {
        store: Arc<forge_sql::PostgresStore>,
        url: String,
        schema: String,
    },
    PostgresShared(Arc<forge_sql::PostgresStore>),
    Redis {
        url: String,
        pattern: String,
    },
}

static RUN_NO: AtomicU64 = AtomicU64::new(0);

fn with_query(url: &str, pair: &str) -> String {
    if url.contains('?') {
        format!("{url}&{pair}")
    } else {
        format!("{url}?{pair}")
    }
}

async fn open(target: &Target, dir: &Path) -> Result<Opened> {
    let n = RUN_NO.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}_{n}", std::process::id());
    Ok(match target {
        Target::Memory => Opened {
            store: Arc::new(MemoryStore::new()),
            bus: Arc::new(LocalBus::new()),
            probe: Probe::None,
            cleanup: Cleanup::None,
        },
        Target::Redb(query) => {
            let path = dir.join(format!("bench-{tag}.redb"));
            let options = forge_redb::RedbOptions::from_query(query)?;
            let (store, counters) = forge_redb::RedbStore::open_counted(&path, options)
                .with_context(|| format!("opening {}", path.display()))?;
            let store = Arc::new(store);
            Opened {
                store: store.clone(),
                bus: Arc::new(LocalBus::new()),
                probe: Probe::Redb(counters),
                cleanup: Cleanup::Redb(store),
            }
        }
        Target::Sqlite(query) => {
            let path = dir.join(format!("bench-{tag}.db"));
            let mut url = format!("sqlite://{}", path.display());
            if !query.is_empty() {
                url = with_query(&url, query);
            }
            let store = Arc::new(
                forge_sql::SqliteStore::open(&url)
                    .await
                    .with_context(|| format!("opening {}", path.display()))?,
            );
            Opened {
                store: store.clone(),
                bus: Arc::new(LocalBus::new()),
                probe: Probe::SqliteThreads,
                cleanup: Cleanup::Sqlite(store),
            }
        }
        Target::Postgres(url) if url.contains("schema=") => {
            // A schema the caller owns (several writer processes share it): used as
            // given, left in place.
            let store = Arc::new(
                forge_sql::PostgresStore::connect(url)
                    .await
                    .context("connecting to Postgres")?,
            );
            Opened {
                store: store.clone(),
                bus: Arc::new(LocalBus::new()),
                probe: Probe::None,
                cleanup: Cleanup::PostgresShared(store),
            }
        }
        Target::Postgres(url) => {
            let schema = format!("forge_bench_{tag}");
            let store = Arc::new(
                forge_sql::PostgresStore::connect(&with_query(url, &format!("schema={schema}")))
                    .await
                    .context("connecting to Postgres")?,
            );
            Opened {
                store: store.clone(),
                bus: Arc::new(LocalBus::new()),
                probe: Probe::Postgres { url: url.clone() },
                cleanup: Cleanup::Postgres {
                    store,
                    url: url.clone(),
                    schema,
                },
            }
        }
        Target::Redis(url) => {
            // A prefix the caller names (projector workers read it afterwards) is left
            // in place.
            let given = url.contains("prefix=");
            let prefixed = if given {
                url.clone()
            } else {
                with_query(url, &format!("prefix=forge-bench-{tag}"))
            };
            let store = forge_redis::RedisStore::connect(&prefixed)
                .await
                .context("connecting the Redis store")?;
            let pattern = crate::probe::redis_store_pattern(&store);
            let bus = forge_redis::RedisBus::connect(&prefixed)
                .await
                .context("connecting the Redis bus")?;
            Opened {
                store: Arc::new(store),
                bus: Arc::new(bus),
                probe: Probe::Redis {
                    url: url.clone(),
                    pattern: pattern.clone(),
                },
                cleanup: if given {
                    Cleanup::None
                } else {
                    Cleanup::Redis {
                        url: url.clone(),
                        pattern,
                    }
                },
            }
        }
    })
}

impl Cleanup {
    async fn run(self) -> Result<()> {
        match self {
            Self::None | Self::Redb(_) => {}
            Self::Sqlite(store) => store.close().await,
            Self::PostgresShared(store) => store.close().await,
            Self::Postgres { store, url, schema } => {
                store.close().await;
                let mut conn = crate::probe::pg_connect(&url).await?;
                // The schema name is ours: `forge_bench_` and two numbers.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .execute(&mut conn)
                .await
                .with_context(|| format!("dropping schema {schema}"))?;
            }
            Self::Redis { url, pattern } => redis_delete(&url, &pattern).await?,
        }
        Ok(())
    }
}

/// Send times of deltas and receive times at the subscriber, by (session, seq).
#[derive(Default)]
struct Latency {
    sent: HashMap<(usize, u64), Instant>,
    received: Arc<Mutex<HashMap<(SessionId, u64), Instant>>>,
}

struct SessionRun {
    scope: Scope,
    processor: Option<Processor>,
    last_user: Option<MessageId>,
}

/// Runs `scripts` (one per session) on `run.target` and measures it.
///
/// # Errors
/// When the backend cannot be opened or a write fails; the error names the backend.
pub async fn measure(run: &Run, scripts: &[Script]) -> Result<Measurement> {
    if run.mode == Mode::PerDelta && run.policy != Policy::EveryBoundary {
        bail!("per-delta mode commits every write on its own; use policy every-boundary");
    }
    let opened = open(&run.target, &run.dir)
        .await
        .with_context(|| format!("opening {}", run.target.name()))?;
    let outcome = drive(run, scripts, &opened).await;
    let cleanup = opened.cleanup.run().await;
    let m = outcome.with_context(|| format!("{} {}", run.target.name(), run.mode.as_str()))?;
    cleanup.with_context(|| format!("cleaning up after {}", run.target.name()))?;
    Ok(m)
}

async fn drive(run: &Run, scripts: &[Script], opened: &Opened) -> Result<Measurement> {
    let tenant = TenantId::new("bench").map_err(|e| anyhow!("{e}"))?;
    let counting = Arc::new(CountingStore::new(Arc::clone(&opened.store)));
    let bus = Arc::clone(&opened.bus);
    let group = match run.policy {
        Policy::Terminal { window_ms } => Some(Arc::new(GroupCommitProjector::new(
            counting.clone(),
            Arc::clone(&bus),
            GroupCommitOptions {
                window: std::time::Duration::from_millis(window_ms),
                flush: FlushMode::Manual,
            },
        ))),
        Policy::EveryBoundary => None,
    };
    let projector: Arc<dyn Projector> = match &group {
        Some(g) => Arc::clone(g) as Arc<dyn Projector>,
        None => Arc::new(DirectProjector::new(counting.clone(), Arc::clone(&bus))),
    };
    let clock = Arc::new(AtomicI64::new(EPOCH_MS));
    let tick = Arc::clone(&clock);
    let options = ProcessorOptions {
        clock: Arc::new(move || tick.load(Ordering::Relaxed)),
        text_hook: None,
        persist_every_delta: run.mode == Mode::PerDelta,
    };

    // Sessions are created before the clock starts: their rows are not part of W1.
    let mut sessions = Vec::with_capacity(scripts.len());
    for i in 0..scripts.len() {
        let session = Session::new(format!("bench session {i}"), EPOCH_MS);
        let scope = projector.scope(&tenant, &session.id).await?;
        projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
            .await?;
        sessions.push(SessionRun {
            scope,
            processor: None,
            last_user: None,
        });
    }
    projector.sync().await?;
    bus.flush().await?;

    let mut latency = Latency::default();
    let mut subscribers = Vec::new();
    if run.latency {
        for s in &sessions {
            let mut sub = bus
                .subscribe(&tenant, Topic::Session(s.scope.session_id.clone()), None)
                .await?;
            let received = Arc::clone(&latency.received);
            subscribers.push(tokio::spawn(async move {
                while let Some(Ok(e)) = sub.next().await {
                    if matches!(e.event, Event::PartDelta(_)) {
                        received
                            .lock()
                            .insert((e.session_id.clone(), e.seq), Instant::now());
                    }
                }
            }));
        }
    }

    let before_counts = counting.totals();
    let io_start = ProcIo::read();
    let probe = opened.probe.start().await?;
    let started = Instant::now();
    let mut deltas = 0u64;

    for (i, timed) in merge(scripts) {
        let now = EPOCH_MS + i64::try_from(timed.t_ms).unwrap_or(i64::MAX);
        clock.store(now, Ordering::Relaxed);
        if let Some(g) = &group {
            g.advance(now).await?;
        }
        let s = &mut sessions[i];
        match &timed.item {
            Item::User { parts } => {
                if let Some(mut p) = s.processor.take() {
                    p.finalize(forge_core::Outcome::Aborted).await?;
                }
                let (message, parts) = user_message(&s.scope.session_id, parts.clone(), now);
                s.last_user = Some(message.id.clone());
                let mut events = vec![SyncEvent::MessageUpdated { info: message }];
                events.extend(
                    parts
                        .into_iter()
                        .map(|part| SyncEvent::PartUpdated { part }),
                );
                projector.commit(&s.scope, events).await?;
            }
            Item::Assistant { summary } => {
                if let Some(mut p) = s.processor.take() {
                    p.finalize(forge_core::Outcome::Aborted).await?;
                }
                s.processor =
                    Some(start_assistant(&projector, s, *summary, now, options.clone()).await?);
            }
            Item::Stream(event) => {
                if s.processor.is_none() {
                    s.processor =
                        Some(start_assistant(&projector, s, false, now, options.clone()).await?);
                }
                let Some(p) = s.processor.as_mut() else {
                    unreachable!("opened above")
                };
                let is_delta = matches!(
                    event,
                    forge_core::StreamEvent::TextDelta { .. }
                        | forge_core::StreamEvent::ReasoningDelta { .. }
                );
                if is_delta {
                    deltas += 1;
                    if run.latency {
                        tokio::time::sleep(PACE).await;
                        let seq = p.scope().last_seq() + 1;
                        latency.sent.insert((i, seq), Instant::now());
                    }
                }
                if p.handle(event.clone()).await? == Flow::Done {
                    s.processor = None;
                }
            }
        }
    }
    for s in &mut sessions {
        if let Some(mut p) = s.processor.take() {
            p.finalize(forge_core::Outcome::Aborted).await?;
        }
    }
    projector.sync().await?;
    bus.flush().await?;
    let elapsed = if run.latency {
        // Paced: the wall time says nothing about throughput.
        std::time::Duration::ZERO
    } else {
        started.elapsed()
    };
    // What a run wrote includes the checkpoint that copies its WAL (SQLite) or its
    // journal (redb) into the file.
    if let Cleanup::Sqlite(store) = &opened.cleanup {
        store.checkpoint().await?;
    }
    if let Cleanup::Redb(store) = &opened.cleanup {
        store.checkpoint().await?;
    }
    // Postgres reports a connection's WAL syncs to pg_stat_wal when it goes idle or
    // closes: close the pool before reading them. (SQLite is the other way round: its
    // counters live on the pool's threads, read before closing.)
    if let Cleanup::Postgres { store, .. } | Cleanup::PostgresShared(store) = &opened.cleanup {
        store.close().await;
    }
    let (physical, fsyncs) = probe.finish().await?;
    let io = match (io_start, ProcIo::read()) {
        (Some(a), Some(b)) => Some(b.since(&a).write_bytes),
        _ => None,
    };
    let counts = counting.totals();

    let latency_us = if run.latency {
        // Give the subscribers a moment to take what is in flight.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        for t in &subscribers {
            t.abort();
        }
        let received = latency.received.lock();
        let mut samples: Vec<f64> = latency
            .sent
            .iter()
            .filter_map(|((i, seq), sent)| {
                let key = (sessions[*i].scope.session_id.clone(), *seq);
                received
                    .get(&key)
                    .map(|r| r.saturating_duration_since(*sent).as_secs_f64() * 1e6)
            })
            .collect();
        Percentiles::of(&mut samples)
    } else {
        None
    };
    let publish_delay_ms = group.as_ref().and_then(|g| {
        let stats = g.stats();
        Some(Percentiles {
            p50: stats.delay_quantile(0.5)? as f64,
            p99: stats.delay_quantile(0.99)? as f64,
            max: stats.delay_max()? as f64,
            n: stats.terminal_batches,
        })
    });

    Ok(Measurement {
        backend: run.target.name().to_owned(),
        mode: run.mode,
        policy: run.policy,
        workload: run.workload.clone(),
        sessions: u32::try_from(scripts.len()).unwrap_or(u32::MAX),
        turns: run.turns,
        logical_bytes: scripts.iter().map(logical_bytes).sum(),
        handed_bytes: counts.bytes - before_counts.bytes,
        rows: counts.rows - before_counts.rows,
        commits: counts.commits - before_counts.commits,
        fsyncs,
        physical,
        process_write_bytes: io,
        deltas,
        elapsed_s: elapsed.as_secs_f64(),
        latency_us,
        publish_delay_ms,
        options: match &run.target {
            Target::Redb(q) | Target::Sqlite(q) => q.clone(),
            _ => String::new(),
        },
    })
}

async fn start_assistant(
    projector: &Arc<dyn Projector>,
    s: &SessionRun,
    summary: bool,
    now: i64,
    options: ProcessorOptions,
) -> Result<Processor> {
    let Some(parent) = s.last_user.clone() else {
        bail!("an assistant message before any user message");
    };
    let mut message = assistant_message(s.scope.session_id.clone(), parent, "bench", "w1", now);
    if summary {
        if let Some(a) = message.as_assistant_mut() {
            a.summary = Some(true);
        }
    }
    Ok(Processor::start(Arc::clone(projector), s.scope.clone(), message, options).await?)
}

fn user_message(
    session: &SessionId,
    bodies: Vec<forge_core::model::PartBody>,
    now: i64,
) -> (Message, Vec<Part>) {
    let message = forge_core::processor::user_message(session.clone(), "build", now);
    let parts = bodies
        .into_iter()
        .map(|body| Part {
            id: PartId::generate(),
            session_id: session.clone(),
            message_id: message.id.clone(),
            body,
        })
        .collect();
    (message, parts)
}

/// Deletes the keys matching `pattern` (the run's prefix).
async fn redis_delete(url: &str, pattern: &str) -> Result<()> {
    let client = redis::Client::open(url).context("parsing the Redis URL")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")?;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .context("SCAN")?;
        if !keys.is_empty() {
            let _: u64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .context("DEL")?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
