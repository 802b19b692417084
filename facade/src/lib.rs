#![doc = include_str!("../README.md")]

pub mod blobs;
mod clip;
mod create;
mod error;
mod forge;
mod open;
pub mod registry;
pub mod replay;
mod transfer;

// The user's API: open a backend, the engine and its options, the model, errors.

pub use error::{Error, Result};
pub use forge::{Forge, Forked, ImportReport, Recovered, Stats, ViewReport};
pub use open::{
    open, open_store, open_store_with, open_with, OpenOptions, Projection, DEFAULT_URL,
};
pub use registry::{install, schemes, Scheme};
pub use replay::{
    Line, ReplayError, ReplayOptions, ReplayReport, SkippedLine, UnknownEvents, UserLine,
};
pub use transfer::{Export, ImportedSession};

pub use forge_core::ai_sdk;
pub use forge_core::fence;
pub use forge_core::fork;
pub use forge_core::id;
pub use forge_core::metrics;
pub use forge_core::model;
pub use forge_core::processor;
pub use forge_core::prune;
pub use forge_core::revert;
pub use forge_core::search;
pub use forge_core::turn;
pub use forge_core::url::redact;
pub use forge_core::{
    filter_compacted, read_all, Bus, BusEvent, Claim, ClaimMode, ClaimPolicy, ClaimRequest,
    CompactedView, Cursor, Engine, Envelope, ErrorKind, Event, Flow, Footprint, GroupCommitOptions,
    Message, MessageId, MessageWithParts, Occupied, OnHeld, OpenItems, Outcome, Page, Part,
    PartDelta, PartId, Processor, ProcessorOptions, Projector, Reclaimed, RecoverReport,
    RetryPolicy, Session, SessionId, SessionPage, SessionSize, SessionState, Store, StreamEvent,
    Subscription, SyncEvent, TenantId, TenantStats, Topic, WriteCounts, DEFAULT_PAGE_LIMIT,
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

/// What a backend author needs: the traits a backend implements, its driver and the
/// registry that finds it, the reference in-memory backend, and the wrappers and
/// helpers the built-in backends are made of. The conformance suite that checks a
/// backend is the `forge-conformance` crate.
pub mod backend {
    pub use crate::registry::{driver, drivers};
    pub use forge_core::codec;
    pub use forge_core::driver::{
        guarded, last_handle, on_server, parts, temp_dir, with_query, Backend, Driver, DriverInfo,
        DriverOptions, InstanceOptions, Instances, Kind, ProbeRun, StoreMap, WriteProbe, Written,
    };
    pub use forge_core::url::server_label;
    pub use forge_core::{
        Bus, BusCapabilities, Capabilities, CountingStore, DirectProjector, Forward,
        GroupCommitProjector, LocalBus, MemoryStore, OpenItems, Projector, Replay, RetryStore,
        Scope, Store, Tenancy,
    };
}

/// Text as errors and logs show it: one line, cut short.
pub mod text {
    pub use crate::clip::{clip, MESSAGE_MAX, QUOTE_MAX};
    pub use crate::error::ClippedError;
}
