//! Upsert (contract property 1, docs/conformance.md): any sequence of batches of upserts
//! and removes, ids repeating, leaves the store equal to the reference model, checked
//! after every batch.
//!
//! The case is a command sequence run against the backend and the model side by side
//! (a state machine: every batch is a transition, the model decides whether it must be
//! accepted or rejected and what the state is after it). Invalid upserts (a message for
//! a missing session, a part for a missing or removed message, a part naming a message
//! only another session has) are generated on purpose: the store must reject the whole
//! batch with the right error and leave nothing of it behind.
//!
//! Ids repeat across parents on purpose: every session draws its message ids from the
//! same pool, and every message its part ids, so a message id lives in both sessions as
//! two independent messages, and a part upserted under another message of its session
//! moves there (a part id is unique within its session).
//!
//! Each case draws its ids from one family ([`Ids`]): plain ones, or ids at the edges of
//! the id domain (1 byte; 256 bytes equal but for the last byte, in multi-byte
//! characters too), ids that are prefixes of one another and hold SQL `LIKE` wildcards,
//! distinct ids that Unicode normalization or case folding would merge, and ids holding
//! key separators, quotes and hash-tag braces. Every rule the model checks is checked
//! under every family.

use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{read_all, MessageId, PartId, SessionId, Store, SyncEvent, TenantId};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::exercised::Stats;
use crate::harness::{ctx_err, envs, same, same_read, CaseRun, Ctx};
use crate::reference::{sorted, ReferenceStore};
use crate::strategies::model::{self, message_kind, part_kind, MessageKind, PartKind};
use crate::strategies::scaled::Sizes;
use crate::Property;

/// Sessions, and message and part ids, the ids range over.
const SESSIONS: u8 = 2;
const MESSAGES: u8 = 3;
const PARTS: u8 = 3;

/// One event of a batch, over small id pools so ids repeat.
///
/// Fields: `s` session index (0..2), `m` message id index (0..3, the same ids in every
/// session), `p` part id index (0..3, the same ids under every message), `v` version
/// (shows in a field, so an overwrite is visible), `kind` what to build.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `session.updated` of session `s`, version `v`.
    PutSession { s: u8, v: u8 },
    /// `session.deleted` of session `s`.
    DeleteSession { s: u8 },
    /// `message.updated` of message `m` of session `s`.
    PutMessage {
        s: u8,
        m: u8,
        kind: MessageKind,
        v: u8,
    },
    /// `message.removed`.
    RemoveMessage { s: u8, m: u8 },
    /// `message.part.updated` of part `p` under message `m` of session `s` (moving it
    /// when another message of `s` holds it).
    PutPart {
        s: u8,
        m: u8,
        p: u8,
        kind: PartKind,
        v: u8,
    },
    /// `message.part.removed` naming message `m` (nothing when the part is elsewhere).
    RemovePart { s: u8, m: u8, p: u8 },
}

/// One `apply` call: the events get seqs `seq`, `seq + 1`, …
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Seq of the first event; random, so it sometimes goes down.
    pub seq: u16,
    /// The events.
    pub ops: Vec<Op>,
    /// Thousands of rows more, after `ops` (large cases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk: Option<Bulk>,
    /// The op (index modulo the ops) whose envelope names the other session: the batch
    /// must be refused with `InvalidInput` and leave nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misroute: Option<u8>,
}

/// Thousands of rows in one batch: `sessions` more sessions of the tenant, and
/// `messages` open assistant messages, each with an open text part, in session `s`
/// (written first). With `fail`, the batch ends with a part of a missing message, so
/// the whole batch must be rejected and leave nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bulk {
    /// The session the messages go to.
    pub s: u8,
    /// Sessions added to the tenant's listing.
    pub sessions: u16,
    /// Open messages (each with one open part) added to session `s`.
    pub messages: u16,
    /// Whether the batch ends with an event that fails.
    pub fail: bool,
}

impl Bulk {
    /// The events: `s`, the sessions, then every message followed by its part.
    pub fn events(&self, ids: Ids) -> Vec<SyncEvent> {
        let sid = ids.session(self.s);
        let mut out = vec![SyncEvent::SessionUpdated {
            info: model::session(&sid, 0),
        }];
        out.extend((0..self.sessions).map(|i| SyncEvent::SessionUpdated {
            info: model::session(&SessionId::from(format!("ses_bulk_{i:05}")), 1),
        }));
        for i in 0..self.messages {
            let m = MessageId::from(format!("msg_bulk_{i:05}"));
            out.push(SyncEvent::MessageUpdated {
                info: model::message(&sid, &m, MessageKind::OpenAssistant, (i % 200) as u8),
            });
            let p = PartId::from(format!("prt_bulk_{i:05}"));
            out.push(SyncEvent::PartUpdated {
                part: model::part(&sid, &m, &p, PartKind::OpenText, (i % 200) as u8),
            });
        }
        if self.fail {
            out.push(SyncEvent::PartUpdated {
                part: model::part(&sid, &"msg_missing".into(), &ids.part(0), PartKind::Text, 0),
            });
        }
        out
    }
}

impl Batch {
    /// The batch's envelopes in `tenant`, numbered from its `seq`, one of them misrouted
    /// when the batch says so.
    pub fn envelopes(&self, tenant: &TenantId, ids: Ids) -> Vec<forge_core::Envelope<SyncEvent>> {
        let mut envs = envs(tenant, u64::from(self.seq), self.events(ids));
        if let Some(i) = self.misroute.filter(|_| !self.ops.is_empty()) {
            let env = &mut envs[usize::from(i) % self.ops.len()];
            env.session_id = if env.session_id == ids.session(0) {
                ids.session(1)
            } else {
                ids.session(0)
            };
        }
        envs
    }

    /// The batch's events, with ids of family `ids`.
    pub fn events(&self, ids: Ids) -> Vec<SyncEvent> {
        let mut out: Vec<SyncEvent> = self.ops.iter().map(|o| o.event_in(ids)).collect();
        if let Some(b) = &self.bulk {
            out.extend(b.events(ids));
        }
        out
    }
}

/// A case: batches applied in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The batches.
    pub batches: Vec<Batch>,
    /// The family the case's session, message and part ids come from.
    #[serde(default, skip_serializing_if = "Ids::is_plain")]
    pub ids: Ids,
}

/// A family of ids: session `s`, message `m` and part `p` of the pools are spelled by
/// [`Ids::session`], [`Ids::message`] and [`Ids::part`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ids {
    /// `ses_0`, `msg_1`, `prt_2`.
    #[default]
    Plain,
    /// One byte each: the shortest ids there are.
    Shortest,
    /// 256 bytes each (the longest allowed), equal but for the last byte: sessions in
    /// ASCII, messages in 2-byte characters, parts in 4-byte characters.
    Longest,
    /// Each id a prefix of the next, padded with SQL `LIKE` wildcards (`m`, `m_`, `m__`;
    /// `p`, `p%`, `p%%`).
    Prefixes,
    /// Distinct ids that normalization or case folding would merge (`é` and `e` + U+0301;
    /// `Å`, `Å` (U+212B) and `A` + U+030A; `ß`, `ss`, `SS`).
    Unicode,
    /// Ids holding key separators, path characters, quotes and Redis hash-tag braces.
    Separators,
}

impl Ids {
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` lends it
    fn is_plain(&self) -> bool {
        *self == Self::Plain
    }

    /// Session `s` (0 or 1).
    pub fn session(self, s: u8) -> SessionId {
        SessionId::from(self.spell(
            "ses_",
            s,
            ["0", "1", "2"],
            '-',
            ["é", "e\u{301}", "E"],
            ["a:b", "a", "{a}"],
        ))
    }

    /// Message `m` (0..3) of every session.
    pub fn message(self, m: u8) -> MessageId {
        MessageId::from(self.spell(
            "msg_",
            m,
            ["a", "b", "c"],
            'é',
            ["\u{c5}", "\u{212b}", "A\u{30a}"],
            ["x/y", "x", "x\\y"],
        ))
    }

    /// Part `p` (0..3) of every message.
    pub fn part(self, p: u8) -> PartId {
        PartId::from(self.spell(
            "prt_",
            p,
            ["x", "y", "z"],
            '😀',
            ["ß", "ss", "SS"],
            ["'", "\"", "..%2F"],
        ))
    }

    fn spell(
        self,
        plain: &str,
        i: u8,
        shortest: [&str; 3],
        long: char,
        unicode: [&str; 3],
        separators: [&str; 3],
    ) -> String {
        let i = usize::from(i % 3);
        match self {
            Self::Plain => format!("{plain}{i}"),
            Self::Shortest => shortest[i].to_owned(),
            Self::Longest => {
                let mut id: String = std::iter::repeat_n(long, 255 / long.len_utf8()).collect();
                while id.len() < 255 {
                    id.push('_');
                }
                id.push(char::from(b'0' + i as u8));
                id
            }
            Self::Prefixes => {
                let (stem, pad) = match plain {
                    "ses_" => ("s", "_"),
                    "msg_" => ("m", "_"),
                    _ => ("p", "%"),
                };
                format!("{stem}{}", pad.repeat(i))
            }
            Self::Unicode => unicode[i].to_owned(),
            Self::Separators => separators[i].to_owned(),
        }
    }
}

/// Any family; plain ids two times in seven.
pub fn ids() -> impl Strategy<Value = Ids> {
    prop_oneof![
        2 => Just(Ids::Plain),
        1 => Just(Ids::Shortest),
        1 => Just(Ids::Longest),
        1 => Just(Ids::Prefixes),
        1 => Just(Ids::Unicode),
        1 => Just(Ids::Separators),
    ]
}

impl Op {
    /// The sync event this op stands for.
    pub fn event(&self) -> SyncEvent {
        self.event_in(Ids::Plain)
    }

    /// The sync event this op stands for, with ids of family `ids`.
    pub fn event_in(&self, ids: Ids) -> SyncEvent {
        let (sid, mid, pid) = (|s| ids.session(s), |m| ids.message(m), |p| ids.part(p));
        match *self {
            Op::PutSession { s, v } => SyncEvent::SessionUpdated {
                info: model::session(&sid(s), v),
            },
            Op::DeleteSession { s } => SyncEvent::SessionDeleted { session_id: sid(s) },
            Op::PutMessage { s, m, kind, v } => SyncEvent::MessageUpdated {
                info: model::message(&sid(s), &mid(m), kind, v),
            },
            Op::RemoveMessage { s, m } => SyncEvent::MessageRemoved {
                session_id: sid(s),
                message_id: mid(m),
            },
            Op::PutPart { s, m, p, kind, v } => SyncEvent::PartUpdated {
                part: model::part(&sid(s), &mid(m), &pid(p), kind, v),
            },
            Op::RemovePart { s, m, p } => SyncEvent::PartRemoved {
                session_id: sid(s),
                message_id: mid(m),
                part_id: pid(p),
            },
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    let s = || 0..SESSIONS;
    let m = || 0..MESSAGES;
    let p = || 0..PARTS;
    let v = || 0u8..4;
    prop_oneof![
        3 => (s(), v()).prop_map(|(s, v)| Op::PutSession { s, v }),
        1 => s().prop_map(|s| Op::DeleteSession { s }),
        5 => (s(), m(), message_kind(), v()).prop_map(|(s, m, kind, v)| Op::PutMessage { s, m, kind, v }),
        2 => (s(), m()).prop_map(|(s, m)| Op::RemoveMessage { s, m }),
        6 => (s(), m(), p(), part_kind(), v())
            .prop_map(|(s, m, p, kind, v)| Op::PutPart { s, m, p, kind, v }),
        1 => (s(), m(), p()).prop_map(|(s, m, p)| Op::RemovePart { s, m, p }),
    ]
}

/// A coherent batch: (maybe) the session, a message of it, and parts of that message,
/// so state builds up and later removes, overwrites and re-creations hit real rows.
/// Some batches then remove what they just wrote and re-create the message in the same
/// batch: the parts written earlier in the batch must be gone with it.
fn chain() -> impl Strategy<Value = Vec<Op>> {
    (
        (0..SESSIONS, 0..MESSAGES, 0u8..6, 0u8..4),
        (
            message_kind(),
            vec((0..PARTS, part_kind(), 0u8..4), 0..=2),
            0u8..10,
        ),
    )
        .prop_map(|((s, m, start, v), (kind, parts, end))| {
            // start: 0-1 message only, 2-3 session too, 4 remove the message first,
            // 5 delete the session first.
            let mut ops = match start {
                4 => vec![Op::RemoveMessage { s, m }],
                5 => vec![Op::DeleteSession { s }],
                _ => Vec::new(),
            };
            if matches!(start, 2 | 3 | 5) {
                ops.push(Op::PutSession { s, v });
            }
            ops.push(Op::PutMessage { s, m, kind, v });
            ops.extend(
                parts
                    .into_iter()
                    .map(|(p, kind, v)| Op::PutPart { s, m, p, kind, v }),
            );
            // end: 0-2 nothing, 3 remove the message and re-create it, 4 delete the
            // session and re-create it with the message, 5 remove the message and then
            // write a part to it (rejected), 6 delete the session, re-create it and write a
            // part to another message it held before (rejected: the re-created session
            // starts empty, so that message is gone), 7 delete the session after all this
            // (nothing written in the batch may stay), 8 delete the other session, then
            // write one more part to `m` (this session's rows must be untouched), 9 remove
            // another message of the session (the parts just written to `m` stay).
            match end {
                3 => ops.extend([Op::RemoveMessage { s, m }, Op::PutMessage { s, m, kind, v }]),
                4 => ops.extend([
                    Op::DeleteSession { s },
                    Op::PutSession { s, v },
                    Op::PutMessage { s, m, kind, v },
                ]),
                5 => ops.extend([
                    Op::RemoveMessage { s, m },
                    Op::PutPart {
                        s,
                        m,
                        p: 0,
                        kind: PartKind::Text,
                        v,
                    },
                ]),
                6 => ops.extend([
                    Op::DeleteSession { s },
                    Op::PutSession { s, v },
                    Op::PutPart {
                        s,
                        m: (m + 1) % MESSAGES,
                        p: 0,
                        kind: PartKind::Text,
                        v,
                    },
                ]),
                7 => ops.push(Op::DeleteSession { s }),
                8 => ops.extend([
                    Op::DeleteSession {
                        s: (s + 1) % SESSIONS,
                    },
                    Op::PutPart {
                        s,
                        m,
                        p: 1,
                        kind: PartKind::Text,
                        v,
                    },
                ]),
                9 => ops.push(Op::RemoveMessage {
                    s,
                    m: (m + 2) % MESSAGES,
                }),
                _ => {}
            }
            ops
        })
}

/// Cases; with `transactions == false` every batch holds one event. A batch may be
/// empty.
pub fn case(transactions: bool) -> impl Strategy<Value = Case> {
    let ops = prop_oneof![
        3 => vec(op(), 0..=3),
        2 => chain(),
    ];
    let batch = (
        0u16..400,
        ops,
        proptest::option::weighted(0.05, any::<u8>()),
    );
    (vec(batch, 1..20), ids()).prop_map(move |(batches, ids)| Case {
        batches: batches
            .into_iter()
            .flat_map(|(seq, ops, misroute)| split(transactions, seq, ops, misroute))
            .collect(),
        ids,
    })
}

fn split(transactions: bool, seq: u16, ops: Vec<Op>, misroute: Option<u8>) -> Vec<Batch> {
    if transactions {
        vec![Batch {
            seq,
            ops,
            bulk: None,
            misroute,
        }]
    } else {
        let wrong = misroute.map(|i| usize::from(i) % ops.len().max(1));
        ops.into_iter()
            .enumerate()
            .map(|(k, op)| Batch {
                seq,
                ops: vec![op],
                bulk: None,
                misroute: (wrong == Some(k)).then_some(0),
            })
            .collect()
    }
}

/// Large cases: a batch of thousands of rows ending in a failing event (nothing of it
/// may stay), the same batch succeeding (listings of sessions, open messages and open
/// parts past 1,000, a history past 1,000), then a few ordinary batches over it. Bulk
/// batches need transactions.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (
        0..SESSIONS,
        sizes.listing(),
        sizes.listing(),
        vec((0u16..400, vec(op(), 1..=3)), 1..4),
        ids(),
    )
        .prop_map(|(s, sessions, messages, tail, ids)| {
            let bulk = |fail| Batch {
                seq: 1,
                ops: Vec::new(),
                bulk: Some(Bulk {
                    s,
                    sessions,
                    messages,
                    fail,
                }),
                misroute: None,
            };
            let mut batches = vec![bulk(true), bulk(false)];
            batches.extend(tail.into_iter().map(|(seq, ops)| Batch {
                seq,
                ops,
                bulk: None,
                misroute: None,
            }));
            Case { batches, ids }
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let transactions = ctx.caps.store.transactions;
    let test = |c: &Case| check(ctx, c);
    let run = if transactions {
        let sizes = Sizes::new(ctx.config.scale);
        crate::harness::run_scaled(ctx, Property::Upsert, case(true), large_case(sizes), test)
    } else {
        crate::harness::run_cases(ctx, Property::Upsert, case(false), test)
    };
    if transactions {
        run
    } else {
        run.note(
            "the store declares transactions = false: batches of one event only, atomicity \
             of multi-event batches not checked",
        )
    }
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let mut model = ReferenceStore::new();
        for (n, batch) in case.batches.iter().enumerate() {
            let envs = batch.envelopes(&tenant, case.ids);
            let expected = model.apply(&envs);
            let actual = b.store.apply(&envs).await;
            let at = match &batch.bulk {
                None => format!("batch #{n} {:?}", batch.ops),
                Some(bulk) => format!(
                    "batch #{n} of {} events {:?} {bulk:?}",
                    envs.len(),
                    batch.ops
                ),
            };
            match (expected, actual) {
                (Ok(()), Err(e)) => {
                    return Err(format!("{at}: rejected a valid batch: {} {e}", e.kind()))
                }
                (Err(r), Ok(())) => {
                    return Err(format!(
                        "{at}: accepted a batch the contract rejects ({r:?})"
                    ))
                }
                (Err(r), Err(e)) if !r.accepts(&e) => {
                    return Err(format!(
                        "{at}: rejected with {} ({e}); the contract says {r:?}",
                        e.kind()
                    ))
                }
                _ => {}
            }
            compare(b.store.as_ref(), &tenant, case.ids, &model, &ctx.stats)
                .await
                .map_err(|e| format!("after {at} ({:?} ids): {e}", case.ids))?;
        }
        b.cleanup().await;
        Ok(())
    })
}

/// Everything the store shows of `tenant` equals the model (the pools' ids read from
/// family `ids`).
pub(crate) async fn compare(
    store: &dyn Store,
    tenant: &TenantId,
    ids: Ids,
    model: &ReferenceStore,
    stats: &Stats,
) -> Result<(), String> {
    let sessions = store
        .sessions(tenant)
        .await
        .map_err(ctx_err("sessions()"))?;
    let want = model.sessions(tenant);
    if want.len() != sessions.len() {
        let ids = |v: &[forge_core::SessionState]| -> Vec<String> {
            v.iter().map(|s| s.info.id.to_string()).collect()
        };
        let (w, g) = (ids(&want), ids(&sessions));
        return Err(format!(
            "sessions() lists {} sessions, the tenant has {}; missing: {:?}, extra: {:?}",
            g.len(),
            w.len(),
            w.iter()
                .filter(|i| !g.contains(i))
                .take(5)
                .collect::<Vec<_>>(),
            g.iter()
                .filter(|i| !w.contains(i))
                .take(5)
                .collect::<Vec<_>>()
        ));
    }
    same("sessions()", &want, &sessions)?;
    for s in 0..SESSIONS {
        let id = ids.session(s);
        let want = model.session(tenant, &id);
        same_read(
            &format!("session({id})"),
            &want,
            "session()",
            store.session(tenant, &id),
        )
        .await?;
        let history = read_all(store, tenant, &id, MAX_PAGE_LIMIT)
            .await
            .map_err(ctx_err("messages()"))?;
        stats.history(history.len());
        let want = model.history(tenant, &id);
        if want.len() != history.len() {
            return Err(format!(
                "messages({id}): paging yields {} messages, the session has {}",
                history.len(),
                want.len()
            ));
        }
        same(&format!("messages({id})"), &want, &history)?;
        for m in 0..MESSAGES {
            let mid = ids.message(m);
            let what = format!("message({id}, {mid})");
            let want = model.message(tenant, &id, &mid);
            same_read(&what, &want, "message()", store.message(tenant, &id, &mid)).await?;
        }
        let open = store
            .open_items(tenant, Some(&id))
            .await
            .map_err(ctx_err("open_items(session)"))?;
        same_open(
            &format!("open_items({id})"),
            model.open_items(tenant, Some(&id)),
            open,
        )?;
    }
    let open = store
        .open_items(tenant, None)
        .await
        .map_err(ctx_err("open_items(tenant)"))?;
    same_open("open_items(tenant)", model.open_items(tenant, None), open)
}

fn same_open(
    what: &str,
    expected: forge_core::OpenItems,
    actual: forge_core::OpenItems,
) -> Result<(), String> {
    let (e, a) = (sorted(expected), sorted(actual));
    if (e.messages.len(), e.parts.len()) != (a.messages.len(), a.parts.len()) {
        return Err(format!(
            "{what}: {} open messages and {} open parts listed, {} and {} are open",
            a.messages.len(),
            a.parts.len(),
            e.messages.len(),
            e.parts.len()
        ));
    }
    same(&format!("{what}.messages"), &e.messages, &a.messages)?;
    same(&format!("{what}.parts"), &e.parts, &a.parts)
}
