//! Mapping sqlx errors into [`forge_core::Error`]: one function for both dialects, the
//! sqlx error kept as the source; each dialect classifies its own database errors
//! ([`Dialect::retryable`]).
//!
//! | native error | forge error |
//! |---|---|
//! | unique / foreign-key violation | [`Error::Conflict`] (the database's message and constraint named) |
//! | lost connection, pool timeout, busy / locked (SQLite), serialization failure, deadlock, shutdown, too many connections (Postgres) | [`Error::Backend`] with `retryable: true` |
//! | anything else | [`Error::Backend`] with `retryable: false` |
//!
//! `Error::Conflict` names the database's message, code and constraint, and keeps the
//! sqlx error as its source.

use forge_core::Error;
use sqlx::error::ErrorKind;

use crate::dialect::Dialect;

/// A unique or foreign-key violation: `err` is a database error.
fn conflict(backend: &str, err: sqlx::Error) -> Error {
    let message = match &err {
        sqlx::Error::Database(db) => {
            let code = db
                .code()
                .map(std::borrow::Cow::into_owned)
                .unwrap_or_default();
            let constraint = db
                .constraint()
                .map(|c| format!(", constraint {c}"))
                .unwrap_or_default();
            format!("{backend}: {} (code {code}{constraint})", db.message())
        }
        other => format!("{backend}: {other}"),
    };
    Error::conflict_with(message, err)
}

/// Maps a sqlx error of dialect `D`: violations are conflicts, the dialect says which
/// other database errors are retryable, and pool and connection errors are the same for
/// both dialects.
pub(crate) fn map<D: Dialect>(err: sqlx::Error) -> Error {
    let retryable = match &err {
        sqlx::Error::Database(db) => {
            if matches!(
                db.kind(),
                ErrorKind::UniqueViolation | ErrorKind::ForeignKeyViolation
            ) {
                return conflict(D::BACKEND, err);
            }
            D::retryable(db.as_ref())
        }
        // The connection broke or could not be had in time: another try may get one.
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        _ => false,
    };
    Error::backend(D::BACKEND, retryable, err)
}

/// Maps a SQLite error (corruption included: see the SQLite dialect's `map`).
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite(err: sqlx::Error) -> Error {
    <sqlx::Sqlite as Dialect>::map(err)
}

/// Maps a Postgres error.
#[cfg(feature = "postgres")]
pub(crate) fn postgres(err: sqlx::Error) -> Error {
    map::<sqlx::Postgres>(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// The error of `sql`, which must fail, on the connection `conn`.
    macro_rules! failing {
        ($conn:expr, $sql:literal) => {
            sqlx::query($sql).execute($conn).await.unwrap_err()
        };
    }

    /// On the connection `conn`, `create` makes table `p` and table `c` whose column `p`
    /// references it, with a row `p = 1`; then a duplicate key and an orphan row map
    /// (through `map`) to conflicts naming `unique` and `foreign`, and a syntax error to
    /// a permanent error.
    macro_rules! assert_constraint_errors {
        ($conn:expr, $create:literal, $map:expr, $unique:literal, $foreign:literal) => {
            sqlx::raw_sql($create).execute(&mut *$conn).await.unwrap();
            let dup = failing!(&mut *$conn, "INSERT INTO p VALUES (1)");
            assert!(matches!($map(dup), Error::Conflict { message: m, .. } if m.contains($unique)));
            let orphan = failing!(&mut *$conn, "INSERT INTO c VALUES (1, 2)");
            assert!(matches!($map(orphan), Error::Conflict { message: m, .. } if m.contains($foreign)));
            let bad = failing!(&mut *$conn, "SELEC 1");
            assert!(!$map(bad).is_retryable());
        };
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn connection_loss_is_retryable_and_keeps_its_source() {
        let mut maps: Vec<fn(sqlx::Error) -> Error> = Vec::new();
        #[cfg(feature = "sqlite")]
        maps.push(sqlite);
        #[cfg(feature = "postgres")]
        maps.push(postgres);
        for map in maps {
            let err = map(sqlx::Error::Io(std::io::Error::other("cable cut")));
            assert!(err.is_retryable(), "{err}");
            assert!(err.to_string().contains("cable cut"), "{err}");
            let source = err.source().expect("source kept");
            assert!(source.downcast_ref::<sqlx::Error>().is_some());
            assert!(map(sqlx::Error::PoolTimedOut).is_retryable());
            assert!(!map(sqlx::Error::RowNotFound).is_retryable());
            assert!(!map(sqlx::Error::PoolClosed).is_retryable());
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_errors_map_to_conflict_and_retryable_busy() {
        use sqlx::sqlite::SqliteConnectOptions;
        use sqlx::{ConnectOptions, Connection};
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let options = SqliteConnectOptions::new()
                .filename(dir.path().join("e.db"))
                .create_if_missing(true)
                .busy_timeout(std::time::Duration::ZERO);
            let mut one = options.connect().await.unwrap();
            let mut two = options.connect().await.unwrap();
            assert_constraint_errors!(
                &mut one,
                "CREATE TABLE p (id INTEGER PRIMARY KEY);
                 CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER REFERENCES p (id));
                 INSERT INTO p VALUES (1);",
                sqlite,
                "UNIQUE",
                "FOREIGN KEY"
            );

            // Another connection holds the write lock: busy, retryable, source kept.
            let held = one.begin_with("BEGIN IMMEDIATE").await.unwrap();
            let busy = two.begin_with("BEGIN IMMEDIATE").await.unwrap_err();
            let err = sqlite(busy);
            assert!(err.is_retryable(), "{err:?}");
            assert!(err.source().is_some());
            held.rollback().await.unwrap();
        });
    }

    /// Runs only with `FORGE_TEST_POSTGRES_URL` (the integration tests say so loudly).
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_errors_map_to_conflict_and_retryable_connection_loss() {
        use sqlx::{Connection, PgConnection};
        let Some(url) =
            forge_conformance::service_url("FORGE_TEST_POSTGRES_URL", "postgres error mapping")
        else {
            return;
        };
        runtime().block_on(async {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            assert_constraint_errors!(
                &mut conn,
                "CREATE TEMP TABLE p (id int PRIMARY KEY);
                 CREATE TEMP TABLE c (id int PRIMARY KEY, p int REFERENCES p (id));
                 INSERT INTO p VALUES (1);",
                postgres,
                "23505",
                "23503"
            );
            // The server ends the session: the connection is lost, which is retryable.
            let gone = failing!(&mut conn, "SELECT pg_terminate_backend(pg_backend_pid())");
            let err = postgres(gone);
            assert!(err.is_retryable(), "{err:?}");
            // And the next statement on the dead connection fails as retryable too.
            let dead = failing!(&mut conn, "SELECT 1");
            let err = postgres(dead);
            assert!(err.is_retryable(), "{err:?}");
        });
    }
}
