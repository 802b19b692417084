//! The data model: sessions, messages (the envelope) and parts (the segments inside).
//!
//! The serde form is the JSON shape of the opencode agent's API and exports: camelCase
//! ids (`sessionID`, `messageID`, …), `role` on messages, `type` on parts, `status` on
//! tool states, times in Unix milliseconds. Every struct keeps the fields it does not
//! know in an `extra` map, and a part of an unknown `type` is kept whole, so data
//! written by a newer version survives a read-modify-write unchanged.

use serde::{Deserialize as _, Serialize as _};

mod message;
pub(crate) mod num;
pub(crate) use num::whole_u64_opt;
mod part;
mod session;

pub use message::{
    AssistantMessage, AssistantTime, ErrorData, ErrorName, Message, MessageBody, MessageError,
    ModelRef, PathInfo, UserMessage, UserTime,
};
pub use part::split_output;
pub use part::{
    AgentPart, CacheTokens, CompactionPart, FilePart, Part, PartBody, PartTime, PatchPart,
    ReasoningPart, RetryPart, RetryTime, SnapshotPart, SourcePart, SteeringPart, StepFinishPart,
    StepStartPart, SubtaskPart, TextPart, Tokens, ToolCompleted, ToolError, ToolPart, ToolPending,
    ToolRunning, ToolState, ToolTime, ToolTimeEnded, APPROVAL_REQUESTED, KNOWN_PART_KINDS,
    OUTPUT_JSON, OUTPUT_KEYS,
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

fn take_string(map: &mut JsonMap, key: &str, what: &str) -> std::result::Result<String, String> {
    match map.remove(key) {
        Some(serde_json::Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "{what}: field `{key}` must be a string, got {other}"
        )),
        None => Err(format!("{what}: missing field `{key}`")),
    }
}

/// The head of an enveloped object (a message, a part): string fields `id`, the ids of
/// what holds it and its tag, written first, with the body's fields after them.
pub(crate) struct Head<const N: usize> {
    /// `id`.
    pub(crate) id: String,
    /// What errors call the object: `"{noun} {id}"`.
    pub(crate) what: String,
    /// The other head fields, in the order asked for.
    pub(crate) fields: [String; N],
    /// Every other field: the body's.
    pub(crate) body: JsonMap,
}

impl<const N: usize> Head<N> {
    /// Reads an object and takes `id` then `keys` out of it, each a string; errors name
    /// the object as `noun` (and its id, once known) and the field.
    pub(crate) fn read<'de, D: serde::Deserializer<'de>>(
        d: D,
        noun: &str,
        keys: [&str; N],
    ) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut body = JsonMap::deserialize(d)?;
        let id = take_string(&mut body, "id", noun).map_err(D::Error::custom)?;
        let what = format!("{noun} {id}");
        let mut fields = std::array::from_fn(|_| String::new());
        for (field, key) in fields.iter_mut().zip(keys) {
            *field = take_string(&mut body, key, &what).map_err(D::Error::custom)?;
        }
        Ok(Self {
            id,
            what,
            fields,
            body,
        })
    }
}

/// Writes an enveloped object (see [`Head`]): the `head` fields in order, then the
/// fields of `body`.
pub(crate) fn write_enveloped<S: serde::Serializer, const N: usize>(
    s: S,
    head: [(&str, String); N],
    body: serde_json::Result<serde_json::Value>,
) -> std::result::Result<S::Ok, S::Error> {
    let mut map = JsonMap::new();
    for (key, value) in head {
        map.insert(key.to_owned(), serde_json::Value::String(value));
    }
    if let serde_json::Value::Object(fields) = body.map_err(serde::ser::Error::custom)? {
        map.extend(fields);
    }
    map.serialize(s)
}
