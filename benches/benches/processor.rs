//! The Processor's delta path: `Processor::handle(StreamEvent::TextDelta)` of 8-byte
//! deltas into an open text block, on a `MemoryStore` + `LocalBus` through the
//! `DirectProjector`. A delta touches no store; it appends to the block's text and
//! publishes one `message.part.delta` on the bus.
//!
//! Groups (criterion ids):
//! - `processor/text_delta/no_subscriber`: nobody listens on the bus;
//! - `processor/text_delta/one_subscriber`: one session subscriber drains the bus on a
//!   worker thread of the runtime while the deltas are published.
//!
//! Throughput is in elements: deltas per second. Deltas come in blocks of 250 (a
//! 2,000-byte block, W1's reasoning block); `text-start`/`text-end` around each block and
//! building the stream events are outside the timed part.
//!
//! Before timing, the bench counts heap allocations over 100,000 deltas with a counting
//! global allocator (`stats_alloc`) and prints `allocations per delta: X`. The count
//! covers `handle` only: the caller's two `String`s of each event (block id, text) are
//! built before and are not counted.
//!
//! Run: `cargo bench -p forge-bench --bench processor`

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use forge_core::id::now_ms;
use forge_core::model::{PartBody, TextPart};
use forge_core::processor::assistant_message;
use forge_core::{
    Bus, Engine, Error, LocalBus, MemoryStore, Message, Part, PartId, Processor, ProcessorOptions,
    Session, StreamEvent, TenantId, Topic,
};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use tokio::runtime::Runtime;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Deltas per text block: 2,000 bytes of 8-byte deltas.
const BLOCK_DELTAS: u64 = 250;
/// Deltas over which allocations are counted.
const COUNTED_DELTAS: u64 = 100_000;
/// Letters the deltas are cut from (8 bytes each, cycling).
const LETTERS: &[u8] = b"qwhzkcvmrtpxjdnsgoblaueyfi";
/// The stream's block id.
const BLOCK: &str = "t";

/// A session with one user message and a processor on an open assistant message.
struct Turn {
    processor: Processor,
    engine: Engine,
    tenant: TenantId,
    session: Session,
}

async fn turn() -> Turn {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let engine = Engine::direct(Arc::new(MemoryStore::new()), bus);
    let tenant = TenantId::new("bench").expect("valid tenant");
    let session = Session::new("processor bench", now_ms());
    let scope = engine
        .put_session(&tenant, session.clone())
        .await
        .expect("session");
    let user = user_message(&session, "write something");
    engine
        .put_message(&scope, user.0.clone(), vec![user.1])
        .await
        .expect("user message");
    let message = assistant_message(session.id.clone(), user.0.id, "p", "m", now_ms());
    let processor = Processor::start(
        Arc::clone(&engine.projector),
        scope,
        message,
        ProcessorOptions::default(),
    )
    .await
    .expect("processor");
    Turn {
        processor,
        engine,
        tenant,
        session,
    }
}

fn user_message(session: &Session, text: &str) -> (Message, Part) {
    let message = forge_core::processor::user_message(session.id.clone(), "build", now_ms());
    let part = Part {
        id: PartId::generate(),
        session_id: session.id.clone(),
        message_id: message.id.clone(),
        body: PartBody::Text(TextPart::plain(text)),
    };
    (message, part)
}

/// `n` text-delta events of 8 bytes each.
fn deltas(n: u64) -> Vec<StreamEvent> {
    (0..n as usize)
        .map(|i| {
            let text = (0..8)
                .map(|j| char::from(LETTERS[(i * 8 + j) % LETTERS.len()]))
                .collect();
            StreamEvent::TextDelta {
                id: BLOCK.to_owned(),
                text,
                provider_metadata: None,
            }
        })
        .collect()
}

async fn handle(p: &mut Processor, event: StreamEvent) {
    black_box(p.handle(event).await.expect("event accepted"));
}

/// What feeding deltas cost: time and heap activity of the delta loops only.
#[derive(Default)]
struct Cost {
    elapsed: Duration,
    allocations: u64,
    reallocations: u64,
    bytes: u64,
}

/// Feeds `total` deltas in blocks of [`BLOCK_DELTAS`]. Building the events and each
/// block's `text-start`/`text-end` happen outside what is measured.
async fn feed(p: &mut Processor, total: u64) -> Cost {
    let mut cost = Cost::default();
    let mut left = total;
    while left > 0 {
        let n = left.min(BLOCK_DELTAS);
        let events = deltas(n);
        handle(
            p,
            StreamEvent::TextStart {
                id: BLOCK.into(),
                provider_metadata: None,
            },
        )
        .await;
        let before = GLOBAL.stats();
        let start = Instant::now();
        for event in events {
            handle(p, event).await;
        }
        cost.elapsed += start.elapsed();
        let change = GLOBAL.stats() - before;
        cost.allocations += change.allocations as u64;
        cost.reallocations += change.reallocations as u64;
        cost.bytes += change.bytes_allocated as u64;
        handle(
            p,
            StreamEvent::TextEnd {
                id: BLOCK.into(),
                provider_metadata: None,
                citations: None,
            },
        )
        .await;
        left -= n;
    }
    cost
}

fn print_allocations(what: &str, cost: &Cost) {
    let per = |n: u64| n as f64 / COUNTED_DELTAS as f64;
    println!(
        "processor/text_delta/{what}: allocations per delta: {:.2} \
         (reallocations {:.3}, {:.1} bytes allocated per delta, over {COUNTED_DELTAS} deltas)",
        per(cost.allocations),
        per(cost.reallocations),
        per(cost.bytes),
    );
}

/// Received and lagged-away events of a subscriber.
#[derive(Default)]
struct Drained {
    received: AtomicU64,
    missed: AtomicU64,
}

/// Subscribes to the turn's session and drains it on a runtime worker until the
/// runtime shuts down.
async fn spawn_subscriber(turn: &Turn) -> Arc<Drained> {
    let mut sub = turn
        .engine
        .bus
        .subscribe(&turn.tenant, Topic::Session(turn.session.id.clone()), None)
        .await
        .expect("subscribe");
    let drained = Arc::new(Drained::default());
    let counts = Arc::clone(&drained);
    tokio::spawn(async move {
        while let Some(event) = sub.next().await {
            match event {
                Ok(e) => {
                    black_box(e);
                    counts.received.fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::Lagged { missed }) => {
                    counts.missed.fetch_add(missed, Ordering::Relaxed);
                }
                Err(e) => panic!("subscription failed: {e}"),
            }
        }
    });
    drained
}

fn bench_case(c: &mut Criterion, rt: &Runtime, name: &str, turn: &mut Turn) {
    let mut group = common::quick_group(c, "processor/text_delta", 20);
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| rt.block_on(feed(&mut turn.processor, iters)).elapsed);
    });
    group.finish();
}

fn text_delta(c: &mut Criterion) {
    // (a) No subscriber, on a current-thread runtime: the delta path alone.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut alone = rt.block_on(turn());
    let cost = rt.block_on(feed(&mut alone.processor, COUNTED_DELTAS));
    print_allocations("no_subscriber", &cost);
    bench_case(c, &rt, "no_subscriber", &mut alone);
    drop(alone);
    drop(rt);

    // (b) One subscriber: `block_on` runs the processor on this thread, the subscriber
    // drains on the runtime's single worker thread.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (mut watched, drained) = rt.block_on(async {
        let t = turn().await;
        let d = spawn_subscriber(&t).await;
        (t, d)
    });
    let cost = rt.block_on(feed(&mut watched.processor, COUNTED_DELTAS));
    print_allocations("one_subscriber (all threads)", &cost);
    bench_case(c, &rt, "one_subscriber", &mut watched);
    let published = watched.processor.stats().deltas;
    drop(watched);
    drop(rt);
    println!(
        "processor/text_delta/one_subscriber: {published} deltas published; the subscriber \
         received {} events and missed {} by lagging",
        drained.received.load(Ordering::Relaxed),
        drained.missed.load(Ordering::Relaxed),
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    text_delta(&mut c);
    c.final_summary();
}
