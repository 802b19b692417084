//! The steady state: many simulated days of a workload under a retention policy, with
//! the bytes the backend occupies read after each day.
//!
//! Each day writes `sessions_per_day` new sessions of `turns_per_session` W1 turns, all
//! at once (replays through the engine with group commit, as producers' streams would
//! arrive), then prunes what the
//! policy no longer keeps (sessions idle since before the first of the last
//! `retention_days` days), then gives space back ([`forge_store::Store::reclaim`]), then
//! reads the backend's footprint. Days are compressed into wall time: a day is the span
//! between two day starts, and the retention cut is the start of the oldest day kept, so
//! prune removes exactly the sessions of older days.
//!
//! A backend reaches a steady state when what it occupies stops growing once the
//! retention window is full: [`SteadyRun::spread`] is the relative difference between
//! the largest and the smallest size from day [`FLAT_FROM_DAY`] on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use forge_store::prune::{PruneOptions, Retention};
use forge_store::{Engine, Forge, GroupCommitOptions, ReplayOptions, TenantId};
use serde::{Deserialize, Serialize};

use crate::workload::{w1, write_jsonl};

/// The first day the spread is measured from.
pub const FLAT_FROM_DAY: u32 = 10;

/// The largest spread called flat.
pub const FLAT_SPREAD: f64 = 0.10;

/// The workload and policy of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteadyOptions {
    /// Simulated days.
    pub days: u32,
    /// New sessions a day.
    pub sessions_per_day: u32,
    /// W1 turns per session.
    pub turns_per_session: u32,
    /// Days of sessions kept.
    pub retention_days: u32,
    /// The workload's seed.
    pub seed: u64,
}

impl Default for SteadyOptions {
    /// 60 days of 20 sessions of 5 turns, 7 days kept.
    fn default() -> Self {
        Self {
            days: 60,
            sessions_per_day: 20,
            turns_per_session: 5,
            retention_days: 7,
            seed: 1,
        }
    }
}

/// One simulated day.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Day {
    /// 1-based.
    pub day: u32,
    /// Sessions stored after the day's prune.
    pub sessions: u64,
    /// Their logical bytes (JSON).
    pub logical_bytes: u64,
    /// What the backend occupies after the day's reclaim ([`disk_bytes`]).
    pub disk_bytes: u64,
    /// Sessions the day's prune deleted.
    pub deleted: u64,
    /// The prune's longest transaction, ms.
    pub prune_longest_ms: f64,
    /// How long the day's reclaim took, ms (writers wait for it on redb).
    pub reclaim_ms: f64,
    /// Bytes the reclaim gave back, as the backend counts them.
    pub reclaimed_bytes: u64,
}

/// A backend's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteadyRun {
    /// `redb`, `sqlite`, `postgres`, `redis`.
    pub backend: String,
    /// What its size is: `files`, `relations`, `memory`.
    pub measured: String,
    /// The workload and policy.
    pub options: SteadyOptions,
    /// Each day.
    pub days: Vec<Day>,
    /// `max / min - 1` of `disk_bytes` from day [`FLAT_FROM_DAY`] on.
    pub spread: f64,
    /// `spread <= FLAT_SPREAD`.
    pub flat: bool,
}

/// What `forge` occupies: its files, else its relations, else its server's memory;
/// and which of them it is.
///
/// # Errors
/// The store's error.
pub async fn disk_bytes(forge: &Forge) -> Result<(u64, &'static str)> {
    let f = forge.store().footprint().await?;
    for kind in ["file", "relation", "memory"] {
        let total = f.total(kind);
        if total > 0 {
            return Ok((total, kind));
        }
    }
    Ok((0, "nothing"))
}

/// `url` with `key=value` added to its query.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

/// `max / min - 1` of the sizes from day [`FLAT_FROM_DAY`] on (0 with fewer days).
pub fn spread(days: &[Day]) -> f64 {
    let sizes: Vec<u64> = days
        .iter()
        .filter(|d| d.day >= FLAT_FROM_DAY)
        .map(|d| d.disk_bytes)
        .collect();
    match (sizes.iter().min(), sizes.iter().max()) {
        (Some(&min), Some(&max)) if min > 0 => max as f64 / min as f64 - 1.0,
        _ => 0.0,
    }
}

/// Runs the steady state on a fresh instance of the backend `store` and `bus` make,
/// calling `each` after every day.
///
/// # Errors
/// A write, prune, reclaim or read that failed, naming the day.
pub async fn run(
    store: Arc<dyn forge_store::Store>,
    bus: Arc<dyn forge_store::Bus>,
    opts: &SteadyOptions,
    mut each: impl FnMut(&Day),
) -> Result<SteadyRun> {
    let backend = store.capabilities().name.to_owned();
    let forge = Forge::new(Engine::with_group_commit(
        store,
        bus,
        GroupCommitOptions::default(),
    ));
    let tenant = TenantId::default();
    let mut starts: Vec<i64> = Vec::new();
    let mut days = Vec::new();
    let mut measured = "nothing";
    for day in 1..=opts.days {
        starts.push(forge_store::id::now_ms());
        // The day's sessions run at once, as a day's users do; their boundaries share
        // group commits.
        let mut texts = Vec::new();
        for s in 0..opts.sessions_per_day {
            let seed = opts.seed ^ (u64::from(day) << 24) ^ u64::from(s);
            let script = w1(opts.turns_per_session, seed);
            let mut text = Vec::new();
            write_jsonl(&script, &mut text)?;
            texts.push(String::from_utf8(text).context("the workload is UTF-8")?);
        }
        let replays = texts.iter().enumerate().map(|(s, text)| {
            let (forge, tenant) = (&forge, &tenant);
            async move {
                forge
                    .replay_str(tenant, text, ReplayOptions::default())
                    .await
                    .map_err(|e| anyhow::anyhow!("day {day}, session {s}: {e}"))
            }
        });
        for r in futures::future::join_all(replays).await {
            r?;
        }
        forge.flush().await?;
        // Activity comes from the wall clock: a day's sessions are active after its
        // start, so every session older than the oldest day kept is idle since its start.
        let mut deleted = 0;
        let mut prune_longest_ms = 0.0;
        let kept_from = day.saturating_sub(opts.retention_days) as usize;
        if day > opts.retention_days {
            let now = forge_store::id::now_ms();
            let idle = Duration::from_millis(u64::try_from(now - starts[kept_from]).unwrap_or(0));
            let report = forge
                .prune(
                    &tenant,
                    &Retention {
                        idle: Some(idle),
                        ..Retention::default()
                    },
                    &PruneOptions {
                        now_ms: now,
                        pause: Duration::ZERO,
                        ..PruneOptions::default()
                    },
                )
                .await
                .with_context(|| format!("day {day}: prune"))?;
            deleted = report.sessions_deleted;
            prune_longest_ms = report.longest_transaction_us as f64 / 1000.0;
        }
        let t = Instant::now();
        let reclaimed = forge
            .store()
            .reclaim()
            .await
            .with_context(|| format!("day {day}: reclaim"))?;
        let reclaim_ms = t.elapsed().as_secs_f64() * 1000.0;
        let stats = forge.stats(&tenant).await?;
        let (disk, kind) = disk_bytes(&forge).await?;
        measured = kind;
        let row = Day {
            day,
            sessions: stats.stored.sessions,
            logical_bytes: stats.stored.logical_bytes,
            disk_bytes: disk,
            deleted,
            prune_longest_ms,
            reclaim_ms,
            reclaimed_bytes: reclaimed.bytes,
        };
        each(&row);
        days.push(row);
    }
    forge.close().await?;
    let spread = spread(&days);
    Ok(SteadyRun {
        backend,
        measured: match measured {
            "file" => "files",
            "relation" => "relations",
            other => other,
        }
        .to_owned(),
        options: opts.clone(),
        spread,
        flat: spread <= FLAT_SPREAD,
        days,
    })
}

/// The runs as a table: one row per day, one column per backend (MiB).
pub fn table(runs: &[SteadyRun]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("| day |");
    for r in runs {
        let _ = write!(out, " {} ({}) MiB |", r.backend, r.measured);
    }
    out.push_str("\n|---|");
    for _ in runs {
        out.push_str("---|");
    }
    out.push('\n');
    let days = runs.iter().map(|r| r.days.len()).max().unwrap_or(0);
    for i in 0..days {
        let _ = write!(out, "| {} |", i + 1);
        for r in runs {
            match r.days.get(i) {
                Some(d) => {
                    let _ = write!(out, " {:.2} |", d.disk_bytes as f64 / f64::from(1 << 20));
                }
                None => out.push_str(" |"),
            }
        }
        out.push('\n');
    }
    let _ = write!(out, "| spread from day {FLAT_FROM_DAY} |");
    for r in runs {
        let _ = write!(
            out,
            " {:.1} % ({}) |",
            r.spread * 100.0,
            if r.flat { "flat" } else { "not flat" }
        );
    }
    out.push('\n');
    out
}

/// The runs as an SVG line chart: MiB occupied by day, one line per backend.
///
/// # Errors
/// When the chart cannot be drawn.
pub fn svg(runs: &[SteadyRun]) -> Result<String> {
    use plotters::prelude::*;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (900, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let days = runs.iter().map(|r| r.days.len()).max().unwrap_or(1) as u32;
        let top = runs
            .iter()
            .flat_map(|r| r.days.iter().map(|d| d.disk_bytes))
            .max()
            .unwrap_or(1) as f64
            / f64::from(1 << 20)
            * 1.1;
        let title = runs.first().map_or_else(String::new, |r| {
            format!(
                "Bytes occupied by day: {} sessions/day x {} W1 turns, {} days kept",
                r.options.sessions_per_day, r.options.turns_per_session, r.options.retention_days
            )
        });
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(1u32..days.max(2), 0f64..top.max(0.01))?;
        chart.configure_mesh().x_desc("day").y_desc("MiB").draw()?;
        for (i, r) in runs.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    r.days
                        .iter()
                        .map(|d| (d.day, d.disk_bytes as f64 / f64::from(1 << 20))),
                    color.stroke_width(2),
                ))?
                .label(format!("{} ({})", r.backend, r.measured))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(text)
}
