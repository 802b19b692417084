//! The differential test, shared by both dialects: random batches of upserts and
//! removals (ids repeating, parents missing, sessions deleted and recreated, events in
//! the wrong envelope) applied to the backend and to `MemoryStore`; every batch must end
//! the same way (same error kind and message) and every read must agree.

use forge_core::{Envelope, MemoryStore, Store, SyncEvent};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{
    assert_same_reads, env, outcome, put_message, put_part, session, MESSAGES, PARTS, SESSIONS,
    TENANTS,
};

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    PutSession,
    DeleteSession,
    PutMessage,
    RemoveMessage,
    PutPart,
    RemovePart,
}

#[derive(Clone, Debug)]
pub struct Ev {
    kind: Kind,
    tenant: usize,
    session: usize,
    message: usize,
    part: usize,
    variant: u8,
    seq: u64,
    /// Carry the event in an envelope of another session (must fail).
    mismatch: bool,
    /// Upsert the session (and message) first, so that a message or part upsert
    /// usually finds its parent; without it, it fails when the parent is missing.
    ensure_parents: bool,
    /// Upsert the same message or part again with this variant (a start boundary
    /// followed by its end, e.g. an open part closed); after a remove, recreate the
    /// removed message (which must come back without its old parts).
    then: Option<u8>,
}

/// An index into a pool, index `i` drawn with weight `weights[i]`: the first ids of a
/// pool come up more often, so rows are overwritten, removed and recreated within a
/// few batches.
fn weighted_index(weights: &[usize]) -> impl Strategy<Value = usize> {
    let choices: Vec<usize> = weights
        .iter()
        .enumerate()
        .flat_map(|(i, &w)| std::iter::repeat_n(i, w))
        .collect();
    prop::sample::select(choices)
}

fn kind_strategy() -> impl Strategy<Value = Kind> {
    prop_oneof![
        2 => Just(Kind::PutSession),
        2 => Just(Kind::DeleteSession),
        5 => Just(Kind::PutMessage),
        2 => Just(Kind::RemoveMessage),
        6 => Just(Kind::PutPart),
        2 => Just(Kind::RemovePart),
    ]
}

prop_compose! {
    pub fn ev_strategy()(
        kind in kind_strategy(),
        tenant in weighted_index(&[3, 1]),
        session in weighted_index(&[4, 2, 1, 1, 1]),
        message in weighted_index(&[3, 2, 2, 1, 1, 1, 1]),
        part in weighted_index(&[2, 1, 1]),
        variant in any::<u8>(),
        seq in 0..20u64,
        mismatch in proptest::bool::weighted(0.02),
        ensure_parents in proptest::bool::weighted(0.85),
        then in proptest::option::weighted(0.35, any::<u8>()),
    ) -> Ev {
        Ev { kind, tenant, session, message, part, variant, seq, mismatch, ensure_parents, then }
    }
}

pub fn to_envelopes(ev: &Ev) -> Vec<Envelope<SyncEvent>> {
    let (t, s) = (TENANTS[ev.tenant], SESSIONS[ev.session]);
    let (m, p) = (MESSAGES[ev.message], PARTS[ev.part]);
    let mut out = Vec::new();
    if ev.ensure_parents && matches!(ev.kind, Kind::PutMessage | Kind::PutPart) {
        out.push(env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionUpdated {
                info: session(s, ev.variant / 2),
            },
        ));
        if matches!(ev.kind, Kind::PutPart) {
            out.push(put_message(t, s, m, ev.variant / 3, ev.seq));
        }
    }
    let mut e = match ev.kind {
        Kind::PutSession => env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionUpdated {
                info: session(s, ev.variant),
            },
        ),
        Kind::DeleteSession => env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionDeleted {
                session_id: s.into(),
            },
        ),
        Kind::PutMessage => put_message(t, s, m, ev.variant, ev.seq),
        Kind::RemoveMessage => env(
            t,
            s,
            ev.seq,
            SyncEvent::MessageRemoved {
                session_id: s.into(),
                message_id: m.into(),
            },
        ),
        Kind::PutPart => put_part(t, s, m, p, ev.variant, ev.seq),
        Kind::RemovePart => env(
            t,
            s,
            ev.seq,
            SyncEvent::PartRemoved {
                session_id: s.into(),
                message_id: m.into(),
                part_id: p.into(),
            },
        ),
    };
    if ev.mismatch {
        e.session_id = SESSIONS[(ev.session + 1) % SESSIONS.len()].into();
    }
    out.push(e);
    match (ev.kind, ev.then) {
        // Recreating a removed message: it must come back without its old parts.
        (Kind::PutMessage | Kind::RemoveMessage, Some(v)) => {
            out.push(put_message(t, s, m, v, ev.seq + 1));
        }
        (Kind::PutPart, Some(v)) => out.push(put_part(t, s, m, p, v, ev.seq + 1)),
        (Kind::DeleteSession, Some(v)) => {
            out.push(env(
                t,
                s,
                ev.seq + 1,
                SyncEvent::SessionUpdated {
                    info: session(s, v),
                },
            ));
            out.push(put_message(t, s, m, v, ev.seq + 1));
        }
        _ => {}
    }
    out
}

/// A strategy of batches: up to 20 batches of up to 5 generated events each.
pub fn batches() -> impl Strategy<Value = Vec<Vec<Ev>>> {
    prop::collection::vec(prop::collection::vec(ev_strategy(), 0..5), 1..20)
}

/// Applies `batches` to `db` and to a fresh `MemoryStore`, comparing outcomes and reads
/// after every batch.
pub async fn run(db: &dyn Store, batches: &[Vec<Ev>]) -> Result<(), TestCaseError> {
    let mem = MemoryStore::new();
    for (i, batch) in batches.iter().enumerate() {
        let batch: Vec<Envelope<SyncEvent>> = batch.iter().flat_map(to_envelopes).collect();
        let want = outcome(&mem.apply(&batch).await);
        let got = outcome(&db.apply(&batch).await);
        prop_assert_eq!(&want, &got, "batch {} result", i);
        assert_same_reads(&mem, db).await?;
    }
    Ok(())
}
