//! Structured logs: a span per store apply batch and per recover, the processor's start
//! and finalize, warnings for failures that are not returned to the caller, and nothing
//! at all on the per-delta path.

mod common;

use common::group::{group_options, refused_session};
use common::{ev, user_events, Harness};
use forge_core::id::now_ms;
use forge_core::{recover, FlushMode, Projector};
use forge_testkit::logs::Recorder;

#[tokio::test]
async fn deltas_log_nothing_and_boundaries_log_their_store_batches() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let h = Harness::new(false).await;
    let mut p = h.turn(&[r#"{"type":"text-start","id":"t"}"#]).await;
    let started = recorder.take();
    assert!(
        started.events.iter().any(|e| e == "processor started"),
        "{:?}",
        started.events
    );
    assert!(started.spans.contains(&"apply_batch"));

    for _ in 0..100 {
        p.handle(ev(r#"{"type":"text-delta","id":"t","text":"x"}"#))
            .await
            .unwrap();
    }
    let deltas = recorder.take();
    assert_eq!(deltas.spans, Vec::<&str>::new(), "spans on the delta path");
    assert_eq!(
        deltas.events,
        Vec::<String>::new(),
        "events on the delta path"
    );

    p.handle(ev(r#"{"type":"text-end","id":"t"}"#))
        .await
        .unwrap();
    p.handle(ev(r#"{"type":"finish","finishReason":"stop"}"#))
        .await
        .unwrap();
    let end = recorder.take();
    assert_eq!(
        end.spans,
        ["apply_batch", "apply_batch"],
        "text-end, finalize"
    );
    assert_eq!(end.events, ["processor finalized"]);
}

#[tokio::test]
async fn recover_logs_a_span_and_what_it_closed() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let h = Harness::new(false).await;
    let p = h.turn(&[r#"{"type":"text-start","id":"t"}"#]).await;
    drop(p); // crash
    recorder.take();

    let projector = &h.engine.projector;
    recover(projector.as_ref(), &h.tenant, Some(&h.session), now_ms())
        .await
        .unwrap();
    let log = recorder.take();
    assert_eq!(log.spans.first(), Some(&"recover"));
    assert!(
        log.events
            .iter()
            .any(|e| e == "recover closed what a crash left open"),
        "{:?}",
        log.events
    );

    // Nothing left open: the span, and no report.
    recover(projector.as_ref(), &h.tenant, Some(&h.session), now_ms())
        .await
        .unwrap();
    let again = recorder.take();
    assert_eq!(again.spans, ["recover"]);
    assert_eq!(again.events, Vec::<String>::new());
}

#[tokio::test]
async fn a_failed_group_commit_is_logged_before_its_retries() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let (projector, scope) = refused_session(group_options(50, FlushMode::Manual)).await;
    let (_, user) = user_events(&scope.session_id, "q");
    projector.commit(&scope, user).await.unwrap();
    recorder.take();
    projector.advance(1_000).await.unwrap_err();
    let log = recorder.take();
    assert_eq!(log.spans, ["apply_batch", "apply_batch"], "group, retry");
    assert_eq!(
        log.events,
        [
            "group commit failed; retrying each session alone",
            "commit of session failed; its uncommitted events are dropped",
        ]
    );
}
