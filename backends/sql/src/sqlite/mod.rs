//! The SQLite backend: one file in WAL mode, one writer connection, a reader pool.

mod config;
mod dialect;
mod driver;
mod files;
mod schema;
mod search;
mod store;

pub use config::{Check, SqliteOptions, Synchronous, DEFAULT_PAGE_SIZE};
pub use driver::{SqliteDriver, DRIVER, WORKER_THREAD_PREFIX};
pub use schema::SCHEMA_VERSION;
pub use store::{SqliteSettings, SqliteStore};
