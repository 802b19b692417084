//! `SqliteStore`: the `Store` trait over one SQLite file.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{Error, Result, SessionId, TenantId};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
};
use sqlx::{Connection, Row, SqlSafeStr, Sqlite, SqliteConnection, Transaction};

use super::config::{Check, SqliteOptions, Synchronous};
use super::{files, schema};
use crate::dialect::{impl_store, Backend, Reader};
use crate::error::sqlite as map;
use crate::stats::{Counters, WriteStats};

/// SQLite's settings as read back from the writer connection ([`SqliteStore::settings`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteSettings {
    /// `PRAGMA journal_mode`: `wal`.
    pub journal_mode: String,
    /// `PRAGMA synchronous`: 1 = NORMAL, 2 = FULL.
    pub synchronous: i64,
    /// `PRAGMA foreign_keys`.
    pub foreign_keys: bool,
    /// `PRAGMA busy_timeout`, in milliseconds.
    pub busy_timeout_ms: i64,
    /// `PRAGMA page_size`.
    pub page_size: i64,
    /// `PRAGMA wal_autocheckpoint`, in pages.
    pub wal_autocheckpoint: i64,
}

/// A [`Store`](forge_core::Store) in one SQLite file (WAL mode), through sqlx.
///
/// Writes go through a pool of exactly one connection, so concurrent `apply` calls queue
/// in the process instead of contending for SQLite's write lock ("database is locked"
/// cannot happen between them); each batch is one `BEGIN IMMEDIATE` transaction. Reads
/// use a separate pool of reader connections and never wait for the writer (WAL
/// readers see the last commit). Another process writing the same file is waited for up
/// to the busy timeout, then reported as a retryable error.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    options: SqliteOptions,
    counters: Arc<Counters>,
    place: Arc<str>,
}

impl SqliteStore {
    /// Opens `sqlite://PATH[?synchronous=normal|full&busy_timeout_ms=N&readers=N&search=on|off]`,
    /// creating the file and the schema if missing, and building or dropping the search
    /// index as `search` asks. See [`SqliteOptions::from_url`].
    ///
    /// # Errors
    /// [`forge_core::Error::InvalidInput`] for a malformed URL or a database of
    /// something else; [`forge_core::Error::Unsupported`] for a database written by a
    /// newer schema version; [`forge_core::Error::Backend`] when the file cannot be
    /// opened.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(SqliteOptions::from_url(url)?).await
    }

    /// Opens the store with `options`.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn open_with(options: SqliteOptions) -> Result<Self> {
        let existed = options.path.exists();
        create_whole(&options).await?;
        files::check_not_empty(&options.path)?;
        files::check_wal(&options.path)?;
        // sqlx leaves journal_mode alone and synchronous at FULL: both are set here.
        let base = SqliteConnectOptions::new()
            .filename(&options.path)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);
        let writer_options = base
            .clone()
            .create_if_missing(true)
            // Takes effect only while the file is empty (before WAL mode is set).
            .page_size(options.page_size)
            // Takes effect only while the file has no table; an older file is
            // converted below.
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(options.synchronous.to_sqlx())
            .pragma("wal_autocheckpoint", options.wal_autocheckpoint.to_string());
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            // Writers queue here for the one connection; a batch waits its turn, and
            // only a wait this long is an error (retryable).
            .acquire_timeout(std::time::Duration::from_mins(1))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(writer_options)
            .await
            .map_err(|e| in_file(map(e), &options.path))?;
        if !existed {
            // Made in place (no hard links here, or another process made it): its name
            // is durable with its directory.
            forge_core::files::sync_dir(&options.path).map_err(|e| dir_error(&options.path, &e))?;
        }
        {
            let mut tx = writer
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|e| in_file(map(e), &options.path))?;
            schema::migrate(&mut tx, &options.path, options.search)
                .await
                .map_err(|e| in_file(e, &options.path))?;
            tx.commit()
                .await
                .map_err(|e| in_file(map(e), &options.path))?;
        }
        check(&writer, &options)
            .await
            .map_err(|e| in_file(e, &options.path))?;
        incremental_vacuum_on(&writer, &options.path)
            .await
            .map_err(|e| in_file(e, &options.path))?;
        // The file is in WAL mode now (a persistent setting); readers need not set it.
        let readers = SqlitePoolOptions::new()
            .max_connections(options.readers)
            .connect_with(base)
            .await
            .map_err(|e| in_file(map(e), &options.path))?;
        Ok(Self {
            writer,
            readers,
            place: format!("SQLite database {}", options.path.display()).into(),
            options,
            counters: Arc::default(),
        })
    }

    /// The options it was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// What this store has written since it was opened.
    pub fn write_stats(&self) -> WriteStats {
        self.counters.snapshot()
    }

    /// The settings in force on the writer connection, read back from SQLite.
    ///
    /// # Errors
    /// [`forge_core::Error::Backend`] when SQLite cannot be asked.
    pub async fn settings(&self) -> Result<SqliteSettings> {
        let mut conn = self.writer.acquire().await.map_err(map)?;
        let journal_mode: String = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(map)?;
        let mut int = async |sql: &'static str| -> Result<i64> {
            sqlx::query(sql)
                .fetch_one(&mut *conn)
                .await
                .and_then(|r| r.try_get(0))
                .map_err(map)
        };
        Ok(SqliteSettings {
            journal_mode,
            synchronous: int("PRAGMA synchronous").await?,
            foreign_keys: int("PRAGMA foreign_keys").await? == 1,
            busy_timeout_ms: int("PRAGMA busy_timeout").await?,
            page_size: int("PRAGMA page_size").await?,
            wal_autocheckpoint: int("PRAGMA wal_autocheckpoint").await?,
        })
    }

    /// Copies every page in the WAL into the database file now (`PRAGMA
    /// wal_checkpoint(PASSIVE)` on the writer), as the next automatic checkpoint would.
    /// Benchmarks call it so that what a run wrote includes its checkpoint.
    ///
    /// # Errors
    /// [`forge_core::Error::Backend`] when SQLite fails.
    pub async fn checkpoint(&self) -> Result<()> {
        let mut conn = self.writer.acquire().await.map_err(map)?;
        sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    /// The writer connection.
    ///
    /// A `COMMIT` that failed (a full disk) leaves SQLite without a transaction, which
    /// it rolled back by itself, while sqlx still counts one open on the connection and
    /// refuses every later `BEGIN` on it: such a connection is closed here, and the pool
    /// opens a fresh one.
    async fn writer_conn(&self) -> Result<PoolConnection<Sqlite>> {
        let conn = self.writer.acquire().await.map_err(map)?;
        if !conn.is_in_transaction() {
            return Ok(conn);
        }
        tracing::warn!(
            file = %self.options.path.display(),
            "replacing the writer connection left in a failed transaction"
        );
        // The close error is of the connection being dropped; the next acquire opens
        // a new one or reports what is wrong.
        let _ = conn.close().await;
        self.writer.acquire().await.map_err(map)
    }

    /// Closes both pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Creates a missing database whole: SQLite and the schema are set up in a file beside
/// it, checkpointed, and the file is then linked to the store's path (never replacing
/// a file that appeared there meanwhile). A process killed while it creates a store
/// leaves no file at the path, where SQLite's own creation leaves an empty file that no
/// later open accepts (see [`files::check_not_empty`]); what it leaves beside the path
/// is removed by a later open ([`forge_core::files::remove_abandoned_creations`]).
/// Where this cannot be done (the path exists, its directory is not writable, hard
/// links are not supported) the store is opened in place, and any error is reported by
/// that open.
async fn create_whole(options: &SqliteOptions) -> Result<()> {
    let path = &options.path;
    forge_core::files::remove_abandoned_creations(path);
    if path.exists() {
        return Ok(());
    }
    let Some(tmp) = forge_core::files::creation_path(path) else {
        return Ok(());
    };
    let linked = match make(&tmp, options).await {
        Ok(()) => std::fs::hard_link(&tmp, path).is_ok(),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e,
                "could not create the store beside its path; creating it in place");
            false
        }
    };
    for leftover in [tmp.clone(), files::wal_path(&tmp), files::shm_path(&tmp)] {
        let _ = std::fs::remove_file(leftover);
    }
    if linked {
        // The link is durable with its directory.
        forge_core::files::sync_dir(path).map_err(|e| dir_error(path, &e))?;
    }
    Ok(())
}

/// Turns on incremental auto-vacuum in a file made without it (before this release):
/// `PRAGMA auto_vacuum = INCREMENTAL` takes effect at the next `VACUUM`, which rewrites
/// the file once. A file that has it is left alone.
async fn incremental_vacuum_on(writer: &SqlitePool, path: &std::path::Path) -> Result<()> {
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(writer)
        .await
        .map_err(map)?;
    if mode == 2 {
        return Ok(());
    }
    tracing::info!(file = %path.display(), mode,
        "turning on incremental auto-vacuum: the file is rewritten once (VACUUM)");
    let mut conn = writer.acquire().await.map_err(map)?;
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query("VACUUM")
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    Ok(())
}

/// A failed directory sync: a store error naming the file, never ignored (the file's
/// name would not survive a power cut).
fn dir_error(path: &std::path::Path, e: &std::io::Error) -> forge_core::Error {
    let e = std::io::Error::new(e.kind(), format!("SQLite database {}: {e}", path.display()));
    Error::backend("sqlite", false, e)
}

/// A new database at `tmp` with the store's page size, WAL mode and schema, everything
/// checkpointed into the file.
async fn make(tmp: &std::path::Path, options: &SqliteOptions) -> Result<()> {
    let connect = SqliteConnectOptions::new()
        .filename(tmp)
        .create_if_missing(true)
        .page_size(options.page_size)
        .auto_vacuum(SqliteAutoVacuum::Incremental)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
        .foreign_keys(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&connect)
        .await
        .map_err(map)?;
    let mut tx = conn.begin().await.map_err(map)?;
    schema::migrate(&mut tx, &options.path, options.search).await?;
    tx.commit().await.map_err(map)?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .map_err(map)?;
    conn.close().await.map_err(map)
}

/// Runs the check `options.check` asks for on `pool`.
async fn check(pool: &SqlitePool, options: &SqliteOptions) -> Result<()> {
    let sql = match options.check {
        Check::Quick => "PRAGMA quick_check(8)",
        Check::Full => "PRAGMA integrity_check(8)",
        Check::Off => return Ok(()),
    };
    let rows = sqlx::query(sql).fetch_all(pool).await.map_err(map)?;
    let found: Vec<String> = rows
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<std::result::Result<_, _>>()
        .map_err(map)?;
    if found.len() == 1 && found[0] == "ok" {
        // A key damaged in a row moves the row away from its parent's: the messages
        // of a session and the parts of a message are tied by foreign keys.
        let orphans = sqlx::query("PRAGMA foreign_key_check")
            .fetch_all(pool)
            .await
            .map_err(map)?;
        let Some(first) = orphans.first() else {
            return Ok(());
        };
        let table: String = first.try_get(0).map_err(map)?;
        return Err(Error::corrupted(
            "SQLite database",
            format!(
                "the file is damaged: {} row(s) of {table} and others have no parent row \
                 (foreign_key_check)",
                orphans.len()
            ),
        ));
    }
    Err(Error::corrupted(
        "SQLite database",
        format!(
            "the file is damaged ({} found: {})",
            sql.trim_start_matches("PRAGMA ").trim_end_matches("(8)"),
            found.join("; ").replace(['\n', '\r'], " ")
        ),
    ))
}

/// An error of the SQLite database at `place`.
#[derive(Debug)]
struct InFile {
    place: Arc<str>,
    /// What SQLite's "disk I/O error" was, where it can be told.
    why: Option<String>,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for InFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.why {
            Some(why) => write!(f, "{}: {why} ({})", self.place, self.source),
            None => write!(f, "{}: {}", self.place, self.source),
        }
    }
}

impl std::error::Error for InFile {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Names the file in an [`Error::Corrupted`] about the SQLite database.
fn in_file(err: Error, path: &std::path::Path) -> Error {
    match err {
        Error::Corrupted {
            at,
            message,
            source,
        } if at == "SQLite database" => Error::Corrupted {
            at: format!("SQLite database {}", path.display()),
            message,
            source,
        },
        other => other,
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Db = Sqlite;

    /// `PRAGMA incremental_vacuum(1024)` (4 MiB of 4 KiB pages) until no page is
    /// free, each a write transaction of its own (a writer waits for one step), then a
    /// checkpoint that truncates the WAL when no reader holds it.
    async fn reclaim(&self) -> Result<forge_core::Reclaimed> {
        let before = self.footprint().await?.total("file");
        let mut steps = 0u64;
        let mut freed = 0i64;
        loop {
            let mut conn = self.writer_conn().await?;
            let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
                .fetch_one(&mut *conn)
                .await
                .map_err(map)?;
            if free == 0 {
                break;
            }
            sqlx::query("PRAGMA incremental_vacuum(1024)")
                .execute(&mut *conn)
                .await
                .map_err(map)?;
            let left: i64 = sqlx::query_scalar("PRAGMA freelist_count")
                .fetch_one(&mut *conn)
                .await
                .map_err(map)?;
            drop(conn);
            steps += 1;
            freed += free - left;
            if left >= free {
                // Nothing moved (auto-vacuum is off in this file): stop.
                break;
            }
            tokio::task::yield_now().await;
        }
        let mut conn = self.writer_conn().await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        drop(conn);
        let after = self.footprint().await?.total("file");
        Ok(forge_core::Reclaimed::new(
            before,
            after,
            format!("incremental_vacuum: {freed} pages in {steps} steps"),
        ))
    }

    /// The database file with its `-wal` and `-shm`.
    async fn footprint(&self) -> Result<forge_core::Footprint> {
        let path = &self.options.path;
        let beside = |suffix: &str| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            std::path::PathBuf::from(p)
        };
        forge_core::Footprint::of_files(&[path.clone(), beside("-wal"), beside("-shm")])
    }

    /// Readers see the last commit (WAL); the tenant is only a key column.
    async fn reader(&self, _tenant: &TenantId, snapshot: bool) -> Result<Reader<Sqlite>> {
        Ok(if snapshot {
            Reader::Transaction(self.readers.begin().await.map_err(map)?)
        } else {
            Reader::Connection(self.readers.acquire().await.map_err(map)?)
        })
    }

    /// `BEGIN IMMEDIATE` takes the write lock at once: a batch never has to upgrade a
    /// read lock halfway, which another process could refuse (`SQLITE_BUSY`).
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>> {
        let conn = self.writer_conn().await?;
        Transaction::begin(conn, Some(SqlSafeStr::into_sql_str("BEGIN IMMEDIATE")))
            .await
            .map_err(map)
    }

    /// The write lock, as for a batch: claims, releases and batches of every handle on
    /// the file run one at a time, and each reads what the previous one committed.
    const BEGIN_FENCE: &'static str = "BEGIN IMMEDIATE";

    /// The writer connection; with `synchronous=normal`, switched to `FULL` until
    /// [`Backend::fence_conn_done`], so that a claim is on disk when it returns (in WAL
    /// mode `NORMAL` syncs only at checkpoints: a claim lost in a power cut would let
    /// epochs go back).
    async fn fence_conn(&self) -> Result<PoolConnection<Sqlite>> {
        let mut conn = self.writer_conn().await?;
        if self.options.synchronous != Synchronous::Full {
            sqlx::query("PRAGMA synchronous = FULL")
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(conn)
    }

    /// Nothing to do: `BEGIN IMMEDIATE` already holds the file's write lock.
    async fn lock_fence(
        &self,
        _conn: &mut SqliteConnection,
        _tenant: &TenantId,
        _session: &SessionId,
    ) -> Result<()> {
        Ok(())
    }

    /// Puts `synchronous` back as configured; a connection where that fails is closed
    /// (the pool opens a fresh one with the configured settings).
    async fn fence_conn_done(&self, mut conn: PoolConnection<Sqlite>) {
        if self.options.synchronous == Synchronous::Full {
            return;
        }
        if let Err(e) = sqlx::query("PRAGMA synchronous = NORMAL")
            .execute(&mut *conn)
            .await
        {
            tracing::warn!(
                file = %self.options.path.display(),
                error = %e,
                "could not restore the writer's synchronous setting; replacing the connection"
            );
            let _ = conn.close().await;
        }
    }

    fn name_place(&self, err: Error) -> Error {
        match err {
            Error::Backend {
                backend,
                retryable,
                source,
            } => Error::backend(
                backend,
                retryable,
                InFile {
                    place: Arc::clone(&self.place),
                    why: files::why_write_failed(&self.options.path, source.as_ref()),
                    source,
                },
            ),
            other => in_file(other, &self.options.path),
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn search_config(&self) -> Option<&str> {
        self.options.search.then_some(super::search::TOKENIZER)
    }

    fn place(&self) -> &str {
        &self.place
    }
}

impl_store!(SqliteStore);
