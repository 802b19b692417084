//! What the SQLite and Postgres backends share, in three layers:
//!
//! - [`SqlDb`] runs queries and binds and decodes the column types used here, on any
//!   sqlx database that supports them (one blanket implementation);
//! - [`Dialect`] is what differs between the two SQL dialects: how a JSON column is
//!   written and read, how errors are classified, the tenant setting row-level
//!   security reads, and how the search index is kept and queried ([`crate::search`]);
//! - [`Backend`] is what a store gives the shared read path ([`crate::read`]), write
//!   path ([`crate::write`]) and fence records ([`crate::fence`]): its transactions and
//!   its counters.
//!
//! Placeholders (`?` or `$n`) come from sqlx's [`QueryBuilder`], so the shared SQL never
//! spells one.

use std::future::Future;
use std::ops::{Deref, DerefMut};

use async_trait::async_trait;
use forge_core::{Error, Result, SessionId, Tenancy, TenantId};
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, QueryBuilder, Row, Transaction,
    Type,
};

use crate::plan::{Needs, PartRow};
use crate::search::Candidates;
use crate::stats::{Counters, Tally};

/// A value to bind.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    /// A `text` column (tenants).
    Text(&'a str),
    /// An id, stored as the bytes of its UTF-8 (`BLOB` / `bytea`).
    Id(&'a str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A JSON row.
    Json(&'a str),
}

/// A sqlx database with the column types this crate uses.
pub(crate) trait SqlDb: Database {
    /// Runs `q` and returns its rows.
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        q: &'c mut QueryBuilder<Self>,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'c;

    /// Runs `q` for its effect.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        q: &'c mut QueryBuilder<Self>,
    ) -> impl Future<Output = sqlx::Result<Self::QueryResult>> + Send + 'c;

    /// Runs SQL without parameters, possibly several statements.
    fn execute_raw<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = sqlx::Result<Self::QueryResult>> + Send + 'c;

    /// Binds a text, bytes, integer or boolean value (JSON is a [`Dialect`] matter).
    fn bind_plain(q: &mut QueryBuilder<Self>, arg: Arg<'_>);

    /// Column `i` as text.
    fn text(row: &Self::Row, i: usize) -> sqlx::Result<String>;

    /// Column `i` as bytes.
    fn bytes(row: &Self::Row, i: usize) -> sqlx::Result<Vec<u8>>;

    /// Column `i` as an integer.
    fn int(row: &Self::Row, i: usize) -> sqlx::Result<i64>;

    /// Column `i` as an integer or NULL.
    fn opt_int(row: &Self::Row, i: usize) -> sqlx::Result<Option<i64>>;

    /// Column `i` as text or NULL.
    fn opt_text(row: &Self::Row, i: usize) -> sqlx::Result<Option<String>>;

    /// Column `i` as a floating-point number.
    fn float(row: &Self::Row, i: usize) -> sqlx::Result<f64>;
}

impl<DB> SqlDb for DB
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> &'a [u8]: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> Option<i64>: Decode<'a, DB> + Type<DB>,
    for<'a> f64: Decode<'a, DB> + Type<DB>,
    for<'a> bool: Encode<'a, DB> + Type<DB>,
    for<'a> String: Decode<'a, DB> + Type<DB>,
    for<'a> Option<String>: Decode<'a, DB> + Type<DB>,
    for<'a> Vec<u8>: Decode<'a, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        q: &'c mut QueryBuilder<Self>,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'c {
        q.build().fetch_all(conn)
    }

    fn execute<'c>(
        conn: &'c mut Self::Connection,
        q: &'c mut QueryBuilder<Self>,
    ) -> impl Future<Output = sqlx::Result<Self::QueryResult>> + Send + 'c {
        q.build().execute(conn)
    }

    fn execute_raw<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = sqlx::Result<Self::QueryResult>> + Send + 'c {
        conn.execute(sqlx::raw_sql(sql))
    }

    fn bind_plain(q: &mut QueryBuilder<Self>, arg: Arg<'_>) {
        match arg {
            Arg::Text(s) | Arg::Json(s) => q.push_bind(s),
            Arg::Id(s) => q.push_bind(s.as_bytes()),
            Arg::Int(n) => q.push_bind(n),
            Arg::Bool(b) => q.push_bind(b),
        };
    }

    fn text(row: &Self::Row, i: usize) -> sqlx::Result<String> {
        row.try_get(i)
    }

    fn bytes(row: &Self::Row, i: usize) -> sqlx::Result<Vec<u8>> {
        row.try_get(i)
    }

    fn int(row: &Self::Row, i: usize) -> sqlx::Result<i64> {
        row.try_get(i)
    }

    fn opt_int(row: &Self::Row, i: usize) -> sqlx::Result<Option<i64>> {
        row.try_get(i)
    }

    fn opt_text(row: &Self::Row, i: usize) -> sqlx::Result<Option<String>> {
        row.try_get(i)
    }

    fn float(row: &Self::Row, i: usize) -> sqlx::Result<f64> {
        row.try_get(i)
    }
}

/// What differs between the SQL dialects.
#[async_trait]
pub(crate) trait Dialect: SqlDb {
    /// The backend's name, in capabilities and errors.
    const BACKEND: &'static str;
    /// How tenants are kept apart.
    const TENANCY: Tenancy;
    /// The JSON row column, selected as text.
    const BODY: &'static str;
    /// Follows a bound JSON value (a cast, where the column is not text).
    const JSON_CAST: &'static str;
    /// Whether a row with a NULL `checksum` is read unverified: rows written before the
    /// column existed, which the migration could not reach to fill in.
    const UNCHECKED_ROWS: bool;
    /// Whether a read also checks that a row's id column is the id in its JSON (a key
    /// damaged in the file would otherwise show the row under another id).
    const KEY_CHECKED: bool = false;
    /// Whether a part's search index entry is a column of its row (Postgres:
    /// `parts.search`, set by the part upsert through [`Dialect::push_search`]) rather
    /// than rows of tables of its own, written by [`Dialect::index_parts`] after the
    /// upsert (SQLite).
    const SEARCH_IN_ROW: bool;

    /// Whether a database error (not a unique or foreign-key violation) may go away on
    /// a retry.
    fn retryable(err: &dyn DatabaseError) -> bool;

    /// Maps a native error, keeping it as the source ([`crate::error::map`]).
    fn map(err: sqlx::Error) -> Error {
        crate::error::map::<Self>(err)
    }

    /// The rows a statement inserted, updated or deleted.
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// Makes `tenant` the one row-level security admits, for the rest of the
    /// transaction. Returns whether it ran a statement (nothing to do without
    /// row-level security).
    async fn set_tenant(_conn: &mut Self::Connection, _tenant: &TenantId) -> Result<bool> {
        Ok(false)
    }

    /// Pushes the value of the `search` column of `row`, a part of `tenant`, indexed
    /// with text search configuration `config` (dialects with [`Dialect::SEARCH_IN_ROW`]).
    fn push_search(_q: &mut QueryBuilder<Self>, _tenant: &TenantId, _row: &PartRow, _config: &str) {
    }

    /// Makes the index hold `rows`, parts of `tenant` as stored now, under their
    /// [`PartRow::doc`] (none: no entry). The entries of their earlier versions are gone
    /// already (SQLite's triggers remove an entry when its row is updated or deleted;
    /// Postgres's index is a column of the row). The write path calls it after the part
    /// upsert where the index is kept apart from the rows; the backfill
    /// ([`crate::search::backfill`]) calls it in every dialect, on an empty index.
    async fn index_parts(
        conn: &mut Self::Connection,
        tenant: &TenantId,
        rows: &[PartRow],
        config: &str,
        tally: &mut Tally,
    ) -> Result<()>;

    /// The statement that finds the best `c.limit` candidates after the first
    /// `c.offset` ([`Candidates`]), a row each: the part's JSON, its checksum, its id
    /// and the score; the JSON NULL for a candidate that is not a part of the tenant (or
    /// session) asked for.
    fn search_candidates(c: &Candidates<'_>) -> QueryBuilder<Self>;

    /// Binds `arg`.
    fn bind(q: &mut QueryBuilder<Self>, arg: Arg<'_>) {
        Self::bind_plain(q, arg);
        if let Arg::Json(_) = arg {
            q.push(Self::JSON_CAST);
        }
    }

    /// Pushes `(a, b, …)`.
    fn push_tuple<const N: usize>(q: &mut QueryBuilder<Self>, args: [Arg<'_>; N]) {
        q.push("(");
        for (i, arg) in args.into_iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            Self::bind(q, arg);
        }
        q.push(")");
    }

    /// Pushes `t1, t2, …`: one tuple per item (a `VALUES` list or an `IN` list).
    fn push_tuples<'a, T, const N: usize>(
        q: &mut QueryBuilder<Self>,
        items: &'a [T],
        tuple: impl Fn(&'a T) -> [Arg<'a>; N],
    ) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            Self::push_tuple(q, tuple(item));
        }
    }
}

/// A connection to read through: a transaction when the reads must share one
/// snapshot (or a tenant setting), otherwise a plain pooled connection.
pub(crate) enum Reader<DB: Database> {
    Transaction(Transaction<'static, DB>),
    // Postgres reads always need a transaction, for the tenant setting.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Connection(PoolConnection<DB>),
}

impl<DB: Database> Reader<DB> {
    /// Ends the reads (commits a read transaction).
    pub async fn finish(self) -> sqlx::Result<()> {
        match self {
            Self::Transaction(tx) => tx.commit().await,
            Self::Connection(_) => Ok(()),
        }
    }
}

impl<DB: Database> Deref for Reader<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match self {
            Self::Transaction(tx) => tx,
            Self::Connection(conn) => conn,
        }
    }
}

impl<DB: Database> DerefMut for Reader<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self {
            Self::Transaction(tx) => tx,
            Self::Connection(conn) => conn,
        }
    }
}

/// A store over a SQL database: what the shared read and write paths need of it.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// Its dialect.
    type Db: Dialect;

    /// A connection that sees `tenant`'s rows; `snapshot`: all its reads see one
    /// snapshot.
    async fn reader(&self, tenant: &TenantId, snapshot: bool) -> Result<Reader<Self::Db>>;

    /// Begins the transaction of one `apply`.
    async fn begin_write(&self) -> Result<Transaction<'static, Self::Db>>;

    /// The statement that begins the transaction of a claim or release.
    const BEGIN_FENCE: &'static str;

    /// A writer connection for a claim or release, set up so that a commit on it is
    /// durable when it returns.
    async fn fence_conn(&self) -> Result<PoolConnection<Self::Db>>;

    /// Runs first in the transaction of a claim or release of `session`: from then until
    /// the transaction ends, no `apply`, claim or release touching the session runs, and
    /// the transaction sees what they committed. Also makes `tenant` the transaction's
    /// tenant (row-level security).
    async fn lock_fence(
        &self,
        conn: &mut <Self::Db as Database>::Connection,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<()>;

    /// Gives back a connection of [`Backend::fence_conn`] once its transaction ended.
    async fn fence_conn_done(&self, conn: PoolConnection<Self::Db>) {
        drop(conn);
    }

    /// Runs first in every write transaction, before anything is read.
    async fn before_load(
        &self,
        _conn: &mut <Self::Db as Database>::Connection,
        _needs: &Needs,
        _tally: &mut Tally,
    ) -> Result<()> {
        Ok(())
    }

    /// Its write counters.
    fn counters(&self) -> &Counters;

    /// The text search configuration its index is kept with (Postgres: a `regconfig`;
    /// SQLite: FTS5's tokenizer), or `None` when searching is off (`search=off`).
    fn search_config(&self) -> Option<&str>;

    /// Whether search candidates come from a function of the database that may use the
    /// index where row-level security keeps a plain query from it (Postgres).
    fn search_function(&self) -> bool {
        false
    }

    /// What it occupies: its files, or its relations.
    async fn footprint(&self) -> Result<forge_core::Footprint>;

    /// Gives back the space deletions freed ([`forge_core::Store::reclaim`]).
    async fn reclaim(&self) -> Result<forge_core::Reclaimed>;

    /// The database, as errors name it (`SQLite database PATH`, `Postgres schema NAME`).
    fn place(&self) -> &str;

    /// A failed write's error, with the database named where the error does not say
    /// which it is (an embedded file: "no space left" must say on which file).
    fn name_place(&self, err: Error) -> Error {
        err
    }
}

/// Implements [`forge_core::Store`] for a [`Backend`] through the shared read and write
/// paths.
macro_rules! impl_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl forge_core::Store for $store {
            fn capabilities(&self) -> forge_core::Capabilities {
                crate::read::capabilities(self)
            }

            async fn apply(
                &self,
                batch: &[forge_core::Envelope<forge_core::SyncEvent>],
            ) -> forge_core::Result<()> {
                crate::write::apply(self, batch)
                    .await
                    .map_err(|e| crate::dialect::Backend::name_place(self, e))
            }

            async fn claim(
                &self,
                tenant: &forge_core::TenantId,
                session: &forge_core::SessionId,
                request: &forge_core::ClaimRequest,
            ) -> forge_core::Result<forge_core::Claim> {
                crate::fence::claim(self, tenant, session, request)
                    .await
                    .map_err(|e| crate::dialect::Backend::name_place(self, e))
            }

            async fn release(
                &self,
                tenant: &forge_core::TenantId,
                session: &forge_core::SessionId,
                epoch: u64,
            ) -> forge_core::Result<()> {
                crate::fence::release(self, tenant, session, epoch)
                    .await
                    .map_err(|e| crate::dialect::Backend::name_place(self, e))
            }

            async fn claimed(
                &self,
                tenant: &forge_core::TenantId,
                session: &forge_core::SessionId,
            ) -> forge_core::Result<Option<forge_core::Claim>> {
                crate::fence::claimed(self, tenant, session).await
            }

            async fn session(
                &self,
                tenant: &forge_core::TenantId,
                id: &forge_core::SessionId,
            ) -> forge_core::Result<Option<forge_core::SessionState>> {
                crate::read::session(self, tenant, id).await
            }

            async fn sessions(
                &self,
                tenant: &forge_core::TenantId,
            ) -> forge_core::Result<Vec<forge_core::SessionState>> {
                crate::read::sessions(self, tenant).await
            }

            async fn sessions_after(
                &self,
                tenant: &forge_core::TenantId,
                after: Option<&forge_core::SessionId>,
                limit: usize,
            ) -> forge_core::Result<forge_core::SessionPage> {
                crate::read::sessions_after(self, tenant, after, limit).await
            }

            async fn footprint(&self) -> forge_core::Result<forge_core::Footprint> {
                crate::dialect::Backend::footprint(self).await
            }

            async fn reclaim(&self) -> forge_core::Result<forge_core::Reclaimed> {
                crate::dialect::Backend::reclaim(self).await
            }

            async fn put_blobs(
                &self,
                tenant: &forge_core::TenantId,
                blobs: &[forge_core::blob::BlobValue],
                now_ms: i64,
                refresh_before_ms: i64,
            ) -> forge_core::Result<u64> {
                crate::blobs::put(self, tenant, blobs, now_ms, refresh_before_ms)
                    .await
                    .map_err(|e| crate::dialect::Backend::name_place(self, e))
            }

            async fn blobs(
                &self,
                tenant: &forge_core::TenantId,
                ids: &[forge_core::BlobId],
            ) -> forge_core::Result<Vec<Option<std::sync::Arc<str>>>> {
                crate::blobs::get(self, tenant, ids).await
            }

            async fn blob_list(
                &self,
                tenant: &forge_core::TenantId,
            ) -> forge_core::Result<Vec<forge_core::blob::BlobEntry>> {
                crate::blobs::list(self, tenant).await
            }

            async fn delete_blobs(
                &self,
                tenant: &forge_core::TenantId,
                ids: &[forge_core::BlobId],
                touched_before_ms: i64,
            ) -> forge_core::Result<u64> {
                crate::blobs::delete(self, tenant, ids, touched_before_ms)
                    .await
                    .map_err(|e| crate::dialect::Backend::name_place(self, e))
            }

            async fn message(
                &self,
                tenant: &forge_core::TenantId,
                session: &forge_core::SessionId,
                id: &forge_core::MessageId,
            ) -> forge_core::Result<Option<forge_core::MessageWithParts>> {
                crate::read::message(self, tenant, session, id).await
            }

            async fn messages(
                &self,
                tenant: &forge_core::TenantId,
                session: &forge_core::SessionId,
                before: Option<&forge_core::Cursor>,
                limit: usize,
            ) -> forge_core::Result<forge_core::Page> {
                crate::read::messages(self, tenant, session, before, limit).await
            }

            async fn open_items(
                &self,
                tenant: &forge_core::TenantId,
                session: Option<&forge_core::SessionId>,
            ) -> forge_core::Result<forge_core::OpenItems> {
                crate::read::open_items(self, tenant, session).await
            }

            async fn search(
                &self,
                tenant: &forge_core::TenantId,
                query: &forge_core::SearchQuery,
            ) -> forge_core::Result<Vec<forge_core::SearchHit>> {
                crate::search::search(self, tenant, query).await
            }

            /// Closes the pools (SQLite: the last connection checkpoints the WAL into
            /// the database file and removes it).
            async fn close(&self) -> forge_core::Result<()> {
                <$store>::close(self).await;
                Ok(())
            }
        }
    };
}
pub(crate) use impl_store;
