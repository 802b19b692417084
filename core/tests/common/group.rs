//! Shared rig of the group-commit tests: a bus that checks commit-before-publish and
//! per-session order, a projector over a counting memory store, a store that refuses
//! one session.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{
    Bus, BusEvent, CountingStore, Envelope, Error, Event, FlushMode, Forward, GroupCommitOptions,
    GroupCommitProjector, LocalBus, MemoryStore, Message, Processor, Projector, Result, Scope,
    Session, SessionId, Store, SyncEvent, TenantId,
};
use forge_testkit::OnPublish;
use futures::FutureExt;
use parking_lot::Mutex;

use super::{options, text_of, user_events, TapBus};

/// A bus that records what is published and checks, at publish time, that the store
/// already holds every terminal sync event (its session's stored seq has reached it)
/// and that seqs of a session only grow.
pub type CheckingBus = TapBus<Checks>;

/// A [`CheckingBus`] over `store`, with a replay buffer.
pub fn checking_bus(store: Arc<MemoryStore>) -> CheckingBus {
    TapBus::new(
        LocalBus::with_replay(100_000),
        Checks {
            store,
            published: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        },
    )
}

/// What a [`CheckingBus`] saw and found wrong.
#[derive(Debug)]
pub struct Checks {
    store: Arc<MemoryStore>,
    published: Mutex<Vec<BusEvent>>,
    violations: Mutex<Vec<String>>,
}

impl Checks {
    pub fn published(&self) -> Vec<BusEvent> {
        self.published.lock().clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().clone()
    }
}

impl OnPublish for Checks {
    fn on_publish(&self, event: &BusEvent) -> Result<()> {
        if let Event::Sync(sync) = &event.event {
            if sync.is_terminal() {
                // MemoryStore answers without awaiting anything.
                let stored = self
                    .store
                    .session(&event.tenant, &event.session_id)
                    .now_or_never()
                    .and_then(Result::ok)
                    .flatten()
                    .map_or(0, |s| s.seq);
                let deleted = matches!(sync, SyncEvent::SessionDeleted { .. });
                if stored < event.seq && !deleted {
                    self.violations.lock().push(format!(
                        "{} seq {} published while the store holds seq {stored}",
                        sync.name(),
                        event.seq
                    ));
                }
            }
        }
        let mut published = self.published.lock();
        if let Some(prev) = published
            .iter()
            .rev()
            .find(|e| e.session_id == event.session_id)
        {
            if prev.seq >= event.seq {
                self.violations.lock().push(format!(
                    "seq {} published after seq {}",
                    event.seq, prev.seq
                ));
            }
        }
        published.push(event.clone());
        Ok(())
    }
}

/// Group-commit options: a window of `window_ms`, flushed as `flush` says.
pub fn group_options(window_ms: u64, flush: FlushMode) -> GroupCommitOptions {
    GroupCommitOptions {
        window: Duration::from_millis(window_ms),
        flush,
    }
}

/// A new session of `tenant`, committed through `projector`.
pub async fn new_session(projector: &dyn Projector, tenant: &TenantId) -> Scope {
    let session = Session::new("group", now_ms());
    let scope = projector.scope(tenant, &session.id).await.unwrap();
    projector
        .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
        .await
        .unwrap();
    scope
}

pub struct Rig {
    pub memory: Arc<MemoryStore>,
    pub counting: Arc<CountingStore>,
    pub bus: Arc<CheckingBus>,
    pub projector: Arc<GroupCommitProjector>,
    pub tenant: TenantId,
}

impl Rig {
    pub fn new(window_ms: u64, flush: FlushMode) -> Self {
        let memory = Arc::new(MemoryStore::new());
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let bus = Arc::new(checking_bus(memory.clone()));
        let projector = Arc::new(GroupCommitProjector::new(
            counting.clone(),
            bus.clone(),
            group_options(window_ms, flush),
        ));
        Self {
            memory,
            counting,
            bus,
            projector,
            tenant: TenantId::new("t1").unwrap(),
        }
    }

    pub async fn session(&self) -> Scope {
        new_session(self.projector.as_ref(), &self.tenant).await
    }

    /// A new user message `text` of `scope`'s session, committed.
    pub async fn user(&self, scope: &Scope, text: &str) -> Message {
        let (user, events) = user_events(&scope.session_id, text);
        self.projector.commit(scope, events).await.unwrap();
        user
    }

    pub async fn turn(&self, scope: &Scope) -> Processor {
        let user = self.user(scope, "question").await;
        let answer = assistant_message(scope.session_id.clone(), user.id, "p", "m", now_ms());
        Processor::start(
            self.projector.clone() as Arc<dyn Projector>,
            scope.clone(),
            answer,
            options(),
        )
        .await
        .unwrap()
    }

    pub async fn parts(&self, scope: &Scope) -> Vec<forge_core::Part> {
        forge_core::read_all(self.memory.as_ref(), &self.tenant, &scope.session_id, 1000)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|m| m.parts)
            .collect()
    }
}

pub const TURN: &[&str] = &[
    r#"{"type":"start-step"}"#,
    r#"{"type":"reasoning-start","id":"r"}"#,
    r#"{"type":"reasoning-delta","id":"r","text":"think "}"#,
    r#"{"type":"reasoning-delta","id":"r","text":"hard"}"#,
    r#"{"type":"reasoning-end","id":"r"}"#,
    r#"{"type":"text-start","id":"t"}"#,
    r#"{"type":"text-delta","id":"t","text":"Hello, "}"#,
    r#"{"type":"text-delta","id":"t","text":"world"}"#,
    r#"{"type":"text-end","id":"t"}"#,
    r#"{"type":"tool-input-start","id":"c1","toolName":"read"}"#,
    r#"{"type":"tool-call","toolCallId":"c1","toolName":"read","input":{"path":"a"}}"#,
    r#"{"type":"tool-result","toolCallId":"c1","output":"contents"}"#,
    r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":3,"outputTokens":5}}"#,
    r#"{"type":"finish","finishReason":"stop"}"#,
];

/// The invariants every run must keep, checked on what was published.
pub fn check_published(bus: &CheckingBus) {
    assert_eq!(bus.tap.violations(), Vec::<String>::new());
    // A delta never arrives before the message.part.updated that created its part.
    let events = bus.tap.published();
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        match &e.event {
            Event::Sync(SyncEvent::PartUpdated { part }) => {
                seen.insert(part.id.clone());
            }
            Event::PartDelta(d) => assert!(
                seen.contains(&d.part_id),
                "delta for {} before its message.part.updated",
                d.part_id
            ),
            _ => {}
        }
    }
}

pub fn shapes(parts: &[forge_core::Part]) -> Vec<(String, Option<String>, bool)> {
    parts
        .iter()
        .map(|p| {
            (
                p.kind().to_owned(),
                text_of(p).map(str::to_owned),
                p.is_open(),
            )
        })
        .collect()
}

/// The native error of [`Refusing`]: the session it refuses.
#[derive(Debug)]
pub struct Refused(pub SessionId);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refusing session {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// The [`Refused`] error somewhere down `error`'s source chain (or `error` itself).
pub fn refused_in_chain<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    std::iter::successors(Some(error), |e| e.source()).find_map(|e| e.downcast_ref::<Refused>())
}

/// A store that refuses batches touching one session with a retryable backend error
/// whose source is [`Refused`].
#[derive(Debug)]
pub struct Refusing {
    pub inner: Arc<MemoryStore>,
    pub refuse: Mutex<Option<SessionId>>,
}

impl Refusing {
    /// `inner`, refusing nothing yet.
    pub fn new(inner: Arc<MemoryStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            refuse: Mutex::new(None),
        })
    }

    /// Refuses every batch touching `session` from now on.
    pub fn refuse(&self, session: &SessionId) {
        *self.refuse.lock() = Some(session.clone());
    }
}

/// A projector over a [`Refusing`] store around `memory` (refusing nothing yet),
/// publishing to `bus`.
pub fn refusing_projector(
    memory: Arc<MemoryStore>,
    bus: Arc<dyn Bus>,
    options: GroupCommitOptions,
) -> (Arc<Refusing>, GroupCommitProjector) {
    let refusing = Refusing::new(memory);
    let projector = GroupCommitProjector::new(refusing.clone(), bus, options);
    (refusing, projector)
}

/// A projector over a [`Refusing`] store with one session, already committed, that
/// the store refuses from now on.
pub async fn refused_session(options: GroupCommitOptions) -> (GroupCommitProjector, Scope) {
    let (refusing, projector) = refusing_projector(
        Arc::new(MemoryStore::new()),
        Arc::new(LocalBus::new()),
        options,
    );
    let scope = new_session(&projector, &TenantId::new("t1").unwrap()).await;
    projector.sync().await.unwrap();
    refusing.refuse(&scope.session_id);
    (projector, scope)
}

#[async_trait]
impl Forward for Refusing {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let refused = self.refuse.lock().clone();
        if let Some(sid) = refused {
            if batch.iter().any(|e| e.session_id == sid) {
                return Err(Error::backend("refusing", true, Refused(sid)));
            }
        }
        self.inner.apply(batch).await
    }
}
