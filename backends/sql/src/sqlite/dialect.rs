//! SQLite's side of [`crate::dialect`]: JSON rows are `TEXT`, and the tenant is a key
//! column only.

use forge_core::{Error, Tenancy};
use sqlx::sqlite::SqliteQueryResult;
use sqlx::Sqlite;

use crate::dialect::Dialect;

impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const TENANCY: Tenancy = Tenancy::Keyed;
    const BODY: &'static str = "body";
    const JSON_CAST: &'static str = "";

    fn map(err: sqlx::Error) -> Error {
        crate::error::sqlite(err)
    }

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }
}
