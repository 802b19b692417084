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

mod postgres;
mod proc_io;
mod redis;

use std::collections::BTreeMap;
use std::fmt;

use anyhow::Result;
use forge_core::url::redact;
use forge_redb::{IoCounters, IoCounts};
use sqlx::Connection as _;

use crate::Physical;

pub use self::postgres::{
    pg_connect, pg_stat_wal, pg_wait_for_stats, pg_wal_insert_lsn, PgWalStats, PG_STATS_MAX_LAG,
};
use self::proc_io::thread_growth;
pub use self::proc_io::{
    thread_io, thread_io_by_tid, ProcIo, COMM_LEN, SQLITE_WORKER_THREAD_PREFIX,
};
pub use self::redis::{
    redis_appendfsync, redis_memory_usage, redis_persistence, redis_store_pattern,
    redis_url_pattern, RedisDisk,
};

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
                tracing::info!(
                    file_write_bytes = run.write_bytes,
                    file_syncs = run.syncs,
                    journal_page_bytes = run.journal_write_bytes,
                    journal_syncs = run.journal_syncs,
                    "redb: what the run wrote, by cause"
                );
                (
                    physical(
                        run.total_write_bytes(),
                        "redb storage backend writes + journal pages synced".to_owned(),
                    ),
                    Some(run.total_syncs()),
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
                if disk.aof_enabled || disk_now.aof_enabled {
                    // Bytes appended to the AOF, or nothing: falling back to memory
                    // would change what is counted between two rows of one table.
                    let grown = match (disk.aof_current_size, disk_now.aof_current_size) {
                        (Some(a), Some(b))
                            if disk.aof_rewrites == disk_now.aof_rewrites
                                && !disk_now.aof_rewrite_in_progress =>
                        {
                            Some(b.saturating_sub(a))
                        }
                        _ => None,
                    };
                    let fsync = redis_appendfsync(&url)
                        .await
                        .unwrap_or_else(|| "unknown".to_owned());
                    return Ok(match grown {
                        Some(bytes) => (
                            physical(
                                bytes,
                                format!("redis AOF bytes appended (appendfsync {fsync})"),
                            ),
                            None,
                        ),
                        // An AOF rewrite ran during the run: not measurable.
                        None => (None, None),
                    });
                }
                // No persistence: what the run's keys hold in memory.
                let now = redis_memory_usage(&url, &pattern).await?;
                (
                    physical(
                        now.saturating_sub(memory),
                        "redis MEMORY USAGE of the run's keys (store and Streams bus; no AOF)"
                            .to_owned(),
                    ),
                    None,
                )
            }
            _ => (None, None),
        })
    }
}
