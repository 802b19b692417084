//! Postgres: WAL bytes from the insert LSN, and `pg_stat_wal`: what the driver's write
//! probe reads.

use std::time::Duration;

use forge_core::driver::probe_error;
use forge_core::url::redact;
use forge_core::Result;

use super::PostgresOptions;
use sqlx::{Connection as _, PgConnection};

/// Connects one plain connection with a Postgres URL as forge-store takes it (forge's own
/// query parameters such as `schema` are understood and not sent to the server).
///
/// # Errors
/// When the URL is malformed or the server cannot be reached.
pub async fn pg_connect(url: &str) -> Result<PgConnection> {
    let options = PostgresOptions::from_url(url).map_err(|e| {
        probe_error(
            "postgres",
            format!("parsing the Postgres URL {}", redact(url)),
            e,
        )
    })?;
    // A probe's statements (a CHECKPOINT, a warm-up) may be slow on purpose: no
    // slow-statement warnings.
    let connect = sqlx::ConnectOptions::disable_statement_logging(options.connect);
    PgConnection::connect_with(&connect).await.map_err(|e| {
        probe_error(
            "postgres",
            format!("connecting to Postgres at {}", redact(url)),
            e,
        )
    })
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
            .map_err(|e| probe_error("postgres", "reading the Postgres WAL insert LSN", e))?;
    u64::try_from(lsn).map_err(|_| {
        probe_error(
            "postgres",
            format!("Postgres reported a negative WAL position {lsn}"),
            "out of range",
        )
    })
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
        .map_err(|e| probe_error("postgres", "reading pg_stat_activity", e))?;
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
        .map_err(|e| probe_error("postgres", "reading pg_stat_wal (Postgres 14 or later)", e))?;
    let n = |name: &str, v: i64| {
        u64::try_from(v).map_err(|_| {
            probe_error(
                "postgres",
                format!("pg_stat_wal.{name} is negative: {v}"),
                "out of range",
            )
        })
    };
    Ok(PgWalStats {
        wal_records: n("wal_records", wal_records)?,
        wal_fpi: n("wal_fpi", wal_fpi)?,
        wal_bytes: n("wal_bytes", wal_bytes)?,
        wal_write: n("wal_write", wal_write)?,
        wal_sync: n("wal_sync", wal_sync)?,
    })
}
