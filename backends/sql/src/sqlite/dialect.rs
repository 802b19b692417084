//! SQLite's side of [`crate::dialect`]: JSON rows are `TEXT`, and the tenant is a key
//! column only.

use forge_core::Tenancy;
use sqlx::error::DatabaseError;
use sqlx::sqlite::SqliteQueryResult;
use sqlx::Sqlite;

use crate::dialect::Dialect;

impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const TENANCY: Tenancy = Tenancy::Keyed;
    const BODY: &'static str = "body";
    const JSON_CAST: &'static str = "";
    /// The migration to schema 3 computes every checksum: a NULL is never valid.
    const UNCHECKED_ROWS: bool = false;

    /// `SQLITE_BUSY` / `SQLITE_LOCKED` (and their extended codes): another process holds
    /// the file's write lock longer than the busy timeout.
    fn retryable(err: &dyn DatabaseError) -> bool {
        // Extended result codes keep the primary code in the low byte.
        let primary = err
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .map(|c| c & 0xff);
        matches!(primary, Some(5 | 6))
    }

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }
}
