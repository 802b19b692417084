//! The scaling benchmark: W1 sessions streaming at once through 1, 2 and 4 writer
//! processes into one Postgres schema, and through 1, 2 and 4 projector worker
//! processes draining a Redis bus (`shards=4`) into one Postgres schema.
//!
//! Writer processes: each drives its share of the sessions (W1×N, event time, as fast
//! as it can) through the group-commit projector (terminal boundaries, 10 ms window)
//! into the same schema. Reported: boundary commits/s and deltas/s over the slowest
//! writer's wall time, the publish delay p99 (event time, the worst writer's), and
//! the WAL bytes per commit and per row of the whole run (`pg_current_wal_insert_lsn`
//! before and after, so every writer's WAL counts once).
//!
//! Projector workers: one writer publishes W1×N to a Redis prefix with `shards=4`
//! (store and Streams bus), then W worker processes of a fresh consumer group project
//! the stream into a fresh Postgres schema until the group has nothing left to read
//! or acknowledge. Reported: sync events applied/s over the drain's wall time and WAL
//! bytes per applied event. There is no publish delay here (the stream is full before
//! the workers start): the figure is how fast a backlog drains.
//!
//! The child processes are the benchmark binary itself, run with `--child-writer` or
//! `--child-worker` (see `benches/scale.rs`).

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use forge_core::driver::{with_query, Driver, InstanceOptions, Instances};
use forge_core::{Store, TenantId};
use forge_redis::{ProjectorWorker, RedisOptions, WorkerOptions, WorkerStats};
use forge_sql::POSTGRES;
use serde::{Deserialize, Serialize};

use crate::run::{measure, Run, Target};
use crate::workload::w1xn;
use crate::{Measurement, Mode, Policy, DEFAULT_WINDOW_MS};

/// Work shards of the Redis prefix the workers drain.
pub const SHARDS: usize = 4;

/// One row of the scaling table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScaleRow {
    /// `writers → postgres` or `workers redis → postgres`.
    pub path: String,
    /// Sessions streaming at once.
    pub sessions: u32,
    /// Writer or worker processes.
    pub processes: usize,
    /// Store commits (writers) or store apply batches are not visible for workers:
    /// `None` there.
    pub commits: Option<u64>,
    /// Rows written (sync events applied).
    pub rows: u64,
    /// Deltas streamed (writers; the workers never see deltas).
    pub deltas: u64,
    /// Wall time, seconds (the slowest writer; the whole drain for workers).
    pub wall_s: f64,
    /// Event-time publish delay p99 of terminal boundaries, ms (writers).
    pub publish_delay_p99_ms: Option<f64>,
    /// WAL bytes written by the whole run.
    pub wal_bytes: u64,
}

impl ScaleRow {
    /// Boundary commits per second.
    pub fn commits_per_s(&self) -> Option<f64> {
        self.commits.map(|c| c as f64 / self.wall_s.max(1e-9))
    }

    /// Rows (sync events) per second.
    pub fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.wall_s.max(1e-9)
    }

    /// Deltas per second.
    pub fn deltas_per_s(&self) -> f64 {
        self.deltas as f64 / self.wall_s.max(1e-9)
    }

    /// WAL bytes per commit (writers).
    pub fn wal_per_commit(&self) -> Option<f64> {
        self.commits
            .filter(|c| *c > 0)
            .map(|c| self.wal_bytes as f64 / c as f64)
    }

    /// WAL bytes per row.
    pub fn wal_per_row(&self) -> f64 {
        self.wal_bytes as f64 / (self.rows.max(1)) as f64
    }
}

/// The markdown table of `rows`.
pub fn table(rows: &[ScaleRow]) -> String {
    let mut out = String::from(
        "| path | sessions | processes | commits/s | rows/s | deltas/s | publish delay p99 (ms) | WAL B/commit | WAL B/row | wall (s) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
    };
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {:.0} | {:.1} |",
            r.path,
            r.sessions,
            r.processes,
            opt(r.commits_per_s(), 0),
            r.rows_per_s(),
            if r.deltas == 0 {
                "–".to_owned()
            } else {
                format!("{:.0}", r.deltas_per_s())
            },
            opt(r.publish_delay_p99_ms, 0),
            opt(r.wal_per_commit(), 0),
            r.wal_per_row(),
            r.wall_s,
        );
    }
    out
}

async fn wal_lsn(pg: &str) -> Result<u64> {
    let mut conn = crate::probe::pg_connect(pg).await?;
    Ok(crate::probe::pg_wal_insert_lsn(&mut conn).await?)
}

/// A throwaway instance of a server backend, made by its driver (a fresh schema, a
/// fresh key prefix), and the URL that opens it from the child processes.
pub struct Instance {
    /// The URL that opens the instance.
    pub url: String,
    set: Arc<dyn Instances>,
    store: Arc<dyn Store>,
}

impl Instance {
    /// A fresh instance of `driver` on the server of `server`, for `purpose`.
    async fn fresh(driver: &dyn Driver, server: &str, purpose: &str) -> Result<Self> {
        let name = driver.info().name;
        let set = driver
            .instances(server, &InstanceOptions::default().purpose(purpose))
            .await
            .with_context(|| format!("making a {name} instance for the benchmark"))?;
        let store = set.fresh().await?.store;
        let url = set
            .url(&store)
            .ok_or_else(|| anyhow!("{name} instances cannot be opened by URL"))?;
        Ok(Self { url, set, store })
    }

    /// Removes what the instance holds (its schema, its keys).
    ///
    /// # Errors
    /// When the server fails.
    pub async fn close(self) -> Result<()> {
        self.set.teardown(self.store).await?;
        self.set.close().await?;
        Ok(())
    }
}

/// Runs `exe args…` children at once and returns each one's last stdout line.
fn run_children(exe: &std::path::Path, args: Vec<Vec<String>>) -> Result<Vec<String>> {
    let children = args
        .into_iter()
        .map(|a| {
            Command::new(exe)
                .args(&a)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting {} {}", exe.display(), a.join(" ")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for child in children {
        let o = child.wait_with_output().context("waiting for a child")?;
        if !o.status.success() {
            bail!("a benchmark child failed ({})", o.status);
        }
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let last = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .ok_or_else(|| anyhow!("a benchmark child printed no result: {text}"))?;
        out.push(last.to_owned());
    }
    Ok(out)
}

/// Runs the child processes of `args` on `schema` (an instance on `pg`), then reads the
/// WAL position and drops the schema (also when a child failed): each child's result
/// line parsed (`what`: what it is, for the error), the WAL position after, and the
/// children's wall time.
async fn run_on_schema<T: serde::de::DeserializeOwned>(
    exe: &std::path::Path,
    args: Vec<Vec<String>>,
    pg: &str,
    schema: Instance,
    what: &'static str,
) -> Result<(Vec<T>, u64, Duration)> {
    let started = Instant::now();
    let outcome = tokio::task::block_in_place(|| run_children(exe, args));
    let wall = started.elapsed();
    let after = wal_lsn(pg).await?;
    schema.close().await?;
    let results = outcome?
        .iter()
        .map(|l| serde_json::from_str(l).context(what))
        .collect::<Result<_>>()?;
    Ok((results, after, wall))
}

/// `processes` writer processes streaming `sessions` W1 sessions (of `turns` turns)
/// into one fresh schema on `pg`.
///
/// # Errors
/// When Postgres fails or a writer fails.
pub async fn writers(
    exe: &std::path::Path,
    pg: &str,
    sessions: u32,
    turns: u32,
    processes: usize,
) -> Result<ScaleRow> {
    let schema = Instance::fresh(&POSTGRES, pg, &format!("scale_w{sessions}_{processes}")).await?;
    let url = schema.url.clone();
    let before = wal_lsn(pg).await?;
    let share = sessions.div_ceil(u32::try_from(processes).unwrap_or(1));
    let args = (0..processes)
        .map(|i| {
            vec![
                "--child-writer".to_owned(),
                url.clone(),
                share.to_string(),
                turns.to_string(),
                (1000 + i).to_string(),
            ]
        })
        .collect();
    let (results, after, _): (Vec<Measurement>, _, _) =
        run_on_schema(exe, args, pg, schema, "a writer's result").await?;
    Ok(ScaleRow {
        path: "writers → postgres".to_owned(),
        sessions: share * u32::try_from(processes).unwrap_or(1),
        processes,
        commits: Some(results.iter().map(|m| m.commits).sum()),
        rows: results.iter().map(|m| m.rows).sum(),
        deltas: results.iter().map(|m| m.deltas).sum(),
        wall_s: results.iter().map(|m| m.elapsed_s).fold(0.0, f64::max),
        publish_delay_p99_ms: results
            .iter()
            .filter_map(|m| m.publish_delay_ms.map(|p| p.p99))
            .reduce(f64::max),
        wal_bytes: after.saturating_sub(before),
    })
}

/// A boundary run of `sessions` W1 sessions of `turns` turns into `url`, committed by
/// the terminal policy, without latency pacing, its files in the temporary directory.
fn w1x_run(url: &str, sessions: u32, turns: u32) -> Result<Run> {
    Ok(Run {
        target: Target::new(url)?,
        mode: Mode::Boundary,
        policy: Policy::Terminal {
            window_ms: DEFAULT_WINDOW_MS,
        },
        workload: format!("W1x{sessions}"),
        turns,
        latency: false,
        dir: std::env::temp_dir(),
        device: None,
    })
}

/// The child side of [`writers`]: streams `sessions` W1 sessions into `url` and
/// prints the measurement as one JSON line.
///
/// # Errors
/// When the run fails.
pub async fn child_writer(url: &str, sessions: u32, turns: u32, seed: u64) -> Result<String> {
    let scripts = w1xn(sessions, turns, seed);
    let m = measure(&w1x_run(url, sessions, turns)?, &scripts).await?;
    Ok(serde_json::to_string(&m)?)
}

/// Publishes `sessions` W1 sessions to a fresh Redis prefix (the Redis driver's
/// throwaway instance) with [`SHARDS`] work shards; returns the instance (its URL
/// carries the shards) and the measurement. [`Instance::close`] deletes what it wrote.
///
/// # Errors
/// When Redis fails.
pub async fn publish(redis: &str, sessions: u32, turns: u32) -> Result<(Instance, Published)> {
    let sharded = with_query(redis, &format!("shards={SHARDS}"));
    let prefix =
        Instance::fresh(&forge_redis::DRIVER, &sharded, &format!("scale{sessions}")).await?;
    let run = w1x_run(&prefix.url, sessions, turns)?;
    let before = used_memory(redis).await?;
    let m = measure(&run, &w1xn(sessions, turns, 7)).await?;
    let after = used_memory(redis).await?;
    Ok((
        prefix,
        Published {
            measurement: m,
            memory_bytes: after.saturating_sub(before),
        },
    ))
}

/// The consumer group of the worker runs with `processes` workers.
fn group_name(processes: usize) -> String {
    format!("scale-{processes}")
}

/// Creates, on every work stream of `prefix` (what [`publish`] wrote), the consumer
/// group of each worker run to come, reading from the start. A worker trims its work
/// stream below what every group has acknowledged: without the groups of the later
/// runs, the first run's workers would trim the backlog those runs are to drain.
///
/// # Errors
/// When Redis fails.
pub async fn add_groups(prefix: &Instance, processes: &[usize]) -> Result<()> {
    let opts = RedisOptions::from_url(&prefix.url)?;
    let keys = forge_redis::Keys::new(&opts.prefix)?;
    let tenant = TenantId::new("bench").map_err(|e| anyhow!("{e}"))?;
    let mut conn = redis::Client::open(opts.server.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    for k in 0..opts.shards {
        let stream = keys.work_stream(&tenant, k, opts.shards);
        for &p in processes {
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(group_name(p))
                .arg("0")
                .arg("MKSTREAM")
                .arg("ENTRIESREAD")
                .arg(0)
                .query_async::<()>(&mut conn)
                .await
                .with_context(|| format!("creating group {} on {stream}", group_name(p)))?;
        }
    }
    Ok(())
}

/// What [`publish`] wrote.
#[derive(Clone, Debug)]
pub struct Published {
    /// The writer's measurement.
    pub measurement: Measurement,
    /// Growth of the server's `used_memory` over the run (store rows, session and
    /// tenant streams with deltas, work streams).
    pub memory_bytes: u64,
}

/// The server's `used_memory`.
async fn used_memory(redis: &str) -> Result<u64> {
    let mut conn = redis::Client::open(RedisOptions::from_url(redis)?.server.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("INFO memory has no used_memory"))
}

/// `processes` projector workers of a fresh group draining the prefix at `redis_url`
/// into a fresh schema on `pg`.
///
/// # Errors
/// When a service or a worker fails.
pub async fn workers(
    exe: &std::path::Path,
    redis_url: &str,
    pg: &str,
    sessions: u32,
    processes: usize,
) -> Result<ScaleRow> {
    let schema = Instance::fresh(&POSTGRES, pg, &format!("scale_p{sessions}_{processes}")).await?;
    let url = schema.url.clone();
    let group = group_name(processes);
    let before = wal_lsn(pg).await?;
    let args = (0..processes)
        .map(|i| {
            vec![
                "--child-worker".to_owned(),
                redis_url.to_owned(),
                url.clone(),
                group.clone(),
                format!("w{i}"),
            ]
        })
        .collect();
    let (stats, after, wall): (Vec<WorkerStatsLine>, _, _) =
        run_on_schema(exe, args, pg, schema, "a worker's result").await?;
    Ok(ScaleRow {
        path: format!("workers redis (shards={SHARDS}) → postgres"),
        sessions,
        processes,
        commits: None,
        rows: stats.iter().map(|s| s.applied).sum(),
        deltas: 0,
        wall_s: wall.as_secs_f64(),
        publish_delay_p99_ms: None,
        wal_bytes: after.saturating_sub(before),
    })
}

/// What a worker child prints.
#[derive(Serialize, Deserialize)]
struct WorkerStatsLine {
    applied: u64,
    skipped: u64,
    acked: u64,
    claimed: u64,
}

/// Whether group `group` has read and acknowledged everything of every work stream.
async fn drained(
    conn: &mut redis::aio::MultiplexedConnection,
    streams: &[String],
    group: &str,
) -> Result<bool> {
    for key in streams {
        let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(key)
            .query_async(conn)
            .await?;
        let Some(g) = groups.iter().find(|g| {
            g.get("name")
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                .as_deref()
                == Some(group)
        }) else {
            return Ok(false);
        };
        let num = |name: &str| -> Option<u64> {
            g.get(name)
                .and_then(|v| redis::from_redis_value_ref::<u64>(v).ok())
        };
        if num("pending") != Some(0) || num("lag") != Some(0) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The child side of [`workers`]: one worker of `group` projecting tenant `bench` until
/// the group has drained every work stream; prints its stats as one JSON line.
///
/// # Errors
/// When a service fails.
pub async fn child_worker(
    redis_url: &str,
    pg_url: &str,
    group: &str,
    name: &str,
) -> Result<String> {
    let store = forge_store::open_store(pg_url).await?;
    let tenant = TenantId::new("bench").map_err(|e| anyhow!("{e}"))?;
    let opts = RedisOptions::from_url(redis_url)?;
    let keys = forge_redis::Keys::new(&opts.prefix)?;
    let streams: Vec<String> = (0..opts.shards)
        .map(|k| keys.work_stream(&tenant, k, opts.shards))
        .collect();
    let mut check = redis::Client::open(opts.server.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut worker = ProjectorWorker::with_options(
        opts,
        Arc::clone(&store),
        tenant,
        group,
        name,
        WorkerOptions {
            lease: Duration::from_secs(1),
            count: 256,
        },
    )
    .await?;
    let deadline = Instant::now() + Duration::from_mins(10);
    loop {
        let n = worker.step().await?;
        if n == 0 && drained(&mut check, &streams, group).await? {
            break;
        }
        if Instant::now() > deadline {
            bail!("worker {name}: the group has not drained after 10 minutes");
        }
    }
    let s: WorkerStats = worker.stats();
    store.close().await?;
    Ok(serde_json::to_string(&WorkerStatsLine {
        applied: s.applied,
        skipped: s.skipped,
        acked: s.acked,
        claimed: s.claimed,
    })?)
}
