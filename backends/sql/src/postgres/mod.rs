//! The Postgres backend: a schema per deployment, tenants isolated by row-level
//! security, queries run as a non-superuser application role.

mod config;
mod dialect;
mod lock;
mod schema;
mod store;
pub mod testing;

pub use config::{PostgresOptions, DEFAULT_APP_ROLE};
pub use schema::SCHEMA_VERSION;
pub use store::PostgresStore;
