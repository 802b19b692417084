//! Crash boundary (contract property 4, docs/conformance.md): for any model stream cut
//! at any point, then finalized (the process is alive) or crashed (processor and
//! projector dropped without finalize) and recovered by a restarted projector:
//! - nothing is open afterwards, and the assistant message is completed;
//! - every block completed before the cut is stored exactly as emitted and untouched;
//! - tools left pending/running are errors ("Tool execution aborted", interrupted);
//! - open text is the accumulated text after finalize; after recover it is the streamed
//!   text on a durable bus ([`Property::CrashDurableBus`]) and the stored text otherwise
//!   — also when the stored text is not empty (cases with `persist_deltas`, where the
//!   processor stored every delta): recover replaces it, never appends to it;
//! - recover is idempotent: a second run finds nothing and writes nothing.
//!
//! Large cases crash with thousands of parts left open by an earlier crash (an older
//! assistant message of the session, open text with stored text, open reasoning,
//! pending and running tools): recover must list and close every one, keeping each
//! stored text exactly.

use std::sync::Arc;

use forge_core::close::TOOL_ABORTED;
use forge_core::model::{ErrorName, MessageError, ToolState};
use forge_core::processor::message_error_from;
use forge_core::{
    read_all, recover, CountingStore, DirectProjector, MessageWithParts, Outcome as Ending, Store,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::turn::{stored_answer, text_of, Turn};
use crate::harness::{ctx_err, same, CaseRun, Ctx};
use crate::strategies::expected::{feed, Expected, ExpectedTool};
use crate::strategies::model::T0;
use crate::strategies::scaled::Sizes;
use crate::strategies::stream::{stream_spec, StreamEnd, StreamSpec};
use crate::Property;

/// How the turn ends after the cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// `finalize(Finished)`.
    Finish,
    /// `finalize(Failed)`.
    Fail,
    /// `finalize(Aborted)`.
    Abort,
    /// The process dies: processor and projector dropped, then `recover`.
    Crash,
}

/// A case: a stream, where it is cut, how the turn ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The model stream.
    pub stream: StreamSpec,
    /// Share of the stream's events fed before the end, in per mille (0: none, 1000:
    /// all); proportional, so it stays meaningful while the stream shrinks.
    pub cut: u16,
    /// When set and the stream opens tools, cut right after the `k % n`-th of its `n`
    /// tool openings (`tool-input-start` / `tool-call`) instead, so tools left pending
    /// or running at the end are common rather than lucky.
    #[serde(default)]
    pub cut_after_tool: Option<u8>,
    /// What happens then.
    pub end: End,
    /// The processor stores every delta (`persist_every_delta`), so open text is
    /// stored non-empty when the process dies.
    #[serde(default)]
    pub persist_deltas: bool,
    /// Parts an earlier crash left open in an older message (large cases; with
    /// `End::Crash` only).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub stale_open: u16,
}

/// Any case; `crash_only` for the durable-bus property.
pub fn case(crash_only: bool) -> impl Strategy<Value = Case> {
    let end = if crash_only {
        Just(End::Crash).boxed()
    } else {
        prop_oneof![
            1 => Just(End::Finish),
            1 => Just(End::Fail),
            1 => Just(End::Abort),
            2 => Just(End::Crash),
        ]
        .boxed()
    };
    (
        stream_spec(),
        0u16..=1000,
        proptest::option::weighted(0.6, any::<u8>()),
        end,
        proptest::bool::weighted(0.4),
    )
        .prop_map(|(stream, cut, cut_after_tool, end, persist_deltas)| Case {
            stream,
            cut,
            cut_after_tool,
            end,
            persist_deltas,
            stale_open: 0,
        })
}

/// Large cases: a crash with thousands of parts left open by an earlier crash.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (case(true), sizes.listing()).prop_map(|(mut c, stale)| {
        c.stale_open = stale;
        c
    })
}

const STALE: &str = "msg_0001_stale";

/// The message and parts an earlier crash left open.
fn stale(session: &forge_core::SessionId, n: u16) -> Vec<forge_core::SyncEvent> {
    use crate::strategies::model::{self, MessageKind, PartKind};
    let m = forge_core::MessageId::from(STALE);
    let mut out = vec![forge_core::SyncEvent::MessageUpdated {
        info: model::message(session, &m, MessageKind::OpenAssistant, 0),
    }];
    let kinds = [
        PartKind::OpenText,
        PartKind::OpenReasoning,
        PartKind::ToolPending,
        PartKind::ToolRunning,
    ];
    out.extend((0..n).map(|i| forge_core::SyncEvent::PartUpdated {
        part: model::part(
            session,
            &m,
            &forge_core::PartId::from(format!("prt_stale_{i:05}")),
            kinds[usize::from(i) % kinds.len()],
            (i % 200) as u8,
        ),
    }));
    out
}

/// Every stale part is closed, texts exactly as stored.
async fn check_stale(
    store: &dyn Store,
    tenant: &forge_core::TenantId,
    session: &forge_core::SessionId,
    written: &[forge_core::SyncEvent],
) -> Result<(), String> {
    let after = stored_answer(store, tenant, session, &STALE.into()).await?;
    if after.info.is_open() {
        return Err("the message an earlier crash left open is still open".into());
    }
    let before: Vec<&forge_core::Part> = written
        .iter()
        .filter_map(|e| match e {
            forge_core::SyncEvent::PartUpdated { part } => Some(part),
            _ => None,
        })
        .collect();
    if after.parts.len() != before.len() {
        return Err(format!(
            "{} parts were left open by an earlier crash, {} are stored after recover",
            before.len(),
            after.parts.len()
        ));
    }
    for (p, old) in after.parts.iter().zip(&before) {
        if p.is_open() {
            return Err(format!(
                "part {} left open by an earlier crash is still open",
                p.id
            ));
        }
        if text_of(p) != text_of(old) {
            return Err(format!(
                "part {}: recover must keep the stored text {:?}, stored: {:?}",
                p.id,
                text_of(old),
                text_of(p)
            ));
        }
    }
    Ok(())
}

/// How many events a case feeds before its end.
fn cut_of(case: &Case, events: &[forge_core::StreamEvent]) -> usize {
    use forge_core::StreamEvent::{ToolCall, ToolInputStart};
    let openings: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ToolInputStart { .. } | ToolCall { .. }))
        .map(|(i, _)| i + 1)
        .collect();
    match case.cut_after_tool {
        Some(k) if !openings.is_empty() => openings[usize::from(k) % openings.len()],
        _ => fed_events(events.len(), case.cut),
    }
}

/// How many of `len` events a per-mille cut feeds.
pub(crate) fn fed_events(len: usize, per_mille: u16) -> usize {
    (len * usize::from(per_mille.min(1000))).div_ceil(1000)
}

fn describe(t: &ExpectedTool) -> String {
    match t {
        ExpectedTool::Pending => "pending, closed as an interrupted error".into(),
        ExpectedTool::Running(input) => {
            format!("running with input {input}, closed as an interrupted error")
        }
        ExpectedTool::Completed(o, t) => format!("completed with output {o:?}, title {t:?}"),
        ExpectedTool::Error(e) => format!("error {e:?}"),
    }
}

pub(crate) fn run(ctx: &Ctx<'_>, durable_only: bool) -> CaseRun {
    let property = if durable_only {
        Property::CrashDurableBus
    } else {
        Property::CrashBoundary
    };
    let sizes = Sizes::new(ctx.config.scale);
    let run =
        crate::harness::run_scaled(ctx, property, case(durable_only), large_case(sizes), |c| {
            check(ctx, c)
        });
    match &ctx.caps.bus {
        Some(b) if b.durable => run,
        Some(_) => run.note("the bus is live only: recovered text is what the store had"),
        None => run.note("store-only backend: run over a live-only LocalBus"),
    }
}

fn expected_error(fed_end: Option<&StreamEnd>, end: End) -> Option<MessageError> {
    match fed_end {
        Some(StreamEnd::Finish) => None,
        Some(StreamEnd::Error(e)) => Some(message_error_from(&Value::String(e.clone()))),
        Some(StreamEnd::Abort) => Some(MessageError::aborted("")),
        Some(StreamEnd::Open) | None => match end {
            End::Finish => None,
            End::Fail => Some(MessageError::new(ErrorName::Api, "the model failed")),
            End::Abort | End::Crash => Some(MessageError::aborted("")),
        },
    }
}

/// Compares one stored part with what it must be.
fn check_part(
    i: usize,
    part: &forge_core::Part,
    want: &Expected,
    open_text: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    let at = format!("part #{i} ({})", part.kind());
    let fail = |why: String| Err(format!("{at}: {why}; stored: {}", json!(part)));
    match want {
        Expected::Block {
            reasoning,
            streamed,
            closed,
        } => {
            let kind = if *reasoning { "reasoning" } else { "text" };
            let want_text = closed.clone().unwrap_or_else(|| open_text(streamed));
            if part.kind() != kind {
                return fail(format!("expected a {kind} part"));
            }
            if text_of(part) != Some(want_text.as_str()) {
                return fail(format!(
                    "text must be {want_text:?} ({})",
                    if closed.is_some() {
                        "the completed block as emitted"
                    } else {
                        "the open block's best confirmed text"
                    }
                ));
            }
        }
        Expected::Tool {
            call_id,
            tool,
            state,
        } => {
            let forge_core::model::PartBody::Tool(t) = &part.body else {
                return fail(format!("expected tool {call_id}"));
            };
            if &t.call_id != call_id || &t.tool != tool {
                return fail(format!("expected tool {tool} call {call_id}"));
            }
            let ok = match (state, &t.state) {
                (ExpectedTool::Completed(o, ti), ToolState::Completed(c)) => {
                    &c.output == o && &c.title == ti
                }
                (ExpectedTool::Error(e), ToolState::Error(x)) => &x.error == e,
                (ExpectedTool::Pending | ExpectedTool::Running(_), ToolState::Error(x)) => {
                    let input = match state {
                        ExpectedTool::Running(i) => i.clone(),
                        _ => json!({}),
                    };
                    x.error == TOOL_ABORTED
                        && x.metadata.as_ref().and_then(|m| m.get("interrupted"))
                            == Some(&Value::Bool(true))
                        && x.input == input
                }
                _ => false,
            };
            if !ok {
                return fail(format!(
                    "expected a tool {} (interrupted tools become errors)",
                    describe(state)
                ));
            }
        }
        Expected::StepStart if part.kind() == "step-start" => {}
        Expected::StepFinish(r) => match &part.body {
            forge_core::model::PartBody::StepFinish(s) if &s.reason == r => {}
            _ => return fail(format!("expected step-finish {r:?}")),
        },
        Expected::Patch(h) => match &part.body {
            forge_core::model::PartBody::Patch(p) if &p.hash == h => {}
            _ => return fail(format!("expected patch {h:?}")),
        },
        Expected::StepStart => return fail("expected step-start".into()),
    }
    if part.is_open() {
        return fail("still open".into());
    }
    Ok(())
}

/// A `recover` implementation: `(projector, tenant, session, now) → report`. The suite
/// uses core's; [`run_with_recover`] injects another to prove the property catches a
/// wrong one.
pub type RecoverFn =
    for<'a> fn(
        &'a dyn forge_core::Projector,
        &'a forge_core::TenantId,
        Option<&'a forge_core::SessionId>,
        i64,
    )
        -> futures::future::BoxFuture<'a, forge_core::Result<forge_core::RecoverReport>>;

pub(crate) fn core_recover<'a>(
    projector: &'a dyn forge_core::Projector,
    tenant: &'a forge_core::TenantId,
    session: Option<&'a forge_core::SessionId>,
    now: i64,
) -> futures::future::BoxFuture<'a, forge_core::Result<forge_core::RecoverReport>> {
    Box::pin(recover(projector, tenant, session, now))
}

/// Runs the crash property (`durable_only`: the durable-bus one) with `recover` in
/// place of core's.
pub fn run_with_recover(
    factory: &dyn crate::BackendFactory,
    config: &crate::Config,
    durable_only: bool,
    recover: RecoverFn,
) -> crate::Outcome {
    let property = if durable_only {
        Property::CrashDurableBus
    } else {
        Property::CrashBoundary
    };
    crate::runner::with_ctx(factory, config, |ctx| {
        let sizes = Sizes::new(ctx.config.scale);
        crate::harness::run_scaled(ctx, property, case(durable_only), large_case(sizes), |c| {
            check_with(ctx, c, recover)
        })
        .outcome
    })
    .unwrap_or_else(|message| crate::Outcome::Failed {
        message,
        minimal: None,
        regression: None,
    })
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    check_with(ctx, case, core_recover)
}

fn check_with(ctx: &Ctx<'_>, case: &Case, recover: RecoverFn) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let counting = Arc::new(CountingStore::new(Arc::clone(&b.store)));
        let bus = b.bus_or_local();
        let durable = bus.capabilities().durable;
        let store: Arc<dyn Store> = counting.clone();
        let (projector, mut turn) = Turn::start_with(
            Arc::clone(&store),
            Arc::clone(&bus),
            tenant,
            case.persist_deltas,
        )
        .await?;
        let stale_events = if case.end == End::Crash && case.stale_open > 0 {
            let events = stale(&turn.session, case.stale_open);
            let batch = crate::harness::envs(&turn.tenant, 1, events.clone());
            let batch = crate::harness::under_claims(store.as_ref(), batch).await?;
            store
                .apply(&batch)
                .await
                .map_err(ctx_err("writing what an earlier crash left open"))?;
            events
        } else {
            Vec::new()
        };
        let events = case.stream.events();
        let cut = cut_of(case, &events);
        for (k, e) in events[..cut].iter().enumerate() {
            turn.driver
                .event(e.clone())
                .await
                .map_err(ctx_err(format!("event #{k} {}", e.kind())))?;
        }
        let fed = feed(&events[..cut]);
        let read = |label: &'static str| {
            let (store, turn) = (Arc::clone(&store), &turn);
            async move {
                stored_answer(store.as_ref(), &turn.tenant, &turn.session, &turn.assistant)
                    .await
                    .map_err(|e| format!("{label}: {e}"))
            }
        };
        let before = read("before the end").await?;
        let finalized_by_stream = fed.ended.is_some();
        let (tenant, session, assistant) = (
            turn.tenant.clone(),
            turn.session.clone(),
            turn.assistant.clone(),
        );
        let recovered = match case.end {
            End::Crash => {
                turn.crash(projector, &store, &bus, recover, "recover after the crash")
                    .await?;
                !finalized_by_stream
            }
            end => {
                let outcome = match end {
                    End::Finish => Ending::Finished,
                    End::Fail => {
                        Ending::Failed(MessageError::new(ErrorName::Api, "the model failed"))
                    }
                    _ => Ending::Aborted,
                };
                turn.driver
                    .finalize(outcome)
                    .await
                    .map_err(ctx_err("finalize"))?;
                false
            }
        };
        let after = stored_answer(store.as_ref(), &tenant, &session, &assistant).await?;
        let open = store
            .open_items(&tenant, Some(&session))
            .await
            .map_err(ctx_err("open_items"))?;
        if !open.is_empty() {
            return Err(format!(
                "something is still open after {:?}: {} message(s), parts {:?}",
                case.end,
                open.messages.len(),
                open.parts
                    .iter()
                    .map(forge_core::Part::kind)
                    .collect::<Vec<_>>()
            ));
        }
        let a = after
            .info
            .as_assistant()
            .ok_or("the answer lost its role")?;
        if a.time.completed.is_none() {
            return Err("the assistant message has no time.completed".into());
        }
        let want_error = expected_error(fed.ended.as_ref(), case.end);
        if a.error.as_ref().map(|e| &e.name) != want_error.as_ref().map(|e| &e.name) {
            return Err(format!(
                "message error {:?}, expected {:?}",
                a.error, want_error
            ));
        }
        if after.parts.len() != fed.parts.len() {
            return Err(format!(
                "{} parts stored, {} expected: stored kinds {:?}, expected {:?}",
                after.parts.len(),
                fed.parts.len(),
                after
                    .parts
                    .iter()
                    .map(forge_core::Part::kind)
                    .collect::<Vec<_>>(),
                fed.parts
            ));
        }
        // Recovered on a live-only bus, open text is what the store held: the streamed
        // text when every delta was stored, else the empty text of the block's start.
        let open_text = |streamed: &str| -> String {
            if recovered && !durable && !case.persist_deltas {
                String::new()
            } else {
                streamed.to_owned()
            }
        };
        for (i, (part, want)) in after.parts.iter().zip(&fed.parts).enumerate() {
            check_part(i, part, want, &open_text)?;
        }
        for p in before.parts.iter().filter(|p| !p.is_open()) {
            let now = after.parts.iter().find(|q| q.id == p.id);
            same(
                &format!("completed part {} changed by {:?}", p.id, case.end),
                &Some(p),
                &now,
            )?;
        }
        if !stale_events.is_empty() {
            check_stale(store.as_ref(), &tenant, &session, &stale_events).await?;
        }
        idempotent(store.as_ref(), &counting, &bus, &tenant, &session).await?;
        b.cleanup().await;
        Ok(())
    })
}

/// A second recover finds nothing, writes nothing and changes nothing.
async fn idempotent(
    store: &dyn Store,
    counting: &Arc<CountingStore>,
    bus: &Arc<dyn forge_core::Bus>,
    tenant: &forge_core::TenantId,
    session: &forge_core::SessionId,
) -> Result<(), String> {
    let snapshot: Vec<MessageWithParts> = read_all(store, tenant, session, 1000)
        .await
        .map_err(ctx_err("read_all"))?;
    let writes = counting.totals().commits;
    let again = DirectProjector::new(counting.clone(), Arc::clone(bus));
    let report = recover(&again, tenant, Some(session), T0 + 2_000_000)
        .await
        .map_err(ctx_err("recover (second run)"))?;
    if !report.is_empty() {
        return Err(format!(
            "recover is not idempotent: the second run did {report:?}"
        ));
    }
    if counting.totals().commits != writes {
        return Err("recover is not idempotent: the second run wrote".into());
    }
    let now = read_all(store, tenant, session, 1000)
        .await
        .map_err(ctx_err("read_all"))?;
    same("history changed by a second recover", &snapshot, &now)
}
