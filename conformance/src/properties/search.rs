//! Search (contract property 15, docs/conformance.md): a search finds exactly the
//! parts whose text holds every word asked for, as the rows are now, in its tenant only,
//! best first ([`forge_core::search`] states the rule).
//!
//! A case is a list of writes over three sessions of one tenant and one session of a
//! second tenant, each part's text drawn from eight words (in either case, between
//! separators): messages put with text, reasoning, tool (input and output, or error)
//! and step parts; parts overwritten with other words, moved to another message,
//! removed; messages removed; sessions deleted. Then queries of one or two words (maybe
//! limited to one session, with a limit of 1–6). For each, against the rows read back
//! ([`forge_core::search::matches`] on every part):
//!
//! - every hit is a part that matches, named by its session, message and part, with its
//!   type, and a snippet highlighting a word asked for; no hit twice;
//! - as many hits as match, up to the limit; scores never rise down the list;
//! - with more matches than the limit, the hits are the best: none scores below a match
//!   left out (compared with the same query without a limit);
//! - the second tenant's parts are never found in the first, nor the first's in the
//!   second;
//! - a query without words fails as invalid input.
//!
//! An index left behind by an overwrite, a removal or a deleted session shows as a hit
//! that does not match or does not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use forge_core::model::{JsonMap, PartBody, ToolState};
use forge_core::search::{matches, SearchHit, SearchKind, SearchQuery, MAX_SEARCH_LIMIT};
use forge_core::{
    read_all, Envelope, ErrorKind, MessageId, Part, PartId, SessionId, Store, SyncEvent, TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// The words texts are made of: none is a stop word in any language a backend may use,
/// and none appears in the builders' other fields.
const VOCABULARY: [&str; 8] = [
    "amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor",
];
/// What goes between words: each a separator for every backend's tokenizer.
const SEPARATORS: [&str; 6] = [" ", "\n", ", ", " (", ") ", "; "];

/// One write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// 0–1: put a message; 2: overwrite a part; 3: move a part; 4: remove a part;
    /// 5: remove a message; 6: delete a session; 7: put a message in the second tenant.
    pub what: u8,
    /// Which session (of three).
    pub session: u8,
    /// Which message or part (modulo what the session holds).
    pub at: u8,
    /// The part's kind: 0 text, 1 reasoning, 2 tool completed, 3 tool error, 4 tool
    /// running, 5 step start (no text).
    pub kind: u8,
    /// The words: a vocabulary index, capitalized from 8 on.
    pub words: Vec<u8>,
    /// The separator (index into the list).
    pub sep: u8,
}

/// One query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Query {
    /// Vocabulary indexes (capitalized from 8 on).
    pub words: Vec<u8>,
    /// Limited to this session (of three).
    pub session: Option<u8>,
    /// At most this many hits.
    pub limit: u8,
}

/// A case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The writes.
    pub ops: Vec<Op>,
    /// The queries.
    pub queries: Vec<Query>,
}

/// Any case.
pub fn case() -> impl Strategy<Value = Case> {
    let op = (
        0u8..8,
        0u8..3,
        any::<u8>(),
        0u8..6,
        prop::collection::vec(0u8..16, 0..=6),
        0u8..6,
    )
        .prop_map(|(what, session, at, kind, words, sep)| Op {
            what,
            session,
            at,
            kind,
            words,
            sep,
        });
    let query = (
        prop::collection::vec(0u8..16, 1..=2),
        prop::option::of(0u8..3),
        1u8..=6,
    )
        .prop_map(|(words, session, limit)| Query {
            words,
            session,
            limit,
        });
    (
        prop::collection::vec(op, 1..=16),
        prop::collection::vec(query, 1..=4),
    )
        .prop_map(|(ops, queries)| Case { ops, queries })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Search, case(), |c| check(ctx, c))
}

fn word(i: u8) -> String {
    let w = VOCABULARY[usize::from(i % 8)];
    if i >= 8 {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect())
            .unwrap_or_default()
    } else {
        w.to_owned()
    }
}

fn text(words: &[u8], sep: u8) -> String {
    let sep = SEPARATORS[usize::from(sep) % SEPARATORS.len()];
    words.iter().map(|&i| word(i)).collect::<Vec<_>>().join(sep)
}

/// A part of `kind` holding `words`.
fn part(s: &SessionId, m: &MessageId, id: &PartId, op: &Op) -> Part {
    let kinds = [
        PartKind::Text,
        PartKind::Reasoning,
        PartKind::ToolCompleted,
        PartKind::ToolError,
        PartKind::ToolRunning,
        PartKind::StepStart,
    ];
    let kind = kinds[usize::from(op.kind) % kinds.len()];
    let mut part = model::part(s, m, id, kind, 0);
    let half = op.words.len() / 2;
    let all = text(&op.words, op.sep);
    match &mut part.body {
        PartBody::Text(t) => t.text = all,
        PartBody::Reasoning(r) => r.text = all,
        PartBody::Tool(t) => {
            t.tool = "shell".into();
            let input = json!({"command": text(&op.words[..half], op.sep), "n": 3});
            match &mut t.state {
                ToolState::Completed(c) => {
                    c.input = input;
                    c.output = text(&op.words[half..], op.sep);
                }
                ToolState::Error(e) => {
                    e.input = input;
                    e.error = text(&op.words[half..], op.sep);
                }
                ToolState::Running(r) => {
                    r.input = input;
                    r.title = None;
                }
                ToolState::Pending(p) => {
                    p.input = input;
                    p.raw = String::new();
                    p.extra = JsonMap::new();
                }
            }
        }
        _ => {}
    }
    part
}

struct Writer<'a> {
    store: &'a dyn Store,
    seq: BTreeMap<(TenantId, SessionId), u64>,
}

impl Writer<'_> {
    async fn apply(
        &mut self,
        tenant: &TenantId,
        session: &SessionId,
        events: Vec<SyncEvent>,
    ) -> Result<(), String> {
        let seq = self
            .seq
            .entry((tenant.clone(), session.clone()))
            .or_insert(0);
        let batch: Vec<Envelope<SyncEvent>> = events
            .into_iter()
            .map(|e| {
                *seq += 1;
                Envelope::new(tenant.clone(), session.clone(), *seq, e)
            })
            .collect();
        self.store
            .apply(&batch)
            .await
            .map_err(ctx_err(format!("writing to {session}")))
    }

    /// Puts a new message (1–2 parts) into `session`, creating the session if absent.
    async fn put(
        &mut self,
        tenant: &TenantId,
        session: &SessionId,
        k: usize,
        op: &Op,
    ) -> Result<(), String> {
        let mut events = Vec::new();
        let exists = self
            .store
            .session(tenant, session)
            .await
            .map_err(ctx_err("reading a session"))?
            .is_some();
        if !exists {
            events.push(SyncEvent::SessionUpdated {
                info: model::session(session, 0),
            });
        }
        let id = MessageId::from(format!("msg_{k:02}"));
        let kind = if k.is_multiple_of(2) {
            MessageKind::User
        } else {
            MessageKind::Assistant
        };
        events.push(SyncEvent::MessageUpdated {
            info: model::message(session, &id, kind, 0),
        });
        for p in 0..=usize::from(op.at % 2) {
            let mut op = op.clone();
            if p == 1 {
                op.words.reverse();
                op.kind = op.kind.wrapping_add(1);
            }
            let pid = PartId::from(format!("prt_{k:02}_{p}"));
            events.push(SyncEvent::PartUpdated {
                part: part(session, &id, &pid, &op),
            });
        }
        self.apply(tenant, session, events).await
    }
}

/// Every part of `tenant` as read back, by (session, part).
async fn rows(
    store: &dyn Store,
    tenant: &TenantId,
) -> Result<BTreeMap<(SessionId, PartId), Part>, String> {
    let mut out = BTreeMap::new();
    let sessions = store
        .sessions(tenant)
        .await
        .map_err(ctx_err("listing sessions"))?;
    for s in sessions {
        for m in read_all(store, tenant, &s.info.id, 1000)
            .await
            .map_err(ctx_err(format!("reading {}", s.info.id)))?
        {
            for p in m.parts {
                out.insert((p.session_id.clone(), p.id.clone()), p);
            }
        }
    }
    Ok(out)
}

/// Checks one answer against the rows: see the module docs.
fn judge(
    who: &str,
    query: &SearchQuery,
    words: &[String],
    hits: &[SearchHit],
    parts: &BTreeMap<(SessionId, PartId), Part>,
) -> Result<BTreeSet<(SessionId, PartId)>, String> {
    let want: BTreeSet<(SessionId, PartId)> = parts
        .iter()
        .filter(|(_, p)| query.session.as_ref().is_none_or(|s| &p.session_id == s))
        .filter(|(_, p)| matches(p, words))
        .map(|(k, _)| k.clone())
        .collect();
    let mut seen = BTreeSet::new();
    for h in hits {
        let key = (h.session_id.clone(), h.part_id.clone());
        let Some(p) = parts.get(&key) else {
            return Err(format!(
                "{who}: search {:?} found part {} of session {}, which the {} does not hold",
                query.text, h.part_id, h.session_id, "tenant"
            ));
        };
        if !want.contains(&key) {
            return Err(format!(
                "{who}: search {:?} found part {} ({:?}), which does not hold every word \
                 (or is outside session {:?})",
                query.text,
                h.part_id,
                forge_core::search::document(p),
                query.session
            ));
        }
        if h.message_id != p.message_id || h.kind != p.kind() {
            return Err(format!(
                "{who}: hit {} names message {} and type {}; the part is in {} and a {}",
                h.part_id,
                h.message_id,
                h.kind,
                p.message_id,
                p.kind()
            ));
        }
        let marked = h.highlights.iter().any(|[a, b]| {
            h.snippet
                .get(*a..*b)
                .is_some_and(|w| words.contains(&w.to_lowercase()))
        });
        if !marked {
            return Err(format!(
                "{who}: the snippet {:?} of {} marks no word of {:?} ({:?})",
                h.snippet, h.part_id, query.text, h.highlights
            ));
        }
        if !seen.insert(key) {
            return Err(format!("{who}: part {} found twice", h.part_id));
        }
    }
    if hits.windows(2).any(|w| w[1].score > w[0].score) {
        return Err(format!(
            "{who}: scores rise down the list: {:?}",
            hits.iter().map(|h| h.score).collect::<Vec<_>>()
        ));
    }
    let expected = want.len().min(query.limit());
    if hits.len() != expected {
        return Err(format!(
            "{who}: search {:?} (session {:?}, limit {}) found {} parts; {} match: {:?}",
            query.text,
            query.session,
            query.limit(),
            hits.len(),
            want.len(),
            want.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>()
        ));
    }
    Ok(want)
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let (tenant, other) = (b.tenant(), b.tenant());
        let store: Arc<dyn Store> = Arc::clone(&b.store);
        let sessions: Vec<SessionId> = (0..3)
            .map(|i| SessionId::from(format!("ses_q{i}")))
            .collect();
        let mut w = Writer {
            store: store.as_ref(),
            seq: BTreeMap::new(),
        };
        for (k, op) in case.ops.iter().enumerate() {
            let s = &sessions[usize::from(op.session) % 3];
            let held: Vec<Part> = rows(store.as_ref(), &tenant)
                .await?
                .into_values()
                .filter(|p| &p.session_id == s)
                .collect();
            let target = (!held.is_empty()).then(|| &held[usize::from(op.at) % held.len()]);
            match (op.what, target) {
                (2, Some(t)) => {
                    let p = part(s, &t.message_id, &t.id, op);
                    w.apply(&tenant, s, vec![SyncEvent::PartUpdated { part: p }])
                        .await?;
                }
                (3, Some(t)) => {
                    let messages: BTreeSet<&MessageId> =
                        held.iter().map(|p| &p.message_id).collect();
                    if let Some(to) = messages.into_iter().find(|m| **m != t.message_id) {
                        let mut p = t.clone();
                        p.message_id = to.clone();
                        w.apply(&tenant, s, vec![SyncEvent::PartUpdated { part: p }])
                            .await?;
                    }
                }
                (4, Some(t)) => {
                    w.apply(
                        &tenant,
                        s,
                        vec![SyncEvent::PartRemoved {
                            session_id: s.clone(),
                            message_id: t.message_id.clone(),
                            part_id: t.id.clone(),
                        }],
                    )
                    .await?;
                }
                (5, Some(t)) => {
                    w.apply(
                        &tenant,
                        s,
                        vec![SyncEvent::MessageRemoved {
                            session_id: s.clone(),
                            message_id: t.message_id.clone(),
                        }],
                    )
                    .await?;
                }
                (6, _) => {
                    let exists = store
                        .session(&tenant, s)
                        .await
                        .map_err(ctx_err("reading a session"))?
                        .is_some();
                    if exists {
                        w.apply(
                            &tenant,
                            s,
                            vec![SyncEvent::SessionDeleted {
                                session_id: s.clone(),
                            }],
                        )
                        .await?;
                    }
                }
                (7, _) => {
                    w.put(&other, &sessions[0], k, op).await?;
                }
                _ => w.put(&tenant, s, k, op).await?,
            }
        }

        let mine = rows(store.as_ref(), &tenant).await?;
        let theirs = rows(store.as_ref(), &other).await?;
        for q in &case.queries {
            let mut query = SearchQuery::new(text(&q.words, 0));
            query.limit = usize::from(q.limit);
            query.session = q.session.map(|i| sessions[usize::from(i)].clone());
            let words = query
                .words()
                .map_err(|e| format!("the case's query {:?}: {e}", query.text))?;
            let hits = store
                .search(&tenant, &query)
                .await
                .map_err(ctx_err(format!("searching {:?}", query.text)))?;
            let want = judge("tenant", &query, &words, &hits, &mine)?;
            if want.len() > hits.len() {
                let mut all = query.clone();
                all.limit = MAX_SEARCH_LIMIT;
                let every = store
                    .search(&tenant, &all)
                    .await
                    .map_err(ctx_err(format!("searching {:?} unlimited", query.text)))?;
                judge("tenant, unlimited", &all, &words, &every, &mine)?;
                let returned: BTreeSet<&PartId> = hits.iter().map(|h| &h.part_id).collect();
                let floor = hits.iter().map(|h| h.score).fold(f64::INFINITY, f64::min);
                if let Some(better) = every.iter().find(|h| {
                    !returned.contains(&h.part_id) && h.score > floor + 1e-9 * floor.abs().max(1.0)
                }) {
                    return Err(format!(
                        "search {:?} with limit {} left out {} (score {}) but returned one \
                         scoring {floor}",
                        query.text,
                        query.limit(),
                        better.part_id,
                        better.score
                    ));
                }
            }
            let mut elsewhere = query.clone();
            elsewhere.session = None;
            let hits = store
                .search(&other, &elsewhere)
                .await
                .map_err(ctx_err(format!(
                    "searching {:?} in the second tenant",
                    query.text
                )))?;
            judge("second tenant", &elsewhere, &words, &hits, &theirs)?;
        }
        match store.search(&tenant, &SearchQuery::new(" -- ")).await {
            Err(e) if e.kind() == ErrorKind::InvalidInput => Ok(()),
            Err(e) => Err(format!(
                "a query without words failed as {:?}, not invalid input: {e}",
                e.kind()
            )),
            Ok(h) => Err(format!("a query without words found {} parts", h.len())),
        }
    })
}

/// Whether the property applies: a store whose search was turned off does not search.
pub(crate) fn applies(kind: SearchKind) -> bool {
    kind != SearchKind::Off
}
