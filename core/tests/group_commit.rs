//! `GroupCommitProjector` on the happy path: terminal boundaries are committed before
//! they are published, other writes ride along and coalesce, per-session bus order
//! holds, windows group sessions, in event time and on the wall clock.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::group::group_options;
use common::group::{check_published, shapes, Rig, TURN};
use common::{ev, feed, options, part_updates, text_of, user_message};
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::{Event, FlushMode, LocalBus, MemoryStore, Projector, Session, Store, TenantId};

#[tokio::test]
async fn a_turn_commits_only_at_terminal_boundaries_and_writes_each_block_once() {
    let rig = Rig::new(0, FlushMode::Manual);
    let scope = rig.session().await;
    let mut p = rig.turn(&scope).await;
    let before = rig.counting.totals();
    feed(&mut p, TURN).await;
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
    feed(
        &mut p,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"abc"}"#,
        ],
    )
    .await;
    // Subscribers learned about the part and its delta; the store has not yet.
    let published = rig.bus.tap.published();
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
    let published = rig.bus.tap.published().len();

    // Both users' messages (terminal) arrived at t = 1000: one group, still open.
    assert_eq!(rig.counting.totals().commits, commits);
    rig.projector.advance(1_050).await.unwrap();
    feed(
        &mut pa,
        &[
            r#"{"type":"text-start","id":"t"}"#,
            r#"{"type":"text-delta","id":"t","text":"x"}"#,
        ],
    )
    .await;
    // Session a is held behind its terminal user message: nothing new published.
    let held: Vec<_> = rig.bus.tap.published()[published..]
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
    let after: Vec<_> = rig.bus.tap.published()[published..].to_vec();
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
    feed(
        &mut p,
        &[
            r#"{"type":"text-delta","id":"t","text":"late"}"#,
            r#"{"type":"text-end","id":"t"}"#,
        ],
    )
    .await;
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
    let mut p = h.answer("question").await;
    feed(&mut p, TURN).await;
    let direct = shapes(&h.parts().await);
    assert_eq!(grouped, direct);
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
            let id = rig.user(&scope, "q").await.id;
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
async fn an_engine_with_group_commit_runs_a_turn_on_the_wall_clock() {
    let memory = Arc::new(MemoryStore::new());
    let engine = forge_core::Engine::with_group_commit(
        memory.clone(),
        Arc::new(LocalBus::new()),
        group_options(5, FlushMode::Timer),
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
    feed(&mut p, TURN).await;
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

#[tokio::test(start_paused = true)]
async fn timer_mode_sleeps_out_its_window_on_the_runtime_clock() {
    // The window is waited out by sleeping on the runtime's clock (paused here, so the
    // wait is exact): a commit returns one window after it was made. A wait that polled
    // instead of sleeping would never see the paused clock move.
    let rig = Rig::new(30, FlushMode::Timer);
    let scope = rig.session().await;
    let start = tokio::time::Instant::now();
    rig.user(&scope, "q").await;
    let waited = start.elapsed();
    assert!(
        (Duration::from_millis(29)..=Duration::from_millis(31)).contains(&waited),
        "a 30 ms window waited {waited:?}"
    );
}
