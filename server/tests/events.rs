//! Live events over SSE: resume with `Last-Event-ID` gives exactly the events after it
//! (redb with the in-process bus, Postgres, Redis streams), a gap that cannot be
//! replayed is said, snapshot-then-live loses nothing, and a slow client is dropped
//! without slowing anyone.

mod common;

use common::*;
use forge_server::ServerOptions;
use forge_store::Bus as _;
use forge_store::OpenOptions;
use serde_json::Value;

fn options() -> ServerOptions {
    ServerOptions::new(two_tenants())
}

/// Every event of a session stream until `session.idle`, with its id.
async fn until_idle(sse: &mut SseReader) -> Vec<SseEvent> {
    let mut out = Vec::new();
    loop {
        let e = sse.expect().await;
        let idle = e.kind() == "session.idle";
        out.push(e);
        if idle {
            return out;
        }
    }
}

/// Uploads a turn while a subscriber reads it whole, then reconnects from several
/// points: each resume gives exactly the events after its `Last-Event-ID`.
async fn resume_gives_exactly_the_rest(s: &TestServer, session: &str) {
    s.create(TOKEN_A, session).await;
    let path = format!("/session/{session}/event");
    let mut sse = SseReader::connected(s, &path, TOKEN_A, None).await;
    let (status, body) = s
        .upload(TOKEN_A, session, ndjson(&turn("resume", 12, "tok ")))
        .await;
    assert_eq!(status, 200, "{body}");
    let all = until_idle(&mut sse).await;
    let ids: Vec<u64> = all
        .iter()
        .map(|e| e.id.as_deref().expect("an id").parse().expect("a seq"))
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "seqs increase: {ids:?}"
    );
    let deltas = all
        .iter()
        .filter(|e| e.kind() == "message.part.delta")
        .count();
    assert_eq!(deltas, 12);
    for k in [0, 1, all.len() / 2, all.len() - 2] {
        let last = ids[k].to_string();
        let mut again = SseReader::connected(s, &path, TOKEN_A, Some(&last)).await;
        let rest = until_idle(&mut again).await;
        let want: Vec<&Value> = all[k + 1..].iter().map(|e| &e.data).collect();
        let got: Vec<&Value> = rest.iter().map(|e| &e.data).collect();
        assert_eq!(got, want, "resume after {last}");
    }
}

#[tokio::test]
async fn resume_on_redb_gives_exactly_the_events_after_last_event_id() {
    let s = redb_server(options(), OpenOptions::new()).await;
    resume_gives_exactly_the_rest(&s, "ses_resume").await;
    // A Last-Event-ID that is no seq is bad input.
    sent(
        s.get("/session/ses_resume/event", TOKEN_A)
            .header("Last-Event-ID", "abc"),
        400,
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn resume_on_postgres_gives_exactly_the_events_after_last_event_id() {
    let Some(url) = forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", "serve over Postgres")
    else {
        return;
    };
    let forge = forge_store::open(&url).await.expect("open postgres");
    let s = start(forge, options()).await;
    let session = format!("ses_pg_{}", forge_store::id::now_ms());
    resume_gives_exactly_the_rest(&s, &session).await;
    // Row-level security under the other tenant's token: not found.
    s.json(&format!("/session/{session}/message"), TOKEN_B, 404)
        .await;
    s.stop().await;
}

#[tokio::test]
async fn resume_on_redis_gives_exactly_the_events_after_last_event_id() {
    let Some(url) = forge_testkit::service_url("FORGE_TEST_REDIS_URL", "serve over Redis") else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let prefix = format!("forge-serve-test-{}", forge_store::id::now_ms());
    let forge = forge_store::open(&format!("{url}{sep}prefix={prefix}"))
        .await
        .expect("open redis");
    let s = start(forge, options()).await;
    resume_gives_exactly_the_rest(&s, "ses_redis").await;
    s.stop().await;
}

#[tokio::test]
async fn a_gap_the_bus_no_longer_holds_is_announced_as_a_reload() {
    let mut open = OpenOptions::new();
    open.replay_per_session = 8;
    let s = server_with_session(options(), open, "ses_gap").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_gap", ndjson(&turn("long", 30, "z")))
        .await;
    assert_eq!(status, 200);
    let mut sse = SseReader::connected(&s, "/session/ses_gap/event", TOKEN_A, Some("2")).await;
    let reload = sse.expect().await;
    assert_eq!(reload.kind(), "session.reload", "{:?}", reload.data);
    let seq = reload.data["properties"]["seq"].as_u64().expect("seq");
    assert_eq!(reload.id.as_deref(), Some(&*seq.to_string()));
    assert!(
        reload.data["properties"]["reason"]
            .as_str()
            .expect("reason")
            .contains("no longer retained"),
        "{:?}",
        reload.data
    );
    // After the reload, the stream continues with events after that seq only.
    let (status, _) = s
        .upload(TOKEN_A, "ses_gap", ndjson(&turn("next", 2, "y")))
        .await;
    assert_eq!(status, 200);
    let next = until_idle(&mut sse).await;
    assert!(next
        .iter()
        .all(|e| e.id.as_deref().expect("id").parse::<u64>().expect("seq") > seq));
    s.stop().await;
}

#[tokio::test]
async fn a_resume_from_the_last_seq_dropped_by_retention_needs_no_reload() {
    // The bus keeps the newest 8 events of the session: a client that saw everything
    // through the newest one dropped misses nothing the bus lacks.
    let mut open = OpenOptions::new();
    open.replay_per_session = 8;
    let s = server_with_session(options(), open, "ses_edge").await;
    let path = "/session/ses_edge/event";
    let mut sse = SseReader::connected(&s, path, TOKEN_A, None).await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_edge", ndjson(&turn("long", 30, "z")))
        .await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = until_idle(&mut sse)
        .await
        .iter()
        .map(|e| e.id.as_deref().expect("id").parse().expect("seq"))
        .collect();
    let (dropped, kept) = ids.split_at(ids.len() - 8);
    let from = dropped.last().expect("more than 8 events").to_string();
    let mut again = SseReader::connected(&s, path, TOKEN_A, Some(&from)).await;
    let mut got = Vec::new();
    for _ in kept {
        let e = again.expect().await;
        assert_ne!(
            e.kind(),
            "session.reload",
            "resumed after seq {from}: {:?}",
            e.data
        );
        got.push(e.id.as_deref().expect("id").parse::<u64>().expect("seq"));
    }
    assert_eq!(got, kept);
    s.stop().await;
}

#[tokio::test]
async fn a_live_only_bus_resumes_at_the_stored_seq_and_reloads_from_any_other() {
    let mut open = OpenOptions::new();
    open.replay_per_session = 0;
    let s = server_with_session(options(), open, "ses_live").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_live", ndjson(&turn("first", 3, "a")))
        .await;
    assert_eq!(status, 200);
    // From a seq before the stored one: the bus keeps nothing to resume from, so the
    // client is told to reload, with the seq the store holds.
    let path = "/session/ses_live/event";
    let mut stale = SseReader::connected(&s, path, TOKEN_A, Some("1")).await;
    let reload = stale.expect().await;
    assert_eq!(reload.kind(), "session.reload", "{:?}", reload.data);
    let seq = reload.data["properties"]["seq"].as_u64().expect("seq");
    // From the stored seq itself: nothing was missed, the stream goes on live.
    let at = seq.to_string();
    let mut sse = SseReader::connected(&s, path, TOKEN_A, Some(&at)).await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_live", ndjson(&turn("second", 2, "b")))
        .await;
    assert_eq!(status, 200);
    let next = until_idle(&mut sse).await;
    assert!(
        next.iter().all(|e| e.kind() != "session.reload"
            && e.id.as_deref().expect("id").parse::<u64>().expect("seq") > seq),
        "{:?}",
        next.iter()
            .map(|e| (e.kind().to_owned(), e.id.clone()))
            .collect::<Vec<_>>()
    );
    s.stop().await;
}

/// A live-only bus whose publishes can be held back and released later: an event
/// committed before a stream read the store but published after it subscribed.
#[derive(Debug, Default)]
struct HoldingBus {
    inner: forge_store::backend::LocalBus,
    held: parking_lot::Mutex<Option<Vec<forge_store::BusEvent>>>,
}

impl HoldingBus {
    fn hold(&self) {
        *self.held.lock() = Some(Vec::new());
    }

    fn release(&self) {
        let held = self.held.lock().take().unwrap_or_default();
        for e in held {
            self.inner.publish(e).expect("publish");
        }
    }
}

#[async_trait::async_trait]
impl forge_store::Bus for HoldingBus {
    fn capabilities(&self) -> forge_store::backend::BusCapabilities {
        self.inner.capabilities()
    }

    fn publish(&self, event: forge_store::BusEvent) -> Result<(), forge_store::CoreError> {
        match &mut *self.held.lock() {
            Some(held) => {
                held.push(event);
                Ok(())
            }
            None => self.inner.publish(event),
        }
    }

    async fn subscribe(
        &self,
        tenant: &forge_store::TenantId,
        topic: forge_store::Topic,
        from_seq: Option<u64>,
    ) -> Result<forge_store::Subscription, forge_store::CoreError> {
        self.inner.subscribe(tenant, topic, from_seq).await
    }

    async fn replay(
        &self,
        tenant: &forge_store::TenantId,
        session: &forge_store::SessionId,
        from_seq: u64,
    ) -> Result<forge_store::backend::Replay, forge_store::CoreError> {
        self.inner.replay(tenant, session, from_seq).await
    }

    async fn last_seq(
        &self,
        tenant: &forge_store::TenantId,
        session: &forge_store::SessionId,
    ) -> Result<Option<u64>, forge_store::CoreError> {
        self.inner.last_seq(tenant, session).await
    }
}

/// On a live-only bus, a stream reads the store's seq after it subscribes; an event at
/// or below that seq that arrives later (committed before the read, published after
/// the subscription) is already in what the client reads from the store, and is not
/// sent again.
#[tokio::test]
async fn an_event_the_store_held_when_the_stream_began_is_not_sent_again() {
    let bus = std::sync::Arc::new(HoldingBus::default());
    let store = std::sync::Arc::new(forge_store::backend::MemoryStore::new());
    let engine = forge_store::Engine::direct(store, bus.clone());
    let s = start(forge_store::Forge::new(engine), options()).await;
    s.create(TOKEN_A, "ses_late").await;
    bus.hold();
    let (status, _) = s
        .upload(TOKEN_A, "ses_late", ndjson(&turn("first", 3, "a")))
        .await;
    assert_eq!(status, 200);
    let path = "/session/ses_late/event";
    let mut sse = SseReader::connected(&s, path, TOKEN_A, None).await;
    // The first turn's events reach the bus only now, after the stream began.
    bus.release();
    let (status, _) = s
        .upload(TOKEN_A, "ses_late", ndjson(&turn("second", 2, "b")))
        .await;
    assert_eq!(status, 200);
    // Up to the idle after the second turn's deltas (the first turn's own status and
    // idle follow the stored seq, so they do come).
    let mut events = Vec::new();
    while !events
        .iter()
        .any(|e: &SseEvent| e.kind() == "message.part.delta")
        || events.last().is_some_and(|e| e.kind() != "session.idle")
    {
        events.push(sse.expect().await);
    }
    let deltas: Vec<&SseEvent> = events
        .iter()
        .filter(|e| e.kind() == "message.part.delta")
        .collect();
    assert_eq!(
        deltas.len(),
        2,
        "only the second turn's deltas: {:?}",
        events
            .iter()
            .map(|e| (e.kind().to_owned(), e.id.clone()))
            .collect::<Vec<_>>()
    );
    s.stop().await;
}

/// What a client builds from a snapshot and the events after it: messages by id, each
/// with its parts by id; deltas appended to their part's field.
#[derive(Default)]
struct ClientView {
    messages:
        std::collections::BTreeMap<String, (Value, std::collections::BTreeMap<String, Value>)>,
}

impl ClientView {
    fn from_snapshot(snapshot: &[Value]) -> Self {
        let mut v = Self::default();
        for m in snapshot {
            let parts = m["parts"]
                .as_array()
                .expect("parts")
                .iter()
                .map(|p| (p["id"].as_str().expect("id").to_owned(), p.clone()))
                .collect();
            v.messages.insert(
                m["info"]["id"].as_str().expect("id").to_owned(),
                (m["info"].clone(), parts),
            );
        }
        v
    }

    fn apply(&mut self, e: &SseEvent) {
        let p = &e.data["properties"];
        match e.kind() {
            "message.updated" => {
                let id = p["info"]["id"].as_str().expect("id").to_owned();
                self.messages.entry(id).or_default().0 = p["info"].clone();
            }
            "message.part.updated" => {
                let part = &p["part"];
                let m = part["messageID"].as_str().expect("message").to_owned();
                let id = part["id"].as_str().expect("id").to_owned();
                self.messages
                    .entry(m)
                    .or_default()
                    .1
                    .insert(id, part.clone());
            }
            "message.part.delta" => {
                let m = p["messageID"].as_str().expect("message");
                let id = p["partID"].as_str().expect("part");
                let field = p["field"].as_str().expect("field");
                let part = self
                    .messages
                    .get_mut(m)
                    .and_then(|(_, parts)| parts.get_mut(id))
                    .unwrap_or_else(|| panic!("a delta for part {id} the client never saw"));
                let text = format!(
                    "{}{}",
                    part[field].as_str().unwrap_or(""),
                    p["delta"].as_str().expect("delta")
                );
                part[field] = Value::String(text);
            }
            _ => {}
        }
    }

    fn into_json(self) -> Vec<Value> {
        self.messages
            .into_values()
            .map(|(info, parts)| {
                serde_json::json!({"info": info, "parts": parts.into_values().collect::<Vec<_>>()})
            })
            .collect()
    }
}

/// A client reads the history while a turn streams, then subscribes with the seq the
/// snapshot reported: the snapshot plus the events after it rebuild exactly what is
/// stored at the end, and every streamed delta after the snapshot arrives once.
async fn snapshot_then_live(open: OpenOptions) {
    let s = server_with_session(options(), open, "ses_snap").await;
    let lines = turn("snapshot", 6, "ab ");
    let mut upload = s.upload_lines(TOKEN_A, "ses_snap", 16);
    // Three of the six deltas go out before the snapshot is read.
    for l in &lines[..7] {
        upload.line(l).await;
    }
    let mut watcher = SseReader::connect(&s, "/session/ses_snap/event", TOKEN_A, Some("0")).await;
    let mut seen = 0;
    while seen < 3 {
        if watcher.expect().await.kind() == "message.part.delta" {
            seen += 1;
        }
    }
    let r = sent(s.get("/session/ses_snap/message", TOKEN_A), 200).await;
    let seq = header(&r, "x-forge-seq").expect("the snapshot's seq");
    let snapshot: Vec<Value> = r.json().await.expect("json");
    let mut view = ClientView::from_snapshot(&snapshot);
    let mut sse = SseReader::connect(&s, "/session/ses_snap/event", TOKEN_A, Some(&seq)).await;
    for l in &lines[7..] {
        upload.line(l).await;
    }
    let r = upload.finish().await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(sse.expect().await.kind(), "server.connected");
    let events = until_idle(&mut sse).await;
    let streamed: String = events
        .iter()
        .filter(|e| e.kind() == "message.part.delta")
        .map(|e| e.data["properties"]["delta"].as_str().expect("delta"))
        .collect();
    // The store holds no streamed text before text-end, so all six come after it.
    assert_eq!(
        streamed, "ab ab ab ab ab ab ",
        "every delta after the snapshot, once"
    );
    for e in &events {
        view.apply(e);
    }
    let stored = s.json("/session/ses_snap/message", TOKEN_A, 200).await;
    assert_eq!(Value::Array(view.into_json()), stored);
    s.stop().await;
}

#[tokio::test]
async fn a_snapshot_then_its_seq_loses_nothing_and_repeats_nothing() {
    snapshot_then_live(OpenOptions::new()).await;
}

#[tokio::test]
async fn a_snapshot_then_its_seq_loses_nothing_with_a_commit_per_boundary() {
    snapshot_then_live(OpenOptions::new().projection(forge_store::Projection::Direct)).await;
}

#[tokio::test]
async fn the_tenant_stream_resumes_from_its_own_ids() {
    let mut opts = options();
    opts.event_replay = 20;
    let s = server_with_session(opts, OpenOptions::new(), "ses_t1").await;
    let mut sse = SseReader::connected(&s, "/event", TOKEN_A, None).await;
    // Another tenant's events never show.
    let mut other = SseReader::connect(&s, "/event", TOKEN_B, None).await;
    other.expect().await;
    s.upload(TOKEN_A, "ses_t1", ndjson(&turn("t", 3, "q")))
        .await;
    let all = until_idle(&mut sse).await;
    assert!(all
        .iter()
        .all(|e| e.data["properties"]["sessionID"] == "ses_t1"));
    let k = 4;
    let last = all[k].id.clone().expect("id");
    let mut again = SseReader::connect(&s, "/event", TOKEN_A, Some(&last)).await;
    again.expect().await;
    let rest = until_idle(&mut again).await;
    let want: Vec<&Value> = all[k + 1..].iter().map(|e| &e.data).collect();
    assert_eq!(rest.iter().map(|e| &e.data).collect::<Vec<_>>(), want);
    // An id of another server: reload first.
    let mut foreign = SseReader::connect(&s, "/event", TOKEN_A, Some("elsewhere.0-3")).await;
    foreign.expect().await;
    assert_eq!(foreign.expect().await.kind(), "server.reload");
    // An id older than what is kept: reload, saying so.
    s.upload(TOKEN_A, "ses_t1", ndjson(&turn("t2", 30, "q")))
        .await;
    let mut old = SseReader::connect(&s, "/event", TOKEN_A, Some(&last)).await;
    old.expect().await;
    let reload = old.expect().await;
    assert_eq!(reload.kind(), "server.reload");
    assert!(reload.data["properties"]["reason"]
        .as_str()
        .expect("reason")
        .contains("no longer kept"));
    // Tenant B's stream saw nothing of A's.
    s.create(TOKEN_B, "ses_b").await;
    let first = other.expect().await;
    assert_eq!(
        first.data["properties"]["sessionID"], "ses_b",
        "{:?}",
        first.data
    );
    s.stop().await;
}

#[tokio::test]
async fn a_slow_client_is_dropped_and_slows_neither_the_writer_nor_others() {
    let mut opts = options();
    opts.client_buffer = 16;
    let s = server_with_session(opts, OpenOptions::new(), "ses_slow").await;
    let mut slow = SseReader::connected(&s, "/event", TOKEN_A, None).await;
    let mut fast = SseReader::connected(&s, "/event", TOKEN_A, None).await;
    // 400 deltas of 64 KiB: far more than the socket buffers hold.
    let chunk = "x".repeat(64 << 10);
    let lines = turn("flood", 400, &chunk);
    let fast_reader = tokio::spawn(async move {
        let mut deltas = 0;
        loop {
            let e = fast.expect().await;
            if e.kind() == "message.part.delta" {
                deltas += 1;
            }
            if e.kind() == "session.idle" {
                return deltas;
            }
        }
    });
    // The writer paces itself a little so that a client that reads keeps up.
    let mut upload = s.upload_lines(TOKEN_A, "ses_slow", 4);
    for l in &lines {
        upload.line(l).await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let r = upload.finish().await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        fast_reader.await.expect("reader"),
        400,
        "the reading client got every delta"
    );
    // The slow client reads now: what was buffered, then a cut — never all of it.
    let mut deltas = 0;
    let end = loop {
        match slow.next().await {
            Ok(Some(e)) if e.kind() == "message.part.delta" => deltas += 1,
            Ok(Some(e)) if e.kind() == "session.idle" => break "idle",
            Ok(Some(_)) => {}
            Ok(None) => break "ended",
            Err(_) => break "cut",
        }
    };
    assert_eq!(end, "cut", "after {deltas} deltas");
    assert!(deltas < 400, "{deltas}");
    s.stop().await;
}

#[tokio::test]
async fn an_idle_stream_gets_heartbeats() {
    let mut opts = options();
    opts.heartbeat = std::time::Duration::from_millis(200);
    let s = server_with_session(opts, OpenOptions::new(), "ses_idle").await;
    for path in ["/event", "/session/ses_idle/event"] {
        let mut sse = SseReader::connected(&s, path, TOKEN_A, None).await;
        let mut beats = 0;
        while beats < 2 {
            let e = sse.next().await.expect("open").expect("an event");
            assert_eq!(e.kind(), "server.heartbeat", "{path}: {:?}", e.data);
            beats += 1;
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_stream_comes_back_after_its_bus_was_lost() {
    use forge_testkit::servers::{Redis, RedisStop};
    let test = "the_tenant_stream_comes_back_after_its_bus_was_lost";
    let Some(mut redis) = Redis::start(6395, "always", test) else {
        return;
    };
    let forge = forge_store::open(&format!("{}?prefix=hub", redis.url()))
        .await
        .expect("open redis");
    let s = start(forge, options()).await;
    s.create(TOKEN_A, "ses_before").await;
    let mut first = SseReader::connected(&s, "/event", TOKEN_A, None).await;
    // The bus goes away under the tenant's hub: its client is told to reload.
    redis.stop(RedisStop::Kill);
    let gap = first.expect().await;
    assert_eq!(gap.kind(), "server.reload", "{:?}", gap.data);
    // Then its stream ends cleanly (the reload is delivered, not cut off).
    assert!(matches!(first.next().await, Ok(None)), "the stream goes on");
    tokio::task::block_in_place(|| redis.start_again());
    // The next client gets a hub that follows the bus again, not the one that lost it.
    let mut second = SseReader::connected(&s, "/event", TOKEN_A, None).await;
    s.create(TOKEN_A, "ses_after").await;
    let e = second.expect().await;
    assert!(e.data.to_string().contains("ses_after"), "{:?}", e.data);
    s.stop().await;
}
