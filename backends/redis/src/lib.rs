#![doc = include_str!("../README.md")]

mod blobs;
mod bus;
mod config;
mod conn;
mod driver;
mod durability;
mod entry;
mod error;
mod fence;
mod index;
mod keys;
pub mod probe;
mod search;
mod store;
mod worker;

pub use bus::RedisBus;
pub use config::RedisOptions;
pub use driver::{RedisDriver, DRIVER};
pub use durability::Fsync;
pub use keys::{shard_of, KeyLayout, Keys};
pub use store::RedisStore;
pub use worker::{ProjectorWorker, WorkerOptions, WorkerStats};
