//! Fork (contract property 13, docs/conformance.md): a fork holds a copy of its source's
//! history up to the point, and afterwards the two are independent.
//!
//! A case is a source session of 1–8 messages (alternating user and assistant, one or
//! two parts each), a fork point (all, through a message, before a message), and a list
//! of writes after the fork, each to the source or to the fork: overwrite a message's
//! part, remove a message, append a message. The fork is planned by
//! [`forge_core::fork::plan`] and committed as one batch through the backend. Then:
//!
//! - the fork's session row names its source (`parentID`, `forkedFrom` with the last
//!   message copied), and its history is the source's up to the point, field for field
//!   but for the ids (new ones, in the same order; an assistant's `parentID` points at
//!   the copy of its user message);
//! - after the writes, each session reads back exactly as its own writes made it: no
//!   write to one ever shows in the other (a backend that shares the copied rows with
//!   the source is caught here).

use std::collections::BTreeMap;
use std::sync::Arc;

use forge_core::fork::{plan, ForkPoint, FORKED_FROM};
use forge_core::{
    read_all, Envelope, MessageId, MessageWithParts, Part, PartId, SessionId, Store, SyncEvent,
    TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// Where the fork ends, by index into the source's messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Point {
    /// The whole history.
    All,
    /// Through message `i`.
    Through(u8),
    /// Before message `i`.
    Before(u8),
}

/// One write after the fork.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// To the fork (else the source).
    pub to_fork: bool,
    /// 0: overwrite a part of message `at`; 1: remove message `at`; 2: append a message.
    pub what: u8,
    /// Which message (modulo the session's count).
    pub at: u8,
}

/// A case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Messages of the source (1–8).
    pub messages: u8,
    /// Parts per message: 1 or 2, by message index parity of this mask.
    pub two_parts: u8,
    /// The fork point.
    pub point: Point,
    /// Writes after the fork.
    pub writes: Vec<Write>,
}

/// Any case.
pub fn case() -> impl Strategy<Value = Case> {
    (1u8..=8, any::<u8>())
        .prop_flat_map(|(messages, two_parts)| {
            let point = prop_oneof![
                Just(Point::All),
                (0..messages).prop_map(Point::Through),
                (0..messages).prop_map(Point::Before),
            ];
            let write = (any::<bool>(), 0u8..3, any::<u8>())
                .prop_map(|(to_fork, what, at)| Write { to_fork, what, at });
            (
                Just(messages),
                Just(two_parts),
                point,
                prop::collection::vec(write, 1..=8),
            )
        })
        .prop_map(|(messages, two_parts, point, writes)| Case {
            messages,
            two_parts,
            point,
            writes,
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Fork, case(), |c| check(ctx, c))
}

/// Message `j` of `session` (version `v`), with its parts.
fn message(session: &SessionId, id: &MessageId, j: u8, v: u8, two: bool) -> MessageWithParts {
    let kind = if j.is_multiple_of(2) {
        MessageKind::User
    } else {
        MessageKind::Assistant
    };
    let mut info = model::message(session, id, kind, v);
    if let Some(a) = info.as_assistant_mut() {
        a.parent_id = MessageId::from(format!("msg_{:02}", j.saturating_sub(1)));
    }
    let kinds: &[PartKind] = if two {
        &[PartKind::Text, PartKind::ToolCompleted]
    } else {
        &[PartKind::Text]
    };
    let parts = kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| model::part(session, id, &PartId::from(format!("{id}_p{k}")), *kind, v))
        .collect();
    MessageWithParts { info, parts }
}

/// `m` without its ids: what a copy must keep.
fn body(m: &MessageWithParts) -> serde_json::Value {
    let mut v = serde_json::to_value(m).unwrap_or_default();
    if let Some(info) = v.get_mut("info").and_then(|i| i.as_object_mut()) {
        info.remove("id");
        info.remove("sessionID");
        info.remove("parentID");
    }
    if let Some(parts) = v.get_mut("parts").and_then(|p| p.as_array_mut()) {
        for p in parts {
            if let Some(p) = p.as_object_mut() {
                p.remove("id");
                p.remove("sessionID");
                p.remove("messageID");
            }
        }
    }
    v
}

struct Writer<'a> {
    store: &'a dyn Store,
    tenant: &'a TenantId,
    seq: u64,
}

impl Writer<'_> {
    async fn apply(&mut self, session: &SessionId, events: Vec<SyncEvent>) -> Result<(), String> {
        let batch: Vec<Envelope<SyncEvent>> = events
            .into_iter()
            .map(|e| {
                self.seq += 1;
                Envelope::new(self.tenant.clone(), session.clone(), self.seq, e)
            })
            .collect();
        self.store
            .apply(&batch)
            .await
            .map_err(ctx_err(format!("writing to {session}")))
    }

    async fn put(&mut self, m: &MessageWithParts) -> Result<(), String> {
        let mut events = vec![SyncEvent::MessageUpdated {
            info: m.info.clone(),
        }];
        events.extend(
            m.parts
                .iter()
                .cloned()
                .map(|part| SyncEvent::PartUpdated { part }),
        );
        self.apply(&m.info.session_id.clone(), events).await
    }
}

async fn history(
    store: &dyn Store,
    tenant: &TenantId,
    s: &SessionId,
) -> Result<Vec<MessageWithParts>, String> {
    read_all(store, tenant, s, 1000)
        .await
        .map_err(ctx_err(format!("reading {s}")))
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let store: Arc<dyn Store> = Arc::clone(&b.store);
        let source = SessionId::from("ses_src");
        let mut w = Writer {
            store: store.as_ref(),
            tenant: &tenant,
            seq: 0,
        };
        w.apply(
            &source,
            vec![SyncEvent::SessionUpdated {
                info: model::session(&source, 0),
            }],
        )
        .await?;
        let mut src_model: BTreeMap<MessageId, MessageWithParts> = BTreeMap::new();
        for j in 0..case.messages {
            let id = MessageId::from(format!("msg_{j:02}"));
            let m = message(&source, &id, j, 0, case.two_parts >> (j % 8) & 1 == 1);
            w.put(&m).await?;
            src_model.insert(id, m);
        }
        let point = match &case.point {
            Point::All => ForkPoint::All,
            Point::Through(i) => ForkPoint::Through(MessageId::from(format!("msg_{i:02}"))),
            Point::Before(i) => ForkPoint::Before(MessageId::from(format!("msg_{i:02}"))),
        };
        let cut = match &case.point {
            Point::All => usize::from(case.messages),
            Point::Through(i) => usize::from(*i) + 1,
            Point::Before(i) => usize::from(*i),
        };
        let planned = plan(store.as_ref(), &tenant, &source, &point, model::T0)
            .await
            .map_err(ctx_err("planning the fork"))?;
        let fork = planned.session.id.clone();
        w.apply(&fork, planned.events).await?;

        // The copy.
        let row = store
            .session(&tenant, &fork)
            .await
            .map_err(ctx_err("reading the fork's row"))?
            .ok_or("the fork's session row is missing")?;
        if row.info.parent_id.as_ref() != Some(&source) {
            return Err(format!(
                "the fork's parentID is {:?}, not the source",
                row.info.parent_id
            ));
        }
        let last = cut.checked_sub(1).map(|i| format!("msg_{i:02}"));
        let origin = row.info.extra.get(FORKED_FROM).cloned().unwrap_or_default();
        if origin["sessionID"] != source.as_str() || origin["messageID"].as_str() != last.as_deref()
        {
            return Err(format!(
                "the fork records {origin} as its origin; it is {source} through {last:?}"
            ));
        }
        let copied = history(store.as_ref(), &tenant, &fork).await?;
        let want: Vec<&MessageWithParts> = src_model.values().take(cut).collect();
        if copied.len() != want.len() || copied.iter().zip(&want).any(|(c, s)| body(c) != body(s)) {
            return Err(format!(
                "the fork holds {} messages that differ from the source's first {}",
                copied.len(),
                want.len()
            ));
        }
        for (c, s) in copied.iter().zip(&want) {
            if c.info.id == s.info.id || c.parts.iter().zip(&s.parts).any(|(a, b)| a.id == b.id) {
                return Err(format!(
                    "message {} of the fork kept a source id",
                    s.info.id
                ));
            }
            if let (Some(a), Some(_)) = (c.info.as_assistant(), s.info.as_assistant()) {
                if !copied.iter().any(|u| u.info.id == a.parent_id) {
                    return Err(format!(
                        "the copy of {} answers {}, which is not in the fork",
                        s.info.id, a.parent_id
                    ));
                }
            }
        }
        let mut fork_model: BTreeMap<MessageId, MessageWithParts> =
            copied.into_iter().map(|m| (m.info.id.clone(), m)).collect();

        // The writes.
        for (k, write) in case.writes.iter().enumerate() {
            let (session, model) = if write.to_fork {
                (&fork, &mut fork_model)
            } else {
                (&source, &mut src_model)
            };
            let ids: Vec<MessageId> = model.keys().cloned().collect();
            let target = (!ids.is_empty()).then(|| ids[usize::from(write.at) % ids.len()].clone());
            match (write.what, target) {
                (0, Some(id)) => {
                    let mut m = model[&id].clone();
                    let mut part: Part = m.parts[0].clone();
                    part.body = model::part(
                        session,
                        &id,
                        &part.id,
                        PartKind::Text,
                        100 + u8::try_from(k).unwrap_or(0),
                    )
                    .body;
                    m.parts[0] = part.clone();
                    w.apply(session, vec![SyncEvent::PartUpdated { part }])
                        .await?;
                    model.insert(id, m);
                }
                (1, Some(id)) => {
                    w.apply(
                        session,
                        vec![SyncEvent::MessageRemoved {
                            session_id: session.clone(),
                            message_id: id.clone(),
                        }],
                    )
                    .await?;
                    model.remove(&id);
                }
                _ => {
                    let id = MessageId::from(format!("msg_w{k:02}"));
                    let m = message(session, &id, 0, u8::try_from(k).unwrap_or(0), true);
                    w.put(&m).await?;
                    model.insert(id, m);
                }
            }
        }
        for (name, session, model) in [
            ("source", &source, &src_model),
            ("fork", &fork, &fork_model),
        ] {
            let got = history(store.as_ref(), &tenant, session).await?;
            let want: Vec<MessageWithParts> = model.values().cloned().collect();
            if got != want {
                let shown = |h: &[MessageWithParts]| {
                    h.iter()
                        .map(|m| format!("{}:{}", m.info.id, m.parts.len()))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let differ = got
                    .iter()
                    .zip(&want)
                    .find(|(g, w)| g != w)
                    .map(|(g, _)| g.info.id.to_string())
                    .unwrap_or_default();
                return Err(format!(
                    "after writes {:?}, the {name} reads [{}] where its own writes made [{}] \
                     (first differing message: {differ}): a write to one session changed the other",
                    case.writes,
                    shown(&got),
                    shown(&want)
                ));
            }
        }
        Ok(())
    })
}
