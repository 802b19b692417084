//! One session's conversation as a stream of items, and the driver that feeds it to
//! the [`Processor`](crate::Processor).
//!
//! An [`Item`] is what a session does at one moment — a user message, opening an
//! assistant message, a model [`StreamEvent`](crate::StreamEvent), a crash marker (and
//! the session line and unknown event types a recorded stream may hold) — and a
//! [`Timed`] item carries its event time, when known. A replay file parses into them
//! (`forge_store::replay`), and the benchmark's workloads are made of them.
//!
//! A [`TurnDriver`] owns one session's open assistant message and applies items:
//!
//! - A **user** item is written as one batch: the message (agent and model default to
//!   the previous user message's; the first: agent [`DEFAULT_AGENT`], no model) and its
//!   parts (text, then `parts`, then a compaction part whose `@ref` tail is resolved).
//!   Its checks (an unknown `@ref`, bad parts, a `ref` used twice) run before anything
//!   is written or closed.
//! - A user or **assistant** item while an answer is open closes that answer first: one
//!   that failed inside a step and waits for its `finish` is finalized as the stream
//!   meant it ([`Outcome::Finished`](crate::Outcome::Finished), keeping its error),
//!   any other as [`Outcome::Aborted`](crate::Outcome::Aborted).
//! - An assistant item answers the last user message. Provider, model and agent the item
//!   leaves out come from the [`Answerer`]: the answered user message's (a replay), or
//!   fixed ones (a workload).
//! - A **stream event** goes to the open answer's Processor. With none open, one is
//!   opened as for an assistant item without fields — except for a `finish` right after
//!   a finished answer, which is refused (it would store an empty answer). A stream event
//!   with no user message to answer is refused. The event that ends the answer
//!   (`finish`, `error`, `abort`) closes it.
//! - A **crash** item drops the open answer without finalize: what is open stays open
//!   in the store. Session items and unknown types do nothing (the driver is made for
//!   its session).
//! - **Event times** are an option ([`TurnOptions::event_time`]): when set, before each
//!   timed item the Processor's clock is set to the item's time (messages are created at
//!   it too) and a group-commit projector's clock is advanced there, so commit windows
//!   are judged on the stream's own timing and nothing sleeps. When unset, times are
//!   ignored and the Processor's own clock runs.
//!
//! A refused item (`InvalidInput`) writes nothing and leaves the driver as it was, so a
//! caller may skip it and go on — except a stream event that opened an answer
//! implicitly and was then refused by the Processor: the opened answer stays. The
//! driver never finalizes on its own at the end: the caller decides how an answer left
//! open ends ([`TurnDriver::finalize`], [`TurnDriver::close_failed`],
//! [`TurnDriver::crash`]). A caller with checks of its own (replay names the line of a
//! refused one) uses the single steps: [`TurnDriver::write_user`],
//! [`TurnDriver::open_assistant`], [`TurnDriver::open_message`], [`TurnDriver::event`].

use std::sync::Arc;

use crate::group::GroupCommitProjector;
use crate::id::MessageId;
use crate::model::ModelRef;
use crate::processor::{Flow, ProcessorOptions};

mod driver;
mod item;
#[cfg(test)]
mod tests;

pub use driver::TurnDriver;
pub use item::{AssistantItem, CompactionItem, Item, Refs, SessionItem, Timed, UserItem};

/// The agent a user message names when neither it nor an earlier one does.
pub const DEFAULT_AGENT: &str = "build";

/// The user message an assistant message answers: its id, agent and model.
#[derive(Clone, Debug, PartialEq)]
pub struct LastUser {
    /// Its id.
    pub id: MessageId,
    /// Its agent.
    pub agent: String,
    /// Its model, if it names one.
    pub model: Option<ModelRef>,
}

/// Who an assistant message says answered, for the fields its item leaves out.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Answerer {
    /// The answered user message's model (`unknown` without one) and agent.
    #[default]
    User,
    /// This provider and model, and no agent: every answer of a workload alike.
    Fixed {
        /// Provider.
        provider_id: String,
        /// Model.
        model_id: String,
    },
}

impl Answerer {
    /// [`Answerer::Fixed`] with this provider and model.
    pub fn fixed(provider_id: impl Into<String>, model_id: impl Into<String>) -> Self {
        Self::Fixed {
            provider_id: provider_id.into(),
            model_id: model_id.into(),
        }
    }
}

/// Event times honoured: before each timed item the Processor's clock is set to
/// `epoch_ms + t_ms`, and a group-commit projector's clock is moved there.
#[derive(Clone, Debug)]
pub struct EventTime {
    /// The clock at `t_ms = 0`, Unix ms (also the clock before the first timed item).
    pub epoch_ms: i64,
    /// Moved with [`GroupCommitProjector::advance`] (its `FlushMode::Manual`), so commit
    /// windows are judged on event time.
    pub group: Option<Arc<GroupCommitProjector>>,
}

/// How a [`TurnDriver`] writes.
#[derive(Clone, Debug, Default)]
pub struct TurnOptions {
    /// Options of every Processor (its clock is replaced when `event_time` is set).
    pub processor: ProcessorOptions,
    /// Honour event times; `None`: the items' times are ignored.
    pub event_time: Option<EventTime>,
    /// The provider, model and agent of an answer its item does not name.
    pub answerer: Answerer,
}

/// What an item did.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// Nothing: a session item (the driver is made for its session) or an unknown type.
    Nothing,
    /// A user message was written.
    User(MessageId),
    /// An assistant message was opened.
    Opened(MessageId),
    /// The open answer's Processor handled a stream event.
    Event(Flow),
    /// The open answer was dropped without finalize.
    Crash,
}
