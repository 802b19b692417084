//! What each engine physically wrote.
//!
//! - [`ProcIo`]: the process's I/O counters from `/proc/self/io`; [`thread_io`]: the
//!   same counters summed over the threads with a given name, which isolates SQLite
//!   (sqlx runs every SQLite connection on a worker thread of its own).
//! - redb: [`forge_redb::RedbStore::open_counted`] counts what redb hands its storage
//!   backend.
//! - Postgres: WAL bytes from the insert LSN ([`pg_wal_insert_lsn`]) and `pg_stat_wal`
//!   ([`pg_stat_wal`]).
//! - Redis: `INFO persistence` ([`redis_persistence`]) and `MEMORY USAGE` of the keys of
//!   a store ([`redis_memory_usage`]).
//! - [`Probe`]: one of these, started before a run and finished after it.

use forge_core::url::redact;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use forge_redb::{IoCounters, IoCounts};
use forge_redis::{RedisOptions, RedisStore};
use forge_sql::PostgresOptions;
use sqlx::{Connection as _, PgConnection};

use crate::Physical;

// ---------------------------------------------------------------------------------------
// Process and thread I/O counters

/// The I/O counters of a process or thread (`/proc/<pid>/io`, see proc(5)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProcIo {
    /// Bytes passed to read-like system calls (page-cache hits included).
    pub rchar: u64,
    /// Bytes passed to write-like system calls (`write`, `pwrite`, …), whether or not
    /// they ever reach a disk.
    pub wchar: u64,
    /// Read-like system calls.
    pub syscr: u64,
    /// Write-like system calls.
    pub syscw: u64,
    /// Bytes fetched from the block layer.
    pub read_bytes: u64,
    /// Bytes sent, or to be sent, to the block layer (counted when a page is dirtied;
    /// 0 on tmpfs).
    pub write_bytes: u64,
    /// Dirtied bytes that were never written back (file truncated or deleted first).
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// The counters of this process (all its threads, those that exited included), or
    /// `None` off Linux or when `/proc/self/io` cannot be read.
    pub fn read() -> Option<ProcIo> {
        Self::read_from(Path::new("/proc/self/io"))
    }

    fn read_from(path: &Path) -> Option<ProcIo> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// Parses the `key: value` lines of a `/proc/…/io` file; `None` when a field is
    /// missing or not a number.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let fields: BTreeMap<&str, u64> = text
            .lines()
            .filter_map(|line| {
                let (key, value) = line.split_once(':')?;
                Some((key.trim(), value.trim().parse().ok()?))
            })
            .collect();
        let get = |key: &str| fields.get(key).copied();
        Some(ProcIo {
            rchar: get("rchar")?,
            wchar: get("wchar")?,
            syscr: get("syscr")?,
            syscw: get("syscw")?,
            read_bytes: get("read_bytes")?,
            write_bytes: get("write_bytes")?,
            cancelled_write_bytes: get("cancelled_write_bytes")?,
        })
    }

    /// What happened between `earlier` and `self`, field by field (saturating at 0).
    #[must_use]
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }

    fn add(&mut self, other: &ProcIo) {
        self.rchar += other.rchar;
        self.wchar += other.wchar;
        self.syscr += other.syscr;
        self.syscw += other.syscw;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.cancelled_write_bytes += other.cancelled_write_bytes;
    }
}

/// Linux keeps at most this many bytes of a thread's name (`comm`, `TASK_COMM_LEN` − 1);
/// longer names are cut.
pub const COMM_LEN: usize = 15;

/// The name sqlx-sqlite 0.9 gives the worker thread of each connection:
/// `sqlx-sqlite-worker-{id}` (the default of `SqliteConnectOptions::thread_name`). Its
/// `comm` is cut to [`COMM_LEN`] bytes, `sqlx-sqlite-wor`; [`thread_io`] cuts the prefix
/// it is given the same way.
pub const SQLITE_WORKER_THREAD_PREFIX: &str = "sqlx-sqlite-worker-";

/// The counters of every live thread of this process whose name starts with
/// `name_prefix` (cut to [`COMM_LEN`] bytes, as the kernel cuts names), by thread id.
///
/// `None` off Linux or when `/proc/self/task` cannot be listed. A thread that exits
/// takes its counters with it: read while the threads of interest are alive (for sqlx,
/// before the pool is closed).
pub fn thread_io_by_tid(name_prefix: &str) -> Option<BTreeMap<u32, ProcIo>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let prefix = &name_prefix.as_bytes()[..name_prefix.len().min(COMM_LEN)];
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        // Threads come and go while the directory is read; one that vanished is skipped.
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read(entry.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        if let Some(io) = ProcIo::read_from(&entry.path().join("io")) {
            out.insert(tid, io);
        }
    }
    Some(out)
}

/// The counters of the live threads named `name_prefix…`, summed (see
/// [`thread_io_by_tid`]); all zero when no thread matches.
///
/// For SQLite through sqlx pass [`SQLITE_WORKER_THREAD_PREFIX`]: every statement of a
/// connection, checkpoints included, runs on its worker thread. Read it **before**
/// closing the pool — a closed connection's thread exits and its counts vanish.
pub fn thread_io(name_prefix: &str) -> Option<ProcIo> {
    let threads = thread_io_by_tid(name_prefix)?;
    let mut sum = ProcIo::default();
    for io in threads.values() {
        sum.add(io);
    }
    Some(sum)
}

/// Growth of each thread since `start`, summed over the threads alive now (a thread
/// started since counts from zero; one that exited since is lost).
fn thread_growth(start: &BTreeMap<u32, ProcIo>, now: &BTreeMap<u32, ProcIo>) -> ProcIo {
    let mut sum = ProcIo::default();
    for (tid, io) in now {
        sum.add(&io.since(&start.get(tid).copied().unwrap_or_default()));
    }
    sum
}

// ---------------------------------------------------------------------------------------
// Postgres

/// Connects one plain connection with a Postgres URL as forge-store takes it (forge's own
/// query parameters such as `schema` are understood and not sent to the server).
///
/// # Errors
/// When the URL is malformed or the server cannot be reached.
pub async fn pg_connect(url: &str) -> Result<PgConnection> {
    let options = PostgresOptions::from_url(url)
        .with_context(|| format!("parsing the Postgres URL {}", redact(url)))?;
    PgConnection::connect_with(&options.connect)
        .await
        .with_context(|| format!("connecting to Postgres at {}", redact(url)))
}

/// The WAL insert position of the server, in bytes from `0/0`. Its growth over a run is
/// the WAL written by the whole cluster meanwhile (every database, autovacuum included).
///
/// # Errors
/// When the query fails.
pub async fn pg_wal_insert_lsn(conn: &mut PgConnection) -> Result<u64> {
    let lsn: i64 =
        sqlx::query_scalar("select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint")
            .fetch_one(conn)
            .await
            .context("reading the Postgres WAL insert LSN")?;
    u64::try_from(lsn).map_err(|_| anyhow!("Postgres reported a negative WAL position {lsn}"))
}

/// The cluster-wide WAL statistics of `pg_stat_wal` (Postgres 14 and later).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PgWalStats {
    /// WAL records generated.
    pub wal_records: u64,
    /// Full-page images generated.
    pub wal_fpi: u64,
    /// WAL bytes generated.
    pub wal_bytes: u64,
    /// Times WAL buffers were written out (`XLogWrite`).
    pub wal_write: u64,
    /// Times WAL files were synced to disk (0 with `fsync = off` or an `open_*sync`
    /// `wal_sync_method`).
    pub wal_sync: u64,
}

impl PgWalStats {
    /// What happened between `earlier` and `self`, field by field (saturating at 0).
    #[must_use]
    pub fn since(&self, earlier: &PgWalStats) -> PgWalStats {
        PgWalStats {
            wal_records: self.wal_records.saturating_sub(earlier.wal_records),
            wal_fpi: self.wal_fpi.saturating_sub(earlier.wal_fpi),
            wal_bytes: self.wal_bytes.saturating_sub(earlier.wal_bytes),
            wal_write: self.wal_write.saturating_sub(earlier.wal_write),
            wal_sync: self.wal_sync.saturating_sub(earlier.wal_sync),
        }
    }
}

/// How long a connected Postgres backend may hold its statistics before reporting them
/// (`PGSTAT_IDLE_INTERVAL`, 10 s on Postgres 15), plus a margin.
pub const PG_STATS_MAX_LAG: Duration = Duration::from_millis(10_500);

/// Waits until no other client backend of the server may still hold unreported
/// statistics, at most `max_wait`; `true` when that point was reached.
///
/// A backend reports into the cumulative statistics (`pg_stat_wal` among them) when it
/// goes idle, but at most once a second: counts of a later transaction wait for its idle
/// timeout ([`PG_STATS_MAX_LAG`]), and a backend running a statement reports nothing
/// until it is done. A backend that exits reports at once. So this returns as soon as
/// every other client backend has been idle for [`PG_STATS_MAX_LAG`] or is gone: close
/// the store's pool first and it returns at once.
///
/// # Errors
/// When `pg_stat_activity` cannot be read.
pub async fn pg_wait_for_stats(conn: &mut PgConnection, max_wait: Duration) -> Result<bool> {
    let deadline = tokio::time::Instant::now() + max_wait;
    loop {
        let pending: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity \
             where backend_type = 'client backend' and pid <> pg_backend_pid() \
             and (state is distinct from 'idle' \
                  or state_change > clock_timestamp() - interval '10.5 seconds')",
        )
        .fetch_one(&mut *conn)
        .await
        .context("reading pg_stat_activity")?;
        if pending == 0 {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads `pg_stat_wal`. Connected backends report into it late (see
/// [`pg_wait_for_stats`]), so counts of a run that just ended may be missing.
///
/// # Errors
/// When the query fails, e.g. on Postgres 13 or older, which have no `pg_stat_wal`.
pub async fn pg_stat_wal(conn: &mut PgConnection) -> Result<PgWalStats> {
    let (wal_records, wal_fpi, wal_bytes, wal_write, wal_sync): (i64, i64, i64, i64, i64) =
        sqlx::query_as(
            "select wal_records, wal_fpi, wal_bytes::bigint, wal_write, wal_sync \
             from pg_stat_wal",
        )
        .fetch_one(conn)
        .await
        .context("reading pg_stat_wal (Postgres 14 or later)")?;
    let n = |name: &str, v: i64| {
        u64::try_from(v).map_err(|_| anyhow!("pg_stat_wal.{name} is negative: {v}"))
    };
    Ok(PgWalStats {
        wal_records: n("wal_records", wal_records)?,
        wal_fpi: n("wal_fpi", wal_fpi)?,
        wal_bytes: n("wal_bytes", wal_bytes)?,
        wal_write: n("wal_write", wal_write)?,
        wal_sync: n("wal_sync", wal_sync)?,
    })
}

// ---------------------------------------------------------------------------------------
// Redis

/// What `INFO persistence` says about the server's disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RedisDisk {
    /// Whether the append-only file is on.
    pub aof_enabled: bool,
    /// Size of the AOF in bytes, when it is on.
    pub aof_current_size: Option<u64>,
    /// AOF rewrites since the server started (Redis 7+); a rewrite shrinks the file, so
    /// AOF growth is meaningful only while this stays put.
    pub aof_rewrites: Option<u64>,
    /// Whether an AOF rewrite is running.
    pub aof_rewrite_in_progress: bool,
    /// Writes since the last RDB snapshot.
    pub rdb_changes_since_last_save: Option<u64>,
}

/// The server URL of a Redis URL as forge-store takes it (without `prefix`, `maxlen`).
fn redis_server(url: &str) -> Result<String> {
    Ok(RedisOptions::from_url(url)
        .with_context(|| format!("parsing the Redis URL {}", redact(url)))?
        .server)
}

async fn redis_connect(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let server = redis_server(url)?;
    let client = redis::Client::open(server.as_str())
        .with_context(|| format!("parsing the Redis URL {}", redact(url)))?;
    // A SCAN + MEMORY USAGE round over many keys can take longer than the default 500 ms.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_mins(1)))
        .set_connection_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connecting to Redis at {}", redact(url)))
}

/// Reads `INFO persistence`.
///
/// # Errors
/// When the server cannot be reached or the reply lacks `aof_enabled`.
pub async fn redis_persistence(url: &str) -> Result<RedisDisk> {
    let mut conn = redis_connect(url).await?;
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut conn)
        .await
        .context("Redis INFO persistence")?;
    parse_persistence(&info)
}

fn parse_persistence(info: &str) -> Result<RedisDisk> {
    let fields: BTreeMap<&str, &str> = info
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .collect();
    let number = |key: &str| -> Result<Option<u64>> {
        fields
            .get(key)
            .map(|v| {
                v.parse()
                    .with_context(|| format!("Redis INFO {key}:{v} is not a number"))
            })
            .transpose()
    };
    let aof_enabled = match fields.get("aof_enabled") {
        Some(&"1") => true,
        Some(&"0") => false,
        other => bail!("Redis INFO persistence has aof_enabled {other:?}; expected 0 or 1"),
    };
    Ok(RedisDisk {
        aof_enabled,
        aof_current_size: if aof_enabled {
            number("aof_current_size")?
        } else {
            None
        },
        aof_rewrites: number("aof_rewrites")?,
        aof_rewrite_in_progress: fields.get("aof_rewrite_in_progress") == Some(&"1"),
        rdb_changes_since_last_save: number("rdb_changes_since_last_save")?,
    })
}

/// The sum of `MEMORY USAGE key SAMPLES 0` (every element of a collection counted) over
/// the keys `SCAN MATCH pattern` finds; keys deleted meanwhile count 0.
///
/// # Errors
/// When the server cannot be reached or a reply is not what these commands return.
pub async fn redis_memory_usage(url: &str, pattern: &str) -> Result<u64> {
    let mut conn = redis_connect(url).await?;
    let mut cursor = 0u64;
    let mut total = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .cursor_arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await
            .with_context(|| format!("Redis SCAN MATCH {pattern}"))?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("MEMORY")
                    .arg("USAGE")
                    .arg(key)
                    .arg("SAMPLES")
                    .arg(0);
            }
            let sizes: Vec<Option<u64>> = pipe
                .query_async(&mut conn)
                .await
                .with_context(|| format!("Redis MEMORY USAGE of keys matching {pattern}"))?;
            total += sizes.into_iter().flatten().sum::<u64>();
        }
        if next == 0 {
            return Ok(total);
        }
        cursor = next;
    }
}

/// The `SCAN MATCH` pattern of every key `store` writes (`prefix:*`). A [`RedisBus`]
/// with the same prefix writes its streams under it too.
///
/// [`RedisBus`]: forge_redis::RedisBus
pub fn redis_store_pattern(store: &RedisStore) -> String {
    store.keys().pattern()
}

/// The `SCAN MATCH` pattern of the keys a store opened with `url` writes (its `prefix`
/// parameter, or the default prefix).
///
/// # Errors
/// When `url` is not a Redis URL forge-store accepts.
pub fn redis_url_pattern(url: &str) -> Result<String> {
    Ok(RedisOptions::from_url(url)
        .with_context(|| format!("parsing the Redis URL {}", redact(url)))?
        .keys()
        .pattern())
}

// ---------------------------------------------------------------------------------------
// Probe

/// How a run's physical writes are measured, the same way for every backend:
/// [`Probe::start`] before the run, [`ProbeRun::finish`] after it.
#[derive(Clone)]
pub enum Probe {
    /// Nothing reaches a disk (the memory backend).
    None,
    /// redb: the counters of [`forge_redb::RedbStore::open_counted`]. With
    /// `Durability::None`, commits write nothing until a durable commit or the store's
    /// close: drop the store before finishing to count them.
    Redb(IoCounters),
    /// SQLite through sqlx: `wchar` of the sqlx-sqlite worker threads (all of them in
    /// this process). Finish before closing the store's pools.
    SqliteThreads,
    /// Postgres: WAL bytes of the whole cluster, and `pg_stat_wal.wal_sync` as fsyncs.
    /// Close the store's pool before finishing, or finishing waits for its connections to
    /// report their statistics (up to [`PG_STATS_MAX_LAG`]).
    Postgres {
        /// A Postgres URL of the server (any database of the cluster).
        url: String,
    },
    /// Redis: growth of the AOF when it is on and not rewritten during the run, else
    /// growth of `MEMORY USAGE` of the keys matching `pattern`.
    Redis {
        /// A Redis URL of the server.
        url: String,
        /// `SCAN MATCH` pattern of the run's keys ([`redis_store_pattern`]).
        pattern: String,
    },
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Redb(c) => f.debug_tuple("Redb").field(&c.snapshot()).finish(),
            Self::SqliteThreads => f.write_str("SqliteThreads"),
            Self::Postgres { url } => f
                .debug_struct("Postgres")
                .field("url", &redact(url))
                .finish(),
            Self::Redis { url, pattern } => f
                .debug_struct("Redis")
                .field("url", &redact(url))
                .field("pattern", pattern)
                .finish(),
        }
    }
}

#[derive(Debug)]
enum Baseline {
    None,
    Redb(IoCounts),
    /// `None` where `/proc` cannot be read.
    Sqlite(Option<BTreeMap<u32, ProcIo>>),
    Postgres {
        lsn: u64,
        wal: PgWalStats,
    },
    Redis {
        disk: RedisDisk,
        memory: u64,
    },
}

/// A started [`Probe`]: the counters at the start of the run.
#[derive(Debug)]
pub struct ProbeRun {
    probe: Probe,
    baseline: Baseline,
}

impl Probe {
    /// Reads the counters at the start of a run.
    ///
    /// # Errors
    /// When the Postgres or Redis server cannot be queried.
    pub async fn start(&self) -> Result<ProbeRun> {
        let baseline = match self {
            Self::None => Baseline::None,
            Self::Redb(counters) => Baseline::Redb(counters.snapshot()),
            Self::SqliteThreads => Baseline::Sqlite(thread_io_by_tid(SQLITE_WORKER_THREAD_PREFIX)),
            Self::Postgres { url } => {
                let mut conn = pg_connect(url).await?;
                // Every page a run touches first after a checkpoint costs a full-page
                // image in the WAL; starting each run right after one makes runs
                // comparable instead of depending on when the server last checkpointed.
                // Needs superuser or pg_checkpoint; without it the run goes on.
                let _ = sqlx::raw_sql("CHECKPOINT").execute(&mut conn).await;
                let lsn = pg_wal_insert_lsn(&mut conn).await?;
                let wal = pg_stat_wal(&mut conn).await?;
                // The readings are taken; a failed goodbye changes nothing.
                let _ = conn.close().await;
                Baseline::Postgres { lsn, wal }
            }
            Self::Redis { url, pattern } => Baseline::Redis {
                disk: redis_persistence(url).await?,
                memory: redis_memory_usage(url, pattern).await?,
            },
        };
        Ok(ProbeRun {
            probe: self.clone(),
            baseline,
        })
    }
}

impl ProbeRun {
    /// Reads the counters at the end of the run: what was physically written since
    /// [`Probe::start`] (`None` for the memory backend, or where `/proc` cannot be read),
    /// and fsyncs where the engine tells (redb, Postgres).
    ///
    /// For Postgres this first waits (at most [`PG_STATS_MAX_LAG`]) until `pg_stat_wal`
    /// holds the run's syncs, see [`pg_wait_for_stats`]: close the store's pool before
    /// finishing and there is nothing to wait for. If the wait runs out (other clients
    /// keep the server busy), the fsyncs reported may miss some.
    ///
    /// # Errors
    /// When the Postgres or Redis server cannot be queried.
    pub async fn finish(self) -> Result<(Option<Physical>, Option<u64>)> {
        let physical = |bytes, source: String| Some(Physical { bytes, source });
        Ok(match (self.probe, self.baseline) {
            (Probe::Redb(counters), Baseline::Redb(start)) => {
                let run = counters.snapshot().since(start);
                (
                    physical(run.write_bytes, "redb storage backend writes".to_owned()),
                    Some(run.syncs),
                )
            }
            (Probe::SqliteThreads, Baseline::Sqlite(Some(start))) => {
                match thread_io_by_tid(SQLITE_WORKER_THREAD_PREFIX) {
                    Some(now) => (
                        physical(
                            thread_growth(&start, &now).wchar,
                            "sqlite writer threads' wchar (WAL + checkpoints)".to_owned(),
                        ),
                        None,
                    ),
                    None => (None, None),
                }
            }
            (Probe::Postgres { url }, Baseline::Postgres { lsn, wal }) => {
                let mut conn = pg_connect(&url).await?;
                let lsn_now = pg_wal_insert_lsn(&mut conn).await?;
                pg_wait_for_stats(&mut conn, PG_STATS_MAX_LAG).await?;
                let wal_now = pg_stat_wal(&mut conn).await?;
                let _ = conn.close().await;
                (
                    physical(
                        lsn_now.saturating_sub(lsn),
                        "postgres WAL: pg_wal_lsn_diff of the insert LSN, from a CHECKPOINT (full-page images included)".to_owned(),
                    ),
                    Some(wal_now.since(&wal).wal_sync),
                )
            }
            (Probe::Redis { url, pattern }, Baseline::Redis { disk, memory }) => {
                let disk_now = redis_persistence(&url).await?;
                let aof = match (disk.aof_current_size, disk_now.aof_current_size) {
                    (Some(a), Some(b))
                        if disk.aof_rewrites == disk_now.aof_rewrites
                            && !disk_now.aof_rewrite_in_progress =>
                    {
                        Some(b.saturating_sub(a))
                    }
                    _ => None,
                };
                match aof {
                    Some(bytes) => (physical(bytes, "redis AOF growth".to_owned()), None),
                    None => {
                        let now = redis_memory_usage(&url, &pattern).await?;
                        (
                            physical(
                                now.saturating_sub(memory),
                                "redis MEMORY USAGE of the run's keys (store and Streams bus)"
                                    .to_owned(),
                            ),
                            None,
                        )
                    }
                }
            }
            _ => (None, None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io_and_redis_info() {
        let io = ProcIo::parse(
            "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\n\
             write_bytes: 8192\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        assert_eq!((io.wchar, io.write_bytes), (20, 8192));
        assert_eq!(ProcIo::parse("rchar: 10\n"), None);
        assert_eq!(io.since(&io), ProcIo::default());

        let on = parse_persistence(
            "# Persistence\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_rewrites:2\r\n\
             aof_current_size:1234\r\n",
        )
        .unwrap();
        assert_eq!(
            (on.aof_enabled, on.aof_current_size, on.aof_rewrites),
            (true, Some(1234), Some(2))
        );
        let off = parse_persistence("aof_enabled:0\r\nrdb_changes_since_last_save:7\r\n").unwrap();
        assert_eq!(
            (off.aof_current_size, off.rdb_changes_since_last_save),
            (None, Some(7))
        );
        assert!(parse_persistence("loading:0\r\n").is_err());
    }

    #[test]
    fn thread_growth_counts_new_threads_from_zero() {
        let io = |wchar| ProcIo {
            wchar,
            ..ProcIo::default()
        };
        let start = BTreeMap::from([(1, io(100)), (2, io(50))]);
        let now = BTreeMap::from([(1, io(160)), (3, io(7))]);
        assert_eq!(thread_growth(&start, &now).wchar, 67);
    }
}
