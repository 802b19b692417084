//! What the streams hold, and what comes back. An event other than a delta is written
//! as the bytes its envelope encodes to, and a subscriber gets the event's JSON text as
//! the entry holds it (what an SSE frame carries), without encoding it again. A delta
//! is written once, compact, to its session stream; the tenant stream holds a
//! reference to it. Every reader gets back the event that was published.

mod common;

use std::time::Duration;

use common::TestPrefix;
use forge_core::{Bus, BusEvent, Envelope, Event, SessionId, TenantId, Topic};
use forge_redis::RedisBus;
use redis::Commands as _;

const WAIT: Duration = Duration::from_secs(20);

/// The next event of `sub`, within [`WAIT`].
async fn next_event(sub: &mut forge_core::Subscription) -> BusEvent {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no event within 20 s")
        .expect("subscription ended")
        .expect("subscription error")
}

/// A live subscription to `tenant`.
async fn tenant_live(bus: &RedisBus, tenant: &TenantId) -> forge_core::Subscription {
    bus.subscribe(tenant, Topic::Tenant, None)
        .await
        .expect("subscribe to the tenant")
}

async fn first(bus: &RedisBus, tenant: &TenantId, session: &SessionId) -> BusEvent {
    let mut sub = bus
        .subscribe(tenant, Topic::Session(session.clone()), Some(0))
        .await
        .expect("subscribe");
    next_event(&mut sub).await
}

/// The fields of a stream's entries, in order.
fn entries(p: &TestPrefix, key: &str) -> Vec<Vec<(String, Vec<u8>)>> {
    let reply: redis::streams::StreamRangeReply = p.conn().xrange_all(key).expect("XRANGE");
    reply
        .ids
        .iter()
        .map(|e| {
            let mut fields: Vec<(String, Vec<u8>)> = e
                .map
                .iter()
                .map(|(k, v)| (k.clone(), redis::from_redis_value_ref(v).expect("bytes")))
                .collect();
            fields.sort();
            fields
        })
        .collect()
}

/// The `e` field of the session stream's only entry.
fn entry_bytes(p: &TestPrefix, bus: &RedisBus, tenant: &TenantId, session: &SessionId) -> Vec<u8> {
    let all = entries(p, &bus.keys().session_stream(tenant, session));
    assert_eq!(all.len(), 1, "one entry in the session stream: {all:?}");
    let (name, bytes) = all[0].iter().find(|(k, _)| k == "e").expect("an `e` field");
    assert_eq!(name, "e");
    bytes.clone()
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
    let mut status = serde_json::Map::new();
    status.insert("sessionID".into(), session.as_str().into());
    status.insert("note".into(), "ünïcode \"quoted\"\n".into());
    let envelope = Envelope::new(
        tenant.clone(),
        session.clone(),
        1,
        Event::SessionStatus(status),
    );
    let published = BusEvent::new(envelope.clone());
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

#[tokio::test]
async fn a_delta_is_written_once_compact_and_every_reader_gets_it_back() {
    let Some((p, bus, tenant, session)) = setup("ses_compact").await else {
        return;
    };
    let mut live = tenant_live(&bus, &tenant).await;
    let text = "ünïcode \"quoted\"\n";
    let published = vec![
        forge_testkit::delta(&tenant, &session, 1, text),
        forge_testkit::delta(&tenant, &session, 2, "more"),
    ];
    // Each flushed on its own: two entries (a batch would join them in one run).
    for ev in &published {
        bus.publish(ev.clone()).unwrap();
        bus.flush().await.unwrap();
    }

    // The session stream holds each delta as `d` alone: its text, message and part.
    let session_entries = entries(&p, &bus.keys().session_stream(&tenant, &session));
    assert_eq!(session_entries.len(), 2);
    for (fields, ev) in session_entries.iter().zip(&published) {
        let Event::PartDelta(d) = &ev.event else {
            unreachable!()
        };
        let want = serde_json::to_vec(&(d.message_id.as_str(), d.part_id.as_str(), &d.delta));
        assert_eq!(fields, &vec![("d".to_owned(), want.unwrap())]);
    }
    // The tenant stream holds references, without the text.
    let tenant_entries = entries(&p, &bus.keys().tenant_stream(&tenant));
    let refs: Vec<Vec<(String, Vec<u8>)>> = (1..=2)
        .map(|seq: u64| {
            vec![
                ("r".to_owned(), session.as_str().as_bytes().to_vec()),
                ("seq".to_owned(), seq.to_string().into_bytes()),
            ]
        })
        .collect();
    assert_eq!(tenant_entries, refs);

    // The session stream's subscriber, its replay, and the tenant's live subscriber
    // each get the published events.
    assert_eq!(first(&bus, &tenant, &session).await, published[0]);
    let replay = bus.replay(&tenant, &session, 1).await.expect("replay");
    assert_eq!(replay.events, published);
    for ev in &published {
        let got = next_event(&mut live).await;
        assert_eq!(&got, ev);
        assert_eq!(got.event_json().unwrap(), ev.event_json().unwrap());
    }
}

#[tokio::test]
async fn the_streams_written_before_deltas_were_compact_read_as_before() {
    let Some((p, bus, tenant, session)) = setup("ses_older").await else {
        return;
    };
    let mut live = tenant_live(&bus, &tenant).await;
    // A delta as an earlier release wrote it: `seq` and the envelope, in both streams.
    let old = forge_testkit::delta(&tenant, &session, 1, "before");
    let json = serde_json::to_vec(&old).unwrap();
    let mut conn = p.conn();
    let fields: [(&str, &[u8]); 2] = [("seq", b"1"), ("e", &json)];
    let _: String = conn
        .xadd(bus.keys().session_stream(&tenant, &session), "1-0", &fields)
        .expect("XADD");
    let _: String = conn
        .xadd(bus.keys().tenant_stream(&tenant), "*", &fields)
        .expect("XADD");
    // Then this release appends the next one.
    let new = forge_testkit::delta(&tenant, &session, 2, "after");
    bus.publish(new.clone()).unwrap();
    bus.flush().await.unwrap();

    let replay = bus.replay(&tenant, &session, 1).await.expect("replay");
    assert_eq!(replay.events, vec![old.clone(), new.clone()]);
    for ev in [old, new] {
        let got = next_event(&mut live).await;
        assert_eq!(got, ev);
    }
}

#[tokio::test]
async fn a_tenant_subscriber_whose_delta_was_trimmed_away_is_told_it_lagged() {
    let Some((p, bus, tenant, session)) = setup("ses_trimmed").await else {
        return;
    };
    let mut live = tenant_live(&bus, &tenant).await;
    let published: Vec<BusEvent> = (1..=3)
        .map(|seq| forge_testkit::delta(&tenant, &session, seq, "x"))
        .collect();
    for ev in &published {
        bus.publish(ev.clone()).unwrap();
        bus.flush().await.unwrap();
    }
    // Retention drops the second delta from the session stream before it is read.
    let _: usize = p
        .conn()
        .xdel(bus.keys().session_stream(&tenant, &session), &["2-0"])
        .expect("XDEL");
    let mut got = Vec::new();
    for _ in 0..3 {
        let item = tokio::time::timeout(WAIT, live.next())
            .await
            .expect("no event within 20 s")
            .expect("subscription ended");
        got.push(item.map(|ev| ev.seq).map_err(|e| e.to_string()));
    }
    assert_eq!(got[..2], [Ok(1), Ok(3)]);
    match &got[2] {
        Err(e) => assert!(e.contains('1'), "the error says one event was missed: {e}"),
        Ok(seq) => panic!("seq {seq} after the last delta, no lag reported"),
    }
}

/// A delta of `part` (message `msg_1`).
fn delta_of(tenant: &TenantId, session: &SessionId, seq: u64, part: &str) -> BusEvent {
    let mut ev: Envelope<Event> =
        (*forge_testkit::delta(tenant, session, seq, format!("t{seq} "))).clone();
    if let Event::PartDelta(d) = &mut ev.event {
        d.part_id = part.into();
    }
    BusEvent::new(ev)
}

async fn next_seqs(sub: &mut forge_core::Subscription, n: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let ev = next_event(sub).await;
        out.push((ev.session_id.to_string(), ev.seq));
    }
    out
}

#[tokio::test]
async fn a_batchs_deltas_of_one_part_are_one_entry_and_every_reader_splits_it_back() {
    let Some((p, bus, tenant, session)) = setup("ses_runs").await else {
        return;
    };
    let other = SessionId::from("ses_runs_other");
    let mut live = tenant_live(&bus, &tenant).await;
    // One batch (this runtime runs the publishing task only once the test waits):
    // five deltas of one part, a status, a delta of another part, two of the first
    // part again; another session's deltas in between.
    let mut batch = Vec::new();
    for seq in 1..=5 {
        batch.push(delta_of(&tenant, &session, seq, "prt_a"));
        batch.push(delta_of(&tenant, &other, seq, "prt_o"));
    }
    batch.push(BusEvent::new(Envelope::new(
        tenant.clone(),
        session.clone(),
        6,
        Event::status(&session, "busy"),
    )));
    batch.push(delta_of(&tenant, &session, 7, "prt_b"));
    batch.push(delta_of(&tenant, &session, 8, "prt_a"));
    batch.push(delta_of(&tenant, &session, 9, "prt_a"));
    for ev in &batch {
        bus.publish(ev.clone()).unwrap();
    }
    bus.flush().await.unwrap();
    let mine: Vec<BusEvent> = batch
        .iter()
        .filter(|e| e.session_id == session)
        .cloned()
        .collect();

    // Entries `5-0` (seqs 1-5), `6-0`, `7-0`, `9-0` (seqs 8-9).
    let key = bus.keys().session_stream(&tenant, &session);
    let reply: redis::streams::StreamRangeReply = p.conn().xrange_all(&key).expect("XRANGE");
    let ids: Vec<&str> = reply.ids.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["5-0", "6-0", "7-0", "9-0"]);
    let run: Vec<u8> = reply.ids[0].get("d").expect("a compact run");
    assert_eq!(
        run,
        br#"["msg_1","prt_a",["t1 ","t2 ","t3 ","t4 ","t5 "]]"#.to_vec()
    );
    // The tenant stream keeps the publishing order exactly: the two sessions' deltas
    // alternate, so each is a reference of its own; seqs 8 and 9, published next to
    // each other, are one reference (`n` = 2).
    let tenant_entries = entries(&p, &bus.keys().tenant_stream(&tenant));
    let r = |s: &SessionId, seq: &str| {
        vec![
            ("r".to_owned(), s.as_str().as_bytes().to_vec()),
            ("seq".to_owned(), seq.as_bytes().to_vec()),
        ]
    };
    let mut want: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    for seq in ["1", "2", "3", "4", "5"] {
        want.push(r(&session, seq));
        want.push(r(&other, seq));
    }
    want.push(vec![
        ("e".to_owned(), serde_json::to_vec(&batch[10]).unwrap()),
        ("seq".to_owned(), b"6".to_vec()),
    ]);
    want.push(r(&session, "7"));
    let mut last = r(&session, "9");
    last.insert(0, ("n".to_owned(), b"2".to_vec()));
    want.push(last);
    assert_eq!(tenant_entries, want);

    // Replay from the start and from inside a run.
    assert_eq!(bus.replay(&tenant, &session, 1).await.unwrap().events, mine);
    assert_eq!(
        bus.replay(&tenant, &session, 3).await.unwrap().events,
        mine[2..]
    );
    assert_eq!(
        bus.replay(&tenant, &session, 9).await.unwrap().events,
        mine[8..]
    );
    // A subscription from inside a run.
    let mut from3 = bus
        .subscribe(&tenant, Topic::Session(session.clone()), Some(3))
        .await
        .unwrap();
    let want: Vec<(String, u64)> = mine[2..]
        .iter()
        .map(|e| (e.session_id.to_string(), e.seq))
        .collect();
    assert_eq!(next_seqs(&mut from3, want.len()).await, want);
    // The tenant subscriber gets all 14 events, each session's in seq order.
    let got = next_seqs(&mut live, batch.len()).await;
    for s in [&session, &other] {
        let seqs: Vec<u64> = got
            .iter()
            .filter(|(g, _)| g == s.as_str())
            .map(|g| g.1)
            .collect();
        let want: Vec<u64> = batch
            .iter()
            .filter(|e| &e.session_id == s)
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, want, "{s}");
    }

    // Retention that drops the first run: seqs 1-5 are gone, 6 on are not.
    let _: usize = p.conn().xdel(&key, &["5-0"]).expect("XDEL");
    let replay = bus.replay(&tenant, &session, 1).await.unwrap();
    assert!(replay.truncated);
    assert_eq!(replay.events, mine[5..]);
    assert!(bus
        .subscribe(&tenant, Topic::Session(session.clone()), Some(5))
        .await
        .is_err());
    assert!(bus
        .subscribe(&tenant, Topic::Session(session.clone()), Some(6))
        .await
        .is_ok());
}

#[tokio::test]
async fn a_trimmed_stream_whose_first_entry_is_a_run_counts_the_runs_seqs_as_kept() {
    let Some((p, bus, tenant, session)) = setup("ses_trim_run").await else {
        return;
    };
    // Entries `3-0` (seqs 1-3, flushed alone), then `6-0` (seqs 4-6).
    for seqs in [1..=3, 4..=6] {
        for seq in seqs {
            bus.publish(delta_of(&tenant, &session, seq, "prt_a"))
                .unwrap();
        }
        bus.flush().await.unwrap();
    }
    let key = bus.keys().session_stream(&tenant, &session);
    let _: usize = redis::cmd("XTRIM")
        .arg(&key)
        .arg("MAXLEN")
        .arg(1)
        .query(&mut p.conn())
        .expect("XTRIM");
    // Trimmed through seq 3, not through 5 (the id of the kept entry, minus one).
    let replay = bus.replay(&tenant, &session, 4).await.unwrap();
    assert!(!replay.truncated, "seqs 4-6 are all there");
    assert_eq!(
        replay.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [4, 5, 6]
    );
    assert!(bus.replay(&tenant, &session, 3).await.unwrap().truncated);
    let mut sub = bus
        .subscribe(&tenant, Topic::Session(session.clone()), Some(4))
        .await
        .expect("seq 4 is retained");
    let got = next_seqs(&mut sub, 3).await;
    assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), [4, 5, 6]);
}

#[tokio::test]
async fn a_run_that_overlaps_the_stream_is_refused_whole() {
    let Some((_p, bus, tenant, session)) = setup("ses_overlap").await else {
        return;
    };
    for seq in 1..=3 {
        bus.publish(delta_of(&tenant, &session, seq, "prt_a"))
            .unwrap();
    }
    bus.flush().await.unwrap();
    // Seqs 3-5 as one run: 3 is taken, so the run's id (5-0) alone would be accepted.
    for seq in 3..=5 {
        bus.publish(delta_of(&tenant, &session, seq, "prt_a"))
            .unwrap();
    }
    let err = bus.flush().await.unwrap_err().to_string();
    assert!(err.contains("overlap"), "{err}");
    let seqs: Vec<u64> = bus
        .replay(&tenant, &session, 1)
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
}
