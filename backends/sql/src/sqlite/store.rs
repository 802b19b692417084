//! `SqliteStore`: the `Store` trait over one SQLite file.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{Result, TenantId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{Row, Sqlite, Transaction};

use super::config::SqliteOptions;
use super::schema;
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
    /// Opens `sqlite://PATH[?synchronous=normal|full&busy_timeout_ms=N&readers=N]`,
    /// creating the file and the schema if missing. See [`SqliteOptions::from_url`].
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
            .map_err(map)?;
        {
            let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
            schema::migrate(&mut tx, &options.path).await?;
            tx.commit().await.map_err(map)?;
        }
        // The file is in WAL mode now (a persistent setting); readers need not set it.
        let readers = SqlitePoolOptions::new()
            .max_connections(options.readers)
            .connect_with(base)
            .await
            .map_err(map)?;
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

    /// Closes both pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Db = Sqlite;

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
        self.writer.begin_with("BEGIN IMMEDIATE").await.map_err(map)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn place(&self) -> &str {
        &self.place
    }
}

impl_store!(SqliteStore);
