//! `recover`: close what a crashed process left open.

use std::collections::BTreeMap;

use tracing::Instrument;

use crate::close;
use crate::error::Result;
use crate::event::{BusEvent, Envelope, Event, SyncEvent};
use crate::id::{PartId, SessionId};
use crate::model::{MessageError, Part};
use crate::projector::Projector;
use crate::tenant::TenantId;

/// The error recorded on an assistant message closed by `recover`.
pub const RECOVERED_MESSAGE: &str =
    "The process ended before this answer finished; closed by recover.";

/// What `recover` changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoverReport {
    /// Sessions that had something open.
    pub sessions: usize,
    /// Text/reasoning parts closed.
    pub blocks_closed: usize,
    /// Of those, how many got their text rebuilt from the durable bus.
    pub text_from_bus: usize,
    /// Tools moved to `error`.
    pub tools_closed: usize,
    /// Assistant messages given `time.completed`.
    pub messages_closed: usize,
    /// Sync events found published on the durable bus but not in the store (a
    /// [`GroupCommitProjector`](crate::group::GroupCommitProjector) publishes
    /// non-terminal writes before their commit) and applied before closing.
    pub events_replayed: usize,
    /// Sync events committed again and published because the durable bus lacked them:
    /// the writer died (or its bus gave up) between a commit and its publish. Every
    /// projector following the bus then ends equal to the store.
    pub events_republished: usize,
}

impl RecoverReport {
    /// Whether anything was closed.
    pub fn is_empty(&self) -> bool {
        self.sessions == 0 && self.events_replayed == 0 && self.events_republished == 0
    }
}

/// Rebuilds a part's text from retained bus events: the text of the part's last
/// `message.part.updated` (empty at its creation; the stored text when recover
/// republished it) followed by the deltas after it. `None` when no update of the part
/// is retained (the deltas may be incomplete), so the caller keeps what the store has.
fn text_from_events(events: &[crate::event::BusEvent], part: &PartId) -> Option<String> {
    let (last, base) = events
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, e)| match &e.event {
            Event::Sync(SyncEvent::PartUpdated { part: p }) if &p.id == part => {
                Some((i, block_text(p).unwrap_or_default().to_owned()))
            }
            _ => None,
        })?;
    let mut text = base;
    for e in &events[last..] {
        if let Event::PartDelta(d) = &e.event {
            if &d.part_id == part {
                text.push_str(&d.delta);
            }
        }
    }
    Some(text)
}

/// The text of a text or reasoning part.
fn block_text(p: &Part) -> Option<&str> {
    match &p.body {
        crate::model::PartBody::Text(t) => Some(&t.text),
        crate::model::PartBody::Reasoning(r) => Some(&r.text),
        _ => None,
    }
}

/// Closes every open part and message of `tenant` (or only of `session`) as finalize
/// would, after a crash.
///
/// Text and reasoning parts get the best confirmed content: on a durable bus, the
/// concatenation of the part's streamed deltas (when the bus still holds the part's
/// creation); otherwise the stored text. Tools become errors; assistant messages get
/// `time.completed` and a `MessageAbortedError` unless they already carry an error.
/// One commit per session. Idempotent: a second run finds nothing open and writes
/// nothing.
///
/// On a durable bus, recover first brings store and bus together: events the bus holds
/// beyond the store's `seq` are applied to the store, and when the store is ahead of
/// the bus (a commit whose publish never happened), what the bus lacks is committed
/// and published again (see `reconcile`). Everything recover writes is committed
/// through `projector` and so published like any other event: every projector that
/// follows the bus sees it.
pub async fn recover(
    projector: &dyn Projector,
    tenant: &TenantId,
    session: Option<&SessionId>,
    now: i64,
) -> Result<RecoverReport> {
    let span = tracing::info_span!(
        "recover",
        tenant = %tenant,
        session = session.map(tracing::field::display),
    );
    let report = close_open(projector, tenant, session, now)
        .instrument(span.clone())
        .await?;
    if !report.is_empty() {
        span.in_scope(|| {
            tracing::info!(
                sessions = report.sessions,
                blocks_closed = report.blocks_closed,
                text_from_bus = report.text_from_bus,
                tools_closed = report.tools_closed,
                messages_closed = report.messages_closed,
                events_replayed = report.events_replayed,
                events_republished = report.events_republished,
                "recover closed what a crash left open",
            );
        });
    }
    Ok(report)
}

/// The work of [`recover`], inside its span.
async fn close_open(
    projector: &dyn Projector,
    tenant: &TenantId,
    session: Option<&SessionId>,
    now: i64,
) -> Result<RecoverReport> {
    let mut report = RecoverReport::default();
    let caps = projector.bus().capabilities();
    if caps.durable {
        report.events_replayed = replay_uncommitted(projector, tenant, session).await?;
        if caps.shared {
            report.events_republished =
                crate::reconcile::republish_missing(projector, tenant, session).await?;
        }
    }
    let open = projector.store().open_items(tenant, session).await?;
    let mut by_session: BTreeMap<SessionId, (Vec<_>, Vec<Part>)> = BTreeMap::new();
    for m in open.messages {
        by_session
            .entry(m.session_id.clone())
            .or_default()
            .0
            .push(m);
    }
    for p in open.parts {
        by_session
            .entry(p.session_id.clone())
            .or_default()
            .1
            .push(p);
    }
    let durable = projector.bus().capabilities().durable;
    for (sid, (messages, mut parts)) in by_session {
        let replay = if durable && parts.iter().any(is_block) {
            Some(projector.bus().replay(tenant, &sid, 1).await?)
        } else {
            None
        };
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        let mut events = Vec::with_capacity(parts.len() + messages.len());
        for mut part in parts {
            if is_block(&part) {
                let text = replay
                    .as_ref()
                    .and_then(|r| text_from_events(&r.events, &part.id));
                report.text_from_bus += usize::from(text.is_some());
                if close::close_block(&mut part, now, text) {
                    report.blocks_closed += 1;
                }
            } else if close::close_tool(&mut part, now) {
                report.tools_closed += 1;
            }
            events.push(SyncEvent::PartUpdated { part });
        }
        for mut m in messages {
            if close::close_message(&mut m, now, Some(MessageError::aborted(RECOVERED_MESSAGE))) {
                report.messages_closed += 1;
            }
            events.push(SyncEvent::MessageUpdated { info: m });
        }
        if events.is_empty() {
            continue;
        }
        let scope = projector.scope(tenant, &sid).await?;
        projector.commit(&scope, events).await?;
        report.sessions += 1;
    }
    Ok(report)
}

/// Applies the sync events a durable bus holds beyond each session's stored `seq`:
/// published, never committed. Sessions whose bus is not ahead of the store are not
/// replayed. Returns how many events were applied.
async fn replay_uncommitted(
    projector: &dyn Projector,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<usize> {
    let store = projector.store();
    let bus = projector.bus();
    sum_over_sessions(
        projector,
        tenant,
        session,
        |sid, stored, published| async move {
            if published.is_none_or(|l| l <= stored) {
                return Ok(0);
            }
            let replay = bus.replay(tenant, &sid, stored + 1).await?;
            let batch: Vec<Envelope<SyncEvent>> =
                replay.events.iter().filter_map(BusEvent::sync).collect();
            if batch.is_empty() {
                return Ok(0);
            }
            let span = tracing::debug_span!(
                "apply_batch",
                projector = "recover",
                tenant = %tenant,
                session = %sid,
                events = batch.len(),
            );
            store.apply(&batch).instrument(span).await?;
            Ok(batch.len())
        },
    )
    .await
}

/// Runs `each` on every session of `tenant` (or only `session`) with its stored `seq`
/// and the last seq the projector's bus holds for it, one session after the other, and
/// sums what it returns.
pub(crate) async fn sum_over_sessions<F, Fut>(
    projector: &dyn Projector,
    tenant: &TenantId,
    session: Option<&SessionId>,
    mut each: F,
) -> Result<usize>
where
    F: FnMut(SessionId, u64, Option<u64>) -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    let bus = projector.bus();
    let mut sum = 0;
    for (sid, stored) in stored_seqs(projector.store().as_ref(), tenant, session).await? {
        let published = bus.last_seq(tenant, &sid).await?;
        sum += each(sid, stored, published).await?;
    }
    Ok(sum)
}

fn is_block(p: &Part) -> bool {
    matches!(
        p.body,
        crate::model::PartBody::Text(_) | crate::model::PartBody::Reasoning(_)
    )
}

/// Every session of `tenant` (or only `session`, when it exists) with its stored `seq`.
pub(crate) async fn stored_seqs(
    store: &dyn crate::store::Store,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<Vec<(SessionId, u64)>> {
    Ok(match session {
        Some(sid) => store
            .session(tenant, sid)
            .await?
            .map(|s| vec![(sid.clone(), s.seq)])
            .unwrap_or_default(),
        None => store
            .sessions(tenant)
            .await?
            .into_iter()
            .map(|s| (s.info.id.clone(), s.seq))
            .collect(),
    })
}
