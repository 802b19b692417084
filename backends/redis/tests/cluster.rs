//! The Redis backend on a real Redis Cluster (three masters on loopback, started by
//! the test): the whole conformance suite through the driver (leaving no key on any
//! node), the key layout (every key of a tenant in
//! one slot, tenants spread over the nodes), and the projector worker.
//!
//! Skipped loudly where `redis-server` is not installed (see `forge_testkit::servers::Cluster`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::TestPrefix;
use forge_conformance::DriverFactory;
use forge_core::{Bus, Envelope, Event, Store, SyncEvent, TenantId};
use forge_redis::{KeyLayout, ProjectorWorker, RedisStore, WorkerOptions};
use forge_testkit::servers::Cluster;

#[test]
fn the_conformance_suite_passes_on_a_three_master_cluster() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let p = TestPrefix::on_cluster(&cluster, "");
    let factory = DriverFactory::of(&forge_redis::DRIVER, p.url.clone());
    let report = forge_conformance::run(&factory, &forge_conformance::Config::from_env());
    eprintln!("{report}");
    assert!(
        report.is_success(),
        "conformance failed on the cluster:\n{report}"
    );
    let (passed, ..) = report.counts();
    assert!(passed > 0, "no property ran:\n{report}");
    // Every case's keys went with its teardown, on every node.
    drop(factory);
    assert_eq!(p.left(), 0, "keys left under {} after teardown", p.prefix);
}

/// The slot of every key under `prefix` on each node, by `CLUSTER KEYSLOT`.
fn slots_by_tenant(cluster: &Cluster, prefix: &str) -> BTreeMap<String, BTreeSet<(u16, i64)>> {
    let mut out: BTreeMap<String, BTreeSet<(u16, i64)>> = BTreeMap::new();
    for (url, port) in cluster.node_urls().iter().zip(&cluster.ports) {
        let mut conn = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .expect("node connection");
        let keys: Vec<String> =
            redis::Commands::scan_match::<_, String>(&mut conn, format!("{prefix}:t:*"))
                .expect("scan")
                .filter_map(Result::ok)
                .collect();
        for key in keys {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query(&mut conn)
                .expect("keyslot");
            let Some((tenant, _)) = key
                .split_once(":t:{")
                .and_then(|(_, rest)| rest.split_once('}'))
            else {
                panic!("key {key} has no tenant hash tag");
            };
            let tenant = tenant.to_owned();
            out.entry(tenant).or_default().insert((*port, slot));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_keys_share_a_slot_and_tenants_spread_over_the_nodes() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let p = TestPrefix::on_cluster(&cluster, "");
    let store = p.store().await;
    assert!(store.is_cluster());
    assert_eq!(store.keys().layout(), KeyLayout::Tagged);
    let bus = p.bus().await;
    // 24 tenants with two sessions each, written as one batch that spans them all
    // (as the group-commit projector writes), then published.
    let tenants: Vec<TenantId> = (0..24)
        .map(|i| TenantId::new(&format!("tenant-{i}")).expect("tenant"))
        .collect();
    let mut batch = Vec::new();
    for t in &tenants {
        for s in ["ses_0", "ses_1"] {
            let (msg, part) = common::user_message(&s.into(), "msg_1", "prt_1", "hello");
            batch.extend(common::opening(t, s, msg, part));
        }
    }
    store
        .apply(&batch)
        .await
        .expect("a batch spanning 24 tenants");
    for env in &batch {
        bus.publish(common::bus_event(env)).expect("publish");
    }
    bus.flush().await.expect("flush");
    for t in &tenants {
        let sessions = store.sessions(t).await.expect("sessions");
        assert_eq!(sessions.len(), 2, "tenant {t}");
        for s in &sessions {
            assert_eq!(s.seq, 3);
            let replay = bus.replay(t, &s.info.id, 1).await.expect("replay");
            assert_eq!(replay.events.len(), 3, "tenant {t} session {}", s.info.id);
        }
    }
    // A batch naming a missing session in one tenant writes nothing in any tenant.
    let mut bad = batch[..3].to_vec();
    for e in &mut bad {
        e.tenant = TenantId::new("tenant-new").expect("tenant");
    }
    let mut orphan = batch[4].clone();
    orphan.session_id = "ses_missing".into();
    orphan.tenant = tenants[5].clone();
    if let SyncEvent::MessageUpdated { info } = &mut orphan.event {
        info.session_id = "ses_missing".into();
    }
    bad.push(orphan);
    let err = store.apply(&bad).await.expect_err("a missing session");
    assert!(err.to_string().contains("ses_missing"), "{err}");
    assert!(
        store
            .sessions(&TenantId::new("tenant-new").expect("tenant"))
            .await
            .expect("sessions")
            .is_empty(),
        "the refused batch wrote its first tenant's part"
    );

    let slots = slots_by_tenant(&cluster, &p.prefix);
    assert_eq!(slots.len(), tenants.len(), "{slots:?}");
    for (tenant, at) in &slots {
        assert_eq!(at.len(), 1, "tenant {tenant}'s keys span slots: {at:?}");
    }
    let nodes: BTreeSet<u16> = slots.values().flatten().map(|(port, _)| *port).collect();
    assert_eq!(nodes.len(), 3, "24 tenants all landed on {nodes:?}");
    eprintln!(
        "cluster layout: {} tenants over {} nodes, each tenant's keys in one slot",
        slots.len(),
        nodes.len()
    );
    assert!(store.clear().await.expect("clear") > 0);
    assert_eq!(p.left(), 0, "clear() left keys on some node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_holds_per_session_across_the_slots_of_a_cluster() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let p = TestPrefix::on_cluster(&cluster, "");
    let store = p.store().await;
    let (a, b) = (
        TenantId::new("tenant-1").expect("tenant"),
        TenantId::new("tenant-4").expect("tenant"),
    );
    let s: forge_core::SessionId = "ses_f".into();
    let take_over = |holder: &str| {
        forge_core::ClaimRequest::new(holder, 0).mode(forge_core::ClaimMode::TakeOver)
    };
    let mut epochs = Vec::new();
    for t in [&a, &b] {
        epochs.push(
            store
                .claim(t, &s, &take_over("w1"))
                .await
                .expect("claim")
                .epoch,
        );
    }
    assert_eq!(epochs, [1, 1]);
    let open = |t: &TenantId, epoch: u64| {
        let (msg, part) = common::user_message(&s, "msg_1", "prt_1", "hello");
        common::opening(t, s.as_str(), msg, part)
            .into_iter()
            .map(|e| e.with_epoch(Some(epoch)))
            .collect::<Vec<_>>()
    };
    // b's session is taken over: a batch spanning both tenants, stale in b, writes
    // nothing in either.
    assert_eq!(
        store
            .claim(&b, &s, &take_over("w2"))
            .await
            .expect("claim")
            .epoch,
        2
    );
    let mut batch = open(&a, 1);
    batch.extend(open(&b, 1));
    let err = store.apply(&batch).await.expect_err("stale in tenant-4");
    assert_eq!(err.kind(), forge_core::ErrorKind::Fenced, "{err}");
    assert!(err.to_string().contains("w2"), "{err}");
    for t in [&a, &b] {
        assert!(
            store.session(t, &s).await.expect("session").is_none(),
            "{t}"
        );
    }
    let mut batch = open(&a, 1);
    batch.extend(open(&b, 2));
    store.apply(&batch).await.expect("current epochs");
    // The record is in its session's slot and outlives the session.
    let deleted = Envelope::new(
        b.clone(),
        s.clone(),
        4,
        SyncEvent::SessionDeleted {
            session_id: s.clone(),
        },
    )
    .with_epoch(Some(2));
    store.apply(&[deleted]).await.expect("delete");
    let kept = store
        .claimed(&b, &s)
        .await
        .expect("claimed")
        .expect("record kept");
    assert_eq!((kept.epoch, kept.holder.as_str()), (2, "w2"));
    let mut conn = redis::cluster::ClusterClient::new(vec![cluster.url()])
        .and_then(|c| c.get_connection())
        .expect("cluster connection");
    let slot = |conn: &mut redis::cluster::ClusterConnection, key: &str| -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(conn)
            .expect("keyslot")
    };
    for t in [&a, &b] {
        assert_eq!(
            slot(&mut conn, &store.keys().fence(t, &s)),
            slot(&mut conn, &store.keys().sessions(t)),
            "tenant {t}'s fence record is outside its slot"
        );
    }
    assert_ne!(
        slot(&mut conn, &store.keys().fence(&a, &s)),
        slot(&mut conn, &store.keys().fence(&b, &s)),
        "pick tenants in different slots"
    );
    store.clear().await.expect("clear");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projector_worker_projects_a_tenant_stream_on_the_cluster() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    // Three work shards: one XREADGROUP reads all three streams (one slot).
    let p = TestPrefix::on_cluster(&cluster, "&shards=3");
    let bus = p.bus().await;
    let target = Arc::new(forge_core::MemoryStore::new());
    let tenant = TenantId::new("acme").expect("tenant");
    let session: forge_core::SessionId = "ses_w".into();
    let (msg, part) = common::user_message(&session, "msg_1", "prt_1", "projected");
    let info = common::session(session.as_str());
    let events = [
        Event::Sync(SyncEvent::SessionUpdated { info }),
        Event::Sync(SyncEvent::MessageUpdated { info: msg }),
        common::delta(&tenant, &session, 3).event.clone(),
        Event::Sync(SyncEvent::PartUpdated { part }),
    ];
    for (i, event) in events.into_iter().enumerate() {
        bus.publish(forge_core::BusEvent::new(Envelope {
            tenant: tenant.clone(),
            session_id: session.clone(),
            seq: i as u64 + 1,
            epoch: None,
            event,
        }))
        .expect("publish");
    }
    bus.flush().await.expect("flush");
    let mut worker = ProjectorWorker::connect(
        &p.url,
        Arc::clone(&target) as Arc<dyn Store>,
        tenant.clone(),
        "projector",
        "w1",
        WorkerOptions {
            lease: Duration::from_secs(2),
            count: 64,
        },
    )
    .await
    .expect("worker");
    let stats = worker.run_until_idle().await.expect("worker runs");
    // Work streams carry the three sync events only, not the delta.
    assert_eq!((stats.applied, stats.acked), (3, 3), "{stats:?}");
    assert_eq!(
        worker.shards_held(),
        vec![0, 1, 2],
        "one worker holds every shard"
    );
    let m = target
        .message(&tenant, &session, &"msg_1".into())
        .await
        .expect("read")
        .expect("projected message");
    assert_eq!(common::text_of(&m.parts[0]), Some("projected"));
    p.store().await.clear().await.expect("clear");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_refuses_a_prefix_in_the_flat_layout_by_name() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let p = TestPrefix::on_cluster(&cluster, "");
    let prefix = &p.prefix;
    let mut conn = redis::cluster::ClusterClient::new(vec![cluster.url()])
        .and_then(|c| c.get_connection())
        .expect("cluster connection");
    redis::cmd("SET")
        .arg(format!("{prefix}:layout"))
        .arg("1")
        .query::<()>(&mut conn)
        .expect("set marker");
    let err = RedisStore::connect(&p.url)
        .await
        .expect_err("flat layout on a cluster");
    let text = err.to_string();
    assert!(
        text.contains("flat layout") && text.contains(prefix.as_str()),
        "{text}"
    );
    let db = RedisStore::connect(&format!("{}/2", cluster.url()))
        .await
        .expect_err("database 2 on a cluster");
    assert!(db.to_string().contains("only database 0"), "{db}");
}

/// The full-text index on a cluster: a batch spanning tenants indexes each in its own
/// slot, searches answer as the scan does, and `search=off` then `on` drop and build
/// every tenant's index, found by a scan of every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_indexes_each_tenant_in_its_slot_and_rebuilds_across_the_masters() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let p = TestPrefix::on_cluster(&cluster, "");
    let store = p.store().await;
    let tenants: Vec<TenantId> = (0..12)
        .map(|i| TenantId::new(&format!("tenant-{i}")).expect("tenant"))
        .collect();
    let mut batch = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        for s in ["ses_0", "ses_1"] {
            let text = format!("hello {s} tenant {i} common words {}", "word ".repeat(i));
            let (msg, part) = common::user_message(&s.into(), "msg_1", "prt_1", &text);
            batch.extend(common::opening(t, s, msg, part));
        }
    }
    store.apply(&batch).await.expect("apply");
    let check = |store: RedisStore| {
        let tenants = tenants.clone();
        async move {
            for t in &tenants {
                for text in ["hello", "common words", "ses_1", "word", "absent"] {
                    let q = forge_core::SearchQuery::new(text);
                    let got = store.search(t, &q).await.expect("search");
                    let want = forge_core::search::scan(&store, t, &q).await.expect("scan");
                    assert_eq!(got, want, "tenant {t}, {text:?}");
                }
            }
            store
        }
    };
    let store = check(store).await;
    assert_eq!(
        store
            .search(&tenants[3], &forge_core::SearchQuery::new("hello"))
            .await
            .expect("search")
            .len(),
        2
    );
    let slots = slots_by_tenant(&cluster, &p.prefix);
    for (tenant, at) in &slots {
        assert_eq!(at.len(), 1, "tenant {tenant}'s keys span slots: {at:?}");
    }
    let index_keys = || {
        cluster
            .node_urls()
            .iter()
            .map(|url| {
                let mut conn = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("node connection");
                redis::Commands::scan_match::<_, String>(&mut conn, format!("{}:t:*:x*", p.prefix))
                    .expect("scan")
                    .filter_map(Result::ok)
                    .count()
            })
            .sum::<usize>()
    };
    assert!(index_keys() > tenants.len() * 4);
    let off = RedisStore::connect(&format!("{}&search=off", p.url))
        .await
        .expect("off");
    assert_eq!(index_keys(), tenants.len(), "only the states are left");
    drop(off);
    let on = check(p.store().await).await;
    assert!(index_keys() > tenants.len() * 4);
    drop(on);
}
