//! Flushing: committing a group in one transaction (each session alone after a
//! failure), publishing what a commit releases, and waiting for a commit.

use std::time::Duration;

use tracing::Instrument;

use super::options::HISTOGRAM_MS;
use super::outbox::{Held, Outbox, SessionKey};
use super::{FlushMode, GroupCommitProjector, State};
use crate::error::{Error, Result, SharedError};
use crate::event::{BusEvent, Envelope, SyncEvent};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flush {
    /// The open group, if its window has passed.
    Due,
    /// The open group, now.
    Now,
    /// Everything pending in every session, now.
    All,
}

impl GroupCommitProjector {
    /// Applies `batch` to the store in the span `span` makes; an empty batch is not
    /// applied (and has no span).
    async fn apply_batch(
        &self,
        batch: &[Envelope<SyncEvent>],
        span: impl FnOnce() -> tracing::Span,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.store.apply(batch).instrument(span()).await
    }

    /// [`FlushMode::Manual`]: moves the event-time clock to `now_ms` (never backwards)
    /// and commits the open group if its window has passed. The group counts as
    /// committed at its deadline, as a timer would have fired then.
    ///
    /// # Errors
    /// When the group and a session's retry fail: the store's error of the first failed
    /// session ([`Error::Shared`]: its kind and retryability are the store's, so a lost
    /// connection is never mistaken for bad input). Each failed session also reports its
    /// own store error on its next call.
    pub async fn advance(&self, now_ms: i64) -> Result<()> {
        let due = {
            let mut state = self.state.lock();
            state.now = state.now.max(now_ms);
            state
                .group
                .as_ref()
                .is_some_and(|g| g.deadline <= state.now)
        };
        if !due {
            return Ok(());
        }
        self.flush(Flush::Due).await.map_or(Ok(()), Err)
    }

    /// Commits and publishes the open group when `how` says so. Each failed session
    /// keeps its own error for its next call; the returned error is the first one.
    pub(super) async fn flush(&self, how: Flush) -> Option<Error> {
        let _flushing = self.flushing.lock().await;
        let (at, all, batches) = {
            let mut state = self.state.lock();
            let now = self.now_locked(&state);
            let deadline = match (&state.group, how) {
                (None, Flush::All) => now,
                (None, _) => return None,
                (Some(g), Flush::Due) if g.deadline > now => return None,
                (Some(g), Flush::Due) => g.deadline,
                (Some(g), Flush::All | Flush::Now) => g.deadline.min(now),
            };
            let mut members = state.group.take().map(|g| g.members).unwrap_or_default();
            if how == Flush::All {
                members = state
                    .sessions
                    .iter()
                    .filter(|(_, o)| !o.pending.is_empty() || !o.held.is_empty())
                    .map(|(k, _)| k.clone())
                    .collect();
                members.sort();
            }
            // In event time the group is stamped at its deadline, when a timer would
            // have fired.
            let at = match self.options.flush {
                FlushMode::Manual => deadline,
                FlushMode::Timer => now,
            };
            // One batch of every member's rows; each member's span of it is kept for a
            // retry on its own.
            let mut all = Vec::new();
            let mut batches = Vec::with_capacity(members.len());
            for key in members {
                if let Some(o) = state.sessions.get_mut(&key) {
                    // A group commits its sessions through their last terminal event;
                    // `sync` commits everything.
                    let through = if how == Flush::All {
                        o.pending
                            .iter()
                            .map(|e| e.seq)
                            .max()
                            .unwrap_or(0)
                            .max(o.terminal)
                    } else {
                        o.terminal
                    };
                    let start = all.len();
                    all.extend(o.take_pending(through));
                    o.in_flight = through;
                    batches.push((key, start..all.len(), through));
                }
            }
            (at, all, batches)
        };
        if batches.is_empty() {
            return None;
        }
        let rows = all.len() as u64;
        let group = self
            .apply_batch(&all, || {
                tracing::debug_span!(
                    "apply_batch",
                    projector = "group",
                    sessions = batches.len(),
                    rows,
                )
            })
            .await;
        let mut first_error = None;
        if let Err(e) = group {
            tracing::warn!(
                sessions = batches.len(),
                rows,
                error = &e as &(dyn std::error::Error + 'static),
                "group commit failed; retrying each session alone",
            );
        } else {
            let mut state = self.state.lock();
            state.stats.commits += u64::from(!all.is_empty());
            state.stats.rows += rows;
            if !all.is_empty() {
                metrics::histogram!(crate::metrics::GROUP_BATCHES).record(batches.len() as f64);
            }
            for (key, _, through) in &batches {
                self.committed(&mut state, key, *through, at);
            }
            return None;
        }
        // One session's bad batch must not fail the others: retry each alone.
        for (key, range, through) in batches {
            let pending = &all[range];
            let outcome = self
                .apply_batch(pending, || {
                    tracing::debug_span!(
                        "apply_batch",
                        projector = "group",
                        tenant = %key.0,
                        session = %key.1,
                        rows = pending.len(),
                        retry = true,
                    )
                })
                .await;
            let mut state = self.state.lock();
            match outcome {
                Ok(()) => {
                    state.stats.commits += u64::from(!pending.is_empty());
                    state.stats.rows += pending.len() as u64;
                    self.committed(&mut state, &key, through, at);
                }
                Err(e) => {
                    tracing::warn!(
                        tenant = %key.0,
                        session = %key.1,
                        through,
                        error = &e as &(dyn std::error::Error + 'static),
                        "commit of session failed; its uncommitted events are dropped",
                    );
                    if let Some(o) = state.sessions.get_mut(&key) {
                        // The session's next call gets the error itself; the flush's
                        // caller and later waiters get it as their source.
                        let e = SharedError::new(e);
                        o.fail(through, &e);
                        if first_error.is_none() {
                            first_error = Some(Error::Shared(e));
                        }
                    }
                }
            }
        }
        first_error
    }

    /// Records that `key` is committed through `through` and publishes what that
    /// releases, in order.
    fn committed(&self, state: &mut State, key: &SessionKey, through: u64, at: i64) {
        let State {
            sessions, stats, ..
        } = state;
        let Some(o) = sessions.get_mut(key) else {
            return;
        };
        o.committed = o.committed.max(through);
        while let Some(front) = o.held.front() {
            if front.terminal && front.event.seq > o.committed {
                break;
            }
            let Some(h) = o.held.pop_front() else { break };
            if h.terminal {
                stats.terminal_batches += 1;
                let delay = usize::try_from((at - h.arrived).max(0))
                    .unwrap_or(HISTOGRAM_MS)
                    .min(HISTOGRAM_MS);
                stats.delay_histogram[delay] += 1;
                metrics::histogram!(crate::metrics::PUBLISH_DELAY_SECONDS)
                    .record((at - h.arrived).max(0) as f64 / 1000.0);
            }
            // A publish failure (a closed bus) must not undo the commit; the bus
            // reports it to its own subscribers.
            let seq = h.event.seq;
            if let Err(e) = self.bus.publish(h.event) {
                tracing::warn!(
                    tenant = %key.0,
                    session = %key.1,
                    seq,
                    error = &e as &(dyn std::error::Error + 'static),
                    "publish after commit failed; the event is committed but not published",
                );
            }
        }
    }

    /// Publishes `event` now if nothing of its session is held, else queues it.
    pub(super) fn publish_or_hold(&self, o: &mut Outbox, event: BusEvent) -> Result<()> {
        if o.held.is_empty() {
            self.bus.publish(event)
        } else {
            o.held.push_back(Held {
                event,
                terminal: false,
                arrived: 0,
            });
            Ok(())
        }
    }

    pub(super) async fn wait_for(&self, key: &SessionKey, seq: u64) -> Result<()> {
        loop {
            let deadline = {
                let mut state = self.state.lock();
                let o = state.sessions.entry(key.clone()).or_default();
                if let Some(e) = o.take_failure() {
                    return Err(e);
                }
                if o.committed >= seq {
                    return Ok(());
                }
                if o.lost >= seq {
                    return Err(o.lost_error(&key.1, seq));
                }
                let in_flight = o.in_flight >= seq;
                let now = self.now_locked(&state);
                if in_flight {
                    None
                } else {
                    state.group.as_ref().map(|g| g.deadline - now)
                }
            };
            match deadline {
                Some(wait) if wait > 0 => {
                    tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
                }
                Some(_) => {
                    // Our own failure, if any, is picked up above.
                    let _ = self.flush(Flush::Due).await;
                }
                // Our batch is in a flush in flight: wait for that flush to finish.
                None => drop(self.flushing.lock().await),
            }
        }
    }
}
