//! What a turn holds open, typed: a text or reasoning block is one of two part bodies,
//! a tool call is pending, running or waiting for approval. A map entry is always one
//! of these, so no decision has to re-match a generic part on its body.

use serde_json::Value;

use crate::id::{MessageId, PartId, SessionId};
use crate::model::{
    JsonMap, Part, PartBody, ReasoningPart, TextPart, ToolPart, ToolPending, ToolRunning, ToolState,
};

/// An open text or reasoning block; its text accumulates the deltas.
#[derive(Clone, Debug)]
pub(super) struct OpenBlock {
    pub(super) id: PartId,
    pub(super) body: BlockBody,
}

/// The body of an open block.
#[derive(Clone, Debug)]
pub(super) enum BlockBody {
    Text(TextPart),
    Reasoning(ReasoningPart),
}

impl BlockBody {
    /// The block's `type`, as the stream's event names spell it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Reasoning(_) => "reasoning",
        }
    }

    /// The provider metadata the part keeps.
    pub(super) fn metadata_mut(&mut self) -> &mut Option<Value> {
        match self {
            Self::Text(t) => &mut t.metadata,
            Self::Reasoning(r) => &mut r.metadata,
        }
    }

    pub(super) fn text_mut(&mut self) -> &mut String {
        match self {
            Self::Text(t) => &mut t.text,
            Self::Reasoning(r) => &mut r.text,
        }
    }

    fn into_part_body(self) -> PartBody {
        match self {
            Self::Text(t) => PartBody::Text(t),
            Self::Reasoning(r) => PartBody::Reasoning(r),
        }
    }
}

impl OpenBlock {
    /// The block as a part of message `message_id`.
    pub(super) fn into_part(self, session_id: &SessionId, message_id: &MessageId) -> Part {
        Part {
            id: self.id,
            session_id: session_id.clone(),
            message_id: message_id.clone(),
            body: self.body.into_part_body(),
        }
    }
}

/// A tool call's part apart from its state: identity and fields.
///
/// The message is the one that made the call: a call waiting for approval may come
/// from an earlier message of the session, and its part stays there.
#[derive(Clone, Debug)]
pub(super) struct ToolHead {
    pub(super) id: PartId,
    pub(super) session_id: SessionId,
    pub(super) message_id: MessageId,
    pub(super) call_id: String,
    pub(super) tool: String,
    pub(super) metadata: Option<Value>,
    pub(super) extra: JsonMap,
}

impl ToolHead {
    /// The call's part in `state`.
    pub(super) fn into_part(self, state: ToolState) -> Part {
        Part {
            id: self.id,
            session_id: self.session_id,
            message_id: self.message_id,
            body: PartBody::Tool(ToolPart {
                call_id: self.call_id,
                tool: self.tool,
                state,
                metadata: self.metadata,
                extra: self.extra,
            }),
        }
    }

    /// A stored tool part that waits for approval, split into its head and running
    /// state; `None` for any other part.
    pub(super) fn waiting(part: Part) -> Option<(Self, ToolRunning)> {
        let PartBody::Tool(tool) = part.body else {
            return None;
        };
        if !tool.awaits_approval() {
            return None;
        }
        let ToolState::Running(running) = tool.state else {
            return None;
        };
        let head = Self {
            id: part.id,
            session_id: part.session_id,
            message_id: part.message_id,
            call_id: tool.call_id,
            tool: tool.tool,
            metadata: tool.metadata,
            extra: tool.extra,
        };
        Some((head, running))
    }
}

/// A tool call that has not ended.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub(super) head: ToolHead,
    pub(super) state: CallState,
}

/// Where a call that has not ended is.
#[derive(Clone, Debug)]
pub(super) enum CallState {
    /// Its input is streaming: open work.
    Pending(ToolPending),
    /// It was made and executes: open work.
    Running(ToolRunning),
    /// Running with `metadata.approval.status = "requested"`: it waits for the user and
    /// is not open work, so finalize leaves it as it is.
    Awaiting(ToolRunning),
}

impl CallState {
    /// Whether finalize closes a call in this state.
    pub(super) fn is_open(&self) -> bool {
        matches!(self, Self::Pending(_) | Self::Running(_))
    }

    fn into_tool_state(self) -> ToolState {
        match self {
            Self::Pending(p) => ToolState::Pending(p),
            Self::Running(r) | Self::Awaiting(r) => ToolState::Running(r),
        }
    }
}

impl Call {
    /// The call's part as it stands.
    pub(super) fn into_part(self) -> Part {
        self.head.into_part(self.state.into_tool_state())
    }

    /// A copy of the call's part as it stands.
    pub(super) fn to_part(&self) -> Part {
        self.clone().into_part()
    }

    /// The approval id recorded on a call waiting for approval.
    pub(super) fn approval_id(&self) -> Option<&str> {
        match &self.state {
            CallState::Awaiting(r) => approval_id(r),
            _ => None,
        }
    }
}

/// `metadata.approval.id` of a running state.
pub(super) fn approval_id(running: &ToolRunning) -> Option<&str> {
    running
        .metadata
        .as_ref()
        .and_then(|m| m.get("approval"))
        .and_then(|a| a.get("id"))
        .and_then(Value::as_str)
}
