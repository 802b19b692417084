//! The `Store` trait: durable Message + Part rows.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::blob::{BlobEntry, BlobId, BlobSweep, BlobValue};
use crate::error::{Error, Result};
use crate::event::{Envelope, SyncEvent};
use crate::fence::{Claim, ClaimRequest};
use crate::id::{MessageId, SessionId};
use crate::model::{Message, MessageWithParts, Part, Session};
use crate::search::{SearchHit, SearchKind, SearchQuery};
use crate::tenant::TenantId;

/// Page size used when none is given.
pub const DEFAULT_PAGE_LIMIT: usize = 50;
/// Largest page a store returns; larger requests are capped.
pub const MAX_PAGE_LIMIT: usize = 1000;

/// Clamps a requested page size into `1..=MAX_PAGE_LIMIT` (0 means the default).
pub fn clamp_limit(limit: usize) -> usize {
    match limit {
        0 => DEFAULT_PAGE_LIMIT,
        n => n.min(MAX_PAGE_LIMIT),
    }
}

/// How a backend keeps tenants apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Tenancy {
    /// The tenant is part of every key; queries filter on it.
    Keyed,
    /// The database enforces it (row-level security).
    RowLevelSecurity,
}

/// What a store can do; the conformance suite runs what applies and skips the rest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)] // independent yes/no facts, as the JSON shows them
pub struct Capabilities {
    /// Backend name (`memory`, `redb`, …).
    pub name: &'static str,
    /// Committed batches survive a process exit.
    pub durable: bool,
    /// `apply` is all-or-nothing.
    pub transactions: bool,
    /// How tenants are isolated.
    pub tenancy: Tenancy,
    /// Several writers may call `apply` concurrently.
    pub concurrent_writers: bool,
    /// Keeps large values once, per tenant ([`Store::put_blobs`] and its family;
    /// [`crate::blob`]).
    pub blobs: bool,
    /// How [`Store::search`] finds what was said ([`crate::search`]).
    pub search: SearchKind,
}

impl Capabilities {
    /// Capabilities with the given name and everything else set to the strongest
    /// keyed-tenancy defaults; adjust fields from there.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            durable: true,
            transactions: true,
            tenancy: Tenancy::Keyed,
            concurrent_writers: true,
            blobs: false,
            search: SearchKind::Scan,
        }
    }
}

/// A session as stored: its info and the last applied sequence number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// The session.
    pub info: Session,
    /// The highest `seq` of any event applied to it. A subscriber that has read the
    /// session subscribes from `seq + 1` to continue without gap or repeat.
    pub seq: u64,
}

/// An opaque position in a session's history, pointing at the next (older) page.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Cursor(MessageId);

impl Cursor {
    /// The cursor for the page of messages older than `id`.
    pub fn before(id: MessageId) -> Self {
        Self(id)
    }

    /// The message id this cursor points before. For backends.
    pub fn message_id(&self) -> &MessageId {
        &self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("c1.")?;
        for b in self.0.as_str().bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cursor({})", self.0)
    }
}

impl FromStr for Cursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            // Quoted short: a cursor comes from a command line or a query string and
            // may be anything, also megabytes.
            let shown: String = s.chars().take(40).collect();
            let more = if shown.len() < s.len() { "…" } else { "" };
            Error::invalid(format!("malformed page cursor {shown:?}{more}"))
        };
        let hex = s.strip_prefix("c1.").ok_or_else(bad)?;
        if hex.is_empty() || hex.len() % 2 != 0 {
            return Err(bad());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>>>()?;
        let id = String::from_utf8(bytes).map_err(|_| bad())?;
        Ok(Self(id.into()))
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// One page of history: messages oldest → newest, and the cursor of the older page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Messages with their parts, oldest first.
    pub messages: Vec<MessageWithParts>,
    /// Where the next (older) page starts; `None` at the beginning of the history.
    pub next: Option<Cursor>,
}

impl Page {
    /// A page of `messages` (oldest first); when `more` older messages exist, `next`
    /// is the cursor before the first of them.
    pub fn new(messages: Vec<MessageWithParts>, more: bool) -> Self {
        let next = if more {
            messages.first().map(|m| Cursor::before(m.info.id.clone()))
        } else {
            None
        };
        Self { messages, next }
    }
}

/// What a crash may have left open, for [`recover`](crate::recover::recover).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenItems {
    /// Assistant messages without `time.completed`.
    pub messages: Vec<Message>,
    /// Text/reasoning parts without `time.end`, tools `pending`/`running`.
    pub parts: Vec<Part>,
}

impl OpenItems {
    /// Nothing is open.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.parts.is_empty()
    }

    /// Adds `message` if it is open and those of its `parts` that are.
    pub fn add<'a>(&mut self, message: &Message, parts: impl IntoIterator<Item = &'a Part>) {
        if message.is_open() {
            self.messages.push(message.clone());
        }
        self.parts
            .extend(parts.into_iter().filter(|p| p.is_open()).cloned());
    }
}

/// One page of a tenant's sessions, in id order ([`Store::sessions_after`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionPage {
    /// Sessions in id order, all after the page's `after`.
    pub sessions: Vec<SessionState>,
    /// The id to continue after; `None` when this page holds the last session.
    pub next: Option<SessionId>,
}

/// A session's share of a tenant's rows ([`TenantStats::largest`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSize {
    /// The session.
    pub session: SessionId,
    /// Its messages.
    pub messages: u64,
    /// Its parts.
    pub parts: u64,
    /// JSON bytes of its session row, messages and parts.
    pub bytes: u64,
}

/// What a tenant stores ([`Store::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStats {
    /// Sessions.
    pub sessions: u64,
    /// Messages.
    pub messages: u64,
    /// Parts.
    pub parts: u64,
    /// Logical bytes: the JSON encoding of every session, message and part row, as
    /// exports write them. What a backend holds on disk is [`Store::footprint`].
    pub logical_bytes: u64,
    /// The earliest `time.created` of a session, Unix ms.
    pub oldest_ms: Option<i64>,
    /// The latest activity of a session (its `time.updated`, or a message's
    /// `time.created`/`time.completed`, whichever is later), Unix ms.
    pub newest_ms: Option<i64>,
    /// The largest sessions by logical bytes, largest first ([`STATS_LARGEST`] at most).
    pub largest: Vec<SessionSize>,
    /// Large values stored once ([`crate::blob`]): how many the tenant has. The rows
    /// above count each as its reference.
    #[serde(default)]
    pub blobs: u64,
    /// Their bytes.
    #[serde(default)]
    pub blob_bytes: u64,
}

/// How many sessions [`TenantStats::largest`] names.
pub const STATS_LARGEST: usize = 10;

/// One thing a backend occupies ([`Store::footprint`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occupied {
    /// What it is: a file path, a relation name, `used_memory`.
    pub name: String,
    /// `file`, `relation` or `memory`.
    pub kind: String,
    /// Bytes: a file's length on disk (allocated blocks), a relation's size with its
    /// indexes and TOAST, a server's memory.
    pub bytes: u64,
}

/// What a backend occupies, for all its tenants together (a shared file or database
/// cannot be split by tenant).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Each file, relation or server the backend uses.
    pub items: Vec<Occupied>,
}

impl Footprint {
    /// The sum of the items' bytes of `kind`.
    pub fn total(&self, kind: &str) -> u64 {
        self.items
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.bytes)
            .sum()
    }

    /// The footprint of files: each path's allocated size (its blocks), leaving out
    /// files that do not exist.
    ///
    /// # Errors
    /// [`Error::Backend`] when a file exists but its size cannot be read.
    pub fn of_files(paths: &[std::path::PathBuf]) -> Result<Self> {
        let mut items = Vec::new();
        for p in paths {
            match std::fs::metadata(p) {
                Ok(m) => items.push(Occupied {
                    name: p.display().to_string(),
                    kind: "file".to_owned(),
                    bytes: allocated(&m),
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    let named = std::io::Error::new(
                        e.kind(),
                        format!("reading the size of {}: {e}", p.display()),
                    );
                    return Err(Error::backend("file", false, named));
                }
            }
        }
        Ok(Self { items })
    }
}

/// What [`Store::reclaim`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaimed {
    /// What the backend occupied before ([`Store::footprint`]'s files or relations).
    pub before: u64,
    /// And after.
    pub after: u64,
    /// Bytes given back: `before - after` (0 when it did not shrink).
    pub bytes: u64,
    /// What was done, in a few words (`compacted`, `incremental_vacuum: 120 pages`, …).
    pub action: String,
}

impl Reclaimed {
    /// A reclaim that went from `before` to `after` doing `action`.
    pub fn new(before: u64, after: u64, action: impl Into<String>) -> Self {
        Self {
            before,
            after,
            bytes: before.saturating_sub(after),
            action: action.into(),
        }
    }
}

/// Bytes a file occupies on disk: its allocated 512-byte blocks (a sparse or
/// preallocated file differs from its length).
fn allocated(m: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        m.blocks().saturating_mul(512)
    }
    #[cfg(not(unix))]
    {
        m.len()
    }
}

/// Durable storage of sessions, messages and parts.
///
/// Backends are chosen at run time by URL and used as `Arc<dyn Store>`. The conformance
/// suite tests the `# Behavior` bullets below, one property per bullet. A wrapper that
/// changes some methods of another store implements [`Forward`](crate::Forward) instead.
#[async_trait]
pub trait Store: fmt::Debug + Send + Sync + 'static {
    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Applies a batch of sync events as one transaction (group commit).
    ///
    /// # Behavior
    /// - All events of the batch are committed, or none is (an error leaves the store as
    ///   it was). A batch may span sessions and tenants.
    /// - `session.updated`, `message.updated`, `message.part.updated` upsert: the same id
    ///   overwrites the whole row.
    /// - Ids are scoped by their session: a message is `(tenant, session, message id)`,
    ///   a part `(tenant, session, part id)`. The same message or part id in another
    ///   session is another row, never touched. A message id is unique within its
    ///   session; so is a part id: a part upsert naming another message of the session
    ///   than the one holding the part **moves** it there (the row under the old message
    ///   is gone in the same transaction; last write wins, as for every upsert).
    /// - `session.deleted` removes the session, its messages and their parts;
    ///   `message.removed` removes the message and its parts; `message.part.removed` the
    ///   part if the named message holds it (after a move, a removal naming the old
    ///   message removes nothing). Removing something absent is not an error.
    /// - A message upsert whose session does not exist, or a part upsert whose message
    ///   does not exist (e.g. was removed), fails with [`Error::NotFound`]; nothing is
    ///   resurrected. Earlier events of the same batch count.
    /// - An event whose session differs from its envelope's fails with
    ///   [`Error::InvalidInput`]. A part is looked up under its own session, so a part
    ///   naming a message of another session fails with [`Error::NotFound`].
    /// - Each touched session records the highest `seq` applied (never lowering it).
    /// - Rows of one tenant are never visible to another.
    /// - **Fencing**: every event is checked with [`fence::check`](crate::fence::check)
    ///   against its session's fence record, read in the batch's own transaction: an
    ///   event whose [`epoch`](Envelope::epoch) is not the session's current one, or an
    ///   unfenced event (`epoch` `None`) for a session that was ever claimed, fails the
    ///   batch with [`Error::Fenced`]. A claim granted before the batch commits is seen
    ///   by it; epochs compare as numbers.
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()>;

    /// Claims `session` for a writer, or renews its lease ([`crate::fence`]).
    ///
    /// # Behavior
    /// - The session's fence record is read and written in one transaction and decided by
    ///   [`fence::decide`](crate::fence::decide): a new claim's epoch is the last one
    ///   granted plus one (1 for the first); concurrent claims of one session get
    ///   distinct epochs; [`ClaimMode::Free`](crate::fence::ClaimMode::Free) fails with
    ///   [`Error::Held`] while another holder's lease runs;
    ///   [`ClaimMode::Renew`](crate::fence::ClaimMode::Renew) keeps the epoch and fails
    ///   with [`Error::Fenced`] when it is not the current one.
    /// - The record is apart from the session's rows: a session may be claimed before it
    ///   exists, and deleting the session keeps its record, so epochs never go back.
    /// - Records are per tenant: a claim in one tenant is never seen in another.
    /// - Returns the record as stored.
    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim>;

    /// Ends the lease of the claim with `epoch`, so the next claimer need not wait.
    ///
    /// # Behavior
    /// - Stores [`fence::released`](crate::fence::released) of the record in one
    ///   transaction: the epoch stays; nothing changes when `epoch` is not the current one
    ///   or the session was never claimed. Not an error either way.
    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()>;

    /// The session's fence record.
    ///
    /// # Behavior
    /// - `None` if the session was never claimed in this tenant.
    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>>;

    /// Reads one session.
    ///
    /// # Behavior
    /// - `None` if it does not exist in this tenant.
    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>>;

    /// Lists the sessions of a tenant, in id order.
    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>>;

    /// Lists a page of the sessions of a tenant, in id order, after `after`.
    ///
    /// # Behavior
    /// - Returns the first `limit` sessions (after [`clamp_limit`]) whose ids sort after
    ///   `after` (from the first when `None`), in id order.
    /// - `next` is the last id of the page when more sessions follow, `None` otherwise.
    /// - Paging from `None` until `next` is `None` yields every session of the tenant
    ///   exactly once (sessions created or deleted meanwhile may or may not appear).
    /// - The default lists every session and cuts the page from it; a backend overrides
    ///   it to read only the page (its cost then grows with `limit`, not the tenant).
    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        let limit = clamp_limit(limit);
        let all = self.sessions(tenant).await?;
        let mut rest = all
            .into_iter()
            .filter(|s| after.is_none_or(|a| &s.info.id > a))
            .peekable();
        let sessions: Vec<SessionState> = rest.by_ref().take(limit).collect();
        let next = rest.peek().and(sessions.last()).map(|s| s.info.id.clone());
        Ok(SessionPage { sessions, next })
    }

    /// Counts what a tenant stores.
    ///
    /// # Behavior
    /// - Exactly the tenant's rows: every session, message and part that reads return,
    ///   and nothing else (a row left behind by a removal counts, so it shows).
    /// - The default reads the whole tenant through [`Store::sessions_after`] and
    ///   [`Store::messages`] ([`crate::stats::scan`]); its cost grows with the tenant.
    async fn stats(&self, tenant: &TenantId) -> Result<TenantStats> {
        crate::stats::scan(self, tenant).await
    }

    /// Gives back the space that deletions freed (the backend's files shrink, or their
    /// free pages are returned to the file system).
    ///
    /// # Behavior
    /// - Never changes what reads return.
    /// - Bounded: writers wait for at most what the backend documents (redb: the whole
    ///   compaction; SQLite: one step of the incremental vacuum).
    /// - The default does nothing (a backend that gives space back by itself).
    async fn reclaim(&self) -> Result<Reclaimed> {
        let size = self.footprint().await?;
        let total = size.total("file") + size.total("relation");
        Ok(Reclaimed::new(total, total, "nothing to do"))
    }

    /// What the backend occupies on disk or in memory, for all tenants.
    ///
    /// # Behavior
    /// - The default is empty (a backend with nothing to measure, as the in-memory one).
    async fn footprint(&self) -> Result<Footprint> {
        Ok(Footprint::default())
    }

    /// Reads one message with its parts (in part-id order).
    ///
    /// # Behavior
    /// - `None` if the message does not exist in this tenant and session.
    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>>;

    /// Reads a page of a session's messages, newest page first.
    ///
    /// # Behavior
    /// - Returns the `limit` messages (after [`clamp_limit`]) with the highest ids below
    ///   `before` (all when `None`), ordered oldest → newest, each with its parts in
    ///   part-id order.
    /// - `next` is the cursor for the older messages, `None` when there are none.
    /// - Paging from `None` until `next` is `None` yields every message exactly once,
    ///   also when messages are appended between page reads.
    /// - An unknown session yields an empty page.
    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page>;

    /// Lists what is open: assistant messages without `time.completed`, text/reasoning
    /// parts without `time.end`, tools `pending` or `running`.
    ///
    /// # Behavior
    /// - Limited to `session` when given, otherwise the whole tenant.
    /// - Exactly the rows for which [`Message::is_open`] / [`Part::is_open`] hold.
    async fn open_items(&self, tenant: &TenantId, session: Option<&SessionId>)
        -> Result<OpenItems>;

    /// Stores large values once ([`crate::blob::BlobStore::put`], whose contract this
    /// is): writes the absent ones, refreshes the `touched` time of those last touched
    /// before `refresh_before_ms`, leaves the others unwritten.
    ///
    /// # Behavior
    /// - Per tenant: a blob put in one tenant is never read, listed or deleted
    ///   through another.
    /// - Durable when it returns, as a committed batch is.
    /// - The default fails with [`Error::Unsupported`] (a backend whose
    ///   [`Capabilities::blobs`] is false; its large values stay in the rows).
    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        let _ = (tenant, blobs, now_ms, refresh_before_ms);
        Err(Error::Unsupported(format!(
            "{} keeps no blobs",
            self.capabilities().name
        )))
    }

    /// The values of `ids`, in order, `None` for one not stored in this tenant.
    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        let _ = (tenant, ids);
        Err(Error::Unsupported(format!(
            "{} keeps no blobs",
            self.capabilities().name
        )))
    }

    /// Every blob of the tenant, with its length and `touched` time.
    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        let _ = tenant;
        Ok(Vec::new())
    }

    /// Deletes each of `ids` last touched before `touched_before_ms`, deciding per blob
    /// in the transaction that deletes it. Returns how many were deleted.
    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        let _ = (tenant, ids, touched_before_ms);
        Ok(0)
    }

    /// Removes the tenant's blobs that no row references and that were untouched for
    /// the grace ([`crate::blob::Blobbed`] does it; `prune` calls it).
    ///
    /// # Behavior
    /// - Never removes a blob a row references; reads return what they returned.
    /// - The default does nothing (a store whose values stay in its rows).
    async fn sweep_blobs(&self, tenant: &TenantId) -> Result<BlobSweep> {
        let _ = tenant;
        Ok(BlobSweep::default())
    }

    /// Finds the parts of a tenant whose text holds every word of `query`, best first
    /// ([`crate::search`] states the semantics every backend keeps).
    ///
    /// # Behavior
    /// - Exactly the tenant's parts (of `query.session` when given) whose
    ///   [`document`](crate::search::document) holds every word of the query, as the
    ///   rows read now hold them: an overwritten part is found by its new text only, a
    ///   removed part or one of a deleted session is never found.
    /// - At most [`SearchQuery::limit`] hits, ordered by score (higher first), ties by
    ///   session, message and part id; when more parts match, the ones returned score at
    ///   least as high as the ones left out.
    /// - Rows of another tenant are never found.
    /// - A query without words fails with [`Error::InvalidInput`].
    /// - The default reads the whole tenant ([`crate::search::scan`]); a backend with an
    ///   index ([`SearchKind::Index`]) writes it in the transaction that writes the rows.
    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        crate::search::scan(self, tenant, query).await
    }

    /// Ends the use of this handle before the process lets go of the backend: what was
    /// committed is made complete in the backend's own files (redb checkpoints its
    /// journal into the database file; SQLite's last connection checkpoints and removes
    /// its `-wal`), and connections are closed. Calls after it may fail.
    ///
    /// Nothing committed depends on it: a process that dies without it loses nothing
    /// (the next open replays the journal or the WAL). What it changes is that the
    /// database file alone, copied after a clean exit, holds everything.
    ///
    /// # Behavior
    /// - The default does nothing (backends with nothing to settle).
    /// - Wrappers forward it to the store they wrap.
    ///
    /// # Errors
    /// The backend's error when it cannot settle its files.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}
