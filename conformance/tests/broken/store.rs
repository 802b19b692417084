//! Deliberately broken wrappers of `MemoryStore`, one bug each.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::model::{MessageBody, PartBody};
use forge_core::{
    Claim, ClaimRequest, Cursor, Envelope, Error, MemoryStore, MessageId, MessageWithParts,
    OpenItems, Page, Part, PartId, Result, SearchHit, SearchQuery, SessionId, SessionState, Store,
    SyncEvent, TenantId,
};
use forge_testkit::Forward;
use parking_lot::Mutex;

/// The tenant every tenant's rows go to under [`StoreBug::TenantLeak`].
static SHARED: std::sync::LazyLock<TenantId> = std::sync::LazyLock::new(TenantId::default);

/// A fork's source session and, per copied message, the source message it copies.
type ForkOrigin = (SessionId, HashMap<MessageId, MessageId>);

/// The bug a [`BrokenStore`] has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreBug {
    /// An upsert of an existing id keeps the first write.
    KeepsFirstWrite,
    /// Every page after the first leaves out its first (newest) message.
    SkipsFirstOfLaterPages,
    /// Removing a message (or session) leaves its children; they come back when the id
    /// is written again.
    NoCascade,
    /// Every tenant reads and writes the same rows.
    TenantLeak,
    /// A session row keeps only the fields the model names: its unknown fields (a
    /// revert mark among them) are dropped.
    DropsSessionFields,
    /// A fork keeps its own rows but reads its copied parts from the source's (a
    /// copy-on-write fork that never copies): a write to the source shows in the fork.
    ForkSharesRows,
    /// Large values stored once are kept for all tenants together: a tenant lists,
    /// reads and sweeps another's blobs.
    SharedBlobs,
    /// The search index keeps every part ever written in its last version: removals
    /// (of a part, a message, a session) never reach it, so removed parts are found.
    StaleSearchIndex,
    /// `open_items` does not report tools, so recover leaves them running.
    HidesTools,
    /// Pages report failed summaries as successful, so `filter_compacted` cuts there.
    FailedSummaryLooksFinished,
    /// Unknown part kinds are dropped and unknown message fields cleared.
    DropsUnknownFields,
    /// Two overlapping `apply` calls: the second fails with "database is locked".
    LockedUnderConcurrency,
    /// `apply` returns before the batch is visible (write-behind queue).
    WriteBehind,
    /// A failing batch leaves its earlier events applied.
    NotAtomic,
    /// Parts are keyed per message: a part upserted under another message of its
    /// session is added there and also stays under the old one.
    PartKeyedPerMessage,
    /// Parts are keyed per message, and a part upsert removes the copy under the message
    /// a lookup one round trip before the write found: alone it moves parts right, but
    /// two moves of one part racing each other both find the same old message, and the
    /// copy the first one wrote stays beside the second's.
    MovesFromAStaleLookup,
    /// Ids are keyed by their first 255 bytes (a key column one byte short): ids that
    /// differ only in their 256th byte are one row, spelled as first written.
    TruncatesIds,
    /// Ids are keyed case-insensitively (a key column with a case-insensitive collation):
    /// `ss` and `SS` are one row, spelled as first written.
    FoldsIdCase,
    /// `open_items` calls every part open whose state says it may still change: text
    /// or reasoning without an end (also a text without any time), every tool `pending`
    /// or `running` (also one waiting for approval).
    OpennessFromStateOnly,
    /// `apply` files each event under the session the event names, whatever session its
    /// envelope names (where the event's session is read from its JSON).
    TrustsTheEvent,
    /// Claims grant epochs, but `apply` never looks at a batch's epoch.
    IgnoresEpoch,
    /// `apply` checks the epoch right, then writes a round trip later: a claim granted
    /// in between does not stop the batch.
    ChecksEpochOutsideTransaction,
    /// `apply` refuses an epoch only when it sorts below the current one as text
    /// (`"9"` does not sort below `"10"`).
    ComparesEpochsAsStrings,
}

impl StoreBug {
    fn fences_itself(self) -> bool {
        matches!(
            self,
            Self::IgnoresEpoch
                | Self::ChecksEpochOutsideTransaction
                | Self::ComparesEpochsAsStrings
        )
    }
}

/// `MemoryStore` with one bug.
#[derive(Debug)]
pub struct BrokenStore {
    inner: Arc<MemoryStore>,
    bug: StoreBug,
    ghosts: Mutex<HashMap<(TenantId, SessionId, MessageId), Vec<Part>>>,
    /// Copies a part left under its old message (`PartKeyedPerMessage`,
    /// `MovesFromAStaleLookup`).
    stale: Mutex<BTreeMap<(TenantId, SessionId, MessageId, PartId), Part>>,
    /// The first spelling written of each id key (`TruncatesIds`, `FoldsIdCase`).
    spellings: Mutex<HashMap<String, String>>,
    /// The newest copy of each part (`MovesFromAStaleLookup`).
    newest: Mutex<HashMap<(TenantId, SessionId, PartId), Part>>,
    busy: tokio::sync::Mutex<()>,
    /// The fence records of the fence bugs (the wrapped store sees unfenced batches).
    fences: Mutex<HashMap<(TenantId, SessionId), Claim>>,
    /// Forks and where their copied messages came from (`ForkSharesRows`).
    forks: Mutex<HashMap<(TenantId, SessionId), ForkOrigin>>,
    /// Every part ever written, in its last version (`StaleSearchIndex`).
    index: Mutex<BTreeMap<(TenantId, SessionId, PartId), Part>>,
}

impl BrokenStore {
    /// The tenant blob calls go to: the one shared tenant under
    /// [`StoreBug::SharedBlobs`].
    fn blob_tenant(&self, tenant: &TenantId) -> TenantId {
        if self.bug == StoreBug::SharedBlobs {
            SHARED.clone()
        } else {
            tenant.clone()
        }
    }

    pub fn new(bug: StoreBug) -> Self {
        Self {
            inner: Arc::new(MemoryStore::new()),
            bug,
            ghosts: Mutex::new(HashMap::new()),
            stale: Mutex::new(BTreeMap::new()),
            newest: Mutex::new(HashMap::new()),
            spellings: Mutex::new(HashMap::new()),
            busy: tokio::sync::Mutex::new(()),
            fences: Mutex::new(HashMap::new()),
            forks: Mutex::new(HashMap::new()),
            index: Mutex::new(BTreeMap::new()),
        }
    }

    /// Remembers a fork a batch created: its copied messages, in order, are the source's
    /// first ones (`ForkSharesRows`).
    async fn remember_fork(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let Some((tenant, fork, source)) = batch.iter().find_map(|e| match &e.event {
            SyncEvent::SessionUpdated { info }
                if info.extra.contains_key(forge_core::fork::FORKED_FROM) =>
            {
                info.parent_id
                    .clone()
                    .map(|s| (e.tenant.clone(), info.id.clone(), s))
            }
            _ => None,
        }) else {
            return Ok(());
        };
        let copied: Vec<MessageId> = batch
            .iter()
            .filter_map(|e| match &e.event {
                SyncEvent::MessageUpdated { info } => Some(info.id.clone()),
                _ => None,
            })
            .collect();
        let source_ids: Vec<MessageId> = forge_core::read_all(&*self.inner, &tenant, &source, 1000)
            .await?
            .into_iter()
            .map(|m| m.info.id)
            .collect();
        let map = copied.into_iter().zip(source_ids).collect();
        self.forks.lock().insert((tenant, fork), (source, map));
        Ok(())
    }

    /// `page` of `session` with each copied message's parts read from the source.
    async fn shared_rows(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        page: &mut Page,
    ) -> Result<()> {
        let Some((source, map)) = self
            .forks
            .lock()
            .get(&(tenant.clone(), session.clone()))
            .cloned()
        else {
            return Ok(());
        };
        for m in &mut page.messages {
            let Some(from) = map.get(&m.info.id) else {
                continue;
            };
            let Some(src) = self.inner.message(tenant, &source, from).await? else {
                continue;
            };
            m.parts = src
                .parts
                .into_iter()
                .enumerate()
                .map(|(k, mut p)| {
                    p.session_id = session.clone();
                    p.message_id = m.info.id.clone();
                    if let Some(own) = m.parts.get(k) {
                        p.id = own.id.clone();
                    }
                    p
                })
                .collect();
        }
        Ok(())
    }

    /// The tenant whose rows `t` reads and writes: the one tenant of all under
    /// `TenantLeak`.
    fn tenant<'a>(&self, t: &'a TenantId) -> &'a TenantId {
        if self.bug == StoreBug::TenantLeak {
            &SHARED
        } else {
            t
        }
    }

    /// The key the bug files `id` under.
    fn id_key(&self, id: &str) -> String {
        match self.bug {
            StoreBug::TruncatesIds => id[..id.floor_char_boundary(255)].to_owned(),
            StoreBug::FoldsIdCase => id.to_lowercase(),
            _ => id.to_owned(),
        }
    }

    /// `id` as the store holds it: the first spelling written with the same key (`id`
    /// itself, recorded when `write`, if none was).
    fn spelled(&self, id: &str, write: bool) -> String {
        let key = self.id_key(id);
        let mut spellings = self.spellings.lock();
        match spellings.get(&key) {
            Some(first) => first.clone(),
            None => {
                if write {
                    spellings.insert(key, id.to_owned());
                }
                id.to_owned()
            }
        }
    }

    /// `batch` with every session, message and part id spelled as the store holds it.
    fn respelled(&self, batch: &[Envelope<SyncEvent>]) -> Result<Vec<Envelope<SyncEvent>>> {
        fn walk(store: &BrokenStore, v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    for (k, v) in map.iter_mut() {
                        let is_id = matches!(
                            k.as_str(),
                            "id" | "sessionID" | "messageID" | "partID" | "parentID"
                        );
                        match v {
                            serde_json::Value::String(id) if is_id => *id = store.spelled(id, true),
                            _ => walk(store, v),
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(store, v)),
                _ => {}
            }
        }
        batch
            .iter()
            .map(|e| {
                let mut v = serde_json::to_value(e).map_err(|e| Error::invalid(e.to_string()))?;
                walk(self, &mut v);
                serde_json::from_value(v).map_err(|e| Error::invalid(e.to_string()))
            })
            .collect()
    }

    /// Message `id` as the wrapped store holds it (none when it cannot say).
    async fn stored(
        &self,
        t: &TenantId,
        s: &SessionId,
        id: &MessageId,
    ) -> Option<MessageWithParts> {
        self.inner.message(t, s, id).await.ok().flatten()
    }

    async fn keep_first(&self, batch: &[Envelope<SyncEvent>]) -> Vec<Envelope<SyncEvent>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for e in batch {
            let (t, s) = (&e.tenant, &e.session_id);
            let exists = match &e.event {
                SyncEvent::SessionUpdated { info } => {
                    !seen.insert(format!("s{}", info.id))
                        || self.inner.session(t, s).await.ok().flatten().is_some()
                }
                SyncEvent::MessageUpdated { info } => {
                    !seen.insert(format!("m{}", info.id))
                        || self.stored(t, s, &info.id).await.is_some()
                }
                SyncEvent::PartUpdated { part } => {
                    !seen.insert(format!("p{}", part.id))
                        || self
                            .stored(t, s, &part.message_id)
                            .await
                            .is_some_and(|m| m.parts.iter().any(|p| p.id == part.id))
                }
                _ => false,
            };
            if !exists {
                out.push(e.clone());
            }
        }
        out
    }

    async fn no_cascade(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let mut removed = Vec::new();
        for e in batch {
            let (t, s) = (&e.tenant, &e.session_id);
            match &e.event {
                SyncEvent::MessageRemoved { message_id, .. } => {
                    if let Some(m) = self.inner.message(t, s, message_id).await? {
                        removed.push((t.clone(), s.clone(), message_id.clone(), m.parts));
                    }
                }
                SyncEvent::SessionDeleted { .. } => {
                    for m in forge_core::read_all(self.inner.as_ref(), t, s, 1000).await? {
                        removed.push((t.clone(), s.clone(), m.info.id.clone(), m.parts));
                    }
                }
                _ => {}
            }
        }
        self.inner.apply(batch).await?;
        let back = {
            let mut ghosts = self.ghosts.lock();
            for (t, s, m, parts) in removed {
                ghosts.insert((t, s, m), parts);
            }
            let mut back = Vec::new();
            for e in batch {
                if let SyncEvent::MessageUpdated { info } = &e.event {
                    let key = (e.tenant.clone(), e.session_id.clone(), info.id.clone());
                    for part in ghosts.remove(&key).unwrap_or_default() {
                        back.push(Envelope {
                            event: SyncEvent::PartUpdated { part },
                            ..e.clone()
                        });
                    }
                }
            }
            back
        };
        if !back.is_empty() {
            // Resurrect where the parent exists; a real no-cascade store would too.
            let _ = self.inner.apply(&back).await;
        }
        Ok(())
    }
}

impl BrokenStore {
    /// Applies `batch` and keeps, for every part it moved, a copy under the old message,
    /// as a store keyed by (session, message, part) would.
    async fn keyed_per_message(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        // Where each part the batch writes lives before it.
        let mut at: HashMap<(TenantId, SessionId, PartId), Part> = HashMap::new();
        for e in batch {
            if let SyncEvent::PartUpdated { part } = &e.event {
                let key = (e.tenant.clone(), e.session_id.clone(), part.id.clone());
                if at.contains_key(&key) {
                    continue;
                }
                let all = forge_core::read_all(self.inner.as_ref(), &e.tenant, &e.session_id, 1000)
                    .await
                    .unwrap_or_default();
                if let Some(p) = all
                    .into_iter()
                    .flat_map(|m| m.parts)
                    .find(|p| p.id == part.id)
                {
                    at.insert(key, p);
                }
            }
        }
        self.inner.apply(batch).await?;
        let mut stale = self.stale.lock();
        for e in batch {
            let (t, s) = (e.tenant.clone(), e.session_id.clone());
            match &e.event {
                SyncEvent::PartUpdated { part } => {
                    let key = (t.clone(), s.clone(), part.id.clone());
                    if let Some(old) = at.insert(key, part.clone()) {
                        if old.message_id != part.message_id {
                            stale.insert(
                                (t.clone(), s.clone(), old.message_id.clone(), old.id.clone()),
                                old,
                            );
                        }
                    }
                    stale.remove(&(t, s, part.message_id.clone(), part.id.clone()));
                }
                SyncEvent::PartRemoved {
                    message_id,
                    part_id,
                    ..
                } => {
                    stale.remove(&(t, s, message_id.clone(), part_id.clone()));
                }
                SyncEvent::MessageRemoved { message_id, .. } => {
                    stale.retain(|k, _| !(k.0 == t && k.1 == s && &k.2 == message_id));
                }
                SyncEvent::SessionDeleted { .. } => {
                    stale.retain(|k, _| !(k.0 == t && k.1 == s));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Applies `batch` as a store keyed by (session, message, part) that looks up where
    /// a part is, then (a round trip later) writes it under its new message and deletes
    /// the copy under the message it looked up.
    async fn moves_from_stale_lookup(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let key = |e: &Envelope<SyncEvent>, p: &PartId| {
            (e.tenant.clone(), e.session_id.clone(), p.clone())
        };
        let looked: HashMap<_, MessageId> = {
            let newest = self.newest.lock();
            batch
                .iter()
                .filter_map(|e| match &e.event {
                    SyncEvent::PartUpdated { part } => newest
                        .get(&key(e, &part.id))
                        .map(|p| (key(e, &part.id), p.message_id.clone())),
                    _ => None,
                })
                .collect()
        };
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let _write = self.busy.lock().await;
        self.inner.apply(batch).await?;
        let (mut stale, mut newest) = (self.stale.lock(), self.newest.lock());
        for e in batch {
            let (t, s) = (e.tenant.clone(), e.session_id.clone());
            match &e.event {
                SyncEvent::PartUpdated { part } => {
                    let k = key(e, &part.id);
                    let looked = looked.get(&k);
                    if let Some(l) = looked.filter(|l| **l != part.message_id) {
                        stale.remove(&(t.clone(), s.clone(), l.clone(), part.id.clone()));
                    }
                    if let Some(old) = newest.insert(k, part.clone()) {
                        if old.message_id != part.message_id && looked != Some(&old.message_id) {
                            stale.insert(
                                (t.clone(), s.clone(), old.message_id.clone(), old.id.clone()),
                                old,
                            );
                        }
                    }
                    stale.remove(&(t, s, part.message_id.clone(), part.id.clone()));
                }
                SyncEvent::PartRemoved {
                    message_id,
                    part_id,
                    ..
                } => {
                    let k = key(e, part_id);
                    if newest.get(&k).is_some_and(|p| &p.message_id == message_id) {
                        newest.remove(&k);
                    }
                    stale.remove(&(t, s, message_id.clone(), part_id.clone()));
                }
                SyncEvent::MessageRemoved { message_id, .. } => {
                    newest.retain(|k, p| !(k.0 == t && k.1 == s && &p.message_id == message_id));
                    stale.retain(|k, _| !(k.0 == t && k.1 == s && &k.2 == message_id));
                }
                SyncEvent::SessionDeleted { .. } => {
                    newest.retain(|k, _| !(k.0 == t && k.1 == s));
                    stale.retain(|k, _| !(k.0 == t && k.1 == s));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether the bug keeps copies of parts under messages that no longer hold them.
    fn keeps_copies(&self) -> bool {
        matches!(
            self.bug,
            StoreBug::PartKeyedPerMessage | StoreBug::MovesFromAStaleLookup
        )
    }

    /// `m` with the stale copies kept under it.
    fn with_stale(&self, t: &TenantId, mut m: MessageWithParts) -> MessageWithParts {
        if !self.keeps_copies() {
            return m;
        }
        let stale = self.stale.lock();
        m.parts.extend(
            stale
                .iter()
                .filter(|(k, _)| &k.0 == t && k.1 == m.info.session_id && k.2 == m.info.id)
                .map(|(_, p)| p.clone()),
        );
        m.parts.sort_by(|a, b| a.id.cmp(&b.id));
        m
    }
}

fn drop_unknown(batch: &[Envelope<SyncEvent>]) -> Vec<Envelope<SyncEvent>> {
    batch
        .iter()
        .filter(|e| {
            !matches!(&e.event, SyncEvent::PartUpdated { part } if matches!(part.body, PartBody::Unknown { .. }))
        })
        .cloned()
        .map(|mut e| {
            if let SyncEvent::MessageUpdated { info } = &mut e.event {
                match &mut info.body {
                    MessageBody::User(u) => u.extra.clear(),
                    MessageBody::Assistant(a) => a.extra.clear(),
                    MessageBody::Unknown { fields, .. } => fields.clear(),
                }
            }
            e
        })
        .collect()
}

impl BrokenStore {
    /// A fence bug's `apply`: its own check, then the batch unfenced to the wrapped store.
    async fn fenced_apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let check = |fences: &HashMap<(TenantId, SessionId), Claim>| -> Result<()> {
            for env in batch {
                let current = fences.get(&(env.tenant.clone(), env.session_id.clone()));
                let refused = match (self.bug, env.epoch, current) {
                    (StoreBug::IgnoresEpoch, _, _) => false,
                    (StoreBug::ComparesEpochsAsStrings, Some(e), Some(c)) => {
                        e.to_string() < c.epoch.to_string()
                    }
                    _ => forge_core::fence::check(&env.session_id, current, env.epoch).is_err(),
                };
                if refused {
                    return Err(Error::fenced(&env.session_id, env.epoch, current));
                }
            }
            Ok(())
        };
        check(&self.fences.lock())?;
        if self.bug == StoreBug::ChecksEpochOutsideTransaction {
            // The round trip between a check and the write that a store running them as
            // two statements has.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let unfenced: Vec<_> = batch.iter().map(|e| e.clone().with_epoch(None)).collect();
        self.inner.apply(&unfenced).await
    }
}

/// Every method it does not change forwards to the store it wraps.
#[async_trait]
impl Forward for BrokenStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        if !self.bug.fences_itself() {
            return self.inner.claim(tenant, session, request).await;
        }
        let mut fences = self.fences.lock();
        let key = (tenant.clone(), session.clone());
        let claim = forge_core::fence::decide(session, fences.get(&key), request)?;
        fences.insert(key, claim.clone());
        Ok(claim)
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        if !self.bug.fences_itself() {
            return self.inner.release(tenant, session, epoch).await;
        }
        let mut fences = self.fences.lock();
        let key = (tenant.clone(), session.clone());
        if let Some(r) = forge_core::fence::released(fences.get(&key), epoch) {
            fences.insert(key, r);
        }
        Ok(())
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        if !self.bug.fences_itself() {
            return self.inner.claimed(tenant, session).await;
        }
        Ok(self
            .fences
            .lock()
            .get(&(tenant.clone(), session.clone()))
            .cloned())
    }

    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[forge_core::blob::BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        let tenant = self.blob_tenant(tenant);
        self.inner
            .put_blobs(&tenant, blobs, now_ms, refresh_before_ms)
            .await
    }

    async fn blobs(
        &self,
        tenant: &TenantId,
        ids: &[forge_core::BlobId],
    ) -> Result<Vec<Option<Arc<str>>>> {
        self.inner.blobs(&self.blob_tenant(tenant), ids).await
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<forge_core::blob::BlobEntry>> {
        self.inner.blob_list(&self.blob_tenant(tenant)).await
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[forge_core::BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.inner
            .delete_blobs(&self.blob_tenant(tenant), ids, touched_before_ms)
            .await
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        if self.bug.fences_itself() {
            return self.fenced_apply(batch).await;
        }
        match self.bug {
            StoreBug::KeepsFirstWrite => {
                let kept = self.keep_first(batch).await;
                self.inner.apply(&kept).await
            }
            StoreBug::NoCascade => self.no_cascade(batch).await,
            StoreBug::DropsSessionFields => {
                let dropped: Vec<_> = batch
                    .iter()
                    .map(|e| match &e.event {
                        SyncEvent::SessionUpdated { info } => {
                            let mut info = info.clone();
                            info.extra.clear();
                            Envelope {
                                event: SyncEvent::SessionUpdated { info },
                                ..e.clone()
                            }
                        }
                        _ => e.clone(),
                    })
                    .collect();
                self.inner.apply(&dropped).await
            }
            StoreBug::ForkSharesRows => {
                self.inner.apply(batch).await?;
                self.remember_fork(batch).await
            }
            StoreBug::StaleSearchIndex => {
                self.inner.apply(batch).await?;
                let mut index = self.index.lock();
                for e in batch {
                    if let SyncEvent::PartUpdated { part } = &e.event {
                        let key = (e.tenant.clone(), part.session_id.clone(), part.id.clone());
                        index.insert(key, part.clone());
                    }
                }
                Ok(())
            }
            StoreBug::TenantLeak => {
                let leaked: Vec<_> = batch
                    .iter()
                    .map(|e| Envelope {
                        tenant: SHARED.clone(),
                        ..e.clone()
                    })
                    .collect();
                self.inner.apply(&leaked).await
            }
            StoreBug::DropsUnknownFields => self.inner.apply(&drop_unknown(batch)).await,
            StoreBug::TrustsTheEvent => {
                let refiled: Vec<_> = batch
                    .iter()
                    .map(|e| Envelope {
                        session_id: e.event.session_id().clone(),
                        ..e.clone()
                    })
                    .collect();
                self.inner.apply(&refiled).await
            }
            StoreBug::LockedUnderConcurrency => {
                let Ok(_guard) = self.busy.try_lock() else {
                    return Err(Error::backend("broken", true, "database is locked"));
                };
                tokio::task::yield_now().await;
                self.inner.apply(batch).await
            }
            StoreBug::WriteBehind => {
                let (inner, batch) = (Arc::clone(&self.inner), batch.to_vec());
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    let _ = inner.apply(&batch).await;
                });
                Ok(())
            }
            StoreBug::PartKeyedPerMessage => self.keyed_per_message(batch).await,
            StoreBug::MovesFromAStaleLookup => self.moves_from_stale_lookup(batch).await,
            StoreBug::TruncatesIds | StoreBug::FoldsIdCase => {
                self.inner.apply(&self.respelled(batch)?).await
            }
            StoreBug::NotAtomic => {
                for e in batch {
                    self.inner.apply(std::slice::from_ref(e)).await?;
                }
                Ok(())
            }
            _ => self.inner.apply(batch).await,
        }
    }

    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        if self.bug != StoreBug::StaleSearchIndex {
            return self.inner.search(tenant, query).await;
        }
        let words = query.words()?;
        let mut hits: Vec<SearchHit> = self
            .index
            .lock()
            .iter()
            .filter(|((t, s, _), _)| t == tenant && query.session.as_ref().is_none_or(|q| q == s))
            .filter(|(_, p)| forge_core::search::matches(p, &words))
            .filter_map(|(_, p)| SearchHit::of(p, 1.0, &words))
            .collect();
        forge_core::search::rank(&mut hits, query.limit());
        Ok(hits)
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        let id = SessionId::from(self.spelled(id.as_str(), false));
        self.inner.session(self.tenant(tenant), &id).await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        self.inner.sessions(self.tenant(tenant)).await
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let session = SessionId::from(self.spelled(session.as_str(), false));
        let id = MessageId::from(self.spelled(id.as_str(), false));
        Ok(self
            .inner
            .message(self.tenant(tenant), &session, &id)
            .await?
            .map(|m| self.with_stale(tenant, m)))
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let session = &SessionId::from(self.spelled(session.as_str(), false));
        let mut page = self
            .inner
            .messages(self.tenant(tenant), session, before, limit)
            .await?;
        match self.bug {
            StoreBug::SkipsFirstOfLaterPages if before.is_some() => {
                page.messages.pop();
            }
            StoreBug::ForkSharesRows => self.shared_rows(tenant, session, &mut page).await?,
            StoreBug::PartKeyedPerMessage | StoreBug::MovesFromAStaleLookup => {
                page.messages = std::mem::take(&mut page.messages)
                    .into_iter()
                    .map(|m| self.with_stale(tenant, m))
                    .collect();
            }
            StoreBug::FailedSummaryLooksFinished => {
                for m in &mut page.messages {
                    if let Some(a) = m.info.as_assistant_mut() {
                        if a.summary == Some(true) {
                            a.error = None;
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(page)
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let session = session.map(|s| SessionId::from(self.spelled(s.as_str(), false)));
        let session = session.as_ref();
        let mut open = self.inner.open_items(self.tenant(tenant), session).await?;
        if self.bug == StoreBug::HidesTools {
            open.parts.retain(|p| p.kind() != "tool");
        }
        if self.bug == StoreBug::OpennessFromStateOnly {
            let sessions = match session {
                Some(s) => vec![s.clone()],
                None => self
                    .inner
                    .sessions(tenant)
                    .await?
                    .into_iter()
                    .map(|s| s.info.id)
                    .collect(),
            };
            open.parts.clear();
            for s in sessions {
                for m in forge_core::read_all(self.inner.as_ref(), tenant, &s, 1000).await? {
                    open.parts
                        .extend(m.parts.into_iter().filter(|p| match &p.body {
                            PartBody::Text(t) => t.time.as_ref().is_none_or(|t| t.end.is_none()),
                            PartBody::Reasoning(r) => r.time.end.is_none(),
                            PartBody::Tool(t) => matches!(
                                t.state,
                                forge_core::model::ToolState::Pending(_)
                                    | forge_core::model::ToolState::Running(_)
                            ),
                            _ => false,
                        }));
                }
            }
        }
        if self.keeps_copies() {
            let stale = self.stale.lock();
            open.parts.extend(
                stale
                    .iter()
                    .filter(|(k, p)| {
                        &k.0 == tenant && session.is_none_or(|s| s == &k.1) && p.is_open()
                    })
                    .map(|(_, p)| p.clone()),
            );
        }
        Ok(open)
    }
}
