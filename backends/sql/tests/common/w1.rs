//! Workload W1 (docs/backends.md, "Workload W1"), driven through forge-core's
//! `TurnDriver` and `Processor`: what one turn costs a backend in transactions,
//! statements and rows.
//!
//! Each turn: a user message with a 400 B text part; an assistant message with
//! step-start, reasoning 2,000 B as 250 deltas of 8 B, text 1,600 B as 200 deltas, 3 tool
//! calls (input 300 B of JSON, output 4,000 B, pending → running → completed),
//! step-finish, a second step with text 800 B as 100 deltas, step-finish, finish.
//! Content is seeded random letters.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use forge_core::model::{JsonMap, MessageBody, PartBody, TextPart, UserMessage, UserTime};
use forge_core::processor::assistant_message;
use forge_core::turn::{Answerer, AssistantItem, TurnDriver, TurnOptions, UserItem};
use forge_core::{
    Engine, LocalBus, Message, MessageId, Part, PartId, ProcessorOptions, Session, Store,
    StreamEvent, TenantId,
};
use forge_sql::WriteStats;
use serde_json::json;

/// A deterministic stream of letters (64-bit LCG).
struct Letters(u64);

impl Letters {
    fn take(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                char::from(b'a' + ((self.0 >> 33) % 26) as u8)
            })
            .collect()
    }
}

fn deltas(block: &str, kind: &str, text: &str, pieces: usize) -> Vec<StreamEvent> {
    let size = text.len() / pieces;
    let mut out = vec![StreamEvent::from_json(
        &json!({"type": format!("{kind}-start"), "id": block}).to_string(),
    )
    .unwrap()];
    for i in 0..pieces {
        let piece = &text[i * size..(i + 1) * size];
        out.push(
            StreamEvent::from_json(
                &json!({"type": format!("{kind}-delta"), "id": block, "text": piece}).to_string(),
            )
            .unwrap(),
        );
    }
    out.push(
        StreamEvent::from_json(&json!({"type": format!("{kind}-end"), "id": block}).to_string())
            .unwrap(),
    );
    out
}

/// The assistant's stream of one W1 turn.
fn assistant_stream(letters: &mut Letters) -> Vec<StreamEvent> {
    let ev = |v: serde_json::Value| StreamEvent::from_json(&v.to_string()).unwrap();
    let mut out = vec![
        ev(json!({"type": "start"})),
        ev(json!({"type": "start-step"})),
    ];
    out.extend(deltas("r1", "reasoning", &letters.take(2000), 250));
    out.extend(deltas("t1", "text", &letters.take(1600), 200));
    for call in 0..3 {
        let id = format!("call_{call}");
        // 300 bytes of JSON input.
        let input = json!({"command": letters.take(280)});
        out.push(ev(
            json!({"type": "tool-input-start", "id": id, "toolName": "bash"}),
        ));
        out.push(ev(
            json!({"type": "tool-input-delta", "id": id, "delta": input.to_string()}),
        ));
        out.push(ev(json!({"type": "tool-input-end", "id": id})));
        out.push(ev(
            json!({"type": "tool-call", "toolCallId": id, "toolName": "bash", "input": input}),
        ));
        out.push(ev(
            json!({"type": "tool-result", "toolCallId": id, "toolName": "bash",
                           "output": letters.take(4000)}),
        ));
    }
    out.push(ev(
        json!({"type": "finish-step", "finishReason": "tool-calls",
                       "usage": {"inputTokens": 1200, "outputTokens": 900}, "cost": 0.01}),
    ));
    out.push(ev(json!({"type": "start-step"})));
    out.extend(deltas("t2", "text", &letters.take(800), 100));
    out.push(ev(json!({"type": "finish-step", "finishReason": "stop",
                       "usage": {"inputTokens": 2400, "outputTokens": 200}, "cost": 0.02})));
    out.push(ev(json!({"type": "finish", "finishReason": "stop"})));
    out
}

fn user_message(session: &Session, text: String, now: i64) -> (Message, Part) {
    forge_testkit::user_message_with(
        &session.id,
        MessageId::generate(),
        PartId::generate(),
        text,
        now,
    )
}

/// What W1 cost per turn.
#[derive(Debug, Clone, Copy)]
pub struct PerTurn {
    pub transactions: f64,
    pub statements: f64,
    pub rows: f64,
    /// Sync events the processor committed (rows as the store trait sees them).
    pub events: f64,
}

/// Runs `turns` W1 turns in one new session and returns the per-turn figures, from the
/// store's own counters (`stats`).
pub async fn run(
    store: Arc<dyn Store>,
    stats: impl Fn() -> WriteStats,
    turns: usize,
) -> forge_core::Result<PerTurn> {
    let clock = Arc::new(AtomicI64::new(1_700_000_000_000));
    let tick = Arc::clone(&clock);
    let opts = ProcessorOptions {
        clock: Arc::new(move || tick.fetch_add(20, Ordering::Relaxed)),
        text_hook: None,
        persist_every_delta: false,
    };
    let engine = Engine::direct(store, Arc::new(LocalBus::new()));
    let tenant = TenantId::new("w1").unwrap();
    let session = Session::new("W1", clock.load(Ordering::Relaxed));
    let scope = engine.put_session(&tenant, session.clone()).await?;
    let options = TurnOptions {
        processor: opts,
        answerer: Answerer::fixed("p", "m"),
        ..TurnOptions::default()
    };
    let mut driver = TurnDriver::new(Arc::clone(&engine.projector), scope, options);
    let mut letters = Letters(42);
    let before = stats();
    for _ in 0..turns {
        driver.user(UserItem::text(letters.take(400))).await?;
        driver.assistant(AssistantItem::default()).await?;
        for e in assistant_stream(&mut letters) {
            driver.event(e).await?;
        }
    }
    // Two rows per user message (the message and its text part), and what the
    // processors committed (each turn ends with `finish`, which closes its answer).
    let events = 2 * turns as u64 + driver.stats().rows;
    let d = stats().since(&before);
    let n = turns as f64;
    Ok(PerTurn {
        transactions: d.transactions as f64 / n,
        statements: d.statements as f64 / n,
        rows: d.rows as f64 / n,
        events: events as f64 / n,
    })
}

/// Prints the figures where `cargo test` shows them (straight to the stderr handle,
/// which libtest does not capture).
pub fn print(backend: &str, turns: usize, t: &PerTurn) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "W1 on {backend} ({turns} turns): per turn {:.1} transactions, {:.1} rows written \
         ({:.1} sync events), {:.1} statements",
        t.transactions,
        t.rows,
        t.events,
        t.statements
    );
}

/// Runs five W1 turns on `store` (counted by `stats`), prints the figures and checks
/// only that something was measured: figures are printed, not judged.
pub async fn assert_measured<S: Store + Clone>(
    backend: &str,
    store: &S,
    stats: fn(&S) -> WriteStats,
) {
    let counted = store.clone();
    let per_turn = run(Arc::new(store.clone()), move || stats(&counted), 5)
        .await
        .unwrap();
    print(backend, 5, &per_turn);
    assert!(per_turn.transactions >= 1.0 && per_turn.rows >= per_turn.transactions);
}
