//! A throwaway Redis server: `redis-server --appendonly yes --appendfsync POLICY --dir
//! TMP` (or without AOF), in a process group of its own, stopped by SIGKILL of the group
//! or by `SHUTDOWN`.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::process::{find, kill_group};
use crate::{skip, wait_until};

/// How a Redis server is stopped.
#[derive(Clone, Copy, Debug)]
pub enum RedisStop {
    /// SIGKILL of the server process: no chance to write anything more.
    Kill,
    /// The `SHUTDOWN` command: the server flushes its AOF and exits.
    Shutdown,
}

/// A throwaway Redis server, with its AOF on unless made by [`Redis::without_aof`].
pub struct Redis {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// `appendfsync`, or `None` for `appendonly no`.
    fsync: Option<&'static str>,
    child: Option<Child>,
}

impl Redis {
    /// Starts `redis-server` on `port` (pick one below the ephemeral port range, such as
    /// 6390–6399) with `appendfsync` = `fsync` (`always`, `everysec` or `no`), or `None`
    /// after a loud skip naming `test`.
    pub fn start(port: u16, fsync: &'static str, test: &str) -> Option<Self> {
        Self::start_in(port, fsync, test, &std::env::temp_dir())
    }

    /// As [`Redis::start`], with its directory (the AOF) made under `parent`.
    pub fn start_in(port: u16, fsync: &'static str, test: &str, parent: &Path) -> Option<Self> {
        Self::launch(port, Some(fsync), test, parent)
    }

    /// As [`Redis::start`] with `appendonly no`: writes are answered before any sync
    /// (change it with [`Redis::config_set`]).
    pub fn without_aof(port: u16, test: &str) -> Option<Self> {
        Self::launch(port, None, test, &std::env::temp_dir())
    }

    fn launch(port: u16, fsync: Option<&'static str>, test: &str, parent: &Path) -> Option<Self> {
        let Some(bin) = find("redis-server", &["/usr/bin", "/usr/local/bin"]) else {
            skip(test, "redis-server not found");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("forge-redis-")
            .tempdir_in(parent)
            .expect("temp dir");
        let mut r = Self {
            dir,
            bin,
            port,
            fsync,
            child: None,
        };
        r.start_again();
        Some(r)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn ping(&self) -> bool {
        ::redis::Client::open(self.url().as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
            .and_then(|mut c| ::redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// `CONFIG SET` of each pair on this server.
    pub fn config_set(&self, pairs: &[(&str, &str)]) -> ::redis::RedisResult<()> {
        config_set(self.port, pairs)
    }

    /// Starts the stopped server on the same directory (its AOF is loaded) and waits
    /// until it answers.
    pub fn start_again(&mut self) {
        // A process group of its own: a kill takes the server's forked children too (an
        // AOF rewrite), as a power cut would.
        let child = Command::new(&self.bin)
            .process_group(0)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(match self.fsync {
                Some(fsync) => vec!["--appendonly", "yes", "--appendfsync", fsync],
                None => vec!["--appendonly", "no"],
            })
            .args(["--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        wait_until("redis-server answering", Duration::from_secs(30), || {
            self.ping()
        });
    }

    /// Stops the server and waits for its process to end.
    pub fn stop(&mut self, how: RedisStop) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        match how {
            RedisStop::Kill => {
                kill_group(child.id());
            }
            RedisStop::Shutdown => {
                let sent = ::redis::Client::open(self.url().as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                    .map(|mut c| ::redis::cmd("SHUTDOWN").query::<()>(&mut c));
                if sent.is_err() {
                    let _ = child.kill();
                }
            }
        }
        let _ = child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(child.id());
            let _ = child.wait();
        }
    }
}

/// `CONFIG SET` of each pair on the Redis server (or cluster node) at
/// `127.0.0.1:port`; with no pairs, a `PING`.
pub fn config_set(port: u16, pairs: &[(&str, &str)]) -> ::redis::RedisResult<()> {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
    if pairs.is_empty() {
        return ::redis::cmd("PING").query(&mut conn);
    }
    for (k, v) in pairs {
        ::redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(&mut conn)?;
    }
    Ok(())
}
