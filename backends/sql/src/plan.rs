//! The write plan: one `apply` batch turned into the net set of row changes, with the
//! reference store's semantics.
//!
//! `MemoryStore` applies a batch event by event, and each event sees the earlier ones
//! (a part upsert after its message was removed fails; a session deleted and created
//! again starts empty). Running one SQL statement per event would keep those semantics
//! but cost a round trip per event. Instead the batch is simulated here, in order, over
//! the few stored facts it depends on (which of its sessions and messages exist, and the
//! sessions' `seq` and row), and the simulation yields the batch's *net* effect:
//!
//! 1. the sessions, messages and parts to delete (removals, rows replaced by a
//!    re-creation after a removal in the same batch, and parts moved to another message:
//!    a part id is unique within its session),
//! 2. then the final version of every row to upsert, each key once.
//!
//! Deletes run before upserts, so a key removed and written again in one batch ends up
//! as the last write, and a removed message's old parts are gone. Because every upsert
//! key appears once, one `INSERT … ON CONFLICT DO UPDATE` per table and chunk never
//! touches a row twice (Postgres refuses that). The first failing event decides the
//! batch's error, exactly as in the reference store, before anything is written.
//!
//! Before the simulation, every event's epoch is checked against its session's fence
//! record ([`forge_core::fence::check`]), read in the same transaction: the first
//! refused event fails the batch, as in the reference store, which checks every event's
//! epoch before it applies any.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use forge_core::fence::{self, Claim};
use forge_core::{Envelope, Error, MessageId, PartId, Result, SessionId, SyncEvent, TenantId};

/// A session key inside one tenant.
pub(crate) type SessionKey = (TenantId, SessionId);
/// A message key.
pub(crate) type MessageKey = (TenantId, SessionId, MessageId);
type PartKey = (TenantId, SessionId, MessageId, PartId);

/// What the batch needs to know about the stored rows before it can be simulated.
#[derive(Debug, Default)]
pub(crate) struct Needs {
    /// Sessions whose existence, `seq` and row matter, by tenant.
    pub sessions: BTreeMap<TenantId, BTreeSet<SessionId>>,
    /// Messages whose existence matters (a part upsert looks them up), by tenant.
    pub messages: BTreeMap<TenantId, BTreeSet<(SessionId, MessageId)>>,
    /// Part ids whose stored messages matter (an upsert under another message moves
    /// the part), by tenant.
    pub parts: BTreeMap<TenantId, BTreeSet<(SessionId, PartId)>>,
    /// Sessions whose fence record matters: the session of every event, valid or not, by
    /// tenant (a superset of [`Needs::sessions`]).
    pub fences: BTreeMap<TenantId, BTreeSet<SessionId>>,
}

/// A stored session, as loaded for the simulation.
#[derive(Clone, Debug)]
pub(crate) struct StoredSession {
    /// Its `seq`.
    pub seq: u64,
    /// Its JSON row.
    pub body: String,
}

/// The stored facts listed in [`Needs`], as read inside the write transaction.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// Sessions that exist.
    pub sessions: HashMap<SessionKey, StoredSession>,
    /// Messages that exist.
    pub messages: HashSet<MessageKey>,
    /// The messages holding each part id of [`Needs::parts`] (one, unless a release
    /// before schema version 2 wrote it under several).
    pub part_messages: HashMap<(TenantId, SessionId, PartId), Vec<MessageId>>,
    /// The fence records of [`Needs::fences`] that exist, by tenant.
    pub fences: HashMap<TenantId, HashMap<SessionId, Claim>>,
}

/// A session row to write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SessionRow {
    pub id: SessionId,
    pub seq: u64,
    pub body: String,
}

/// A message row to write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MessageRow {
    pub session: SessionId,
    pub id: MessageId,
    pub open: bool,
    pub body: String,
}

/// A part row to write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PartRow {
    pub session: SessionId,
    pub message: MessageId,
    pub id: PartId,
    pub open: bool,
    pub body: String,
    /// The text the search index holds for it ([`crate::search::index_text`]): `None`
    /// when the part is not searched, or the index is off.
    pub doc: Option<String>,
}

/// The net row changes of one tenant, deletes first.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TenantOps {
    /// Sessions removed with everything under them (foreign keys cascade).
    pub delete_sessions: Vec<SessionId>,
    /// Messages removed with their parts.
    pub delete_messages: Vec<(SessionId, MessageId)>,
    /// Parts removed.
    pub delete_parts: Vec<(SessionId, MessageId, PartId)>,
    /// Sessions written (new info and/or a higher `seq`), each once.
    pub put_sessions: Vec<SessionRow>,
    /// Messages written, each once.
    pub put_messages: Vec<MessageRow>,
    /// Parts written, each once.
    pub put_parts: Vec<PartRow>,
}

impl TenantOps {
    fn is_empty(&self) -> bool {
        self.delete_sessions.is_empty()
            && self.delete_messages.is_empty()
            && self.delete_parts.is_empty()
            && self.put_sessions.is_empty()
            && self.put_messages.is_empty()
            && self.put_parts.is_empty()
    }
}

/// The net effect of a batch, by tenant.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    pub tenants: BTreeMap<TenantId, TenantOps>,
}

/// One event, checked and serialized.
enum Op {
    PutSession { body: String },
    DeleteSession,
    PutMessage { row: MessageRow },
    RemoveMessage { id: MessageId },
    PutPart { row: PartRow },
    RemovePart { message: MessageId, id: PartId },
}

struct Prepared {
    tenant: TenantId,
    session: SessionId,
    seq: u64,
    epoch: Option<u64>,
    op: Result<Op>,
}

/// A batch ready to be simulated: every event checked against its envelope and
/// serialized, errors kept at their event's position.
pub(crate) struct Batch {
    events: Vec<Prepared>,
}

impl Batch {
    /// Checks and serializes `batch`, and with `search` computes the indexed text of
    /// every part it writes (from the part itself: its JSON is never parsed back). Never
    /// fails: an event's error is reported when the simulation reaches it, so the first
    /// failing event decides, as in the reference.
    pub fn prepare(batch: &[Envelope<SyncEvent>], search: bool) -> Self {
        Self {
            events: batch
                .iter()
                .map(|env| Prepared {
                    tenant: env.tenant.clone(),
                    session: env.session_id.clone(),
                    seq: env.seq,
                    epoch: env.epoch,
                    op: prepare_op(env, search),
                })
                .collect(),
        }
    }

    /// Whether the batch has no event at all.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The stored facts the simulation reads.
    ///
    /// Every session a valid event names; and the message of a part upsert, unless an
    /// earlier event of the batch already decided whether it exists (the message was
    /// written or removed, or its session deleted).
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        let mut decided_messages: HashSet<MessageKey> = HashSet::new();
        let mut deleted_sessions: HashSet<SessionKey> = HashSet::new();
        for p in &self.events {
            if !needs
                .fences
                .get(&p.tenant)
                .is_some_and(|s| s.contains(&p.session))
            {
                needs
                    .fences
                    .entry(p.tenant.clone())
                    .or_default()
                    .insert(p.session.clone());
            }
            let Ok(op) = &p.op else { continue };
            needs
                .sessions
                .entry(p.tenant.clone())
                .or_default()
                .insert(p.session.clone());
            let message_key = |m: &MessageId| (p.tenant.clone(), p.session.clone(), m.clone());
            match op {
                Op::DeleteSession => {
                    deleted_sessions.insert((p.tenant.clone(), p.session.clone()));
                }
                Op::PutMessage { row } => {
                    decided_messages.insert(message_key(&row.id));
                }
                Op::RemoveMessage { id } => {
                    decided_messages.insert(message_key(id));
                }
                Op::PutPart { row } => {
                    needs
                        .parts
                        .entry(p.tenant.clone())
                        .or_default()
                        .insert((p.session.clone(), row.id.clone()));
                    let key = message_key(&row.message);
                    let session = (p.tenant.clone(), p.session.clone());
                    if !decided_messages.contains(&key) && !deleted_sessions.contains(&session) {
                        needs
                            .messages
                            .entry(p.tenant.clone())
                            .or_default()
                            .insert((p.session.clone(), row.message.clone()));
                    }
                }
                Op::PutSession { .. } | Op::RemovePart { .. } => {}
            }
        }
        needs
    }

    /// Checks every event's epoch against its session's fence record in `loaded`, in
    /// batch order.
    ///
    /// # Errors
    /// The first refused event's [`Error::Fenced`].
    pub fn check_fences(&self, loaded: &Loaded) -> Result<()> {
        for p in &self.events {
            let record = loaded.fences.get(&p.tenant).and_then(|f| f.get(&p.session));
            fence::check(&p.session, record, p.epoch)?;
        }
        Ok(())
    }

    /// Runs the batch in order over `loaded` and returns its net effect, or the first
    /// event's error.
    pub fn simulate(self, loaded: &Loaded) -> Result<Plan> {
        let mut sim = Sim {
            loaded,
            sessions: BTreeMap::new(),
            messages: BTreeMap::new(),
            parts: BTreeMap::new(),
            located: BTreeMap::new(),
        };
        for p in self.events {
            sim.apply(p)?;
        }
        Ok(sim.finish())
    }
}

fn prepare_op(env: &Envelope<SyncEvent>, search: bool) -> Result<Op> {
    env.check()?;
    Ok(match &env.event {
        SyncEvent::SessionUpdated { info } => Op::PutSession {
            body: serde_json::to_string(info)?,
        },
        SyncEvent::SessionDeleted { .. } => Op::DeleteSession,
        SyncEvent::MessageUpdated { info } => Op::PutMessage {
            row: MessageRow {
                session: info.session_id.clone(),
                id: info.id.clone(),
                open: info.is_open(),
                body: serde_json::to_string(info)?,
            },
        },
        SyncEvent::MessageRemoved { message_id, .. } => Op::RemoveMessage {
            id: message_id.clone(),
        },
        SyncEvent::PartUpdated { part } => Op::PutPart {
            row: PartRow {
                session: part.session_id.clone(),
                message: part.message_id.clone(),
                id: part.id.clone(),
                open: part.is_open(),
                body: serde_json::to_string(part)?,
                doc: if search {
                    crate::search::index_text(part)
                } else {
                    None
                },
            },
        },
        SyncEvent::PartRemoved {
            message_id,
            part_id,
            ..
        } => Op::RemovePart {
            message: message_id.clone(),
            id: part_id.clone(),
        },
    })
}

/// A session as the simulation sees it.
struct SessionSim {
    /// It exists after the events simulated so far.
    exists: bool,
    seq: u64,
    /// Its row while it exists.
    body: Option<String>,
    /// Its stored incarnation was deleted: everything stored under it is gone.
    wiped: bool,
    /// Its row or `seq` changed.
    dirty: bool,
}

/// A message touched by the batch.
struct MessageSim {
    exists: bool,
    /// The row to write, if the batch wrote it (since the last removal).
    put: Option<MessageRow>,
    /// The stored row and its parts must be deleted first.
    wiped: bool,
}

enum PartSim {
    Put(PartRow),
    Removed,
}

/// A part id within its session.
type PartIdKey = (TenantId, SessionId, PartId);

struct Sim<'a> {
    loaded: &'a Loaded,
    sessions: BTreeMap<SessionKey, SessionSim>,
    messages: BTreeMap<MessageKey, MessageSim>,
    parts: BTreeMap<PartKey, PartSim>,
    /// The messages holding a part id after the events simulated so far, for the ids
    /// the batch touched.
    located: BTreeMap<PartIdKey, BTreeSet<MessageId>>,
}

impl Sim<'_> {
    fn session(&mut self, key: &SessionKey) -> &mut SessionSim {
        let loaded = self.loaded;
        self.sessions
            .entry(key.clone())
            .or_insert_with(|| match loaded.sessions.get(key) {
                Some(s) => SessionSim {
                    exists: true,
                    seq: s.seq,
                    body: Some(s.body.clone()),
                    wiped: false,
                    dirty: false,
                },
                None => SessionSim {
                    exists: false,
                    seq: 0,
                    body: None,
                    wiped: false,
                    dirty: false,
                },
            })
    }

    /// Whether a message exists after the events simulated so far.
    fn message_exists(&mut self, key: &MessageKey) -> bool {
        let session = (key.0.clone(), key.1.clone());
        let s = self.session(&session);
        if !s.exists {
            return false;
        }
        let wiped = s.wiped;
        match self.messages.get(key) {
            Some(m) => m.exists,
            None => !wiped && self.loaded.messages.contains(key),
        }
    }

    /// The messages holding part `key` now: the stored ones that the batch has not
    /// deleted, updated by the batch's own part writes.
    fn holders(&mut self, key: &PartIdKey) -> &mut BTreeSet<MessageId> {
        if !self.located.contains_key(key) {
            let session = (key.0.clone(), key.1.clone());
            let wiped = self.session(&session).wiped;
            let stored: BTreeSet<MessageId> = self
                .loaded
                .part_messages
                .get(key)
                .into_iter()
                .flatten()
                .filter(|m| {
                    let mkey = (key.0.clone(), key.1.clone(), (*m).clone());
                    !wiped && !self.messages.get(&mkey).is_some_and(|s| s.wiped)
                })
                .cloned()
                .collect();
            self.located.insert(key.clone(), stored);
        }
        self.located
            .get_mut(key)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Forgets the batch's changes below `lo..` while `within` holds: they were deleted.
    fn forget<K: Ord + Clone, V>(map: &mut BTreeMap<K, V>, lo: &K, within: impl Fn(&K) -> bool) {
        let doomed: Vec<K> = map
            .range(lo.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| within(k))
            .cloned()
            .collect();
        for k in doomed {
            map.remove(&k);
        }
    }

    fn apply(&mut self, p: Prepared) -> Result<()> {
        let op = p.op?;
        let key = (p.tenant, p.session);
        match op {
            Op::PutSession { body } => {
                let s = self.session(&key);
                if !s.exists {
                    s.exists = true;
                    s.seq = 0;
                }
                s.body = Some(body);
                s.dirty = true;
            }
            Op::DeleteSession => {
                let s = self.session(&key);
                if s.exists {
                    s.exists = false;
                    s.wiped = true;
                    s.dirty = false;
                    s.body = None;
                    let (t, sid) = (&key.0, &key.1);
                    let lo = (t.clone(), sid.clone(), MessageId::from(""));
                    Self::forget(&mut self.messages, &lo, |k| &k.0 == t && &k.1 == sid);
                    let lo = (
                        t.clone(),
                        sid.clone(),
                        MessageId::from(""),
                        PartId::from(""),
                    );
                    Self::forget(&mut self.parts, &lo, |k| &k.0 == t && &k.1 == sid);
                    let lo = (t.clone(), sid.clone(), PartId::from(""));
                    Self::forget(&mut self.located, &lo, |k| &k.0 == t && &k.1 == sid);
                }
                // A deleted session records no seq.
                return Ok(());
            }
            Op::PutMessage { row } => {
                if !self.session(&key).exists {
                    return Err(Error::not_found("session", &key.1));
                }
                let mkey = (key.0.clone(), key.1.clone(), row.id.clone());
                let m = self.messages.entry(mkey).or_insert(MessageSim {
                    exists: false,
                    put: None,
                    wiped: false,
                });
                m.exists = true;
                m.put = Some(row);
            }
            Op::RemoveMessage { id } => {
                if self.session(&key).exists {
                    let mkey = (key.0.clone(), key.1.clone(), id);
                    let lo = (
                        mkey.0.clone(),
                        mkey.1.clone(),
                        mkey.2.clone(),
                        PartId::from(""),
                    );
                    Self::forget(&mut self.parts, &lo, |k| {
                        k.0 == mkey.0 && k.1 == mkey.1 && k.2 == mkey.2
                    });
                    let lo = (mkey.0.clone(), mkey.1.clone(), PartId::from(""));
                    for (_, holders) in self
                        .located
                        .range_mut(lo..)
                        .take_while(|(k, _)| k.0 == mkey.0 && k.1 == mkey.1)
                    {
                        holders.remove(&mkey.2);
                    }
                    self.messages.insert(
                        mkey,
                        MessageSim {
                            exists: false,
                            put: None,
                            wiped: true,
                        },
                    );
                }
            }
            Op::PutPart { row } => {
                let mkey = (key.0.clone(), key.1.clone(), row.message.clone());
                if !self.message_exists(&mkey) {
                    return Err(Error::not_found("message", &row.message));
                }
                let (t, s, m) = mkey;
                // A part id is unique within its session: under another message, the
                // part moves (the old row is deleted).
                let pid_key = (t.clone(), s.clone(), row.id.clone());
                let holders = std::mem::take(self.holders(&pid_key));
                for other in holders.into_iter().filter(|o| o != &m) {
                    let old = (t.clone(), s.clone(), other, row.id.clone());
                    self.parts.insert(old, PartSim::Removed);
                }
                self.holders(&pid_key).insert(m.clone());
                self.parts
                    .insert((t, s, m, row.id.clone()), PartSim::Put(row));
            }
            Op::RemovePart { message, id } => {
                if self.session(&key).exists {
                    let pid_key = (key.0.clone(), key.1.clone(), id.clone());
                    self.holders(&pid_key).remove(&message);
                    let pkey = (key.0.clone(), key.1.clone(), message, id);
                    self.parts.insert(pkey, PartSim::Removed);
                }
            }
        }
        let s = self.session(&key);
        if s.exists && p.seq > s.seq {
            s.seq = p.seq;
            s.dirty = true;
        }
        Ok(())
    }

    fn finish(self) -> Plan {
        let mut plan = Plan::default();
        for ((t, id), s) in self.sessions {
            let ops = plan.tenants.entry(t).or_default();
            if s.wiped {
                ops.delete_sessions.push(id.clone());
            }
            if let (true, true, Some(body)) = (s.exists, s.dirty, s.body) {
                ops.put_sessions.push(SessionRow {
                    id,
                    seq: s.seq,
                    body,
                });
            }
        }
        for ((t, session, id), m) in self.messages {
            let ops = plan.tenants.entry(t).or_default();
            if m.wiped {
                ops.delete_messages.push((session, id));
            }
            if let Some(row) = m.put {
                ops.put_messages.push(row);
            }
        }
        for ((t, session, message, id), p) in self.parts {
            let ops = plan.tenants.entry(t).or_default();
            match p {
                PartSim::Put(row) => ops.put_parts.push(row),
                PartSim::Removed => ops.delete_parts.push((session, message, id)),
            }
        }
        plan.tenants.retain(|_, ops| !ops.is_empty());
        plan
    }
}

#[cfg(test)]
mod tests;
