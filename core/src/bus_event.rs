//! [`BusEvent`]: what travels on the bus, shared between subscribers without copying,
//! with its event's JSON produced at most once.
//!
//! A delta is encoded when a durable bus writes it (the Redis stream entry) and again
//! wherever an SSE frame carries it. The event's JSON is the same text in both places,
//! so a `BusEvent` keeps it: encoded on first use and reused by every later writer and
//! subscriber of the same event, or kept from the bytes a subscriber decoded it from.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::event::{Envelope, Event, SyncEvent};
use crate::id::SessionId;
use crate::tenant::TenantId;

/// An [`Envelope`] on the bus. Cloning is a reference count; it dereferences to the
/// envelope.
///
/// Encoded as the envelope (`{tenant, sessionID, seq, event}`), byte for byte what
/// encoding the [`Envelope`] itself gives; the `event` member is written from the
/// event's JSON held here ([`BusEvent::event_json`]) when it has been produced.
#[derive(Clone)]
pub struct BusEvent(Arc<Shared>);

struct Shared {
    envelope: Envelope<Event>,
    /// The event's JSON: encoded on first use, or the text it was decoded from.
    json: OnceLock<Box<RawValue>>,
}

impl BusEvent {
    /// An event to publish; its JSON is encoded when first needed.
    #[must_use]
    pub fn new(envelope: Envelope<Event>) -> Self {
        Self(Arc::new(Shared {
            envelope,
            json: OnceLock::new(),
        }))
    }

    /// The envelope.
    #[must_use]
    pub fn envelope(&self) -> &Envelope<Event> {
        &self.0.envelope
    }

    /// The event's JSON (`{"type": …, "properties": …}`), what an SSE frame's `data`
    /// carries: encoded once, on the first call (or by the first encoding of the whole
    /// event), then shared by every holder of this event.
    ///
    /// # Errors
    /// The event could not be encoded (events are encodable by construction).
    pub fn event_json(&self) -> serde_json::Result<&str> {
        self.raw().map(RawValue::get)
    }

    fn raw(&self) -> serde_json::Result<&RawValue> {
        if let Some(json) = self.0.json.get() {
            return Ok(json);
        }
        let json = serde_json::value::to_raw_value(&self.0.envelope.event)?;
        // Two threads may race to encode the same event; both produce the same text
        // and the first one kept wins.
        Ok(self.0.json.get_or_init(|| json))
    }

    /// The sync event this carries, in the envelope a store applies; `None` for a
    /// bus-only event (a delta, a status).
    #[must_use]
    pub fn sync(&self) -> Option<Envelope<SyncEvent>> {
        let env = &self.0.envelope;
        match &env.event {
            Event::Sync(event) => Some(Envelope {
                tenant: env.tenant.clone(),
                session_id: env.session_id.clone(),
                seq: env.seq,
                epoch: env.epoch,
                event: event.clone(),
            }),
            _ => None,
        }
    }

    /// Whether both are the same shared event (not merely equal).
    #[must_use]
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Deref for BusEvent {
    type Target = Envelope<Event>;

    fn deref(&self) -> &Envelope<Event> {
        &self.0.envelope
    }
}

impl From<Envelope<Event>> for BusEvent {
    fn from(envelope: Envelope<Event>) -> Self {
        Self::new(envelope)
    }
}

impl From<Envelope<SyncEvent>> for BusEvent {
    /// A committed sync event as the bus carries it.
    fn from(env: Envelope<SyncEvent>) -> Self {
        Self::new(Envelope {
            tenant: env.tenant,
            session_id: env.session_id,
            seq: env.seq,
            epoch: env.epoch,
            event: Event::Sync(env.event),
        })
    }
}

impl fmt::Debug for BusEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.envelope.fmt(f)
    }
}

impl PartialEq for BusEvent {
    fn eq(&self, other: &Self) -> bool {
        self.0.envelope == other.0.envelope
    }
}

/// The envelope's wire form with the event as JSON text. Field names and order are
/// [`Envelope`]'s, so both encode to the same bytes.
#[derive(Serialize)]
struct Wire<'a, J> {
    tenant: &'a TenantId,
    #[serde(rename = "sessionID")]
    session_id: &'a SessionId,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
    event: J,
}

impl Serialize for BusEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let env = &self.0.envelope;
        // The kept text when there is one; otherwise the event is encoded straight into
        // the output, without keeping a copy nobody may ask for (a writer of a durable
        // bus alone pays no extra allocation).
        match self.0.json.get() {
            Some(raw) => Wire {
                tenant: &env.tenant,
                session_id: &env.session_id,
                seq: env.seq,
                epoch: env.epoch,
                event: &**raw,
            }
            .serialize(s),
            None => Wire {
                tenant: &env.tenant,
                session_id: &env.session_id,
                seq: env.seq,
                epoch: env.epoch,
                event: &env.event,
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for BusEvent {
    /// Decodes an envelope and keeps its event's JSON text for [`BusEvent::event_json`],
    /// unless decoding changed the event (a delta written without `sessionID` takes the
    /// envelope's session; its text is then encoded anew when needed).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        struct Owned {
            tenant: TenantId,
            #[serde(rename = "sessionID")]
            session_id: SessionId,
            seq: u64,
            #[serde(default)]
            epoch: Option<u64>,
            event: Box<RawValue>,
        }
        let w = Owned::deserialize(d)?;
        let mut event: Event = serde_json::from_str(w.event.get()).map_err(D::Error::custom)?;
        let mut kept = Some(w.event);
        if let Event::PartDelta(delta) = &mut event {
            if delta.session_id.as_str().is_empty() {
                delta.session_id = w.session_id.clone();
                kept = None;
            }
        }
        let json = OnceLock::new();
        if let Some(raw) = kept {
            let _ = json.set(raw);
        }
        Ok(Self(Arc::new(Shared {
            envelope: Envelope {
                tenant: w.tenant,
                session_id: w.session_id,
                seq: w.seq,
                epoch: w.epoch,
                event,
            },
            json,
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::event::PartDelta;

    fn delta(session: &str, text: &str) -> Event {
        Event::PartDelta(PartDelta {
            session_id: session.into(),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: Cow::Borrowed("text"),
            delta: text.into(),
        })
    }

    fn envelope(event: Event) -> Envelope<Event> {
        Envelope {
            tenant: TenantId::default(),
            session_id: "ses_1".into(),
            seq: 7,
            epoch: None,
            event,
        }
    }

    #[test]
    fn encodes_to_the_bytes_of_its_envelope() {
        for event in [
            delta("ses_1", "he said \"hi\" \u{1F600}\n"),
            Event::Sync(SyncEvent::MessageRemoved {
                session_id: "ses_1".into(),
                message_id: "msg_1".into(),
            }),
        ] {
            let env = envelope(event);
            let bus = BusEvent::new(env.clone());
            let bytes = serde_json::to_vec(&env).unwrap();
            assert_eq!(serde_json::to_vec(&bus).unwrap(), bytes, "encoded directly");
            assert_eq!(
                bus.event_json().unwrap(),
                serde_json::to_string(&env.event).unwrap()
            );
            assert_eq!(
                serde_json::to_vec(&bus).unwrap(),
                bytes,
                "from the kept text"
            );
        }
    }

    #[test]
    fn the_event_json_is_produced_once_and_shared_by_clones() {
        let bus = BusEvent::new(envelope(delta("ses_1", "x")));
        let copy = bus.clone();
        let first = bus.event_json().unwrap();
        assert!(
            std::ptr::eq(first, copy.event_json().unwrap()),
            "a clone encoded the event again"
        );
        let _ = serde_json::to_vec(&copy).unwrap();
        assert!(std::ptr::eq(first, bus.event_json().unwrap()));
    }

    #[test]
    fn a_decoded_event_keeps_the_text_it_was_read_from() {
        // Not the text this version would write (keys reordered, spaced): what was
        // read is what is passed on.
        let text = r#"{"tenant":"default","sessionID":"ses_1","seq":3,"event":{ "properties":{"sessionID":"ses_1","messageID":"msg_1","partID":"prt_1","field":"text","delta":"hé"},"type":"message.part.delta"}}"#;
        let bus: BusEvent = serde_json::from_str(text).unwrap();
        assert_eq!(bus.seq, 3);
        assert_eq!(bus.event, delta("ses_1", "hé"));
        assert!(bus.event_json().unwrap().starts_with(r#"{ "properties""#));
        assert_eq!(serde_json::to_string(&bus).unwrap(), text);
    }

    #[test]
    fn a_delta_without_its_session_takes_the_envelopes_and_is_encoded_anew() {
        let text = r#"{"tenant":"default","sessionID":"ses_9","seq":1,"event":{"type":"message.part.delta","properties":{"messageID":"msg_1","partID":"prt_1","field":"text","delta":"a"}}}"#;
        let bus: BusEvent = serde_json::from_str(text).unwrap();
        assert_eq!(bus.event, delta("ses_9", "a"));
        assert_eq!(
            bus.event_json().unwrap(),
            serde_json::to_string(&delta("ses_9", "a")).unwrap()
        );
        // The same as decoding the envelope itself.
        let env: Envelope<Event> = serde_json::from_str(text).unwrap();
        assert_eq!(*bus, env);
    }

    #[test]
    fn a_sync_event_goes_on_the_bus_and_back_unchanged() {
        let sync = Envelope {
            tenant: TenantId::default(),
            session_id: "ses_1".into(),
            seq: 4,
            epoch: None,
            event: SyncEvent::MessageRemoved {
                session_id: "ses_1".into(),
                message_id: "msg_1".into(),
            },
        };
        let bus = BusEvent::from(sync.clone());
        assert_eq!(bus.sync(), Some(sync));
        assert_eq!(BusEvent::new(envelope(delta("ses_1", "x"))).sync(), None);
    }

    #[test]
    fn bad_input_is_an_error_naming_what_is_wrong() {
        let err = serde_json::from_str::<BusEvent>(r#"{"tenant":"t","sessionID":"s","seq":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("event"), "{err}");
        let err = serde_json::from_str::<BusEvent>(
            r#"{"tenant":"t","sessionID":"s","seq":1,"event":{"properties":{}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("type"), "{err}");
    }
}
