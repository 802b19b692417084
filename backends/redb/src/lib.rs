#![doc = include_str!("../README.md")]

mod config;
mod error;
mod read;
mod schema;
mod store;
mod write;

pub use config::{Durability, RedbOptions};
pub use store::RedbStore;
