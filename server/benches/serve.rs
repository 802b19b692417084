//! What `serve` sustains, measured end to end over loopback HTTP on a real redb file:
//!
//! 1. throughput: one NDJSON upload of a turn with many deltas, processed while it
//!    arrives, to one SSE client of the session: events/s and deltas/s from the first
//!    byte sent to the client's `session.idle`;
//! 2. latency: deltas written into an upload at a steady pace, each carrying the time it
//!    was sent, read by 1, 100 and 1,000 SSE clients of the session: p50/p99/max from
//!    the line leaving the uploader to the event reaching each client.
//!
//! The clients run in the same process as the server (2 cores here): the figures include
//! the clients' own work. Run: `cargo bench -p forge-server --bench serve`
//! (`FORGE_SERVE_BENCH_CLIENTS=1,100,1000`, `FORGE_SERVE_BENCH_DELTAS=50000`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_server::{Access, ServerOptions, Shutdown};
use forge_store::{OpenOptions, TenantId};
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::json;

struct Server {
    base: String,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<Result<(), forge_server::ServeError>>,
    _dir: tempfile::TempDir,
}

async fn start() -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let url = format!("redb://{}", dir.path().join("bench.redb").display());
    let forge = forge_store::open_with(&url, OpenOptions::new()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut options = ServerOptions::new(Access::Open(TenantId::new("bench")?));
    options.max_body = 1 << 30;
    let shutdown = Shutdown::new();
    let task = tokio::spawn(forge_server::serve(
        listener,
        forge,
        options,
        shutdown.clone(),
    ));
    Ok(Server {
        base,
        shutdown,
        task,
        _dir: dir,
    })
}

fn head(prompt: &str) -> Vec<String> {
    vec![
        json!({"type": "user", "text": prompt}).to_string(),
        r#"{"type":"start-step"}"#.to_owned(),
        r#"{"type":"text-start","id":"t"}"#.to_owned(),
    ]
}

fn tail() -> Vec<String> {
    vec![
        r#"{"type":"text-end","id":"t"}"#.to_owned(),
        r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":1,"outputTokens":1}}"#
            .to_owned(),
        r#"{"type":"finish","finishReason":"stop"}"#.to_owned(),
    ]
}

/// Reads SSE frames and calls `f` with each `data:` payload; stops when `f` says so.
async fn read_sse(resp: reqwest::Response, mut f: impl FnMut(&str) -> bool) -> anyhow::Result<()> {
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    while let Some(chunk) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(pos) = buf.find("\n\n") {
            let frame: String = buf.drain(..pos + 2).collect();
            for line in frame.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    if !f(data) {
                        return Ok(());
                    }
                }
            }
        }
    }
    anyhow::bail!("the stream ended early")
}

async fn create(http: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<()> {
    let r = http
        .post(format!("{base}/session"))
        .json(&json!({"id": id}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "create: {}", r.status());
    Ok(())
}

async fn throughput(deltas: usize) -> anyhow::Result<()> {
    let s = start().await?;
    let http = reqwest::Client::new();
    create(&http, &s.base, "ses_tp").await?;
    let resp = http
        .get(format!("{}/session/ses_tp/event", s.base))
        .send()
        .await?;
    let mut lines = head("throughput");
    lines.extend(
        (0..deltas).map(|i| {
            json!({"type": "text-delta", "id": "t", "text": format!("{i:08}")}).to_string()
        }),
    );
    lines.extend(tail());
    let body = lines.join("\n") + "\n";
    let bytes = body.len();
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    let c = Arc::clone(&counts);
    let reader = tokio::spawn(read_sse(resp, move |data| {
        let mut c = c.lock();
        c.0 += 1;
        if data.contains("\"message.part.delta\"") {
            c.1 += 1;
        }
        !data.contains("\"session.idle\"")
    }));
    let start = Instant::now();
    let r = http
        .post(format!("{}/session/ses_tp/stream", s.base))
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "upload: {}", r.text().await?);
    let uploaded = start.elapsed();
    reader.await??;
    let all = start.elapsed();
    let (events, got) = *counts.lock();
    println!(
        "throughput: {deltas} deltas ({:.1} MB of NDJSON) upload -> 1 SSE client: {events} events \
         in {:.3} s = {:.0} events/s, {:.0} deltas/s (upload answered after {:.3} s; {got} \
         deltas received)",
        bytes as f64 / 1e6,
        all.as_secs_f64(),
        events as f64 / all.as_secs_f64(),
        got as f64 / all.as_secs_f64(),
        uploaded.as_secs_f64(),
    );
    s.shutdown.trigger();
    s.task.await??;
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

async fn latency(clients: usize, deltas: usize, pace: Duration) -> anyhow::Result<()> {
    let s = start().await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    create(&http, &s.base, "ses_lat").await?;
    let origin = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::<u64>::with_capacity(clients * deltas)));
    let mut readers = Vec::new();
    for _ in 0..clients {
        let resp = http
            .get(format!("{}/session/ses_lat/event", s.base))
            .send()
            .await?;
        let samples = Arc::clone(&samples);
        readers.push(tokio::spawn(read_sse(resp, move |data| {
            if data.contains("\"message.part.delta\"") {
                if let Some(sent) = data
                    .split("\"delta\":\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    let now = origin.elapsed().as_micros() as u64;
                    samples.lock().push(now.saturating_sub(sent));
                }
            }
            !data.contains("\"session.idle\"")
        })));
    }
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<String, std::io::Error>>(64);
    let upload = {
        let req = http
            .post(format!("{}/session/ses_lat/stream", s.base))
            .body(reqwest::Body::wrap_stream(rx));
        tokio::spawn(async move { req.send().await })
    };
    for l in head("latency") {
        tx.send(Ok(l + "\n")).await?;
    }
    let mut tick = tokio::time::interval(pace);
    for _ in 0..deltas {
        tick.tick().await;
        let sent = origin.elapsed().as_micros() as u64;
        let line = json!({"type": "text-delta", "id": "t", "text": sent.to_string()}).to_string();
        tx.send(Ok(line + "\n")).await?;
    }
    for l in tail() {
        tx.send(Ok(l + "\n")).await?;
    }
    drop(tx);
    let r = upload.await??;
    anyhow::ensure!(r.status().is_success(), "upload: {}", r.status());
    let mut dropped = 0;
    for r in readers {
        if tokio::time::timeout(Duration::from_mins(1), r)
            .await
            .map_or(true, |r| r.map_or(true, |r| r.is_err()))
        {
            dropped += 1;
        }
    }
    let mut v = samples.lock().clone();
    v.sort_unstable();
    println!(
        "latency: {clients:>4} SSE client(s), {deltas} deltas at {:.0}/s: delta -> client p50 \
         {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples, {dropped} client(s) dropped)",
        1.0 / pace.as_secs_f64(),
        percentile(&v, 0.50),
        percentile(&v, 0.99),
        percentile(&v, 1.0),
        v.len(),
    );
    s.shutdown.trigger();
    s.task.await??;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let deltas: usize = std::env::var("FORGE_SERVE_BENCH_DELTAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let clients: Vec<usize> = std::env::var("FORGE_SERVE_BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,100,1000".to_owned())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    rt.block_on(async {
        throughput(deltas).await?;
        for c in clients {
            latency(c, 1000, Duration::from_millis(2)).await?;
        }
        anyhow::Ok(())
    })
}
