#![doc = include_str!("../README.md")]

mod blobs;
mod dialect;
mod error;
mod fence;
mod plan;
mod read;
mod rows;
mod schema;
mod search;
mod stats;
mod write;

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore, DEFAULT_APP_ROLE, DRIVER as POSTGRES};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    SqliteOptions, SqliteSettings, SqliteStore, Synchronous,
    DEFAULT_PAGE_SIZE as SQLITE_DEFAULT_PAGE_SIZE, DRIVER as SQLITE,
};
pub use stats::WriteStats;

/// Rows per multi-row statement. The widest row binds 6 values, so a statement binds at
/// most 3,000: far below SQLite's 32,766 and Postgres's 65,535 bind limits.
pub(crate) const CHUNK_ROWS: usize = 500;

/// An id read back from a BLOB / bytea key column. Ids are written from Rust strings, so
/// anything but UTF-8 means the row was written by something else.
pub(crate) fn id_from_sql<T: From<String>>(bytes: Vec<u8>) -> forge_core::Result<T> {
    String::from_utf8(bytes)
        .map(T::from)
        .map_err(|e| forge_core::Error::codec("a stored id is not UTF-8", e))
}
