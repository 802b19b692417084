//! A bus event's JSON is produced once: the stream entry holds the bytes the envelope
//! encodes to, and a subscriber gets the event's JSON text as the entry holds it (what
//! an SSE frame carries), without encoding it again.

mod common;

use std::time::Duration;

use common::TestPrefix;
use forge_core::{Bus, BusEvent, Envelope, Event, SessionId, TenantId, Topic};
use forge_redis::RedisBus;
use redis::Commands as _;

const WAIT: Duration = Duration::from_secs(20);

async fn first(bus: &RedisBus, tenant: &TenantId, session: &SessionId) -> BusEvent {
    let mut sub = bus
        .subscribe(tenant, Topic::Session(session.clone()), Some(0))
        .await
        .expect("subscribe");
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no event within 20 s")
        .expect("subscription ended")
        .expect("subscription error")
}

/// The `e` field of the session stream's only entry.
fn entry_bytes(p: &TestPrefix, bus: &RedisBus, tenant: &TenantId, session: &SessionId) -> Vec<u8> {
    let key = bus.keys().session_stream(tenant, session);
    let reply: redis::streams::StreamRangeReply = p.conn().xrange_all(&key).expect("XRANGE");
    assert_eq!(reply.ids.len(), 1, "one entry in {key}");
    reply.ids[0].get("e").expect("the entry's `e` field")
}

/// A fresh prefix, a bus on it, tenant `t1` and `session`.
async fn setup(session: &str) -> Option<(TestPrefix, RedisBus, TenantId, SessionId)> {
    let p = TestPrefix::new()?;
    let bus = p.bus().await;
    Some((
        p,
        bus,
        TenantId::new("t1").unwrap(),
        SessionId::from(session),
    ))
}

#[tokio::test]
async fn the_entry_is_the_envelopes_bytes_and_a_subscriber_reuses_its_event_json() {
    let Some((p, bus, tenant, session)) = setup("ses_once").await else {
        return;
    };
    let published = forge_testkit::delta(&tenant, &session, 1, "ünïcode \"quoted\"\n");
    let envelope: Envelope<Event> = (*published).clone();
    bus.publish(published).unwrap();
    bus.flush().await.unwrap();

    // The bytes written are those of the envelope, as before the event's JSON was kept.
    let bytes = entry_bytes(&p, &bus, &tenant, &session);
    assert_eq!(bytes, serde_json::to_vec(&envelope).unwrap());

    let got = first(&bus, &tenant, &session).await;
    assert_eq!(*got, envelope);
    let text = std::str::from_utf8(&bytes).unwrap();
    let event_json = got.event_json().unwrap();
    assert!(
        text.ends_with(&format!("\"event\":{event_json}}}")),
        "the event's JSON {event_json} is not the entry's {text}"
    );
}

#[tokio::test]
async fn a_subscriber_passes_on_the_event_text_the_entry_holds() {
    let Some((p, bus, tenant, session)) = setup("ses_other_writer").await else {
        return;
    };
    // An entry as another writer might put it: keys in another order, spaces. Encoding
    // the event again would give different text; passing it on gives exactly this.
    let event = r#"{ "properties": {"sessionID": "ses_other_writer", "messageID": "msg_1", "partID": "prt_1", "field": "text", "delta": "hi"}, "type": "message.part.delta" }"#;
    let entry =
        format!(r#"{{"tenant":"t1","sessionID":"ses_other_writer","seq":1,"event":{event}}}"#);
    let key = bus.keys().session_stream(&tenant, &session);
    let _: String = p
        .conn()
        .xadd(&key, "1-0", &[("e", entry.as_bytes())])
        .expect("XADD");

    let got = first(&bus, &tenant, &session).await;
    assert_eq!(got.event_json().unwrap(), event);
    match &got.event {
        Event::PartDelta(d) => assert_eq!(d.delta, "hi"),
        other => panic!("decoded as {other:?}"),
    }
    // Encoding the whole event again writes the kept text, not a new encoding.
    let again = serde_json::to_string(&got).unwrap();
    assert!(again.ends_with(&format!("\"event\":{event}}}")), "{again}");
}
