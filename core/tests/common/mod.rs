//! Shared helpers for the core integration tests.
#![allow(dead_code)]

pub mod group;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use forge_core::id::now_ms;
use forge_core::processor::{assistant_message, Clock};
use forge_core::{
    Bus, BusEvent, CountingStore, Engine, Event, LocalBus, MemoryStore, Message, Part,
    ProcessorOptions, Scope, Session, SessionId, StreamEvent, Subscription, SyncEvent, TenantId,
    Topic,
};

pub struct Harness {
    pub engine: Engine,
    pub memory: Arc<MemoryStore>,
    pub counting: Arc<CountingStore>,
    pub tenant: TenantId,
    pub session: SessionId,
    pub scope: Scope,
}

/// A clock that advances 1 ms per call, deterministic.
pub fn ticking_clock() -> Clock {
    let t = Arc::new(AtomicI64::new(1_700_000_000_000));
    Arc::new(move || t.fetch_add(1, Ordering::Relaxed))
}

pub fn options() -> ProcessorOptions {
    ProcessorOptions {
        clock: ticking_clock(),
        text_hook: None,
        persist_every_delta: false,
    }
}

impl Harness {
    pub async fn new(durable_bus: bool) -> Self {
        let memory = Arc::new(MemoryStore::new());
        let bus: Arc<dyn Bus> = if durable_bus {
            Arc::new(LocalBus::with_replay(100_000))
        } else {
            Arc::new(LocalBus::new())
        };
        Self::with(memory, bus).await
    }

    pub async fn with(memory: Arc<MemoryStore>, bus: Arc<dyn Bus>) -> Self {
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let engine = Engine::direct(counting.clone(), bus);
        let tenant = TenantId::new("t1").unwrap();
        let session = Session::new("test", now_ms());
        let scope = engine.put_session(&tenant, session.clone()).await.unwrap();
        Self {
            engine,
            memory,
            counting,
            tenant,
            session: session.id,
            scope,
        }
    }

    /// A user message with one text part, written in one batch.
    pub async fn user(&self, text: &str) -> Message {
        let msg = user_message(&self.session, text);
        self.engine
            .put_message(&self.scope, msg.0.clone(), vec![msg.1])
            .await
            .unwrap();
        msg.0
    }

    pub async fn subscribe(&self) -> Subscription {
        self.engine
            .bus
            .subscribe(&self.tenant, Topic::Session(self.session.clone()), None)
            .await
            .unwrap()
    }

    pub async fn processor(&self, parent: &Message) -> forge_core::Processor {
        let m = assistant_message(self.session.clone(), parent.id.clone(), "p", "m", now_ms());
        self.engine
            .processor(self.scope.clone(), m, options())
            .await
            .unwrap()
    }

    /// A processor answering a new user message `text`.
    pub async fn answer(&self, text: &str) -> forge_core::Processor {
        let user = self.user(text).await;
        self.processor(&user).await
    }

    /// A processor answering a new user message `hi`, fed `lines`.
    pub async fn turn(&self, lines: &[&str]) -> forge_core::Processor {
        let mut p = self.answer("hi").await;
        feed(&mut p, lines).await;
        p
    }

    /// [`Harness::turn`], watched by a subscription to the session made after the user
    /// message was written and before the processor started.
    pub async fn watched_turn(&self, lines: &[&str]) -> (Subscription, forge_core::Processor) {
        let user = self.user("hi").await;
        let sub = self.subscribe().await;
        let mut p = self.processor(&user).await;
        feed(&mut p, lines).await;
        (sub, p)
    }

    pub async fn parts(&self) -> Vec<Part> {
        let all = forge_core::read_all(
            self.engine.store.as_ref(),
            &self.tenant,
            &self.session,
            1000,
        )
        .await
        .unwrap();
        all.into_iter().flat_map(|m| m.parts).collect()
    }

    pub async fn messages(&self) -> Vec<forge_core::MessageWithParts> {
        forge_core::read_all(
            self.engine.store.as_ref(),
            &self.tenant,
            &self.session,
            1000,
        )
        .await
        .unwrap()
    }
}

pub use forge_testkit::{text_of, user_message, TapBus};

/// A new user message with one text part, and the events that write it: the message,
/// then the part.
pub fn user_events(session: &SessionId, text: &str) -> (Message, Vec<SyncEvent>) {
    let (user, part) = user_message(session, text);
    let events = vec![
        SyncEvent::MessageUpdated { info: user.clone() },
        SyncEvent::PartUpdated { part },
    ];
    (user, events)
}

pub fn ev(json: &str) -> StreamEvent {
    StreamEvent::from_json(json).unwrap()
}

/// Feeds JSON stream events to a processor.
pub async fn feed(p: &mut forge_core::Processor, lines: &[&str]) {
    for l in lines {
        p.handle(ev(l)).await.unwrap();
    }
}

/// Drains what a subscription has received so far (without waiting for more).
pub async fn drain(sub: &mut Subscription) -> Vec<BusEvent> {
    let mut out = Vec::new();
    while let Ok(Some(Ok(e))) =
        tokio::time::timeout(std::time::Duration::from_millis(20), sub.next()).await
    {
        out.push(e);
    }
    out
}

pub fn part_updates(events: &[BusEvent]) -> Vec<&Part> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Sync(SyncEvent::PartUpdated { part }) => Some(part),
            _ => None,
        })
        .collect()
}
