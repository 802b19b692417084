//! filter_compacted (contract property 3, docs/conformance.md): the view read through
//! the backend, page by page, equals the reference function over the full history, for
//! histories with successful, failed, nested and tailed compactions and any page size.
//!
//! A failure says which of the two "history lost?" answers applies: missing from the
//! store (the full history read back differs from what was written), or hidden by the
//! view (the history is intact but the view differs from the reference).
//!
//! Large cases put thousands of plain messages between a compaction and the end of the
//! history (and tails reaching back into them), written in batches of hundreds of
//! messages and read with pages around and above the cap: the boundary lies past any
//! page or limit an implementation might stop at.

use forge_core::read::filter_compacted_paged;
use forge_core::{
    read_all, CompactedView, MessageWithParts, SessionId, Store, SyncEvent, TenantId,
};
use futures::future::LocalBoxFuture;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, envs, same, CaseRun, Ctx};
use crate::reference::filter_compacted;
use crate::report::Outcome;
use crate::strategies::history::{build, turns, Turn};
use crate::strategies::model;
use crate::strategies::scaled::{large_page, Sizes};
use crate::{BackendFactory, Config, Property};

/// A case: a history, the page size the view reads with, and how many messages each
/// write batch carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The history.
    pub turns: Vec<Turn>,
    /// Page size of the view's reads (0: the default; above the cap is capped).
    pub page: u16,
    /// Messages per write batch (at least 1).
    pub batch: u8,
    /// Plain turns (user and assistant, alternating) inserted before `turns[bulk_at]`
    /// (large cases).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub bulk: u16,
    /// Where the plain turns go (clamped to the end).
    #[serde(default)]
    pub bulk_at: u16,
}

impl Case {
    /// The whole history's turns: `turns` with the `bulk` plain turns in place.
    pub fn all_turns(&self) -> Vec<Turn> {
        let at = usize::from(self.bulk_at).min(self.turns.len());
        let plain = (0..self.bulk).map(|i| {
            if i % 2 == 0 {
                Turn::User
            } else {
                Turn::Assistant
            }
        });
        let mut all = Vec::with_capacity(self.turns.len() + usize::from(self.bulk));
        all.extend_from_slice(&self.turns[..at]);
        all.extend(plain);
        all.extend_from_slice(&self.turns[at..]);
        all
    }
}

/// Any case: up to 40 messages.
pub fn case() -> impl Strategy<Value = Case> {
    (turns(40), 1u16..12, 1u8..8).prop_map(|(turns, page, batch)| Case {
        turns,
        page,
        batch,
        bulk: 0,
        bulk_at: 0,
    })
}

/// Large cases: a few generated turns, then (three times in four) a compaction with a
/// successful summary, possibly keeping a tail that reaches back past it, then thousands
/// of plain turns, then a few more generated turns. Written in batches of 50-255
/// messages, read with pages of 101-1,000, the cap or above it.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    let compaction = proptest::option::weighted(0.75, proptest::option::of(any::<u8>()));
    (
        turns(16),
        compaction,
        sizes.listing(),
        turns(8),
        large_page(),
        50u8..=255,
    )
        .prop_map(|(mut before, compaction, bulk, after, page, batch)| {
            if let Some(tail) = compaction {
                before.push(Turn::Compaction(tail));
                before.push(Turn::Summary {
                    answers: 0,
                    finish: true,
                    error: false,
                });
            }
            let bulk_at = before.len() as u16;
            before.extend(after);
            Case {
                turns: before,
                page,
                batch,
                bulk,
                bulk_at,
            }
        })
}

/// A `filter_compacted` implementation over a store: `(store, tenant, session, page
/// size) → view`. The suite uses core's; [`run_with_filter`] injects another to prove
/// the property catches a wrong one.
pub type FilterFn = for<'a> fn(
    &'a dyn Store,
    &'a TenantId,
    &'a SessionId,
    usize,
) -> LocalBoxFuture<'a, forge_core::Result<CompactedView>>;

/// Core's paged `filter_compacted`, the one backends are read through.
pub fn core_filter<'a>(
    store: &'a dyn Store,
    tenant: &'a TenantId,
    session: &'a SessionId,
    page: usize,
) -> LocalBoxFuture<'a, forge_core::Result<CompactedView>> {
    Box::pin(filter_compacted_paged(store, tenant, session, page))
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    run_with(ctx, core_filter)
}

fn run_with(ctx: &Ctx<'_>, filter: FilterFn) -> CaseRun {
    let sizes = Sizes::new(ctx.config.scale);
    crate::harness::run_scaled(
        ctx,
        Property::FilterCompacted,
        case(),
        large_case(sizes),
        |c| check_with(ctx, c, filter),
    )
}

/// Runs the property (with large cases when `config` asks for them) with `filter` in
/// place of core's `filter_compacted`.
pub fn run_with_filter(factory: &dyn BackendFactory, config: &Config, filter: FilterFn) -> Outcome {
    crate::runner::with_ctx(factory, config, |ctx| run_with(ctx, filter).outcome).unwrap_or_else(
        |message| Outcome::Failed {
            message,
            minimal: None,
            regression: None,
        },
    )
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    check_with(ctx, case, core_filter)
}

fn ids(v: &[MessageWithParts]) -> Vec<String> {
    v.iter().map(|m| m.info.id.to_string()).collect()
}

fn check_with(ctx: &Ctx<'_>, case: &Case, filter: FilterFn) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let session = SessionId::from("ses_view");
        let history = build(&session, &case.all_turns());
        ctx.stats.history(history.len());
        let mut seq = 1;
        b.store
            .apply(&envs(
                &tenant,
                seq,
                vec![SyncEvent::SessionUpdated {
                    info: model::session(&session, 0),
                }],
            ))
            .await
            .map_err(ctx_err("writing the session"))?;
        for chunk in history.chunks(usize::from(case.batch.max(1))) {
            let events: Vec<SyncEvent> = chunk
                .iter()
                .flat_map(|m| {
                    std::iter::once(SyncEvent::MessageUpdated {
                        info: m.info.clone(),
                    })
                    .chain(
                        m.parts
                            .iter()
                            .map(|p| SyncEvent::PartUpdated { part: p.clone() }),
                    )
                })
                .collect();
            let n = events.len() as u64;
            b.store
                .apply(&envs(&tenant, seq + 1, events))
                .await
                .map_err(ctx_err("writing the history"))?;
            seq += n;
        }
        let stored = read_all(b.store.as_ref(), &tenant, &session, 1000)
            .await
            .map_err(ctx_err("reading the full history"))?;
        if stored != history {
            return same(
                "missing from the store: the full history read back differs from what was \
                 written",
                &history,
                &stored,
            );
        }
        let expected = filter_compacted(&history);
        for page in [usize::from(case.page), forge_core::DEFAULT_PAGE_LIMIT] {
            let view = filter(b.store.as_ref(), &tenant, &session, page)
                .await
                .map_err(ctx_err("filter_compacted"))?;
            if view != expected {
                return Err(format!(
                    "hidden by the view: the history is intact but filter_compacted (page size \
                     {page}) differs from the reference:\n  expected ids: {:?} (boundary {:?}, \
                     tail {})\n  actual ids:   {:?} (boundary {:?}, tail {})",
                    ids(&expected.messages),
                    expected.boundary,
                    expected.tail,
                    ids(&view.messages),
                    view.boundary,
                    view.tail
                ));
            }
        }
        b.cleanup().await;
        Ok(())
    })
}
