//! Reopen: what a backend keeps survives closing it and opening it again, as a
//! restarted process does ([`crate::BackendFactory::reopen`]).
//!
//! A case writes a random history — upsert/remove batches over small id pools (as
//! [`super::upsert`]) in one tenant, and in another a model turn cut mid-stream and
//! crashed (as [`super::crash`]: processor and projector dropped, nothing finalized) —
//! then closes the backend (bus flushed, store and bus dropped) and opens it again:
//! - every per-session seq continues: the projector's scope on the reopened store starts
//!   at or above every seq the store applied — and every seq the bus published, when the
//!   bus outlives the restart ([`crate::BackendFactory::reopen_bus`]) — and a new commit
//!   of every session gets a seq above all of them, which the store then shows;
//! - a bus that outlives the restart still knows the last seq published;
//! - the store equals the reference model, and shows the crashed turn exactly as before
//!   the close (messages, parts, session, open items);
//! - `recover` on the reopened store closes the turn exactly as on a twin that was never
//!   closed: a second fresh backend, the same stream and cut, the same crash, recovered
//!   with a bus in the same state (the twin's own when the bus outlives a restart, else a
//!   fresh one) — the same report, history and session, and nothing left open.
//!
//! Skipped when the factory cannot reopen (an in-memory backend) — and failed when it
//! cannot but the store declares `durable: true`: durability claimed is durability
//! checked.

use std::sync::Arc;

use forge_core::{
    read_all, recover, Bus, DirectProjector, Envelope, Projector, SessionId, SessionState, Store,
    StreamEvent, SyncEvent, TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::turn::Turn;
use super::{crash, upsert};
use crate::harness::{ctx_err, env, same, CaseRun, Ctx};
use crate::reference::{sorted, ReferenceStore};
use crate::report::Outcome;
use crate::strategies::model::T0;
use crate::Property;

/// When recover runs, on the reopened store and on the twin.
const RECOVER_AT: i64 = T0 + 1_000_000;

/// A case: a history of upserts, then a turn crashed mid-stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Batches applied straight to the store, in one tenant.
    pub history: upsert::Case,
    /// The stream of a turn in another tenant and where it is cut; it always ends in a
    /// crash.
    pub turn: crash::Case,
    /// Batches over the same ids applied after the first reopen (removals and
    /// overwrites of what was written before it); the store is then closed and opened a
    /// second time.
    #[serde(default)]
    pub after: upsert::Case,
}

/// Any case; with `transactions == false` every history batch holds one event.
pub fn case(transactions: bool) -> impl Strategy<Value = Case> {
    (
        upsert::case(transactions),
        crash::case(true),
        upsert::case(transactions),
    )
        .prop_map(|(history, turn, after)| Case {
            history,
            turn,
            after,
        })
}

/// How many events of the turn's stream are fed before the crash: the case's share,
/// or right after one of its tool openings (so tools are often left pending).
fn cut_of(turn: &crash::Case, events: &[StreamEvent]) -> usize {
    let openings: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            matches!(
                e,
                StreamEvent::ToolInputStart { .. } | StreamEvent::ToolCall { .. }
            )
        })
        .map(|(i, _)| i + 1)
        .collect();
    match turn.cut_after_tool {
        Some(k) if !openings.is_empty() => openings[usize::from(k) % openings.len()],
        _ => crash::fed_events(events.len(), turn.cut),
    }
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let probe = ctx.block_with(async {
        let b = ctx.backend().await?;
        Ok(ctx.reopen(b).await?.map(|r| r.bus_kept))
    });
    let bus_kept = match probe {
        Ok(Some(kept)) => kept,
        // A store that claims durability must let the suite check it.
        Ok(None) if ctx.caps.store.durable => {
            return not_run(Outcome::Failed {
                message: format!(
                    "the store declares `durable: true`, but its {}; implement \
                     BackendFactory::reopen, or declare `durable: false`",
                    cannot(ctx)
                ),
                minimal: None,
                regression: None,
            })
        }
        Ok(None) => {
            return not_run(Outcome::Skipped {
                reason: cannot(ctx),
            })
        }
        Err(e) => {
            return not_run(Outcome::Failed {
                message: format!("reopening a fresh backend failed: {e}"),
                minimal: None,
                regression: None,
            })
        }
    };
    let transactions = ctx.caps.store.transactions;
    let mut run =
        crate::harness::run_cases(ctx, Property::Reopen, case(transactions), |c| check(ctx, c));
    if !bus_kept {
        run = run.note(
            "the bus does not outlive a restart (BackendFactory::reopen_bus): seqs checked \
             against the store, recover on a fresh bus",
        );
    }
    if !transactions {
        run = run.note("the store declares transactions = false: one-event history batches");
    }
    run
}

fn not_run(outcome: Outcome) -> CaseRun {
    CaseRun {
        outcome,
        cases: 0,
        large_cases: 0,
        shrink_steps: 0,
        notes: Vec::new(),
    }
}

fn cannot(ctx: &Ctx<'_>) -> String {
    format!(
        "factory `{}` cannot reopen a store (BackendFactory::reopen returns None): nothing \
         outlives the handle",
        ctx.factory.name()
    )
}

/// What the turn's session showed before the close.
#[derive(Debug, PartialEq, Serialize)]
struct TurnState {
    session: Option<SessionState>,
    history: Vec<forge_core::MessageWithParts>,
    open_messages: Vec<forge_core::Message>,
    open_parts: Vec<forge_core::Part>,
}

async fn turn_state(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<TurnState, String> {
    let open = sorted(
        store
            .open_items(tenant, Some(session))
            .await
            .map_err(ctx_err("open_items(session)"))?,
    );
    Ok(TurnState {
        session: store
            .session(tenant, session)
            .await
            .map_err(ctx_err("session()"))?,
        history: read_all(store, tenant, session, 1000)
            .await
            .map_err(ctx_err("read_all"))?,
        open_messages: open.messages,
        open_parts: open.parts,
    })
}

impl TurnState {
    /// The state with part ids replaced by their position in their message: a processor
    /// draws fresh part ids, so two runs of one stream differ only there.
    fn positional(mut self) -> Self {
        let mut ids = std::collections::HashMap::new();
        for m in &mut self.history {
            for (i, p) in m.parts.iter_mut().enumerate() {
                let id = forge_core::PartId::from(format!("prt_{}_{i}", m.info.id));
                ids.insert(std::mem::replace(&mut p.id, id.clone()), id);
            }
        }
        for p in &mut self.open_parts {
            if let Some(id) = ids.get(&p.id) {
                p.id = id.clone();
            }
        }
        self
    }
}

/// Starts a turn in `tenant`, feeds the first `cut` events, and crashes: processor and
/// projector are dropped without finalizing, so nothing of them holds the store after.
async fn crashed_turn(
    store: &Arc<dyn Store>,
    bus: &Arc<dyn Bus>,
    tenant: TenantId,
    events: &[StreamEvent],
) -> Result<SessionId, String> {
    let (projector, mut turn) = Turn::start(Arc::clone(store), Arc::clone(bus), tenant).await?;
    for (k, e) in events.iter().enumerate() {
        turn.driver
            .event(e.clone())
            .await
            .map_err(ctx_err(format!("event #{k} {}", e.kind())))?;
    }
    let session = turn.session.clone();
    drop(turn);
    drop(projector);
    Ok(session)
}

/// Applies the history to the store and the model; both must accept or reject alike.
async fn write_history(
    store: &dyn Store,
    tenant: &TenantId,
    model: &mut ReferenceStore,
    history: &upsert::Case,
    ids: upsert::Ids,
) -> Result<(), String> {
    for (n, batch) in history.batches.iter().enumerate() {
        let envs = batch.envelopes(tenant, ids);
        let expected = model.apply(&envs);
        let actual = store.apply(&envs).await;
        if expected.is_ok() != actual.is_ok() {
            return Err(format!(
                "history batch #{n} {:?}: the contract says {expected:?}, the store {} \
                 (the upsert property shows more)",
                batch.ops,
                actual.map_or_else(
                    |e| format!("rejected it: {} {e}", e.kind()),
                    |()| "accepted it".into()
                )
            ));
        }
    }
    Ok(())
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let events = case.turn.stream.events();
        let events = &events[..cut_of(&case.turn, &events)];

        // Before: the history, the crashed turn, and every seq handed out.
        let b = ctx.backend().await?;
        let (hist, turn_tenant) = (b.tenant(), b.tenant());
        let mut model = ReferenceStore::new();
        write_history(
            b.store.as_ref(),
            &hist,
            &mut model,
            &case.history,
            case.history.ids,
        )
        .await?;
        let bus = b.bus_or_local();
        let session = crashed_turn(&b.store, &bus, turn_tenant.clone(), events).await?;
        bus.flush().await.map_err(ctx_err("flushing the bus"))?;
        let published = bus
            .last_seq(&turn_tenant, &session)
            .await
            .map_err(ctx_err("bus last_seq before the close"))?;
        drop(bus);
        let before = turn_state(b.store.as_ref(), &turn_tenant, &session).await?;

        // Close and open again.
        let Some(reopened) = ctx.reopen(b).await? else {
            return Err(format!("skipped: {}", cannot(ctx)));
        };
        let bus_kept = reopened.bus_kept;
        let b = reopened.backend;
        let bus = b.bus_or_local();
        if bus_kept {
            let now = bus
                .last_seq(&turn_tenant, &session)
                .await
                .map_err(ctx_err("bus last_seq after reopen"))?;
            if now != published {
                return Err(format!(
                    "the reopened bus says the last seq published in the turn's session is \
                     {now:?}; before the close it was {published:?}"
                ));
            }
        }

        // Removals and overwrites of what the first life wrote, then a second restart:
        // nothing removed comes back, no index keeps what its row lost.
        write_history(
            b.store.as_ref(),
            &hist,
            &mut model,
            &case.after,
            case.history.ids,
        )
        .await?;
        upsert::compare(
            b.store.as_ref(),
            &hist,
            case.history.ids,
            &model,
            &ctx.stats,
        )
        .await
        .map_err(|e| format!("after reopen and more batches: {e}"))?;
        let Some(reopened) = ctx.reopen(b).await? else {
            return Err(format!("skipped: {}", cannot(ctx)));
        };
        let b = reopened.backend;
        drop(bus);
        let bus = b.bus_or_local();
        upsert::compare(
            b.store.as_ref(),
            &hist,
            case.history.ids,
            &model,
            &ctx.stats,
        )
        .await
        .map_err(|e| format!("after a second reopen, following more batches: {e}"))?;

        // Seqs continue: every scope starts at or above everything handed out before.
        let projector = DirectProjector::new(Arc::clone(&b.store), Arc::clone(&bus));
        let mut floors: Vec<(TenantId, SessionId, u64)> = model
            .sessions(&hist)
            .into_iter()
            .map(|s| (hist.clone(), s.info.id, s.seq))
            .collect();
        let turn_seq = before.session.as_ref().map_or(0, |s| s.seq);
        let turn_floor = if bus_kept {
            turn_seq.max(published.unwrap_or(0))
        } else {
            turn_seq
        };
        floors.push((turn_tenant.clone(), session.clone(), turn_floor));
        for (tenant, id, floor) in &floors {
            let scope = projector
                .scope(tenant, id)
                .await
                .map_err(ctx_err(format!("scope({id}) after reopen")))?;
            if scope.last_seq() < *floor {
                return Err(format!(
                    "after reopen the scope of session {id} starts after seq {}, but seq \
                     {floor} was already used before the close: seqs would be reused",
                    scope.last_seq()
                ));
            }
        }

        // The store kept everything.
        upsert::compare(
            b.store.as_ref(),
            &hist,
            case.history.ids,
            &model,
            &ctx.stats,
        )
        .await
        .map_err(|e| format!("after reopen: {e}"))?;
        let after = turn_state(b.store.as_ref(), &turn_tenant, &session).await?;
        same("after reopen, the crashed turn", &before, &after)?;

        // Recover on the reopened store, and on a twin that was never closed.
        let report = recover(&projector, &turn_tenant, Some(&session), RECOVER_AT)
            .await
            .map_err(ctx_err("recover after reopen"))?;
        let recovered = turn_state(b.store.as_ref(), &turn_tenant, &session).await?;
        if !recovered.open_messages.is_empty() || !recovered.open_parts.is_empty() {
            return Err(format!(
                "recover after reopen left things open: {} message(s), {} part(s)",
                recovered.open_messages.len(),
                recovered.open_parts.len()
            ));
        }
        let twin = ctx.backend().await?;
        let twin_tenant = twin.tenant();
        let twin_bus = twin.bus_or_local();
        crashed_turn(&twin.store, &twin_bus, twin_tenant.clone(), events).await?;
        let recover_bus = if bus_kept {
            twin_bus
        } else {
            drop(twin_bus);
            ctx.fresh_bus().await?
        };
        let twin_projector = DirectProjector::new(Arc::clone(&twin.store), recover_bus);
        let twin_report = recover(&twin_projector, &twin_tenant, Some(&session), RECOVER_AT)
            .await
            .map_err(ctx_err("recover on the twin never closed"))?;
        let twin_state = turn_state(twin.store.as_ref(), &twin_tenant, &session).await?;
        same(
            "recover after reopen vs on a store never closed: the report",
            &twin_report,
            &report,
        )?;
        same(
            "recover after reopen vs on a store never closed: the turn (part ids by position)",
            &twin_state.positional(),
            &recovered.positional(),
        )?;

        // A new commit in every session gets a seq above everything before.
        for (tenant, id, floor) in &floors {
            let state = b
                .store
                .session(tenant, id)
                .await
                .map_err(ctx_err(format!("session({id})")))?
                .ok_or_else(|| format!("session {id} is gone after reopen"))?;
            let floor = (*floor).max(state.seq);
            let scope = projector
                .scope(tenant, id)
                .await
                .map_err(ctx_err(format!("scope({id})")))?;
            let event = SyncEvent::SessionUpdated { info: state.info };
            let seq = projector
                .commit(&scope, vec![event.clone()])
                .await
                .map_err(ctx_err(format!("a commit in session {id} after reopen")))?;
            if seq <= floor {
                return Err(format!(
                    "a commit in session {id} after reopen got seq {seq}, but seq {floor} was \
                     already used: a seq was reused"
                ));
            }
            if tenant == &hist {
                let applied: Vec<Envelope<SyncEvent>> = vec![env(tenant, seq, event)];
                model
                    .apply(&applied)
                    .map_err(|r| format!("the model rejected a session update: {r:?}"))?;
            } else {
                let stored = b
                    .store
                    .session(tenant, id)
                    .await
                    .map_err(ctx_err("session()"))?
                    .map(|s| s.seq);
                same(
                    &format!("session({id}).seq after a commit with seq {seq}"),
                    &Some(seq),
                    &stored,
                )?;
                if bus_kept {
                    bus.flush().await.map_err(ctx_err("flushing the bus"))?;
                    let last = bus
                        .last_seq(tenant, id)
                        .await
                        .map_err(ctx_err("last_seq"))?;
                    same(
                        &format!("bus last_seq({id}) after a commit with seq {seq}"),
                        &Some(seq),
                        &last,
                    )?;
                }
            }
        }
        upsert::compare(
            b.store.as_ref(),
            &hist,
            case.history.ids,
            &model,
            &ctx.stats,
        )
        .await
        .map_err(|e| format!("after reopen and a new commit per session: {e}"))?;

        drop(twin_projector);
        drop(projector);
        b.cleanup().await;
        twin.cleanup().await;
        Ok(())
    })
}
