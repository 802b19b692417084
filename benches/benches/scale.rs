//! The scaling benchmark (see `forge_bench::scale`): W1 sessions streaming at once
//! through 1, 2 and 4 writer processes into one Postgres schema, and a W1 backlog on a
//! Redis bus drained by 1, 2 and 4 projector worker processes into Postgres.
//!
//! ```text
//! cargo bench -p forge-bench --bench scale -- \
//!     [--sessions 100,1000,10000] [--processes 1,2,4] [--turns 1] \
//!     [--worker-sessions 100,1000] [--postgres URL] [--redis URL] [--out FILE]
//! ```
//!
//! Postgres and Redis default to `FORGE_BENCH_POSTGRES_URL` / `FORGE_BENCH_REDIS_URL`,
//! then to the local servers. Prints a markdown table (and writes it to `--out`).

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use forge_bench::scale;

fn list(v: &str) -> Result<Vec<u32>> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .with_context(|| format!("{x:?} is not a number"))
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--child-writer") => {
            let [_, url, sessions, turns, seed] = args.as_slice() else {
                bail!("--child-writer URL SESSIONS TURNS SEED");
            };
            let line =
                scale::child_writer(url, sessions.parse()?, turns.parse()?, seed.parse()?).await?;
            println!("{line}");
            return Ok(());
        }
        Some("--child-worker") => {
            let [_, redis, pg, group, name] = args.as_slice() else {
                bail!("--child-worker REDIS_URL PG_URL GROUP NAME");
            };
            println!("{}", scale::child_worker(redis, pg, group, name).await?);
            return Ok(());
        }
        _ => {}
    }
    let mut sessions = vec![100, 1000, 10_000];
    let mut worker_sessions = vec![100, 1000];
    let mut processes = vec![1, 2, 4];
    let mut turns = 1;
    let mut pg = std::env::var("FORGE_BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let mut redis = std::env::var("FORGE_BENCH_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{a} needs a value"));
        match a.as_str() {
            "--sessions" => sessions = list(value()?)?,
            "--worker-sessions" => worker_sessions = list(value()?)?,
            "--processes" => {
                processes = list(value()?)?.into_iter().map(|p| p as usize).collect();
            }
            "--turns" => turns = value()?.parse()?,
            "--postgres" => pg.clone_from(value()?),
            "--redis" => redis.clone_from(value()?),
            "--out" => out = Some(value()?.clone()),
            // What `cargo bench` passes.
            "--bench" => {}
            other => bail!("unknown argument {other:?}"),
        }
    }
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let started = Instant::now();
    for &n in &sessions {
        for &p in &processes {
            eprintln!("writers → postgres: {n} sessions, {p} process(es)…");
            let row = scale::writers(&exe, &pg, n, turns, p).await?;
            eprintln!("{}", scale::table(std::slice::from_ref(&row)));
            rows.push(row);
        }
    }
    for &n in &worker_sessions {
        eprintln!("publishing {n} sessions to redis…");
        let (prefix, published) = scale::publish(&redis, n, turns).await?;
        scale::add_groups(&prefix, &processes).await?;
        let m = &published.measurement;
        let line = format!(
            "redis publish: {n} sessions, {} rows and {} deltas in {:.1} s ({:.0} events/s); \
             used_memory +{} bytes ({:.0} B per event, {:.0} B per session)",
            m.rows,
            m.deltas,
            m.elapsed_s,
            (m.rows + m.deltas) as f64 / m.elapsed_s.max(1e-9),
            published.memory_bytes,
            published.memory_bytes as f64 / (m.rows + m.deltas).max(1) as f64,
            published.memory_bytes as f64 / f64::from(n.max(1)),
        );
        eprintln!("{line}");
        notes.push(line);
        for &p in &processes {
            eprintln!("workers redis → postgres: {n} sessions, {p} process(es)…");
            let row = scale::workers(&exe, &prefix.url, &pg, n, p).await;
            match row {
                Ok(row) => {
                    eprintln!("{}", scale::table(std::slice::from_ref(&row)));
                    rows.push(row);
                }
                Err(e) => {
                    prefix.close().await?;
                    return Err(e);
                }
            }
        }
        prefix.close().await?;
    }
    let text = format!(
        "{}\n{}\n(turns per session: {turns}; {} runs in {:.0} s)\n",
        scale::table(&rows),
        notes.join("\n"),
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    println!("{text}");
    if let Some(path) = out {
        std::fs::write(&path, &text).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}
