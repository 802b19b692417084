//! Retention: deleting what a tenant's [`Retention`] policy no longer keeps.
//!
//! [`prune`] walks a tenant's sessions page by page and picks
//!
//! - sessions idle longer than [`Retention::idle`] (idle: no change to the session row
//!   and no message created or completed since);
//! - the least recently active sessions beyond [`Retention::keep`];
//! - in the sessions it keeps, the history hidden behind the last successful compaction
//!   ([`crate::filter_compacted`]) once that compaction is older than
//!   [`Retention::compacted`]: the messages older than the compaction's boundary that the
//!   view does not keep as its tail. The compacted view does not change.
//!
//! Each session it acts on is first **claimed** ([`crate::fence`]) as a writer named
//! `forge-store-prune@host:pid`, then read again:
//!
//! - a session whose lease another writer holds is skipped (it is being written);
//! - a session with an open message or part is skipped (a turn may still close it);
//! - a session whose activity moved since the walk read it is skipped (it was written
//!   while prune ran).
//!
//! From the claim on, a write by anyone else is refused with [`Error::Fenced`] (its
//! epoch is not the current one), so what prune read stays true until it deletes. The
//! deletion is a series of transactions of at most [`PruneOptions::batch_messages`]
//! messages each, oldest first, then the session row: a writer waits for at most one of
//! them. Each is published on the bus (`message.removed`, `session.deleted`) as the
//! writer that deleted it would, so projected copies and subscribers follow. An
//! interrupted prune leaves a session shorter, never a message without its parts; the
//! next run finishes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bus::Bus;
use crate::error::{Error, ErrorKind, Result};
use crate::id::{MessageId, SessionId};
use crate::projector::{ClaimPolicy, DirectProjector, Projector, Scope};
use crate::read::filter_compacted;
use crate::stats::message_activity;
use crate::store::{Cursor, SessionState, Store, MAX_PAGE_LIMIT};
use crate::tenant::TenantId;
use crate::SyncEvent;

/// What a tenant keeps. Every field `None`: keep everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Retention {
    /// Delete sessions idle for longer than this.
    pub idle: Option<Duration>,
    /// Keep at most this many sessions: the most recently active.
    pub keep: Option<usize>,
    /// Drop the history behind a session's last successful compaction once the
    /// compaction is older than this.
    pub compacted: Option<Duration>,
}

impl Retention {
    /// Whether the policy removes anything at all.
    pub fn is_empty(&self) -> bool {
        self.idle.is_none() && self.keep.is_none() && self.compacted.is_none()
    }
}

/// How [`prune`] works.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Report what would be removed; remove nothing.
    pub dry_run: bool,
    /// The most messages one transaction removes (with their parts).
    pub batch_messages: usize,
    /// A pause after each transaction, so writers get the store between them.
    pub pause: Duration,
    /// "Now", Unix ms: ages are measured from it.
    pub now_ms: i64,
    /// The name prune claims sessions as.
    pub holder: String,
}

/// [`PruneOptions::batch_messages`] by default.
pub const DEFAULT_BATCH_MESSAGES: usize = 64;

impl Default for PruneOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            batch_messages: DEFAULT_BATCH_MESSAGES,
            pause: Duration::from_millis(1),
            now_ms: crate::id::now_ms(),
            holder: ClaimPolicy::holder_name("forge-store-prune"),
        }
    }
}

/// Why a session was removed or trimmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Idle for longer than [`Retention::idle`].
    Idle,
    /// Beyond [`Retention::keep`].
    OverLimit,
    /// History behind a compaction older than [`Retention::compacted`].
    Compacted,
}

/// One session prune removed or trimmed (or would, in a dry run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// The session.
    pub session: SessionId,
    /// Why.
    pub reason: Reason,
    /// Messages removed.
    pub messages: u64,
    /// Parts removed with them.
    pub parts: u64,
}

/// What [`prune`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Nothing was removed: these are what would have been.
    pub dry_run: bool,
    /// Sessions looked at.
    pub examined: u64,
    /// Sessions deleted (or that would be).
    pub sessions_deleted: u64,
    /// Sessions whose compacted history was dropped (or would be).
    pub sessions_trimmed: u64,
    /// Messages removed, in deleted and trimmed sessions.
    pub messages_removed: u64,
    /// Parts removed with them.
    pub parts_removed: u64,
    /// Skipped: another writer held the session.
    pub skipped_held: u64,
    /// Skipped: something in the session was open.
    pub skipped_open: u64,
    /// Skipped: the session was written while prune ran.
    pub skipped_written: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// The longest of them, µs: the longest a writer could have waited for prune.
    pub longest_transaction_us: u64,
    /// Each session acted on, in the order it was.
    pub pruned: Vec<Pruned>,
    /// Large values no row references any more, removed after the sessions
    /// ([`Store::sweep_blobs`]; nothing on a dry run).
    pub blobs: crate::blob::BlobSweep,
}

/// A session the walk picked, with the activity it read.
struct Candidate {
    id: SessionId,
    seen: Seen,
    reason: Reason,
}

/// What the walk read of a session: a write since changes one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// The highest seq applied to it.
    seq: u64,
    /// Its latest activity, Unix ms.
    activity: i64,
}

/// The latest activity in a session: its row's times, or its newest message's.
async fn activity(store: &dyn Store, tenant: &TenantId, s: &SessionState) -> Result<i64> {
    let newest = store.messages(tenant, &s.info.id, None, 1).await?;
    let mut at = s.info.time.updated.max(s.info.time.created);
    for m in &newest.messages {
        if let Some(t) = message_activity(m) {
            at = at.max(t);
        }
    }
    Ok(at)
}

/// `now - age` in Unix ms.
fn before(now_ms: i64, age: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
}

/// Applies `retention` to `tenant`: deletes the sessions it no longer keeps and the
/// compacted history it allows to drop, through `store`, publishing on `bus`.
///
/// # Errors
/// The store's or the bus's error; what was removed before it stays removed (the
/// report is lost with the error, the next run picks up where this one stopped).
pub async fn prune(
    store: &Arc<dyn Store>,
    bus: &Arc<dyn Bus>,
    tenant: &TenantId,
    retention: &Retention,
    opts: &PruneOptions,
) -> Result<PruneReport> {
    let mut report = PruneReport {
        dry_run: opts.dry_run,
        ..PruneReport::default()
    };
    if retention.is_empty() {
        return Ok(report);
    }
    let idle_before = retention.idle.map(|d| before(opts.now_ms, d));
    // Walk: every session once; activity is read for those the policy may remove.
    let mut ranked: Vec<(Seen, SessionId)> = Vec::new();
    let mut delete: Vec<Candidate> = Vec::new();
    let mut keep_ids: Vec<SessionId> = Vec::new();
    let mut after: Option<SessionId> = None;
    loop {
        let page = store
            .sessions_after(tenant, after.as_ref(), MAX_PAGE_LIMIT)
            .await?;
        for s in &page.sessions {
            report.examined += 1;
            let row = s.info.time.updated.max(s.info.time.created);
            // A session row changed after the cut-off is active; only those before it
            // (or all, to rank them) need their newest message read.
            let maybe_idle = idle_before.is_some_and(|cut| row < cut);
            let at = if maybe_idle || retention.keep.is_some() {
                activity(store.as_ref(), tenant, s).await?
            } else {
                row
            };
            let seen = Seen {
                seq: s.seq,
                activity: at,
            };
            if idle_before.is_some_and(|cut| at < cut) {
                delete.push(Candidate {
                    id: s.info.id.clone(),
                    seen,
                    reason: Reason::Idle,
                });
            } else {
                ranked.push((seen, s.info.id.clone()));
            }
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    // The most recently active first; ties by id, so a run is repeatable.
    ranked.sort_by(|a, b| b.0.activity.cmp(&a.0.activity).then_with(|| a.1.cmp(&b.1)));
    let keep = retention.keep.unwrap_or(usize::MAX);
    for (i, (seen, id)) in ranked.into_iter().enumerate() {
        if i >= keep {
            delete.push(Candidate {
                id,
                seen,
                reason: Reason::OverLimit,
            });
        } else {
            keep_ids.push(id);
        }
    }
    let pruner = Pruner {
        projector: DirectProjector::with_claims(
            Arc::clone(store),
            Arc::clone(bus),
            ClaimPolicy::holder(opts.holder.clone()),
        ),
        store: store.as_ref(),
        tenant,
        opts,
    };
    for c in delete {
        pruner.delete(&c, &mut report).await?;
    }
    if let Some(age) = retention.compacted {
        let cut = before(opts.now_ms, age);
        for id in keep_ids {
            pruner.trim(&id, cut, &mut report).await?;
        }
    }
    if !opts.dry_run {
        report.blobs = store.sweep_blobs(tenant).await?;
        record(&report);
    }
    Ok(report)
}

/// Adds a finished run to the prune metrics ([`crate::metrics`]).
fn record(r: &PruneReport) {
    use crate::metrics as m;
    metrics::counter!(m::PRUNE_RUNS).increment(1);
    metrics::counter!(m::PRUNE_SESSIONS).increment(r.sessions_deleted);
    metrics::counter!(m::PRUNE_TRIMMED).increment(r.sessions_trimmed);
    metrics::counter!(m::PRUNE_MESSAGES).increment(r.messages_removed);
    metrics::counter!(m::PRUNE_BLOBS).increment(r.blobs.deleted);
    for (why, n) in [
        ("held", r.skipped_held),
        ("open", r.skipped_open),
        ("written", r.skipped_written),
    ] {
        metrics::counter!(m::PRUNE_SKIPPED, "why" => why).increment(n);
    }
    metrics::gauge!(m::PRUNE_LONGEST_SECONDS).set(r.longest_transaction_us as f64 / 1e6);
}

/// What prune does to one session at a time.
struct Pruner<'a> {
    projector: DirectProjector,
    store: &'a dyn Store,
    tenant: &'a TenantId,
    opts: &'a PruneOptions,
}

/// What a claimed session turned out to be.
enum Checked {
    /// Still as the walk read it.
    Same(Scope),
    /// Not to be touched (counted in the report).
    Skip,
}

impl Pruner<'_> {
    /// Claims `id` and reads it again: [`Checked::Same`] when its seq and activity are
    /// still `seen` and nothing in it is open.
    async fn claim(&self, id: &SessionId, seen: Seen, report: &mut PruneReport) -> Result<Checked> {
        let scope = if self.opts.dry_run {
            None
        } else {
            match self.projector.scope(self.tenant, id).await {
                Ok(s) => Some(s),
                Err(e) if e.kind() == ErrorKind::Held => {
                    report.skipped_held += 1;
                    return Ok(Checked::Skip);
                }
                Err(e) => return Err(e),
            }
        };
        let verdict = self.recheck(id, seen, report).await;
        match (verdict, scope) {
            (Ok(true), Some(scope)) => Ok(Checked::Same(scope)),
            (Ok(true), None) => Ok(Checked::Same(Scope::new(
                self.tenant.clone(),
                id.clone(),
                0,
            ))),
            (Ok(false), scope) => {
                if let Some(scope) = scope {
                    self.projector.release_scope(scope).await?;
                }
                Ok(Checked::Skip)
            }
            (Err(e), scope) => {
                if let Some(scope) = scope {
                    let _ = self.projector.release_scope(scope).await;
                }
                Err(e)
            }
        }
    }

    /// Whether `id` is still there, untouched since `seen`, with nothing open.
    async fn recheck(&self, id: &SessionId, seen: Seen, report: &mut PruneReport) -> Result<bool> {
        let Some(state) = self.store.session(self.tenant, id).await? else {
            return Ok(false);
        };
        let now = Seen {
            seq: state.seq,
            activity: activity(self.store, self.tenant, &state).await?,
        };
        if now != seen {
            report.skipped_written += 1;
            return Ok(false);
        }
        if !self
            .store
            .open_items(self.tenant, Some(id))
            .await?
            .is_empty()
        {
            report.skipped_open += 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// Commits `events` in `scope`, timing the transaction, then pauses.
    async fn commit(
        &self,
        scope: &Scope,
        events: Vec<SyncEvent>,
        report: &mut PruneReport,
    ) -> Result<()> {
        let t = Instant::now();
        self.projector.commit(scope, events).await?;
        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        report.transactions += 1;
        report.longest_transaction_us = report.longest_transaction_us.max(us);
        if !self.opts.pause.is_zero() {
            tokio::time::sleep(self.opts.pause).await;
        }
        Ok(())
    }

    /// Removes `ids` (oldest first) in transactions of at most `batch_messages`.
    async fn remove(
        &self,
        scope: &Scope,
        ids: &[MessageId],
        report: &mut PruneReport,
    ) -> Result<()> {
        for chunk in ids.chunks(self.opts.batch_messages.max(1)) {
            let events = chunk
                .iter()
                .map(|m| SyncEvent::MessageRemoved {
                    session_id: scope.session_id.clone(),
                    message_id: m.clone(),
                })
                .collect();
            self.commit(scope, events, report).await?;
        }
        Ok(())
    }

    /// Deletes a session the walk picked, unless it changed.
    async fn delete(&self, c: &Candidate, report: &mut PruneReport) -> Result<()> {
        let Checked::Same(scope) = self.claim(&c.id, c.seen, report).await? else {
            return Ok(());
        };
        let done = async {
            let (ids, parts) = message_ids(self.store, self.tenant, &c.id, None).await?;
            if !self.opts.dry_run {
                self.remove(&scope, &ids, report).await?;
                let deleted = SyncEvent::SessionDeleted {
                    session_id: c.id.clone(),
                };
                self.commit(&scope, vec![deleted], report).await?;
            }
            report.sessions_deleted += 1;
            Ok::<_, Error>((ids.len() as u64, parts))
        }
        .await;
        self.finish(scope, c.id.clone(), c.reason, done, report)
            .await
    }

    /// Drops the history behind the last successful compaction of `id` when that
    /// compaction is older than `cut`.
    async fn trim(&self, id: &SessionId, cut: i64, report: &mut PruneReport) -> Result<()> {
        // Cheap test first, without a claim: is there an old enough boundary with
        // something behind it?
        let Some(hidden) = self.hidden(id, cut).await? else {
            return Ok(());
        };
        if hidden.is_empty() {
            return Ok(());
        }
        // What the session is now, before the claim: the walk may not have read its
        // newest message.
        let Some(state) = self.store.session(self.tenant, id).await? else {
            return Ok(());
        };
        let seen = Seen {
            seq: state.seq,
            activity: activity(self.store, self.tenant, &state).await?,
        };
        let Checked::Same(scope) = self.claim(id, seen, report).await? else {
            return Ok(());
        };
        let done = async {
            // Read again under the claim: what is hidden now is what goes.
            let hidden = self.hidden(id, cut).await?.unwrap_or_default();
            let mut parts = 0;
            let mut ids = Vec::with_capacity(hidden.len());
            for (m, n) in hidden {
                ids.push(m);
                parts += n;
            }
            if !self.opts.dry_run {
                self.remove(&scope, &ids, report).await?;
            }
            if !ids.is_empty() {
                report.sessions_trimmed += 1;
            }
            Ok::<_, Error>((ids.len() as u64, parts))
        }
        .await;
        self.finish(scope, id.clone(), Reason::Compacted, done, report)
            .await
    }

    /// Records what was done to `session` and lets go of its claim.
    async fn finish(
        &self,
        scope: Scope,
        session: SessionId,
        reason: Reason,
        done: Result<(u64, u64)>,
        report: &mut PruneReport,
    ) -> Result<()> {
        let released = if self.opts.dry_run {
            Ok(())
        } else {
            self.projector.release_scope(scope).await
        };
        let (messages, parts) = done?;
        released?;
        if messages > 0 || reason != Reason::Compacted {
            report.messages_removed += messages;
            report.parts_removed += parts;
            report.pruned.push(Pruned {
                session,
                reason,
                messages,
                parts,
            });
        }
        Ok(())
    }

    /// The messages of `id` the compacted view hides behind a boundary older than
    /// `cut`, oldest first, each with its part count; `None` when there is no such
    /// boundary.
    async fn hidden(&self, id: &SessionId, cut: i64) -> Result<Option<Vec<(MessageId, u64)>>> {
        let view = filter_compacted(self.store, self.tenant, id).await?;
        let Some(boundary) = view.boundary.as_ref() else {
            return Ok(None);
        };
        let Some(at) = view.messages.iter().find(|m| &m.info.id == boundary) else {
            return Ok(None);
        };
        if at.info.created().is_none_or(|t| t >= cut) {
            return Ok(None);
        }
        let shown: std::collections::HashSet<&MessageId> =
            view.messages.iter().map(|m| &m.info.id).collect();
        let mut out = Vec::new();
        let mut cursor = Some(Cursor::before(boundary.clone()));
        while let Some(c) = cursor {
            let page = self
                .store
                .messages(self.tenant, id, Some(&c), MAX_PAGE_LIMIT)
                .await?;
            for m in page.messages.iter().rev() {
                if !shown.contains(&m.info.id) {
                    out.push((m.info.id.clone(), m.parts.len() as u64));
                }
            }
            cursor = page.next;
        }
        out.reverse();
        Ok(Some(out))
    }
}

/// Every message id of a session below `before` (all when `None`), oldest first, and
/// how many parts they hold.
async fn message_ids(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    before: Option<Cursor>,
) -> Result<(Vec<MessageId>, u64)> {
    let mut ids = Vec::new();
    let mut parts = 0;
    let mut cursor = before;
    loop {
        let page = store
            .messages(tenant, session, cursor.as_ref(), MAX_PAGE_LIMIT)
            .await?;
        for m in page.messages.iter().rev() {
            ids.push(m.info.id.clone());
            parts += m.parts.len() as u64;
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    ids.reverse();
    Ok((ids, parts))
}
