//! `MemoryStore`: the in-memory reference backend.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;

use crate::blob::{BlobEntry, BlobId, BlobValue};
use crate::error::{Error, Result};
use crate::event::{Envelope, SyncEvent};
use crate::fence::{self, Claim, ClaimRequest};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{Message, MessageWithParts, Part};
use crate::store::{
    clamp_limit, Capabilities, Cursor, OpenItems, Page, SessionPage, SessionState, Store,
};
use crate::tenant::TenantId;

type SessionKey = (TenantId, SessionId);

#[derive(Debug, Clone)]
struct SessionData {
    state: SessionState,
    messages: BTreeMap<MessageId, MessageData>,
    /// Which message holds each part id: a part id is unique within its session.
    part_at: HashMap<PartId, MessageId>,
}

#[derive(Debug, Clone)]
struct MessageData {
    info: Message,
    parts: BTreeMap<PartId, Part>,
}

impl MessageData {
    fn with_parts(&self) -> MessageWithParts {
        MessageWithParts {
            info: self.info.clone(),
            parts: self.parts.values().cloned().collect(),
        }
    }
}

/// How to put back one change when a batch fails half-way.
enum Undo {
    Session(SessionKey, Option<SessionData>),
    SessionInfo(SessionKey, crate::model::Session),
    Message(SessionKey, MessageId, Option<MessageData>),
    MessageInfo(SessionKey, MessageId, Message),
    Part(SessionKey, MessageId, PartId, Option<Part>),
    PartAt(SessionKey, PartId, Option<MessageId>),
    Seq(SessionKey, u64),
}

/// A blob's value and its `touched` time.
type StoredBlob = (Arc<str>, i64);

/// A complete in-memory store: tenancy, cascading removes, pagination, seq, atomic
/// batches. Nothing survives the process. It is the reference other backends are
/// compared against.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: RwLock<BTreeMap<SessionKey, SessionData>>,
    /// Fence records, apart from the sessions (they outlive a deleted session). Locked
    /// only while `sessions` is locked for writing, or alone.
    fences: RwLock<HashMap<SessionKey, Claim>>,
    /// Large values stored once ([`crate::blob`]): the value and its `touched` time.
    blobs: RwLock<HashMap<(TenantId, BlobId), StoredBlob>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

fn apply_one(
    map: &mut BTreeMap<SessionKey, SessionData>,
    env: &Envelope<SyncEvent>,
    undo: &mut Vec<Undo>,
) -> Result<()> {
    env.check()?;
    let key = (env.tenant.clone(), env.session_id.clone());
    match &env.event {
        SyncEvent::SessionUpdated { info } => match map.get_mut(&key) {
            Some(s) => {
                let old = std::mem::replace(&mut s.state.info, info.clone());
                undo.push(Undo::SessionInfo(key.clone(), old));
            }
            None => {
                map.insert(
                    key.clone(),
                    SessionData {
                        state: SessionState {
                            info: info.clone(),
                            seq: 0,
                        },
                        messages: BTreeMap::new(),
                        part_at: HashMap::new(),
                    },
                );
                undo.push(Undo::Session(key.clone(), None));
            }
        },
        SyncEvent::SessionDeleted { .. } => {
            if let Some(old) = map.remove(&key) {
                undo.push(Undo::Session(key.clone(), Some(old)));
            }
        }
        SyncEvent::MessageUpdated { info } => {
            let s = map
                .get_mut(&key)
                .ok_or_else(|| Error::not_found("session", &env.session_id))?;
            if let Some(m) = s.messages.get_mut(&info.id) {
                let old = std::mem::replace(&mut m.info, info.clone());
                undo.push(Undo::MessageInfo(key.clone(), info.id.clone(), old));
            } else {
                s.messages.insert(
                    info.id.clone(),
                    MessageData {
                        info: info.clone(),
                        parts: BTreeMap::new(),
                    },
                );
                undo.push(Undo::Message(key.clone(), info.id.clone(), None));
            }
        }
        SyncEvent::MessageRemoved { message_id, .. } => {
            if let Some(s) = map.get_mut(&key) {
                if let Some(old) = s.messages.remove(message_id) {
                    for pid in old.parts.keys() {
                        let at = s.part_at.remove(pid);
                        undo.push(Undo::PartAt(key.clone(), pid.clone(), at));
                    }
                    undo.push(Undo::Message(key.clone(), message_id.clone(), Some(old)));
                }
            }
        }
        SyncEvent::PartUpdated { part } => {
            let s = map
                .get_mut(&key)
                .filter(|s| s.messages.contains_key(&part.message_id))
                .ok_or_else(|| Error::not_found("message", &part.message_id))?;
            // A part id is unique within its session: an upsert naming another message
            // moves the part there.
            let was_at = s.part_at.insert(part.id.clone(), part.message_id.clone());
            undo.push(Undo::PartAt(key.clone(), part.id.clone(), was_at.clone()));
            if let Some(from) = was_at.filter(|m| m != &part.message_id) {
                if let Some(old) = s
                    .messages
                    .get_mut(&from)
                    .and_then(|m| m.parts.remove(&part.id))
                {
                    undo.push(Undo::Part(key.clone(), from, part.id.clone(), Some(old)));
                }
            }
            let m = s
                .messages
                .get_mut(&part.message_id)
                .ok_or_else(|| Error::not_found("message", &part.message_id))?;
            let old = m.parts.insert(part.id.clone(), part.clone());
            undo.push(Undo::Part(
                key.clone(),
                part.message_id.clone(),
                part.id.clone(),
                old,
            ));
        }
        SyncEvent::PartRemoved {
            message_id,
            part_id,
            ..
        } => {
            if let Some(s) = map.get_mut(&key) {
                if let Some(old) = s
                    .messages
                    .get_mut(message_id)
                    .and_then(|m| m.parts.remove(part_id))
                {
                    let at = s.part_at.remove(part_id);
                    undo.push(Undo::PartAt(key.clone(), part_id.clone(), at));
                    undo.push(Undo::Part(
                        key.clone(),
                        message_id.clone(),
                        part_id.clone(),
                        Some(old),
                    ));
                }
            }
        }
    }
    if let Some(s) = map.get_mut(&key) {
        if env.seq > s.state.seq {
            undo.push(Undo::Seq(key, s.state.seq));
            s.state.seq = env.seq;
        }
    }
    Ok(())
}

fn rollback(map: &mut BTreeMap<SessionKey, SessionData>, undo: Vec<Undo>) {
    for u in undo.into_iter().rev() {
        match u {
            Undo::Session(k, Some(d)) => {
                map.insert(k, d);
            }
            Undo::Session(k, None) => {
                map.remove(&k);
            }
            Undo::SessionInfo(k, info) => {
                if let Some(s) = map.get_mut(&k) {
                    s.state.info = info;
                }
            }
            Undo::Message(k, id, old) => {
                if let Some(s) = map.get_mut(&k) {
                    match old {
                        Some(d) => s.messages.insert(id, d),
                        None => s.messages.remove(&id),
                    };
                }
            }
            Undo::MessageInfo(k, id, info) => {
                if let Some(m) = map.get_mut(&k).and_then(|s| s.messages.get_mut(&id)) {
                    m.info = info;
                }
            }
            Undo::Part(k, mid, pid, old) => {
                if let Some(m) = map.get_mut(&k).and_then(|s| s.messages.get_mut(&mid)) {
                    match old {
                        Some(p) => m.parts.insert(pid, p),
                        None => m.parts.remove(&pid),
                    };
                }
            }
            Undo::PartAt(k, pid, at) => {
                if let Some(s) = map.get_mut(&k) {
                    match at {
                        Some(m) => s.part_at.insert(pid, m),
                        None => s.part_at.remove(&pid),
                    };
                }
            }
            Undo::Seq(k, seq) => {
                if let Some(s) = map.get_mut(&k) {
                    s.state.seq = seq;
                }
            }
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: false,
            blobs: true,
            ..Capabilities::new("memory")
        }
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let mut map = self.sessions.write();
        {
            // Under the write lock: a claim waits for the batch, the batch sees every
            // claim granted before it.
            let fences = self.fences.read();
            for env in batch {
                let key = (env.tenant.clone(), env.session_id.clone());
                fence::check(&env.session_id, fences.get(&key), env.epoch)?;
            }
        }
        let mut undo = Vec::new();
        for env in batch {
            if let Err(e) = apply_one(&mut map, env, &mut undo) {
                rollback(&mut map, undo);
                return Err(e);
            }
        }
        Ok(())
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        let _batches = self.sessions.write();
        let mut fences = self.fences.write();
        let key = (tenant.clone(), session.clone());
        let claim = fence::decide(session, fences.get(&key), request)?;
        fences.insert(key, claim.clone());
        Ok(claim)
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        let mut fences = self.fences.write();
        let key = (tenant.clone(), session.clone());
        if let Some(released) = fence::released(fences.get(&key), epoch) {
            fences.insert(key, released);
        }
        Ok(())
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        Ok(self
            .fences
            .read()
            .get(&(tenant.clone(), session.clone()))
            .cloned())
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        let map = self.sessions.read();
        Ok(map
            .get(&(tenant.clone(), id.clone()))
            .map(|s| s.state.clone()))
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let map = self.sessions.read();
        Ok(map
            .range((tenant.clone(), SessionId::from(""))..)
            .take_while(|((t, _), _)| t == tenant)
            .map(|(_, s)| s.state.clone())
            .collect())
    }

    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        use std::ops::Bound;
        let limit = clamp_limit(limit);
        let map = self.sessions.read();
        let from = match after {
            Some(a) => Bound::Excluded((tenant.clone(), a.clone())),
            None => Bound::Included((tenant.clone(), SessionId::from(""))),
        };
        let mut rest = map
            .range((from, Bound::Unbounded))
            .take_while(|((t, _), _)| t == tenant)
            .map(|(_, s)| s.state.clone());
        let sessions: Vec<SessionState> = rest.by_ref().take(limit).collect();
        let next = rest.next().and(sessions.last()).map(|s| s.info.id.clone());
        Ok(SessionPage { sessions, next })
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let map = self.sessions.read();
        Ok(map
            .get(&(tenant.clone(), session.clone()))
            .and_then(|s| s.messages.get(id))
            .map(MessageData::with_parts))
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let limit = clamp_limit(limit);
        let map = self.sessions.read();
        let Some(s) = map.get(&(tenant.clone(), session.clone())) else {
            return Ok(Page {
                messages: Vec::new(),
                next: None,
            });
        };
        let range = match before {
            Some(c) => s.messages.range(..c.message_id().clone()),
            None => s.messages.range::<MessageId, _>(..),
        };
        let mut newest_first: Vec<&MessageData> =
            range.rev().take(limit + 1).map(|(_, m)| m).collect();
        let more = newest_first.len() > limit;
        newest_first.truncate(limit);
        let messages = newest_first
            .into_iter()
            .rev()
            .map(MessageData::with_parts)
            .collect();
        Ok(Page::new(messages, more))
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let map = self.sessions.read();
        let mut out = OpenItems::default();
        for ((t, sid), s) in map.iter() {
            if t != tenant || session.is_some_and(|want| want != sid) {
                continue;
            }
            for m in s.messages.values() {
                out.add(&m.info, m.parts.values());
            }
        }
        Ok(out)
    }

    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        let mut map = self.blobs.write();
        let mut written = 0;
        for b in blobs {
            let key = (tenant.clone(), b.id.clone());
            match map.get_mut(&key) {
                Some(entry) if entry.1 >= refresh_before_ms => {}
                Some(entry) => {
                    entry.1 = now_ms;
                    written += 1;
                }
                None => {
                    map.insert(key, (Arc::clone(&b.value), now_ms));
                    written += 1;
                }
            }
        }
        Ok(written)
    }

    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        let map = self.blobs.read();
        Ok(ids
            .iter()
            .map(|id| {
                map.get(&(tenant.clone(), id.clone()))
                    .map(|(v, _)| Arc::clone(v))
            })
            .collect())
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        let map = self.blobs.read();
        Ok(map
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .map(|((_, id), (v, touched))| BlobEntry {
                id: id.clone(),
                bytes: v.len() as u64,
                touched_ms: *touched,
            })
            .collect())
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        let mut map = self.blobs.write();
        let mut deleted = 0;
        for id in ids {
            let key = (tenant.clone(), id.clone());
            if map.get(&key).is_some_and(|(_, t)| *t < touched_before_ms) {
                map.remove(&key);
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
