//! `SqliteStore`: the `Store` trait over one SQLite file.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::store::clamp_limit;
use forge_core::{
    Capabilities, Cursor, Envelope, MessageId, MessageWithParts, OpenItems, Page, Result,
    SessionId, SessionState, Store, SyncEvent, TenantId,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use super::config::SqliteOptions;
use super::{schema, write};
use crate::error::sqlite as map;
use crate::plan::Batch;
use crate::rows;
use crate::stats::{Counters, Tally, WriteStats};

const BACKEND: &str = "sqlite";

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
}

/// A [`Store`] in one SQLite file (WAL mode), through sqlx.
///
/// Writes go through a pool of exactly one connection, so concurrent `apply` calls queue
/// in the process instead of contending for SQLite's write lock ("database is locked"
/// cannot happen between them); each batch is one `BEGIN IMMEDIATE` transaction. Reads
/// use a separate pool of reader connections and never wait for the writer (WAL
/// readers see the last commit). Another process writing the same file is waited for up
/// to the busy timeout, then reported as a retryable error.
#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    options: SqliteOptions,
    counters: Arc<Counters>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
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
            .synchronous(options.synchronous.to_sqlx());
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

async fn parts_of(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    session: &SessionId,
    first: &MessageId,
    last: &MessageId,
) -> Result<Vec<forge_core::Part>> {
    let rows = sqlx::query(
        "SELECT body FROM parts WHERE tenant = ? AND session = ? AND message >= ? AND message <= ? \
         ORDER BY message, id",
    )
    .bind(tenant.as_str())
    .bind(session.as_str().as_bytes())
    .bind(first.as_str().as_bytes())
    .bind(last.as_str().as_bytes())
    .fetch_all(&mut *conn)
    .await
    .map_err(map)?;
    rows.iter()
        .map(|r| rows::part(tenant.as_str(), &r.try_get::<String, _>(0).map_err(map)?))
        .collect()
}

#[async_trait]
impl Store for SqliteStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(BACKEND)
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let batch = Batch::prepare(batch);
        if batch.is_empty() {
            return Ok(());
        }
        let needs = batch.needs();
        let mut tally = Tally::default();
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map)?;
        let written = async {
            let loaded = write::load(&mut tx, &needs, &mut tally).await?;
            let plan = batch.simulate(&loaded)?;
            for (tenant, ops) in &plan.tenants {
                write::write(&mut tx, tenant, ops, &mut tally).await?;
            }
            Ok::<_, forge_core::Error>(())
        }
        .await;
        if let Err(e) = written {
            // The batch's error is what the caller needs; a failed rollback would only
            // hide it (and the connection rolls back when it returns to the pool).
            let _ = tx.rollback().await;
            return Err(e);
        }
        tx.commit().await.map_err(map)?;
        self.counters.commit(&tally);
        Ok(())
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        let row = sqlx::query("SELECT seq, body FROM sessions WHERE tenant = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.as_str().as_bytes())
            .fetch_optional(&self.readers)
            .await
            .map_err(map)?;
        row.map(|r| {
            rows::session_state(
                tenant.as_str(),
                r.try_get(0).map_err(map)?,
                &r.try_get::<String, _>(1).map_err(map)?,
            )
        })
        .transpose()
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let rows = sqlx::query("SELECT seq, body FROM sessions WHERE tenant = ? ORDER BY id")
            .bind(tenant.as_str())
            .fetch_all(&self.readers)
            .await
            .map_err(map)?;
        rows.iter()
            .map(|r| {
                rows::session_state(
                    tenant.as_str(),
                    r.try_get(0).map_err(map)?,
                    &r.try_get::<String, _>(1).map_err(map)?,
                )
            })
            .collect()
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        // One read transaction: the message and its parts from one snapshot.
        let mut tx = self.readers.begin().await.map_err(map)?;
        let conn = &mut *tx;
        let out = {
            let row = sqlx::query(
                "SELECT body FROM messages WHERE tenant = ? AND session = ? AND id = ?",
            )
            .bind(tenant.as_str())
            .bind(session.as_str().as_bytes())
            .bind(id.as_str().as_bytes())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
            match row {
                None => None,
                Some(row) => {
                    let body: String = row.try_get(0).map_err(map)?;
                    let info = rows::message(tenant.as_str(), &body)?;
                    let parts = parts_of(conn, tenant, session, id, id).await?;
                    Some(MessageWithParts { info, parts })
                }
            }
        };
        tx.commit().await.map_err(map)?;
        Ok(out)
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let limit = clamp_limit(limit);
        let mut tx = self.readers.begin().await.map_err(map)?;
        let conn = &mut *tx;
        let page = {
            let mut q = QueryBuilder::<Sqlite>::new("SELECT body FROM messages WHERE tenant = ");
            q.push_bind(tenant.as_str())
                .push(" AND session = ")
                .push_bind(session.as_str().as_bytes());
            if let Some(c) = before {
                q.push(" AND id < ")
                    .push_bind(c.message_id().as_str().as_bytes());
            }
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(limit as i64 + 1);
            let rows = q.build().fetch_all(&mut *conn).await.map_err(map)?;
            let more = rows.len() > limit;
            let mut infos = rows
                .iter()
                .take(limit)
                .map(|r| rows::message(tenant.as_str(), &r.try_get::<String, _>(0).map_err(map)?))
                .collect::<Result<Vec<_>>>()?;
            infos.reverse();
            let messages = match (infos.first(), infos.last()) {
                (Some(first), Some(last)) => {
                    let (first, last) = (first.id.clone(), last.id.clone());
                    let parts = parts_of(conn, tenant, session, &first, &last).await?;
                    rows::attach_parts(infos, parts, BACKEND)?
                }
                _ => Vec::new(),
            };
            let next = if more {
                messages.first().map(|m| Cursor::before(m.info.id.clone()))
            } else {
                None
            };
            Page { messages, next }
        };
        tx.commit().await.map_err(map)?;
        Ok(page)
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let mut tx = self.readers.begin().await.map_err(map)?;
        let conn = &mut *tx;
        let mut out = OpenItems::default();
        {
            let mut q = QueryBuilder::<Sqlite>::new("SELECT body FROM messages WHERE tenant = ");
            q.push_bind(tenant.as_str());
            if let Some(s) = session {
                q.push(" AND session = ").push_bind(s.as_str().as_bytes());
            }
            q.push(" AND open ORDER BY session, id");
            for r in q.build().fetch_all(&mut *conn).await.map_err(map)? {
                out.messages.push(rows::message(
                    tenant.as_str(),
                    &r.try_get::<String, _>(0).map_err(map)?,
                )?);
            }
            let mut q = QueryBuilder::<Sqlite>::new("SELECT body FROM parts WHERE tenant = ");
            q.push_bind(tenant.as_str());
            if let Some(s) = session {
                q.push(" AND session = ").push_bind(s.as_str().as_bytes());
            }
            q.push(" AND open ORDER BY session, message, id");
            for r in q.build().fetch_all(&mut *conn).await.map_err(map)? {
                out.parts.push(rows::part(
                    tenant.as_str(),
                    &r.try_get::<String, _>(0).map_err(map)?,
                )?);
            }
        }
        tx.commit().await.map_err(map)?;
        Ok(out)
    }
}
