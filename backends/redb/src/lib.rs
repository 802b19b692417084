#![doc = include_str!("../README.md")]

mod config;
mod counting;
mod error;
mod read;
mod schema;
mod store;
mod write;

pub use config::{Durability, RedbOptions};
pub use counting::{CountingBackend, IoCounters, IoCounts};
pub use store::RedbStore;
