//! A bus event's JSON is produced once: the stream entry holds the bytes the envelope
//! encodes to, and a subscriber gets the event's JSON text as the entry holds it (what
//! an SSE frame carries), without encoding it again.

use std::time::Duration;

use forge_core::{Bus, BusEvent, Envelope, Event, SessionId, TenantId, Topic};
use forge_redis::RedisBus;
use redis::AsyncCommands as _;

const WAIT: Duration = Duration::from_secs(20);

/// A bus on a fresh key prefix, and a plain connection to the same server; the keys
/// are deleted when the guard drops.
struct Setup {
    bus: RedisBus,
    conn: redis::aio::MultiplexedConnection,
    server: String,
    prefix: String,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let Ok(mut conn) =
            redis::Client::open(self.server.as_str()).and_then(|c| c.get_connection())
        else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default();
        for key in keys {
            let _ = redis::cmd("DEL").arg(key).query::<()>(&mut conn);
        }
    }
}

async fn setup() -> Option<Setup> {
    let server =
        forge_testkit::service_url("FORGE_TEST_REDIS_URL", "forge-redis encode-once tests")?;
    let prefix = format!("forge-test-{:016x}", rand::random::<u64>());
    let sep = if server.contains('?') { '&' } else { '?' };
    let bus = RedisBus::connect(&format!("{server}{sep}prefix={prefix}"))
        .await
        .expect("connect the bus");
    let conn = redis::Client::open(server.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    Some(Setup {
        bus,
        conn,
        server,
        prefix,
    })
}

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
async fn entry_bytes(s: &mut Setup, tenant: &TenantId, session: &SessionId) -> Vec<u8> {
    let key = s.bus.keys().session_stream(tenant, session);
    let reply: redis::streams::StreamRangeReply = s.conn.xrange_all(&key).await.expect("XRANGE");
    assert_eq!(reply.ids.len(), 1, "one entry in {key}");
    reply.ids[0].get("e").expect("the entry's `e` field")
}

#[tokio::test]
async fn the_entry_is_the_envelopes_bytes_and_a_subscriber_reuses_its_event_json() {
    let Some(mut s) = setup().await else { return };
    let tenant = TenantId::new("t1").unwrap();
    let session = SessionId::from("ses_once");
    let published = forge_testkit::delta(&tenant, &session, 1, "ünïcode \"quoted\"\n");
    let envelope: Envelope<Event> = (*published).clone();
    s.bus.publish(published).unwrap();
    s.bus.flush().await.unwrap();

    // The bytes written are those of the envelope, as before the event's JSON was kept.
    let bytes = entry_bytes(&mut s, &tenant, &session).await;
    assert_eq!(bytes, serde_json::to_vec(&envelope).unwrap());

    let got = first(&s.bus, &tenant, &session).await;
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
    let Some(mut s) = setup().await else { return };
    let tenant = TenantId::new("t1").unwrap();
    let session = SessionId::from("ses_other_writer");
    // An entry as another writer might put it: keys in another order, spaces. Encoding
    // the event again would give different text; passing it on gives exactly this.
    let event = r#"{ "properties": {"sessionID": "ses_other_writer", "messageID": "msg_1", "partID": "prt_1", "field": "text", "delta": "hi"}, "type": "message.part.delta" }"#;
    let entry =
        format!(r#"{{"tenant":"t1","sessionID":"ses_other_writer","seq":1,"event":{event}}}"#);
    let key = s.bus.keys().session_stream(&tenant, &session);
    let _: String = s
        .conn
        .xadd(&key, "1-0", &[("e", entry.as_bytes())])
        .await
        .expect("XADD");

    let got = first(&s.bus, &tenant, &session).await;
    assert_eq!(got.event_json().unwrap(), event);
    match &got.event {
        Event::PartDelta(d) => assert_eq!(d.delta, "hi"),
        other => panic!("decoded as {other:?}"),
    }
    // Encoding the whole event again writes the kept text, not a new encoding.
    let again = serde_json::to_string(&got).unwrap();
    assert!(again.ends_with(&format!("\"event\":{event}}}")), "{again}");
}
