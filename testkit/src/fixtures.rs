//! Small fixtures the test suites share: messages, environment numbers, runtimes,
//! normalized exports, waiting for a condition, a bus that checks what is published.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forge_core::id::now_ms;
use forge_core::model::{JsonMap, MessageBody, PartBody, TextPart, UserMessage, UserTime};
use forge_core::{
    Bus, BusCapabilities, BusEvent, Envelope, Event, LocalBus, Message, MessageId, Part, PartDelta,
    PartId, Replay, Result, SessionId, Subscription, TenantId, Topic,
};
use serde_json::Value;

/// A user message of agent `build`, made now, with one text part; fresh ids.
pub fn user_message(session: &SessionId, text: &str) -> (Message, Part) {
    user_message_with(
        session,
        MessageId::generate(),
        PartId::generate(),
        text,
        now_ms(),
    )
}

/// A user message of agent `build` with the ids and creation time given, with one text
/// part.
pub fn user_message_with(
    session: &SessionId,
    id: MessageId,
    part: PartId,
    text: impl Into<String>,
    created: i64,
) -> (Message, Part) {
    let msg = Message {
        id,
        session_id: session.clone(),
        body: MessageBody::User(UserMessage {
            time: UserTime {
                created,
                extra: JsonMap::new(),
            },
            agent: "build".into(),
            model: None,
            system: None,
            tools: None,
            extra: JsonMap::new(),
        }),
    };
    let part = Part {
        id: part,
        session_id: session.clone(),
        message_id: msg.id.clone(),
        body: PartBody::Text(TextPart::plain(text)),
    };
    (msg, part)
}

/// A bus event of `tenant`: a delta `text` to the `text` field of part `prt_1` of
/// message `msg_1` in `session`, at `seq`.
pub fn delta(
    tenant: &TenantId,
    session: &SessionId,
    seq: u64,
    text: impl Into<String>,
) -> BusEvent {
    BusEvent::new(Envelope {
        tenant: tenant.clone(),
        session_id: session.clone(),
        seq,
        epoch: None,
        event: Event::PartDelta(PartDelta {
            session_id: session.clone(),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: "text".into(),
            delta: text.into(),
        }),
    })
}

/// The text of a text or reasoning part (`None` for other parts).
pub fn text_of(p: &Part) -> Option<&str> {
    match &p.body {
        PartBody::Text(t) => Some(&t.text),
        PartBody::Reasoning(r) => Some(&r.text),
        _ => None,
    }
}

/// The number in the environment variable `var`, or `default` when it is unset; a value
/// that is not such a number fails the test, naming the variable.
pub fn env_number<T: FromStr>(var: &str, default: T) -> T {
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a valid number")),
        Err(_) => default,
    }
}

/// [`env_number`] for a count.
pub fn env_usize(var: &str, default: usize) -> usize {
    env_number(var, default)
}

/// A multi-threaded tokio runtime with two workers, I/O and time enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A current-thread tokio runtime, I/O and time enabled.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// An export (or any JSON document) with generated ids (`ses_…`, `msg_…`, `prt_…`)
/// numbered by first appearance and every number under a `time` key zeroed: what two
/// runs of the same stream have in common.
pub fn normalized(doc: &Value) -> Value {
    fn walk(
        v: &Value,
        ids: &mut std::collections::BTreeMap<String, usize>,
        in_time: bool,
    ) -> Value {
        match v {
            Value::String(s) if ["ses_", "msg_", "prt_"].iter().any(|p| s.starts_with(p)) => {
                let n = ids.len();
                Value::String(format!("id#{}", ids.entry(s.clone()).or_insert(n)))
            }
            Value::Number(_) if in_time => Value::from(0),
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, ids, in_time)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), walk(x, ids, in_time || k == "time")))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(doc, &mut std::collections::BTreeMap::new(), false)
}

/// JSON `text` whose lone UTF-16 surrogate halves (`\ud83d` with no other half beside it:
/// a provider that split a pair between two deltas, or a half never completed), which
/// strict JSON refuses, are replaced by `lone(code unit)` (written into the JSON text as
/// is); whole pairs and escaped backslashes are kept. Panics if the result is not JSON.
pub fn json_with_lone_halves(text: &str, lone: impl Fn(u32) -> String) -> Value {
    let half = |s: &str| -> Option<u32> {
        let hex = s.strip_prefix("\\u")?.get(..4)?;
        u32::from_str_radix(hex, 16)
            .ok()
            .filter(|u| (0xD800..=0xDFFF).contains(u))
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("\\\\") {
            out.push_str("\\\\");
            rest = &rest[2..];
        } else if let Some(u) = half(rest) {
            let paired =
                (0xD800..=0xDBFF).contains(&u) && half(&rest[6..]).is_some_and(|l| l >= 0xDC00);
            let taken = if paired { 12 } else { 6 };
            if paired {
                out.push_str(&rest[..taken]);
            } else {
                out.push_str(&lone(u));
            }
            rest = &rest[taken..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON: {e}"))
}

/// Waits until `ready` holds, checking every 50 ms up to `limit`; panics naming `what`
/// otherwise.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a [`TapBus`] does with each event before it publishes it: look at it, record it,
/// or refuse it with an error (the event is then not published). A closure
/// `Fn(&BusEvent) -> forge_core::Result<()>` is one.
pub trait OnPublish: Send + Sync + 'static {
    /// Called with each event [`Bus::publish`] is given, before it is published.
    fn on_publish(&self, event: &BusEvent) -> Result<()>;
}

impl<F> OnPublish for F
where
    F: Fn(&BusEvent) -> Result<()> + Send + Sync + 'static,
{
    fn on_publish(&self, event: &BusEvent) -> Result<()> {
        self(event)
    }
}

/// A [`LocalBus`] that shows every published event to [`tap`](Self::tap) first; the
/// other [`Bus`] methods are the local bus's.
pub struct TapBus<T> {
    /// The bus the events go to.
    pub inner: LocalBus,
    /// What sees each event first.
    pub tap: T,
}

impl<T: OnPublish> TapBus<T> {
    /// `inner`, with `tap` shown every event before it.
    pub fn new(inner: LocalBus, tap: T) -> Self {
        Self { inner, tap }
    }
}

impl<T> fmt::Debug for TapBus<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TapBus")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<T: OnPublish> Bus for TapBus<T> {
    fn capabilities(&self) -> BusCapabilities {
        self.inner.capabilities()
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
        self.tap.on_publish(&event)?;
        self.inner.publish(event)
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    async fn subscribe(
        &self,
        tenant: &TenantId,
        topic: Topic,
        from_seq: Option<u64>,
    ) -> Result<Subscription> {
        self.inner.subscribe(tenant, topic, from_seq).await
    }

    async fn replay(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Replay> {
        self.inner.replay(tenant, session, from_seq).await
    }

    async fn last_seq(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<u64>> {
        self.inner.last_seq(tenant, session).await
    }
}
