//! The reference model of the `Store` contract: plain ordered maps, whole-state copies
//! for atomic batches, no undo log, no cleverness. Backends are compared against it.
//!
//! [`filter_compacted`] is core's reference definition of the compacted view.

use std::collections::BTreeMap;

use forge_core::{
    Envelope, Message, MessageId, MessageWithParts, OpenItems, Part, PartId, Session, SessionId,
    SessionState, SyncEvent, TenantId,
};

pub use forge_core::filter_compacted_reference as filter_compacted;

/// Why the reference rejects a batch; the store must reject it with a matching error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A message for a missing session, or a part for a missing message:
    /// `Error::NotFound`.
    NotFound,
    /// A part whose message lives in another session of the tenant:
    /// `Error::Conflict` (`Error::NotFound` is accepted too: the message is not found in
    /// the part's session).
    Conflict,
    /// A batch with an event carried in an envelope of another session:
    /// `Error::InvalidInput` (`NotFound` and `Conflict` are accepted too: a store that
    /// checks event by event may meet another refused event of the batch first).
    Invalid,
}

impl Rejection {
    /// Whether a store error of kind `kind` (see `Error`) is an acceptable rejection.
    pub fn accepts(self, error: &forge_core::Error) -> bool {
        use forge_core::Error as E;
        match self {
            Rejection::NotFound => matches!(error, E::NotFound { .. }),
            Rejection::Conflict => matches!(error, E::NotFound { .. } | E::Conflict { .. }),
            Rejection::Invalid => matches!(
                error,
                E::InvalidInput(_) | E::NotFound { .. } | E::Conflict { .. }
            ),
        }
    }
}

/// One stored message and its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct RefMessage {
    /// The message.
    pub info: Message,
    /// Its parts by id.
    pub parts: BTreeMap<PartId, Part>,
}

/// One stored session.
#[derive(Clone, Debug, PartialEq)]
pub struct RefSession {
    /// The session.
    pub info: Session,
    /// Highest seq applied.
    pub seq: u64,
    /// Its messages by id.
    pub messages: BTreeMap<MessageId, RefMessage>,
    /// The message holding each part id: a part id is unique within its session.
    pub part_at: BTreeMap<PartId, MessageId>,
}

/// The whole reference store: tenant → session → message → part.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReferenceStore {
    tenants: BTreeMap<TenantId, BTreeMap<SessionId, RefSession>>,
}

impl ReferenceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a batch: all or nothing.
    ///
    /// # Errors
    /// The rejection of the first event that cannot be applied; the store is unchanged.
    pub fn apply(&mut self, batch: &[Envelope<SyncEvent>]) -> Result<(), Rejection> {
        if batch.iter().any(|e| e.event.session_id() != &e.session_id) {
            return Err(Rejection::Invalid);
        }
        let mut next = self.clone();
        for e in batch {
            next.apply_one(e)?;
        }
        *self = next;
        Ok(())
    }

    fn apply_one(&mut self, e: &Envelope<SyncEvent>) -> Result<(), Rejection> {
        let sessions = self.tenants.entry(e.tenant.clone()).or_default();
        let sid = e.event.session_id();
        match &e.event {
            SyncEvent::SessionUpdated { info } => {
                sessions
                    .entry(info.id.clone())
                    .and_modify(|s| s.info = info.clone())
                    .or_insert_with(|| RefSession {
                        info: info.clone(),
                        seq: 0,
                        messages: BTreeMap::new(),
                        part_at: BTreeMap::new(),
                    });
            }
            SyncEvent::SessionDeleted { session_id } => {
                sessions.remove(session_id);
            }
            SyncEvent::MessageUpdated { info } => {
                let s = sessions.get_mut(sid).ok_or(Rejection::NotFound)?;
                s.messages
                    .entry(info.id.clone())
                    .and_modify(|m| m.info = info.clone())
                    .or_insert_with(|| RefMessage {
                        info: info.clone(),
                        parts: BTreeMap::new(),
                    });
            }
            SyncEvent::MessageRemoved { message_id, .. } => {
                if let Some(s) = sessions.get_mut(sid) {
                    if let Some(m) = s.messages.remove(message_id) {
                        for p in m.parts.keys() {
                            s.part_at.remove(p);
                        }
                    }
                }
            }
            SyncEvent::PartUpdated { part } => {
                let here = sessions
                    .get(sid)
                    .is_some_and(|s| s.messages.contains_key(&part.message_id));
                let Some(s) = sessions.get_mut(sid).filter(|_| here) else {
                    let elsewhere = sessions
                        .iter()
                        .any(|(id, s)| id != sid && s.messages.contains_key(&part.message_id));
                    return Err(if elsewhere {
                        Rejection::Conflict
                    } else {
                        Rejection::NotFound
                    });
                };
                // Unique within the session: under another message, the part moves.
                if let Some(from) = s.part_at.insert(part.id.clone(), part.message_id.clone()) {
                    if let Some(m) = s.messages.get_mut(&from) {
                        m.parts.remove(&part.id);
                    }
                }
                if let Some(m) = s.messages.get_mut(&part.message_id) {
                    m.parts.insert(part.id.clone(), part.clone());
                }
            }
            SyncEvent::PartRemoved {
                message_id,
                part_id,
                ..
            } => {
                if let Some(s) = sessions.get_mut(sid) {
                    let removed = s
                        .messages
                        .get_mut(message_id)
                        .and_then(|m| m.parts.remove(part_id));
                    if removed.is_some() {
                        s.part_at.remove(part_id);
                    }
                }
            }
        }
        if let Some(s) = sessions.get_mut(sid) {
            s.seq = s.seq.max(e.seq);
        }
        Ok(())
    }

    /// The sessions of a tenant in id order.
    pub fn sessions(&self, tenant: &TenantId) -> Vec<SessionState> {
        self.tenants
            .get(tenant)
            .into_iter()
            .flat_map(|s| s.values())
            .map(|s| SessionState {
                info: s.info.clone(),
                seq: s.seq,
            })
            .collect()
    }

    /// One session.
    pub fn session(&self, tenant: &TenantId, id: &SessionId) -> Option<SessionState> {
        self.get(tenant, id).map(|s| SessionState {
            info: s.info.clone(),
            seq: s.seq,
        })
    }

    fn get(&self, tenant: &TenantId, id: &SessionId) -> Option<&RefSession> {
        self.tenants.get(tenant).and_then(|s| s.get(id))
    }

    /// One message with its parts in id order.
    pub fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Option<MessageWithParts> {
        self.get(tenant, session)
            .and_then(|s| s.messages.get(id))
            .map(with_parts)
    }

    /// A session's whole history, oldest → newest.
    pub fn history(&self, tenant: &TenantId, session: &SessionId) -> Vec<MessageWithParts> {
        self.get(tenant, session)
            .map(|s| s.messages.values().map(with_parts).collect())
            .unwrap_or_default()
    }

    /// What is open, in (session, message, part) id order.
    pub fn open_items(&self, tenant: &TenantId, session: Option<&SessionId>) -> OpenItems {
        let mut out = OpenItems::default();
        for (sid, s) in self.tenants.get(tenant).into_iter().flatten() {
            if session.is_some_and(|want| want != sid) {
                continue;
            }
            for m in s.messages.values() {
                if m.info.is_open() {
                    out.messages.push(m.info.clone());
                }
                out.parts
                    .extend(m.parts.values().filter(|p| p.is_open()).cloned());
            }
        }
        out
    }
}

fn with_parts(m: &RefMessage) -> MessageWithParts {
    MessageWithParts {
        info: m.info.clone(),
        parts: m.parts.values().cloned().collect(),
    }
}

/// `open` sorted by id, so two listings can be compared whatever order a store uses.
pub fn sorted(mut open: OpenItems) -> OpenItems {
    open.messages
        .sort_by(|a, b| (&a.session_id, &a.id).cmp(&(&b.session_id, &b.id)));
    open.parts.sort_by(|a, b| {
        (&a.session_id, &a.message_id, &a.id).cmp(&(&b.session_id, &b.message_id, &b.id))
    });
    open
}

/// The fencing rules as the contract states them (docs/design.md §6), written apart from
/// `forge_core::fence`, so that the suite checks that code too instead of trusting it.
pub mod fencing {
    use forge_core::{Claim, ClaimMode, ClaimRequest, ErrorKind};

    /// What a claim over the record `current` gives: the record to store, or the kind of
    /// its refusal.
    pub fn claim(current: Option<&Claim>, req: &ClaimRequest) -> Result<Claim, ErrorKind> {
        let granted = |epoch| Claim {
            epoch,
            holder: req.holder.clone(),
            expires_ms: req.now_ms + req.lease_ms,
        };
        let last = current.map_or(0, |c| c.epoch);
        match req.mode {
            ClaimMode::Renew(e) if current.is_some() && e == last => Ok(granted(e)),
            ClaimMode::Renew(_) => Err(ErrorKind::Fenced),
            ClaimMode::Free => match current {
                // Another holder whose lease has not run out keeps the session.
                Some(c) if c.holder != req.holder && req.now_ms < c.expires_ms => {
                    Err(ErrorKind::Held)
                }
                _ => Ok(granted(last + 1)),
            },
            ClaimMode::TakeOver => Ok(granted(last + 1)),
        }
    }

    /// The record after releasing `epoch`: its lease ended when `epoch` is current.
    pub fn release(current: Option<&Claim>, epoch: u64) -> Option<Claim> {
        let mut c = current?.clone();
        if c.epoch != epoch {
            return Some(c);
        }
        c.expires_ms = 0;
        Some(c)
    }

    /// Whether a write with `epoch` (`None`: unfenced) lands over the record `current`.
    pub fn write(current: Option<&Claim>, epoch: Option<u64>) -> Result<(), ErrorKind> {
        let current = current.map(|c| c.epoch);
        if current == epoch {
            Ok(())
        } else {
            Err(ErrorKind::Fenced)
        }
    }
}
