//! `PostgresStore`: the `Store` trait over a Postgres schema, tenants isolated by
//! row-level security.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{Result, SessionId, TenantId};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Row, Transaction};

use super::config::PostgresOptions;
use super::{lock, schema};
use crate::dialect::{impl_store, Backend, Dialect, Reader};
use crate::error::postgres as map;
use crate::plan::Needs;
use crate::stats::{Counters, Tally, WriteStats};

/// A [`Store`](forge_core::Store) in a Postgres schema, through sqlx.
///
/// Every transaction, read or write, first sets `forge.tenant` (transaction-local) and
/// row-level security admits only that tenant's rows, on top of the queries' own
/// `tenant = …` filters. Connections run as a non-superuser application role when the
/// URL's user would bypass row-level security. Each `apply` is one transaction; batches,
/// claims and releases touching the same session are serialized by a transaction-scoped
/// advisory lock.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    options: PostgresOptions,
    privileged: bool,
    /// The text search configuration of the index; `None`: search is off.
    search: Option<String>,
    counters: Arc<Counters>,
    place: Arc<str>,
}

/// How long taking a connection from the pool may wait (sqlx's default is 30 s, longer
/// than a caller's default retry deadline). A pool timeout is retryable, so the
/// caller's retry takes over; while the server is away, each timeout is followed by
/// one direct attempt that names why.
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long that direct attempt may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl PostgresStore {
    /// A failure to take a connection from the pool. sqlx reports a server that cannot
    /// be reached as "pool timed out"; one direct connection attempt names the cause
    /// instead (`Connection refused`, `the database system is starting up`).
    async fn acquire_failed(&self, err: sqlx::Error) -> forge_core::Error {
        if !matches!(err, sqlx::Error::PoolTimedOut) {
            return map(err);
        }
        match tokio::time::timeout(
            PROBE_TIMEOUT,
            PgConnection::connect_with(&self.options.connect),
        )
        .await
        {
            // Retryable (refused, starting up) or not (a bad password): as it is.
            Ok(Err(cause)) => map(cause),
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                map(err)
            }
            Err(_) => map(err),
        }
    }

    /// Connects to `postgres://user@host:port/database[?schema=NAME&app_role=NAME&…]`,
    /// creating the schema, the tables and the application role if missing, and building
    /// or dropping the search index as `search` and `search_language` ask. See
    /// [`PostgresOptions::from_url`].
    ///
    /// # Errors
    /// [`forge_core::Error::InvalidInput`] for a malformed URL, a schema of something
    /// else, an application role that bypasses row-level security, or a
    /// `search_language` the server does not have;
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
            // Short, so a caller's retry deadline (not the pool's) decides how long a
            // server restart is waited out, and a failed wait names its cause.
            .acquire_timeout(ACQUIRE_TIMEOUT)
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
            privileged: setup.privileged,
            search: setup.search,
            counters: Arc::default(),
            place: format!("Postgres schema {}", options.schema).into(),
            options,
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
}

#[async_trait]
impl Backend for PostgresStore {
    type Db = Postgres;

    /// Plain `VACUUM` of the store's tables, as autovacuum runs it: dead rows' space is
    /// made free for new rows (the files shrink only by empty pages at their end).
    /// `VACUUM` needs the tables' owner. A store opened by a privileged user (which
    /// runs its queries as the application role) vacuums as that user; one opened by
    /// the owner vacuums as itself; any other leaves the work to autovacuum and reports
    /// the dead rows waiting for it.
    async fn reclaim(&self) -> Result<forge_core::Reclaimed> {
        let before = self.footprint().await?.total("relation");
        let mut conn = self.pool.acquire().await.map_err(map)?;
        let (dead, owner): (i64, bool) = sqlx::query_as(
            "SELECT COALESCE(sum(s.n_dead_tup), 0)::bigint, \
                    COALESCE(bool_and(pg_has_role(current_user, t.tableowner, 'USAGE')), false) \
             FROM pg_stat_user_tables s JOIN pg_tables t \
               ON t.schemaname = s.schemaname AND t.tablename = s.relname \
             WHERE s.schemaname = $1",
        )
        .bind(&self.options.schema)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
        if !owner && !self.privileged {
            drop(conn);
            return Ok(forge_core::Reclaimed::new(
                before,
                before,
                format!("left to autovacuum (not the tables' owner): {dead} dead rows"),
            ));
        }
        let schema = super::schema::quoted(&self.options.schema);
        // One statement at a time: several in one query string are one transaction,
        // which VACUUM refuses.
        let mut statements = Vec::new();
        if self.privileged {
            // Back to the URL's user for the VACUUM, and to the application role after.
            statements.push("RESET ROLE".to_owned());
        }
        for table in [
            "sessions",
            "messages",
            "parts",
            "fences",
            "blobs",
            "blob_touched",
        ] {
            statements.push(format!("VACUUM {schema}.{table}"));
        }
        let mut vacuumed = Ok(());
        for sql in statements {
            if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await
            {
                vacuumed = Err(e);
                break;
            }
        }
        if self.privileged {
            let back = format!("SET ROLE {}", super::schema::quoted(&self.options.app_role));
            let reset = sqlx::raw_sql(sqlx::AssertSqlSafe(back))
                .execute(&mut *conn)
                .await;
            if reset.is_err() {
                // Never back to the pool with the URL's privileges.
                let _ = conn.detach();
            }
            reset.map_err(map)?;
        }
        vacuumed.map_err(map)?;
        let after = self.footprint().await?.total("relation");
        Ok(forge_core::Reclaimed::new(
            before,
            after,
            format!("VACUUM: {dead} dead rows before"),
        ))
    }

    /// Each table of the schema with its indexes and TOAST
    /// (`pg_total_relation_size`), for all tenants: sizes are not split by rows.
    async fn footprint(&self) -> Result<forge_core::Footprint> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT c.relname::text, pg_total_relation_size(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        )
        .bind(&self.options.schema)
        .fetch_all(&self.pool)
        .await
        .map_err(map)?;
        Ok(forge_core::Footprint {
            items: rows
                .into_iter()
                .map(|(name, bytes)| forge_core::Occupied {
                    name: format!("{}.{name}", self.options.schema),
                    kind: "relation".to_owned(),
                    bytes: u64::try_from(bytes).unwrap_or(0),
                })
                .collect(),
        })
    }

    /// Always a read-only transaction with `tenant` set, `REPEATABLE READ`: all its
    /// statements read one snapshot, so a page's parts belong to exactly the page's
    /// messages even while writers commit in between (under the default `READ
    /// COMMITTED` each statement would see a newer snapshot). A read-only transaction
    /// never fails to serialize.
    async fn reader(&self, tenant: &TenantId, _snapshot: bool) -> Result<Reader<Postgres>> {
        let mut tx = match self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
        {
            Ok(tx) => tx,
            Err(e) => return Err(self.acquire_failed(e).await),
        };
        Postgres::set_tenant(&mut tx, tenant).await?;
        Ok(Reader::Transaction(tx))
    }

    /// `READ COMMITTED`, always: batches on one session are serialized by the session
    /// locks ([`Backend::before_load`]), and each statement after the locks sees what
    /// the previous holder committed, so what a batch reads stays true until it writes.
    /// It is set explicitly because a server, database or role may default to
    /// `REPEATABLE READ` or `SERIALIZABLE` (`default_transaction_isolation`): there the
    /// snapshot is taken by the lock statement, before its wait, and a batch that waited
    /// would read the rows as they were before the previous holder's commit, then fail to
    /// serialize (40001) on the first row they share.
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>> {
        match self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
            .await
        {
            Ok(tx) => Ok(tx),
            Err(e) => Err(self.acquire_failed(e).await),
        }
    }

    /// As a batch: `READ COMMITTED`, each statement after the session lock sees what the
    /// lock's previous holder committed.
    const BEGIN_FENCE: &'static str = "BEGIN ISOLATION LEVEL READ COMMITTED";

    async fn fence_conn(&self) -> Result<PoolConnection<Postgres>> {
        match self.pool.acquire().await {
            Ok(conn) => Ok(conn),
            Err(e) => Err(self.acquire_failed(e).await),
        }
    }

    async fn lock_fence(
        &self,
        conn: &mut PgConnection,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<()> {
        lock::lock_fence(conn, &self.options.schema, tenant, session).await
    }

    async fn before_load(
        &self,
        conn: &mut PgConnection,
        needs: &Needs,
        tally: &mut Tally,
    ) -> Result<()> {
        lock::lock_sessions(conn, &self.options.schema, needs, tally).await
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn search_config(&self) -> Option<&str> {
        self.search.as_deref()
    }

    /// Set up by a role row-level security does not bind: `search_candidates`
    /// ([`super::search`]).
    fn search_function(&self) -> bool {
        self.privileged && self.search.is_some()
    }

    fn place(&self) -> &str {
        &self.place
    }
}

impl_store!(PostgresStore);

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("options", &self.options)
            .field("set_role", &self.privileged)
            .finish_non_exhaustive()
    }
}
