//! What each engine physically wrote.
//!
//! A run measures through its backend's driver: [`forge_core::driver::Instances::probe`]
//! gives a [`forge_core::driver::WriteProbe`], started before the run and finished after
//! it, the same way for every backend (a third party's too). The readings the built-in
//! probes take are here for tests and the scale runs:
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

pub use forge_core::driver::proc_io::{thread_io, thread_io_by_tid, ProcIo, COMM_LEN};
pub use forge_redis::probe::{
    redis_appendfsync, redis_memory_usage, redis_persistence, redis_store_pattern,
    redis_url_pattern, RedisDisk,
};
pub use forge_sql::postgres::wal::{
    pg_connect, pg_stat_wal, pg_wait_for_stats, pg_wal_insert_lsn, PgWalStats, PG_STATS_MAX_LAG,
};
pub use forge_sql::sqlite::WORKER_THREAD_PREFIX as SQLITE_WORKER_THREAD_PREFIX;
