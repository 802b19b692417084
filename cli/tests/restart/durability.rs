//! What a SIGKILL of the Redis server loses of what it confirmed, per `appendfsync`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use forge_store::{OpenOptions, ReplayOptions, SessionId};
use forge_testkit::servers::{Redis, RedisStop};
use forge_testkit::{env_usize, runtime};

use crate::{found, random_below, tenant, turn};

/// Writers streaming at once into the durability test's server.
const DURABILITY_WRITERS: usize = 4;

/// Streams turns into session `sid` of `url` until a write fails; `confirmed` counts
/// the turns confirmed.
async fn write_until_failure(url: String, sid: SessionId, confirmed: Arc<AtomicUsize>) {
    // No retries (the first failure ends the run) and no group-commit window (as
    // many confirmed writes as possible right before the kill).
    let options = OpenOptions::new()
        .retry_for(Duration::ZERO)
        .group_commit(Duration::ZERO);
    let Ok(forge) = forge_store::open_with(&url, options).await else {
        return;
    };
    for i in 0.. {
        let done = forge
            .replay_str(
                &tenant(),
                &turn(i, 5),
                ReplayOptions::default().session(sid.clone()),
            )
            .await;
        if done.is_err() {
            return;
        }
        confirmed.store(i + 1, Ordering::SeqCst);
    }
}

/// Measures what a SIGKILL of the Redis server loses of what it confirmed, per
/// `appendfsync` policy; prints the figures. `always` must lose nothing; `everysec`
/// may lose up to about a second of writes (its documented window), reported only.
#[test]
fn redis_durability_window_per_appendfsync_policy() {
    let test = "redis_durability_window_per_appendfsync_policy";
    let kills = env_usize("FORGE_DURABILITY_KILLS", 3);
    let rt = runtime();
    let mut lines = Vec::new();
    for (policy, port) in [("always", 6394), ("everysec", 6392)] {
        let Some(mut redis) = Redis::start(port, policy, test) else {
            return;
        };
        let (mut confirmed_total, mut lost_total, mut runs_losing) = (0, 0, 0);
        for k in 0..kills {
            // The store refuses an everysec server unless its URL accepts one.
            let url = format!("{}?prefix=dur{k}&fsync={policy}", redis.url());
            let sids: Vec<SessionId> = (0..DURABILITY_WRITERS)
                .map(|w| SessionId::from(format!("ses_durability_{w}")))
                .collect();
            let counts: Vec<Arc<AtomicUsize>> =
                sids.iter().map(|_| Arc::new(AtomicUsize::new(0))).collect();
            let writers: Vec<_> = sids
                .iter()
                .zip(&counts)
                .map(|(sid, c)| {
                    rt.spawn(write_until_failure(url.clone(), sid.clone(), Arc::clone(c)))
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300 + random_below(900)));
            redis.stop(RedisStop::Kill);
            let acked: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            for writer in writers {
                rt.block_on(async { tokio::time::timeout(Duration::from_mins(1), writer).await })
                    .expect("the writer stops when the server is gone")
                    .unwrap();
            }
            redis.start_again();
            let forge = rt.block_on(forge_store::open(&url)).unwrap();
            let mut f = Vec::new();
            for (sid, &n) in sids.iter().zip(&acked) {
                f.extend(rt.block_on(async {
                    match forge.session(&tenant(), sid).await {
                        Ok(_) => found(&forge, sid, n, 5).await.copies,
                        Err(_) => vec![0; n],
                    }
                }));
            }
            let acked: usize = acked.iter().sum();
            let lost = f.iter().filter(|c| **c == 0).count();
            confirmed_total += acked;
            lost_total += lost;
            runs_losing += usize::from(lost > 0);
            if policy == "always" {
                assert_eq!(
                    lost, 0,
                    "appendfsync always lost {lost} of {acked} confirmed turns"
                );
            }
        }
        lines.push(format!(
            "appendfsync {policy}: {kills} kills, {confirmed_total} turns confirmed, \
             {lost_total} lost ({runs_losing} kills lost some)"
        ));
    }
    eprintln!("durability: {}", lines.join(" | "));
}
