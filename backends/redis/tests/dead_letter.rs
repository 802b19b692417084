//! The projector worker never drops an event silently. What the target store refuses
//! and what was trimmed from a work stream before it was applied go to the tenant's
//! dead-letter stream with their reason, and are counted; by default work streams are
//! trimmed only below what every consumer group acknowledged, so a stopped worker
//! loses nothing however far behind it falls.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{user_message, TestPrefix};
use forge_core::id::now_ms;
use forge_core::{
    Engine, Envelope, Error, Forward, MemoryStore, MessageWithParts, Result, Scope, Session,
    SessionId, Store, SyncEvent, TenantId,
};
use forge_redis::{ProjectorWorker, WorkerOptions, WorkerStats};
use redis::streams::{StreamId, StreamRangeReply};

const OPTS: WorkerOptions = WorkerOptions {
    lease: Duration::from_millis(400),
    count: 7, // small, so a run takes several rounds
};

/// A fresh prefix on the test server, with an engine writing to it.
struct Setup {
    tenant: TenantId,
    engine: Engine,
    conn: redis::Connection,
    /// Last: its keys are deleted once the engine is gone.
    p: TestPrefix,
}

impl Setup {
    async fn new(extra: &str) -> Option<Self> {
        let p = TestPrefix::with_query(extra)?;
        Some(Self {
            tenant: TenantId::new("t1").unwrap(),
            engine: common::engine(&p.url).await,
            conn: p.conn(),
            p,
        })
    }

    /// [`Setup::new`] with a session `title` of `n` user messages written.
    async fn with_session(title: &str, n: usize) -> Option<(Self, Scope, SessionId)> {
        let s = Self::new("").await?;
        let (scope, sid) = s.session(title).await;
        s.messages(&scope, &sid, 1, n).await;
        Some((s, scope, sid))
    }

    fn tenant_stream(&self) -> String {
        format!("{}:t:{{t1}}:bus", self.p.prefix)
    }

    fn dead_key(&self) -> String {
        format!("{}:t:{{t1}}:dead", self.p.prefix)
    }

    async fn session(&self, title: &str) -> (Scope, SessionId) {
        let session = Session::new(title, now_ms());
        let sid = session.id.clone();
        let scope = self
            .engine
            .put_session(&self.tenant, session)
            .await
            .unwrap();
        (scope, sid)
    }

    /// Writes user messages `msg_{from}` … `msg_{to}` with one part each.
    async fn messages(&self, scope: &Scope, sid: &SessionId, from: usize, to: usize) {
        for i in from..=to {
            let (msg, part) =
                user_message(sid, &format!("msg_{i:04}"), &format!("prt_{i:04}"), "q");
            self.engine
                .put_message(scope, msg, vec![part])
                .await
                .unwrap();
        }
        self.engine.bus.flush().await.unwrap();
    }

    /// `XINFO STREAM` field `name` (a number) of `key`.
    fn stream_number(&mut self, key: &str, name: &str) -> u64 {
        let info: std::collections::HashMap<String, redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(key)
            .query(&mut self.conn)
            .unwrap();
        redis::from_redis_value_ref(&info[name]).unwrap()
    }

    fn xlen(&mut self, key: &str) -> u64 {
        redis::cmd("XLEN").arg(key).query(&mut self.conn).unwrap()
    }

    fn range(&mut self, key: &str, from: &str, count: usize) -> Vec<StreamId> {
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(key)
            .arg(from)
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query(&mut self.conn)
            .unwrap();
        reply.ids
    }

    fn dead_letters(&mut self) -> Vec<StreamId> {
        let key = self.dead_key();
        self.range(&key, "-", 100_000)
    }

    fn pending(&mut self, key: &str, group: &str) -> u64 {
        let summary: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
            .arg(key)
            .arg(group)
            .query(&mut self.conn)
            .unwrap();
        summary.0
    }

    fn last_delivered(&mut self, key: &str, group: &str) -> String {
        let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(key)
            .query(&mut self.conn)
            .unwrap();
        let g = groups
            .iter()
            .find(|g| redis::from_redis_value_ref::<String>(&g["name"]).unwrap() == group)
            .expect("the group");
        redis::from_redis_value_ref(&g["last-delivered-id"]).unwrap()
    }

    fn xtrim(&mut self, key: &str, how: &[&str]) -> u64 {
        redis::cmd("XTRIM")
            .arg(key)
            .arg(how)
            .query(&mut self.conn)
            .unwrap()
    }

    async fn worker(&self, store: Arc<dyn Store>, group: &str, consumer: &str) -> ProjectorWorker {
        ProjectorWorker::connect(
            &self.p.url,
            store,
            self.tenant.clone(),
            group,
            consumer,
            OPTS,
        )
        .await
        .unwrap()
    }

    /// Worker `w1` of group `g` projecting into a new memory store, run until idle: the
    /// store, the worker and what the run did.
    async fn run_into_memory(&self) -> (Arc<MemoryStore>, ProjectorWorker, WorkerStats) {
        let target = Arc::new(MemoryStore::new());
        let mut w = self.worker(target.clone(), "g", "w1").await;
        let stats = until_idle(&mut w).await;
        (target, w, stats)
    }
}

async fn until_idle(w: &mut ProjectorWorker) -> WorkerStats {
    tokio::time::timeout(Duration::from_mins(1), w.run_until_idle())
        .await
        .expect("the worker hung")
        .unwrap()
}

fn text(entry: &StreamId, field: &str) -> String {
    entry
        .get::<String>(field)
        .unwrap_or_else(|| panic!("dead letter {} has no {field}: {entry:?}", entry.id))
}

async fn history(store: &dyn Store, t: &TenantId, s: &SessionId) -> Vec<MessageWithParts> {
    forge_core::read_all(store, t, s, 1000).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_target_refuses_is_dead_lettered_with_the_stores_error() {
    let Some((mut s, scope, sid)) = Setup::with_session("refused", 2).await else {
        return;
    };
    let (target, mut w, first) = s.run_into_memory().await;
    assert_eq!(first.dead_lettered(), 0, "{first:?}");
    assert_eq!(history(target.as_ref(), &s.tenant, &sid).await.len(), 2);

    // The copy loses the session (deleted there by someone else, who takes it over from
    // the worker and then lets it go): every later event of the session names a session
    // the target does not have, and the target refuses it. The worker, fenced out of
    // its claim, claims the session again before it writes.
    let seq = target.session(&s.tenant, &sid).await.unwrap().unwrap().seq;
    let other = forge_core::ClaimRequest::new("someone else", forge_core::id::now_ms())
        .mode(forge_core::ClaimMode::TakeOver);
    let claim = target.claim(&s.tenant, &sid, &other).await.unwrap();
    target
        .apply(&[Envelope {
            tenant: s.tenant.clone(),
            session_id: sid.clone(),
            seq: seq + 1,
            epoch: Some(claim.epoch),
            event: SyncEvent::SessionDeleted {
                session_id: sid.clone(),
            },
        }])
        .await
        .unwrap();
    target.release(&s.tenant, &sid, claim.epoch).await.unwrap();
    let stream = s.tenant_stream();
    let before = s.stream_number(&stream, "entries-added");
    s.messages(&scope, &sid, 3, 5).await;
    let published = s.stream_number(&stream, "entries-added") - before;

    let stats = until_idle(&mut w).await;
    let refused = stats.rejected - first.rejected;
    assert_eq!(
        refused, published,
        "every later event is refused: {stats:?}"
    );
    assert_eq!(stats.trimmed, 0, "{stats:?}");
    assert_eq!(stats.dead_lettered(), published);
    assert_eq!(w.dead_letter_key(), s.dead_key());
    assert_eq!(
        s.pending(&stream, "g"),
        0,
        "refused events are acknowledged"
    );

    let letters = s.dead_letters();
    assert_eq!(letters.len() as u64, published, "{letters:?}");
    for letter in &letters {
        assert_eq!(text(letter, "reason"), "refused");
        let error = text(letter, "error");
        assert!(error.contains("not found"), "{error}");
        assert_eq!(text(letter, "session"), sid.as_str());
        assert_eq!(text(letter, "stream"), stream);
        assert_eq!(text(letter, "group"), "g");
        let seq: u64 = text(letter, "seq").parse().unwrap();
        let body: serde_json::Value =
            serde_json::from_slice(&letter.get::<Vec<u8>>("e").unwrap()).unwrap();
        assert_eq!(body["seq"], seq, "the body is the refused event");
        let entry = text(letter, "entry");
        let original = s.range(&stream, &entry, 1);
        assert_eq!(original[0].id, entry);
        assert_eq!(original[0].get::<Vec<u8>>("e"), letter.get::<Vec<u8>>("e"));
    }
    println!(
        "refused: {published} events refused by the target, {} dead letters (reason \
         refused, the store's error, session, seq, entry, body), 0 pending",
        letters.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_trimmed_while_the_worker_was_behind_are_dead_lettered() {
    let Some((mut s, scope, sid)) = Setup::with_session("gap", 1).await else {
        return;
    };
    let (target, w, _) = s.run_into_memory().await;
    drop(w);

    // The worker is stopped; ten more messages (20 entries) arrive, and the first five
    // (10 entries, never delivered to the group) are trimmed by hand.
    s.messages(&scope, &sid, 2, 11).await;
    let stream = s.tenant_stream();
    let last = s.last_delivered(&stream, "g");
    let undelivered = s.range(&stream, &format!("({last}"), 1000);
    assert_eq!(undelivered.len(), 20);
    let cut = undelivered[10].id.clone();
    s.xtrim(&stream, &["MINID", &cut]);

    let mut w = s.worker(target.clone(), "g", "w1").await;
    let stats = until_idle(&mut w).await;
    assert_eq!(stats.trimmed, 10, "{stats:?}");
    assert_eq!(stats.rejected, 0, "{stats:?}");
    assert_eq!(stats.applied, 10, "messages 7 to 11 are applied: {stats:?}");
    let letters = s.dead_letters();
    assert_eq!(letters.len(), 1, "{letters:?}");
    let gap = &letters[0];
    assert_eq!(text(gap, "reason"), "trimmed");
    assert_eq!(text(gap, "count"), "10");
    assert_eq!(text(gap, "after"), last);
    assert_eq!(text(gap, "before"), cut);
    assert_eq!(text(gap, "stream"), stream);
    let ids: Vec<String> = history(target.as_ref(), &s.tenant, &sid)
        .await
        .iter()
        .map(|m| m.info.id.to_string())
        .collect();
    assert_eq!(
        ids,
        ["msg_0001", "msg_0007", "msg_0008", "msg_0009", "msg_0010", "msg_0011"]
    );

    // Recorded once: another run finds nothing more.
    let again = until_idle(&mut w).await;
    assert_eq!(again.trimmed, 10);
    assert_eq!(s.dead_letters().len(), 1);
    drop(w);

    // A gap the group has already read past: four entries are trimmed and the group
    // receives the sixteen after them without a check in between (a read racing the
    // trim). The worker finds them pending, applies them, and records the gap once it
    // has caught up with the stream.
    s.messages(&scope, &sid, 12, 21).await;
    let delivered = s.last_delivered(&stream, "g");
    let undelivered = s.range(&stream, &format!("({delivered}"), 1000);
    assert_eq!(undelivered.len(), 20);
    s.xtrim(&stream, &["MINID", &undelivered[4].id]);
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("w1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query(&mut s.conn)
        .unwrap();
    let mut w = s.worker(target.clone(), "g", "w1").await;
    let past = until_idle(&mut w).await;
    assert_eq!(past.trimmed, 4, "{past:?}");
    assert_eq!(past.applied, 16, "{past:?}");
    let letters = s.dead_letters();
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(text(&letters[1], "count"), "4");
    assert_eq!(text(&letters[1], "after"), "-");
    assert_eq!(text(&letters[1], "before"), undelivered[19].id);
    println!(
        "gap: 10 of 20 entries trimmed while the worker was stopped -> trimmed={}, \
         applied={}, one dead letter (count 10, after {last}, before {cut}); 4 trimmed \
         and read past -> trimmed={}, applied={}",
        stats.trimmed, stats.applied, past.trimmed, past.applied
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opt_in_work_maxlen_bounds_work_streams_and_dead_letters_what_it_drops() {
    let Some(mut s) = Setup::new("&shards=2&work_maxlen=50").await else {
        return;
    };
    let (target, w, _) = s.run_into_memory().await;
    drop(w);
    for i in 0..6 {
        let (scope, sid) = s.session(&format!("bounded {i}")).await;
        s.messages(&scope, &sid, 1, 50).await;
    }
    let streams: Vec<String> = (0..2)
        .map(|k| format!("{}:t:{{t1}}:work:2:{k}", s.p.prefix))
        .collect();
    let added: u64 = streams
        .iter()
        .map(|k| s.stream_number(k, "entries-added"))
        .sum();
    let held: u64 = streams.iter().map(|k| s.xlen(k)).sum();
    assert!(held < added / 2, "bounded: {held} of {added} held");

    let mut w = s.worker(target.clone(), "g", "w1").await;
    let stats = until_idle(&mut w).await;
    assert!(stats.trimmed > 0, "{stats:?}");
    assert_eq!(
        stats.applied + stats.dead_lettered(),
        added,
        "every entry is applied or dead-lettered: {stats:?}"
    );
    let counted: u64 = s
        .dead_letters()
        .iter()
        .map(|l| text(l, "count").parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, stats.dead_lettered());
    println!(
        "work_maxlen=50 (shards=2): {added} entries published, {held} held while no worker \
         ran -> applied={}, trimmed={}, refused={} (their session's creation was trimmed)",
        stats.applied, stats.trimmed, stats.rejected
    );
}

/// A target store whose commits fail while it is down (a network store that went
/// away): the worker reads, cannot commit, and keeps the entries pending.
#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryStore,
    down: AtomicBool,
}

impl Flaky {
    fn down() -> Arc<Self> {
        let store = Self::default();
        store.down.store(true, Ordering::SeqCst);
        Arc::new(store)
    }
}

#[async_trait]
impl Forward for Flaky {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::backend("test", true, "target store down"));
        }
        self.inner.apply(batch).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_entries_trimmed_away_are_dead_lettered_by_their_owner_and_by_a_standby() {
    let Some((mut s, _, _)) = Setup::with_session("pending", 10).await else {
        return;
    };
    let stream = s.tenant_stream();
    // Two groups; in each a worker reads 7 entries and cannot commit them (its target
    // is down). In group "own" the worker lives on; in group "standby" it dies.
    let own_target = Flaky::down();
    let mut own = s.worker(own_target.clone(), "own", "w1").await;
    assert!(own.step().await.is_err(), "the commit fails");
    let mut dead = s.worker(Flaky::down(), "standby", "v1").await;
    assert!(dead.step().await.is_err(), "the commit fails");
    drop(dead);
    for group in ["own", "standby"] {
        assert_eq!(s.pending(&stream, group), 7);
    }
    // Everything is trimmed: the 7 pending entries of each group lose their bodies, the
    // rest was never delivered.
    let total = s.xtrim(&stream, &["MAXLEN", "0"]);
    assert!(total > 7, "{total}");

    // Group "own": the target is back; the worker reads its pending entries again and
    // finds their bodies gone. Group "standby": another consumer takes the shard over
    // once the dead one's lease expired; XAUTOCLAIM drops the trimmed entries from the
    // pending list.
    own_target.down.store(false, Ordering::SeqCst);
    let own_stats = until_idle(&mut own).await;
    tokio::time::sleep(OPTS.lease + Duration::from_millis(100)).await;
    let mut standby = s
        .worker(Arc::new(MemoryStore::new()), "standby", "v2")
        .await;
    let standby_stats = until_idle(&mut standby).await;
    assert_eq!(own_stats.acked, 7, "the 7 pending entries: {own_stats:?}");
    assert_eq!(own_stats.claimed, 0, "{own_stats:?}");
    for (group, stats) in [("own", own_stats), ("standby", standby_stats)] {
        assert_eq!(stats.trimmed, total, "{group}: {stats:?}");
        assert_eq!(stats.dead_lettered(), total, "{group}: {stats:?}");
        assert_eq!(stats.applied, 0, "{group}: {stats:?}");
        assert_eq!(s.pending(&stream, group), 0, "{group}");
    }
    let letters = s.dead_letters();
    for group in ["own", "standby"] {
        let mine: Vec<&StreamId> = letters
            .iter()
            .filter(|l| text(l, "group") == group)
            .collect();
        let counted: u64 = mine
            .iter()
            .map(|l| text(l, "count").parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, total, "{group}: {mine:?}");
        let entries = mine.iter().filter(|l| l.get::<String>("entry").is_some());
        assert_eq!(
            entries.count(),
            7,
            "{group}: one dead letter per pending entry"
        );
        assert!(mine.iter().all(|l| text(l, "reason") == "trimmed"));
        assert!(mine.iter().all(|l| text(l, "stream") == stream));
    }
    println!(
        "pending: {total} entries trimmed, 7 of them pending in each group -> own consumer \
         trimmed={} (7 read back without a body), standby trimmed={} (7 dropped by \
         XAUTOCLAIM), {} dead letters",
        own_stats.trimmed,
        standby_stats.trimmed,
        letters.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_falls_behind_past_maxlen_and_still_applies_every_event() {
    for shards in [1, 3] {
        let Some(mut s) = Setup::new(&format!("&maxlen=20&shards={shards}")).await else {
            return;
        };
        // The worker has run once (its group exists), then stops.
        let (target, w, _) = s.run_into_memory().await;
        drop(w);

        let mut sessions = Vec::new();
        for i in 0..6 {
            let (scope, sid) = s.session(&format!("behind {i}")).await;
            s.messages(&scope, &sid, 1, 50).await;
            sessions.push(sid);
        }
        let streams: Vec<String> = if shards == 1 {
            vec![s.tenant_stream()]
        } else {
            (0..shards)
                .map(|k| format!("{}:t:{{t1}}:work:{shards}:{k}", s.p.prefix))
                .collect()
        };
        let backlog: u64 = streams.iter().map(|k| s.xlen(k)).sum();
        let added: u64 = streams
            .iter()
            .map(|k| s.stream_number(k, "entries-added"))
            .sum();

        let mut w = s.worker(target.clone(), "g", "w1").await;
        let stats = until_idle(&mut w).await;
        assert_eq!(stats.dead_lettered(), 0, "{stats:?}");
        assert_eq!(stats.applied, added, "{stats:?}");
        assert_eq!(backlog, added, "nothing was trimmed while no worker ran");
        for sid in &sessions {
            assert_eq!(
                history(target.as_ref(), &s.tenant, sid).await,
                history(s.engine.store.as_ref(), &s.tenant, sid).await
            );
        }
        let left: u64 = streams.iter().map(|k| s.xlen(k)).sum();
        assert!(
            left < backlog / 2,
            "the worker trims what every group acknowledged: {left} of {backlog} left"
        );
        assert!(s.dead_letters().is_empty());
        println!(
            "behind (shards={shards}, maxlen=20): {backlog} entries waiting in the work \
             streams, {} applied, {} dead-lettered, {} trimmed by the worker after acking \
             ({left} left)",
            stats.applied,
            stats.dead_lettered(),
            stats.released
        );
    }
}
