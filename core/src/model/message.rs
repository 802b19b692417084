use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::num::f64_js;
use super::part::Tokens;
use super::{write_enveloped, Head, JsonMap};
use crate::id::{MessageId, SessionId};

/// A message: the envelope of one user turn or one assistant answer.
///
/// JSON: `{"id", "sessionID", "role": "user"|"assistant", …}`. A message of an unknown
/// role is kept whole in [`MessageBody::Unknown`].
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// Message id (`msg_…`).
    pub id: MessageId,
    /// The session it belongs to.
    pub session_id: SessionId,
    /// Role-specific fields.
    pub body: MessageBody,
}

/// The role-specific part of a [`Message`].
#[derive(Clone, Debug, PartialEq)]
pub enum MessageBody {
    /// `role: "user"`.
    User(UserMessage),
    /// `role: "assistant"`.
    Assistant(AssistantMessage),
    /// A role this version does not know; every field is kept.
    Unknown {
        /// The `role` value.
        role: String,
        /// All other fields.
        fields: JsonMap,
    },
}

/// A user message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// Times.
    pub time: UserTime,
    /// The agent that handles it.
    #[serde(default)]
    pub agent: String,
    /// The model to answer with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// A system prompt override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tool toggles by tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Map<String, Value>>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A user message's times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserTime {
    /// Unix milliseconds.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub created: i64,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A provider/model pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRef {
    /// Provider, e.g. `anthropic`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Model, e.g. `claude-sonnet-4`.
    #[serde(rename = "modelID")]
    pub model_id: String,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// An assistant message: one answer, possibly several model steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Times; `completed` is unset while the answer is open.
    pub time: AssistantTime,
    /// Why the answer failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<MessageError>,
    /// The user message this answers.
    #[serde(rename = "parentID")]
    pub parent_id: MessageId,
    /// Model id.
    #[serde(rename = "modelID", default)]
    pub model_id: String,
    /// Provider id.
    #[serde(rename = "providerID", default)]
    pub provider_id: String,
    /// The agent that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Working directory and project root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathInfo>,
    /// This message is a compaction summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<bool>,
    /// Accumulated cost.
    #[serde(default, serialize_with = "f64_js")]
    pub cost: f64,
    /// Token usage.
    #[serde(default)]
    pub tokens: Tokens,
    /// The finish reason of the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// Unknown fields (`mode`, `system`, …), kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// An assistant message's times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantTime {
    /// When the answer started.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub created: i64,
    /// When it was closed; unset while open.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::num::whole_i64_opt"
    )]
    pub completed: Option<i64>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `{cwd, root}` of an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathInfo {
    /// Working directory.
    pub cwd: String,
    /// Project root.
    pub root: String,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Why an assistant message failed: `{"name": "MessageAbortedError", "data": {"message": …}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageError {
    /// The kind.
    pub name: ErrorName,
    /// Details.
    #[serde(default)]
    pub data: ErrorData,
}

/// The error kinds of [`MessageError`], with their JSON names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorName {
    /// `MessageAbortedError`.
    Aborted,
    /// `MessageOutputLengthError`.
    OutputLength,
    /// `APIError`.
    Api,
    /// `ProviderAuthError`.
    Auth,
    /// `ContextOverflowError`.
    ContextOverflow,
    /// `UnknownError`.
    Unknown,
    /// A name this version does not know, kept verbatim.
    Other(String),
}

impl ErrorName {
    /// The JSON name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Aborted => "MessageAbortedError",
            Self::OutputLength => "MessageOutputLengthError",
            Self::Api => "APIError",
            Self::Auth => "ProviderAuthError",
            Self::ContextOverflow => "ContextOverflowError",
            Self::Unknown => "UnknownError",
            Self::Other(s) => s,
        }
    }

    /// The name for a JSON name (`Other` for one this version does not know).
    pub fn parse(s: String) -> Self {
        match s.as_str() {
            "MessageAbortedError" => Self::Aborted,
            "MessageOutputLengthError" => Self::OutputLength,
            "APIError" => Self::Api,
            "ProviderAuthError" => Self::Auth,
            "ContextOverflowError" => Self::ContextOverflow,
            "UnknownError" => Self::Unknown,
            _ => Self::Other(s),
        }
    }
}

impl fmt::Display for ErrorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::parse)
    }
}

/// The `data` of a [`MessageError`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorData {
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Unknown fields (`statusCode`, `isRetryable`, `providerID`, …), kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl MessageError {
    /// An error of the given kind with a message.
    pub fn new(name: ErrorName, message: impl Into<String>) -> Self {
        Self {
            name,
            data: ErrorData {
                message: Some(message.into()),
                extra: JsonMap::new(),
            },
        }
    }

    /// `MessageAbortedError` with a message.
    pub fn aborted(message: impl Into<String>) -> Self {
        Self::new(ErrorName::Aborted, message)
    }
}

impl Message {
    /// The assistant fields, if this is an assistant message.
    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match &self.body {
            MessageBody::Assistant(a) => Some(a),
            _ => None,
        }
    }

    /// The assistant fields, mutably.
    pub fn as_assistant_mut(&mut self) -> Option<&mut AssistantMessage> {
        match &mut self.body {
            MessageBody::Assistant(a) => Some(a),
            _ => None,
        }
    }

    /// Whether this is a user message.
    pub fn is_user(&self) -> bool {
        matches!(self.body, MessageBody::User(_))
    }

    /// The `role` string.
    pub fn role(&self) -> &str {
        match &self.body {
            MessageBody::User(_) => "user",
            MessageBody::Assistant(_) => "assistant",
            MessageBody::Unknown { role, .. } => role,
        }
    }

    /// Creation time in Unix milliseconds, when known.
    pub fn created(&self) -> Option<i64> {
        match &self.body {
            MessageBody::User(u) => Some(u.time.created),
            MessageBody::Assistant(a) => Some(a.time.created),
            MessageBody::Unknown { fields, .. } => fields
                .get("time")
                .and_then(|t| t.get("created"))
                .and_then(Value::as_i64),
        }
    }

    /// An assistant message that has not been closed (`time.completed` unset).
    pub fn is_open(&self) -> bool {
        self.as_assistant()
            .is_some_and(|a| a.time.completed.is_none())
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let body = match &self.body {
            MessageBody::User(u) => serde_json::to_value(u),
            MessageBody::Assistant(a) => serde_json::to_value(a),
            MessageBody::Unknown { fields, .. } => Ok(Value::Object(fields.clone())),
        };
        let head = [
            ("id", self.id.to_string()),
            ("sessionID", self.session_id.to_string()),
            ("role", self.role().to_owned()),
        ];
        write_enveloped(s, head, body)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let Head {
            id,
            what,
            fields: [session_id, role],
            body: map,
        } = Head::read(d, "message", ["sessionID", "role"])?;
        let ctx = |e: serde_json::Error| D::Error::custom(format!("{what} ({role}): {e}"));
        let body = match role.as_str() {
            "user" => MessageBody::User(serde_json::from_value(Value::Object(map)).map_err(ctx)?),
            "assistant" => {
                MessageBody::Assistant(serde_json::from_value(Value::Object(map)).map_err(ctx)?)
            }
            _ => MessageBody::Unknown {
                role: role.clone(),
                fields: map,
            },
        };
        Ok(Self {
            id: id.into(),
            session_id: session_id.into(),
            body,
        })
    }
}
