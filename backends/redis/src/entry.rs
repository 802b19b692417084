//! The stream entries the bus writes and how they read back.
//!
//! A **session stream** holds each event of one session as entry `seq-0`:
//! - a delta as one field `d`, a JSON array `[messageID, partID, text]`, followed by
//!   the appended field when it is not `text` and by the writer's epoch when there is
//!   one. Tenant and session are the stream's, the seq is the entry id's. A delta is
//!   most of what a turn publishes, and its envelope (tenant, session twice, seq, the
//!   event's type and field names) is several times its text;
//! - a run of deltas published in one batch, of one part with consecutive seqs, as one
//!   such entry whose `text` is the array of their texts: entry `b-0` holds seqs
//!   `b-n+1 ..= b`. Every reader gets the run back as the `n` deltas that were
//!   published; one that starts inside the run (a resume from a seq) drops those
//!   before its start;
//! - any other event as `e`, the envelope's JSON.
//!
//! A **tenant stream** (ids assigned by Redis) holds every event of the tenant in
//! publishing order:
//! - a delta as a reference: `r` (its session), `seq` and, when it stands for several
//!   deltas of one run published next to each other, `n` (seqs `seq-n+1 ..= seq`). A
//!   tenant subscriber reads the text from the session stream, so each delta's text is
//!   appended once;
//! - any other event as `seq` and `e`.
//!
//! Entries written before deltas were compact (`seq` and `e`, in both streams) read
//! as they always did.

use forge_core::{
    BusEvent, Envelope, Error, Event, MessageId, PartDelta, PartId, Result, SessionId, TenantId,
};
use redis::streams::StreamId;
use serde::Deserialize;

/// A stream entry read back.
#[derive(Debug)]
pub(crate) enum Entry {
    /// The event itself.
    Event(BusEvent),
    /// A run of deltas, in seq order.
    Run(Vec<BusEvent>),
    /// A tenant stream's reference to deltas held by their session stream.
    Ref {
        /// The deltas' session.
        session: SessionId,
        /// The last one's seq.
        seq: u64,
        /// How many: seqs `seq - count + 1 ..= seq`.
        count: u64,
    },
}

/// What an event is written as: the field of its session stream entry and that
/// field's value.
pub(crate) struct Encoded {
    /// `d` (a delta, compact) or `e` (the envelope's JSON).
    pub field: &'static str,
    /// The field's value.
    pub value: Vec<u8>,
}

/// Encodes an event for its session stream (see the module documentation).
pub(crate) fn encode(ev: &BusEvent) -> Result<Encoded> {
    match &ev.event {
        Event::PartDelta(d) => compact(d, ev.epoch, &*d.delta),
        _ => Ok(Encoded {
            field: "e",
            value: serde_json::to_vec(ev)?,
        }),
    }
}

/// The `d` field of delta `d` (the first of a run) written by `epoch`, with `text`:
/// its text, or the run's texts.
fn compact(d: &PartDelta, epoch: Option<u64>, text: impl serde::Serialize) -> Result<Encoded> {
    let (m, p, t) = (d.message_id.as_str(), d.part_id.as_str(), text);
    let value = match (&*d.field, epoch) {
        ("text", None) => serde_json::to_vec(&(m, p, t))?,
        (f, None) => serde_json::to_vec(&(m, p, t, f))?,
        (f, Some(e)) => serde_json::to_vec(&(m, p, t, f, e))?,
    };
    Ok(Encoded { field: "d", value })
}

/// Whether `next` continues the run that ends with `last`: a delta of the same part,
/// appended field and writer, with the next seq.
pub(crate) fn continues(last: &BusEvent, next: &BusEvent) -> bool {
    match (&last.event, &next.event) {
        (Event::PartDelta(a), Event::PartDelta(b)) => {
            next.seq == last.seq + 1
                && next.session_id == last.session_id
                && next.tenant == last.tenant
                && next.epoch == last.epoch
                && a.part_id == b.part_id
                && a.message_id == b.message_id
                && a.field == b.field
        }
        _ => false,
    }
}

/// Encodes a run of deltas (see [`continues`]) as one session stream entry, written
/// with the last one's seq as its id. A run of one is [`encode`]'s entry.
pub(crate) fn encode_run(run: &[&BusEvent]) -> Result<Encoded> {
    let (first, rest) = match run {
        [] => return Err(Error::invalid("an empty run of deltas")),
        [one] => return encode(one),
        [first, rest @ ..] => (first, rest),
    };
    let Event::PartDelta(d) = &first.event else {
        return encode(first);
    };
    let texts: Vec<&str> = std::iter::once(*first)
        .chain(rest.iter().copied())
        .map(|ev| match &ev.event {
            Event::PartDelta(d) => d.delta.as_str(),
            _ => "",
        })
        .collect();
    compact(d, first.epoch, texts)
}

/// A compact delta's text: one delta's, or a run's.
#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Run(Vec<String>),
}

/// A compact delta's `d` field.
#[derive(Deserialize)]
struct Compact {
    message: String,
    part: String,
    text: Texts,
    #[serde(default = "text_field")]
    field: String,
    #[serde(default)]
    epoch: Option<u64>,
}

fn text_field() -> String {
    "text".to_owned()
}

/// The seq of an entry id `seq-n`.
pub(crate) fn seq_of(id: &str) -> Result<u64> {
    id.split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .ok_or_else(|| Error::Codec {
            message: format!("stream entry id {id:?} is not seq-n"),
            source: None,
        })
}

/// The first seq an entry of a session stream holds: its id's, or for a run of `n`
/// deltas, `n - 1` before it.
pub(crate) fn first_seq(entry: &StreamId) -> Result<u64> {
    let last = seq_of(&entry.id)?;
    let Some(bytes) = entry.get::<Vec<u8>>("d") else {
        return Ok(last);
    };
    let c: Compact = serde_json::from_slice(&bytes)?;
    match c.text {
        Texts::One(_) => Ok(last),
        Texts::Run(texts) => Ok(last.saturating_sub(texts.len() as u64) + 1),
    }
}

fn bad(entry: &StreamId, what: &str) -> Error {
    Error::Codec {
        message: format!("stream entry {}: {what}", entry.id),
        source: None,
    }
}

/// Reads an entry of a stream of `tenant`; `session` is the stream's session when it
/// is a session stream (`None`: a tenant or work stream).
pub(crate) fn decode(
    entry: &StreamId,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<Entry> {
    if let Some(bytes) = entry.get::<Vec<u8>>("e") {
        // The event's JSON text is kept with it: an SSE frame passes it on as read.
        return Ok(Entry::Event(serde_json::from_slice(&bytes)?));
    }
    if let Some(r) = entry.get::<String>("r") {
        let seq = entry
            .get::<String>("seq")
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(entry, "a delta reference without a numeric `seq` field"))?;
        let count = match entry.get::<String>("n") {
            None => 1,
            Some(n) => n
                .parse()
                .ok()
                .filter(|&n| n >= 1 && n <= seq)
                .ok_or_else(|| bad(entry, "a delta reference whose `n` is not a count of seqs"))?,
        };
        return Ok(Entry::Ref {
            session: SessionId::from(r),
            seq,
            count,
        });
    }
    let Some(bytes) = entry.get::<Vec<u8>>("d") else {
        return Err(bad(entry, "none of the fields `e`, `d`, `r`"));
    };
    let Some(session) = session else {
        return Err(bad(entry, "a compact delta outside a session stream"));
    };
    let c: Compact = serde_json::from_slice(&bytes)?;
    let last = seq_of(&entry.id)?;
    let (message, part): (MessageId, PartId) = (c.message.into(), c.part.into());
    // The usual field borrowed, so a run's deltas share it without a copy each.
    let field: std::borrow::Cow<'static, str> = match c.field.as_str() {
        "text" => "text".into(),
        _ => c.field.into(),
    };
    let delta = |seq: u64, text: String| {
        BusEvent::new(Envelope {
            tenant: tenant.clone(),
            session_id: session.clone(),
            seq,
            epoch: c.epoch,
            event: Event::PartDelta(PartDelta {
                session_id: session.clone(),
                message_id: message.clone(),
                part_id: part.clone(),
                field: field.clone(),
                delta: text,
            }),
        })
    };
    match c.text {
        Texts::One(text) => Ok(Entry::Event(delta(last, text))),
        Texts::Run(texts) => {
            let n = texts.len() as u64;
            if n == 0 || n > last {
                return Err(bad(
                    entry,
                    "a run of deltas longer than its entry id allows",
                ));
            }
            let first = last + 1 - n;
            Ok(Entry::Run(
                texts
                    .into_iter()
                    .zip(first..)
                    .map(|(text, seq)| delta(seq, text))
                    .collect(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, fields: &[(&str, &[u8])]) -> StreamId {
        StreamId {
            id: id.to_owned(),
            map: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), redis::Value::BulkString(v.to_vec())))
                .collect(),
            milliseconds_elapsed_from_delivery: None,
            delivered_count: None,
        }
    }

    fn delta(field: &'static str, epoch: Option<u64>) -> BusEvent {
        let t = TenantId::new("t1").unwrap();
        let s = SessionId::from("ses_1");
        BusEvent::new(Envelope {
            tenant: t,
            session_id: s.clone(),
            seq: 42,
            epoch,
            event: Event::PartDelta(PartDelta {
                session_id: s,
                message_id: "msg_1".into(),
                part_id: "prt_1".into(),
                field: field.into(),
                delta: "héllo \"x\"\n".into(),
            }),
        })
    }

    #[test]
    fn a_delta_is_written_compact_and_reads_back_equal() {
        let t = TenantId::new("t1").unwrap();
        let s = SessionId::from("ses_1");
        for (field, epoch) in [("text", None), ("reasoning", None), ("text", Some(7))] {
            let ev = delta(field, epoch);
            let enc = encode(&ev).unwrap();
            assert_eq!(enc.field, "d");
            let full = serde_json::to_vec(&ev).unwrap();
            assert!(
                enc.value.len() * 3 < full.len(),
                "{} bytes against the envelope's {}",
                enc.value.len(),
                full.len()
            );
            match decode(&entry("42-0", &[("d", &enc.value)]), &t, Some(&s)).unwrap() {
                Entry::Event(back) => assert_eq!(back, ev, "{field} {epoch:?}"),
                other => panic!("a delta read as {other:?}"),
            }
        }
        assert_eq!(
            encode(&delta("text", None)).unwrap().value,
            "[\"msg_1\",\"prt_1\",\"héllo \\\"x\\\"\\n\"]".as_bytes(),
            "the text appended, its message and part, nothing else"
        );
    }

    #[test]
    fn other_events_and_older_entries_are_the_envelopes_json() {
        let t = TenantId::new("t1").unwrap();
        let s = SessionId::from("ses_1");
        let status = BusEvent::new(Envelope::new(
            t.clone(),
            s.clone(),
            3,
            Event::status(&s, "busy"),
        ));
        let enc = encode(&status).unwrap();
        assert_eq!(enc.field, "e");
        assert_eq!(enc.value, serde_json::to_vec(&status).unwrap());
        // A delta written before deltas were compact: `seq` and the envelope's JSON.
        let old = delta("text", None);
        let json = serde_json::to_vec(&old).unwrap();
        for session in [Some(&s), None] {
            match decode(&entry("42-0", &[("seq", b"42"), ("e", &json)]), &t, session).unwrap() {
                Entry::Event(back) => assert_eq!(back, old),
                other => panic!("an event read as {other:?}"),
            }
        }
    }

    /// An entry's id and fields, the stream's session, what the error must say.
    type Case<'a> = (
        &'a str,
        Vec<(&'a str, &'a [u8])>,
        Option<SessionId>,
        &'a str,
    );

    #[test]
    fn a_reference_names_its_session_and_seq_and_bad_entries_are_named() {
        let t = TenantId::new("t1").unwrap();
        let e = entry("1700000000000-3", &[("r", b"ses_9"), ("seq", b"17")]);
        match decode(&e, &t, None).unwrap() {
            Entry::Ref {
                session,
                seq,
                count,
            } => assert_eq!((session.as_str(), seq, count), ("ses_9", 17, 1)),
            other => panic!("a reference read as {other:?}"),
        }
        let cases: [Case; 4] = [
            ("5-0", vec![("r", b"ses_9")], None, "numeric `seq`"),
            ("5-0", vec![("x", b"1")], None, "none of the fields"),
            (
                "5-0",
                vec![("d", br#"["m","p","t"]"#)],
                None,
                "outside a session stream",
            ),
            (
                "x",
                vec![("d", br#"["m","p","t"]"#)],
                Some(SessionId::from("s")),
                "not seq-n",
            ),
        ];
        for (id, fields, session, want) in cases {
            let err = decode(&entry(id, &fields), &t, session.as_ref())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    #[test]
    fn a_run_is_one_entry_that_reads_back_as_its_deltas_and_knows_its_first_seq() {
        let t = TenantId::new("t1").unwrap();
        let s = SessionId::from("ses_1");
        let run: Vec<BusEvent> = (40..=42)
            .map(|seq| {
                let mut env: Envelope<Event> = (*delta("reasoning", Some(3))).clone();
                env.seq = seq;
                if let Event::PartDelta(d) = &mut env.event {
                    d.delta = format!("<{seq}>");
                }
                BusEvent::new(env)
            })
            .collect();
        assert!(continues(&run[0], &run[1]) && continues(&run[1], &run[2]));
        assert!(!continues(&run[0], &run[2]), "seqs must be consecutive");
        let refs: Vec<&BusEvent> = run.iter().collect();
        let enc = encode_run(&refs).unwrap();
        assert_eq!(
            enc.value,
            br#"["msg_1","prt_1",["<40>","<41>","<42>"],"reasoning",3]"#
        );
        let e = entry("42-0", &[("d", &enc.value)]);
        match decode(&e, &t, Some(&s)).unwrap() {
            Entry::Run(back) => assert_eq!(back, run),
            other => panic!("read as {other:?}"),
        }
        assert_eq!(first_seq(&e).unwrap(), 40);
        assert_eq!(first_seq(&entry("7-0", &[("e", b"{}")])).unwrap(), 7);
        // A run of one is a single delta's entry.
        assert_eq!(
            encode_run(&refs[..1]).unwrap().value,
            encode(&run[0]).unwrap().value
        );
        // A run longer than the seqs before its id is refused, naming the entry.
        let err = decode(&entry("2-0", &[("d", &enc.value)]), &t, Some(&s)).unwrap_err();
        assert!(err.to_string().contains("stream entry 2-0"), "{err}");
    }
}
