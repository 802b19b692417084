//! Fencing: one writer per session, enforced by the store.
//!
//! A writer [claims](crate::Store::claim) a session before it writes and gets an
//! **epoch**, a fence token that grows by one with every claim of the session. Every
//! batch it writes carries that epoch ([`Envelope::epoch`](crate::Envelope::epoch)), and
//! the store refuses, in the batch's own transaction, a batch whose epoch is not the
//! session's current one. So once a claim returned epoch `e + 1`, no batch of epoch `e`
//! lands, however long its writer was paused.
//!
//! A claim also has a **lease**: until it runs out, a claim that does not take over is
//! refused with [`Error::Held`] naming the holder. The lease is what tells a second
//! writer that the first one is alive; the epoch is what keeps a writer that only
//! believes it holds the session from writing. Leases are judged on the claimer's clock
//! (`now_ms` of the request): a skewed clock can make a writer wait too long or take a
//! session too early, never make a stale batch land.
//!
//! The rules are pure functions here ([`decide`], [`check`]) so that every backend runs
//! the same decisions inside its own transaction, over its own copy of the record.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::SessionId;

/// The lease a writer asks for when it does not say: 30 seconds.
pub const DEFAULT_LEASE_MS: i64 = 30_000;

/// A session's fence record: its current epoch and who holds it until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The current epoch: 1 for the first claim, one more for each claim after it.
    pub epoch: u64,
    /// Who claimed it (a writer's name: `serve@host:pid`, `replay@host:pid`, …).
    pub holder: String,
    /// Unix ms until which the holder's lease runs; 0 once released.
    pub expires_ms: i64,
}

impl Claim {
    /// Whether the lease still runs at `now_ms`.
    pub fn held_at(&self, now_ms: i64) -> bool {
        self.expires_ms > now_ms
    }
}

/// What a claim does about a holder whose lease still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mode", content = "epoch")]
pub enum ClaimMode {
    /// Refused with [`Error::Held`] while another holder's lease runs. The same holder
    /// name claims again freely (a restarted writer takes its session back).
    Free,
    /// Taken whoever holds it: the holder's later batches are refused.
    TakeOver,
    /// Extends the lease of the claim with this epoch, which stays the epoch; refused
    /// with [`Error::Fenced`] when it is no longer the current one.
    Renew(u64),
}

/// A claim as a writer asks for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// The writer's name, reported to the writers it keeps out.
    pub holder: String,
    /// Free, take over, or renew.
    pub mode: ClaimMode,
    /// The claimer's clock, Unix ms: the lease runs from here.
    pub now_ms: i64,
    /// How long the lease runs, ms (at least 1).
    pub lease_ms: i64,
}

impl ClaimRequest {
    /// A [`ClaimMode::Free`] claim by `holder` at `now_ms` for [`DEFAULT_LEASE_MS`].
    pub fn new(holder: impl Into<String>, now_ms: i64) -> Self {
        Self {
            holder: holder.into(),
            mode: ClaimMode::Free,
            now_ms,
            lease_ms: DEFAULT_LEASE_MS,
        }
    }

    /// The same request with `mode`.
    #[must_use]
    pub fn mode(mut self, mode: ClaimMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same request with a lease of `lease_ms`.
    #[must_use]
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Checks the request itself: a holder name (1–256 bytes, no control characters)
    /// and a lease of at least 1 ms.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.holder.is_empty() || self.holder.len() > MAX_HOLDER_LEN {
            return Err(Error::invalid(format!(
                "a claim's holder name must be 1 to {MAX_HOLDER_LEN} bytes, got {}",
                self.holder.len()
            )));
        }
        if self.holder.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "a claim's holder name may not hold control characters: {:?}",
                self.holder
            )));
        }
        if self.lease_ms < 1 {
            return Err(Error::invalid(format!(
                "a claim's lease must be at least 1 ms, got {}",
                self.lease_ms
            )));
        }
        if let ClaimMode::Renew(0) = self.mode {
            return Err(Error::invalid("epoch 0 is never granted: nothing to renew"));
        }
        Ok(())
    }
}

/// The longest holder name a store keeps.
pub const MAX_HOLDER_LEN: usize = 256;

/// Decides a claim over the session's current record: the record to store, which is
/// also what the claimer gets. Backends call it inside the transaction that reads and
/// writes the record.
///
/// # Errors
/// [`Error::InvalidInput`] for a bad request; [`Error::Held`] when another holder's
/// lease runs and the mode is [`ClaimMode::Free`]; [`Error::Fenced`] when a renewal names
/// an epoch that is not the current one.
pub fn decide(session: &SessionId, current: Option<&Claim>, req: &ClaimRequest) -> Result<Claim> {
    req.validate()?;
    let expires_ms = req.now_ms.saturating_add(req.lease_ms);
    let epoch = current.map_or(0, |c| c.epoch);
    match req.mode {
        ClaimMode::Renew(e) => match current {
            Some(c) if c.epoch == e => Ok(Claim {
                epoch: e,
                holder: req.holder.clone(),
                expires_ms,
            }),
            _ => Err(Error::fenced(session, Some(e), current)),
        },
        ClaimMode::Free => match current {
            Some(c) if c.held_at(req.now_ms) && c.holder != req.holder => Err(Error::Held {
                session: session.to_string(),
                holder: c.holder.clone(),
                epoch: c.epoch,
                expires_ms: c.expires_ms,
            }),
            _ => next(session, epoch, req, expires_ms),
        },
        ClaimMode::TakeOver => next(session, epoch, req, expires_ms),
    }
}

fn next(session: &SessionId, epoch: u64, req: &ClaimRequest, expires_ms: i64) -> Result<Claim> {
    let epoch = epoch
        .checked_add(1)
        .ok_or_else(|| Error::invalid(format!("session {session} has used every epoch")))?;
    Ok(Claim {
        epoch,
        holder: req.holder.clone(),
        expires_ms,
    })
}

/// The record after releasing the claim with `epoch`: `None` when there is nothing to
/// change (the epoch is no longer current, or there is no record).
pub fn released(current: Option<&Claim>, epoch: u64) -> Option<Claim> {
    current.filter(|c| c.epoch == epoch).map(|c| Claim {
        expires_ms: 0,
        ..c.clone()
    })
}

/// Whether a batch's events for `session`, written with `epoch`, may be applied over
/// the session's current record. Backends call it inside the batch's transaction, once
/// per session the batch touches (with the epoch of that session's first event).
///
/// - A batch with an epoch is applied only when that epoch is the session's current one.
/// - A batch without one (an unfenced writer) is applied only to a session never
///   claimed.
///
/// # Errors
/// [`Error::Fenced`] naming the session, the batch's epoch and the current holder.
pub fn check(session: &SessionId, current: Option<&Claim>, epoch: Option<u64>) -> Result<()> {
    match (epoch, current) {
        (None, None) => Ok(()),
        (Some(e), Some(c)) if c.epoch == e => Ok(()),
        _ => Err(Error::fenced(session, epoch, current)),
    }
}

impl Error {
    /// An [`Error::Fenced`]: a write or renewal with `epoch` (`None`: unfenced) refused
    /// over the record `current`.
    pub fn fenced(session: &SessionId, epoch: Option<u64>, current: Option<&Claim>) -> Self {
        Self::Fenced {
            session: session.to_string(),
            epoch,
            current: current.map_or(0, |c| c.epoch),
            holder: current.map(|c| c.holder.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn s() -> SessionId {
        "ses_1".into()
    }

    fn claim(epoch: u64, holder: &str, expires_ms: i64) -> Claim {
        Claim {
            epoch,
            holder: holder.into(),
            expires_ms,
        }
    }

    #[test]
    fn epochs_grow_by_one_from_one() {
        let first = decide(&s(), None, &ClaimRequest::new("a", 0)).unwrap();
        assert_eq!(first.epoch, 1);
        assert_eq!(first.expires_ms, DEFAULT_LEASE_MS);
        let req = ClaimRequest::new("b", 0).mode(ClaimMode::TakeOver);
        assert_eq!(
            decide(&s(), Some(&claim(9, "a", 100)), &req).unwrap().epoch,
            10
        );
    }

    #[test]
    fn a_running_lease_keeps_others_out_but_not_its_holder() {
        let held = claim(3, "a", 100);
        let err = decide(&s(), Some(&held), &ClaimRequest::new("b", 99)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Held);
        assert!(err.to_string().contains("held by a"), "{err}");
        assert_eq!(
            decide(&s(), Some(&held), &ClaimRequest::new("a", 99))
                .unwrap()
                .epoch,
            4
        );
        assert_eq!(
            decide(&s(), Some(&held), &ClaimRequest::new("b", 100))
                .unwrap()
                .epoch,
            4
        );
    }

    #[test]
    fn renewal_keeps_the_epoch_and_fails_when_fenced() {
        let held = claim(3, "a", 100);
        let req = ClaimRequest::new("a", 50)
            .mode(ClaimMode::Renew(3))
            .lease_ms(10);
        assert_eq!(decide(&s(), Some(&held), &req).unwrap(), claim(3, "a", 60));
        let stale = ClaimRequest::new("a", 50).mode(ClaimMode::Renew(2));
        assert_eq!(
            decide(&s(), Some(&held), &stale).unwrap_err().kind(),
            ErrorKind::Fenced
        );
        assert_eq!(
            decide(&s(), None, &stale).unwrap_err().kind(),
            ErrorKind::Fenced
        );
    }

    #[test]
    fn batches_need_the_current_epoch() {
        let c = claim(10, "a", 100);
        check(&s(), Some(&c), Some(10)).unwrap();
        check(&s(), None, None).unwrap();
        for (current, epoch) in [
            (Some(&c), Some(9)),
            (Some(&c), Some(11)),
            (Some(&c), None),
            (None, Some(1)),
        ] {
            let err = check(&s(), current, epoch).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Fenced, "{current:?} {epoch:?}");
        }
        let err = check(&s(), Some(&c), Some(9)).unwrap_err().to_string();
        assert!(
            err.contains("epoch 9") && err.contains("epoch 10") && err.contains("claimed by a"),
            "{err}"
        );
    }

    #[test]
    fn release_ends_only_the_current_lease() {
        let c = claim(4, "a", 100);
        assert_eq!(released(Some(&c), 4), Some(claim(4, "a", 0)));
        assert_eq!(released(Some(&c), 3), None);
        assert_eq!(released(None, 1), None);
    }

    #[test]
    fn bad_requests_name_what_is_wrong() {
        for req in [
            ClaimRequest::new("", 0),
            ClaimRequest::new("x".repeat(MAX_HOLDER_LEN + 1), 0),
            ClaimRequest::new("a\nb", 0),
            ClaimRequest::new("a", 0).lease_ms(0),
            ClaimRequest::new("a", 0).mode(ClaimMode::Renew(0)),
        ] {
            assert_eq!(
                decide(&s(), None, &req).unwrap_err().kind(),
                ErrorKind::InvalidInput
            );
        }
    }
}
