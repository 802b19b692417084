//! RedisBus against a real server: resume across the replay → live switch, retention,
//! tenant subscriptions, isolation.

mod common;

use std::time::Duration;

use common::{delta, lone_delta, TestPrefix};
use forge_core::{Bus, BusEvent, Error, SessionId, Subscription, TenantId, Topic};
use forge_redis::RedisBus;
use forge_testkit::servers::{Redis, RedisStop};

const WAIT: Duration = Duration::from_secs(20);
/// Events published in the resume test.
const N: u64 = 3000;

async fn next(sub: &mut Subscription) -> BusEvent {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no event within 20 s")
        .expect("subscription ended")
        .expect("subscription error")
}

/// Nothing arrives within `ms`.
async fn quiet(sub: &mut Subscription, ms: u64) {
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(ms), sub.next()).await {
        panic!("unexpected event {got:?}");
    }
}

/// A fresh prefix with a bus on it, and tenant `t1`.
struct Setup {
    tenant: TenantId,
    bus: RedisBus,
    /// Last: its keys are deleted once the bus is gone.
    prefix: TestPrefix,
}

impl Setup {
    /// Another bus on the prefix (another connection, as on another replica).
    async fn connect(&self) -> RedisBus {
        self.prefix.bus().await
    }
}

async fn setup(extra: &str) -> Option<Setup> {
    let prefix = TestPrefix::with_query(extra)?;
    Some(Setup {
        bus: prefix.bus().await,
        prefix,
        tenant: TenantId::new("t1").unwrap(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_seq_switches_from_replay_to_live_without_gap_or_repeat() {
    let Some(s) = setup("").await else { return };
    let tenant = &s.tenant;
    let session = SessionId::from("ses_resume");

    // Publisher and subscribers are different connections, as on different replicas.
    let publisher = s.connect().await;
    let (t, ses) = (tenant.clone(), session.clone());
    let publishing = tokio::spawn(async move {
        for seq in 1..=N {
            publisher.publish(delta(&t, &ses, seq)).unwrap();
            if seq % 50 == 0 {
                publisher.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        publisher.flush().await.unwrap();
    });

    let reader = &s.bus;
    let mut subs = Vec::new();
    // Subscribe at different moments and from different seqs, while publishing runs:
    // each one replays a gap and then follows live.
    for (i, from) in [1u64, 400, 1200, 2500, 2999].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(15 * i as u64)).await;
        let sub = reader
            .subscribe(tenant, Topic::Session(session.clone()), Some(from))
            .await
            .unwrap();
        subs.push((from, sub));
    }
    let mut switched = 0;
    for (from, mut sub) in subs {
        let last_at_subscribe = reader.last_seq(tenant, &session).await.unwrap();
        for want in from..=N {
            let got = next(&mut sub).await;
            assert_eq!(got.seq, want, "subscriber from {from}");
        }
        quiet(&mut sub, 200).await;
        if last_at_subscribe.is_some_and(|l| l < N) {
            switched += 1;
        }
    }
    publishing.await.unwrap();
    assert!(
        switched > 0,
        "no subscriber crossed the replay -> live switch"
    );

    // A live subscription (no seq) gets only what is published after it returns.
    let mut live = reader
        .subscribe(tenant, Topic::Session(session.clone()), None)
        .await
        .unwrap();
    let publisher = s.connect().await;
    publisher.publish(delta(tenant, &session, N + 1)).unwrap();
    assert_eq!(next(&mut live).await.seq, N + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_trims_and_replay_reports_truncation() {
    let Some(s) = setup("&maxlen=10").await else {
        return;
    };
    let tenant = &s.tenant;
    let session = SessionId::from("ses_trim");
    let bus = &s.bus;
    for seq in 1..=2000 {
        bus.publish(lone_delta(tenant, &session, seq)).unwrap();
    }
    bus.flush().await.unwrap();

    let all = bus.replay(tenant, &session, 1).await.unwrap();
    assert!(all.truncated, "retention dropped the start");
    let first = all.events.first().unwrap().seq;
    assert!(
        first > 1 && all.events.len() < 2000,
        "approximate MAXLEN trimmed"
    );
    let seqs: Vec<u64> = all.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (first..=2000).collect::<Vec<_>>());

    let kept = bus.replay(tenant, &session, first).await.unwrap();
    assert!(!kept.truncated, "nothing at or after {first} was dropped");
    assert_eq!(kept.events.len(), all.events.len());
    let tail = bus.replay(tenant, &session, 1990).await.unwrap();
    assert_eq!(tail.events.len(), 11);
    assert!(!tail.truncated);
    assert_eq!(bus.last_seq(tenant, &session).await.unwrap(), Some(2000));

    let err = bus
        .subscribe(tenant, Topic::Session(session.clone()), Some(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let mut sub = bus
        .subscribe(tenant, Topic::Session(session.clone()), Some(first))
        .await
        .unwrap();
    assert_eq!(next(&mut sub).await.seq, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_subscription_follows_every_session_live_and_only_its_tenant() {
    let Some(s) = setup("").await else { return };
    let (t1, t2) = (TenantId::new("t1").unwrap(), TenantId::new("t2").unwrap());
    let (a, b) = (SessionId::from("ses_a"), SessionId::from("ses_b"));
    let bus = &s.bus;
    bus.publish(delta(&t1, &a, 1)).unwrap(); // before the subscription: not delivered

    let mut sub = bus.subscribe(&t1, Topic::Tenant, None).await.unwrap();
    assert!(bus.subscribe(&t1, Topic::Tenant, Some(1)).await.is_err());
    let other = s.connect().await;
    other.publish(delta(&t2, &a, 1)).unwrap();
    for (ses, seq) in [(&a, 2), (&b, 1), (&a, 3), (&b, 2)] {
        other.publish(delta(&t1, ses, seq)).unwrap();
    }
    other.flush().await.unwrap();
    for (ses, seq) in [(&a, 2), (&b, 1), (&a, 3), (&b, 2)] {
        let got = next(&mut sub).await;
        assert_eq!((&got.tenant, &got.session_id, got.seq), (&t1, ses, seq));
    }
    quiet(&mut sub, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_sessions_replay_empty_and_hostile_session_ids_stay_apart() {
    let Some(s) = setup("").await else { return };
    let tenant = &s.tenant;
    let bus = &s.bus;
    let none = SessionId::from("nothing");
    assert_eq!(bus.last_seq(tenant, &none).await.unwrap(), None);
    let r = bus.replay(tenant, &none, 1).await.unwrap();
    assert!(r.events.is_empty() && !r.truncated);
    assert!(bus.capabilities().durable);

    let ids = ["a", "a:b", "", "*", "6", "61", ":", "a\u{0}"];
    for (i, id) in ids.iter().enumerate() {
        bus.publish(delta(tenant, &SessionId::from(*id), i as u64 + 1))
            .unwrap();
    }
    for (i, id) in ids.iter().enumerate() {
        let r = bus.replay(tenant, &SessionId::from(*id), 0).await.unwrap();
        let seqs: Vec<u64> = r.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![i as u64 + 1], "session {id:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_publish_is_reported_by_flush_and_the_rest_still_lands() {
    let Some(s) = setup("").await else { return };
    let tenant = &s.tenant;
    let session = SessionId::from("ses_dup");
    let bus = &s.bus;
    for seq in [1, 2, 2, 3] {
        bus.publish(delta(tenant, &session, seq)).unwrap();
    }
    assert!(bus.flush().await.is_err(), "seq 2 twice must be reported");
    bus.flush().await.unwrap();
    let r = bus.replay(tenant, &session, 1).await.unwrap();
    let seqs: Vec<u64> = r.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_overtaken_by_retention_gets_lagged_then_continues() {
    let Some(s) = setup("&maxlen=10").await else {
        return;
    };
    let tenant = &s.tenant;
    let session = SessionId::from("ses_lag");
    let bus = &s.bus;
    let mut sub = bus
        .subscribe(tenant, Topic::Session(session.clone()), Some(1))
        .await
        .unwrap();
    for seq in 1..=2000 {
        bus.publish(lone_delta(tenant, &session, seq)).unwrap();
    }
    bus.flush().await.unwrap();
    let first = bus.replay(tenant, &session, 1).await.unwrap().events[0].seq;
    let lag = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(lag, Error::Lagged { missed } if missed == first - 1),
        "{lag:?} (first retained {first})"
    );
    for want in first..=2000 {
        assert_eq!(next(&mut sub).await.seq, want);
    }
}

#[test]
fn reads_ride_out_a_server_restart() {
    let test = "reads_ride_out_a_server_restart";
    let Some(mut server) = Redis::start(6394, "always", test) else {
        return;
    };
    let url = format!("{}?prefix=restart", server.url());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tenant = TenantId::new("t1").unwrap();
    let session = SessionId::from("ses_restart");
    let bus = rt.block_on(async {
        let bus = RedisBus::connect(&url).await.expect("bus");
        for seq in 1..=3 {
            bus.publish(delta(&tenant, &session, seq)).expect("publish");
        }
        bus.flush().await.expect("flush");
        bus
    });
    // Down, and back 1 s later while the reads below are waiting.
    server.stop(RedisStop::Kill);
    let restarted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        server.start_again();
        server
    });
    rt.block_on(async {
        assert_eq!(
            bus.last_seq(&tenant, &session)
                .await
                .expect("last_seq across a restart"),
            Some(3)
        );
        let replay = bus.replay(&tenant, &session, 2).await.expect("replay");
        let seqs: Vec<u64> = replay.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3]);
    });
    let _server = restarted.join().expect("restart");
}
