//! Helpers of the Postgres tests: a fresh schema and store per test, raw connections,
//! row counts per tenant, roles dropped after the test, and lock-waiter polling.

use forge_sql::postgres::testing::TestSchema;
use forge_sql::PostgresStore;
use sqlx::{Connection, PgConnection, Row};

use crate::common::*;

/// A fresh schema and a store on it, or `None` when the service is not configured.
pub(crate) async fn fresh(test: &str) -> Option<(TestSchema, PostgresStore)> {
    let url = postgres_url(test)?;
    let schema = TestSchema::create(&url)
        .await
        .unwrap_or_else(|e| panic!("FORGE_TEST_POSTGRES_URL is set but unusable: {e}"));
    let store = PostgresStore::connect(&schema.url()).await.unwrap();
    Some((schema, store))
}

pub(crate) async fn done(schema: TestSchema, store: PostgresStore) {
    store.close().await;
    schema.drop().await.unwrap();
}

/// Runs `test` on a [`fresh`] schema and store, then closes the store and drops the
/// schema; does nothing when the service is not configured.
pub(crate) async fn with_fresh(name: &str, test: impl AsyncFnOnce(&TestSchema, &PostgresStore)) {
    let Some((schema, store)) = fresh(name).await else {
        return;
    };
    test(&schema, &store).await;
    done(schema, store).await;
}

/// Runs `sql` (one statement, no parameters) on `conn`; the rows it affected.
pub(crate) async fn exec(conn: &mut PgConnection, sql: &'static str) -> u64 {
    sqlx::query(sql)
        .execute(conn)
        .await
        .unwrap()
        .rows_affected()
}

/// Runs `sql` (statements built by the test) on `conn`.
pub(crate) async fn exec_raw(conn: &mut PgConnection, sql: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(conn)
        .await
        .unwrap();
}

/// Takes the transaction-scoped advisory lock `key` in `tx`.
pub(crate) async fn advisory_lock(tx: &mut PgConnection, key: i64) {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(key)
        .execute(tx)
        .await
        .unwrap();
}

/// A plain connection as the URL's user with the schema on the search path.
pub(crate) async fn raw(schema: &TestSchema) -> PgConnection {
    let url = postgres_url("raw").unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    exec_raw(
        &mut conn,
        format!("SET search_path TO \"{}\"", schema.name()),
    )
    .await;
    conn
}

pub(crate) async fn count_rows(
    conn: &mut PgConnection,
    tenant_setting: Option<&str>,
) -> Vec<(String, i64)> {
    let mut tx = conn.begin().await.unwrap();
    if let Some(t) = tenant_setting {
        sqlx::query("SELECT set_config('forge.tenant', $1, true)")
            .bind(t)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let mut out = Vec::new();
    for table in ["sessions", "messages", "parts", "fences"] {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT tenant::text, count(*) FROM {table} GROUP BY tenant ORDER BY tenant"
        )))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        for r in rows {
            out.push((
                format!("{table}/{}", r.get::<String, _>(0)),
                r.get::<i64, _>(1),
            ));
        }
    }
    tx.commit().await.unwrap();
    out
}

/// A role dropped when the value is (after the schema it owns).
pub(crate) struct DroppedRole {
    pub(crate) url: String,
    pub(crate) name: String,
}

impl DroppedRole {
    /// A new role name of the server of `url`: `prefix` and a unique suffix, lowercase.
    pub(crate) fn new(url: &str, prefix: &str) -> Self {
        Self {
            url: url.to_owned(),
            name: forge_core::id::ascending(prefix).to_lowercase(),
        }
    }
}

impl Drop for DroppedRole {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP ROLE IF EXISTS \"{name}\""
                )))
                .execute(&mut conn)
                .await
                .map(|_| ())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop role {}: {dropped:?}", self.name);
        }
    }
}

/// Runs `test` with the server's URL, the name of a new role made of `prefix` and a
/// unique suffix (dropped after the test, also on a panic) and a fresh schema (dropped
/// before the role); does nothing when the service is not configured.
pub(crate) async fn with_role_and_schema(
    name: &str,
    prefix: &str,
    test: impl AsyncFnOnce(&str, &str, TestSchema),
) {
    let Some(url) = postgres_url(name) else {
        return;
    };
    let role = DroppedRole::new(&url, prefix);
    let schema = TestSchema::create(&url).await.unwrap();
    test(&url, &role.name, schema).await;
}

/// `url` with every transaction of its connections defaulting to `SERIALIZABLE`, as a
/// server, database or role configured with `default_transaction_isolation` gives.
pub(crate) fn serializable_by_default(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20default_transaction_isolation%3Dserializable")
}

/// Waits until `n` lock requests of `locktype` are waiting (not granted) and match
/// `filter` (SQL over `pg_locks`, binding `$1`).
pub(crate) async fn wait_for_waiters(conn: &mut PgConnection, filter: &str, bind: i64, n: i64) {
    let sql = format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND {filter}");
    let start = std::time::Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
            .bind(bind)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        if waiting >= n {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{waiting} of {n} lock waiters after 30 s ({filter})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// `pg_locks` columns of an advisory lock on a 64-bit key, matched against `$1`.
pub(crate) const ADVISORY_KEY: &str =
    "locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = $1";
