//! `PostgresStore`: the `Store` trait over a Postgres schema, tenants isolated by
//! row-level security.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::store::clamp_limit;
use forge_core::{
    Capabilities, Cursor, Envelope, MessageId, MessageWithParts, OpenItems, Page, Part, Result,
    SessionId, SessionState, Store, SyncEvent, Tenancy, TenantId,
};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, QueryBuilder, Row, Transaction};

use super::config::PostgresOptions;
use super::schema;
use super::write::{self, set_tenant};
use crate::error::postgres as map;
use crate::plan::Batch;
use crate::rows;
use crate::stats::{Counters, Tally, WriteStats};

const BACKEND: &str = "postgres";

/// A [`Store`] in a Postgres schema, through sqlx.
///
/// Every transaction, read or write, first sets `forge.tenant` (transaction-local) and
/// row-level security admits only that tenant's rows, on top of the queries' own
/// `tenant = …` filters. Connections run as a non-superuser application role when the
/// URL's user would bypass row-level security. Each `apply` is one transaction; batches
/// touching the same session are serialized by a transaction-scoped advisory lock.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    options: PostgresOptions,
    privileged: bool,
    counters: Arc<Counters>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("options", &self.options)
            .field("set_role", &self.privileged)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `postgres://user@host:port/database[?schema=NAME&app_role=NAME&…]`,
    /// creating the schema, the tables and the application role if missing. See
    /// [`PostgresOptions::from_url`].
    ///
    /// # Errors
    /// [`forge_core::Error::InvalidInput`] for a malformed URL, a schema of something
    /// else, or an application role that bypasses row-level security;
    /// [`forge_core::Error::Unsupported`] for a schema written by a newer schema version;
    /// [`forge_core::Error::Backend`] when the server cannot be reached (retryable) or
    /// refuses.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(PostgresOptions::from_url(url)?).await
    }

    /// Connects with `options`.
    ///
    /// # Errors
    /// As [`PostgresStore::connect`].
    pub async fn connect_with(options: PostgresOptions) -> Result<Self> {
        let mut admin = PgConnection::connect_with(&options.connect)
            .await
            .map_err(map)?;
        let setup = schema::migrate(&mut admin, &options).await;
        // The migration's result is what matters; a failed close changes nothing.
        let _ = admin.close().await;
        let setup = setup?;

        let session_sql = if setup.privileged {
            format!(
                "SET search_path TO \"{}\"; SET ROLE \"{}\"",
                options.schema, options.app_role
            )
        } else {
            format!("SET search_path TO \"{}\"", options.schema)
        };
        let session_sql: Arc<str> = session_sql.into();
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .after_connect(move |conn, _meta| {
                let sql = Arc::clone(&session_sql);
                Box::pin(async move {
                    // Schema and role names were checked to be plain identifiers.
                    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                        .execute(conn)
                        .await
                        .map(|_| ())
                })
            })
            .connect_with(options.connect.clone())
            .await
            .map_err(map)?;
        Ok(Self {
            pool,
            options,
            privileged: setup.privileged,
            counters: Arc::default(),
        })
    }

    /// The options it connected with.
    pub fn options(&self) -> &PostgresOptions {
        &self.options
    }

    /// The role queries run as: the application role when the URL's user is
    /// privileged, otherwise that user.
    ///
    /// # Errors
    /// [`forge_core::Error::Backend`] when the server cannot be asked.
    pub async fn current_role(&self) -> Result<String> {
        sqlx::query("SELECT current_user::text")
            .fetch_one(&self.pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(map)
    }

    /// What this store has written since it was opened.
    pub fn write_stats(&self) -> WriteStats {
        self.counters.snapshot()
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A read-only transaction with `tenant` set.
    ///
    /// `REPEATABLE READ`: all its statements read one snapshot, so a page's parts belong
    /// to exactly the page's messages even while writers commit in between (under the
    /// default `READ COMMITTED` each statement would see a newer snapshot). A read-only
    /// transaction never fails to serialize.
    async fn read(&self, tenant: &TenantId) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(map)?;
        set_tenant(&mut tx, tenant).await?;
        Ok(tx)
    }
}

async fn parts_of(
    conn: &mut PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    first: &MessageId,
    last: &MessageId,
) -> Result<Vec<Part>> {
    let rows = sqlx::query(
        "SELECT body::text FROM parts WHERE tenant = $1 AND session = $2 \
         AND message >= $3 AND message <= $4 ORDER BY message, id",
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

fn session_states(tenant: &TenantId, rows: &[sqlx::postgres::PgRow]) -> Result<Vec<SessionState>> {
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

#[async_trait]
impl Store for PostgresStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.tenancy = Tenancy::RowLevelSecurity;
        caps
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let batch = Batch::prepare(batch);
        if batch.is_empty() {
            return Ok(());
        }
        let needs = batch.needs();
        let mut tally = Tally::default();
        let mut tx = self.pool.begin().await.map_err(map)?;
        let written = async {
            write::lock_sessions(&mut tx, &self.options.schema, &needs, &mut tally).await?;
            let mut setting = write::TenantSetting::default();
            let loaded = write::load(&mut tx, &mut setting, &needs, &mut tally).await?;
            let plan = batch.simulate(&loaded)?;
            for (tenant, ops) in &plan.tenants {
                write::write(&mut tx, &mut setting, tenant, ops, &mut tally).await?;
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
        let mut tx = self.read(tenant).await?;
        let rows =
            sqlx::query("SELECT seq, body::text FROM sessions WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id.as_str().as_bytes())
                .fetch_all(&mut *tx)
                .await
                .map_err(map)?;
        tx.commit().await.map_err(map)?;
        Ok(session_states(tenant, &rows)?.pop())
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let mut tx = self.read(tenant).await?;
        let rows =
            sqlx::query("SELECT seq, body::text FROM sessions WHERE tenant = $1 ORDER BY id")
                .bind(tenant.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(map)?;
        tx.commit().await.map_err(map)?;
        session_states(tenant, &rows)
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let mut tx = self.read(tenant).await?;
        let row = sqlx::query(
            "SELECT body::text FROM messages WHERE tenant = $1 AND session = $2 AND id = $3",
        )
        .bind(tenant.as_str())
        .bind(session.as_str().as_bytes())
        .bind(id.as_str().as_bytes())
        .fetch_optional(&mut *tx)
        .await
        .map_err(map)?;
        let out = match row {
            None => None,
            Some(row) => {
                let body: String = row.try_get(0).map_err(map)?;
                let info = rows::message(tenant.as_str(), &body)?;
                let parts = parts_of(&mut tx, tenant, session, id, id).await?;
                Some(MessageWithParts { info, parts })
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
        let mut tx = self.read(tenant).await?;
        let mut q =
            QueryBuilder::<Postgres>::new("SELECT body::text FROM messages WHERE tenant = ");
        q.push_bind(tenant.as_str())
            .push(" AND session = ")
            .push_bind(session.as_str().as_bytes());
        if let Some(c) = before {
            q.push(" AND id < ")
                .push_bind(c.message_id().as_str().as_bytes());
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(limit as i64 + 1);
        let rows = q.build().fetch_all(&mut *tx).await.map_err(map)?;
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
                let parts = parts_of(&mut tx, tenant, session, &first, &last).await?;
                rows::attach_parts(infos, parts, BACKEND)?
            }
            _ => Vec::new(),
        };
        tx.commit().await.map_err(map)?;
        let next = if more {
            messages.first().map(|m| Cursor::before(m.info.id.clone()))
        } else {
            None
        };
        Ok(Page { messages, next })
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let mut tx = self.read(tenant).await?;
        let mut out = OpenItems::default();
        let mut q =
            QueryBuilder::<Postgres>::new("SELECT body::text FROM messages WHERE tenant = ");
        q.push_bind(tenant.as_str());
        if let Some(s) = session {
            q.push(" AND session = ").push_bind(s.as_str().as_bytes());
        }
        q.push(" AND open ORDER BY session, id");
        for r in q.build().fetch_all(&mut *tx).await.map_err(map)? {
            out.messages.push(rows::message(
                tenant.as_str(),
                &r.try_get::<String, _>(0).map_err(map)?,
            )?);
        }
        let mut q = QueryBuilder::<Postgres>::new("SELECT body::text FROM parts WHERE tenant = ");
        q.push_bind(tenant.as_str());
        if let Some(s) = session {
            q.push(" AND session = ").push_bind(s.as_str().as_bytes());
        }
        q.push(" AND open ORDER BY session, message, id");
        for r in q.build().fetch_all(&mut *tx).await.map_err(map)? {
            out.parts.push(rows::part(
                tenant.as_str(),
                &r.try_get::<String, _>(0).map_err(map)?,
            )?);
        }
        tx.commit().await.map_err(map)?;
        Ok(out)
    }
}
