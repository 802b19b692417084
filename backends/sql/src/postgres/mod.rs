//! The Postgres backend: a schema per deployment, tenants isolated by row-level
//! security, queries run as a non-superuser application role.

mod config;
mod dialect;
mod driver;
mod lock;
mod schema;
mod search;
mod store;
pub mod testing;
pub mod wal;

pub use config::{PostgresOptions, DEFAULT_APP_ROLE, DEFAULT_SEARCH_LANGUAGE};
pub use driver::{PostgresDriver, DRIVER};
pub use schema::SCHEMA_VERSION;
pub use store::PostgresStore;
