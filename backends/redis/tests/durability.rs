//! The store asks of its server, on connect, the durability its URL names (`fsync=`,
//! default `always`): a server that answers before a write is synced is refused with
//! an error naming it and its settings, unless the URL accepts it knowingly. Runs on
//! throwaway `redis-server` processes (the settings are changed with `CONFIG SET`) and
//! on a local three-master cluster, where every master is checked.
//!
//! Skipped loudly without `redis-server`; a failure under `FORGE_TEST_REQUIRE_SERVICES=1`.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_redis::RedisStore;

/// A throwaway server on a loopback port, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Server {
    fn start(port: u16) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!(
            "forge-redis-durability-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("FORGE_TEST_REQUIRE_SERVICES").as_deref() != Ok("1"),
                    "FORGE_TEST_REQUIRE_SERVICES=1 but redis-server cannot start: {e}"
                );
                eprintln!("SKIPPED: redis durability tests: redis-server cannot start: {e}");
                return None;
            }
        };
        let server = Self { child, port, dir };
        let start = Instant::now();
        while server.config(&[]).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "redis-server on port {port} did not answer"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `CONFIG SET` of the pairs given (none: a ping).
    fn config(&self, pairs: &[(&str, &str)]) -> redis::RedisResult<()> {
        config_set(self.port, pairs)
    }
}

fn config_set(port: u16, pairs: &[(&str, &str)]) -> redis::RedisResult<()> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
    if pairs.is_empty() {
        return redis::cmd("PING").query(&mut conn);
    }
    for (k, v) in pairs {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(&mut conn)?;
    }
    Ok(())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Connects a store to `url`: `Ok` or the error's kind and message.
fn open(rt: &tokio::runtime::Runtime, url: &str) -> Result<(), (String, String)> {
    rt.block_on(RedisStore::connect(url))
        .map(drop)
        .map_err(|e| (e.kind().to_owned(), e.to_string()))
}

#[test]
fn a_server_that_answers_before_syncing_is_refused_unless_the_url_accepts_it() {
    let Some(server) = Server::start(6398) else {
        return;
    };
    let rt = runtime();
    let url = server.url();
    let with = |fsync: &str| format!("{url}?prefix=dur&fsync={fsync}");

    // No AOF at all: refused by default and by everysec, accepted by off.
    let (kind, message) = open(&rt, &url).expect_err("a server without AOF is refused");
    assert_eq!(kind, "Unsupported", "{message}");
    for needle in [
        &format!("127.0.0.1:{}", server.port),
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
        .config(&[("appendonly", "yes"), ("appendfsync", "everysec")])
        .expect("CONFIG SET");
    let (_, message) = open(&rt, &url).expect_err("everysec is refused by default");
    assert!(message.contains("appendfsync everysec"), "{message}");
    open(&rt, &with("everysec")).expect("fsync=everysec accepts everysec");

    // Every write synced before the answer: accepted by every level.
    server
        .config(&[("appendfsync", "always")])
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
    let Some(cluster) = common::cluster::Cluster::start(3) else {
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
