//! The read path (docs/design.md §5).
//!
//! Groups (criterion ids):
//! - `read/page_50/{memory,redb,sqlite}`: one page, `Store::messages(tenant, session,
//!   None, 50)`, of a 1,000-message history (500 turns: a user message with a 400-byte
//!   text part, an assistant message with step-start, a 1,600-byte text part and
//!   step-finish), each backend opened with its defaults in a temporary directory.
//! - `read/filter_compacted/history_{H}/after_{K}`: `filter_compacted` on a `MemoryStore`
//!   holding H messages whose last successful compaction boundary (a user message with a
//!   `compaction` part, answered by an assistant `summary` message with `finish` set and
//!   no error) is K messages from the end, so the view has K messages. The cases are
//!   H = 100,000 with K = 20 and K = 1,000, and H = 1,000 with K = 20: the view reads
//!   pages newest-first and stops at the boundary, so its cost follows K, not H.
//!
//! Histories are built once, before timing. Text is random letters.
//!
//! Run: `cargo bench -p forge-bench --bench read`

mod common;

use std::hint::black_box;

use criterion::{BenchmarkGroup, Criterion};
use forge_core::id::now_ms;
use forge_core::model::{
    CompactionPart, JsonMap, PartBody, PartTime, StepFinishPart, StepStartPart, TextPart, Tokens,
};
use forge_core::processor::assistant_message;
use forge_core::{
    filter_compacted, Envelope, MemoryStore, Message, MessageId, MessageWithParts, Part, PartId,
    Session, SessionId, Store, SyncEvent, TenantId,
};
use forge_redb::RedbStore;
use forge_sql::SqliteStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;

/// Messages per batch when a history is written.
const WRITE_BATCH: usize = 500;

/// Random letters, cut into texts of any length.
struct Letters {
    pool: Vec<u8>,
    at: usize,
}

impl Letters {
    fn new() -> Self {
        let mut rng = StdRng::seed_from_u64(11);
        Self {
            pool: (0..64 * 1024)
                .map(|_| rng.random_range(b'a'..=b'z'))
                .collect(),
            at: 0,
        }
    }

    fn take(&mut self, n: usize) -> String {
        if self.at + n > self.pool.len() {
            self.at = 0;
        }
        let s = String::from_utf8(self.pool[self.at..self.at + n].to_vec()).expect("ascii");
        self.at += n;
        s
    }
}

fn part(message: &Message, body: PartBody) -> Part {
    Part {
        id: PartId::generate(),
        session_id: message.session_id.clone(),
        message_id: message.id.clone(),
        body,
    }
}

fn text(text: String, closed: bool) -> PartBody {
    let now = now_ms();
    PartBody::Text(TextPart {
        text,
        synthetic: None,
        ignored: None,
        time: closed.then(|| PartTime {
            start: now,
            end: Some(now),
            extra: JsonMap::new(),
        }),
        metadata: None,
        extra: JsonMap::new(),
    })
}

fn user(session: &SessionId) -> Message {
    forge_core::processor::user_message(session.clone(), "build", now_ms())
}

/// A completed assistant message answering `parent`.
fn assistant(session: &SessionId, parent: &MessageId) -> Message {
    let mut m = assistant_message(session.clone(), parent.clone(), "p", "m", now_ms());
    if let Some(a) = m.as_assistant_mut() {
        a.finish = Some("stop".into());
        a.time.completed = Some(now_ms());
    }
    m
}

/// 500 turns: user (400 B text), assistant (step-start, 1,600 B text, step-finish).
fn turns(session: &SessionId, messages: usize) -> Vec<MessageWithParts> {
    let mut letters = Letters::new();
    let mut out = Vec::with_capacity(messages);
    while out.len() < messages {
        let u = user(session);
        let parts = vec![part(&u, text(letters.take(400), false))];
        let a = assistant(session, &u.id);
        let a_parts = vec![
            part(
                &a,
                PartBody::StepStart(StepStartPart {
                    snapshot: None,
                    extra: JsonMap::new(),
                }),
            ),
            part(&a, text(letters.take(1_600), true)),
            part(
                &a,
                PartBody::StepFinish(StepFinishPart {
                    reason: "stop".into(),
                    snapshot: None,
                    cost: 0.001,
                    tokens: Tokens::default(),
                    extra: JsonMap::new(),
                }),
            ),
        ];
        out.push(MessageWithParts { info: u, parts });
        out.push(MessageWithParts {
            info: a,
            parts: a_parts,
        });
    }
    out.truncate(messages);
    out
}

/// `messages` messages of alternating user and assistant turns with 200-byte texts; the
/// compaction request sits `after` messages from the end and its successful summary right
/// after it.
fn compacted_history(session: &SessionId, messages: usize, after: usize) -> Vec<MessageWithParts> {
    assert!(
        after >= 2 && after <= messages,
        "boundary inside the history"
    );
    let mut letters = Letters::new();
    let boundary = messages - after;
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(messages);
    let mut last_user: Option<MessageId> = None;
    for i in 0..messages {
        let (info, parts) = if i == boundary {
            let m = user(session);
            let p = part(
                &m,
                PartBody::Compaction(CompactionPart {
                    auto: true,
                    overflow: None,
                    tail_start_id: None,
                    extra: JsonMap::new(),
                }),
            );
            (m, vec![p])
        } else if i == boundary + 1 {
            let parent = last_user.clone().expect("the compaction request");
            let mut m = assistant(session, &parent);
            if let Some(a) = m.as_assistant_mut() {
                a.summary = Some(true);
            }
            let p = part(&m, text(letters.take(200), true));
            (m, vec![p])
        } else if i % 2 == boundary % 2 {
            let m = user(session);
            let p = part(&m, text(letters.take(200), false));
            (m, vec![p])
        } else {
            let parent = last_user.clone().unwrap_or_else(|| "msg_none".into());
            let m = assistant(session, &parent);
            let p = part(&m, text(letters.take(200), true));
            (m, vec![p])
        };
        if info.is_user() {
            last_user = Some(info.id.clone());
        }
        out.push(MessageWithParts { info, parts });
    }
    out
}

/// Writes a session and its history in batches of [`WRITE_BATCH`] messages.
async fn write(store: &dyn Store, tenant: &TenantId, history: &[MessageWithParts]) {
    let session = history[0].info.session_id.clone();
    let mut info = Session::new("read bench", now_ms());
    info.id = session.clone();
    let mut seq = 0;
    let mut envelope = |event| {
        seq += 1;
        Envelope {
            tenant: tenant.clone(),
            session_id: session.clone(),
            seq,
            epoch: None,
            event,
        }
    };
    store
        .apply(&[envelope(SyncEvent::SessionUpdated { info })])
        .await
        .expect("session");
    for chunk in history.chunks(WRITE_BATCH) {
        let mut batch = Vec::new();
        for m in chunk {
            batch.push(envelope(SyncEvent::MessageUpdated {
                info: m.info.clone(),
            }));
            for p in &m.parts {
                batch.push(envelope(SyncEvent::PartUpdated { part: p.clone() }));
            }
        }
        store.apply(&batch).await.expect("history batch");
    }
}

fn quick<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> BenchmarkGroup<'a, criterion::measurement::WallTime> {
    common::quick_group(c, name, 20)
}

fn page(c: &mut Criterion, rt: &Runtime, tenant: &TenantId) {
    let dir = tempfile::tempdir().expect("temp dir");
    let session = SessionId::generate();
    let history = turns(&session, 1_000);
    let redb = RedbStore::open(dir.path().join("read.redb")).expect("open redb");
    let url = format!("sqlite://{}", dir.path().join("read.sqlite").display());
    let sqlite = rt.block_on(SqliteStore::open(&url)).expect("open sqlite");
    let memory = MemoryStore::new();
    let stores: [(&str, &dyn Store); 3] =
        [("memory", &memory), ("redb", &redb), ("sqlite", &sqlite)];
    let mut group = quick(c, "read/page_50");
    for (name, store) in stores {
        rt.block_on(write(store, tenant, &history));
        let first = rt
            .block_on(store.messages(tenant, &session, None, 50))
            .expect("page");
        assert_eq!(first.messages.len(), 50);
        assert_eq!(first.messages[49].info.id, history[999].info.id);
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(store.messages(tenant, &session, None, 50))
                    .expect("page")
            });
        });
    }
    group.finish();
    rt.block_on(sqlite.close());
}

fn compacted(c: &mut Criterion, rt: &Runtime, tenant: &TenantId) {
    let mut group = quick(c, "read/filter_compacted");
    // One case at a time, its store dropped before the next is built: a large live heap
    // slows every allocation down, which would blur the comparison between cases.
    for (messages, after) in [(100_000, 20), (100_000, 1_000), (1_000, 20)] {
        let session = SessionId::generate();
        let store = MemoryStore::new();
        let boundary = {
            let history = compacted_history(&session, messages, after);
            rt.block_on(write(&store, tenant, &history));
            history[messages - after].info.id.clone()
        };
        let view = rt
            .block_on(filter_compacted(&store, tenant, &session))
            .expect("view");
        assert_eq!(
            view.messages.len(),
            after,
            "the view starts at the boundary"
        );
        assert_eq!(view.boundary, Some(boundary));
        group.bench_function(format!("history_{messages}/after_{after}"), |b| {
            b.iter(|| {
                black_box(rt.block_on(filter_compacted(&store, tenant, &session))).expect("view")
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tenant = TenantId::new("bench").expect("valid tenant");
    page(&mut c, &rt, &tenant);
    compacted(&mut c, &rt, &tenant);
    c.final_summary();
}
