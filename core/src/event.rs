//! Events: every change is one. Sync events are persisted and published; bus-only
//! events (deltas, status) are published and never stored.
//!
//! JSON: `{"type": "message.part.updated", "properties": {"part": …}}`, the shape of the
//! opencode event stream.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{JsonMap, Message, Part, Session};
use crate::tenant::TenantId;

/// A change that is persisted by projection and then published on the bus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "properties")]
pub enum SyncEvent {
    /// Create or overwrite a session.
    #[serde(rename = "session.updated")]
    SessionUpdated {
        /// The session.
        info: Session,
    },
    /// Remove a session and everything under it.
    #[serde(rename = "session.deleted")]
    SessionDeleted {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
    },
    /// Create or overwrite a message (same id overwrites).
    #[serde(rename = "message.updated")]
    MessageUpdated {
        /// The message.
        info: Message,
    },
    /// Remove a message and its parts.
    #[serde(rename = "message.removed")]
    MessageRemoved {
        /// Its session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The message.
        #[serde(rename = "messageID")]
        message_id: MessageId,
    },
    /// Create or overwrite a part (same id overwrites).
    #[serde(rename = "message.part.updated", alias = "part.updated")]
    PartUpdated {
        /// The part.
        part: Part,
    },
    /// Remove a part.
    #[serde(rename = "message.part.removed", alias = "part.removed")]
    PartRemoved {
        /// Its session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Its message.
        #[serde(rename = "messageID")]
        message_id: MessageId,
        /// The part.
        #[serde(rename = "partID")]
        part_id: PartId,
    },
}

impl SyncEvent {
    /// The session this event is about.
    pub fn session_id(&self) -> &SessionId {
        match self {
            Self::SessionUpdated { info } => &info.id,
            Self::MessageUpdated { info } => &info.session_id,
            Self::PartUpdated { part } => &part.session_id,
            Self::SessionDeleted { session_id }
            | Self::MessageRemoved { session_id, .. }
            | Self::PartRemoved { session_id, .. } => session_id,
        }
    }

    /// Whether this event closes something a reader relies on: a text/reasoning block
    /// with `time.end`, a tool `completed`/`error`, a step-finish or patch, a completed
    /// message, a user message, and every session change and remove. The others — an
    /// empty block just opened, a tool `pending`/`running`, a step-start, an assistant
    /// message still streaming — are non-terminal: a
    /// [`GroupCommitProjector`](crate::group::GroupCommitProjector) lets them ride along
    /// with the session's next terminal commit.
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::PartUpdated { part } => {
                !part.is_open() && !matches!(part.body, crate::model::PartBody::StepStart(_))
            }
            Self::MessageUpdated { info } => !info.is_open(),
            _ => true,
        }
    }

    /// The event's `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SessionUpdated { .. } => "session.updated",
            Self::SessionDeleted { .. } => "session.deleted",
            Self::MessageUpdated { .. } => "message.updated",
            Self::MessageRemoved { .. } => "message.removed",
            Self::PartUpdated { .. } => "message.part.updated",
            Self::PartRemoved { .. } => "message.part.removed",
        }
    }
}

/// `message.part.delta`: text appended to a streaming part. Bus only, never stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartDelta {
    /// The message of the part.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The part the text is appended to.
    #[serde(rename = "partID")]
    pub part_id: PartId,
    /// The field appended to (`text`).
    pub field: Cow<'static, str>,
    /// The appended text.
    pub delta: String,
}

/// Any event on the bus.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A persisted change, published after its commit.
    Sync(SyncEvent),
    /// `message.part.delta`.
    PartDelta(PartDelta),
    /// `session.status`: busy / idle / retry, free-form.
    SessionStatus(JsonMap),
    /// `session.error`: an error surfaced to the session's clients, free-form.
    SessionError(JsonMap),
}

impl Event {
    /// The event's `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sync(s) => s.name(),
            Self::PartDelta(_) => "message.part.delta",
            Self::SessionStatus(_) => "session.status",
            Self::SessionError(_) => "session.error",
        }
    }

    /// Whether this event is also persisted (a sync event).
    pub fn is_sync(&self) -> bool {
        matches!(self, Self::Sync(_))
    }
}

impl From<SyncEvent> for Event {
    fn from(e: SyncEvent) -> Self {
        Self::Sync(e)
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tagged<'a, T: Serialize> {
            #[serde(rename = "type")]
            kind: &'static str,
            properties: &'a T,
        }
        match self {
            Self::Sync(e) => e.serialize(s),
            Self::PartDelta(d) => Tagged {
                kind: self.name(),
                properties: d,
            }
            .serialize(s),
            Self::SessionStatus(m) | Self::SessionError(m) => Tagged {
                kind: self.name(),
                properties: m,
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut v = Value::deserialize(d)?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| D::Error::custom("event without a string `type`"))?
            .to_owned();
        let props = v.get_mut("properties").map(Value::take);
        let props = || props.clone().unwrap_or(Value::Object(JsonMap::new()));
        let obj = |v: Value| match v {
            Value::Object(m) => Ok(m),
            other => Err(D::Error::custom(format!(
                "{kind}: properties must be an object, got {other}"
            ))),
        };
        match kind.as_str() {
            // `part.delta` (and `part.updated` / `part.removed` above): the names of
            // releases before 0.2, still in durable streams they wrote.
            "message.part.delta" | "part.delta" => serde_json::from_value(props())
                .map(Self::PartDelta)
                .map_err(D::Error::custom),
            "session.status" => obj(props()).map(Self::SessionStatus),
            "session.error" => obj(props()).map(Self::SessionError),
            _ => {
                let mut m = JsonMap::new();
                m.insert("type".into(), Value::String(kind.clone()));
                m.insert("properties".into(), props());
                serde_json::from_value(Value::Object(m))
                    .map(Self::Sync)
                    .map_err(D::Error::custom)
            }
        }
    }
}

/// An event with its routing and ordering: `{tenant, sessionID, seq, event}`.
///
/// `seq` is per session and strictly increasing, assigned by the projector; deltas get
/// one too. It orders everything a subscriber sees for a session and is the resume point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope<E = Event> {
    /// Tenant.
    pub tenant: TenantId,
    /// Session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Per-session sequence number, from 1.
    pub seq: u64,
    /// The event.
    pub event: E,
}

impl Envelope<SyncEvent> {
    /// Checks that the event belongs to the session its envelope names. Every store
    /// calls this on each event of a batch before writing anything of it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the event and both sessions.
    pub fn check(&self) -> Result<()> {
        if self.event.session_id() == &self.session_id {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{} for session {} carried in an envelope of session {}",
            self.event.name(),
            self.event.session_id(),
            self.session_id
        )))
    }
}

/// What travels on the bus: an envelope shared between subscribers without copying.
pub type BusEvent = Arc<Envelope<Event>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_json_in_the_opencode_shape() {
        let delta = Event::PartDelta(PartDelta {
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: Cow::Borrowed("text"),
            delta: "he".into(),
        });
        let v = serde_json::to_value(&delta).unwrap();
        assert_eq!(v["type"], "message.part.delta");
        assert_eq!(v["properties"]["partID"], "prt_1");
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), delta);

        let removed = Event::Sync(SyncEvent::MessageRemoved {
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
        });
        let v = serde_json::to_value(&removed).unwrap();
        assert_eq!(v["type"], "message.removed");
        assert_eq!(v["properties"]["sessionID"], "ses_1");
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), removed);

        let bad = serde_json::json!({"type": "nope", "properties": {}});
        assert!(serde_json::from_value::<Event>(bad).is_err());
    }

    #[test]
    fn names_written_before_opencodes_are_still_read() {
        let old_delta = serde_json::json!({"type": "part.delta", "properties":
            {"messageID": "msg_1", "partID": "prt_1", "field": "text", "delta": "x"}});
        let e: Event = serde_json::from_value(old_delta).unwrap();
        assert_eq!(e.name(), "message.part.delta");
        let old_removed = serde_json::json!({"type": "part.removed", "properties":
            {"sessionID": "ses_1", "messageID": "msg_1", "partID": "prt_1"}});
        let e: Event = serde_json::from_value(old_removed).unwrap();
        assert_eq!(e.name(), "message.part.removed");
        assert_eq!(
            serde_json::to_value(&e).unwrap()["type"],
            "message.part.removed",
            "written back under the new name"
        );
    }
}
