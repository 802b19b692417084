//! Fencing (contract property 10, docs/conformance.md): one writer per session, enforced
//! by the store. A case has two parts on one session.
//!
//! **A script, against the rules.** Writers claim, renew, release, write (with the epoch
//! they were granted last, stale or not), write without an epoch, delete the session and
//! let a simulated clock run (also to the very instant a lease ends), in a generated
//! order; the session starts at a generated
//! epoch (up to 105, so epochs cross 9 → 10 and 99 → 100). Every call's outcome must be
//! what the rules give over a model of the record ([`crate::reference::fencing`], written
//! apart from `forge_core::fence`, so that code is checked too) (the epoch
//! granted, the holder, the lease, `Held`, `Fenced`), a refused batch must write nothing,
//! and at the end the stored record and messages must equal the model's. The same session
//! id in another tenant is claimed too: it starts at epoch 1 and is never fenced by the
//! first tenant's claims.
//!
//! **Racing writers.** 2–4 tasks on two worker threads, each taking the session over
//! round after round and writing a few messages (seq from the stored session, as a
//! projector does) while the others take it from them. Right after each claim, its writer
//! reads the session's messages. Afterwards: every write that succeeded is stored and
//! every refused one is not (nothing confirmed lost, nothing refused landed); no write of
//! an epoch landed that was not visible right after a later epoch was granted (a stale
//! batch never lands after the claim that fenced it); stored seqs are distinct and the
//! session's seq is the highest; every claim got its own epoch.
//!
//! Before both, claims at the edges of a request's domain (holder names of 1 and 256
//! bytes granted; empty, 257 bytes, a control character, a lease of 0 ms, a renewal of
//! epoch 0 refused with `InvalidInput`, changing nothing).
//!
//! It catches a backend that ignores the epoch, one that checks it outside the batch's
//! transaction (a claim slips between the check and the write), and one that compares
//! epochs as strings (`"9" < "10"` is false).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use forge_core::fence::{Claim, ClaimMode, ClaimRequest};
use forge_core::{
    read_all, Envelope, ErrorKind, MessageId, PartId, SessionId, Store, SyncEvent, TenantId,
};
use parking_lot::Mutex;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::reference::fencing as rules;
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// One step of the script. `who` is a writer, 0–2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// `who` claims, taking over or not.
    Claim {
        /// The writer.
        who: u8,
        /// [`ClaimMode::TakeOver`] rather than [`ClaimMode::Free`].
        take_over: bool,
    },
    /// `who` renews the epoch it was granted last.
    Renew {
        /// The writer.
        who: u8,
    },
    /// `who` releases the epoch it was granted last.
    Release {
        /// The writer.
        who: u8,
    },
    /// `who` writes a message and a part under the epoch it was granted last.
    Write {
        /// The writer.
        who: u8,
    },
    /// A writer that never claimed writes a message.
    Unfenced,
    /// `who` deletes the session under its epoch.
    Delete {
        /// The writer.
        who: u8,
    },
    /// The clock moves on.
    Tick {
        /// By this many ms.
        ms: u16,
    },
    /// The clock moves to the instant the current lease ends (it no longer holds then).
    Expire,
}

/// A case: the script and the race.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Claims of the session (taken over) before the script starts.
    pub warmup: u8,
    /// The lease every claim asks for, ms.
    pub lease_ms: u16,
    /// The script.
    pub steps: Vec<Step>,
    /// Racing writers (0: no race).
    pub racers: u8,
    /// Rounds per racer.
    pub rounds: u8,
    /// Writes per round.
    pub writes: u8,
}

fn step() -> impl Strategy<Value = Step> {
    let who = 0u8..3;
    prop_oneof![
        4 => (who.clone(), any::<bool>()).prop_map(|(who, take_over)| Step::Claim { who, take_over }),
        1 => who.clone().prop_map(|who| Step::Renew { who }),
        1 => who.clone().prop_map(|who| Step::Release { who }),
        6 => who.clone().prop_map(|who| Step::Write { who }),
        1 => Just(Step::Unfenced),
        1 => who.prop_map(|who| Step::Delete { who }),
        2 => (1u16..400).prop_map(|ms| Step::Tick { ms }),
        1 => Just(Step::Expire),
    ]
}

/// Any case: a warm-up that often sits just below 10 or 100, 1–40 steps, and a race of
/// 2–4 writers in half of the cases.
pub fn case() -> impl Strategy<Value = Case> {
    let warmup = prop_oneof![Just(0u8), 6u8..=10, 96u8..=100, 0u8..=105];
    (
        warmup,
        50u16..500,
        prop::collection::vec(step(), 1..40),
        prop_oneof![Just(0u8), 2u8..=4],
        1u8..=4,
        1u8..=4,
    )
        .prop_map(|(warmup, lease_ms, steps, racers, rounds, writes)| Case {
            warmup,
            lease_ms,
            steps,
            racers,
            rounds,
            writes,
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Fencing, case(), |c| check(ctx, c))
}

const SESSION: &str = "ses_fenced";
const T0: i64 = 1_700_000_000_000;

fn holder(who: u8) -> String {
    format!("writer-{who}")
}

/// A message and its part, one write of the script (`n` makes it unique).
fn write_events(session: &SessionId, n: usize, with_session: bool) -> (MessageId, Vec<SyncEvent>) {
    let id = MessageId::from(format!("msg_{n:05}"));
    let mut events = Vec::with_capacity(3);
    if with_session {
        events.push(SyncEvent::SessionUpdated {
            info: model::session(session, 0),
        });
    }
    events.push(SyncEvent::MessageUpdated {
        info: model::message(session, &id, MessageKind::User, 0),
    });
    events.push(SyncEvent::PartUpdated {
        part: model::part(
            session,
            &id,
            &PartId::from(format!("prt_{n:05}")),
            PartKind::Text,
            0,
        ),
    });
    (id, events)
}

fn batch(
    tenant: &TenantId,
    session: &SessionId,
    seq: u64,
    epoch: Option<u64>,
    events: Vec<SyncEvent>,
) -> Vec<Envelope<SyncEvent>> {
    events
        .into_iter()
        .zip(seq..)
        .map(|(e, seq)| Envelope::new(tenant.clone(), session.clone(), seq, e).with_epoch(epoch))
        .collect()
}

/// The script's model: the record, what each writer was granted, the clock, the rows.
struct Model {
    record: Option<Claim>,
    granted: [Option<u64>; 3],
    now: i64,
    exists: bool,
    messages: BTreeSet<MessageId>,
    seq: u64,
}

/// `Ok` when the store's outcome is the model's: the same value, or an error of the
/// same kind.
fn same_outcome<T: PartialEq + std::fmt::Debug>(
    what: &str,
    want: &Result<T, ErrorKind>,
    got: &forge_core::Result<T>,
) -> Result<(), String> {
    match (want, got) {
        (Ok(a), Ok(b)) if a == b => Ok(()),
        (Err(a), Err(b)) if *a == b.kind() => Ok(()),
        _ => Err(format!(
            "{what}: the rules give {}, the store gave {}",
            match want {
                Ok(v) => format!("Ok({v:?})"),
                Err(k) => format!("{k} error"),
            },
            match got {
                Ok(v) => format!("Ok({v:?})"),
                Err(e) => format!("{} error ({e})", e.kind()),
            }
        )),
    }
}

async fn script(store: &dyn Store, tenant: &TenantId, case: &Case) -> Result<(), String> {
    let session = SessionId::from(SESSION);
    let mut m = Model {
        record: None,
        granted: [None; 3],
        now: T0,
        exists: false,
        messages: BTreeSet::new(),
        seq: 0,
    };
    for i in 0..case.warmup {
        let request = ClaimRequest::new("warm-up", m.now).mode(ClaimMode::TakeOver);
        let got = store
            .claim(tenant, &session, &request)
            .await
            .map_err(ctx_err(format!("warm-up claim {i}")))?;
        let want = rules::claim(m.record.as_ref(), &request)
            .map_err(|e| format!("the rules refuse warm-up claim {i}: {e}"))?;
        same_outcome(&format!("warm-up claim {i}"), &Ok(want.clone()), &Ok(got))?;
        m.record = Some(want);
    }
    let lease = i64::from(case.lease_ms);
    for (n, step) in case.steps.iter().enumerate() {
        let at = format!("step {n} ({step:?})");
        match *step {
            Step::Claim { who, take_over } => {
                let mode = if take_over {
                    ClaimMode::TakeOver
                } else {
                    ClaimMode::Free
                };
                let request = ClaimRequest::new(holder(who), m.now)
                    .mode(mode)
                    .lease_ms(lease);
                let want = rules::claim(m.record.as_ref(), &request);
                let got = store.claim(tenant, &session, &request).await;
                same_outcome(&at, &want, &got)?;
                if let Ok(c) = want {
                    m.granted[usize::from(who)] = Some(c.epoch);
                    m.record = Some(c);
                }
            }
            Step::Renew { who } => {
                let Some(epoch) = m.granted[usize::from(who)] else {
                    continue;
                };
                let request = ClaimRequest::new(holder(who), m.now)
                    .mode(ClaimMode::Renew(epoch))
                    .lease_ms(lease);
                let want = rules::claim(m.record.as_ref(), &request);
                let got = store.claim(tenant, &session, &request).await;
                same_outcome(&at, &want, &got)?;
                if let Ok(c) = want {
                    m.record = Some(c);
                }
            }
            Step::Release { who } => {
                let Some(epoch) = m.granted[usize::from(who)] else {
                    continue;
                };
                store
                    .release(tenant, &session, epoch)
                    .await
                    .map_err(ctx_err(&at))?;
                m.record = rules::release(m.record.as_ref(), epoch);
            }
            Step::Write { .. } | Step::Unfenced | Step::Delete { .. } => {
                let epoch = match *step {
                    Step::Write { who } | Step::Delete { who } => {
                        match m.granted[usize::from(who)] {
                            Some(e) => Some(e),
                            None => continue,
                        }
                    }
                    _ => None,
                };
                let delete = matches!(step, Step::Delete { .. });
                let (id, events) = if delete {
                    let deleted = SyncEvent::SessionDeleted {
                        session_id: session.clone(),
                    };
                    (None, vec![deleted])
                } else {
                    let (id, events) = write_events(&session, n, true);
                    (Some(id), events)
                };
                let len = events.len() as u64;
                let b = batch(tenant, &session, m.seq + 1, epoch, events);
                let want = rules::write(m.record.as_ref(), epoch);
                let got = store.apply(&b).await;
                same_outcome(&at, &want, &got)?;
                if want.is_ok() {
                    m.seq += len;
                    match id {
                        Some(id) => {
                            m.exists = true;
                            m.messages.insert(id);
                        }
                        None => {
                            m.exists = false;
                            m.messages.clear();
                        }
                    }
                }
            }
            Step::Tick { ms } => m.now += i64::from(ms),
            Step::Expire => {
                if let Some(r) = &m.record {
                    m.now = m.now.max(r.expires_ms);
                }
            }
        }
        // What a refused batch must not have written shows at once.
        let stored = stored_messages(store, tenant, &session).await?;
        if stored != m.messages {
            return Err(format!(
                "after {at}: the session holds {stored:?}, the accepted writes made {:?}",
                m.messages
            ));
        }
    }
    let record = store
        .claimed(tenant, &session)
        .await
        .map_err(ctx_err("claimed"))?;
    if record != m.record {
        return Err(format!(
            "after the script the fence record is {record:?}, the rules give {:?}",
            m.record
        ));
    }
    let exists = store
        .session(tenant, &session)
        .await
        .map_err(ctx_err("session"))?
        .is_some();
    if exists != m.exists {
        return Err(format!(
            "after the script the session exists: {exists}, the accepted writes say {}",
            m.exists
        ));
    }
    Ok(())
}

async fn stored_messages(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<BTreeSet<MessageId>, String> {
    Ok(read_all(store, tenant, session, 1000)
        .await
        .map_err(ctx_err("read_all"))?
        .into_iter()
        .map(|m| m.info.id)
        .collect())
}

/// The same session id in another tenant: its own epochs from 1, untouched by the first.
async fn other_tenant(store: &dyn Store, first: &TenantId, other: &TenantId) -> Result<(), String> {
    let session = SessionId::from(SESSION);
    let before = store
        .claimed(first, &session)
        .await
        .map_err(ctx_err("claimed"))?;
    let request = ClaimRequest::new("other-tenant", T0).mode(ClaimMode::TakeOver);
    let got = store
        .claim(other, &session, &request)
        .await
        .map_err(ctx_err("claim in another tenant"))?;
    if got.epoch != 1 {
        return Err(format!(
            "the first claim of session {session} in another tenant got epoch {}, not 1: \
             fence records leak across tenants",
            got.epoch
        ));
    }
    let (_, events) = write_events(&session, 99_999, true);
    store
        .apply(&batch(other, &session, 1, Some(1), events))
        .await
        .map_err(ctx_err("a write under epoch 1 in another tenant"))?;
    let after = store
        .claimed(first, &session)
        .await
        .map_err(ctx_err("claimed"))?;
    if after != before {
        return Err(format!(
            "a claim in another tenant changed the first tenant's record: {before:?} → {after:?}"
        ));
    }
    Ok(())
}

/// What one racing write did.
#[derive(Debug)]
struct Write {
    id: MessageId,
    epoch: u64,
    seq: u64,
    landed: bool,
}

/// What the racers did: their writes, and per granted epoch what the session held right
/// after the claim.
#[derive(Default)]
struct Race {
    writes: Vec<Write>,
    seen: BTreeMap<u64, BTreeSet<MessageId>>,
}

async fn racer(
    store: Arc<dyn Store>,
    tenant: TenantId,
    who: u8,
    case: Case,
    race: Arc<Mutex<Race>>,
) -> Result<(), String> {
    let session = SessionId::from(SESSION);
    for round in 0..case.rounds {
        let request = ClaimRequest::new(format!("racer-{who}"), forge_core::id::now_ms())
            .mode(ClaimMode::TakeOver);
        let claim = store
            .claim(&tenant, &session, &request)
            .await
            .map_err(ctx_err(format!("racer {who} round {round}: claim")))?;
        let seen = stored_messages(store.as_ref(), &tenant, &session).await?;
        let mut seq = store
            .session(&tenant, &session)
            .await
            .map_err(ctx_err("session"))?
            .map_or(0, |s| s.seq);
        if race.lock().seen.insert(claim.epoch, seen).is_some() {
            return Err(format!("epoch {} was granted to two claims", claim.epoch));
        }
        for w in 0..case.writes {
            tokio::task::yield_now().await;
            let n = 10_000 + usize::from(who) * 1_000 + usize::from(round) * 10 + usize::from(w);
            let (id, events) = write_events(&session, n, false);
            let b = batch(&tenant, &session, seq + 1, Some(claim.epoch), events);
            let last = seq + b.len() as u64;
            match store.apply(&b).await {
                Ok(()) => {
                    race.lock().writes.push(Write {
                        id,
                        epoch: claim.epoch,
                        seq: last,
                        landed: true,
                    });
                    seq = last;
                }
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    race.lock().writes.push(Write {
                        id,
                        epoch: claim.epoch,
                        seq: last,
                        landed: false,
                    });
                    break;
                }
                Err(e) => {
                    return Err(format!(
                        "racer {who} round {round}: a write under epoch {} failed with {} \
                         error, not Fenced: {e}",
                        claim.epoch,
                        e.kind()
                    ))
                }
            }
        }
    }
    Ok(())
}

async fn race(store: &Arc<dyn Store>, tenant: &TenantId, case: &Case) -> Result<(), String> {
    let session = SessionId::from(SESSION);
    // The session, created by a writer that then lets go.
    let request = ClaimRequest::new("creator", forge_core::id::now_ms()).mode(ClaimMode::TakeOver);
    let c = store
        .claim(tenant, &session, &request)
        .await
        .map_err(ctx_err("creator's claim"))?;
    let seq = store
        .session(tenant, &session)
        .await
        .map_err(ctx_err("session"))?
        .map_or(0, |s| s.seq);
    let create = SyncEvent::SessionUpdated {
        info: model::session(&session, 1),
    };
    store
        .apply(&batch(
            tenant,
            &session,
            seq + 1,
            Some(c.epoch),
            vec![create],
        ))
        .await
        .map_err(ctx_err("creating the session"))?;
    let before = stored_messages(store.as_ref(), tenant, &session).await?;
    let race = Arc::new(Mutex::new(Race::default()));
    let tasks: Vec<_> = (0..case.racers)
        .map(|who| {
            tokio::spawn(racer(
                Arc::clone(store),
                tenant.clone(),
                who,
                case.clone(),
                Arc::clone(&race),
            ))
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| format!("a racer panicked: {e}"))??;
    }
    let race = std::mem::take(&mut *race.lock());
    let stored = stored_messages(store.as_ref(), tenant, &session).await?;
    for w in &race.writes {
        if w.landed && !stored.contains(&w.id) {
            return Err(format!(
                "a write under epoch {} was confirmed and is not stored: {}",
                w.epoch, w.id
            ));
        }
        if !w.landed && stored.contains(&w.id) {
            return Err(format!(
                "a write refused as fenced (epoch {}) is stored: {}",
                w.epoch, w.id
            ));
        }
    }
    // A write of epoch e visible after all must have been visible right after every
    // later epoch was granted: otherwise it landed after the claim that fenced it.
    for w in race.writes.iter().filter(|w| w.landed) {
        for (later, seen) in race.seen.range(w.epoch + 1..) {
            if !seen.contains(&w.id) {
                return Err(format!(
                    "a write under epoch {} ({}) landed after epoch {later} was granted: a \
                     stale writer's batch got through",
                    w.epoch, w.id
                ));
            }
        }
    }
    let mut seqs: Vec<u64> = race
        .writes
        .iter()
        .filter(|w| w.landed)
        .map(|w| w.seq)
        .collect();
    seqs.sort_unstable();
    if let Some(seq) = seqs.windows(2).find_map(|p| match p {
        [a, b] if a == b => Some(*a),
        _ => None,
    }) {
        return Err(format!(
            "two confirmed writes share seq {seq}: writers overlapped"
        ));
    }
    let extra: Vec<&MessageId> = stored
        .iter()
        .filter(|id| !before.contains(*id) && !race.writes.iter().any(|w| &w.id == *id))
        .collect();
    if !extra.is_empty() {
        return Err(format!("messages nobody wrote are stored: {extra:?}"));
    }
    if let Some(&max) = seqs.last() {
        let state = store
            .session(tenant, &session)
            .await
            .map_err(ctx_err("session"))?
            .ok_or("the raced session is gone")?;
        if state.seq < max {
            return Err(format!(
                "the session's seq is {}, below the highest confirmed write's {max}",
                state.seq
            ));
        }
    }
    Ok(())
}

/// Claims at the edges of a request's domain: a holder name of 1 byte with a lease of
/// 1 ms and one of 256 bytes are granted; an empty one, one of 257 bytes, one with a control character, a lease under
/// 1 ms and a renewal of epoch 0 are refused with `InvalidInput` and change nothing.
async fn limits(store: &dyn Store, tenant: &TenantId) -> Result<(), String> {
    let session = SessionId::from("ses_fenced_limits");
    let max = forge_core::fence::MAX_HOLDER_LEN;
    // The shortest holder name with the shortest lease, then the longest name.
    let good = [("h".to_owned(), 1), ("é".repeat(max / 2), 30_000)];
    for (n, (holder, lease_ms)) in good.into_iter().enumerate() {
        let request = ClaimRequest::new(holder.clone(), T0)
            .mode(ClaimMode::TakeOver)
            .lease_ms(lease_ms);
        let got = store.claim(tenant, &session, &request).await;
        let want = Ok(Claim {
            epoch: n as u64 + 1,
            holder,
            expires_ms: T0 + request.lease_ms,
        });
        same_outcome(
            &format!("a claim by a holder of {} bytes", request.holder.len()),
            &want,
            &got,
        )?;
    }
    let before = store
        .claimed(tenant, &session)
        .await
        .map_err(ctx_err("claimed"))?;
    let bad = [
        ("an empty holder name", ClaimRequest::new("", T0)),
        (
            "a holder name of 257 bytes",
            ClaimRequest::new("x".repeat(max + 1), T0),
        ),
        (
            "a holder name with a newline",
            ClaimRequest::new("a\nb", T0),
        ),
        ("a lease of 0 ms", ClaimRequest::new("h", T0).lease_ms(0)),
        (
            "a renewal of epoch 0",
            ClaimRequest::new("h", T0).mode(ClaimMode::Renew(0)),
        ),
    ];
    for (what, request) in bad {
        let request = match request.mode {
            ClaimMode::Free => request.mode(ClaimMode::TakeOver),
            _ => request,
        };
        let got = store.claim(tenant, &session, &request).await;
        same_outcome::<Claim>(what, &Err(ErrorKind::InvalidInput), &got)?;
    }
    let after = store
        .claimed(tenant, &session)
        .await
        .map_err(ctx_err("claimed"))?;
    if after != before {
        return Err(format!(
            "refused claims changed the fence record: {before:?} → {after:?}"
        ));
    }
    Ok(())
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        limits(b.store.as_ref(), &tenant).await?;
        script(b.store.as_ref(), &tenant, case).await?;
        let other = b.tenant();
        other_tenant(b.store.as_ref(), &tenant, &other).await?;
        if case.racers > 0 {
            let raced = b.tenant();
            race(&b.store, &raced, case).await?;
        }
        b.cleanup().await;
        Ok(())
    })
}
