//! Throwaway Postgres and Redis servers for restart tests: started by the test on a
//! port of its own, stopped and restarted on demand, and stopped when dropped (also
//! when the test panics).
//!
//! Postgres: `initdb` into a temp dir (as the `postgres` OS user when running as root:
//! initdb refuses root), then `pg_ctl start|stop -m fast|immediate`. Redis:
//! `redis-server --appendonly yes --appendfsync POLICY --dir TMP`, stopped by SIGKILL or
//! `SHUTDOWN`. When the binaries are absent the caller skips loudly; with
//! `FORGE_TEST_REQUIRE_SERVICES=1` their absence is a failure.

#![allow(dead_code)]

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a missing service must fail the test.
fn required() -> bool {
    std::env::var("FORGE_TEST_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// Skips loudly (or fails under `FORGE_TEST_REQUIRE_SERVICES=1`).
fn absent(what: &str, test: &str) {
    assert!(
        !required(),
        "{test}: {what} (FORGE_TEST_REQUIRE_SERVICES=1, so this is a failure)"
    );
    eprintln!("SKIPPED {test}: {what}");
}

fn find(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Waits until `ready` holds, up to `limit`; panics naming `what` otherwise.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How a Postgres server is stopped.
#[derive(Clone, Copy, Debug)]
pub enum PgStop {
    /// `pg_ctl stop -m fast`: sessions are ended, a checkpoint is written.
    Fast,
    /// `pg_ctl stop -m immediate`: the server quits without a checkpoint (crash
    /// recovery on the next start).
    Immediate,
}

/// A throwaway Postgres cluster.
pub struct Postgres {
    dir: tempfile::TempDir,
    /// Its Unix socket's directory (apart from `dir`: a test file system may not hold
    /// sockets).
    sockets: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    via_runuser: bool,
    running: bool,
}

const PG_DIRS: &[&str] = &["/usr/lib/postgresql/15/bin", "/usr/local/bin", "/usr/bin"];

impl Postgres {
    /// initdb and start on `port` (one of 25432–25434: below the ephemeral port range, so no client socket holds it), or `None` after a loud skip.
    pub fn start(port: u16, test: &str) -> Option<Self> {
        Self::start_in(port, test, &std::env::temp_dir())
    }

    /// As [`Postgres::start`], with the cluster's directory made under `parent` (a
    /// test file system, say).
    pub fn start_in(port: u16, test: &str, parent: &Path) -> Option<Self> {
        let Some(initdb) = find("initdb", PG_DIRS) else {
            absent("initdb not found (PostgreSQL server binaries)", test);
            return None;
        };
        let bin = initdb.parent().expect("bin dir").to_owned();
        if find("pg_ctl", &[bin.to_str().expect("utf-8 path")]).is_none() {
            absent("pg_ctl not found next to initdb", test);
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("forge-pg-")
            .tempdir_in(parent)
            .expect("temp dir");
        let sockets = tempfile::Builder::new()
            .prefix("forge-pg-sockets-")
            .tempdir()
            .expect("temp dir");
        let via_runuser = is_root();
        if via_runuser {
            for d in [dir.path(), sockets.path()] {
                let chown = Command::new("chown")
                    .arg("-R")
                    .arg("postgres")
                    .arg(d)
                    .status()
                    .expect("chown");
                assert!(chown.success(), "chown of {} failed", d.display());
            }
        }
        let pg = Self {
            dir,
            sockets,
            bin,
            port,
            via_runuser,
            running: false,
        };
        let data = pg.data();
        let out = pg
            .command("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = pg;
        pg.start_again();
        Some(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.via_runuser {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the stopped server and waits until it accepts connections.
    pub fn start_again(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.sockets.path().display()
        );
        let mut attempts = 0;
        let out = loop {
            attempts += 1;
            let out = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-o", &opts, "-l"])
                .arg(self.dir.path().join("log"))
                .args(["-w", "-t", "60", "start"])
                .stdout(Stdio::null())
                .output()
                .expect("run pg_ctl start");
            // Another socket on the port (a server of an earlier test still closing):
            // it goes away by itself.
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            if out.status.success() || attempts >= 10 || !log.contains("Address already in use") {
                break out;
            }
            let _ = std::fs::remove_file(self.dir.path().join("log"));
            std::thread::sleep(std::time::Duration::from_secs(1));
        };
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
        );
        self.running = true;
    }

    /// The postmaster's process id, from `postmaster.pid` (none when it is absent).
    fn postmaster_pid(&self) -> Option<u32> {
        let pidfile = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        pidfile.lines().next()?.trim().parse().ok()
    }

    /// Stops the server (`-m fast` or `-m immediate`), waiting until its postmaster
    /// process is gone: `pg_ctl` returns once `postmaster.pid` is removed, a moment
    /// before the process has exited. A `postmaster.pid` that comes back (a power cut
    /// drops its unsynced removal) must name a process that no longer exists, or the
    /// next start refuses the data directory as in use.
    pub fn stop(&mut self, how: PgStop) {
        let mode = match how {
            PgStop::Fast => "fast",
            PgStop::Immediate => "immediate",
        };
        let pid = self.postmaster_pid();
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "-t", "60", "stop"])
            .stdout(Stdio::null())
            .output()
            .expect("run pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop -m {mode} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(pid) = pid {
            let proc = PathBuf::from(format!("/proc/{pid}"));
            wait_until(
                &format!("the postmaster (pid {pid}) exiting"),
                Duration::from_secs(30),
                || !proc.exists(),
            );
        }
        self.running = false;
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.running {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "-t", "30", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// How a Redis server is stopped.
#[derive(Clone, Copy, Debug)]
pub enum RedisStop {
    /// SIGKILL of the server process: no chance to write anything more.
    Kill,
    /// The `SHUTDOWN` command: the server flushes its AOF and exits.
    Shutdown,
}

/// A throwaway Redis server with AOF on.
pub struct Redis {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    fsync: &'static str,
    child: Option<Child>,
}

impl Redis {
    /// Starts `redis-server` on `port` (one of 6390–6394) with `appendfsync` = `fsync`
    /// (`always`, `everysec` or `no`), or `None` after a loud skip.
    pub fn start(port: u16, fsync: &'static str, test: &str) -> Option<Self> {
        Self::start_in(port, fsync, test, &std::env::temp_dir())
    }

    /// As [`Redis::start`], with its directory (the AOF) made under `parent`.
    pub fn start_in(port: u16, fsync: &'static str, test: &str, parent: &Path) -> Option<Self> {
        let Some(bin) = find("redis-server", &["/usr/bin", "/usr/local/bin"]) else {
            absent("redis-server not found", test);
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
        redis::Client::open(self.url().as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// Starts the stopped server on the same directory (its AOF is loaded) and waits
    /// until it answers.
    pub fn start_again(&mut self) {
        // A process group of its own: a kill takes the server's forked children too (an
        // AOF rewrite), as a power cut would.
        let child = Command::new(&self.bin)
            .process_group(0)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "yes", "--appendfsync", self.fsync])
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
                let sent = redis::Client::open(self.url().as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                    .map(|mut c| redis::cmd("SHUTDOWN").query::<()>(&mut c));
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

/// SIGKILL to every process of the group `pgid`, then waits until none is left but the
/// leader (a zombie until its parent waits for it) and other zombies.
fn kill_group(pgid: u32) {
    let group = format!("-{pgid}");
    let _ = Command::new("kill")
        .args(["-KILL", "--", &group])
        .stderr(Stdio::null())
        .status();
    wait_until(
        &format!("the processes of group {pgid} exiting"),
        Duration::from_secs(30),
        || {
            group_members(pgid)
                .iter()
                .all(|&(pid, state)| pid == pgid || state == 'Z')
        },
    );
}

/// The processes of group `pgid` and their states, read from `/proc/PID/stat`
/// (`PID (COMM) STATE PPID PGRP …`).
fn group_members(pgid: u32) -> Vec<(u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?.chars().next()?;
            let group: u32 = rest.nth(1)?.parse().ok()?;
            (group == pgid).then_some((pid, state))
        })
        .collect()
}
