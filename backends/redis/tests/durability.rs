//! The store asks of its server, on connect, the durability its URL names (`fsync=`,
//! default `always`): a server that answers before a write is synced is refused with
//! an error naming it and its settings, unless the URL accepts it knowingly. Runs on
//! throwaway `redis-server` processes (the settings are changed with `CONFIG SET`) and
//! on a local three-master cluster, where every master is checked.
//!
//! Skipped loudly without `redis-server`; a failure under `FORGE_TEST_REQUIRE_SERVICES=1`.

use forge_redis::RedisStore;
use forge_testkit::current_thread_runtime as runtime;
use forge_testkit::servers::{config_set, Cluster, Redis};

/// Connects a store to `url`: `Ok` or the error's kind and message.
fn open(rt: &tokio::runtime::Runtime, url: &str) -> Result<(), (String, String)> {
    rt.block_on(RedisStore::connect(url))
        .map(drop)
        .map_err(|e| (e.kind().as_str().to_owned(), e.to_string()))
}

#[test]
fn a_server_that_answers_before_syncing_is_refused_unless_the_url_accepts_it() {
    let test = "a_server_that_answers_before_syncing_is_refused_unless_the_url_accepts_it";
    let Some(server) = Redis::without_aof(6398, test) else {
        return;
    };
    let rt = runtime();
    let url = server.url();
    let with = |fsync: &str| format!("{url}?prefix=dur&fsync={fsync}");

    // No AOF at all: refused by default and by everysec, accepted by off.
    let (kind, message) = open(&rt, &url).expect_err("a server without AOF is refused");
    assert_eq!(kind, "Unsupported", "{message}");
    for needle in [
        &format!("127.0.0.1:{}", server.port()),
        "appendonly no",
        "power cut",
        "appendfsync always",
        "fsync=off",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
    assert!(open(&rt, &with("everysec")).is_err());
    open(&rt, &with("off")).expect("fsync=off accepts any server");

    // AOF synced once a second: refused by default, accepted by everysec.
    server
        .config_set(&[("appendonly", "yes"), ("appendfsync", "everysec")])
        .expect("CONFIG SET");
    let (_, message) = open(&rt, &url).expect_err("everysec is refused by default");
    assert!(message.contains("appendfsync everysec"), "{message}");
    open(&rt, &with("everysec")).expect("fsync=everysec accepts everysec");

    // Every write synced before the answer: accepted by every level.
    server
        .config_set(&[("appendfsync", "always")])
        .expect("CONFIG SET");
    for fsync in ["always", "everysec", "off"] {
        open(&rt, &with(fsync)).expect("an always server is accepted");
    }
    open(&rt, &url).expect("the default accepts an always server");

    // A mistyped level is an input error naming it.
    let (kind, message) = open(&rt, &with("sometimes")).expect_err("bad fsync value");
    assert_eq!(kind, "InvalidInput", "{message}");
    assert!(message.contains("sometimes"), "{message}");
}

#[test]
fn on_a_cluster_every_master_is_checked() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let rt = runtime();
    open(&rt, &cluster.url()).expect("a cluster of always masters is accepted");
    let weak = cluster.ports[2];
    config_set(weak, &[("appendfsync", "everysec")]).expect("CONFIG SET");
    let (kind, message) = open(&rt, &cluster.url()).expect_err("one weak master is refused");
    assert_eq!(kind, "Unsupported", "{message}");
    assert!(
        message.contains(&format!(":{weak}")) && message.contains("appendfsync everysec"),
        "the refusal names the weak master: {message}"
    );
    open(&rt, &format!("{}?fsync=everysec", cluster.url())).expect("everysec accepted");
}
