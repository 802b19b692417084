//! Large values stored once (contract property 12, docs/conformance.md), for a backend
//! that declares [`Capabilities::blobs`](forge_core::Capabilities): its
//! [`Store::put_blobs`] family, driven through [`Blobbed`] as the facade drives it.
//!
//! A case writes file and tool parts whose values come from a small pool (large ones,
//! a small one, and one that looks like a reference) into a few sessions of tenant A,
//! and one of the large values into tenant B. Then:
//!
//! - every part reads back whole, through [`Store::message`] and [`Store::messages`];
//! - the rows as the backend holds them carry references, and tenant A's blobs are
//!   exactly its distinct large values (and the look-alike), each once, with its length;
//! - tenant B sees only its own blob; asking B for A's ids finds nothing;
//! - a second put of present, fresh blobs writes nothing; a delete whose cut-off is
//!   before a blob's `touched` time deletes nothing;
//! - after some sessions of A are deleted, a sweep removes exactly the blobs no
//!   remaining row references, keeps the rest, and the remaining parts still read back
//!   whole; tenant B's blob is untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forge_core::blob::{BlobId, BlobOptions, BlobValue, Blobbed, BLOB_PREFIX};
use forge_core::model::{PartBody, ToolState};
use forge_core::{
    Envelope, MessageId, MessageWithParts, Part, PartId, SessionId, Store, SyncEvent, TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// The threshold of every case: small, so values stay cheap.
const THRESHOLD: usize = 64;

/// One part of a case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartCase {
    /// The session, 0–2.
    pub session: u8,
    /// A file part (else a completed tool).
    pub file: bool,
    /// The value: an index into the pool (0–4).
    pub value: u8,
}

/// A case: the parts, and which sessions are deleted before the sweep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The parts, in order.
    pub parts: Vec<PartCase>,
    /// Sessions deleted before the sweep.
    pub deleted: Vec<u8>,
}

/// Any case: 1–10 parts over three sessions.
pub fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (0u8..3, any::<bool>(), 0u8..5).prop_map(|(session, file, value)| PartCase {
                session,
                file,
                value,
            }),
            1..=10,
        ),
        prop::collection::btree_set(0u8..3, 0..=2),
    )
        .prop_map(|(parts, deleted)| Case {
            parts,
            deleted: deleted.into_iter().collect(),
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Blobs, case(), |c| check(ctx, c))
}

/// Value `i` of the pool: 0–2 large (1, 2 and 3 times the threshold and more), 3 small,
/// 4 a small value that looks like a reference.
fn value(i: u8) -> String {
    match i {
        0..=2 => format!(
            "data:text/plain;base64,{}",
            "QUJD".repeat(THRESHOLD * (usize::from(i) + 1) / 4 + 1)
        ),
        3 => "small".into(),
        _ => BlobId::of("something else").reference(),
    }
}

/// Whether value `i` is stored once.
fn moves(i: u8) -> bool {
    i != 3
}

fn sid(i: u8) -> SessionId {
    SessionId::from(format!("ses_{i}"))
}

fn part_of(k: usize, p: &PartCase) -> Part {
    let session = sid(p.session);
    let message = MessageId::from("msg_1");
    let id = PartId::from(format!("prt_{k:02}"));
    let kind = if p.file {
        PartKind::File
    } else {
        PartKind::ToolCompleted
    };
    let mut part = model::part(&session, &message, &id, kind, 0);
    let v = value(p.value);
    match &mut part.body {
        PartBody::File(f) => f.url = v,
        PartBody::Tool(t) => {
            if let ToolState::Completed(c) = &mut t.state {
                c.output = v;
            }
        }
        _ => {}
    }
    part
}

/// The value a part holds (its url or output).
fn held(p: &Part) -> Option<&str> {
    match &p.body {
        PartBody::File(f) => Some(&f.url),
        PartBody::Tool(t) => match &t.state {
            ToolState::Completed(c) => Some(&c.output),
            _ => None,
        },
        _ => None,
    }
}

async fn write(
    store: &dyn Store,
    tenant: &TenantId,
    sessions: &[u8],
    parts: &[Part],
) -> Result<(), String> {
    let mut batch = Vec::new();
    let mut seq = BTreeMap::<SessionId, u64>::new();
    let mut env = |session: &SessionId, event| {
        let n = seq.entry(session.clone()).or_insert(0);
        *n += 1;
        Envelope::new(tenant.clone(), session.clone(), *n, event)
    };
    for s in sessions {
        let id = sid(*s);
        batch.push(env(
            &id,
            SyncEvent::SessionUpdated {
                info: model::session(&id, 0),
            },
        ));
        batch.push(env(
            &id,
            SyncEvent::MessageUpdated {
                info: model::message(&id, &MessageId::from("msg_1"), MessageKind::Assistant, 0),
            },
        ));
    }
    for p in parts {
        batch.push(env(
            &p.session_id.clone(),
            SyncEvent::PartUpdated { part: p.clone() },
        ));
    }
    store
        .apply(&batch)
        .await
        .map_err(ctx_err("writing the parts"))
}

/// Every part of `sessions` as read through `store`, by id.
async fn read(
    store: &dyn Store,
    tenant: &TenantId,
    sessions: &BTreeSet<u8>,
) -> Result<BTreeMap<PartId, Part>, String> {
    let mut out = BTreeMap::new();
    for s in sessions {
        let page = store
            .messages(tenant, &sid(*s), None, 100)
            .await
            .map_err(ctx_err("reading a page"))?;
        let one = store
            .message(tenant, &sid(*s), &MessageId::from("msg_1"))
            .await
            .map_err(ctx_err("reading a message"))?;
        let from_page: Vec<&MessageWithParts> = page.messages.iter().collect();
        if from_page.len() != 1 || one.as_ref() != from_page.first().copied() {
            return Err(format!(
                "session {}: the page and the message read disagree",
                sid(*s)
            ));
        }
        for p in &page.messages[0].parts {
            out.insert(p.id.clone(), p.clone());
        }
    }
    Ok(out)
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let (a, other) = (b.tenant(), b.tenant());
        let raw = Arc::clone(&b.store);
        let options = BlobOptions {
            threshold: THRESHOLD,
            grace: Duration::ZERO,
        };
        let store: Arc<dyn Store> = Arc::new(Blobbed::new(
            Arc::clone(&raw),
            Arc::new(forge_core::blob::InBackend(Arc::clone(&raw))),
            options,
        ));
        let parts: Vec<Part> = case
            .parts
            .iter()
            .enumerate()
            .map(|(k, p)| part_of(k, p))
            .collect();
        let sessions: BTreeSet<u8> = case.parts.iter().map(|p| p.session).collect();
        let all: Vec<u8> = sessions.iter().copied().collect();
        write(store.as_ref(), &a, &all, &parts).await?;
        // Tenant B: value 0 once.
        let b_part = part_of(
            99,
            &PartCase {
                session: 0,
                file: true,
                value: 0,
            },
        );
        write(store.as_ref(), &other, &[0], std::slice::from_ref(&b_part)).await?;

        // Whole values read back.
        let got = read(store.as_ref(), &a, &sessions).await?;
        for p in &parts {
            match got.get(&p.id) {
                Some(r) if r == p => {}
                Some(r) => {
                    return Err(format!(
                        "part {} reads back as {:?}, written as {:?}",
                        p.id,
                        held(r).map(|v| v.chars().take(60).collect::<String>()),
                        held(p).map(|v| v.chars().take(60).collect::<String>())
                    ))
                }
                None => return Err(format!("part {} is missing", p.id)),
            }
        }
        // As stored: references, and each distinct large value once.
        let stored = read(raw.as_ref(), &a, &sessions).await?;
        for (k, pc) in case.parts.iter().enumerate() {
            let id = PartId::from(format!("prt_{k:02}"));
            let v = stored.get(&id).and_then(held).unwrap_or_default();
            if moves(pc.value) != v.starts_with(BLOB_PREFIX) || (moves(pc.value) && v.len() > 100) {
                return Err(format!(
                    "part {id} is stored as {:?}: value {} should {}be a reference",
                    v.chars().take(60).collect::<String>(),
                    pc.value,
                    if moves(pc.value) { "" } else { "not " }
                ));
            }
        }
        let want: BTreeMap<BlobId, u64> = case
            .parts
            .iter()
            .filter(|p| moves(p.value))
            .map(|p| {
                let v = value(p.value);
                (BlobId::of(&v), v.len() as u64)
            })
            .collect();
        let listed = |t: TenantId| {
            let raw = Arc::clone(&raw);
            async move {
                raw.blob_list(&t)
                    .await
                    .map_err(ctx_err("listing blobs"))
                    .map(|l| {
                        l.into_iter()
                            .map(|e| (e.id, e.bytes))
                            .collect::<BTreeMap<_, _>>()
                    })
            }
        };
        let have = listed(a.clone()).await?;
        if have != want {
            return Err(format!(
                "tenant A's blobs are {have:?}; its distinct large values are {want:?}"
            ));
        }
        let b_want: BTreeMap<BlobId, u64> = [(BlobId::of(&value(0)), value(0).len() as u64)].into();
        if listed(other.clone()).await? != b_want {
            return Err("tenant B's blobs are not exactly its one value".into());
        }
        let only_a: Vec<BlobId> = want
            .keys()
            .filter(|id| !b_want.contains_key(*id))
            .cloned()
            .collect();
        let seen = raw
            .blobs(&other, &only_a)
            .await
            .map_err(ctx_err("reading blobs of another tenant"))?;
        if seen.iter().any(Option::is_some) {
            return Err("tenant B reads a blob only tenant A stored".into());
        }
        // Present and fresh: nothing written. Cut-off before `touched`: nothing deleted.
        let again: Vec<BlobValue> = want
            .keys()
            .map(|id| {
                let v = (0..5)
                    .map(value)
                    .find(|v| BlobId::of(v) == *id)
                    .unwrap_or_default();
                BlobValue {
                    id: id.clone(),
                    value: Arc::from(v),
                }
            })
            .collect();
        let wrote = raw
            .put_blobs(&a, &again, i64::MAX / 2, i64::MIN)
            .await
            .map_err(ctx_err("putting present blobs"))?;
        if wrote != 0 {
            return Err(format!("a put of present, fresh blobs wrote {wrote}"));
        }
        let ids: Vec<BlobId> = want.keys().cloned().collect();
        let deleted = raw
            .delete_blobs(&a, &ids, 0)
            .await
            .map_err(ctx_err("deleting untouched-since-0 blobs"))?;
        if deleted != 0 {
            return Err(format!(
                "a delete with a cut-off of 0 deleted {deleted} blobs touched later"
            ));
        }

        // Delete sessions, sweep, check.
        let gone: BTreeSet<u8> = case
            .deleted
            .iter()
            .copied()
            .filter(|s| sessions.contains(s))
            .collect();
        for s in &gone {
            let env = Envelope::new(
                a.clone(),
                sid(*s),
                100,
                SyncEvent::SessionDeleted {
                    session_id: sid(*s),
                },
            );
            store
                .apply(&[env])
                .await
                .map_err(ctx_err("deleting a session"))?;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sweep = store.sweep_blobs(&a).await.map_err(ctx_err("sweeping"))?;
        let kept: BTreeSet<u8> = sessions.difference(&gone).copied().collect();
        let still: BTreeMap<BlobId, u64> = case
            .parts
            .iter()
            .filter(|p| moves(p.value) && kept.contains(&p.session))
            .map(|p| {
                let v = value(p.value);
                (BlobId::of(&v), v.len() as u64)
            })
            .collect();
        let have = listed(a.clone()).await?;
        if have != still {
            return Err(format!(
                "after deleting sessions {gone:?} and a sweep ({sweep:?}), tenant A's blobs are \
                 {have:?}; the remaining rows reference {still:?}"
            ));
        }
        let expected_deleted = (want.len() - still.len()) as u64;
        if sweep.deleted != expected_deleted {
            return Err(format!(
                "the sweep reports {} deleted; {expected_deleted} were",
                sweep.deleted
            ));
        }
        let got = read(store.as_ref(), &a, &kept).await?;
        for (k, pc) in case.parts.iter().enumerate() {
            if kept.contains(&pc.session) && got.get(&parts[k].id) != Some(&parts[k]) {
                return Err(format!(
                    "after the sweep part {} no longer reads back whole",
                    parts[k].id
                ));
            }
        }
        if listed(other.clone()).await? != b_want {
            return Err("the sweep of tenant A changed tenant B's blobs".into());
        }
        Ok(())
    })
}
