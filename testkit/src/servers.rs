//! Throwaway servers on loopback, started by the test itself: a Postgres cluster
//! ([`Postgres`]), a Redis server with its AOF on ([`Redis`]), a Redis Cluster
//! ([`Cluster`]). Each is stopped when dropped (also when the test panics). Where the
//! server binaries are absent, `start` skips loudly and returns `None` (a failure under
//! `FORGE_TEST_REQUIRE_SERVICES=1`, see [`skip`](crate::skip)).

mod cluster;
mod postgres;
mod redis_server;

pub use cluster::Cluster;
pub use postgres::{PgStop, Postgres};
pub use redis_server::{config_set, Redis, RedisStop};
