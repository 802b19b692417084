//! `GroupCommitProjector`: terminal boundaries are committed before they are published,
//! other writes ride along and coalesce, per-session bus order holds, windows group
//! sessions, one session's failure does not sink the others, and recover rebuilds what
//! was published but not committed.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{ev, options, part_updates, text_of, user_message};
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{
    recover, Bus, BusCapabilities, BusEvent, CountingStore, Envelope, Error, Event, FlushMode,
    GroupCommitOptions, GroupCommitProjector, LocalBus, MemoryStore, Processor, Projector, Replay,
    Result, Scope, Session, SessionId, Store, Subscription, SyncEvent, TenantId, Topic,
};
use futures::FutureExt;
use parking_lot::Mutex;

/// A bus that records what is published and checks, at publish time, that the store
/// already holds every terminal sync event (its session's stored seq has reached it)
/// and that seqs of a session only grow.
#[derive(Debug)]
struct CheckingBus {
    inner: LocalBus,
    store: Arc<MemoryStore>,
    published: Mutex<Vec<BusEvent>>,
    violations: Mutex<Vec<String>>,
}

impl CheckingBus {
    fn new(store: Arc<MemoryStore>) -> Self {
        Self {
            inner: LocalBus::with_replay(100_000),
            store,
            published: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        }
    }

    fn published(&self) -> Vec<BusEvent> {
        self.published.lock().clone()
    }

    fn violations(&self) -> Vec<String> {
        self.violations.lock().clone()
    }
}

#[async_trait]
impl Bus for CheckingBus {
    fn capabilities(&self) -> BusCapabilities {
        self.inner.capabilities()
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
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
        {
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
        }
        self.inner.publish(event)
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

struct Rig {
    memory: Arc<MemoryStore>,
    counting: Arc<CountingStore>,
    bus: Arc<CheckingBus>,
    projector: Arc<GroupCommitProjector>,
    tenant: TenantId,
}

impl Rig {
    fn new(window_ms: u64, flush: FlushMode) -> Self {
        let memory = Arc::new(MemoryStore::new());
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let bus = Arc::new(CheckingBus::new(memory.clone()));
        let projector = Arc::new(GroupCommitProjector::new(
            counting.clone(),
            bus.clone(),
            GroupCommitOptions {
                window: Duration::from_millis(window_ms),
                flush,
            },
        ));
        Self {
            memory,
            counting,
            bus,
            projector,
            tenant: TenantId::new("t1").unwrap(),
        }
    }

    async fn session(&self) -> Scope {
        let session = Session::new("group", now_ms());
        let scope = self
            .projector
            .scope(&self.tenant, &session.id)
            .await
            .unwrap();
        self.projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
            .await
            .unwrap();
        scope
    }

    async fn turn(&self, scope: &Scope) -> Processor {
        let (user, part) = user_message(&scope.session_id, "question");
        self.projector
            .commit(
                scope,
                vec![
                    SyncEvent::MessageUpdated { info: user.clone() },
                    SyncEvent::PartUpdated { part },
                ],
            )
            .await
            .unwrap();
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

    async fn parts(&self, scope: &Scope) -> Vec<forge_core::Part> {
        forge_core::read_all(self.memory.as_ref(), &self.tenant, &scope.session_id, 1000)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|m| m.parts)
            .collect()
    }
}

const TURN: &[&str] = &[
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
fn check_published(bus: &CheckingBus) {
    assert_eq!(bus.violations(), Vec::<String>::new());
    // A delta never arrives before the part.updated that created its part.
    let events = bus.published();
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        match &e.event {
            Event::Sync(SyncEvent::PartUpdated { part }) => {
                seen.insert(part.id.clone());
            }
            Event::PartDelta(d) => assert!(
                seen.contains(&d.part_id),
                "delta for {} before its part.updated",
                d.part_id
            ),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_turn_commits_only_at_terminal_boundaries_and_writes_each_block_once() {
    let rig = Rig::new(0, FlushMode::Manual);
    let scope = rig.session().await;
    let mut p = rig.turn(&scope).await;
    let before = rig.counting.totals();
    for line in TURN {
        p.handle(ev(line)).await.unwrap();
    }
    check_published(&rig.bus);
    let after = rig.counting.totals();
    // Terminal boundaries: reasoning-end, text-end, tool completed, finish-step, finish.
    assert_eq!(after.commits - before.commits, 5);
    let parts = rig.parts(&scope).await;
    // Opened and closed between two commits: each block and the tool written once.
    for part in &parts {
        let writes = rig.counting.part_writes(&part.id);
        assert_eq!(writes, 1, "{} written {writes} times", part.kind());
        assert!(!part.is_open());
    }
    let texts: Vec<_> = parts.iter().filter_map(text_of).collect();
    assert_eq!(texts, ["question", "think hard", "Hello, world"]);
    let stats = rig.projector.stats();
    assert!(stats.coalesced > 0);
    assert_eq!(rig.projector.pending(), 0);
}

#[tokio::test]
async fn non_terminal_writes_are_published_at_once_and_stored_with_the_next_commit() {
    let rig = Rig::new(0, FlushMode::Manual);
    let scope = rig.session().await;
    let mut p = rig.turn(&scope).await;
    p.handle(ev(r#"{"type":"text-start","id":"t"}"#))
        .await
        .unwrap();
    p.handle(ev(r#"{"type":"text-delta","id":"t","text":"abc"}"#))
        .await
        .unwrap();
    // Subscribers learned about the part and its delta; the store has not yet.
    let published = rig.bus.published();
    assert_eq!(
        part_updates(&published).len(),
        2,
        "user part + open text part"
    );
    assert!(published
        .iter()
        .any(|e| matches!(e.event, Event::PartDelta(_))));
    assert_eq!(
        rig.parts(&scope).await.len(),
        1,
        "only the user part is stored"
    );
    assert!(rig.projector.pending() > 0);
    // sync commits what is pending.
    rig.projector.sync().await.unwrap();
    assert_eq!(rig.projector.pending(), 0);
    let parts = rig.parts(&scope).await;
    assert_eq!(parts.len(), 2);
    assert!(parts[1].is_open());
    check_published(&rig.bus);
}

#[tokio::test]
async fn a_window_groups_sessions_and_holds_later_events_behind_a_terminal_one() {
    let rig = Rig::new(100, FlushMode::Manual);
    let a = rig.session().await;
    let b = rig.session().await;
    rig.projector.advance(1_000).await.unwrap();
    rig.projector.sync().await.unwrap();
    let mut pa = rig.turn(&a).await;
    let mut pb = rig.turn(&b).await;
    let commits = rig.counting.totals().commits;
    let published = rig.bus.published().len();

    // Both users' messages (terminal) arrived at t = 1000: one group, still open.
    assert_eq!(rig.counting.totals().commits, commits);
    rig.projector.advance(1_050).await.unwrap();
    pa.handle(ev(r#"{"type":"text-start","id":"t"}"#))
        .await
        .unwrap();
    pa.handle(ev(r#"{"type":"text-delta","id":"t","text":"x"}"#))
        .await
        .unwrap();
    // Session a is held behind its terminal user message: nothing new published.
    let held: Vec<_> = rig.bus.published()[published..]
        .iter()
        .filter(|e| e.session_id == a.session_id)
        .cloned()
        .collect();
    assert!(held.is_empty(), "published while held: {held:?}");

    rig.projector.advance(1_100).await.unwrap();
    assert_eq!(
        rig.counting.totals().commits,
        commits + 1,
        "one transaction"
    );
    check_published(&rig.bus);
    let after: Vec<_> = rig.bus.published()[published..].to_vec();
    assert!(after
        .iter()
        .any(|e| e.session_id == a.session_id && matches!(e.event, Event::PartDelta(_))));
    assert!(after.iter().any(|e| e.session_id == b.session_id));

    let stats = rig.projector.stats();
    // The user messages waited the whole window in event time.
    assert_eq!(stats.delay_quantile(0.5), Some(100));
    assert_eq!(stats.delay_max(), Some(100));
    drop(pb.finalize(forge_core::Outcome::Aborted).await);
}

#[tokio::test]
async fn direct_and_grouped_projection_store_the_same_history() {
    // The same turn through both projectors leaves the same rows (ids aside).
    let rig = Rig::new(10, FlushMode::Manual);
    let scope = rig.session().await;
    let mut p = rig.turn(&scope).await;
    for (i, line) in TURN.iter().enumerate() {
        rig.projector.advance(2_000 + 50 * i as i64).await.unwrap();
        p.handle(ev(line)).await.unwrap();
    }
    rig.projector.sync().await.unwrap();
    check_published(&rig.bus);
    let grouped = shapes(&rig.parts(&scope).await);

    let h = common::Harness::new(false).await;
    let user = h.user("question").await;
    let mut p = h.processor(&user).await;
    common::feed(&mut p, TURN).await;
    let direct = shapes(&h.parts().await);
    assert_eq!(grouped, direct);
}

fn shapes(parts: &[forge_core::Part]) -> Vec<(String, Option<String>, bool)> {
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

/// A store that refuses batches touching one session.
#[derive(Debug)]
struct Refusing {
    inner: Arc<MemoryStore>,
    refuse: Mutex<Option<SessionId>>,
}

#[async_trait]
impl Store for Refusing {
    fn capabilities(&self) -> forge_core::Capabilities {
        self.inner.capabilities()
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let refused = self.refuse.lock().clone();
        if let Some(sid) = refused {
            if batch.iter().any(|e| e.session_id == sid) {
                return Err(Error::conflict(format!("refusing session {sid}")));
            }
        }
        self.inner.apply(batch).await
    }
    async fn session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> Result<Option<forge_core::SessionState>> {
        self.inner.session(tenant, id).await
    }
    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<forge_core::SessionState>> {
        self.inner.sessions(tenant).await
    }
    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &forge_core::MessageId,
    ) -> Result<Option<forge_core::MessageWithParts>> {
        self.inner.message(tenant, session, id).await
    }
    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&forge_core::Cursor>,
        limit: usize,
    ) -> Result<forge_core::Page> {
        self.inner.messages(tenant, session, before, limit).await
    }
    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<forge_core::OpenItems> {
        self.inner.open_items(tenant, session).await
    }
}

#[tokio::test]
async fn a_failed_session_does_not_sink_its_group() {
    let memory = Arc::new(MemoryStore::new());
    let refusing = Arc::new(Refusing {
        inner: memory.clone(),
        refuse: Mutex::new(None),
    });
    let bus = Arc::new(CheckingBus::new(memory.clone()));
    let projector = Arc::new(GroupCommitProjector::new(
        refusing.clone(),
        bus.clone(),
        GroupCommitOptions {
            window: Duration::from_millis(50),
            flush: FlushMode::Manual,
        },
    ));
    let tenant = TenantId::new("t1").unwrap();
    let mut scopes = Vec::new();
    for _ in 0..2 {
        let s = Session::new("s", now_ms());
        let scope = projector.scope(&tenant, &s.id).await.unwrap();
        projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: s }])
            .await
            .unwrap();
        scopes.push(scope);
    }
    projector.sync().await.unwrap();
    *refusing.refuse.lock() = Some(scopes[1].session_id.clone());
    for scope in &scopes {
        let (user, part) = user_message(&scope.session_id, "q");
        projector
            .commit(
                scope,
                vec![
                    SyncEvent::MessageUpdated { info: user },
                    SyncEvent::PartUpdated { part },
                ],
            )
            .await
            .unwrap();
    }
    let err = projector.advance(100).await.unwrap_err();
    assert!(err.to_string().contains(&scopes[1].session_id.to_string()));
    // Session 0 committed and published; session 1 neither.
    let stored = |i: usize| {
        let memory = memory.clone();
        let tenant = tenant.clone();
        let sid = scopes[i].session_id.clone();
        async move {
            forge_core::read_all(memory.as_ref(), &tenant, &sid, 100)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(stored(0).await, 1);
    assert_eq!(stored(1).await, 0);
    let published_users = |i: usize| {
        bus.published()
            .iter()
            .filter(|e| {
                e.session_id == scopes[i].session_id
                    && matches!(e.event, Event::Sync(SyncEvent::MessageUpdated { .. }))
            })
            .count()
    };
    assert_eq!(published_users(0), 1);
    assert_eq!(published_users(1), 0);
    check_published(&bus);
    // Session 1 learns of its failure on its next call, with the store's error.
    let next = projector.emit(
        &scopes[1],
        Event::SessionStatus(forge_core::model::JsonMap::new()),
    );
    assert!(next.unwrap_err().to_string().contains("refusing session"));
}

#[tokio::test]
async fn timer_mode_groups_concurrent_sessions_and_returns_after_the_commit() {
    let rig = Arc::new(Rig::new(30, FlushMode::Timer));
    let mut scopes = Vec::new();
    for _ in 0..8 {
        scopes.push(rig.session().await);
    }
    let commits = rig.counting.totals().commits;
    let mut tasks = Vec::new();
    for scope in scopes.clone() {
        let rig = Arc::clone(&rig);
        tasks.push(tokio::spawn(async move {
            let (user, part) = user_message(&scope.session_id, "q");
            let id = user.id.clone();
            rig.projector
                .commit(
                    &scope,
                    vec![
                        SyncEvent::MessageUpdated { info: user },
                        SyncEvent::PartUpdated { part },
                    ],
                )
                .await
                .unwrap();
            // Returned: the message is in the store.
            rig.memory
                .message(&rig.tenant, &scope.session_id, &id)
                .await
                .unwrap()
                .is_some()
        }));
    }
    for t in tasks {
        assert!(
            t.await.unwrap(),
            "commit returned before the row was stored"
        );
    }
    let groups = rig.counting.totals().commits - commits;
    assert!(
        (1..8).contains(&groups),
        "8 sessions in a 30 ms window took {groups} transactions"
    );
    check_published(&rig.bus);
}

#[tokio::test]
async fn recover_applies_what_was_published_but_not_committed() {
    let rig = Rig::new(0, FlushMode::Manual);
    let scope = rig.session().await;
    let mut p = rig.turn(&scope).await;
    for line in [
        r#"{"type":"text-start","id":"t"}"#,
        r#"{"type":"text-delta","id":"t","text":"streamed "}"#,
        r#"{"type":"text-delta","id":"t","text":"text"}"#,
        r#"{"type":"tool-input-start","id":"c","toolName":"bash"}"#,
    ] {
        p.handle(ev(line)).await.unwrap();
    }
    // Crash: the processor and the projector's pending writes are gone.
    drop(p);
    assert_eq!(rig.parts(&scope).await.len(), 1, "only the user part");
    let survivor = forge_core::DirectProjector::new(rig.memory.clone(), rig.bus.clone());
    let report = recover(&survivor, &rig.tenant, Some(&scope.session_id), now_ms())
        .await
        .unwrap();
    assert!(report.events_replayed >= 3, "{report:?}");
    assert_eq!(report.blocks_closed, 1);
    assert_eq!(report.text_from_bus, 1);
    assert_eq!(report.tools_closed, 1);
    assert_eq!(report.messages_closed, 1);
    let parts = rig.parts(&scope).await;
    assert_eq!(parts.len(), 3);
    assert_eq!(text_of(&parts[1]), Some("streamed text"));
    assert!(parts.iter().all(|p| !p.is_open()));
    // Idempotent.
    let again = recover(&survivor, &rig.tenant, Some(&scope.session_id), now_ms())
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
}

#[tokio::test]
async fn an_engine_with_group_commit_runs_a_turn_on_the_wall_clock() {
    let memory = Arc::new(MemoryStore::new());
    let engine = forge_core::Engine::with_group_commit(
        memory.clone(),
        Arc::new(LocalBus::new()),
        GroupCommitOptions {
            window: Duration::from_millis(5),
            flush: FlushMode::Timer,
        },
    );
    let tenant = TenantId::new("t1").unwrap();
    let scope = engine
        .put_session(&tenant, Session::new("s", now_ms()))
        .await
        .unwrap();
    let (user, part) = user_message(&scope.session_id, "question");
    engine
        .put_message(&scope, user.clone(), vec![part])
        .await
        .unwrap();
    let answer = assistant_message(scope.session_id.clone(), user.id, "p", "m", now_ms());
    let mut p = engine
        .processor(scope.clone(), answer, options())
        .await
        .unwrap();
    for line in TURN {
        p.handle(ev(line)).await.unwrap();
    }
    // `finish` returned: the whole turn is stored, closed, nothing left pending.
    let messages = forge_core::read_all(memory.as_ref(), &tenant, &scope.session_id, 100)
        .await
        .unwrap();
    assert_eq!(messages.len(), 2);
    assert!(messages.iter().all(|m| !m.info.is_open()));
    let texts: Vec<_> = messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(text_of)
        .collect();
    assert_eq!(texts, ["question", "think hard", "Hello, world"]);
}

#[tokio::test]
async fn timer_mode_returns_the_store_error_instead_of_waiting_forever() {
    let memory = Arc::new(MemoryStore::new());
    let refusing = Arc::new(Refusing {
        inner: memory.clone(),
        refuse: Mutex::new(None),
    });
    let projector = GroupCommitProjector::new(
        refusing.clone(),
        Arc::new(LocalBus::new()),
        GroupCommitOptions {
            window: Duration::from_millis(5),
            flush: FlushMode::Timer,
        },
    );
    let tenant = TenantId::new("t1").unwrap();
    let s = Session::new("s", now_ms());
    let scope = projector.scope(&tenant, &s.id).await.unwrap();
    projector
        .commit(&scope, vec![SyncEvent::SessionUpdated { info: s }])
        .await
        .unwrap();
    *refusing.refuse.lock() = Some(scope.session_id.clone());
    let (user, part) = user_message(&scope.session_id, "q");
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        projector.commit(
            &scope,
            vec![
                SyncEvent::MessageUpdated { info: user },
                SyncEvent::PartUpdated { part },
            ],
        ),
    )
    .await
    .expect("a failed group commit must not leave its waiter hanging");
    assert!(outcome
        .unwrap_err()
        .to_string()
        .contains("refusing session"));
}

#[tokio::test]
async fn a_group_commits_through_its_terminal_events_and_leaves_later_writes_to_coalesce() {
    let rig = Rig::new(100, FlushMode::Manual);
    let scope = rig.session().await;
    rig.projector.sync().await.unwrap();
    rig.projector.advance(1_000).await.unwrap();
    let mut p = rig.turn(&scope).await; // user message: terminal, group until 1100
    rig.projector.advance(1_050).await.unwrap();
    p.handle(ev(r#"{"type":"text-start","id":"t"}"#))
        .await
        .unwrap();
    rig.projector.advance(1_100).await.unwrap();
    // The group committed the user message; the text part opened after it stays
    // pending (published, since nothing terminal is ahead of it any more).
    assert_eq!(rig.parts(&scope).await.len(), 1);
    assert!(rig.projector.pending() > 0);
    rig.projector.advance(1_150).await.unwrap();
    p.handle(ev(r#"{"type":"text-delta","id":"t","text":"late"}"#))
        .await
        .unwrap();
    p.handle(ev(r#"{"type":"text-end","id":"t"}"#))
        .await
        .unwrap();
    rig.projector.advance(1_300).await.unwrap();
    let parts = rig.parts(&scope).await;
    assert_eq!(parts.len(), 2);
    assert_eq!(text_of(&parts[1]), Some("late"));
    assert_eq!(
        rig.counting.part_writes(&parts[1].id),
        1,
        "opened and closed: one write"
    );
    check_published(&rig.bus);
}
