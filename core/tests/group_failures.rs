//! `GroupCommitProjector` when things go wrong: one session's failed commit does not
//! sink its group, waiters get the store's error instead of hanging, and recover
//! rebuilds what was published but not committed before a crash. Every error a failed
//! group commit reports keeps the store's own error in its source chain.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::group::{
    check_published, checking_bus, group_options, new_session, refused_in_chain, refused_session,
    refusing_projector, Rig,
};
use common::{ev, text_of, user_events};
use forge_core::id::now_ms;
use forge_core::ErrorKind;
use forge_core::{recover, Event, FlushMode, MemoryStore, Projector, Scope, SyncEvent, TenantId};

#[tokio::test]
async fn a_failed_session_does_not_sink_its_group() {
    let memory = Arc::new(MemoryStore::new());
    let bus = Arc::new(checking_bus(memory.clone()));
    let (refusing, projector) = refusing_projector(
        memory.clone(),
        bus.clone(),
        group_options(50, FlushMode::Manual),
    );
    let tenant = TenantId::new("t1").unwrap();
    let mut scopes = Vec::new();
    for _ in 0..3 {
        scopes.push(new_session(&projector, &tenant).await);
    }
    projector.sync().await.unwrap();
    let before = projector.stats();
    refusing.refuse(&scopes[1].session_id);
    for scope in &scopes {
        projector.commit(scope, user_turn(scope)).await.unwrap();
    }
    let err = projector.advance(100).await.unwrap_err();
    assert!(err.to_string().contains(&scopes[1].session_id.to_string()));
    // The group failed; of the retries, sessions 0 and 2 succeeded: a transaction of
    // its rows each, counted.
    let after = projector.stats();
    assert_eq!(after.commits, before.commits + 2, "transactions counted");
    let rows = 2 * user_turn(&scopes[0]).len() as u64;
    assert_eq!(after.rows, before.rows + rows, "rows counted");
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
        bus.tap
            .published()
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
async fn timer_mode_returns_the_store_error_instead_of_waiting_forever() {
    let (projector, scope) = refused_session(group_options(5, FlushMode::Timer)).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        projector.commit(&scope, user_turn(&scope)),
    )
    .await
    .expect("a failed group commit must not leave its waiter hanging");
    assert!(outcome
        .unwrap_err()
        .to_string()
        .contains("refusing session"));
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

/// The events of a new user message `q` of `scope`'s session.
fn user_turn(scope: &Scope) -> Vec<SyncEvent> {
    user_events(&scope.session_id, "q").1
}

#[tokio::test]
async fn the_flush_caller_and_the_failed_session_both_reach_the_store_error() {
    let (projector, scope) = refused_session(group_options(50, FlushMode::Manual)).await;
    projector.commit(&scope, user_turn(&scope)).await.unwrap();

    // The caller that ran the flush: the store's error itself, kind and all (a backend
    // failure must never read as a conflict, which callers take for bad input).
    let err = projector.advance(1_000).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Backend);
    assert!(err.is_retryable());
    let refused = refused_in_chain(&err).expect("the store's error in the chain");
    assert_eq!(refused.0, scope.session_id);

    // The failed session's next call: the store's error itself, kind and all.
    let own = projector
        .emit(
            &scope,
            Event::SessionStatus(forge_core::model::JsonMap::new()),
        )
        .unwrap_err();
    assert_eq!(own.kind(), ErrorKind::Backend);
    assert!(own.is_retryable());
    assert!(refused_in_chain(&own).is_some(), "{own:?}");
}

#[tokio::test]
async fn a_commit_with_no_window_returns_the_store_error() {
    let (projector, scope) = refused_session(group_options(0, FlushMode::Manual)).await;
    let err = projector
        .commit(&scope, user_turn(&scope))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Backend);
    assert!(refused_in_chain(&err).is_some(), "{err:?}");
}

#[tokio::test]
async fn every_waiter_of_a_failed_commit_reaches_the_store_error() {
    let (projector, scope) = refused_session(group_options(50, FlushMode::Timer)).await;
    // Two terminal commits of one session in one group: one waiter is told first, the
    // other finds its seq dropped by the same failure.
    let (a, b) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(
            projector.commit(&scope, user_turn(&scope)),
            projector.commit(&scope, user_turn(&scope)),
        )
    })
    .await
    .expect("a failed group commit must not leave its waiters hanging");
    let (a, b) = (a.unwrap_err(), b.unwrap_err());
    // Both keep the store's kind: the one told first and the one whose seq it dropped.
    assert_eq!([a.kind(), b.kind()], [ErrorKind::Backend; 2]);
    for err in [&a, &b] {
        let refused = refused_in_chain(err).expect("the store's error in the chain");
        assert_eq!(refused.0, scope.session_id);
    }
}
