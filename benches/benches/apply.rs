//! `Store::apply` of one boundary batch per backend: one `message.part.updated` of a closed
//! 2,000-byte text part, the batch the Processor commits at `text-end`. Every iteration
//! overwrites the same part (as `text-end` overwrites the part `text-start` created) with
//! the session's next seq; the text is incompressible random letters, shifted by one
//! letter per iteration. Building the batch is outside the timed part.
//!
//! Groups (criterion ids): `apply/text_end_2000B/{memory,redb,sqlite,postgres}`, each
//! backend opened with its defaults (redb: durable commits; SQLite: WAL,
//! `synchronous=NORMAL`). Postgres runs only when `FORGE_TEST_POSTGRES_URL` is set, in a
//! throwaway schema dropped afterwards; otherwise a note says it was skipped.
//!
//! Run: `cargo bench -p forge-bench --bench apply`

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use forge_core::id::now_ms;
use forge_core::model::{JsonMap, PartBody, PartTime, TextPart};
use forge_core::processor::assistant_message;
use forge_core::{
    Envelope, MemoryStore, MessageId, Part, PartId, Session, Store, SyncEvent, TenantId,
};
use forge_redb::RedbStore;
use forge_sql::postgres::testing::TestSchema;
use forge_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;

/// Bytes of the text part written at each boundary.
const TEXT_BYTES: usize = 2_000;

/// One session with a user message and an assistant message whose text part is written
/// over and over.
struct Fixture {
    tenant: TenantId,
    session: Session,
    part: Part,
    letters: Vec<u8>,
    seq: u64,
}

impl Fixture {
    fn new() -> Self {
        let tenant = TenantId::new("bench").expect("valid tenant");
        let session = Session::new("apply bench", now_ms());
        let mut rng = StdRng::seed_from_u64(7);
        let letters = (0..2 * TEXT_BYTES)
            .map(|_| rng.random_range(b'a'..=b'z'))
            .collect();
        let part = Part {
            id: PartId::generate(),
            session_id: session.id.clone(),
            message_id: MessageId::from("msg_placeholder"),
            body: PartBody::Text(TextPart {
                text: String::new(),
                synthetic: None,
                ignored: None,
                time: Some(PartTime {
                    start: now_ms(),
                    end: Some(now_ms()),
                    extra: JsonMap::new(),
                }),
                metadata: None,
                extra: JsonMap::new(),
            }),
        };
        Self {
            tenant,
            session,
            part,
            letters,
            seq: 0,
        }
    }

    fn envelope(&mut self, event: SyncEvent) -> Envelope<SyncEvent> {
        self.seq += 1;
        Envelope {
            tenant: self.tenant.clone(),
            session_id: self.session.id.clone(),
            seq: self.seq,
            epoch: None,
            event,
        }
    }

    /// The session, a user message and the open assistant message the part belongs to.
    fn base(&mut self) -> Vec<Envelope<SyncEvent>> {
        let user = forge_core::processor::user_message(self.session.id.clone(), "build", now_ms());
        let assistant =
            assistant_message(self.session.id.clone(), user.id.clone(), "p", "m", now_ms());
        self.part.message_id = assistant.id.clone();
        let events = vec![
            SyncEvent::SessionUpdated {
                info: self.session.clone(),
            },
            SyncEvent::MessageUpdated { info: user },
            SyncEvent::MessageUpdated { info: assistant },
        ];
        events.into_iter().map(|e| self.envelope(e)).collect()
    }

    /// The next boundary batch: the part with 2,000 fresh letters and the next seq.
    fn boundary(&mut self) -> Vec<Envelope<SyncEvent>> {
        let shift = self.seq as usize % TEXT_BYTES;
        let text = String::from_utf8(self.letters[shift..shift + TEXT_BYTES].to_vec())
            .expect("ascii letters");
        let mut part = self.part.clone();
        if let PartBody::Text(t) = &mut part.body {
            t.text = text;
        }
        vec![self.envelope(SyncEvent::PartUpdated { part })]
    }
}

fn bench_store(c: &mut Criterion, rt: &Runtime, name: &str, store: &dyn Store) {
    let mut fixture = Fixture::new();
    rt.block_on(store.apply(&fixture.base()))
        .expect("base batch");
    let mut group = common::quick_group(c, "apply/text_end_2000B", 10);
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let batch = fixture.boundary();
                    let start = Instant::now();
                    black_box(store.apply(&batch).await).expect("apply");
                    elapsed += start.elapsed();
                    drop(batch);
                }
                elapsed
            })
        });
    });
    group.finish();
    let stored = rt
        .block_on(store.session(&fixture.tenant, &fixture.session.id))
        .expect("read session")
        .expect("session exists");
    assert_eq!(stored.seq, fixture.seq, "every batch was applied");
}

fn apply(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");

    let memory = MemoryStore::new();
    bench_store(c, &rt, "memory", &memory);

    let redb = RedbStore::open(dir.path().join("apply.redb")).expect("open redb");
    bench_store(c, &rt, "redb", &redb);
    drop(redb);

    let url = format!("sqlite://{}", dir.path().join("apply.sqlite").display());
    let sqlite = rt.block_on(SqliteStore::open(&url)).expect("open sqlite");
    bench_store(c, &rt, "sqlite", &sqlite);
    rt.block_on(sqlite.close());

    match std::env::var("FORGE_TEST_POSTGRES_URL") {
        Ok(base) if !base.is_empty() => {
            let schema = rt.block_on(TestSchema::create(&base)).expect("test schema");
            let store = rt
                .block_on(PostgresStore::connect(&schema.url()))
                .expect("connect postgres");
            bench_store(c, &rt, "postgres", &store);
            rt.block_on(store.close());
            rt.block_on(schema.drop()).expect("drop test schema");
        }
        _ => println!("apply/text_end_2000B/postgres: skipped, FORGE_TEST_POSTGRES_URL is not set"),
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    apply(&mut c);
    c.final_summary();
}
