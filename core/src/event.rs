//! Events: every change is one. Sync events are persisted and published; bus-only
//! events (deltas, status) are published and never stored.
//!
//! JSON: `{"type": "message.part.updated", "properties": {"sessionID": …, "part": …}}`,
//! the shape of opencode's `/event` stream (checked against a recorded opencode 1.18.33
//! log). Every event names its session in `properties.sessionID`. An event type
//! forge-store does not model decodes as [`Event::Other`] and encodes back unchanged.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{JsonMap, Message, MessageError, Part, Session};
use crate::tenant::TenantId;

/// A change that is persisted by projection and then published on the bus.
///
/// Encoded with `sessionID` in every event's properties (for `session.updated`,
/// `message.updated` and `message.part.updated` it is taken from the info or part);
/// decoding ignores keys it does not need (`sessionID` next to an info, opencode's
/// `time`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
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

/// The properties of a sync event, borrowed from it: what goes on the wire.
#[derive(Serialize)]
#[serde(untagged)]
enum SyncProps<'a> {
    Session {
        #[serde(rename = "sessionID")]
        session_id: &'a SessionId,
        info: &'a Session,
    },
    Message {
        #[serde(rename = "sessionID")]
        session_id: &'a SessionId,
        info: &'a Message,
    },
    Part {
        #[serde(rename = "sessionID")]
        session_id: &'a SessionId,
        part: &'a Part,
    },
    Ids {
        #[serde(rename = "sessionID")]
        session_id: &'a SessionId,
        #[serde(rename = "messageID", skip_serializing_if = "Option::is_none")]
        message_id: Option<&'a MessageId>,
        #[serde(rename = "partID", skip_serializing_if = "Option::is_none")]
        part_id: Option<&'a PartId>,
    },
}

/// `{"type": …, "properties": …}`.
#[derive(Serialize)]
struct Tagged<'a, P: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    properties: P,
}

/// `{"sessionID": …}`: the properties of `session.idle`.
#[derive(Serialize, Deserialize)]
struct SessionOnly<S> {
    #[serde(rename = "sessionID")]
    session_id: S,
}

impl Serialize for SyncEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let properties = match self {
            Self::SessionUpdated { info } => SyncProps::Session {
                session_id: &info.id,
                info,
            },
            Self::MessageUpdated { info } => SyncProps::Message {
                session_id: &info.session_id,
                info,
            },
            Self::PartUpdated { part } => SyncProps::Part {
                session_id: &part.session_id,
                part,
            },
            Self::SessionDeleted { session_id } => SyncProps::Ids {
                session_id,
                message_id: None,
                part_id: None,
            },
            Self::MessageRemoved {
                session_id,
                message_id,
            } => SyncProps::Ids {
                session_id,
                message_id: Some(message_id),
                part_id: None,
            },
            Self::PartRemoved {
                session_id,
                message_id,
                part_id,
            } => SyncProps::Ids {
                session_id,
                message_id: Some(message_id),
                part_id: Some(part_id),
            },
        };
        Tagged {
            kind: self.name(),
            properties,
        }
        .serialize(s)
    }
}

/// `message.part.delta`: text appended to a streaming part. Bus only, never stored.
///
/// JSON: `{"sessionID", "messageID", "partID", "field", "delta"}`. A delta written
/// before deltas carried `sessionID` decodes with an empty session id; inside an
/// [`Envelope`] it takes the envelope's session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartDelta {
    /// The session of the part.
    #[serde(rename = "sessionID", default = "no_session")]
    pub session_id: SessionId,
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

fn no_session() -> SessionId {
    SessionId::from("")
}

/// Any event on the bus.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A persisted change, published after its commit.
    Sync(SyncEvent),
    /// `message.part.delta`.
    PartDelta(PartDelta),
    /// `session.status`: `{"sessionID", "status": {"type": "busy" | "idle" | "retry", …}}`,
    /// free-form.
    SessionStatus(JsonMap),
    /// `session.idle`: `{"sessionID"}`, after the `idle` status of a finished turn.
    SessionIdle {
        /// The session.
        session_id: SessionId,
    },
    /// `session.error`: `{"sessionID", "error"}`, an error surfaced to the session's
    /// clients, free-form.
    SessionError(JsonMap),
    /// An event type forge-store does not model (opencode's `plugin.added`,
    /// `session.diff`, `server.heartbeat`, …), kept as it came so it encodes back
    /// unchanged.
    Other {
        /// Its `type`.
        kind: String,
        /// Its `properties`.
        properties: JsonMap,
    },
}

impl Event {
    /// `session.status` with `{"type": status}` (`busy`, `idle`).
    pub fn status(session: &SessionId, status: &str) -> Self {
        let mut inner = JsonMap::new();
        inner.insert("type".into(), Value::String(status.to_owned()));
        let mut m = JsonMap::new();
        m.insert(
            "sessionID".into(),
            Value::String(session.as_str().to_owned()),
        );
        m.insert("status".into(), Value::Object(inner));
        Self::SessionStatus(m)
    }

    /// `session.error` carrying a message's error as its JSON.
    pub fn session_error(session: &SessionId, error: &MessageError) -> Self {
        let mut m = JsonMap::new();
        m.insert(
            "sessionID".into(),
            Value::String(session.as_str().to_owned()),
        );
        // A MessageError is a name and a JSON object: it always serializes.
        m.insert(
            "error".into(),
            serde_json::to_value(error).unwrap_or(Value::Null),
        );
        Self::SessionError(m)
    }

    /// The event's `type` name.
    pub fn name(&self) -> &str {
        match self {
            Self::Sync(s) => s.name(),
            Self::PartDelta(_) => "message.part.delta",
            Self::SessionStatus(_) => "session.status",
            Self::SessionIdle { .. } => "session.idle",
            Self::SessionError(_) => "session.error",
            Self::Other { kind, .. } => kind,
        }
    }

    /// Whether this event is also persisted (a sync event).
    pub fn is_sync(&self) -> bool {
        matches!(self, Self::Sync(_))
    }

    /// Whether this is a session's status report: `session.status`, `session.idle`
    /// or `session.error`.
    pub fn is_status(&self) -> bool {
        matches!(
            self,
            Self::SessionStatus(_) | Self::SessionIdle { .. } | Self::SessionError(_)
        )
    }
}

impl From<SyncEvent> for Event {
    fn from(e: SyncEvent) -> Self {
        Self::Sync(e)
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let kind = self.name();
        match self {
            Self::Sync(e) => e.serialize(s),
            Self::PartDelta(d) => Tagged {
                kind,
                properties: d,
            }
            .serialize(s),
            Self::SessionIdle { session_id } => Tagged {
                kind,
                properties: SessionOnly { session_id },
            }
            .serialize(s),
            Self::SessionStatus(properties)
            | Self::SessionError(properties)
            | Self::Other { properties, .. } => Tagged { kind, properties }.serialize(s),
        }
    }
}

/// The `type` names [`SyncEvent`] decodes, with those of releases before 0.2.
const SYNC_NAMES: [&str; 8] = [
    "session.updated",
    "session.deleted",
    "message.updated",
    "message.removed",
    "message.part.updated",
    "message.part.removed",
    "part.updated",
    "part.removed",
];

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            properties: Option<Value>,
        }
        let Wire { kind, properties } = Wire::deserialize(d)?;
        let props = properties.unwrap_or_else(|| Value::Object(JsonMap::new()));
        let obj = |v: Value| match v {
            Value::Object(m) => Ok(m),
            other => Err(D::Error::custom(format!(
                "{kind}: properties must be an object, got {other}"
            ))),
        };
        match kind.as_str() {
            // `part.delta` (and `part.updated` / `part.removed`): the names of releases
            // before 0.2, still in durable streams they wrote.
            "message.part.delta" | "part.delta" => serde_json::from_value(props)
                .map(Self::PartDelta)
                .map_err(|e| D::Error::custom(format!("{kind}: {e}"))),
            "session.status" => obj(props).map(Self::SessionStatus),
            "session.error" => obj(props).map(Self::SessionError),
            "session.idle" => serde_json::from_value::<SessionOnly<SessionId>>(props)
                .map(|p| Self::SessionIdle {
                    session_id: p.session_id,
                })
                .map_err(|e| D::Error::custom(format!("{kind}: {e}"))),
            name if SYNC_NAMES.contains(&name) => {
                let mut m = JsonMap::new();
                m.insert("type".into(), Value::String(kind));
                m.insert("properties".into(), props);
                serde_json::from_value(Value::Object(m))
                    .map(Self::Sync)
                    .map_err(D::Error::custom)
            }
            _ => Ok(Self::Other {
                properties: obj(props)?,
                kind,
            }),
        }
    }
}

/// An event with its routing and ordering: `{tenant, sessionID, seq, epoch?, event}`.
///
/// `seq` is per session and strictly increasing, assigned by the projector; deltas get
/// one too. It orders everything a subscriber sees for a session and is the resume point.
/// `epoch` is the writer's claim on the session ([`crate::fence`]): a store applies a
/// sync event only under the session's current epoch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Envelope<E = Event> {
    /// Tenant.
    pub tenant: TenantId,
    /// Session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Per-session sequence number, from 1.
    pub seq: u64,
    /// The epoch of the writer's claim on the session; `None` for an unfenced writer,
    /// which a store lets write only a session never claimed. Left out of the JSON when
    /// `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The event.
    pub event: E,
}

impl<E> Envelope<E> {
    /// An unfenced envelope (`epoch` `None`).
    pub fn new(tenant: TenantId, session_id: SessionId, seq: u64, event: E) -> Self {
        Self {
            tenant,
            session_id,
            seq,
            epoch: None,
            event,
        }
    }

    /// The same envelope written under `epoch`.
    #[must_use]
    pub fn with_epoch(mut self, epoch: Option<u64>) -> Self {
        self.epoch = epoch;
        self
    }
}

#[derive(Deserialize)]
struct EnvelopeWire<E> {
    tenant: TenantId,
    #[serde(rename = "sessionID")]
    session_id: SessionId,
    seq: u64,
    #[serde(default)]
    epoch: Option<u64>,
    event: E,
}

impl<E> From<EnvelopeWire<E>> for Envelope<E> {
    fn from(w: EnvelopeWire<E>) -> Self {
        Self {
            tenant: w.tenant,
            session_id: w.session_id,
            seq: w.seq,
            epoch: w.epoch,
            event: w.event,
        }
    }
}

impl<'de> Deserialize<'de> for Envelope<SyncEvent> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        EnvelopeWire::deserialize(d).map(Self::from)
    }
}

impl<'de> Deserialize<'de> for Envelope<Event> {
    /// A delta written without `sessionID` takes the envelope's session.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut env = Self::from(EnvelopeWire::<Event>::deserialize(d)?);
        if let Event::PartDelta(delta) = &mut env.event {
            if delta.session_id.as_str().is_empty() {
                delta.session_id = env.session_id.clone();
            }
        }
        Ok(env)
    }
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

pub use crate::bus_event::BusEvent;

#[cfg(test)]
mod tests {
    use super::*;

    fn delta() -> PartDelta {
        PartDelta {
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: Cow::Borrowed("text"),
            delta: "he".into(),
        }
    }

    #[test]
    fn events_round_trip_through_json_in_the_opencode_shape() {
        let delta = Event::PartDelta(delta());
        let v = serde_json::to_value(&delta).unwrap();
        assert_eq!(v["type"], "message.part.delta");
        assert_eq!(v["properties"]["sessionID"], "ses_1");
        assert_eq!(v["properties"]["partID"], "prt_1");
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), delta);

        let removed = Event::Sync(SyncEvent::MessageRemoved {
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
        });
        let v = serde_json::to_value(&removed).unwrap();
        assert_eq!(v["type"], "message.removed");
        assert_eq!(
            v["properties"],
            serde_json::json!({"sessionID": "ses_1", "messageID": "msg_1"})
        );
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), removed);

        let deleted = Event::Sync(SyncEvent::SessionDeleted {
            session_id: "ses_1".into(),
        });
        let v = serde_json::to_value(&deleted).unwrap();
        assert_eq!(v["properties"], serde_json::json!({"sessionID": "ses_1"}));
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), deleted);

        let session = Session::new("title", 1);
        let sid = session.id.clone();
        let updated = Event::Sync(SyncEvent::SessionUpdated { info: session });
        let v = serde_json::to_value(&updated).unwrap();
        assert_eq!(v["properties"]["sessionID"], sid.as_str());
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), updated);

        let idle = Event::SessionIdle {
            session_id: "ses_1".into(),
        };
        let v = serde_json::to_value(&idle).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}})
        );
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), idle);

        let busy = Event::status(&"ses_1".into(), "busy");
        assert_eq!(
            serde_json::to_value(&busy).unwrap(),
            serde_json::json!({"type": "session.status",
                "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}})
        );
    }

    #[test]
    fn an_unknown_type_reads_as_other_and_writes_back_unchanged() {
        let v = serde_json::json!({"type": "plugin.added", "properties": {"id": "x", "n": [1]}});
        let e: Event = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(e.name(), "plugin.added");
        assert!(matches!(e, Event::Other { .. }));
        assert_eq!(serde_json::to_value(&e).unwrap(), v);

        let bare: Event = serde_json::from_value(serde_json::json!({"type": "x.y"})).unwrap();
        assert_eq!(
            serde_json::to_value(&bare).unwrap(),
            serde_json::json!({"type": "x.y", "properties": {}})
        );
        let not_an_object = serde_json::json!({"type": "x.y", "properties": 3});
        assert!(serde_json::from_value::<Event>(not_an_object).is_err());
        assert!(serde_json::from_value::<Event>(serde_json::json!({"properties": {}})).is_err());
    }

    #[test]
    fn names_written_before_opencodes_are_still_read() {
        let old_delta = serde_json::json!({"type": "part.delta", "properties":
            {"messageID": "msg_1", "partID": "prt_1", "field": "text", "delta": "x"}});
        let e: Event = serde_json::from_value(old_delta.clone()).unwrap();
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

        // A delta without `sessionID` takes its envelope's.
        let env = serde_json::json!({"tenant": "t1", "sessionID": "ses_9", "seq": 3,
            "event": old_delta});
        let env: Envelope<Event> = serde_json::from_value(env).unwrap();
        let Event::PartDelta(d) = &env.event else {
            panic!("{env:?}")
        };
        assert_eq!(d.session_id.as_str(), "ses_9");
    }
}
