//! The per-session outbox: rows written but not committed (coalesced by row), and
//! events held back until the commit they wait for.

use std::collections::{HashMap, VecDeque};

use crate::error::{Error, SharedError};
use crate::event::{Envelope, SyncEvent};
use crate::id::{MessageId, PartId, SessionId};
use crate::tenant::TenantId;

pub(super) type SessionKey = (TenantId, SessionId);

/// The row a sync event writes, for coalescing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum RowKey {
    Message(MessageId),
    Part(PartId),
}

fn row_key(event: &SyncEvent) -> Option<RowKey> {
    match event {
        SyncEvent::MessageUpdated { info } => Some(RowKey::Message(info.id.clone())),
        SyncEvent::PartUpdated { part } => Some(RowKey::Part(part.id.clone())),
        _ => None,
    }
}

/// An event waiting to be published; a terminal one also waits for its commit.
pub(super) struct Held {
    pub(super) event: crate::event::BusEvent,
    pub(super) terminal: bool,
    /// When it arrived (ms on the projector's clock), for terminal events.
    pub(super) arrived: i64,
}

#[derive(Default)]
pub(super) struct Outbox {
    /// Written but not yet committed, coalesced by row, in the order rows were first
    /// written.
    pub(super) pending: Vec<Envelope<SyncEvent>>,
    /// The seq that first wrote each `pending` slot since it was last committed.
    first: Vec<u64>,
    rows: HashMap<RowKey, usize>,
    /// Not yet publishable, in seq order.
    pub(super) held: VecDeque<Held>,
    /// The highest seq committed.
    pub(super) committed: u64,
    /// The highest seq taken by the flush in flight.
    pub(super) in_flight: u64,
    /// The highest seq dropped by a failed commit.
    pub(super) lost: u64,
    /// The error of the commit that dropped `lost`, for later calls waiting on it.
    pub(super) lost_error: Option<SharedError>,
    /// The highest seq of a terminal event accepted.
    pub(super) terminal: u64,
    /// A failed commit of this session, reported on its next call.
    failed: Option<SharedError>,
}

impl Outbox {
    /// Records that the commit through `through` failed with `error`: what was not
    /// committed must not be published, and what was held behind it is dropped with it.
    pub(super) fn fail(&mut self, through: u64, error: &SharedError) {
        self.held.clear();
        self.lost = self.lost.max(through);
        self.lost_error = Some(error.clone());
        self.failed = Some(error.clone());
    }

    /// The failure not yet reported to this session, as the original error.
    pub(super) fn take_failure(&mut self) -> Option<Error> {
        self.failed.take().map(Error::Shared)
    }

    /// The error for a call waiting on `seq`, which a failed commit dropped: the
    /// commit's own error, so its kind (a backend failure, retryable or not) is kept.
    pub(super) fn lost_error(&self, session: &SessionId, seq: u64) -> Error {
        match &self.lost_error {
            Some(e) => Error::Shared(e.clone()),
            None => Error::conflict(format!(
                "the commit of session {session} holding seq {seq} failed"
            )),
        }
    }
    pub(super) fn push_pending(&mut self, env: Envelope<SyncEvent>, coalesced: &mut u64) {
        match row_key(&env.event) {
            Some(key) => {
                if let Some(&i) = self.rows.get(&key) {
                    self.pending[i] = env;
                    *coalesced += 1;
                } else {
                    self.rows.insert(key, self.pending.len());
                    self.first.push(env.seq);
                    self.pending.push(env);
                }
            }
            None => {
                // A remove or a session change: later writes must not move before it.
                self.rows.clear();
                self.first.push(env.seq);
                self.pending.push(env);
            }
        }
    }

    /// Takes the pending slots first written at or before `through` — a prefix, since
    /// slots are in first-write order — so every event up to `through` is committed
    /// (in its latest version). Later slots stay pending to coalesce further.
    pub(super) fn take_pending(&mut self, through: u64) -> Vec<Envelope<SyncEvent>> {
        let split = self.first.partition_point(|&f| f <= through);
        let rest = self.pending.split_off(split);
        let taken = std::mem::replace(&mut self.pending, rest);
        self.first.drain(..split);
        self.rows.clear();
        for (i, env) in self.pending.iter().enumerate() {
            match row_key(&env.event) {
                Some(key) => {
                    self.rows.insert(key, i);
                }
                None => self.rows.clear(),
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::processor::user_message;

    fn env(seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
        Envelope {
            tenant: TenantId::new("t").unwrap(),
            session_id: SessionId::generate(),
            seq,
            epoch: None,
            event,
        }
    }

    fn message(m: &Message) -> SyncEvent {
        SyncEvent::MessageUpdated { info: m.clone() }
    }

    /// Messages `a` and `b`, written to a new outbox as a, b, a at seqs 1 to 3; with how
    /// many writes coalesced.
    fn a_b_a() -> (Message, Message, Outbox, u64) {
        let a = user_message(SessionId::generate(), "a", 1);
        let b = user_message(SessionId::generate(), "b", 2);
        let mut o = Outbox::default();
        let mut coalesced = 0;
        for (seq, m) in [(1, &a), (2, &b), (3, &a)] {
            o.push_pending(env(seq, message(m)), &mut coalesced);
        }
        (a, b, o, coalesced)
    }

    #[test]
    fn rewrites_of_a_row_coalesce_into_its_first_slot() {
        let (_, _, o, coalesced) = a_b_a();
        assert_eq!(coalesced, 1);
        let seqs: Vec<_> = o.pending.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            [3, 2],
            "a's slot holds its latest write, in first-write order"
        );
    }

    #[test]
    fn a_remove_is_a_barrier_later_writes_do_not_move_before() {
        let a = user_message(SessionId::generate(), "a", 1);
        let mut o = Outbox::default();
        let mut coalesced = 0;
        o.push_pending(env(1, message(&a)), &mut coalesced);
        o.push_pending(
            env(
                2,
                SyncEvent::MessageRemoved {
                    session_id: a.session_id.clone(),
                    message_id: a.id.clone(),
                },
            ),
            &mut coalesced,
        );
        o.push_pending(env(3, message(&a)), &mut coalesced);
        assert_eq!(coalesced, 0);
        assert_eq!(o.pending.len(), 3);
    }

    #[test]
    fn take_pending_takes_the_slots_first_written_through_a_seq() {
        let (_, b, mut o, mut coalesced) = a_b_a();
        let taken: Vec<_> = o.take_pending(1).iter().map(|e| e.seq).collect();
        assert_eq!(taken, [3], "slot of seq 1, in its latest version");
        assert_eq!(o.pending.len(), 1);
        // b still coalesces after the take.
        o.push_pending(env(4, message(&b)), &mut coalesced);
        assert_eq!(o.pending.len(), 1);
        assert_eq!(o.pending[0].seq, 4);
    }
}
