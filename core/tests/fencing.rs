//! Projectors claim the sessions they write: a second writer is kept out while the first
//! holds the session, waits for it when asked, or takes it over; a writer that was taken
//! over cannot write again; leases are renewed by commits and given back by releases.

use std::sync::Arc;
use std::time::Duration;

use forge_core::id::now_ms;
use forge_core::{
    Bus, ClaimPolicy, DirectProjector, ErrorKind, GroupCommitOptions, GroupCommitProjector,
    LocalBus, MemoryStore, OnHeld, Projector, Session, SessionId, Store, SyncEvent, TenantId,
};

fn projector(store: &Arc<MemoryStore>, policy: ClaimPolicy) -> DirectProjector {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    DirectProjector::with_claims(Arc::clone(store) as Arc<dyn Store>, bus, policy)
}

fn touch(id: &str, n: i64) -> Vec<SyncEvent> {
    let mut info = Session::new("fenced", n);
    info.id = SessionId::from(id);
    vec![SyncEvent::SessionUpdated { info }]
}

#[tokio::test]
async fn a_second_writer_is_refused_naming_the_holder_until_it_takes_over() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let a = projector(&store, ClaimPolicy::holder("writer-a"));
    let b = projector(&store, ClaimPolicy::holder("writer-b"));

    let sa = a.scope(&t, &s).await.unwrap();
    assert_eq!(sa.epoch(), Some(1));
    assert_eq!(a.commit(&sa, touch("ses_1", 1)).await.unwrap(), 1);

    let err = b.scope(&t, &s).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Held);
    assert!(err.to_string().contains("writer-a"), "{err}");

    let b = projector(
        &store,
        ClaimPolicy::holder("writer-b").on_held(OnHeld::TakeOver),
    );
    let sb = b.scope(&t, &s).await.unwrap();
    assert_eq!(sb.epoch(), Some(2));
    // The new writer continues above what the first committed.
    assert_eq!(b.commit(&sb, touch("ses_1", 2)).await.unwrap(), 2);

    let err = a.commit(&sa, touch("ses_1", 3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert!(err.to_string().contains("writer-b"), "{err}");
    let stored = store.session(&t, &s).await.unwrap().unwrap();
    assert_eq!((stored.seq, stored.info.time.created), (2, 2));

    // The fenced writer's next scope claims again, and its policy keeps it out.
    assert_eq!(a.scope(&t, &s).await.unwrap_err().kind(), ErrorKind::Held);
}

#[tokio::test]
async fn a_waiting_writer_gets_the_session_once_the_holder_releases_it() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let a = projector(&store, ClaimPolicy::holder("writer-a"));
    let sa = a.scope(&t, &s).await.unwrap();
    a.commit(&sa, touch("ses_1", 1)).await.unwrap();

    let b = projector(
        &store,
        ClaimPolicy::holder("writer-b").on_held(OnHeld::Wait(Duration::from_secs(20))),
    );
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let sb = b.scope(&t, &s).await.unwrap();
        (sb.epoch(), sb.last_seq(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second writer did not wait");
    a.release_scope(sa).await.unwrap();
    let (epoch, last, waited) = waiting.await.unwrap();
    assert_eq!((epoch, last), (Some(2), 1));
    assert!(
        waited < Duration::from_secs(10),
        "waited {waited:?} after the release"
    );
}

#[tokio::test]
async fn a_wait_ends_with_the_holder_named_when_it_runs_out() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let a = projector(&store, ClaimPolicy::holder("writer-a"));
    let _sa = a.scope(&t, &s).await.unwrap();
    let b = projector(
        &store,
        ClaimPolicy::holder("writer-b").on_held(OnHeld::Wait(Duration::from_millis(200))),
    );
    let err = b.scope(&t, &s).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Held);
    assert!(err.to_string().contains("writer-a"), "{err}");
}

#[tokio::test]
async fn a_release_lets_the_next_writer_in_and_keeps_a_busy_scope() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let a = projector(&store, ClaimPolicy::holder("writer-a"));
    let sa = a.scope(&t, &s).await.unwrap();
    let busy = sa.clone();
    // Another writer of this process still holds a clone: nothing is released.
    a.release_scope(sa).await.unwrap();
    assert!(store.claimed(&t, &s).await.unwrap().unwrap().expires_ms > now_ms());
    a.commit(&busy, touch("ses_1", 1)).await.unwrap();
    a.release().await.unwrap();
    let record = store.claimed(&t, &s).await.unwrap().unwrap();
    assert_eq!((record.epoch, record.expires_ms), (1, 0));
    let b = projector(&store, ClaimPolicy::holder("writer-b"));
    assert_eq!(b.scope(&t, &s).await.unwrap().epoch(), Some(2));
}

#[tokio::test]
async fn commits_renew_the_lease_past_its_middle() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let a = projector(&store, ClaimPolicy::holder("writer-a").lease_ms(400));
    let sa = a.scope(&t, &s).await.unwrap();
    let first = store.claimed(&t, &s).await.unwrap().unwrap().expires_ms;
    a.commit(&sa, touch("ses_1", 1)).await.unwrap();
    assert_eq!(
        store.claimed(&t, &s).await.unwrap().unwrap().expires_ms,
        first
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    a.commit(&sa, touch("ses_1", 2)).await.unwrap();
    let renewed = store.claimed(&t, &s).await.unwrap().unwrap();
    assert_eq!(renewed.epoch, 1);
    assert!(
        renewed.expires_ms >= first + 250,
        "{renewed:?} after {first}"
    );
}

#[tokio::test]
async fn a_group_commit_writer_taken_over_gets_fenced_and_claims_again() {
    let store = Arc::new(MemoryStore::new());
    let (t, s) = (TenantId::default(), SessionId::from("ses_1"));
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let g = GroupCommitProjector::with_claims(
        Arc::clone(&store) as Arc<dyn Store>,
        bus,
        GroupCommitOptions::default(),
        ClaimPolicy::holder("group").on_held(OnHeld::TakeOver),
    );
    let sg = g.scope(&t, &s).await.unwrap();
    g.commit(&sg, touch("ses_1", 1)).await.unwrap();
    g.sync().await.unwrap();
    let other = projector(
        &store,
        ClaimPolicy::holder("other").on_held(OnHeld::TakeOver),
    );
    let so = other.scope(&t, &s).await.unwrap();
    other.commit(&so, touch("ses_1", 2)).await.unwrap();
    // A session update is terminal: the commit waits for its group and gets the refusal.
    let err = g.commit(&sg, touch("ses_1", 3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    // Its next scope takes the session back, above the other writer's seq.
    let again = g.scope(&t, &s).await.unwrap();
    assert_eq!((again.epoch(), again.last_seq()), (Some(3), 2));
}

/// A store whose `release` waits for a go-ahead, as a slow round trip does.
#[derive(Debug)]
struct SlowRelease {
    inner: Arc<MemoryStore>,
    entered: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl forge_core::Forward for SlowRelease {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn release(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        epoch: u64,
    ) -> forge_core::Result<()> {
        self.entered.notify_one();
        self.go.notified().await;
        self.inner.release(tenant, session, epoch).await
    }
}

#[tokio::test]
async fn a_scope_asked_for_while_its_release_runs_holds_its_session() {
    // One request of a process releases the session it finished with while another
    // request of the same process asks for the session: the second must get a scope
    // whose claim holds once the release is done, never the one being released.
    let inner = Arc::new(MemoryStore::new());
    let slow = Arc::new(SlowRelease {
        inner: Arc::clone(&inner),
        entered: tokio::sync::Notify::new(),
        go: tokio::sync::Notify::new(),
    });
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let p = Arc::new(DirectProjector::with_claims(
        Arc::clone(&slow) as Arc<dyn Store>,
        bus,
        ClaimPolicy::holder("serve"),
    ));
    let (t, s) = (TenantId::default(), SessionId::from("ses_rel"));
    let first = p.scope(&t, &s).await.unwrap();
    p.commit(&first, touch("ses_rel", 1)).await.unwrap();
    let releasing = {
        let p = Arc::clone(&p);
        tokio::spawn(async move { p.release_scope(first).await })
    };
    slow.entered.notified().await;
    let second = p.scope(&t, &s).await.unwrap();
    slow.go.notify_one();
    releasing.await.unwrap().unwrap();
    let claim = inner.claimed(&t, &s).await.unwrap().unwrap();
    assert_eq!(Some(claim.epoch), second.epoch(), "{claim:?}");
    assert!(
        claim.expires_ms > now_ms(),
        "the second scope's claim was released: {claim:?}"
    );
    p.commit(&second, touch("ses_rel", 2)).await.unwrap();
}

#[tokio::test]
async fn a_group_commit_writer_commits_what_it_holds_then_gives_its_claims_back() {
    let store = Arc::new(MemoryStore::new());
    let t = TenantId::default();
    let (s1, s2) = (SessionId::from("ses_1"), SessionId::from("ses_2"));
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let options = GroupCommitOptions {
        window: Duration::from_millis(7),
        ..GroupCommitOptions::default()
    };
    let g = GroupCommitProjector::with_claims(
        Arc::clone(&store) as Arc<dyn Store>,
        bus,
        options,
        ClaimPolicy::holder("group"),
    );
    assert_eq!(g.options(), options);
    assert!(format!("{g:?}").contains("7ms"), "{g:?}");
    let held = |s: &SessionId| {
        let (store, t, s) = (Arc::clone(&store), t.clone(), s.clone());
        async move { store.claimed(&t, &s).await.unwrap().unwrap().expires_ms > now_ms() }
    };
    let one = g.scope(&t, &s1).await.unwrap();
    g.commit(&one, touch("ses_1", 1)).await.unwrap();
    g.release_scope(one).await.unwrap();
    assert!(!held(&s1).await, "release_scope gave the claim back");
    assert_eq!(store.session(&t, &s1).await.unwrap().unwrap().seq, 1);
    let two = g.scope(&t, &s2).await.unwrap();
    g.commit(&two, touch("ses_2", 1)).await.unwrap();
    assert!(held(&s2).await);
    g.release().await.unwrap();
    assert!(!held(&s2).await, "release gave every claim back");
    // Two transactions of one row each, both counted.
    let stats = g.stats();
    assert_eq!((stats.commits, stats.rows), (2, 2), "transactions and rows");
    // The next writer gets the sessions at once.
    let other = projector(&store, ClaimPolicy::holder("other"));
    assert_eq!(other.scope(&t, &s2).await.unwrap().epoch(), Some(2));
}
