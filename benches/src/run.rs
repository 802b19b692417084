//! Drives a workload through the Processor on one backend, in one mode and commit
//! policy, in event time, and measures what it wrote.
//!
//! Event time, not wall time: each session is a [`TurnDriver`] with event times on, so
//! before each item the Processor's clock is set to the item's time and a
//! [`GroupCommitProjector`]'s clock moves there ([`GroupCommitProjector::advance`]): a
//! group-commit window is judged on the workload's own timing and the run never sleeps. Both modes use the same Processor,
//! projector and backend code; per-delta only switches on
//! [`ProcessorOptions::persist_every_delta`] under the direct projector.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use forge_core::driver::{parts, with_query, Driver, InstanceOptions, Instances, Kind, WriteProbe};
use forge_core::turn::{Answerer, EventTime, TurnDriver, TurnOptions};
use forge_core::{
    Bus, CountingStore, DirectProjector, Event, FlushMode, GroupCommitOptions,
    GroupCommitProjector, LocalBus, Outcome, ProcessorOptions, Projector, Session, SessionId,
    Store, StreamEvent, SyncEvent, TenantId, Topic,
};
use parking_lot::Mutex;

use crate::device::Placement;
use crate::probe::ProcIo;
use crate::workload::{logical_bytes, merge, Item, Script};
use crate::{Measurement, Mode, Percentiles, Physical, Policy};

/// Wall time between deltas in a latency run.
pub const PACE: std::time::Duration = std::time::Duration::from_millis(2);

/// Event time of the workload's t = 0, Unix ms.
const EPOCH_MS: i64 = 1_700_000_000_000;

/// A backend to measure: a URL, opened through the driver registry. The run makes a
/// throwaway instance of it ([`forge_core::driver::Instances`]): a fresh file under the
/// run directory with the URL's options, a fresh schema or key prefix on a server.
/// A server URL that names its namespace (`schema=`, `prefix=`) is used in place, shared
/// and left as it is (several writer processes meet there).
#[derive(Clone)]
pub struct Target {
    url: String,
    driver: &'static dyn Driver,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Target")
            .field(&self.driver.describe(&self.url))
            .finish()
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Target {
    /// The backend `url` names.
    ///
    /// # Errors
    /// When no driver of this build opens it.
    pub fn new(url: &str) -> Result<Self> {
        let driver = forge_store::backend::driver(url).map_err(|e| anyhow!("{e}"))?;
        Ok(Self {
            url: url.to_owned(),
            driver,
        })
    }

    /// The URL it opens.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The backend's name: `memory`, `redb`, `sqlite`, `postgres`, `redis`.
    pub fn name(&self) -> &'static str {
        self.driver.info().name
    }

    /// Whether the backend keeps files (`File`), talks to a server (`Server`) or keeps
    /// nothing (`Memory`).
    pub fn kind(&self) -> Kind {
        self.driver.info().kind
    }

    /// The URL's options of a file backend (`key=value&…`), for the report.
    pub fn options(&self) -> String {
        match (self.driver.info().kind, parts(&self.url)) {
            (Kind::File, Ok((_, _, query))) => query.to_owned(),
            _ => String::new(),
        }
    }

    /// The same backend on the server at `server` (a URL without options): the options
    /// of this target's URL are kept, but for the namespace (`schema=`, `prefix=`), which
    /// a throwaway server does not have.
    ///
    /// # Errors
    /// When no driver opens the URL made.
    pub fn on_server(&self, server: &str) -> Result<Self> {
        let query = parts(&self.url).map_or("", |(_, _, q)| q);
        let url = query
            .split('&')
            .filter(|kv| !kv.is_empty() && !names_namespace(kv))
            .fold(server.to_owned(), |url, kv| with_query(&url, kv));
        Self::new(&url)
    }

    fn in_place(&self) -> bool {
        self.driver.info().kind == Kind::Server
            && parts(&self.url).is_ok_and(|(_, _, q)| q.split('&').any(names_namespace))
    }
}

/// Whether a URL option (`key=value`) names a server's namespace: `schema=`, `prefix=`.
fn names_namespace(kv: &str) -> bool {
    kv.starts_with("schema=") || kv.starts_with("prefix=")
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
    /// The device the run's files (or its server's data) are on, to measure what it
    /// wrote; `dir` is on it.
    pub device: Option<Arc<Placement>>,
}

impl Run {
    /// What a progress line shows: `W1 redb boundary terminal/10ms T=10`.
    pub fn label(&self) -> String {
        let on = self
            .device
            .as_ref()
            .map_or_else(String::new, |d| format!(" on {}", d.device().filesystem()));
        format!(
            "{} {} {} {} T={}{on}",
            self.workload,
            self.target.name(),
            self.mode.as_str(),
            self.policy.label(),
            self.turns
        )
    }
}

/// A throwaway instance of a backend, opened for one run.
struct Opened {
    instances: Arc<dyn Instances>,
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    probe: Option<Box<dyn WriteProbe>>,
}

async fn open(target: &Target, dir: &Path) -> Result<Opened> {
    let options = InstanceOptions::default()
        .in_dir(dir)
        .purpose("bench")
        .in_place(target.in_place());
    let instances = target.driver.instances(&target.url, &options).await?;
    let backend = instances.fresh().await?;
    let probe = instances.probe(&backend.store);
    Ok(Opened {
        store: backend.store,
        bus: backend.bus.unwrap_or_else(|| Arc::new(LocalBus::new())),
        probe,
        instances,
    })
}

/// A fresh instance of a backend for a caller's own use (files in a directory, a fresh
/// schema or key prefix on a server), deleted by [`Instance::close`].
pub struct Instance(Opened);

impl Instance {
    /// Opens a fresh instance of `target`, its files in `dir`.
    ///
    /// # Errors
    /// When the backend cannot be opened.
    pub async fn open(target: &Target, dir: &Path) -> Result<Self> {
        open(target, dir).await.map(Self)
    }

    /// Its store.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.0.store)
    }

    /// Its bus (a live-only in-process one for a store-only backend).
    pub fn bus(&self) -> Arc<dyn Bus> {
        Arc::clone(&self.0.bus)
    }

    /// Deletes the instance.
    ///
    /// # Errors
    /// When the teardown fails.
    pub async fn close(self) -> Result<()> {
        self.0.close().await
    }
}

impl Opened {
    /// Deletes the instance and what the set shared.
    async fn close(self) -> Result<()> {
        let Self {
            instances,
            store,
            bus,
            probe,
        } = self;
        drop((bus, probe));
        instances.teardown(store).await?;
        instances.close().await?;
        Ok(())
    }
}

/// Send times of deltas and receive times at the subscriber, by (session, seq).
#[derive(Default)]
struct Latency {
    sent: HashMap<(usize, u64), Instant>,
    received: Arc<Mutex<HashMap<(SessionId, u64), Instant>>>,
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
    let cleanup = opened.close().await;
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
    let options = TurnOptions {
        processor: ProcessorOptions {
            persist_every_delta: run.mode == Mode::PerDelta,
            ..ProcessorOptions::default()
        },
        event_time: Some(EventTime {
            epoch_ms: EPOCH_MS,
            group: group.clone(),
        }),
        answerer: Answerer::fixed("bench", "w1"),
    };

    // Sessions are created before the clock starts: their rows are not part of W1.
    let mut sessions = Vec::with_capacity(scripts.len());
    for i in 0..scripts.len() {
        let session = Session::new(format!("bench session {i}"), EPOCH_MS);
        let scope = projector.scope(&tenant, &session.id).await?;
        projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
            .await?;
        sessions.push(TurnDriver::new(
            Arc::clone(&projector),
            scope,
            options.clone(),
        ));
    }
    projector.sync().await?;
    bus.flush().await?;

    let mut latency = Latency::default();
    let mut subscribers = Vec::new();
    if run.latency {
        for s in &sessions {
            let mut sub = bus
                .subscribe(&tenant, Topic::Session(s.scope().session_id.clone()), None)
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
    let probe = match &opened.probe {
        Some(p) => Some(p.start().await?),
        None => None,
    };
    // After the probe's start (a Postgres probe checkpoints first: what the runs before
    // left in memory is not this run's).
    let device_start = match &run.device {
        Some(d) => Some(d.settle(run.target.name()).await?),
        None => None,
    };
    let started = Instant::now();
    let mut deltas = 0u64;

    for (i, timed) in merge(scripts) {
        let s = &mut sessions[i];
        s.at(timed.t_ms).await?;
        if let Item::Stream(StreamEvent::TextDelta { .. } | StreamEvent::ReasoningDelta { .. }) =
            &timed.item
        {
            deltas += 1;
            if run.latency {
                tokio::time::sleep(PACE).await;
                let seq = s.scope().last_seq() + 1;
                latency.sent.insert((i, seq), Instant::now());
            }
        }
        s.item(timed.item.clone()).await?;
    }
    for s in &mut sessions {
        s.finalize(Outcome::Aborted).await?;
    }
    projector.sync().await?;
    bus.flush().await?;
    let elapsed = if run.latency {
        // Paced: the wall time says nothing about throughput.
        std::time::Duration::ZERO
    } else {
        started.elapsed()
    };
    // The probe settles what is pending first (the checkpoint that copies a WAL or
    // journal into the file; a pool whose connections report their syncs on close).
    let written = match probe {
        Some(run) => Some(run.finish().await?),
        None => None,
    };
    let device_bytes = match (&run.device, device_start) {
        (Some(d), Some(start)) => Some(d.settle(run.target.name()).await?.saturating_sub(start)),
        _ => None,
    };
    let (physical, fsyncs) = match written {
        Some(w) => (
            w.bytes.map(|bytes| Physical {
                bytes,
                source: w.source,
            }),
            w.syncs,
        ),
        None => (None, None),
    };
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
                let key = (sessions[*i].scope().session_id.clone(), *seq);
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
        options: run.target.options(),
        filesystem: run
            .device
            .as_ref()
            .map(|d| d.device().filesystem().name().to_owned()),
        device_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target moved onto a throwaway server keeps its URL's options but its
    /// namespace, which that server does not have.
    #[test]
    fn on_server_keeps_the_options_but_the_namespace() {
        let server = "postgres://postgres@127.0.0.1:5999/postgres";
        let t = Target::new("postgres://u@db.example/app?schema=team_a&max_connections=3").unwrap();
        assert!(t.in_place());
        let moved = t.on_server(server).unwrap();
        assert_eq!(moved.url, format!("{server}?max_connections=3"));
        assert!(!moved.in_place());
        let plain = Target::new("redis://cache.example?prefix=p").unwrap();
        assert_eq!(
            plain.on_server("redis://127.0.0.1:7").unwrap().url,
            "redis://127.0.0.1:7"
        );
    }
}
