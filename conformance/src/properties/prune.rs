//! Prune (contract property 11, docs/conformance.md): retention removes exactly what its
//! policy says, nothing half, and never a session written while it runs.
//!
//! A case is a tenant of sessions of different ages (some with an open answer, some
//! with a finished compaction) and a policy (idle days, a session limit, an age for
//! compacted history). First a dry run: it must change nothing, and name what the real
//! run removes. Then the real run, while writers add messages to some of the old
//! sessions at the same time (fenced writers that wait for a held session and retry a
//! fenced batch, as the engine's do). Afterwards:
//!
//! - every session not written during the run is deleted, trimmed or kept exactly as the
//!   reference rules say (an open session is never touched);
//! - a session a writer wrote is deleted only if none of the writer's batches was
//!   confirmed; kept, it holds every confirmed message;
//! - a trimmed session's compacted view is unchanged;
//! - nothing deleted is left half: a deleted session, its messages and parts read as
//!   absent, and when the same session and message ids are written again, no old part
//!   comes back (a store that leaves orphans is caught here);
//! - [`Store::stats`] counts what reads return and [`Store::sessions_after`] pages
//!   through the same sessions as [`Store::sessions`].
//!
//! Every check runs after [`Store::reclaim`], which must change nothing a read returns.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forge_core::model::MessageBody;
use forge_core::prune::{prune, PruneOptions, PruneReport, Reason, Retention};
use forge_core::{
    filter_compacted, read_all, Bus, ClaimMode, ClaimPolicy, ClaimRequest, DirectProjector,
    ErrorKind, LocalBus, Message, MessageId, MessageWithParts, OnHeld, PartId, Projector,
    SessionId, Store, SyncEvent, TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// A day, ms.
const DAY: i64 = 86_400_000;
/// "Now" of every case: ten years after the model's T0, so ages are whole days.
const NOW: i64 = model::T0 + 3650 * DAY;

/// One session of a case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCase {
    /// Days since its last activity (0–19).
    pub age_days: u8,
    /// Messages, alternating user and assistant (0–6).
    pub messages: u8,
    /// The last message is an open answer.
    pub open: bool,
    /// A compaction request at this message, answered by a summary right after it.
    pub compaction: Option<u8>,
    /// A writer adds messages to it while prune runs.
    pub written: bool,
}

/// A case: the sessions and the policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The sessions, `ses_00`, `ses_01`, …
    pub sessions: Vec<SessionCase>,
    /// [`Retention::idle`] in days.
    pub idle_days: Option<u8>,
    /// [`Retention::keep`].
    pub keep: Option<u8>,
    /// [`Retention::compacted`] in days.
    pub compacted_days: Option<u8>,
    /// [`PruneOptions::batch_messages`].
    pub batch: u8,
}

fn session_case() -> impl Strategy<Value = SessionCase> {
    (
        0u8..20,
        0u8..=6,
        any::<bool>(),
        prop::option::of(0u8..6),
        any::<bool>(),
    )
        .prop_map(|(age_days, messages, open, compaction, written)| {
            let open = open && messages > 0 && messages % 2 == 0 && !written;
            // The request and its summary, both before an open answer.
            let room = messages.saturating_sub(u8::from(open));
            let compaction = compaction
                .filter(|k| k % 2 == 0 && k + 1 < room)
                .filter(|_| !written);
            SessionCase {
                age_days,
                messages,
                open,
                compaction,
                written,
            }
        })
}

/// Any case: 1–10 sessions, each policy field set or not.
pub fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(session_case(), 1..=10),
        prop::option::of(1u8..15),
        prop::option::of(0u8..6),
        prop::option::of(0u8..15),
        1u8..=4,
    )
        .prop_map(|(mut sessions, idle_days, keep, compacted_days, batch)| {
            if keep.is_some() {
                // A write during the run changes the ranking the limit keeps: the
                // expected outcome would depend on timing.
                for s in &mut sessions {
                    s.written = false;
                }
            }
            Case {
                sessions,
                idle_days,
                keep,
                compacted_days,
                batch,
            }
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Prune, case(), |c| check(ctx, c))
}

/// `d` days.
fn days(d: u8) -> Duration {
    Duration::from_secs(u64::from(d) * 86_400)
}

fn sid(i: usize) -> SessionId {
    SessionId::from(format!("ses_{i:02}"))
}

fn mid(j: u8) -> MessageId {
    MessageId::from(format!("msg_{j:03}"))
}

/// When session `i` of `s` starts: its age back from [`NOW`], a second apart per index
/// so no two sessions tie.
fn start(i: usize, s: &SessionCase) -> i64 {
    NOW - i64::from(s.age_days) * DAY - 10_000 * (i as i64 + 1)
}

/// The rows of session `i`.
fn history(i: usize, s: &SessionCase) -> (forge_core::Session, Vec<MessageWithParts>) {
    let id = sid(i);
    let t = start(i, s);
    let mut info = model::session(&id, 0);
    info.time.created = t;
    info.time.updated = t;
    let mut out = Vec::new();
    for j in 0..s.messages {
        let last = j + 1 == s.messages;
        let kind = if s.compaction.is_some_and(|k| j == k + 1) {
            MessageKind::Summary
        } else if j % 2 == 0 {
            MessageKind::User
        } else if last && s.open {
            MessageKind::OpenAssistant
        } else {
            MessageKind::Assistant
        };
        let mut m = model::message(&id, &mid(j), kind, j);
        set_times(&mut m, t + i64::from(j) * 10, !(last && s.open));
        if let (Some(k), Some(a)) = (s.compaction, m.as_assistant_mut()) {
            if j == k + 1 {
                a.parent_id = mid(k);
            }
        }
        let part_kind = if s.compaction == Some(j) {
            PartKind::Compaction
        } else if last && s.open {
            PartKind::OpenText
        } else {
            PartKind::Text
        };
        let part = model::part(
            &id,
            &mid(j),
            &PartId::from(format!("prt_{j:03}")),
            part_kind,
            j,
        );
        out.push(MessageWithParts {
            info: m,
            parts: vec![part],
        });
    }
    (info, out)
}

fn set_times(m: &mut Message, created: i64, closed: bool) {
    match &mut m.body {
        MessageBody::User(u) => u.time.created = created,
        MessageBody::Assistant(a) => {
            a.time.created = created;
            a.time.completed = closed.then_some(created + 1);
        }
        MessageBody::Unknown { .. } => {}
    }
}

/// The latest activity of session `i` as written.
fn activity(i: usize, s: &SessionCase) -> i64 {
    let t = start(i, s);
    match s.messages {
        0 => t,
        n => {
            let last = t + i64::from(n - 1) * 10;
            // An assistant answer (odd index) that is closed completes a ms later.
            if (n - 1) % 2 == 1 && !s.open {
                last + 1
            } else {
                last
            }
        }
    }
}

/// What the rules say becomes of each session not written during the run.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    Kept,
    Deleted(Reason),
    /// Messages before this one go.
    Trimmed(MessageId),
}

fn expected(case: &Case) -> BTreeMap<usize, Fate> {
    let idle_cut = case.idle_days.map(|d| NOW - i64::from(d) * DAY);
    let mut fates = BTreeMap::new();
    let mut ranked = Vec::new();
    for (i, s) in case.sessions.iter().enumerate() {
        let at = activity(i, s);
        if idle_cut.is_some_and(|c| at < c) {
            fates.insert(i, Fate::Deleted(Reason::Idle));
        } else {
            ranked.push((at, i));
        }
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| sid(a.1).cmp(&sid(b.1))));
    for (rank, (_, i)) in ranked.into_iter().enumerate() {
        let s = &case.sessions[i];
        let fate = if case.keep.is_some_and(|k| rank >= usize::from(k)) {
            Fate::Deleted(Reason::OverLimit)
        } else {
            match (case.compacted_days, s.compaction) {
                (Some(days), Some(k))
                    if k > 0 && start(i, s) + i64::from(k) * 10 < NOW - i64::from(days) * DAY =>
                {
                    Fate::Trimmed(mid(k))
                }
                _ => Fate::Kept,
            }
        };
        fates.insert(i, fate);
    }
    // An open session is never touched.
    for (i, s) in case.sessions.iter().enumerate() {
        if s.open {
            fates.insert(i, Fate::Kept);
        }
    }
    fates
}

/// Writes session `i` with its history, unfenced, as an import would.
async fn setup(store: &dyn Store, tenant: &TenantId, case: &Case) -> Result<(), String> {
    for (i, s) in case.sessions.iter().enumerate() {
        let (info, messages) = history(i, s);
        let mut events = vec![SyncEvent::SessionUpdated { info }];
        for m in messages {
            events.push(SyncEvent::MessageUpdated { info: m.info });
            events.extend(
                m.parts
                    .into_iter()
                    .map(|part| SyncEvent::PartUpdated { part }),
            );
        }
        let batch = crate::harness::envs(tenant, 1, events);
        store
            .apply(&batch)
            .await
            .map_err(ctx_err(format!("writing session {}", sid(i))))?;
    }
    Ok(())
}

/// What a concurrent writer got confirmed.
#[derive(Debug, Default)]
struct Written {
    confirmed: Vec<MessageId>,
}

/// Adds three messages to `session` through a claiming projector, waiting for a held
/// session and retrying a fenced batch, stopping when the session is gone. It releases
/// its claim after each message.
async fn writer(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    tenant: TenantId,
    session: SessionId,
    pause_ms: u64,
) -> Result<Written, String> {
    let projector = DirectProjector::with_claims(
        store,
        bus,
        ClaimPolicy::holder(format!("writer-{session}"))
            .on_held(OnHeld::Wait(Duration::from_secs(5))),
    );
    let mut out = Written::default();
    'rounds: for k in 0..3u8 {
        tokio::time::sleep(Duration::from_millis(pause_ms * u64::from(k))).await;
        let id = MessageId::from(format!("msg_w{k}"));
        let mut m = model::message(&session, &id, MessageKind::User, k);
        set_times(&mut m, NOW + i64::from(k), true);
        let part = model::part(
            &session,
            &id,
            &PartId::from(format!("prt_w{k}")),
            PartKind::Text,
            k,
        );
        for _attempt in 0..5 {
            let scope = match projector.scope(&tenant, &session).await {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::Held => continue,
                Err(e) => return Err(format!("writer of {session}: claiming: {e}")),
            };
            let events = vec![
                SyncEvent::MessageUpdated { info: m.clone() },
                SyncEvent::PartUpdated { part: part.clone() },
            ];
            match projector.commit(&scope, events).await {
                Ok(_) => {
                    out.confirmed.push(id.clone());
                    // Let go after each turn, as a command that writes one and exits:
                    // prune may claim the session between two of them.
                    drop(scope);
                    projector
                        .release()
                        .await
                        .map_err(|e| format!("writer of {session}: releasing: {e}"))?;
                    continue 'rounds;
                }
                Err(e) if e.kind() == ErrorKind::Fenced => {}
                Err(e) if e.kind() == ErrorKind::NotFound => break 'rounds,
                Err(e) => return Err(format!("writer of {session}: {e}")),
            }
        }
    }
    let _ = projector.release().await;
    Ok(out)
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let store = Arc::clone(&b.store);
        let bus: Arc<dyn Bus> = b.bus.clone().unwrap_or_else(|| Arc::new(LocalBus::new()));
        setup(store.as_ref(), &tenant, case).await?;
        let retention = Retention {
            idle: case.idle_days.map(days),
            keep: case.keep.map(usize::from),
            compacted: case.compacted_days.map(days),
        };
        let opts = PruneOptions {
            batch_messages: usize::from(case.batch),
            pause: Duration::ZERO,
            now_ms: NOW,
            ..PruneOptions::default()
        };
        let mut views = BTreeMap::new();
        let mut before = BTreeMap::new();
        for i in 0..case.sessions.len() {
            let view = filter_compacted(store.as_ref(), &tenant, &sid(i))
                .await
                .map_err(ctx_err("reading a view before prune"))?;
            views.insert(i, view);
            let all = read_all(store.as_ref(), &tenant, &sid(i), 1000)
                .await
                .map_err(ctx_err("reading before prune"))?;
            before.insert(i, all);
        }

        // A dry run changes nothing.
        let dry = prune(
            &store,
            &bus,
            &tenant,
            &retention,
            &PruneOptions {
                dry_run: true,
                ..opts.clone()
            },
        )
        .await
        .map_err(ctx_err("prune --dry-run"))?;
        for (i, all) in &before {
            let now = read_all(store.as_ref(), &tenant, &sid(*i), 1000)
                .await
                .map_err(ctx_err("reading after the dry run"))?;
            if &now != all {
                return Err(format!("a dry run changed session {}", sid(*i)));
            }
        }

        // The real run, with writers on the sessions marked written.
        let writers: Vec<_> = case
            .sessions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.written)
            .map(|(i, s)| {
                let (store, bus, tenant) = (Arc::clone(&store), Arc::clone(&bus), tenant.clone());
                let pause = u64::from(s.age_days % 3);
                (i, tokio::spawn(writer(store, bus, tenant, sid(i), pause)))
            })
            .collect();
        let report = prune(&store, &bus, &tenant, &retention, &opts)
            .await
            .map_err(ctx_err("prune"))?;
        let mut written = BTreeMap::new();
        for (i, task) in writers {
            let w = task
                .await
                .map_err(|e| format!("a writer task panicked: {e}"))??;
            written.insert(i, w);
        }

        // Giving the space back changes nothing a read returns.
        store
            .reclaim()
            .await
            .map_err(ctx_err("reclaim after prune"))?;
        let fates = expected(case);
        let mut deleted = BTreeSet::new();
        for (i, s) in case.sessions.iter().enumerate() {
            let id = sid(i);
            let now = store
                .session(&tenant, &id)
                .await
                .map_err(ctx_err("reading a session"))?;
            let all = read_all(store.as_ref(), &tenant, &id, 1000)
                .await
                .map_err(ctx_err("reading a session's history"))?;
            let was = &before[&i];
            if now.is_none() {
                deleted.insert(i);
                if !all.is_empty() {
                    return Err(format!(
                        "session {id} is deleted but {} of its messages are still read",
                        all.len()
                    ));
                }
                for m in was {
                    let one = store
                        .message(&tenant, &id, &m.info.id)
                        .await
                        .map_err(ctx_err("reading a message"))?;
                    if one.is_some() {
                        return Err(format!(
                            "session {id} is deleted but its message {} is still read",
                            m.info.id
                        ));
                    }
                }
            }
            if let Some(w) = written.get(&i) {
                if now.is_none() && !w.confirmed.is_empty() {
                    return Err(format!(
                        "session {id} was deleted though a writer's batches were confirmed \
                         while prune ran ({:?}): a session written while prune runs must stay",
                        w.confirmed
                    ));
                }
                if now.is_some() {
                    let have: BTreeSet<&MessageId> = all.iter().map(|m| &m.info.id).collect();
                    for m in was.iter().map(|m| &m.info.id).chain(&w.confirmed) {
                        if !have.contains(m) {
                            return Err(format!(
                                "session {id}, kept, lost message {m} (written while prune ran)"
                            ));
                        }
                    }
                }
                continue;
            }
            let fate = &fates[&i];
            match fate {
                Fate::Deleted(_) if now.is_some() => {
                    return Err(format!(
                        "session {id} ({s:?}) should be deleted by {retention:?}, but is kept"
                    ))
                }
                Fate::Kept if &all != was => {
                    return Err(format!(
                        "session {id} ({s:?}) should be kept whole by {retention:?}, but holds \
                         {} messages of {}{}",
                        all.len(),
                        was.len(),
                        if now.is_none() { " (deleted)" } else { "" }
                    ))
                }
                Fate::Deleted(_) | Fate::Kept => {}
                Fate::Trimmed(from) => {
                    let want: Vec<&MessageWithParts> =
                        was.iter().filter(|m| &m.info.id >= from).collect();
                    let have: Vec<&MessageWithParts> = all.iter().collect();
                    if have != want {
                        return Err(format!(
                            "session {id} ({s:?}) should keep the messages from {from} on (its \
                             compaction is older than {:?} days), but holds {:?}",
                            case.compacted_days,
                            all.iter().map(|m| m.info.id.as_str()).collect::<Vec<_>>()
                        ));
                    }
                    let view = filter_compacted(store.as_ref(), &tenant, &id)
                        .await
                        .map_err(ctx_err("reading a view after prune"))?;
                    if view != views[&i] {
                        return Err(format!(
                            "session {id}: dropping the history behind its compaction changed \
                             the compacted view"
                        ));
                    }
                }
            }
        }
        check_report(case, &fates, &written, &deleted, &dry, &report)?;
        check_orphans(store.as_ref(), &tenant, case, &deleted).await?;
        check_listing(store.as_ref(), &tenant).await
    })
}

/// The report counts what happened, and the dry run named what the real run removed.
fn check_report(
    case: &Case,
    fates: &BTreeMap<usize, Fate>,
    written: &BTreeMap<usize, Written>,
    deleted: &BTreeSet<usize>,
    dry: &PruneReport,
    report: &PruneReport,
) -> Result<(), String> {
    if report.sessions_deleted != deleted.len() as u64 {
        return Err(format!(
            "prune reports {} sessions deleted; {} are gone",
            report.sessions_deleted,
            deleted.len()
        ));
    }
    let quiet = |r: &PruneReport| -> Vec<(String, Reason)> {
        r.pruned
            .iter()
            .filter(|p| {
                let i = case
                    .sessions
                    .iter()
                    .enumerate()
                    .position(|(i, _)| sid(i) == p.session);
                i.is_none_or(|i| !written.contains_key(&i))
            })
            .map(|p| (p.session.to_string(), p.reason))
            .collect()
    };
    let (d, r) = (quiet(dry), quiet(report));
    if d != r {
        return Err(format!(
            "the dry run named {d:?}, the real run removed from {r:?} (sessions not written \
             meanwhile)"
        ));
    }
    let trimmed = fates
        .iter()
        .filter(|(i, f)| matches!(f, Fate::Trimmed(_)) && !written.contains_key(i))
        .count() as u64;
    if report.sessions_trimmed != trimmed {
        return Err(format!(
            "prune reports {} sessions trimmed; the rules trim {trimmed}",
            report.sessions_trimmed
        ));
    }
    Ok(())
}

/// Writes the deleted sessions' ids again (session and message rows, no parts): no part
/// of the old rows may come back.
async fn check_orphans(
    store: &dyn Store,
    tenant: &TenantId,
    case: &Case,
    deleted: &BTreeSet<usize>,
) -> Result<(), String> {
    for &i in deleted {
        let id = sid(i);
        let (info, messages) = history(i, &case.sessions[i]);
        let claim = store
            .claim(
                tenant,
                &id,
                &ClaimRequest {
                    holder: "suite".into(),
                    mode: ClaimMode::TakeOver,
                    now_ms: forge_core::id::now_ms(),
                    lease_ms: 60_000,
                },
            )
            .await
            .map_err(ctx_err("claiming a deleted session again"))?;
        let mut events = vec![SyncEvent::SessionUpdated { info }];
        events.extend(messages.iter().map(|m| SyncEvent::MessageUpdated {
            info: m.info.clone(),
        }));
        let mut batch = crate::harness::envs(tenant, 1_000, events);
        for e in &mut batch {
            e.epoch = Some(claim.epoch);
        }
        store
            .apply(&batch)
            .await
            .map_err(ctx_err("writing a deleted session's ids again"))?;
        for m in read_all(store, tenant, &id, 1000)
            .await
            .map_err(ctx_err("reading a session written again"))?
        {
            if !m.parts.is_empty() {
                return Err(format!(
                    "session {id} was deleted by prune, yet when its message {} is written \
                     again {} old part(s) come back: the deletion left orphan rows",
                    m.info.id,
                    m.parts.len()
                ));
            }
        }
    }
    Ok(())
}

/// `stats` counts what reads return; `sessions_after` pages through `sessions`.
async fn check_listing(store: &dyn Store, tenant: &TenantId) -> Result<(), String> {
    let all = store.sessions(tenant).await.map_err(ctx_err("sessions"))?;
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .sessions_after(tenant, after.as_ref(), 2)
            .await
            .map_err(ctx_err("sessions_after"))?;
        if page.sessions.len() > 2 {
            return Err(format!(
                "sessions_after with limit 2 returned {}",
                page.sessions.len()
            ));
        }
        paged.extend(page.sessions);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    if paged != all {
        return Err(format!(
            "paging sessions_after (limit 2) yields {:?}; sessions() lists {:?}",
            paged.iter().map(|s| s.info.id.as_str()).collect::<Vec<_>>(),
            all.iter().map(|s| s.info.id.as_str()).collect::<Vec<_>>()
        ));
    }
    let stats = store.stats(tenant).await.map_err(ctx_err("stats"))?;
    let (mut messages, mut parts) = (0u64, 0u64);
    for s in &all {
        for m in read_all(store, tenant, &s.info.id, 1000)
            .await
            .map_err(ctx_err("reading for stats"))?
        {
            messages += 1;
            parts += m.parts.len() as u64;
        }
    }
    let counted = (all.len() as u64, messages, parts);
    if (stats.sessions, stats.messages, stats.parts) != counted {
        return Err(format!(
            "stats counts (sessions, messages, parts) = {:?}; reads return {counted:?}",
            (stats.sessions, stats.messages, stats.parts)
        ));
    }
    Ok(())
}
