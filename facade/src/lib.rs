#![doc = include_str!("../README.md")]

mod clip;
mod error;
mod forge;
mod open;
pub mod registry;
pub mod replay;
mod transfer;

pub use clip::{clip, MESSAGE_MAX, QUOTE_MAX};
pub use error::{ClippedError, Error, Result};
pub use forge::{Forge, ImportReport, Recovered, ViewReport};
pub use open::{
    open, open_store, open_store_with, open_with, OpenOptions, Projection, DEFAULT_URL,
};
pub use registry::{driver, drivers, install, schemes, Scheme};
pub use replay::{
    Line, ReplayError, ReplayOptions, ReplayReport, SkippedLine, UnknownEvents, UserLine,
};
pub use transfer::{Export, ImportedSession};

/// The engine's building blocks, for what the facade does not wrap: the model, the
/// events, the `Store`/`Bus`/`Projector` traits, the Processor and the read path.
pub use forge_core as core;

pub use forge_core::model;
pub use forge_core::url::{redact, server_label};
pub use forge_core::{
    filter_compacted, read_all, Bus, BusEvent, Capabilities, CompactedView, Cursor, Engine,
    Envelope, ErrorKind, Event, Flow, Forward, GroupCommitOptions, Message, MessageId,
    MessageWithParts, OpenItems, Outcome, Page, Part, PartDelta, PartId, Processor,
    ProcessorOptions, Projector, RecoverReport, Session, SessionId, SessionState, Store,
    StreamEvent, Subscription, SyncEvent, TenantId, WriteCounts, DEFAULT_PAGE_LIMIT,
    MAX_PAGE_LIMIT,
};

/// The error type of the engine's traits (stores, buses, projectors), which
/// [`Error`] wraps with context.
pub type CoreError = forge_core::Error;

/// The redb backend (feature `redb`).
#[cfg(feature = "redb")]
pub use forge_redb as redb;
/// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
pub use forge_redis as redis;
/// The SQL backends (features `sqlite`, `postgres`).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use forge_sql as sql;
