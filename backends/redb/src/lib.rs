#![doc = include_str!("../README.md")]

mod config;
mod counting;
mod driver;
mod error;
mod journal;
mod read;
mod schema;
mod search;
mod store;
mod write;

pub use config::{Durability, RedbOptions, DEFAULT_CACHE_BYTES, DEFAULT_CHECKPOINT_BYTES};
pub use counting::{CountingBackend, IoCounters, IoCounts};
pub use driver::{RedbDriver, DRIVER};
pub use store::RedbStore;
