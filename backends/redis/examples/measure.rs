//! Prints RedisBus publish throughput and delta → subscriber latency (p50/p99).
//!
//! `cargo run --release -p forge-redis --example measure [redis://127.0.0.1:6379]`
//! (or `FORGE_TEST_REDIS_URL`). Writes under a fresh `forge-measure-*` prefix and
//! deletes it afterwards. Prints figures; asserts nothing about timings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::{Bus, SessionId, TenantId, Topic};
use forge_redis::RedisBus;

fn delta(tenant: &TenantId, session: &SessionId, seq: u64, text: &str) -> forge_core::BusEvent {
    forge_testkit::delta(tenant, session, seq, text)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> forge_core::Result<()> {
    let server = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FORGE_TEST_REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let prefix = format!("forge-measure-{:016x}", rand::random::<u64>());
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{sep}prefix={prefix}");
    let tenant = TenantId::new("bench").unwrap();
    let text = "x".repeat(24); // a typical token-sized delta

    // Throughput: N deltas over 16 sessions, published then flushed.
    let bus = RedisBus::connect(&url).await?;
    let n: u64 = 100_000;
    let sessions: Vec<SessionId> = (0..16).map(|i| format!("ses_{i}").into()).collect();
    let start = Instant::now();
    for i in 0..n {
        let s = &sessions[(i % 16) as usize];
        bus.publish(delta(&tenant, s, i / 16 + 1, &text))?;
    }
    let queued = start.elapsed();
    bus.flush().await?;
    let total = start.elapsed();
    println!(
        "publish: {n} deltas in {:.2?} ({:.0} events/s end to end; publish() calls took {:.2?})",
        total,
        n as f64 / total.as_secs_f64(),
        queued
    );

    // Latency: a subscriber on its own bus (its own connections) receives deltas
    // published one at a time, paced like a streaming model.
    let reader = RedisBus::connect(&url).await?;
    let session: SessionId = "ses_latency".into();
    let mut sub = reader
        .subscribe(&tenant, Topic::Session(session.clone()), None)
        .await?;
    let samples = 2000u64;
    let sent = Arc::new(parking_lot::Mutex::new(vec![
        None::<Instant>;
        samples as usize + 1
    ]));
    let sent_w = Arc::clone(&sent);
    let (t, s, txt) = (tenant.clone(), session.clone(), text.clone());
    let publisher = tokio::spawn(async move {
        for seq in 1..=samples {
            sent_w.lock()[seq as usize] = Some(Instant::now());
            bus.publish(delta(&t, &s, seq, &txt)).unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bus.flush().await.unwrap();
    });
    let mut lat = Vec::with_capacity(samples as usize);
    while (lat.len() as u64) < samples {
        let ev = sub.next().await.expect("subscription ended")?;
        let at = sent.lock()[ev.seq as usize].expect("sent");
        lat.push(at.elapsed());
    }
    publisher.await.expect("publisher");
    lat.sort();
    println!(
        "delta -> subscriber latency over {samples} deltas: p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );

    // Cleanup.
    let client = redis::Client::open(server.as_str()).expect("url");
    let mut conn = client.get_connection().expect("connect");
    let keys: Vec<String> =
        redis::Commands::scan_match::<_, String>(&mut conn, format!("{prefix}:*"))
            .expect("scan")
            .filter_map(Result::ok)
            .collect();
    for k in keys.chunks(500) {
        let _: () = redis::cmd("DEL").arg(k).query(&mut conn).expect("del");
    }
    Ok(())
}
