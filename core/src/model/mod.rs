//! The data model: sessions, messages (the envelope) and parts (the segments inside).
//!
//! The serde form is the JSON shape of the opencode agent's API and exports: camelCase
//! ids (`sessionID`, `messageID`, …), `role` on messages, `type` on parts, `status` on
//! tool states, times in Unix milliseconds. Every struct keeps the fields it does not
//! know in an `extra` map, and a part of an unknown `type` is kept whole, so data
//! written by a newer version survives a read-modify-write unchanged.

mod message;
pub(crate) mod num;
pub(crate) use num::whole_u64_opt;
mod part;
mod session;

pub use message::{
    AssistantMessage, AssistantTime, ErrorData, ErrorName, Message, MessageBody, MessageError,
    ModelRef, PathInfo, UserMessage, UserTime,
};
pub use part::{
    AgentPart, CacheTokens, CompactionPart, FilePart, Part, PartBody, PartTime, PatchPart,
    ReasoningPart, RetryPart, RetryTime, SnapshotPart, SourcePart, StepFinishPart, StepStartPart,
    SubtaskPart, TextPart, Tokens, ToolCompleted, ToolError, ToolPart, ToolPending, ToolRunning,
    ToolState, ToolTime, ToolTimeEnded, APPROVAL_REQUESTED, KNOWN_PART_KINDS,
};
pub use session::{Session, SessionTime};

/// A JSON object, used for unknown fields and free-form metadata.
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

/// A message with its parts in part-id order: the unit pages and views are made of.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MessageWithParts {
    /// The message envelope.
    pub info: Message,
    /// Its parts, ordered by id.
    pub parts: Vec<Part>,
}

pub(crate) fn take_string(
    map: &mut JsonMap,
    key: &str,
    what: &str,
) -> std::result::Result<String, String> {
    match map.remove(key) {
        Some(serde_json::Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "{what}: field `{key}` must be a string, got {other}"
        )),
        None => Err(format!("{what}: missing field `{key}`")),
    }
}
