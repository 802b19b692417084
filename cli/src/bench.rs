//! `bench`: write amplification and speed of every available backend, boundary
//! projection against per-delta persistence (crate forge-bench).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use forge_bench::device::{Device, Filesystem};
use forge_bench::run::Target;
use forge_bench::suite::{Plan, ProgressEvent};
use forge_bench::workload::{Item, Script};

use forge_store::replay::parse_line;

use crate::gen::Workload;
use crate::progress::Progress;

/// Options of `forge-store bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// A short run: W1 and W2 at T = 10 and ×64 only.
    #[arg(long)]
    quick: bool,
    /// Measure a recorded stream (replay format, `t` fields as event times) instead of
    /// the generated workloads.
    #[arg(long, value_name = "FILE.jsonl")]
    input: Option<PathBuf>,
    /// Backends to measure, comma-separated: memory, redb, sqlite (with
    /// --redb-options / --sqlite-options), or any backend URL this build opens (each
    /// run gets a throwaway instance of it: a temporary file, a fresh schema or key
    /// prefix).
    #[arg(long, value_delimiter = ',', default_value = "memory,redb,sqlite")]
    backends: Vec<String>,
    /// Also measure this Postgres server (a fresh schema, dropped afterwards).
    #[arg(long, env = "FORGE_BENCH_POSTGRES_URL", value_name = "URL")]
    postgres: Option<String>,
    /// Also measure this Redis server (a fresh key prefix, deleted afterwards).
    #[arg(long, env = "FORGE_BENCH_REDIS_URL", value_name = "URL")]
    redis: Option<String>,
    /// redb URL options for the benchmark's files, e.g. `journal=off` or
    /// `checkpoint_bytes=4194304`.
    #[arg(long, default_value = "", value_name = "KEY=VALUE&…")]
    redb_options: String,
    /// SQLite URL options for the benchmark's files, e.g. `synchronous=full`.
    #[arg(long, default_value = "", value_name = "KEY=VALUE&…")]
    sqlite_options: String,
    /// Turn counts of the single-session runs (default 10,100,1000; quick: 10).
    #[arg(long, value_delimiter = ',')]
    turns: Option<Vec<u32>>,
    /// Session counts of the W1×N and W2×N runs (default 64,1000; quick: 64).
    #[arg(long, value_delimiter = ',')]
    sessions: Option<Vec<u32>>,
    /// Group-commit windows measured on W1×N, ms.
    #[arg(long, value_delimiter = ',', default_value = "0,10,100")]
    windows: Vec<u64>,
    /// Per-delta runs only up to this many turns (default 100; quick: 10): per-delta
    /// costs one transaction per delta.
    #[arg(long)]
    per_delta_max_turns: Option<u32>,
    /// Seed of the generated content.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The generated workloads, comma-separated: w1 (random letters), w2 (the same with
    /// real text, which compresses as real sessions do).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Workload::W1, Workload::W2])]
    workloads: Vec<Workload>,
    /// Directory for the benchmark's files (default: a temporary directory under the
    /// current one, so the disk measured is the one you run on).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Measure what the disk writes: each run's files, and a throwaway Postgres cluster
    /// and Redis server in place of --postgres / --redis (their URLs' options kept), on
    /// a filesystem made for the benchmark on a loop device. Comma-separated: ext4,
    /// xfs; `none` for the engines' own counters only. Default: ext4 where a loop device
    /// can be made (as root), else none, said in one line.
    #[arg(long, value_delimiter = ',', value_name = "FS")]
    device: Option<Vec<String>>,
    /// Report the measurements of an earlier run's `--json` instead of measuring: the
    /// table, and with --svg / --markdown its charts and table again (e.g. with
    /// --peers added).
    #[arg(long, value_name = "FILE.json", conflicts_with_all = ["quick", "input", "postgres", "redis", "device", "json"])]
    from: Option<PathBuf>,
    /// Draw a third chart: forge-store's default path beside the systems users run
    /// instead, from the JSON their scripts write (`scripts/peers/ … --json FILE`).
    #[arg(long, value_name = "FILE.json")]
    peers: Option<PathBuf>,
    /// Write the measurements as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the two charts as SVG.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Write the table as Markdown.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// The steady state instead: --days simulated days of --sessions-per-day sessions
    /// of --turns-per-session W1 turns, pruned to the last --retention-days days and
    /// reclaimed each day; what each backend occupies, per day (--json, --svg write
    /// them).
    #[arg(long, conflicts_with_all = ["from", "input", "quick", "device", "markdown"])]
    steady_state: bool,
    /// Simulated days of --steady-state.
    #[arg(long, default_value_t = 60, requires = "steady_state")]
    days: u32,
    /// New sessions a day (--steady-state).
    #[arg(long, default_value_t = 20, requires = "steady_state")]
    sessions_per_day: u32,
    /// W1 turns per session (--steady-state).
    #[arg(long, default_value_t = 5, requires = "steady_state")]
    turns_per_session: u32,
    /// Days of sessions kept (--steady-state).
    #[arg(long, default_value_t = 7, requires = "steady_state")]
    retention_days: u32,
    /// Time listing a tenant of this many sessions instead: the first page of 50 and a
    /// page from the middle (`Store::sessions_after`), 200 calls each, p50 and p99.
    #[arg(long, value_name = "N", conflicts_with_all = ["from", "input", "quick", "device", "markdown", "steady_state"])]
    list_sessions: Option<u64>,
    /// Large values stored once, at the device, instead: N sessions that each read the
    /// same 100 KB file ten times, on redb, SQLite and a throwaway Postgres and Redis on
    /// a loop-mounted ext4 (or --device xfs), with every value in its row
    /// (`blobs=off`) and stored once; what the device wrote and what each occupies
    /// (--json writes them). Needs root.
    #[arg(long, value_name = "N", conflicts_with_all = ["from", "input", "quick", "markdown", "steady_state", "list_sessions"])]
    large_values: Option<u32>,
    /// What a fork costs at the device instead: one W1 session of N turns forked whole
    /// on redb, SQLite and a throwaway Postgres and Redis on a loop-mounted ext4; the
    /// bytes the device wrote for the fork, per message copied (--json writes them).
    /// Needs root.
    #[arg(long, value_name = "TURNS", conflicts_with_all = ["from", "input", "quick", "markdown", "steady_state", "list_sessions", "large_values"])]
    fork: Option<u32>,
    /// Time searches instead: a tenant of N messages (user prose; assistant reasoning,
    /// text and a file read by a tool) on each backend of --backends, then 200 queries
    /// of one, two and three words and of the most common words, 20 hits each; p50 and
    /// p99 (--json writes them).
    #[arg(long, value_name = "MESSAGES", conflicts_with_all = ["from", "input", "quick", "markdown", "steady_state", "list_sessions", "large_values", "fork"])]
    search: Option<u64>,
    /// What the search index costs at the device instead: N W2 sessions (W1's shape,
    /// real text) of five turns replayed with the index and without it (`search=off`)
    /// on redb, SQLite and a throwaway Postgres and Redis on a loop-mounted ext4 (--json
    /// writes them). Needs root.
    #[arg(long, value_name = "SESSIONS", conflicts_with_all = ["from", "input", "quick", "markdown", "steady_state", "list_sessions", "large_values", "fork", "search"])]
    search_index: Option<u32>,
}

/// `--search MESSAGES`: search latency on every backend named.
async fn searching(args: &BenchArgs, messages: u64, out: &mut dyn Write) -> Result<()> {
    let tmp = work_dir(args, "forge-search-")?;
    let mut rows = Vec::new();
    writeln!(
        out,
        "| backend | search | messages | parts | logical MiB | p50 | p99 | common-word p99 | hits | fill |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for target in targets(args)? {
        let dir = tmp.path().join(target.name());
        std::fs::create_dir_all(&dir)?;
        let instance = forge_bench::run::Instance::open(&target, &dir).await?;
        let r = forge_bench::search::latency(instance.store(), messages, 200, args.seed).await;
        instance.store().close().await?;
        instance.close().await?;
        let r = r.with_context(|| format!("searching on {}", target.name()))?;
        writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} | {:.0} s |",
            r.backend,
            r.search,
            r.messages,
            r.parts,
            r.logical_bytes as f64 / (1024.0 * 1024.0),
            r.p50_ms,
            r.p99_ms,
            r.common_p99_ms,
            r.mean_hits,
            r.fill_s
        )?;
        out.flush()?;
        rows.push(r);
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// `--search-index SESSIONS`: W1 with and without the index, at the device.
async fn search_index(args: &BenchArgs, sessions: u32, out: &mut dyn Write) -> Result<()> {
    let fs = match devices(args.device.as_deref(), out)?.first() {
        Some(fs) => *fs,
        None => bail!("--search-index measures at the device, and no device can be made here"),
    };
    let tmp = work_dir(args, "forge-search-index-")?;
    let turns = 5;
    writeln!(
        out,
        "search index: {sessions} W2 sessions of {turns} turns, with and without the index, on {fs}"
    )?;
    let (rows, notes) =
        forge_bench::search::amplification(fs, tmp.path(), sessions, turns, args.seed, |r| {
            eprintln!("  {} {}: device {} B", r.backend, r.mode, r.device_bytes);
        })
        .await?;
    for n in notes {
        writeln!(out, "{n}")?;
    }
    write!(out, "{}", forge_bench::search::table(&rows))?;
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// `--fork TURNS`: a fork on every backend, at the device.
async fn forked(args: &BenchArgs, turns: u32, out: &mut dyn Write) -> Result<()> {
    let fs = match devices(args.device.as_deref(), out)?.first() {
        Some(fs) => *fs,
        None => bail!("--fork measures at the device, and no device can be made here"),
    };
    let tmp = work_dir(args, "forge-fork-")?;
    writeln!(
        out,
        "fork: one W1 session of {turns} turns, forked whole, on {fs}"
    )?;
    let (rows, notes) = forge_bench::forked::run(fs, tmp.path(), turns, args.seed, |r| {
        eprintln!(
            "  {}: device {} B for {} messages",
            r.backend, r.device_bytes, r.messages
        );
    })
    .await?;
    for n in notes {
        writeln!(out, "{n}")?;
    }
    write!(out, "{}", forge_bench::forked::table(&rows))?;
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// A directory for a run's files under `--dir` (default: the current one), removed when
/// dropped.
fn work_dir(args: &BenchArgs, prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(args.dir.as_deref().unwrap_or_else(|| Path::new(".")))
        .context("creating a directory for the benchmark's files")
}

/// `--large-values N`: both modes on every backend, at the device.
async fn large(args: &BenchArgs, sessions: u32, out: &mut dyn Write) -> Result<()> {
    let fs = match devices(args.device.as_deref(), out)?.first() {
        Some(fs) => *fs,
        None => bail!("--large-values measures at the device, and no device can be made here"),
    };
    let tmp = work_dir(args, "forge-large-")?;
    writeln!(
        out,
        "large values: {sessions} sessions, each reading one {} KB file {} times, on {fs}",
        forge_bench::large::FILE_BYTES / 1000,
        forge_bench::large::READS
    )?;
    let (rows, notes) = forge_bench::large::run(fs, tmp.path(), sessions, args.seed, |r| {
        eprintln!(
            "  {} {}: device {} B, logical {} B",
            r.backend, r.mode, r.device_bytes, r.logical_bytes
        );
    })
    .await?;
    for n in notes {
        writeln!(out, "{n}")?;
    }
    write!(out, "{}", forge_bench::large::table(&rows))?;
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// `--list-sessions N` on every backend named.
async fn listing(args: &BenchArgs, sessions: u64, out: &mut dyn Write) -> Result<()> {
    let tmp = work_dir(args, "forge-listing-")?;
    let mut rows = Vec::new();
    writeln!(
        out,
        "| backend | sessions | first page p50 | first page p99 | middle page p50 | middle page p99 | fill |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for target in targets(args)? {
        let dir = tmp.path().join(target.name());
        std::fs::create_dir_all(&dir)?;
        let instance = forge_bench::run::Instance::open(&target, &dir).await?;
        let r = forge_bench::listing::run(instance.store(), sessions, 50, 200).await;
        instance.store().close().await?;
        instance.close().await?;
        let r = r.with_context(|| format!("listing on {}", target.name()))?;
        writeln!(
            out,
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} s |",
            r.backend,
            r.sessions,
            r.first_p50_ms,
            r.first_p99_ms,
            r.middle_p50_ms,
            r.middle_p99_ms,
            r.fill_s
        )?;
        out.flush()?;
        rows.push(r);
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// The steady state on every backend named, one after the other.
async fn steady(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    let opts = forge_bench::steady::SteadyOptions {
        days: args.days,
        sessions_per_day: args.sessions_per_day,
        turns_per_session: args.turns_per_session,
        retention_days: args.retention_days,
        seed: args.seed,
    };
    let tmp = work_dir(args, "forge-steady-")?;
    let mut runs = Vec::new();
    for target in targets(args)? {
        if target.kind() == forge_store::backend::Kind::Memory {
            writeln!(
                out,
                "steady state: {} skipped (it occupies no disk)",
                target.name()
            )?;
            continue;
        }
        let dir = tmp.path().join(target.name());
        std::fs::create_dir_all(&dir)?;
        // A simulated day passes in seconds: a deleted session's Redis stream expires
        // after a second instead of an hour.
        let target = if target.name() == "redis" {
            Target::new(&forge_bench::steady::with_param(
                target.url(),
                "deleted_stream_ttl_ms",
                "1000",
            ))?
        } else {
            target
        };
        let instance = forge_bench::run::Instance::open(&target, &dir).await?;
        writeln!(out, "steady state: {} ({opts:?})", target.name())?;
        out.flush()?;
        let run = forge_bench::steady::run(instance.store(), instance.bus(), &opts, |d| {
            tracing::info!(
                day = d.day,
                sessions = d.sessions,
                disk = d.disk_bytes,
                deleted = d.deleted,
                reclaim_ms = d.reclaim_ms,
                "steady state"
            );
        })
        .await;
        instance.close().await?;
        let run = run.with_context(|| format!("steady state on {}", target.name()))?;
        writeln!(
            out,
            "  {}: day {} {:.2} MiB, spread from day {} {:.1} %",
            run.backend,
            run.days.len(),
            run.days
                .last()
                .map_or(0.0, |d| d.disk_bytes as f64 / f64::from(1 << 20)),
            forge_bench::steady::FLAT_FROM_DAY,
            run.spread * 100.0
        )?;
        runs.push(run);
    }
    write!(out, "{}", forge_bench::steady::table(&runs))?;
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&runs)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    if let Some(p) = &args.svg {
        std::fs::write(p, forge_bench::steady::svg(&runs)?)
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// The backends the arguments name.
fn targets(args: &BenchArgs) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for name in &args.backends {
        let url = match name.trim() {
            "memory" => "memory://".to_owned(),
            "redb" => with_options("redb://", &args.redb_options),
            "sqlite" => with_options("sqlite://", &args.sqlite_options),
            "" => continue,
            // Any backend of the registry, by URL (an installed third-party one too).
            url if url.contains("://") => url.to_owned(),
            other => bail!(
                "unknown backend {other:?} in --backends; use memory, redb, sqlite or a \
                 backend URL (Postgres and Redis also with --postgres URL / --redis URL)"
            ),
        };
        targets.push(Target::new(&url)?);
    }
    for url in [&args.postgres, &args.redis].into_iter().flatten() {
        targets.push(Target::new(url)?);
    }
    if targets.is_empty() {
        bail!("no backend to measure");
    }
    Ok(targets)
}

/// Runs the benchmark and prints the table.
pub async fn run(args: &BenchArgs, progress: Progress, out: &mut dyn Write) -> Result<()> {
    if args.steady_state {
        return steady(args, out).await;
    }
    if let Some(n) = args.list_sessions {
        return listing(args, n, out).await;
    }
    if let Some(n) = args.large_values {
        return large(args, n, out).await;
    }
    if let Some(n) = args.fork {
        return forked(args, n, out).await;
    }
    if let Some(n) = args.search {
        return searching(args, n, out).await;
    }
    if let Some(n) = args.search_index {
        return search_index(args, n, out).await;
    }
    let peers = match &args.peers {
        Some(p) => forge_bench::report::read_peers(p)?,
        None => Vec::new(),
    };
    let results = match &args.from {
        Some(path) => {
            let ms = forge_bench::report::read_json(path)?;
            writeln!(
                out,
                "forge-store bench: {} measurements read from {} (not measured now)",
                ms.len(),
                path.display()
            )?;
            ms
        }
        None => measure(args, progress, out).await?,
    };
    write!(out, "{}", forge_bench::report::table(&results))?;
    if let Some(p) = &args.json {
        forge_bench::report::write_json(&results, p)?;
        writeln!(out, "wrote {}", p.display())?;
    }
    if let Some(p) = &args.svg {
        forge_bench::report::write_svg_with_peers(&results, &peers, p)?;
        writeln!(out, "wrote {}", p.display())?;
    } else if args.peers.is_some() {
        writeln!(out, "--peers is drawn only in the chart: add --svg FILE")?;
    }
    if let Some(p) = &args.markdown {
        std::fs::write(p, forge_bench::report::markdown(&results))
            .with_context(|| format!("writing {}", p.display()))?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// Measures the plan the arguments describe, printing progress and the runs' notes.
async fn measure(
    args: &BenchArgs,
    progress: Progress,
    out: &mut dyn Write,
) -> Result<Vec<forge_bench::Measurement>> {
    let targets = targets(args)?;
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("forge-bench-")
                .tempdir_in(".")
                .context("creating a directory for the benchmark's files")?;
            tmp.path().to_path_buf()
        }
    };
    let mut plan = if args.quick {
        Plan::quick(targets, dir)
    } else {
        Plan::full(targets, dir)
    };
    if let Some(t) = &args.turns {
        plan.turns.clone_from(t);
    }
    if let Some(s) = &args.sessions {
        plan.sessions.clone_from(s);
    }
    if let Some(m) = args.per_delta_max_turns {
        plan.per_delta_max_turns = m;
    }
    plan.windows.clone_from(&args.windows);
    plan.devices = devices(args.device.as_deref(), out)?;
    plan.seed = args.seed;
    plan.contents = Vec::new();
    for content in args.workloads.iter().map(|w| w.content()) {
        if !plan.contents.contains(&content) {
            plan.contents.push(content);
        }
    }
    if let Some(path) = &args.input {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let script = script_from_replay(&text).with_context(|| format!("{}", path.display()))?;
        plan.input = Some((format!("input:{}", path.display()), vec![script]));
    }

    let runs = plan.runs().len();
    writeln!(
        out,
        "forge-store bench: {runs} runs ({})",
        match &plan.input {
            Some((name, _)) => format!("the recorded stream {name}"),
            None => format!(
                "generated {}, seed {}",
                plan.contents
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(" and "),
                plan.seed
            ),
        }
    )?;
    out.flush()?;
    let bar = progress.bar(runs as u64, "bench");
    let mut notes = Vec::new();
    let results = plan
        .execute_with_progress(|event| match event {
            ProgressEvent::Note { text } => {
                notes.push(text.to_owned());
                if bar.is_hidden() {
                    tracing::info!("{text}");
                } else {
                    bar.println(text);
                }
            }
            ProgressEvent::Planned { total } => bar.set_length(total as u64),
            ProgressEvent::Started { run, .. } => bar.set_message(run.label()),
            ProgressEvent::Finished {
                index,
                run,
                measurement: m,
            } => {
                let factor =
                    |a: Option<f64>| a.map_or_else(|| "–".to_owned(), |a| format!("{a:.2}×"));
                let wa = match m.device_amplification() {
                    Some(d) => {
                        format!("{} (engine {})", factor(Some(d)), factor(m.amplification()))
                    }
                    None => factor(m.amplification()),
                };
                bar.inc(1);
                if bar.is_hidden() {
                    tracing::info!("[{}/{runs}] {}: WA {wa}", index + 1, run.label());
                } else {
                    bar.println(format!("{}: WA {wa}", run.label()));
                }
            }
            _ => {}
        })
        .await?;
    bar.finish_and_clear();
    for note in &notes {
        writeln!(out, "{note}")?;
    }
    Ok(results)
}

/// The filesystems `--device` names (`None`: ext4 where a device can be made here,
/// said in one line when it cannot).
fn devices(named: Option<&[String]>, out: &mut dyn Write) -> Result<Vec<Filesystem>> {
    let Some(named) = named else {
        return Ok(match Device::unavailable(Filesystem::Ext4) {
            None => vec![Filesystem::Ext4],
            Some(why) => {
                writeln!(
                    out,
                    "device: not measured ({why}); the figures are the engines' own counters"
                )?;
                Vec::new()
            }
        });
    };
    let mut out = Vec::new();
    for name in named.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if name == "none" {
            continue;
        }
        let fs = Filesystem::parse(name).context("--device")?;
        if let Some(why) = Device::unavailable(fs) {
            bail!("--device {fs}: cannot make an {fs} device here: {why}");
        }
        if !out.contains(&fs) {
            out.push(fs);
        }
    }
    Ok(out)
}

/// A replay file as one session's script: `t` gives each line's event time (lines
/// without one take the previous line's). Session lines and unknown types are left out
/// (nothing to measure), and the script ends at a `crash` line.
pub fn script_from_replay(text: &str) -> Result<Script> {
    let mut items = Vec::new();
    let mut t = 0u64;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let parsed = parse_line(line).map_err(|e| anyhow::anyhow!("line {n}: {e}"))?;
        let Some(mut timed) = parsed else { continue };
        if let Some(at) = timed.t_ms {
            if at < t {
                bail!("line {n}: `t` {at} goes back in time (previous line: {t})");
            }
            t = at;
        }
        match &timed.item {
            Item::Session(_) | Item::Unknown { .. } => continue,
            Item::Crash => break,
            // Bad parts are reported with their line before anything runs.
            Item::User(u) => {
                u.clone()
                    .take_part_bodies(None)
                    .map_err(|e| anyhow::anyhow!("line {n}: {e}"))?;
            }
            _ => {}
        }
        timed.t_ms = Some(t);
        items.push(timed);
    }
    if items.is_empty() {
        bail!("no user message or stream event to measure");
    }
    Ok(Script { items })
}

/// `base` (a file backend's URL without a path: its instances are temporary files) with
/// the `key=value&…` options of `--redb-options` / `--sqlite-options`.
fn with_options(base: &str, options: &str) -> String {
    let options = options.trim().trim_start_matches('?');
    if options.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{options}")
    }
}
