//! A throwaway Postgres cluster: `initdb` into a temp dir (as the `postgres` OS user when
//! running as root: initdb refuses root), then `pg_ctl start|stop -m fast|immediate`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{find, is_root};
use crate::{skip, wait_until};

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
    /// initdb and start on `port` (pick one below the ephemeral port range, such as
    /// 25432–25434, so that no client socket holds it), or `None` after a loud skip
    /// naming `test`.
    pub fn start(port: u16, test: &str) -> Option<Self> {
        Self::start_in(port, test, &std::env::temp_dir())
    }

    /// As [`Postgres::start`], with the cluster's directory made under `parent` (a
    /// test file system, say).
    pub fn start_in(port: u16, test: &str, parent: &Path) -> Option<Self> {
        let Some(initdb) = find("initdb", PG_DIRS) else {
            skip(test, "initdb not found (PostgreSQL server binaries)");
            return None;
        };
        let bin = initdb.parent().expect("bin dir").to_owned();
        if find("pg_ctl", &[bin.to_str().expect("utf-8 path")]).is_none() {
            skip(test, "pg_ctl not found next to initdb");
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
            std::thread::sleep(Duration::from_secs(1));
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
