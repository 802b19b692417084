#![doc = include_str!("../README.md")]

pub mod ai_sdk;
pub mod blob;
pub mod bus;
mod bus_event;
pub mod close;
pub mod codec;
pub mod counting;
pub mod driver;
pub mod engine;
pub mod error;
pub mod event;
pub mod fence;
pub mod files;
pub mod fork;
pub mod forward;
pub mod group;
pub mod id;
pub mod local_bus;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod processor;
pub mod projector;
pub mod prune;
pub mod read;
mod reconcile;
pub mod recover;
pub mod retry;
pub mod revert;
pub mod search;
pub mod stats;
pub mod store;
pub mod stream;
pub mod tenant;
pub mod turn;
pub mod url;

pub use blob::{BlobId, BlobOptions, BlobStore, BlobSweep, Blobbed};
pub use bus::{Bus, BusCapabilities, Replay, Subscription, Topic};
pub use counting::{CountingStore, WriteCounts};
pub use engine::Engine;
pub use error::{BoxError, Error, ErrorKind, Result, SharedError};
pub use event::{BusEvent, Envelope, Event, PartDelta, SyncEvent};
pub use fence::{Claim, ClaimMode, ClaimRequest};
pub use forward::Forward;
pub use group::{FlushMode, GroupCommitOptions, GroupCommitProjector, GroupCommitStats};
pub use id::{MessageId, PartId, SessionId};
pub use local_bus::{LocalBus, DEFAULT_REPLAY_TOTAL};
pub use memory::MemoryStore;
pub use model::{Message, MessageWithParts, Part, Session};
pub use processor::{Flow, Outcome, Processor, ProcessorOptions, ProcessorStats};
pub use projector::{ClaimPolicy, DirectProjector, OnHeld, Projector, Scope, Scopes};
pub use read::{filter_compacted, filter_compacted_reference, read_all, CompactedView};
pub use recover::{recover, RecoverReport};
pub use retry::{RetryPolicy, RetryStore, DEFAULT_RETRY_DEADLINE};
pub use search::{SearchHit, SearchKind, SearchQuery};
pub use store::{
    Capabilities, Cursor, Footprint, Occupied, OpenItems, Page, Reclaimed, SessionPage,
    SessionSize, SessionState, Store, Tenancy, TenantStats, DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT,
};
pub use stream::StreamEvent;
pub use tenant::TenantId;
pub use turn::{TurnDriver, TurnOptions};
