//! Test support: a fresh schema per test, dropped afterwards.
//!
//! ```no_run
//! # async fn f() -> forge_core::Result<()> {
//! use forge_sql::postgres::testing::TestSchema;
//! use forge_sql::PostgresStore;
//!
//! let schema = TestSchema::create("postgres://postgres@127.0.0.1:5432/test").await?;
//! let store = PostgresStore::connect(&schema.url()).await?;
//! // … use the store …
//! store.close().await;
//! schema.drop().await?;
//! # Ok(()) }
//! ```

use std::fmt;

use forge_core::{Error, Result, SessionId, TenantId};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use super::config::PostgresOptions;
use crate::error::postgres as map;

/// The advisory lock key that every write batch touching `session` of `tenant` in
/// `schema` takes first (transaction-scoped). A test that holds it
/// (`pg_advisory_xact_lock`) holds those batches back, as a concurrent batch would.
pub fn session_lock_key(schema: &str, tenant: &TenantId, session: &SessionId) -> i64 {
    super::lock::session_key(schema, tenant, session)
}

/// The advisory lock key that every migration of the database takes first
/// (transaction-scoped). A test that holds it holds every `connect` back.
pub fn migration_lock_key() -> i64 {
    super::schema::MIGRATION_LOCK
}

/// A schema made for one test: created empty, with a unique name, and dropped (with
/// everything in it) by [`TestSchema::drop`] or, failing that, when the value is dropped
/// (a panicking test leaves nothing behind either).
pub struct TestSchema {
    base_url: String,
    name: String,
    dropped: bool,
}

impl fmt::Debug for TestSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestSchema")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestSchema {
    /// Creates a schema named `forge_test_<unique>` on the server of `base_url` (a
    /// `postgres://` URL without `schema`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or one that already names a schema;
    /// [`Error::Backend`] when the server cannot be reached or refuses.
    pub async fn create(base_url: &str) -> Result<Self> {
        Self::create_for(base_url, "test").await
    }

    /// Creates a schema named `forge_<purpose>_<unique>` (`purpose`: lowercase ASCII
    /// letters, digits and `_`, as [`forge_core::driver::InstanceOptions::purpose_name`]
    /// gives) on the server of `base_url`.
    ///
    /// # Errors
    /// As [`TestSchema::create`].
    pub async fn create_for(base_url: &str, purpose: &str) -> Result<Self> {
        let options = check_name_parts(base_url, "schema purpose", purpose)?;
        let name = forge_core::id::ascending(&format!("forge_{purpose}")).to_lowercase();
        let mut conn = PgConnection::connect_with(&options.connect)
            .await
            .map_err(map)?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA \"{name}\"")))
            .execute(&mut conn)
            .await
            .map_err(map)?;
        let _ = conn.close().await;
        Ok(Self {
            base_url: base_url.to_owned(),
            name,
            dropped: false,
        })
    }

    /// Takes charge of a schema named `forge_test_<suffix>` that does not exist yet: the
    /// process under test creates it (its first migration). It is dropped, if it exists
    /// by then, like one made by [`TestSchema::create`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, one that already names a schema, or
    /// a suffix that is not lowercase ASCII letters, digits and `_`.
    pub fn to_be_made(base_url: &str, suffix: &str) -> Result<Self> {
        check_name_parts(base_url, "test schema suffix", suffix)?;
        Ok(Self {
            base_url: base_url.to_owned(),
            name: format!("forge_test_{suffix}"),
            dropped: false,
        })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `base_url` with `schema=<name>` added: what [`crate::PostgresStore::connect`]
    /// takes.
    pub fn url(&self) -> String {
        let sep = if self.base_url.contains('?') {
            '&'
        } else {
            '?'
        };
        format!("{}{sep}schema={}", self.base_url, self.name)
    }

    /// Drops the schema and everything in it.
    ///
    /// # Errors
    /// [`Error::Backend`] when the server cannot be reached or refuses.
    pub async fn drop(mut self) -> Result<()> {
        self.dropped = true;
        drop_schema(&self.base_url, &self.name).await
    }
}

/// The options of `base_url`, a `postgres://` URL that must not name a schema, once
/// `part` (the `what` of a test schema's name) is lowercase ASCII letters, digits and
/// `_`.
fn check_name_parts(base_url: &str, what: &str, part: &str) -> Result<PostgresOptions> {
    let options = PostgresOptions::from_url(base_url)?;
    if base_url.contains("schema=") {
        return Err(Error::invalid(
            "the base URL of a test schema must not name a schema",
        ));
    }
    if part.is_empty()
        || !part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(Error::invalid(format!(
            "{what} {part:?} is not lowercase letters, digits and _"
        )));
    }
    Ok(options)
}

async fn drop_schema(base_url: &str, name: &str) -> Result<()> {
    let options = PostgresOptions::from_url(base_url)?;
    let mut conn = PgConnection::connect_with(&options.connect)
        .await
        .map_err(map)?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{name}\" CASCADE"
    )))
    .execute(&mut conn)
    .await
    .map_err(map)?;
    let _ = conn.close().await;
    Ok(())
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Not dropped explicitly (the test panicked, or forgot): drop it on a thread of
        // its own, which works inside and outside an async runtime.
        let (url, name) = (self.base_url.clone(), self.name.clone());
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::backend("postgres", false, e))?;
            rt.block_on(drop_schema(&url, &name))
        })
        .join();
        if let Ok(Err(e)) = done {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}
