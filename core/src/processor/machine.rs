//! The Processor's decisions as a state machine: [`Machine`] takes the turn's inputs
//! (the open message, stream events, finalize) and queues the [`Effect`]s that carry
//! them out. It does no I/O; its only clock is [`ProcessorOptions::clock`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

use crate::error::{Error, Result};
use crate::event::{Event, PartDelta, SyncEvent};
use crate::id::{PartId, SessionId};
use crate::model::{Message, MessageError, Part, PartBody};
use crate::stream::StreamEvent;

use super::inflight::{Call, OpenBlock};
use super::ProcessorOptions;

/// One thing the shell does for the machine, in the order [`Machine::poll`] gives them.
#[derive(Debug)]
pub enum Effect {
    /// Commit these rows as one batch (one store transaction, then their publish).
    /// The effects after it wait for it: if it fails, the shell performs none of them
    /// and the input fails with its error; once it succeeded, the shell calls
    /// [`Machine::committed`] before it goes on.
    Commit(Vec<SyncEvent>),
    /// Publish a delta on the bus; it is never stored. A failure fails the input.
    Delta(PartDelta),
    /// Publish a session status (bus only). It reports a commit that succeeded, so a
    /// failure to publish it is logged and does not fail the input.
    Status(Event),
}

/// A finalize whose batch committed, as [`Machine::committed`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// `finished`, `failed` or `aborted`.
    pub outcome: &'static str,
    /// How many open parts the batch closed.
    pub closed: usize,
}

/// What hangs on the input's commit: confirmed by [`Machine::committed`], undone by
/// the next input if the commit was never confirmed (it failed).
#[derive(Debug)]
pub(super) enum OnCommit {
    /// The block `text-start` / `reasoning-start` opened, by stream block id: it is in
    /// the open set already and leaves it again if its part was not committed.
    Open(String),
    /// Finalize: the turn is done once its batch committed.
    Finalized(Ended),
}

/// The decisions of one assistant message's turn, apart from their effects.
///
/// Drive it with one input at a time ([`Machine::handle`], [`Machine::finalize`]),
/// then take that input's effects with [`Machine::poll`] until it returns `None`,
/// confirming a successful commit with [`Machine::committed`]. A new input drops the
/// effects of the previous one that were not taken (those after a commit that failed)
/// and undoes what hung on a commit never confirmed. Used alone, with its effects
/// dropped, it answers whether events fit the stream without writing anything.
pub struct Machine {
    pub(super) session_id: SessionId,
    pub(super) message: Message,
    /// Open text/reasoning blocks by stream block id.
    pub(super) blocks: HashMap<String, OpenBlock>,
    /// Calls not ended, by call id: pending or running (open work), or waiting for
    /// approval (this message's, or an earlier one's once a response named it).
    pub(super) tools: HashMap<String, Call>,
    /// Every call id this message has seen (a result for one of them whose call has
    /// ended needs no store lookup: it comes too late). An id is used again only once
    /// its call has ended.
    pub(super) calls: HashSet<String>,
    /// A `start-step` is open (its `finish-step` has not come).
    pub(super) in_step: bool,
    /// An `error` inside a step, recorded on the message when `finish` closes it.
    pub(super) pending_error: Option<MessageError>,
    pub(super) opts: ProcessorOptions,
    pub(super) ignored: u64,
    pub(super) done: bool,
    effects: VecDeque<Effect>,
    pub(super) on_commit: Option<OnCommit>,
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("message", &self.message.id)
            .field("open_blocks", &self.blocks.len())
            .field("open_tools", &self.tools.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Machine {
    /// Starts the turn of `message` in `session_id`: queues the commit of the open
    /// message, then `session.status` busy.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `message` is not an open assistant message of
    /// `session_id`.
    pub fn new(session_id: SessionId, message: Message, opts: ProcessorOptions) -> Result<Self> {
        if !message.is_open() {
            return Err(Error::invalid(format!(
                "message {} must be an assistant message without time.completed",
                message.id
            )));
        }
        if message.session_id != session_id {
            return Err(Error::invalid(format!(
                "message {} belongs to session {}, not {}",
                message.id, message.session_id, session_id
            )));
        }
        let mut m = Self {
            session_id,
            message,
            blocks: HashMap::new(),
            tools: HashMap::new(),
            calls: HashSet::new(),
            in_step: false,
            pending_error: None,
            opts,
            ignored: 0,
            done: false,
            effects: VecDeque::new(),
            on_commit: None,
        };
        m.commit(vec![SyncEvent::MessageUpdated {
            info: m.message.clone(),
        }]);
        m.status(Event::status(&m.session_id, "busy"));
        Ok(m)
    }

    /// The next effect of the last input, in order.
    pub fn poll(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Reports that the last [`Effect::Commit`] succeeded: what hung on it holds (a
    /// new block stays open; finalize's turn is done). Returns what a finalize
    /// closed when that commit was its batch.
    pub fn committed(&mut self) -> Option<Ended> {
        match self.on_commit.take()? {
            OnCommit::Open(_) => None,
            OnCommit::Finalized(ended) => {
                self.done = true;
                Some(ended)
            }
        }
    }

    /// The assistant message as the machine last queued it.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The session it writes to.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// Whether the turn is finalized (its batch committed).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the stream reported an `error` inside a step and only its `finish-step`
    /// / `finish` may follow (see [`Processor::awaits_finish_after_error`](super::Processor::awaits_finish_after_error)).
    pub fn awaits_finish_after_error(&self) -> bool {
        self.pending_error.is_some()
    }

    /// Events accepted and deliberately not persisted so far.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// The call of an earlier message that `event` addresses and only the store can
    /// find: a `tool-result`, `tool-error` or `tool-output-denied` for a call this
    /// message has not seen, or a `tool-approval-response` that names such a call and
    /// matches no call of this message waiting for approval. The shell answers with
    /// that call's part if the session has it waiting for approval (see
    /// [`waiting_call`](super::waiting_call)), passed to [`Machine::handle`] with the
    /// event. `None`: the event needs nothing from the store.
    pub fn lookup<'e>(&self, event: &'e StreamEvent) -> Option<&'e str> {
        if self.done {
            return None;
        }
        match event {
            StreamEvent::ToolResult {
                tool_call_id,
                preliminary: false,
                ..
            }
            | StreamEvent::ToolError { tool_call_id, .. }
            | StreamEvent::ToolOutputDenied { tool_call_id, .. } => {
                let known =
                    self.tools.contains_key(tool_call_id) || self.calls.contains(tool_call_id);
                (!known).then_some(tool_call_id.as_str())
            }
            StreamEvent::ToolApprovalResponse {
                approval_id,
                tool_call: Some(call),
                ..
            } => {
                let id = call.tool_call_id.as_str();
                let local = self.awaiting_with(approval_id, Some(id)).is_some();
                (!local && !self.calls.contains(id)).then_some(id)
            }
            _ => None,
        }
    }

    /// Drops what the previous input left: the effects after a commit that failed,
    /// and what that commit's input did provisionally.
    pub(super) fn begin(&mut self) {
        self.effects.clear();
        if let Some(OnCommit::Open(id)) = self.on_commit.take() {
            self.blocks.remove(&id);
        }
    }

    pub(super) fn now(&self) -> i64 {
        (self.opts.clock)()
    }

    pub(super) fn commit(&mut self, rows: Vec<SyncEvent>) {
        self.effects.push_back(Effect::Commit(rows));
    }

    pub(super) fn commit_part(&mut self, part: Part) {
        self.commit(vec![SyncEvent::PartUpdated { part }]);
    }

    pub(super) fn delta(&mut self, delta: PartDelta) {
        self.effects.push_back(Effect::Delta(delta));
    }

    pub(super) fn status(&mut self, event: Event) {
        self.effects.push_back(Effect::Status(event));
    }

    pub(super) fn new_part(&self, body: PartBody) -> Part {
        Part {
            id: PartId::generate(),
            session_id: self.session_id.clone(),
            message_id: self.message.id.clone(),
            body,
        }
    }

    /// Records a new call id, or refuses one a call of this message still holds open
    /// (pending, running, or waiting for approval). An id whose call has ended may be
    /// used again: providers and gateways number calls per step (`call_0` in step 1
    /// and again in step 2), and each use is a call of its own, a part of its own.
    pub(super) fn new_call(&mut self, id: &str, what: &str) -> Result<()> {
        if self.tools.contains_key(id) {
            return Err(Error::invalid(format!(
                "{what} for call {id}, a call id this message holds open (a call ends with \
                 its result, error or denial before its id can be used again)"
            )));
        }
        self.calls.insert(id.to_owned());
        Ok(())
    }
}
