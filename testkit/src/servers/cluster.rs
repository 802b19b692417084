//! A real Redis Cluster on loopback, started by the test itself: three masters
//! (`redis-server --cluster-enabled yes` on three free ports, joined with
//! `redis-cli --cluster create`), killed and deleted when dropped.
//!
//! Skipped (loudly) where `redis-server` or `redis-cli` is not installed; with
//! `FORGE_TEST_REQUIRE_SERVICES=1` that fails instead.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::on_path;
use crate::skip;

/// A running Redis Cluster: masters only, every write synced before its answer
/// (`appendfsync always`).
pub struct Cluster {
    nodes: Vec<Child>,
    /// The nodes' ports, in start order.
    pub ports: Vec<u16>,
    dir: PathBuf,
}

impl Cluster {
    /// The URL of the first node: the cluster client finds the others.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.ports[0])
    }

    /// The URL of every node.
    pub fn node_urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// Starts a cluster of `masters` nodes, or returns `None` after a skip notice.
    pub fn start(masters: usize) -> Option<Self> {
        let missing: Vec<&str> = ["redis-server", "redis-cli"]
            .into_iter()
            .filter(|b| !on_path(b))
            .collect();
        if !missing.is_empty() {
            let why = format!(
                "{} not installed (apt-get install redis-server), so no local Redis Cluster",
                missing.join(" and ")
            );
            skip("redis cluster tests", &why);
            return None;
        }
        let ports = free_ports(masters);
        let dir = std::env::temp_dir().join(format!(
            "forge-redis-cluster-{}-{}",
            std::process::id(),
            ports[0]
        ));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let mut cluster = Self {
            nodes: Vec::new(),
            ports: ports.clone(),
            dir: dir.clone(),
        };
        for port in &ports {
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--cluster-node-timeout", "2000"])
                .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
                .args(["--save", ""])
                // Every write synced before the answer: what the store asks of a
                // server by default (`fsync=always`).
                .args(["--appendonly", "yes", "--appendfsync", "always"])
                .args(["--appenddirname", &format!("aof-{port}")])
                .args(["--logfile", &format!("node-{port}.log")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            cluster.nodes.push(child);
        }
        for port in &ports {
            wait_for(*port, "PING", "PONG");
        }
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for port in &ports {
            wait_for(*port, "CLUSTER INFO", "cluster_state:ok");
        }
        // Every node must know every slot's owner before a client's first command.
        for port in &ports {
            let start = Instant::now();
            loop {
                let slots = cli(*port, "CLUSTER SLOTS");
                if slots.matches("127.0.0.1").count() >= masters {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "node {port} does not see {masters} masters: {slots}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Some(cluster)
    }

    /// Kills the node at `port` (SIGKILL).
    pub fn kill_node(&mut self, port: u16) {
        if let Some(i) = self.ports.iter().position(|p| *p == port) {
            let _ = self.nodes[i].kill();
            let _ = self.nodes[i].wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p PORT ARGS…` output (empty on failure).
fn cli(port: u16, args: &str) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args.split_whitespace())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn wait_for(port: u16, args: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = cli(port, args);
        if got.contains(want) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "redis node {port}: `{args}` did not give {want:?} within 30 s (last: {got:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `n` ports free now whose cluster-bus ports (+10000) are free too.
fn free_ports(n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    let mut tries = 0;
    while out.len() < n {
        tries += 1;
        assert!(tries < 10_000, "no free ports for a redis cluster");
        // Below the ephemeral range (32768 and up), so no client socket takes a node's
        // port or its cluster-bus port (+10000) between the check and the start.
        let port: u16 = 11_000 + rand::random::<u16>() % 2_000;
        if out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            out.push(port);
        }
    }
    out
}
