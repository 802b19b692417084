//! Throwaway servers whose data lives on a [`Device`]: a Postgres cluster (`initdb`,
//! `pg_ctl`) and a Redis server with its AOF on. Each runs with its defaults but for
//! what the measurement needs, stated on each; its log goes elsewhere (a log is not
//! storage); it is stopped when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::{find_tool, is_root, run, tool, Device};

/// A free TCP port on loopback (the kernel's choice; free a moment later too).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}

/// Polls `ready` every 100 ms until it holds or `limit` passes.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut ready: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !ready().await {
        if start.elapsed() > limit {
            bail!("{what}: not ready after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Postgres

/// Where the Postgres server binaries are: `pg_config --bindir`, the newest
/// `/usr/lib/postgresql/*/bin`, or `PATH`.
fn pg_bindir() -> Option<PathBuf> {
    let has_all = |d: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|t| d.join(t).is_file())
    };
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_all(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.into_iter().rev().find(|(_, d)| has_all(d)) {
        return Some(dir);
    }
    find_tool("initdb")
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|d| has_all(d))
}

/// A Postgres cluster made by `initdb` on a device, with the server's defaults
/// (`fsync`, `synchronous_commit`, `full_page_writes` on; `max_wal_size` 1 GB;
/// `checkpoint_timeout` 5 min) but `listen_addresses` (loopback), the port, the socket
/// directory and the log file (off the device).
pub struct PgCluster {
    data: PathBuf,
    /// The log and the socket, off the device.
    aside: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    running: bool,
}

impl PgCluster {
    /// Why no cluster can be made here, in one line; `None` when one can.
    pub fn unavailable() -> Option<String> {
        match pg_bindir() {
            None => Some("no PostgreSQL server binaries (initdb, pg_ctl, postgres)".to_owned()),
            Some(_) if is_root() && find_tool("runuser").is_none() => {
                Some("running as root without runuser (initdb refuses root)".to_owned())
            }
            Some(_) => None,
        }
    }

    /// `initdb` into the device's `postgres/` and starts the server (as the `postgres`
    /// user when running as root: initdb refuses root).
    ///
    /// # Errors
    /// When a step fails, with what the tool printed.
    pub fn start(device: &Device) -> Result<Self> {
        let bin = pg_bindir().ok_or_else(|| anyhow!("PostgreSQL server binaries not found"))?;
        let data = device.path().join("postgres");
        std::fs::create_dir(&data).with_context(|| format!("creating {}", data.display()))?;
        let aside = tempfile::Builder::new()
            .prefix("forge-device-pg-")
            .tempdir()
            .context("creating the log and socket directory")?;
        let as_postgres = is_root();
        if as_postgres {
            for d in [data.as_path(), aside.path()] {
                run(Command::new("chown").args(["-R", "postgres"]).arg(d))?;
            }
        }
        let mut pg = Self {
            data,
            aside,
            bin,
            port: free_port()?,
            as_postgres,
            running: false,
        };
        run(pg
            .command("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(&pg.data))?;
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            pg.port,
            pg.aside.path().display()
        );
        let log = pg.aside.path().join("log");
        let started = run(pg
            .command("pg_ctl")
            .arg("-D")
            .arg(&pg.data)
            .args(["-o", &opts, "-l"])
            .arg(&log)
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null()));
        if let Err(e) = started {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(e.context(format!("starting postgres; its log:\n{log}")));
        }
        pg.running = true;
        Ok(pg)
    }

    fn command(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut c = tool("runuser");
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

    /// Writes and checkpoints `mib` MiB of WAL (a table filled and dropped), so that the
    /// WAL segments a run uses are recycled ones, as on a server that has been running,
    /// not new ones zero-filled at creation. Returns the WAL segments on hand after it.
    ///
    /// # Errors
    /// When a statement fails.
    pub async fn warm_up(&self, mib: u32) -> Result<u64> {
        let mut conn = crate::probe::pg_connect(&self.url()).await?;
        // 2,000-byte rows stay inline and uncompressed: about their size in WAL.
        let rows = u64::from(mib) * 512;
        let sql = format!(
            "CREATE TABLE forge_bench_warm_up AS \
               SELECT g, repeat(md5(g::text), 62) AS pad FROM generate_series(1, {rows}) g;\n\
             DROP TABLE forge_bench_warm_up;\n\
             CHECKPOINT;\n\
             SELECT pg_switch_wal();\n\
             CHECKPOINT;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .context("warming up the cluster's WAL")?;
        let (segments,): (i64,) = sqlx::query_as("SELECT count(*) FROM pg_ls_waldir()")
            .fetch_one(&mut conn)
            .await
            .context("counting WAL segments")?;
        let _ = sqlx::Connection::close(conn).await;
        Ok(u64::try_from(segments).unwrap_or(0))
    }

    /// `CHECKPOINT`: what the WAL holds is written to the tables and indexes.
    ///
    /// # Errors
    /// When the statement fails.
    pub async fn checkpoint(&self) -> Result<()> {
        let mut conn = crate::probe::pg_connect(&self.url()).await?;
        sqlx::raw_sql("CHECKPOINT")
            .execute(&mut conn)
            .await
            .context("CHECKPOINT")?;
        let _ = sqlx::Connection::close(conn).await;
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "fast", "-w", "-t", "60", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

// ---------------------------------------------------------------------------
// Redis

/// A `redis-server` with its directory on a device: `appendonly yes`, `appendfsync
/// always` (a write is answered once it is on the disk), `save ""` (no RDB snapshots
/// besides the AOF's own rewrites), the rest its defaults.
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Why no server can be started here, in one line; `None` when one can.
    pub fn unavailable() -> Option<String> {
        find_tool("redis-server")
            .is_none()
            .then(|| "redis-server not found".to_owned())
    }

    /// Starts it with its directory at the device's `redis/` and waits until it
    /// answers.
    ///
    /// # Errors
    /// When it cannot be started or does not answer within 30 s.
    pub async fn start(device: &Device) -> Result<Self> {
        let bin = find_tool("redis-server").ok_or_else(|| anyhow!("redis-server not found"))?;
        let dir = device.path().join("redis");
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server")?;
        let server = Self { child, port };
        let url = server.url();
        wait_for("redis-server", Duration::from_secs(30), || {
            let url = url.clone();
            async move { ping(&url).await }
        })
        .await?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .is_ok()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
