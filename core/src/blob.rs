//! Large values stored once: a part's large value (a file's `data:` URL, a tool's
//! output) is kept once per tenant, addressed by the SHA-256 of its text, and the row
//! holds a reference in its place.
//!
//! A coding agent reads the same file many times; each read's output is a row, and
//! without this each row carries the file again. With it, the first row of a value
//! writes the value and every later row writes a 82-byte reference.
//!
//! [`Blobbed`] wraps a store and does both halves: on [`Store::apply`] it moves every
//! value of at least [`BlobOptions::threshold`] bytes into a [`BlobStore`] before the
//! rows are committed, and on every read ([`Store::message`], [`Store::messages`],
//! [`Store::open_items`]) it puts the values back, so exports, views and the HTTP API
//! return whole values. The bus is not involved: the projector publishes the batch it
//! was given, with whole values.
//!
//! Which values: a `file` part's `url`, a completed tool's `output`, and the `url` of
//! each of a completed tool's `attachments`. A value that begins with
//! [`BLOB_PREFIX`] is always moved, whatever its size, so a reference is never
//! mistaken for a value that only looks like one.
//!
//! Where blobs live: in the backend by default ([`InBackend`], over the backend's own
//! [`Store::put_blobs`] family: a table, a redb table, Redis keys), or in an object
//! store (the facade's OpenDAL blob store: a directory or an S3 bucket).
//!
//! Blobs no row references are removed by [`Store::sweep_blobs`], which `prune` calls
//! for each tenant it pruned. A blob is written (or its `touched` time refreshed) before
//! the rows that reference it commit, and the sweep removes only blobs untouched for
//! [`BlobOptions::grace`] (an hour by default), deciding that in the same step that
//! deletes them: a writer that references a blob while a sweep runs has refreshed it, so
//! the sweep leaves it. What this does not cover: a writer that stalls for longer than
//! the grace between writing a blob and committing its rows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::event::{Envelope, SyncEvent};
use crate::forward::Forward;
use crate::id::{MessageId, SessionId};
use crate::model::{MessageWithParts, Part, PartBody, ToolState};
use crate::store::{Cursor, Footprint, OpenItems, Page, Store, TenantStats};
use crate::tenant::TenantId;

/// What a reference to a blob begins with; the SHA-256 of the value, in 64 lowercase
/// hex digits, follows.
pub const BLOB_PREFIX: &str = "forge-blob:sha256:";

/// The default size from which a value is stored once: 32 KiB.
pub const DEFAULT_BLOB_THRESHOLD: usize = 32 * 1024;

/// The default time a blob no row references is kept before a sweep removes it.
pub const DEFAULT_BLOB_GRACE: Duration = Duration::from_hours(1);

/// A blob's address: the SHA-256 of its value, as 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlobId(String);

impl BlobId {
    /// The address of `value`.
    pub fn of(value: &str) -> Self {
        let digest = Sha256::digest(value.as_bytes());
        let mut hex = String::with_capacity(64);
        for byte in digest {
            use fmt::Write as _;
            let _ = write!(hex, "{byte:02x}");
        }
        Self(hex)
    }

    /// Checks 64 lowercase hex digits.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the text.
    pub fn parse(hex: &str) -> Result<Self> {
        if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Self(hex.to_owned()))
        } else {
            Err(Error::InvalidInput(format!(
                "a blob id is 64 lowercase hex digits, not {hex:?}"
            )))
        }
    }

    /// The reference a row holds in the value's place: [`BLOB_PREFIX`] and the id.
    pub fn reference(&self) -> String {
        format!("{BLOB_PREFIX}{}", self.0)
    }

    /// The id a reference names, `None` when `text` is not a reference.
    pub fn from_reference(text: &str) -> Option<Self> {
        text.strip_prefix(BLOB_PREFIX)
            .and_then(|hex| Self::parse(hex).ok())
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl TryFrom<String> for BlobId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl From<BlobId> for String {
    fn from(id: BlobId) -> Self {
        id.0
    }
}

/// One stored blob, as [`BlobStore::list`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobEntry {
    /// Its address.
    pub id: BlobId,
    /// The value's length in bytes.
    pub bytes: u64,
    /// When it was last written or refreshed, Unix ms.
    pub touched_ms: i64,
}

/// A value to store once, with its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobValue {
    /// `BlobId::of(&value)`.
    pub id: BlobId,
    /// The value.
    pub value: Arc<str>,
}

/// Where blobs are kept. Every call is per tenant: a tenant's blobs are never read,
/// listed or deleted through another tenant.
#[async_trait]
pub trait BlobStore: fmt::Debug + Send + Sync + 'static {
    /// Where the blobs are (`in the backend`, `fs:/var/lib/forge/blobs`, `s3://bucket/…`).
    fn location(&self) -> String;

    /// Makes each blob present: writes the ones that are absent, and refreshes the
    /// `touched` time (to `now_ms`) of the ones last touched before `refresh_before_ms`;
    /// the others are left as they are (nothing written). Returns how many were written
    /// or refreshed. Durable when it returns, like a committed batch.
    async fn put(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64>;

    /// The values of `ids`, in order; `None` for one that is not stored.
    async fn get(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>>;

    /// Every blob of the tenant.
    async fn list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>>;

    /// Deletes each of `ids` that was last touched before `touched_before_ms`, deciding
    /// per blob in the step that deletes it (a blob refreshed meanwhile stays). Returns
    /// how many were deleted.
    async fn delete(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64>;

    /// What the blobs occupy, when they are apart from the backend (files, objects);
    /// empty for blobs inside the backend (its own footprint counts them).
    async fn footprint(&self) -> Result<Footprint> {
        Ok(Footprint::default())
    }
}

/// Blobs kept by the backend itself, through its [`Store::put_blobs`] family.
#[derive(Debug, Clone)]
pub struct InBackend(pub Arc<dyn Store>);

#[async_trait]
impl BlobStore for InBackend {
    fn location(&self) -> String {
        "in the backend".into()
    }

    async fn put(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        self.0
            .put_blobs(tenant, blobs, now_ms, refresh_before_ms)
            .await
    }

    async fn get(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        self.0.blobs(tenant, ids).await
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        self.0.blob_list(tenant).await
    }

    async fn delete(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.0.delete_blobs(tenant, ids, touched_before_ms).await
    }
}

/// How large values are stored ([`Blobbed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobOptions {
    /// Values of at least this many bytes are stored once.
    pub threshold: usize,
    /// How long a blob no row references is kept; a blob is refreshed when a row
    /// references it and it was last touched more than half of this ago.
    pub grace: Duration,
}

impl Default for BlobOptions {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_BLOB_THRESHOLD,
            grace: DEFAULT_BLOB_GRACE,
        }
    }
}

/// What [`Store::sweep_blobs`] did for a tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobSweep {
    /// Blobs the tenant had.
    pub blobs: u64,
    /// Blobs no row referenced and untouched for the grace: the candidates.
    pub unreferenced: u64,
    /// Of those, how many were deleted (a blob refreshed meanwhile stays).
    pub deleted: u64,
    /// Bytes of the deleted blobs.
    pub deleted_bytes: u64,
}

/// The values of `part` that may be stored once, each as a mutable string.
fn values_mut(part: &mut Part) -> Vec<&mut String> {
    let mut out = Vec::new();
    match &mut part.body {
        PartBody::File(f) => out.push(&mut f.url),
        PartBody::Tool(t) => {
            if let ToolState::Completed(c) = &mut t.state {
                out.push(&mut c.output);
                for a in c.attachments.iter_mut().flatten() {
                    if let Some(Value::String(url)) = a.get_mut("url") {
                        out.push(url);
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// Whether `value` is stored once at `threshold`.
fn moves(value: &str, threshold: usize) -> bool {
    value.len() >= threshold || value.starts_with(BLOB_PREFIX)
}

/// The part as stored: each large value replaced by its reference, and the values
/// moved out (appended to `blobs`, once per id). `None` when nothing moves (the part
/// is stored as it is, without a copy).
pub fn externalize(
    part: &Part,
    threshold: usize,
    blobs: &mut BTreeMap<BlobId, Arc<str>>,
) -> Option<Part> {
    // Cheap test first: no copy of the common part with nothing large.
    if !part
        .large_candidates()
        .into_iter()
        .any(|v| moves(v, threshold))
    {
        return None;
    }
    let mut stored = part.clone();
    for value in values_mut(&mut stored) {
        if moves(value, threshold) {
            let id = BlobId::of(value);
            let reference = id.reference();
            let whole = std::mem::replace(value, reference);
            blobs.entry(id).or_insert_with(|| Arc::from(whole));
        }
    }
    Some(stored)
}

impl Part {
    /// The values [`externalize`] looks at, borrowed.
    fn large_candidates(&self) -> Vec<&str> {
        let mut out = Vec::new();
        match &self.body {
            PartBody::File(f) => out.push(f.url.as_str()),
            PartBody::Tool(t) => {
                if let ToolState::Completed(c) = &t.state {
                    out.push(c.output.as_str());
                    for a in c.attachments.iter().flatten() {
                        if let Some(Value::String(url)) = a.get("url") {
                            out.push(url.as_str());
                        }
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// The blobs this part, as stored, references.
    pub fn blob_references(&self) -> impl Iterator<Item = BlobId> + '_ {
        self.large_candidates()
            .into_iter()
            .filter_map(BlobId::from_reference)
    }
}

/// Puts the values back into `part` from `values`.
///
/// # Errors
/// [`Error::Corrupted`] naming the part and the blob when a referenced blob is missing.
fn resolve(part: &mut Part, values: &HashMap<BlobId, Arc<str>>) -> Result<()> {
    let at = format!("part {} of session {}", part.id, part.session_id);
    for value in values_mut(part) {
        if let Some(id) = BlobId::from_reference(value) {
            match values.get(&id) {
                Some(whole) => *value = whole.to_string(),
                None => {
                    return Err(Error::corrupted(
                        at,
                        format!("references blob {id}, which is not stored"),
                    ))
                }
            }
        }
    }
    Ok(())
}

/// A store whose large values are stored once in a [`BlobStore`]. See the module.
#[derive(Debug)]
pub struct Blobbed {
    inner: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    options: BlobOptions,
}

impl Blobbed {
    /// `inner` with its large values in `blobs`.
    pub fn new(inner: Arc<dyn Store>, blobs: Arc<dyn BlobStore>, options: BlobOptions) -> Self {
        Self {
            inner,
            blobs,
            options,
        }
    }

    /// `inner` with its large values in the backend itself, or `inner` unchanged when
    /// its backend cannot store blobs ([`Capabilities::blobs`](crate::Capabilities)).
    pub fn in_backend(inner: Arc<dyn Store>, options: BlobOptions) -> Arc<dyn Store> {
        if !inner.capabilities().blobs {
            return inner;
        }
        let blobs = Arc::new(InBackend(Arc::clone(&inner)));
        Arc::new(Self::new(inner, blobs, options))
    }

    /// Where the blobs are.
    pub fn location(&self) -> String {
        self.blobs.location()
    }

    async fn resolve_all<'a>(
        &self,
        tenant: &TenantId,
        parts: impl Iterator<Item = &'a mut Part>,
    ) -> Result<()> {
        let mut holders: Vec<&'a mut Part> = Vec::new();
        let mut ids = BTreeSet::new();
        for p in parts {
            let mut refers = false;
            for id in p.blob_references() {
                refers = true;
                ids.insert(id);
            }
            if refers {
                holders.push(p);
            }
        }
        if holders.is_empty() {
            return Ok(());
        }
        let ids: Vec<BlobId> = ids.into_iter().collect();
        let got = self.blobs.get(tenant, &ids).await?;
        let values: HashMap<BlobId, Arc<str>> = ids
            .into_iter()
            .zip(got)
            .filter_map(|(id, v)| v.map(|v| (id, v)))
            .collect();
        for p in holders {
            resolve(p, &values)?;
        }
        Ok(())
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn grace_ms(grace: Duration) -> i64 {
    i64::try_from(grace.as_millis()).unwrap_or(i64::MAX)
}

#[async_trait]
impl Forward for Blobbed {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        // Per tenant, the values to store once; and the batch as stored, copied only
        // when some part changes.
        let mut moved: BTreeMap<TenantId, BTreeMap<BlobId, Arc<str>>> = BTreeMap::new();
        let mut stored: Option<Vec<Envelope<SyncEvent>>> = None;
        for (i, env) in batch.iter().enumerate() {
            let SyncEvent::PartUpdated { part } = &env.event else {
                continue;
            };
            // No allocation for a part with nothing to move (the common one).
            let mut values = BTreeMap::new();
            if let Some(changed) = externalize(part, self.options.threshold, &mut values) {
                moved.entry(env.tenant.clone()).or_default().extend(values);
                let copy = stored.get_or_insert_with(|| batch.to_vec());
                copy[i].event = SyncEvent::PartUpdated { part: changed };
            }
        }
        let Some(stored) = stored else {
            return self.inner.apply(batch).await;
        };
        let now = now_ms();
        let refresh_before = now.saturating_sub(grace_ms(self.options.grace) / 2);
        for (tenant, values) in moved {
            let values: Vec<BlobValue> = values
                .into_iter()
                .map(|(id, value)| BlobValue { id, value })
                .collect();
            self.blobs
                .put(&tenant, &values, now, refresh_before)
                .await?;
        }
        self.inner.apply(&stored).await
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let mut m = self.inner.message(tenant, session, id).await?;
        if let Some(m) = m.as_mut() {
            self.resolve_all(tenant, m.parts.iter_mut()).await?;
        }
        Ok(m)
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let mut page = self.inner.messages(tenant, session, before, limit).await?;
        self.resolve_all(
            tenant,
            page.messages.iter_mut().flat_map(|m| m.parts.iter_mut()),
        )
        .await?;
        Ok(page)
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let mut open = self.inner.open_items(tenant, session).await?;
        self.resolve_all(tenant, open.parts.iter_mut()).await?;
        Ok(open)
    }

    async fn stats(&self, tenant: &TenantId) -> Result<TenantStats> {
        let mut stats = self.inner.stats(tenant).await?;
        let list = self.blobs.list(tenant).await?;
        stats.blobs = list.len() as u64;
        stats.blob_bytes = list.iter().map(|b| b.bytes).sum();
        Ok(stats)
    }

    async fn footprint(&self) -> Result<Footprint> {
        let mut size = self.inner.footprint().await?;
        size.items.extend(self.blobs.footprint().await?.items);
        Ok(size)
    }

    async fn sweep_blobs(&self, tenant: &TenantId) -> Result<BlobSweep> {
        let started = now_ms();
        let cutoff = started.saturating_sub(grace_ms(self.options.grace));
        let list = self.blobs.list(tenant).await?;
        let mut sweep = BlobSweep {
            blobs: list.len() as u64,
            ..BlobSweep::default()
        };
        let old: BTreeMap<BlobId, u64> = list
            .into_iter()
            .filter(|b| b.touched_ms < cutoff)
            .map(|b| (b.id, b.bytes))
            .collect();
        if old.is_empty() {
            return Ok(sweep);
        }
        let referenced = referenced(&*self.inner, tenant).await?;
        let doomed: Vec<BlobId> = old
            .keys()
            .filter(|id| !referenced.contains(*id))
            .cloned()
            .collect();
        sweep.unreferenced = doomed.len() as u64;
        if doomed.is_empty() {
            return Ok(sweep);
        }
        sweep.deleted = self.blobs.delete(tenant, &doomed, cutoff).await?;
        // Bytes of what was deleted: a blob refreshed meanwhile stays, so count what
        // is gone now.
        let left: BTreeSet<BlobId> = self
            .blobs
            .list(tenant)
            .await?
            .into_iter()
            .map(|b| b.id)
            .collect();
        sweep.deleted_bytes = doomed
            .iter()
            .filter(|id| !left.contains(*id))
            .filter_map(|id| old.get(id))
            .sum();
        Ok(sweep)
    }
}

/// Every blob the tenant's rows reference, read from `store` as stored (references,
/// not values): every session, page by page.
///
/// # Errors
/// The store's.
pub async fn referenced(store: &dyn Store, tenant: &TenantId) -> Result<BTreeSet<BlobId>> {
    let mut out = BTreeSet::new();
    let mut after: Option<SessionId> = None;
    loop {
        let page = store.sessions_after(tenant, after.as_ref(), 1000).await?;
        for s in &page.sessions {
            for m in crate::read::read_all(store, tenant, &s.info.id, 1000).await? {
                for p in &m.parts {
                    out.extend(p.blob_references());
                }
            }
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::PartId;
    use crate::model::{FilePart, JsonMap};

    fn file(url: &str) -> Part {
        Part {
            id: PartId::from("prt_1"),
            session_id: SessionId::from("ses_1"),
            message_id: MessageId::from("msg_1"),
            body: PartBody::File(FilePart {
                mime: "text/plain".into(),
                filename: None,
                url: url.into(),
                source: None,
                extra: JsonMap::new(),
            }),
        }
    }

    #[test]
    fn a_small_value_stays_and_a_large_one_moves_once() {
        let mut blobs = BTreeMap::new();
        assert!(externalize(&file("data:,small"), 16, &mut blobs).is_none());
        let big = format!("data:,{}", "x".repeat(100));
        let stored = externalize(&file(&big), 16, &mut blobs).unwrap();
        let again = externalize(&file(&big), 16, &mut blobs).unwrap();
        assert_eq!(stored, again, "the same value gives the same reference");
        assert_eq!(blobs.len(), 1);
        let PartBody::File(f) = &stored.body else {
            panic!()
        };
        assert_eq!(f.url, BlobId::of(&big).reference());
        let mut back = stored.clone();
        let values: HashMap<_, _> = blobs.into_iter().collect();
        resolve(&mut back, &values).unwrap();
        assert_eq!(back, file(&big));
    }

    #[test]
    fn a_value_that_looks_like_a_reference_moves_whatever_its_size() {
        let mut blobs = BTreeMap::new();
        let lookalike = BlobId::of("other").reference();
        let stored = externalize(&file(&lookalike), 1 << 20, &mut blobs).unwrap();
        let values: HashMap<_, _> = blobs.into_iter().collect();
        let mut back = stored;
        resolve(&mut back, &values).unwrap();
        assert_eq!(back, file(&lookalike), "read back as written, not followed");
    }

    #[test]
    fn a_missing_blob_is_corruption_naming_it() {
        let id = BlobId::of("gone");
        let mut p = file(&id.reference());
        let e = resolve(&mut p, &HashMap::new()).unwrap_err();
        assert!(e.to_string().contains(&id.to_string()), "{e}");
    }

    #[test]
    fn ids_are_checked() {
        assert!(BlobId::parse("ABC").is_err());
        assert!(BlobId::parse(&"g".repeat(64)).is_err());
        assert_eq!(BlobId::of("").as_str().len(), 64);
        assert_eq!(
            BlobId::of("").as_str(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
